"""The scale bench's whole RL step, small: KWOK nodes, simulated runners, one operator.

What `make bench BENCH=scale` runs per size, at 20 rollouts on a fresh API server: every
rollout is created, runs on a KWOK node, holds its abort, reads Aborted, resumes,
finishes, is graded in its eval pod and reads Succeeded, over the runner's own ingest
client. The bench's figures are its own; here only what must hold at any size.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from bench import scale
from bench.simrunner import Shape


def test_a_whole_step_on_simulated_nodes() -> None:
    n = 20
    r = asyncio.run(scale.one_size(n))
    assert r["runner_errors"] == []
    assert (r["succeeded"], r["stuck"]) == (n, 0), r["phases_at_end"]
    # Every runner held its abort; every rollout was Aborted, then resumed and finished.
    assert r["abort_all_runners_s"] is not None and r["abort_all_crs_s"] is not None
    assert r["resume_all_runners_s"] is not None and r["all_succeeded_s"] is not None
    # Each rollout had its own pod and its eval pod (KWOK ran both), and one Secret.
    writes = r["operator_writes_per_rollout"]
    assert writes["POST pods"] == 2.0 and writes["POST secrets"] == 1.0
    assert writes["DELETE pods"] == 2.0, writes  # each pod once (KWOK's own deletes are not the operator's)
    # The trajectories have the shape's token counts: the prompt plus every turn's tokens.
    expected = sum(Shape.of(f"r{i:04d}").tokens_after(Shape.of(f"r{i:04d}").turns) for i in range(n)) / n
    assert abs(r["trajectory_tokens_mean"] - expected) < 1e-6
    assert r["snapshot_bytes_mean"] > 1000 and r["trajectory_bytes_mean"] > r["snapshot_bytes_mean"]
    # Big data stays out of etcd: a Succeeded rollout holds references, not its trajectory
    # (a trajectory inlined would make the object larger than the trajectory itself; the
    # object as listed, managedFields included, is about half the size of this shape's
    # trajectory, so a bound at half failed on 97 bytes once the reward gained gradedAt).
    assert 0 < r["swerollout_bytes_succeeded"] < r["trajectory_bytes_mean"]


def test_the_report_and_the_plot(tmp_path: Path) -> None:
    row = {
        "rollouts": 1000,
        "succeeded": 1000,
        "stuck": 0,
        "phases_at_end": {"Succeeded": 1000},
        "cr_to_pod_p50_s": 1.0,
        "cr_to_pod_p99_s": 2.0,
        "bare_cr_to_pod_p50_s": 0.5,
        "bare_cr_to_pod_p99_s": 1.0,
        "cr_to_pod_p50_ratio": 2.0,
        "cr_to_pod_p99_ratio": 2.0,
        "abort_all_runners_s": 0.5,
        "abort_all_crs_s": None,
        "resume_all_runners_s": 0.7,
        "all_succeeded_s": 30.0,
        "operator_rss_kib_per_rollout": 30.0,
        "operator_rss_mib_rest": 100.0,
        "operator_rss_kib_per_rollout_rest": 20.5,
        "operator_cpu_ms_per_rollout": 20.0,
        "apiserver_cpu_ms_per_rollout": 40.0,
        "etcd_cpu_ms_per_rollout": 5.0,
        "apiserver_rss_mib": 900.0,
        "etcd_rss_mib": 200.0,
        "api_writes_per_rollout": 12.0,
        "watch_events_per_rollout_total": 80.0,
        "operator_writes_per_rollout": {"POST pods": 2.0},
        "watch_events_per_rollout": {"pods": 50.0},
        "operator_rss_mib_empty": 80.0,
        "operator_rss_mib_parked": 110.0,
        "operator_rss_mib_peak": 120.0,
        "snapshot_bytes_mean": 20000.0,
        "trajectory_bytes_mean": 30000.0,
        "trajectory_tokens_mean": 4000.0,
        "object_bytes_parked": {"swerollout": 3000.0, "pod": 5000.0, "secret": 400.0},
        "swerollout_bytes_succeeded": 4000.0,
        "etcd_db_bytes_parked": 5e7,
        "etcd_db_bytes_end": 9e7,
        "runner_errors": [],
        "runner_retries": {},
        "ingest_latency": {"events": {"p50_s": 0.01, "p99_s": 0.25}},
        "creation_latency": {"work_queue_wait": {"all": {"count": 1000.0, "p50_s": 0.5, "p99_s": 10.0}}},
        "load_average": {"start": 1.0, "end": 2.0},
    }
    result = {"sizes": [row, {**row, "rollouts": 5000}], "cores": 2}
    text = scale.report(result)
    header, first = text.splitlines()[1:3]
    assert header.split()[:2] == ["rollouts", "ok"] and first.split()[:2] == ["1000", "1000/0"]
    assert " - " in first  # a step that timed out reads "-", not a number
    assert "ingest answers (p50/p99, histogram bucket bounds): events 0.01/0.25 s" in text
    assert "until every rollout Running, work_queue_wait: all 0.5/10 s (1000)" in text
    assert "100 MiB at rest 15 s later (20.5 KiB per rollout)" in text
    path = scale.write_plot(result, tmp_path / "scale.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
