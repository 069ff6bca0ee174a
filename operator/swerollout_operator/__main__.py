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


async def run(settings: OperatorSettings, kubeconfig: Path | None) -> None:
    if kubeconfig is not None:
        # kopf's own login reads KUBECONFIG.
        os.environ["KUBECONFIG"] = str(kubeconfig)
    memo = kopf.Memo(runtime=OperatorRuntime(settings, kubeconfig=kubeconfig))
    # kopf handles SIGTERM/SIGINT itself: it stops the watches, runs the cleanup
    # handlers (which stop our servers) and returns.
    await kopf.operator(
        standalone=True,
        clusterwide=settings.cluster_wide,
        namespaces=settings.namespaces,
        memo=memo,
    )


def main(argv: list[str] | None = None) -> int:
    settings, kubeconfig, log_level = parse_args(argv)
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    asyncio.run(run(settings, kubeconfig))
    return 0


if __name__ == "__main__":
    sys.exit(main())
