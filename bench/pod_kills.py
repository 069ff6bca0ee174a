"""Pods killed at random moments mid-run: does every GRPO group still finish whole, and how
much work is done twice?

One batch of GROUPS groups x GROUP_SIZE oracle rollouts on the node agent (`dev up`, no
root). The oracle is slowed per token and runs LEDGER one-command turns before its fix, so
each rollout spends a while Running over several turns. KILL_FRACTION of the rollouts
(at least one), chosen at random, each get their rollout pod deleted at a random moment
mid-run: once the policy has received its request for a random turn (2 to the one before
the submit, so after a checkpoint), after a random delay more (up to MAX_EXTRA_DELAY: during
that turn's generation or its command). The operator replays each from its last per-turn
checkpoint into a fresh pod.

Measured in the run:

- groups complete: the fraction of groups whose every member Succeeded with a reward
  (target 100 %), and what the client's BatchProgress says (retried, why);
- extra work: tokens sampled / tokens kept - 1, where sampled is every /generate's
  completion_tokens as the policy answered it (a recording proxy in front of the oracle,
  which reads each answer whole, so a killed pod's request in flight counts in full: an
  upper bound, a real server may stop sampling when its caller goes) and kept is the
  trained tokens (loss mask 1) of the final trajectories (target < 5 %). The baseline,
  measured in the same batch: the same figure over the rollouts that were never killed.

Beside it, the checkpoint bench's figures (bench.checkpoint: visible cost per turn and
bytes per checkpoint), which are what buys this.

    make bench BENCH=podkill
    python -m bench podkill --groups 8 --group-size 8 --kill 0.05 --seed 1 --json
"""

from __future__ import annotations

import argparse
import json
import math
import random
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.realnode_steps import GenerateRecorder, dev_stack_behind_recorder
from swerollout.api.v1alpha1 import LABEL_BATCH, LABEL_SAMPLE
from swerollout.client import RolloutClient
from swerollout.client.progress import BatchProgress
from swerollout.kube import PODS, SWEROLLOUTS, KubeClient, NotFound
from swerollout.wire.trajectory import Trajectory

NAMESPACE = "default"
BATCH = "bench-podkill"
GROUPS = 8
GROUP_SIZE = 8
KILL_FRACTION = 0.05
LEDGER = 3
TURNS = LEDGER + 2
"""The oracle's turns: LEDGER commands, the fix, the submit."""
DELAY_PER_TOKEN = 0.03
MAX_EXTRA_DELAY = 0.8
"""A kill lands up to this many seconds after its rollout's chosen turn's /generate arrived
(a ledger turn samples for about as long): during the generation or the command after it."""
POLL = 0.1
TIMEOUT = 5400.0
SMALL_SANDBOX = {
    # Many pods on the node agent's one node: a small request lets the whole batch run at once.
    "startupTimeoutSeconds": 1800,
    "resources": {"requests": {"cpu": "50m", "memory": "128Mi"}},
}


@dataclass
class Kill:
    name: str
    turn: int
    """The kill lands once the rollout's request for this turn (1-based) reached the policy."""
    extra_delay: float
    pod: str = ""
    at_seconds: float = 0.0


@dataclass
class Outcome:
    objects: dict[str, dict[str, Any]]
    kills: list[Kill]
    wall_seconds: float
    sampled: dict[str, int] = field(default_factory=dict)
    """Tokens sampled per rollout (every answered /generate of its uid)."""
    kept: dict[str, int] = field(default_factory=dict)
    """Trained tokens per rollout (read before the batch is deleted: its objects go with it)."""


def _statuses(kube: KubeClient) -> dict[str, dict[str, Any]]:
    items = kube.list(SWEROLLOUTS, NAMESPACE, label_selector=f"{LABEL_BATCH}={BATCH}")["items"]
    return {o["metadata"]["name"]: o for o in items}


