"""`swerollout sandbox-bundle install --dest DIR`: what the rollout pod's init container runs."""

from __future__ import annotations

import argparse
from pathlib import Path

from swerollout import sandbox_bundle


def register(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="bundle_command", metavar="ACTION", required=True)
    install = sub.add_parser("install", help="copy the portable swerex bundle into DEST")
    install.add_argument("--dest", type=Path, required=True, help="target directory (the pod's emptyDir)")
    install.add_argument(
        "--source",
        type=Path,
        default=None,
        help="bundle directory (default: $SWEROLLOUT_BUNDLE_SRC or /opt/swerex-bundle)",
    )
    install.set_defaults(func=_install)


def _install(args: argparse.Namespace) -> int:
    launcher = sandbox_bundle.install(args.dest, args.source)
    print(f"installed {launcher}")
    return 0
