"""Entry point of the `swerollout` command.

Each subcommand lives in its own module that exposes ``register(subparsers)``;
the module is imported only when its command runs, so `swerollout --help` stays
fast and one broken optional dependency never breaks every command.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Mapping, Sequence
from importlib.metadata import entry_points

from swerollout.extras import MissingExtra

# command name -> (module, one-line help). A new command is one module and one line.
COMMANDS: dict[str, tuple[str, str]] = {
    "sandbox-bundle": (
        "swerollout.cli.sandbox_bundle",
        "install the portable swerex bundle (rollout pods' init container)",
    ),
    "submit": ("swerollout.cli.submit", "create a batch of rollouts from a SWE-bench JSONL file"),
    "list": ("swerollout.cli.rollouts", "list rollouts (of one batch with --batch)"),
    "get": ("swerollout.cli.rollouts", "show one rollout's spec summary, status and conditions"),
    "watch": ("swerollout.cli.watch", "follow a batch live until every rollout finished"),
    "abort": ("swerollout.cli.rollouts", "abort a batch's unfinished rollouts (keeps their pods for resume)"),
    "resume": ("swerollout.cli.rollouts", "resume a batch's aborted rollouts on their pods"),
    "delete": (
        "swerollout.cli.rollouts",
        "delete a batch: its rollouts with their pods and stored results, then its SWERolloutBatch",
    ),
    "results": ("swerollout.cli.results", "export a batch's trajectories and rewards (.parquet or .jsonl)"),
    "view": ("swerollout.cli.view", "see a batch and its trajectories in the browser (serves on 127.0.0.1)"),
}

# Other distributions add commands through this entry-point group: each entry names a
# mapping like COMMANDS (the dev tooling's `swerollout_dev.cli.registry:COMMANDS` brings
# `dev`, `cluster`, `policy-server`, `logs` and `tasks`). Only that small mapping is
# imported to list them; a command's module is imported when it runs.
PLUGIN_GROUP = "swerollout.commands"
# Commands a trainer's install lacks on purpose: the error says where they come from.
DEV_TOOLING_COMMANDS = ("dev", "cluster", "policy-server", "logs", "tasks")
DEV_TOOLING_HINT = (
    "`swerollout {command}` is dev tooling, which a plain `pip install swerollout` leaves out: "
    "install the `swerollout-dev` distribution from a checkout (`pip install -e ./dev`; `make venv` does)"
)


def all_commands() -> dict[str, tuple[str, str]]:
    """Our commands and every installed plugin's (a plugin never replaces one of ours)."""
    commands = dict(COMMANDS)
    for entry in entry_points(group=PLUGIN_GROUP):
        try:
            provided: Mapping[str, tuple[str, str]] = entry.load()
        except ImportError:
            # Installed, but its files are not here: a dev-mode pod's sandbox sees the
            # environment's metadata and our library's sources, not the dev tooling's.
            continue
        for name, spec in provided.items():
            commands.setdefault(name, spec)
    return commands


def build_parser(
    load: Sequence[str] | None = None, commands: Mapping[str, tuple[str, str]] | None = None
) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="swerollout",
        description="Agentic RL rollouts of software-engineering tasks on Kubernetes.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module_name, help_text) in (commands if commands is not None else all_commands()).items():
        if load is not None and name not in load:
            sub.add_parser(name, help=help_text, add_help=False)
            continue
        module = importlib.import_module(module_name)
        module.register(sub.add_parser(name, help=help_text, description=help_text))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    command = next((a for a in args_list if not a.startswith("-")), None)
    try:
        # Ctrl-C ends any command quietly with 130, also while it is still importing.
        # Our own commands need no plugin: the rollout pod's init container runs
        # `swerollout sandbox-bundle`, and must not depend on what else is installed.
        commands = dict(COMMANDS) if command in COMMANDS else all_commands()
        if command in DEV_TOOLING_COMMANDS and command not in commands:
            print(f"swerollout: {DEV_TOOLING_HINT.format(command=command)}", file=sys.stderr)
            return 2
        parser = build_parser(load=[command] if command in commands else [], commands=commands)
        args = parser.parse_args(args_list)
        if not getattr(args, "func", None):
            parser.print_help()
            return 2
        return int(args.func(args) or 0)
    except MissingExtra as exc:
        # An optional package a command needs (pyarrow for .parquet, the tokenizers for
        # `view`): one line naming the extra, from wherever the command imported it.
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