def _maybe_kill(kube: KubeClient, recorder: GenerateRecorder, kill: Kill, obj: dict[str, Any], go: float) -> None:
    """Delete the rollout's pod once its chosen turn's /generate arrived, plus the delay: the
    status is too coarse for this (progress is written every few seconds, a turn is shorter),
    the recorder sees each request as it comes."""
    status = obj.get("status") or {}
    uid = obj["metadata"]["uid"]
    arrivals = sorted(t for rid, t in list(recorder.first.items()) if rid.startswith(f"{uid}-t"))
    pod = (status.get("sandbox") or {}).get("podName") or ""
    if len(arrivals) < kill.turn or not pod or int(status.get("attempts") or 1) != 1:
        return
    if time.monotonic() - arrivals[kill.turn - 1] < kill.extra_delay:
        return
    try:
        kube.delete(PODS, pod, NAMESPACE)
    except NotFound:
        return
    kill.pod, kill.at_seconds = pod, time.monotonic() - go


def run_batch(
    kubeconfig: Path,
    recorder: GenerateRecorder,
    tasks: list[Any],
    groups: int,
    group_size: int,
    fraction: float,
    seed: int,
) -> Outcome:
    rng = random.Random(seed)
    samples = [tasks[i % len(tasks)] for i in range(groups)]
    with (
        RolloutClient.connect(kubeconfig, namespace=NAMESPACE) as client,
        KubeClient.from_kubeconfig(kubeconfig) as kube,
    ):
        go = time.monotonic()
        names = client.submit_batch(
            samples,
            group_size,
            batch=BATCH,
            inference={"endpoint": recorder.url, "tokenizer": "qwen-2.5"},
            sandbox=SMALL_SANDBOX,
        )
        victims = rng.sample(names, max(1, round(fraction * len(names))))
        # Turns 2..TURNS-1: after a checkpoint, before the submit (a kill after it is no longer mid-run).
        kills = [Kill(n, rng.randint(2, TURNS - 1), rng.uniform(0.0, MAX_EXTRA_DELAY)) for n in sorted(victims)]
        deadline = go + TIMEOUT
        while True:
            objects = _statuses(kube)
            for kill in kills:
                if not kill.pod and kill.name in objects:
                    _maybe_kill(kube, recorder, kill, objects[kill.name], go)
            phases = {n: (o.get("status") or {}).get("phase") for n, o in objects.items()}
            if len(objects) == len(names) and all(p in ("Succeeded", "Failed") for p in phases.values()):
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"batch {BATCH} not done after {TIMEOUT:.0f}s: {phases}")
            time.sleep(POLL)
        wall = time.monotonic() - go
        uids = {n: o["metadata"]["uid"] for n, o in objects.items()}
        sampled = {
            n: sum(t for rid, t in list(recorder.sampled.items()) if rid.startswith(uid)) for n, uid in uids.items()
        }
        kept = {n: _kept(o.get("status") or {}) for n, o in objects.items()}
        outcome = Outcome(objects=objects, kills=kills, wall_seconds=wall, sampled=sampled, kept=kept)
        client.delete_batch(BATCH)
    return outcome


def _kept(status: dict[str, Any]) -> int:
    """The trained tokens (loss mask 1) of a finished rollout's trajectory in the dev store."""
    ref = ((status.get("result") or {}).get("trajectory") or {}).get("ref", "")
    if not ref.startswith("file://"):
        return 0
    return sum(Trajectory.from_bytes(Path(ref[len("file://") :]).read_bytes()).loss_mask)


def figures(outcome: Outcome, groups: int, group_size: int) -> dict[str, Any]:
    statuses = {n: o.get("status") or {} for n, o in outcome.objects.items()}
    by_group: dict[str, list[str]] = {}
    for name, obj in outcome.objects.items():
        by_group.setdefault((obj["metadata"].get("labels") or {}).get(LABEL_SAMPLE, name), []).append(name)
    whole = [
        g
        for g, members in by_group.items()
        if all(
            statuses[m].get("phase") == "Succeeded" and (statuses[m].get("reward") or {}).get("value") is not None
            for m in members
        )
    ]
    progress = BatchProgress.from_objects(BATCH, list(outcome.objects.values()))
    kept = outcome.kept
    killed = {k.name for k in outcome.kills if k.pod}

    def extra(names: set[str]) -> float:
        keep = sum(kept[n] for n in names)
        return (sum(outcome.sampled[n] for n in names) - keep) / keep if keep else math.nan

    return {
        "rollouts": len(outcome.objects),
        "groups": groups,
        "group_size": group_size,
        "groups_complete_fraction": len(whole) / len(by_group) if by_group else 0.0,
        "client_groups_complete": progress.groups_complete,
        "succeeded": sum(1 for s in statuses.values() if s.get("phase") == "Succeeded"),
        "rewards_1": sum(1 for s in statuses.values() if (s.get("reward") or {}).get("value") == 1.0),
        "pods_killed": len(killed),
        "kills": [
            {"rollout": k.name, "pod": k.pod, "in_turn": k.turn, "at_seconds": round(k.at_seconds, 1)}
            for k in outcome.kills
        ],
        "retried": progress.retried,
        "retry_reasons": progress.retry_reasons,
        "attempts_of_killed": sorted(int(statuses[n].get("attempts") or 0) for n in killed),
        "tokens_sampled": sum(outcome.sampled.values()),
        "tokens_kept": sum(kept.values()),
        "extra_work": extra(set(outcome.objects)),
        "extra_work_killed": extra(killed),
        "extra_work_never_killed": extra(set(outcome.objects) - killed),
        "wall_seconds": outcome.wall_seconds,
    }


