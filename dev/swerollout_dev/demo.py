"""`make demo`: the whole flow on one machine, no cluster, no Docker.

1. materialize the bundled tasks as git repositories;
2. `swerollout dev up` with the oracle policy server (control plane, chart,
   operator under the chart's ServiceAccount, node agent), plus a null policy server;
3. submit one batch: every task x a group of 2, member 0 on the oracle policy and
   member 1 on the null policy (a GRPO-style group with one good and one bad answer);
4. show live progress, then a results table and the resolved rate, and write the
   results file;
5. stop everything (`swerollout dev down`) and say where the time went: with
   ``--setup-times`` (``make demo`` passes what hack/demo.sh timed: venv, kube binaries,
   apt), from a fresh clone on.
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.table import Table

from swerollout.cli.results import write_jsonl
from swerollout.client import AsyncRolloutClient
from swerollout.client.progress import BatchProgress
from swerollout_dev.stack.paths import DevPaths
from swerollout_dev.stack.state import DevState
from swerollout_dev.tasks import load_instances, materialize_tasks

# Logs (CI, `make demo | tee`) get a table wide enough for instance ids.
console = Console() if sys.stdout.isatty() else Console(width=150)
BATCH = "demo"


class Timeline:
    def __init__(self) -> None:
        self.steps: list[tuple[str, float]] = []

    @contextmanager
    def step(self, name: str) -> Iterator[None]:
        console.print(f"[bold]==>[/] {name}")
        start = time.monotonic()
        try:
            yield
        finally:
            self.steps.append((name, time.monotonic() - start))

    def add_setup_times(self, path: Path) -> None:
        """The setup steps hack/demo.sh timed before this process began (``name<TAB>milliseconds``)."""
        for line in path.read_text(encoding="utf-8").splitlines():
            name, _, millis = line.rpartition("\t")
            if name and millis.isdigit():
                self.steps.append((name, int(millis) / 1000))

    def table(self) -> Table:
        total = sum(s for _, s in self.steps)
        table = Table(title="where the time went")
        table.add_column("step")
        table.add_column("seconds", justify="right")
        table.add_column("share", justify="right")
        for name, seconds in self.steps:
            table.add_row(name, f"{seconds:.1f}", f"{seconds / total:.0%}" if total else "-")
        minutes, rest = divmod(total, 60)
        table.add_row("[bold]total[/]", f"[bold]{total:.1f}[/]", f"[bold]{minutes:.0f} min {rest:02.0f} s[/]")
        return table


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "swerollout.cli.main", *args], capture_output=True, text=True)


def _progress_table(state: BatchProgress, started: float) -> Table:
    table = Table(
        title=f"batch {state.batch}: {state.finished}/{state.total} finished, {time.monotonic() - started:.0f}s"
    )
    for phase in sorted(state.phases):
        table.add_column(phase, justify="right")
    table.add_row(*[str(c) for _, c in sorted(state.phases.items())])
    return table


async def _run_batch(
    kubeconfig: Path,
    store: Path,
    oracle: str,
    null: str,
    tasks_file: Path,
    out: Path,
    admin_key_ref: dict[str, str] | None = None,
) -> float:
    instances = load_instances(tasks_file)
    client = AsyncRolloutClient.connect(kubeconfig, namespace="default", store_url=f"file://{store}")
    async with client:
        inference: dict[str, Any] = {"endpoint": oracle, "tokenizer": "qwen-2.5"}
        if admin_key_ref:
            # dev up serves the oracle with an admin key: the runners abort with it.
            inference["adminKeySecretRef"] = admin_key_ref
        await client.submit_batch(
            instances,
            2,
            batch=BATCH,
            inference=inference,
            member_inference=[inference, {"endpoint": null, "tokenizer": "qwen-2.5"}],
            sandbox={"startupTimeoutSeconds": 300},
        )
        started = time.monotonic()
        with Live(console=console, refresh_per_second=2) as live:
            await client.wait(BATCH, progress=lambda s: live.update(_progress_table(s, started)), timeout=900)
        records = sorted(await client.results(BATCH, reports=True), key=lambda r: (r.sample, r.member))

    table = Table(title="results")
    for col in ("task", "member", "policy", "phase", "exit", "turns", "tokens", "reward"):
        table.add_column(col, justify="right" if col in ("member", "turns", "tokens", "reward") else "left")
    for r in records:
        policy = "oracle" if r.member == 0 else "null"
        tokens = int(len(r.prompt_ids) + len(r.response_ids))
        table.add_row(
            r.instance_id,
            str(r.member),
            policy,
            r.phase.value,
            r.exit_status or "-",
            str(r.turns),
            str(tokens),
            "-" if r.reward is None else f"{r.reward:.1f}",
        )
    # What `swerollout results` writes (tokens, mask, logprobs, versions, eval reports):
    # `swerollout view --from` reads it.
    write_jsonl(records, out)
    console.print(table)
    resolved = sum(1 for r in records if r.resolved)
    rate = resolved / len(records) if records else 0.0
    console.print(
        f"resolved {resolved}/{len(records)} = {rate:.0%}  (oracle members should all resolve, null members none)"
    )
    console.print(f"results written to {out}; see them in the browser: swerollout view --from {out}")
    return rate


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m swerollout_dev.demo", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--workdir", type=Path, default=Path(".swerollout") / "demo")
    parser.add_argument("--out", type=Path, default=None, help="results file (default: WORKDIR/results.jsonl)")
    parser.add_argument("--keep", action="store_true", help="leave the dev environment running afterwards")
    parser.add_argument(
        "--setup-times", type=Path, default=None, help="setup steps timed before the demo (hack/demo.sh writes it)"
    )
    args = parser.parse_args(argv)
    workdir = args.workdir.resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    out = (args.out or workdir / "results.jsonl").resolve()
    paths = DevPaths.under(workdir)
    timeline = Timeline()
    if args.setup_times is not None and args.setup_times.is_file():
        timeline.add_setup_times(args.setup_times)
    from swerollout_dev.policy_server.launch import launch

    up = False
    try:
        with timeline.step("materialize the bundled tasks"):
            tasks = workdir / "tasks"
            materialize_tasks(tasks)
        with timeline.step("swerollout dev up (control plane, chart, operator, node agent, oracle policy)"):
            result = _cli(
                "dev", "up", "--policy", "oracle", "--tasks", str(tasks / "instances.jsonl"), "--workdir", str(workdir)
            )
            console.print(result.stdout.rstrip())
            if result.returncode != 0:
                console.print(f"[red]dev up failed:[/]\n{result.stderr}")
                return 1
            up = True
            state = DevState.read(paths.state)
            assert state is not None
        with timeline.step("start the null policy server"):
            null_server = launch("null", subprocess=True, tokenizer="qwen-2.5")
        try:
            with timeline.step("run the batch (every task x 2 members) and grade it"):
                rate = asyncio.run(
                    _run_batch(
                        paths.kubeconfig,
                        paths.root / "store",
                        state.sglang_url,
                        null_server.url,
                        tasks / "instances.jsonl",
                        out,
                        state.admin_key_secret_ref(),
                    )
                )
        finally:
            null_server.stop()
    finally:
        if up and not args.keep:
            with timeline.step("swerollout dev down"):
                down = _cli("dev", "down", "--workdir", str(workdir))
                console.print(down.stdout.rstrip() or down.stderr.rstrip())
        console.print(timeline.table())
    if args.keep:
        console.print(f"still running; stop it with: swerollout dev down --workdir {workdir}")
    return 0 if abs(rate - 0.5) < 1e-9 else 1


if __name__ == "__main__":
    sys.exit(main())
