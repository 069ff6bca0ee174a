"""`swerollout watch --batch NAME`: live progress of a batch until every rollout finished.

Shows rollouts per phase, how many wait for capacity and why (Queued: quota, no node,
Kueue's admission), how many unfinished ones are suspended (by their own flag or
their batch's), generated tokens and tokens per second, rewards and
resolved counts. The final line counts the finished rollouts per trainer status
(completed, truncated, failed), the same statuses `results` and the client's records
give. Exits 0 when none failed, 1 when some failed.
"""

from __future__ import annotations

import argparse
import time

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table

from swerollout.api.v1alpha1 import Phase
from swerollout.cli.rollouts import EXIT_BATCH_FAILURES, EXIT_OK, add_connection_args, run_client_command
from swerollout.client import BatchProgress, RolloutClient, TrainerStatus


class RateMeter:
    """Generated tokens per second since the watch started."""

    def __init__(self) -> None:
        self._start: tuple[float, int] | None = None

    def rate(self, tokens: int) -> float:
        now = time.monotonic()
        if self._start is None:
            self._start = (now, tokens)
            return 0.0
        seconds = now - self._start[0]
        return (tokens - self._start[1]) / seconds if seconds > 0 else 0.0


def summary_table(state: BatchProgress, tokens_per_second: float) -> Table:
    table = Table(title=f"batch {state.batch}", box=None, header_style="bold")
    for phase in Phase:
        table.add_column(phase.value, justify="right")
    table.add_column("queued for", justify="left")
    table.add_column("suspended", justify="right")
    table.add_column("tokens", justify="right")
    table.add_column("tok/s", justify="right")
    table.add_column("mean reward", justify="right")
    table.add_column("resolved", justify="right")
    table.add_column("retried", justify="right")
    phases = state.phases
    rewards = state.rewards
    table.add_row(
        *(str(phases.get(p.value, 0)) for p in Phase),
        ", ".join(f"{n} {why}" for why, n in sorted(state.queued_by_reason.items())) or "-",
        str(state.suspended),
        str(state.generated_tokens),
        f"{tokens_per_second:.1f}",
        f"{sum(rewards) / len(rewards):.3f}" if rewards else "-",
        f"{state.resolved}/{state.total}",
        # Rollouts that needed a retry, and why (a lost pod, an infrastructure exit).
        f"{state.retried} " + ", ".join(f"{k} {v}" for k, v in sorted(state.retry_reasons.items()))
        if state.retried
        else "0",
    )
    return table


def members_table(state: BatchProgress) -> Table:
    table = Table(box=None, header_style="bold", pad_edge=False)
    for column in ("NAME", "PHASE", "TURNS", "TOKENS", "EXIT", "REWARD", "SUSPENDED BY"):
        table.add_column(column, no_wrap=True)
    for m in state.members:
        reward = "" if m.reward is None else f"{m.reward:g}"
        suspended = m.suspended_by if not m.phase.is_terminal else ""
        phase = f"{m.phase.value} ({m.queue_reason})" if m.queue_reason else m.phase.value
        table.add_row(m.name, phase, str(m.turns), str(m.generated_tokens), m.exit_status or "", reward, suspended)
    return table


def _watch(args: argparse.Namespace, client: RolloutClient) -> int:
    console = Console()
    meter = RateMeter()
    with Live(console=console, auto_refresh=False, transient=False) as live:

        def show(state: BatchProgress) -> None:
            parts: list[Table] = [summary_table(state, meter.rate(state.generated_tokens))]
            if args.rollouts:
                parts.append(members_table(state))
            live.update(Group(*parts), refresh=True)

        final = client.wait(args.batch, progress=show, timeout=args.timeout)
    counts = final.statuses
    verdict = ", ".join(f"{counts[s.value]} {s.value}" for s in TrainerStatus if counts.get(s.value)) or "none"
    for member in final.members:
        if member.status is TrainerStatus.FAILED:
            console.print(
                f"  failed: {member.name}: {member.message or member.exit_status or 'no message'}", highlight=False
            )
    console.print(f"batch {args.batch}: {final.finished}/{final.total} finished, {verdict}", highlight=False)
    return EXIT_OK if final.failed == 0 else EXIT_BATCH_FAILURES


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--batch", required=True, help="batch to follow")
    parser.add_argument("--timeout", type=float, help="give up after this many seconds (exit 3)")
    parser.add_argument("--rollouts", action="store_true", help="also show one line per rollout")
    add_connection_args(parser)
    parser.set_defaults(func=run_client_command(_watch))
