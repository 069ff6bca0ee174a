"""`swerollout list | get | abort | resume | delete`, and what every trainer-client command shares:
the connection options, turning client errors into exit codes, and the tables.

Exit codes of the client commands: 0 ok; 1 the batch has failed rollouts (where that
matters: watch, results); 2 a usage or configuration error (no kubeconfig, CRD not
installed, wrong namespace, unknown batch or rollout, bad input file); 3 the cluster,
store or endpoint failed while working (retrying may help).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from swerollout.api.v1alpha1 import LABEL_BATCH, SWERolloutBatchSpec, batch_name
from swerollout.client import (
    ClientConfigError,
    ClientError,
    CrdNotInstalled,
    NamespaceNotFound,
    RolloutClient,
    RolloutNotFound,
    UnknownBatch,
)
from swerollout.client.aclient import INFERENCE_ADMIN_KEY_ENV
from swerollout.client.progress import member_state

EXIT_OK = 0
EXIT_BATCH_FAILURES = 1
EXIT_USAGE = 2
EXIT_RUNTIME = 3
EXIT_CODES_HELP = (
    "exit codes: 0 ok; 1 the batch has failed rollouts (watch, results); 2 usage/configuration error "
    "(no kubeconfig, CRD not installed, wrong namespace, unknown batch); 3 cluster/store/endpoint failure"
)
_USAGE_ERRORS = (ClientConfigError, CrdNotInstalled, NamespaceNotFound, UnknownBatch, RolloutNotFound)

Command = Callable[[argparse.Namespace, RolloutClient], int]


# --- shared by submit / watch / results ---------------------------------------------------


def add_connection_args(parser: argparse.ArgumentParser, *, results: bool = False) -> None:
    group = parser.add_argument_group("cluster")
    group.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config, in-cluster)")
    group.add_argument("--context", help="kubeconfig context (default: its current-context)")
    group.add_argument("-n", "--namespace", help="namespace of the rollouts (default: the context's)")
    if results:
        group.add_argument(
            "--store-url",
            default=os.environ.get("SWEROLLOUT_STORE_URL"),
            help="result store the operator writes to, e.g. file:///data/results or s3://bucket/prefix "
            "(default: $SWEROLLOUT_STORE_URL)",
        )
        group.add_argument(
            "--results-url",
            default=os.environ.get("SWEROLLOUT_RESULTS_URL"),
            help="the operator's ingest URL, which serves /v1/results to a Kubernetes bearer token "
            "(default: $SWEROLLOUT_RESULTS_URL)",
        )
        group.add_argument(
            "--results-token-file",
            help="file holding the Kubernetes bearer token for --results-url (default: the kubeconfig's token); "
            "a file, not an argument, so the token never shows in the process list",
        )
    parser.epilog = EXIT_CODES_HELP


# Environments that make their own kubeconfig (the dev tooling's `dev up`) say through this
# entry-point group where their result store is: each entry is a callable taking the
# kubeconfig's path and returning the store's URL, or None when the kubeconfig is not theirs.
STORE_LOCATOR_GROUP = "swerollout.store_locators"


def dev_store_url(args: argparse.Namespace) -> str | None:
    """Against `swerollout dev up` (its kubeconfig in use), the result store needs no flag:
    it is that environment's file store. Every command that reads results (`results`,
    `view --batch`) finds it here, through ``run_client_command``."""
    if getattr(args, "store_url", None) or getattr(args, "results_url", None):
        return None
    kubeconfig = args.kubeconfig or os.environ.get("KUBECONFIG", "").split(os.pathsep)[0]
    if not kubeconfig:
        return None
    for entry in entry_points(group=STORE_LOCATOR_GROUP):
        locate: Callable[[str], str | None] = entry.load()
        url = locate(kubeconfig)
        if url:
            return url
    return None


def run_client_command(command: Command) -> Callable[[argparse.Namespace], int]:
    """Wrap a command: connect, run, and map client errors to exit codes with one clear line."""

    def run(args: argparse.Namespace) -> int:
        err = Console(stderr=True)
        try:
            if hasattr(args, "store_url"):  # a command that reads results (add_connection_args(results=True))
                args.store_url = dev_store_url(args) or args.store_url
            options: dict[str, Any] = {}
            for key in ("store_url", "results_url"):
                if getattr(args, key, None):
                    options[key] = getattr(args, key)
            if getattr(args, "results_token_file", None):
                try:
                    options["results_token"] = Path(args.results_token_file).read_text().strip()
                except OSError as exc:
                    raise ClientConfigError(
                        f"cannot read --results-token-file {args.results_token_file}: {exc.strerror}"
                    ) from exc
            with RolloutClient.connect(
                args.kubeconfig, context=args.context, namespace=args.namespace, **options
            ) as client:
                return command(args, client)
        except _USAGE_ERRORS as exc:
            err.print(f"[bold red]error:[/] {exc}", highlight=False, soft_wrap=True)
            return EXIT_USAGE
        except ClientError as exc:
            err.print(f"[bold red]error:[/] {exc}", highlight=False, soft_wrap=True)
            return EXIT_RUNTIME

    return run


def age(timestamp: str | None) -> str:
    if not timestamp:
        return ""
    try:
        then = datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    except ValueError:
        return ""
    seconds = int((datetime.now(UTC) - then).total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{max(seconds, 0)}s"


def rollouts_table(objects: list[dict[str, Any]], batches: dict[str, SWERolloutBatchSpec]) -> Table:
    """One line per rollout; SUSPENDED BY says who suspends it (its own spec.suspend or
    its batch, from ``batches``: the batch objects' specs by name)."""
    table = Table(box=None, header_style="bold", pad_edge=False)
    for column in ("NAME", "BATCH", "PHASE", "TURNS", "TOKENS", "EXIT", "REWARD", "SUSPENDED BY", "AGE"):
        table.add_column(column, no_wrap=True)
    for obj in objects:
        meta = obj.get("metadata") or {}
        state = member_state(obj, batches)
        table.add_row(
            state.name,
            (meta.get("labels") or {}).get(LABEL_BATCH, ""),
            state.phase.value,
            str(state.turns),
            str(state.generated_tokens),
            state.exit_status or "",
            "" if state.reward is None else f"{state.reward:g}",
            state.suspended_by,
            age(meta.get("creationTimestamp")),
        )
    return table


# --- list / get / abort / resume ---------------------------------------------------------------


def _list(args: argparse.Namespace, client: RolloutClient) -> int:
    objects = client.members(args.batch) if args.batch else client.list_rollouts()
    out = Console()
    if not objects:
        out.print(f"No SWERollouts in namespace {client.namespace}.")
        return EXIT_OK
    out.print(rollouts_table(objects, client.batch_specs()))
    return EXIT_OK


def _get(args: argparse.Namespace, client: RolloutClient) -> int:
    obj = client.get_rollout(args.name)
    out = Console()
    if args.output == "json":
        print(json.dumps(obj, indent=2, sort_keys=True))
        return EXIT_OK
    status = obj.get("status") or {}
    spec = obj.get("spec") or {}
    owner = batch_name(obj["metadata"].get("labels"))
    batch = client.batch_spec(owner) if owner else None
    state = member_state(obj, {owner: batch} if owner and batch else None)
    table = Table(box=None, show_header=False, pad_edge=False)
    table.add_column(style="bold")
    table.add_column()
    rows = [
        ("Name", state.name),
        ("Namespace", obj["metadata"].get("namespace", "")),
        ("Batch", (obj["metadata"].get("labels") or {}).get(LABEL_BATCH, "")),
        ("Instance", (spec.get("instance") or {}).get("instanceId", "")),
        ("Endpoint", (spec.get("inference") or {}).get("endpoint", "")),
        ("Mode", spec.get("mode", "")),
        ("Suspended", f"yes, by {state.suspended_by}" if state.suspend else "no"),
        ("Phase", state.phase.value),
        ("Trainer status", state.status.value if state.phase.is_terminal else ""),
        ("Message", status.get("message", "")),
        ("Turns", str(state.turns)),
        ("Generated tokens", str(state.generated_tokens)),
        ("Exit status", state.exit_status or ""),
        ("Reward", "" if state.reward is None else f"{state.reward:g}"),
        ("Resolved", "" if state.resolved is None else str(state.resolved).lower()),
        ("Pod", (status.get("sandbox") or {}).get("podName", "")),
    ]
    for condition in status.get("conditions") or []:
        rows.append((f"Condition {condition.get('type')}", f"{condition.get('status')} ({condition.get('reason')})"))
    for key, value in rows:
        table.add_row(key, str(value))
    out.print(table)
    return EXIT_OK


def _suspend(value: bool) -> Command:
    verb = "abort" if value else "resume"

    def command(args: argparse.Namespace, client: RolloutClient) -> int:
        names = client.abort(args.batch, admin_key=admin_key(args)) if value else client.resume(args.batch)
        what = "asked to abort" if value else "resumed"
        if names:
            print(f"{len(names)} rollout(s) of batch {args.batch} {what}: {', '.join(names)}")
        else:
            state = "suspended" if value else "running (neither it nor its batch suspends it)"
            print(f"nothing to {verb}: every unfinished rollout of batch {args.batch} is already {state}")
        return EXIT_OK

    return command


def admin_key(args: argparse.Namespace) -> str | None:
    """The inference servers' admin key from --admin-key-file or --admin-key-env; None
    leaves the client's default ($SWEROLLOUT_INFERENCE_ADMIN_KEY). Never an argument
    value: argv is visible to every user of the machine (ps)."""
    if args.admin_key_file:
        try:
            key = Path(args.admin_key_file).read_text().strip()
        except OSError as exc:
            raise ClientConfigError(f"cannot read --admin-key-file {args.admin_key_file}: {exc.strerror}") from exc
        if not key:
            raise ClientConfigError(
                f"--admin-key-file {args.admin_key_file} is empty: write the server's admin key into it"
            )
        return key
    if args.admin_key_env:
        key = os.environ.get(args.admin_key_env, "").strip()
        if not key:
            raise ClientConfigError(
                f"--admin-key-env {args.admin_key_env}: that environment variable is not set or empty; export the "
                "server's admin key in it"
            )
        return key
    return None


def _delete(args: argparse.Namespace, client: RolloutClient) -> int:
    if not args.yes:
        count = len(client.list_rollouts(args.batch))
        question = (
            f"delete the {count} rollout(s) of batch {args.batch}, their pods and stored trajectories, and its "
            "SWERolloutBatch? [y/N] "
        )
        if not sys.stdin.isatty():
            raise ClientConfigError(
                f"deleting batch {args.batch} deletes {count} rollout(s) and their stored results: pass --yes to confirm"
            )
        if input(question).strip().lower() not in ("y", "yes"):
            print("nothing deleted")
            return EXIT_OK
    names = client.delete_batch(args.batch)
    print(f"deleted {len(names)} rollout(s) of batch {args.batch} and its SWERolloutBatch (if it had one)")
    return EXIT_OK


def _register_list(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--batch", help="only this batch (an unknown batch is an error)")
    add_connection_args(parser)
    parser.set_defaults(func=run_client_command(_list))


def _register_get(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", help="SWERollout name, e.g. step-7-0-3")
    parser.add_argument(
        "-o", "--output", choices=("table", "json"), default="table", help="table (default) or the raw object"
    )
    add_connection_args(parser)
    parser.set_defaults(func=run_client_command(_get))


def _register_suspend(value: bool) -> Callable[[argparse.ArgumentParser], None]:
    def register(parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--batch", required=True, help="batch whose unfinished rollouts to " + ("abort" if value else "resume")
        )
        if value:
            keys = parser.add_argument_group(
                "inference admin key",
                f"the SGLang servers' --admin-api-key for the batch's /abort_request (default: ${INFERENCE_ADMIN_KEY_ENV}); "
                "never taken as an argument value, which every user sees in ps",
            )
            source = keys.add_mutually_exclusive_group()
            source.add_argument("--admin-key-file", metavar="PATH", help="file holding the key")
            source.add_argument("--admin-key-env", metavar="NAME", help="environment variable holding the key")
        add_connection_args(parser)
        parser.set_defaults(func=run_client_command(_suspend(value)))

    return register


def _register_delete(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--batch", required=True, help="batch to delete: its rollouts, then its SWERolloutBatch")
    parser.add_argument("--yes", action="store_true", help="do not ask for confirmation (needed without a terminal)")
    add_connection_args(parser)
    parser.set_defaults(func=run_client_command(_delete))


_COMMANDS: dict[str, Callable[[argparse.ArgumentParser], None]] = {
    "list": _register_list,
    "get": _register_get,
    "abort": _register_suspend(True),
    "resume": _register_suspend(False),
    "delete": _register_delete,
}


def register(parser: argparse.ArgumentParser) -> None:
    """One module serves five commands; the parser's prog (``swerollout <command>``) says which."""
    command = parser.prog.split()[-1]
    if command not in _COMMANDS:
        print(f"swerollout.cli.rollouts serves {sorted(_COMMANDS)}, not {command!r}", file=sys.stderr)
        raise SystemExit(EXIT_USAGE)
    _COMMANDS[command](parser)
