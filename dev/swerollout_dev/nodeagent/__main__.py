"""`python -m swerollout_dev.nodeagent --kubeconfig K --root DIR` runs the node agent in the foreground.

SIGTERM/SIGINT stop the agent but leave its pods running, so a restarted agent
re-adopts them; ``--stop-pods-on-exit`` stops them too (what `dev down` wants).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import logging
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from swerollout.kube import AsyncKubeClient

from .agent import NodeAgent, reap_all
from .config import DEFAULT_RUNNER_IMAGES, NodeAgentConfig


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m swerollout_dev.nodeagent", description=__doc__)
    p.add_argument("--kubeconfig", required=True, help="credentials of the node agent")
    p.add_argument("--root", required=True, type=Path, help="directory for pod files (keep it across restarts)")
    p.add_argument("--node-name", default="local")
    p.add_argument("--isolation", choices=["auto", "bwrap", "none"], default="auto")
    p.add_argument("--no-taint", action="store_true", help="accept pods that do not tolerate swerollout.io/local")
    p.add_argument(
        "--runner-image",
        action="append",
        default=None,
        help=f"glob of images that map to this Python environment (default: {', '.join(DEFAULT_RUNNER_IMAGES)})",
    )
    p.add_argument(
        "--hide",
        action="append",
        type=Path,
        default=[],
        metavar="PATH",
        help="a host path no container may see (repeatable; the node root is always hidden)",
    )
    p.add_argument(
        "--runner-path",
        action="append",
        type=Path,
        default=[],
        metavar="PATH",
        help="a host path runner-image containers may also read, e.g. a tokenizer directory (repeatable)",
    )
    p.add_argument(
        "--network",
        choices=["auto", "isolated", "host"],
        default="auto",
        help="own network namespaces per pod (auto: when running as root)",
    )
    p.add_argument(
        "--egress",
        action="append",
        default=[],
        metavar="HOST:PORT",
        help="a host address pods' runner containers may reach (repeatable); nothing else is reachable",
    )
    p.add_argument("--stop-pods-on-exit", action="store_true")
    p.add_argument("--log-level", default="INFO")
    return p.parse_args(argv)


async def serve(args: argparse.Namespace) -> None:
    config = NodeAgentConfig(
        node_name=args.node_name,
        root_dir=args.root.resolve(),
        isolation=args.isolation,
        taint=not args.no_taint,
        runner_images=tuple(args.runner_image or DEFAULT_RUNNER_IMAGES),
        hidden_paths=tuple(p.resolve() for p in args.hide),
        runner_paths=tuple(p.resolve() for p in args.runner_path),
        network=args.network,
        egress=tuple(args.egress),
    )
    async with AsyncKubeClient.from_kubeconfig(args.kubeconfig) as kube:
        agent = NodeAgent(config, kube)
        task = asyncio.create_task(agent.run())
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, task.cancel)
        try:
            await task
        except asyncio.CancelledError:
            pass
        finally:
            if args.stop_pods_on_exit:
                await agent.stop_all_pods()
                reap_all(config.root_dir)


def _skip_failed_sniffio_import() -> None:
    """httpcore tries ``import sniffio`` before every async lock; without sniffio installed
    (anyio 4.12+ no longer needs it) each failed import searches all of sys.path, which
    profiled as the agent's largest CPU cost under 200 pods. Recording the module as
    absent makes the import fail at once; an installed sniffio is left alone."""
    if importlib.util.find_spec("sniffio") is None:
        sys.modules["sniffio"] = None  # type: ignore[assignment]


def main(argv: Sequence[str] | None = None) -> int:
    _skip_failed_sniffio_import()
    args = parse_args(argv)
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per API request drowns the agent's own log
    asyncio.run(serve(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
