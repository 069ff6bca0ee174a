"""`swerollout logs POD [-c CONTAINER] [-n NS] [-f]`: container output in dev mode.

The API server cannot proxy logs without a kubelet API, so this reads the files
the local node agent writes (see docs/dev-mode.md).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from swerollout.dev.stack.paths import DevPaths
from swerollout.dev.nodeagent.layout import container_logs, find_pod_dirs


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("pod", help="pod name")
    parser.add_argument("-c", "--container", help="container name (needed when the pod has several)")
    parser.add_argument("-n", "--namespace", default="default")
    parser.add_argument("-f", "--follow", action="store_true", help="keep printing new output until the container ends")
    parser.add_argument("-p", "--previous", action="store_true", help="output of the previous run of a restarted container")
    parser.add_argument("--workdir", help="directory holding .swerollout/dev (default: the current directory)")
    parser.add_argument("--node-root", type=Path, help="node agent root directory (default: the dev environment's)")
    parser.set_defaults(func=run)


def _containers(pod_dir: Path) -> list[str]:
    try:
        state = json.loads((pod_dir / "state.json").read_text())
        return list(state.get("containers", {}))
    except (OSError, ValueError):
        d = pod_dir / "containers"
        return sorted(p.name for p in d.iterdir()) if d.is_dir() else []


def run(args: argparse.Namespace) -> int:
    root = args.node_root or DevPaths.under(args.workdir).node
    dirs = find_pod_dirs(root, args.namespace, args.pod)
    if not dirs:
        print(f"error: no logs of pod {args.namespace}/{args.pod} under {root} "
              "(is it bound to the local node agent? pass --node-root or --workdir)", file=sys.stderr)
        return 1
    pod_dir = dirs[0]
    name = args.container
    if name is None:
        names = _containers(pod_dir)
        if len(names) != 1:
            print(f"error: pod {args.pod} has containers {', '.join(names)}; choose one with -c", file=sys.stderr)
            return 1
        name = names[0]
    files = container_logs(pod_dir, name)
    if args.previous:
        files = files[:-1]
    if not files:
        what = "a previous run" if args.previous else "output yet"
        print(f"error: container {name!r} of pod {args.pod} has no {what}", file=sys.stderr)
        return 1
    out = sys.stdout.buffer
    with open(files[-1], "rb") as f:
        out.write(f.read())
        out.flush()
        if not args.follow:
            return 0
        running = pod_dir / "containers" / name / "process.json"
        while True:
            chunk = f.read()
            if chunk:
                out.write(chunk)
                out.flush()
                continue
            if not running.exists() or not pod_dir.exists():
                return 0
            time.sleep(0.2)
