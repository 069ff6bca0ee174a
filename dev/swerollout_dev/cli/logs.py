"""`swerollout logs POD [-c CONTAINER] [-n NS] [-f]`: container output in dev mode.

The API server cannot proxy logs without a kubelet API, so this reads the files
the local node agent writes (see docs/dev-mode.md). Once the pod is gone (the
operator deletes a rollout's pods when it ends), the runner's own log is read from
the result store instead: every runner uploads it with its final report and the
rollout's `status.logs` points at it. POD may be the pod (`NAME-a1`, `NAME-eval1`)
or the rollout itself.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Any

from swerollout_dev.nodeagent.layout import container_logs, find_pod_dirs
from swerollout_dev.stack.paths import DevPaths


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("pod", help="pod name")
    parser.add_argument("-c", "--container", help="container name (needed when the pod has several)")
    parser.add_argument("-n", "--namespace", default="default")
    parser.add_argument("-f", "--follow", action="store_true", help="keep printing new output until the container ends")
    parser.add_argument(
        "-p", "--previous", action="store_true", help="output of the previous run of a restarted container"
    )
    parser.add_argument("--workdir", help="directory holding .swerollout/dev (default: the current directory)")
    parser.add_argument("--node-root", type=Path, help="node agent root directory (default: the dev environment's)")
    parser.add_argument(
        "--kubeconfig", help="for a finished rollout: kubeconfig (default: the dev environment's, else $KUBECONFIG)"
    )
    parser.add_argument(
        "--store-url",
        default=os.environ.get("SWEROLLOUT_STORE_URL"),
        help="for a finished rollout: the result store (default: the dev environment's)",
    )
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
        return _stored(args, root)
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


_POD_SUFFIX = re.compile(r"^(?P<rollout>.+)-(?P<kind>a|eval)\d+$")


class _Unavailable(Exception):
    pass


def _stored(args: argparse.Namespace, root: Path) -> int:
    """The runner log a finished rollout kept in the result store."""
    if args.container not in (None, "runner"):
        print(f"error: pod {args.pod} is gone and only its runner's log is kept; use -c runner", file=sys.stderr)
        return 1
    match = _POD_SUFFIX.match(args.pod)
    candidates = [(args.pod, "runner")]
    if match:
        candidates.insert(0, (match["rollout"], "eval" if match["kind"] == "eval" else "runner"))
    try:
        data = _read_stored(args, candidates)
    except _Unavailable as exc:
        print(f"error: no running pod {args.namespace}/{args.pod} under {root}, and {exc}", file=sys.stderr)
        return 1
    sys.stdout.buffer.write(data)
    sys.stdout.buffer.flush()
    return 0


def _read_stored(args: argparse.Namespace, candidates: list[tuple[str, str]]) -> bytes:
    from swerollout.kube import SWEROLLOUTS, KubeClient, KubeError, NotFound
    from swerollout.store import StoreError, open_store

    paths = DevPaths.under(args.workdir)
    kubeconfig = args.kubeconfig or (str(paths.kubeconfig) if paths.kubeconfig.is_file() else None)
    kubeconfig = kubeconfig or (os.environ.get("KUBECONFIG") or "").split(os.pathsep)[0] or None
    if kubeconfig is None:
        raise _Unavailable("no kubeconfig to read the rollout with: pass --kubeconfig or --workdir")
    ref: dict[str, Any] | None = None
    try:
        with KubeClient.from_kubeconfig(kubeconfig) as kube:
            for rollout, role in candidates:
                try:
                    obj = kube.get(SWEROLLOUTS, rollout, args.namespace)
                except NotFound:
                    continue
                ref = ((obj.get("status") or {}).get("logs") or {}).get(role)
                if ref is None:
                    raise _Unavailable(f"rollout {rollout} has no stored {role} log yet (status.logs.{role})")
                break
    except KubeError as exc:
        raise _Unavailable(f"reading the rollout failed: {exc}") from exc
    if ref is None:
        raise _Unavailable(f"no SWERollout named {candidates[0][0]!r} in namespace {args.namespace} (-n)")
    store_url = args.store_url or paths.store.as_uri()
    try:
        return asyncio.run(open_store(store_url).get(ref["ref"], expect_sha256=ref["sha256"]))
    except StoreError as exc:
        raise _Unavailable(f"reading the stored log from {store_url} failed: {exc} (pass --store-url)") from exc