def run(
    groups: int = GROUPS,
    group_size: int = GROUP_SIZE,
    fraction: float = KILL_FRACTION,
    seed: int = 1,
    checkpoint: bool = True,
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-podkill-", dir="/var/tmp") as tmp:
        with dev_stack_behind_recorder(
            Path(tmp), faults={"delay_per_token": DELAY_PER_TOKEN}, oracle_ledger=LEDGER
        ) as (kubeconfig, recorder, tasks):
            outcome = run_batch(kubeconfig, recorder, tasks, groups, group_size, fraction, seed)
    result = figures(outcome, groups, group_size)
    result["kill_fraction"] = fraction
    if checkpoint:
        from bench import checkpoint as checkpoint_bench

        result["checkpoint"] = checkpoint_bench.run()
    return result


def report(f: dict[str, Any]) -> str:
    lines = [
        f"{f['rollouts']} oracle rollouts ({f['groups']} GRPO groups of {f['group_size']}) on the node agent, "
        f"{f['pods_killed']} pods ({f['pods_killed'] / f['rollouts']:.1%}) killed at random moments mid-run:",
        f"  groups complete {f['groups_complete_fraction']:.0%} (client: groups_complete={f['client_groups_complete']}); "
        f"{f['succeeded']}/{f['rollouts']} Succeeded, {f['rewards_1']} with reward 1; "
        f"retried {f['retried']} {f['retry_reasons']}, attempts of the killed {f['attempts_of_killed']}",
        f"  extra work (tokens sampled / tokens kept - 1): {f['extra_work']:.2%} over the batch "
        f"({f['tokens_sampled']} sampled, {f['tokens_kept']} kept); the killed rollouts {f['extra_work_killed']:.2%}, "
        f"the never killed (baseline, same batch) {f['extra_work_never_killed']:.2%}",
        "  kills: "
        + ", ".join(
            f"{k['rollout']} in turn {k['in_turn']} ({k['at_seconds']:.0f} s)" if k["pod"] else f"{k['rollout']} missed"
            for k in f["kills"]
        ),
        f"  batch wall time {f['wall_seconds']:.0f} s",
    ]
    if "checkpoint" in f:
        from bench import checkpoint as checkpoint_bench

        lines += ["  beside it, " + line.strip() for line in checkpoint_bench.report(f["checkpoint"]).splitlines()[:1]]
        lines += ["    " + line.strip() for line in checkpoint_bench.report(f["checkpoint"]).splitlines()[1:]]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench podkill", description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=GROUPS, help="GRPO groups (one task each, the bundled cycled)")
    parser.add_argument("--group-size", type=int, default=GROUP_SIZE, help="rollouts per group")
    parser.add_argument(
        "--kill", type=float, default=KILL_FRACTION, help="fraction of the rollouts whose pod is killed"
    )
    parser.add_argument("--seed", type=int, default=1, help="which rollouts, after which turn, how much later")
    parser.add_argument("--no-checkpoint", action="store_true", help="leave out the checkpoint bench's figures")
    parser.add_argument("--json", action="store_true", help="the figures as one JSON object")
    args = parser.parse_args(argv)
    if args.groups < 1 or args.group_size < 1 or not 0 < args.kill <= 1:
        parser.error("--groups and --group-size must be at least 1, --kill in (0, 1]")
    result = run(args.groups, args.group_size, args.kill, args.seed, checkpoint=not args.no_checkpoint)
    print(json.dumps(result) if args.json else report(result))
    return 0
