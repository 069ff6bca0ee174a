"""`python -m swerollout_operator`: run the operator.

In a cluster it uses its ServiceAccount; elsewhere pass --kubeconfig (or set
KUBECONFIG). It watches only the namespaces it is given (--namespaces) unless
--cluster-wide. Every other flag is a field of OperatorSettings (flags.py).
"""

from __future__ import annotations

# First, and kept apart from the sorted block below (an import sorter put `import kopf`
# above it, and kopf imported the kubernetes package again): kopf without kubernetes.
from . import lean_imports  # noqa: F401

# isort: split
import argparse
import asyncio
import logging
import os
import sys
from pathlib import Path

import kopf

from . import handlers  # noqa: F401 - registers the kopf handlers
from .flags import add_settings_flags, settings_from_args
from .runtime import OperatorRuntime
from .settings import OperatorSettings


def parse_args(argv: list[str] | None = None) -> tuple[OperatorSettings, Path | None, str]:
    p = argparse.ArgumentParser(prog="swerollout_operator", description=__doc__)
    p.add_argument(
        "--kubeconfig",
        type=Path,
        default=os.environ.get("KUBECONFIG") or None,
        help="kubeconfig to use outside a cluster (default: $KUBECONFIG)",
    )
    p.add_argument("--log-level", default="INFO", help="Python logging level (default: INFO)")
    add_settings_flags(p)
    args = p.parse_args(argv)
    return settings_from_args(p, args), args.kubeconfig, args.log_level


async def _restart_on_new_shards(runtime: OperatorRuntime, started_with: str | None, stop: asyncio.Event) -> None:
    while True:
        await runtime.watches_changed.wait()
        runtime.watches_changed.clear()
        if runtime.watch_selector() != started_with:
            stop.set()
            return


async def run(settings: OperatorSettings, kubeconfig: Path | None) -> None:
    if kubeconfig is not None:
        # kopf's own login reads KUBECONFIG.
        os.environ["KUBECONFIG"] = str(kubeconfig)
    runtime = OperatorRuntime(settings, kubeconfig=kubeconfig)
    memo = kopf.Memo(runtime=runtime)
    await runtime.start()
    sweeper = asyncio.create_task(handlers.sweep(runtime))
    try:
        while True:
            # kopf handles SIGTERM/SIGINT itself: it stops the watches and returns. It is
            # also stopped here when this replica's shards change, and started again with
            # watches for the new ones (their listing gives every new rollout a pass).
            stop = asyncio.Event()
            runtime.watches_changed.clear()
            restart = asyncio.create_task(_restart_on_new_shards(runtime, runtime.watch_selector(), stop))
            try:
                await kopf.operator(
                    standalone=True,
                    clusterwide=settings.cluster_wide,
                    namespaces=settings.namespaces,
                    memo=memo,
                    stop_flag=stop,
                )
            finally:
                restart.cancel()
            if not stop.is_set():
                return
    finally:
        sweeper.cancel()
        await asyncio.gather(sweeper, return_exceptions=True)
        await runtime.stop()


def main(argv: list[str] | None = None) -> int:
    settings, kubeconfig, log_level = parse_args(argv)
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    asyncio.run(run(settings, kubeconfig))
    return 0


if __name__ == "__main__":
    sys.exit(main())
