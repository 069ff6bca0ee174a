"""bench prepared's finish -> reward breakdown, read from a status and its stored eval log
(the pure part; the bench itself runs a dev stack)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from agent_runner.pod.eval_timeline import new_timeline
from bench.prepared_starts import REWARD_STEPS, figures, operator_waits, report, reward_steps_of, step_medians


def _iso(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _status(finish: float, graded: float, log_ref: str | None) -> dict[str, object]:
    status: dict[str, object] = {
        "result": {"finishedAt": _iso(finish)},
        "reward": {"gradedAt": _iso(graded), "testsSeconds": 1.0},
    }
    if log_ref:
        status["logs"] = {"eval": {"ref": log_ref}}
    return status


def test_the_steps_from_the_finish_add_up_to_finish_to_reward() -> None:
    finish = 1_800_000_000.0
    timeline = new_timeline()
    marks = {"ready": -30.0, "grader": -25.0, "assignment": 0.4, "patch": 0.5, "applied": 0.7}
    marks |= {"tests": 2.7, "graded": 2.8, "evaluated": 2.9, "uploaded": 3.0}
    timeline.marks = {"started": finish - 31.0} | {step: finish + at for step, at in marks.items()}
    logs = {"file:///eval.log": f"INFO x: {timeline.line()}\n".encode()}
    steps = reward_steps_of(_status(finish, finish + 3.25, "file:///eval.log"), logs.__getitem__)

    assert [key for key in steps if key in {k for k, _, _ in REWARD_STEPS}] == [k for k, _, _ in REWARD_STEPS]
    assert sum(steps[key] for key, _, _ in REWARD_STEPS) == pytest.approx(3.25, abs=0.002)
    assert steps["evaluating"] == pytest.approx(0.4, abs=0.002) and steps["tests"] == pytest.approx(2.0, abs=0.002)
    assert steps["report"] == pytest.approx(0.25, abs=0.002)
    assert steps["eval_ready_after_finish"] == pytest.approx(-30.0, abs=0.002)
    assert steps["eval_started_after_finish"] == pytest.approx(-31.0, abs=0.002)

    # An eval log without a timeline (an older runner) gives only what the status says: no step.
    assert reward_steps_of(_status(finish, finish + 3.25, None), logs.__getitem__) == {}
    medians = step_medians("prewarmed", [steps, {**steps, "tests": 4.0}, {}])
    assert medians["prewarmed_reward_tests_p50_s"] == pytest.approx(3.0, abs=0.002)


def test_the_report_prints_the_breakdown_beside_the_existing_figures() -> None:
    batch = {
        "first": {"a": 1.0, "b": 2.0},
        "wall": 10.0,
        "finish_to_reward": [3.0, 4.0],
        "tests": [1.0, 1.5],
        "startup": [{}, {}],
        "reward_steps": [{"evaluating": 0.2, "tests": 1.0, "eval_ready_after_finish": -5.0}, {}],
    }
    f = figures({"cold": {**batch, "reward_steps": [{}, {}]}, "prepared": batch, "prepare_seconds": 5.0})
    assert f["prewarmed_finish_to_reward_p50_s"] == 3.5 and f["prewarmed_reward_evaluating_p50_s"] == 0.2
    assert not any(key.startswith("cold_reward_") for key in f)
    text = report(f)
    assert "prewarmed finish -> reward, steps p50 s: evaluating 0.20, tests 1.00; eval pod ready -5.00 s" in text
    assert "cold finish -> reward, steps p50 s: no eval timeline in the eval logs" in text


def test_the_operator_waits_of_each_batch_are_the_difference_between_two_scrapes() -> None:
    def page(events_slow: float, locks: float) -> str:
        return "\n".join(
            [
                f'swerollout_ingest_request_seconds_bucket{{le="0.1",route="events"}} {10.0}',
                f'swerollout_ingest_request_seconds_bucket{{le="5.0",route="events"}} {10.0 + events_slow}',
                f'swerollout_ingest_request_seconds_bucket{{le="+Inf",route="events"}} {10.0 + events_slow}',
                f'swerollout_report_lock_wait_seconds_bucket{{le="0.01"}} {locks}',
                f'swerollout_report_lock_wait_seconds_bucket{{le="+Inf"}} {locks}',
            ]
        )

    waits = operator_waits(page(events_slow=4, locks=14), page(events_slow=0, locks=10))
    # The ten fast events came before the batch: its four were all slow.
    assert waits["ingest"] == {"events": {"count": 4.0, "p50_s": 5.0, "p99_s": 5.0}}
    assert waits["report_lock_wait"] == {"all": {"count": 4.0, "p50_s": 0.01, "p99_s": 0.01}}
    assert waits["api_slot_wait"] == {} and operator_waits("", "") == {}

    batch = {"first": {"a": 1.0}, "wall": 1.0, "finish_to_reward": [1.0], "tests": [1.0], "startup": [{}]}
    batch |= {"reward_steps": [{}]}
    prepared = {**batch, "operator": waits, "cpu": {"operator": 12.5, "node-agent": 3.0}, "cpu_stalled": 0.42}
    f = figures({"cold": batch, "prepared": prepared, "prepare_seconds": 1.0})
    assert f["prewarmed_operator_ingest_events_p99_s"] == 5.0 and f["prewarmed_cpu_node_agent_s"] == 3.0
    text = report(f)
    assert "prewarmed operator, p50/p99 s (bucket bounds): ingest_events 5/5, report_lock_wait_all 0.01/0.01" in text
    assert "cold operator, p50/p99 s (bucket bounds): its /metrics not reachable here" in text
    assert "prewarmed batch, CPU seconds by component: operator 12.5, node_agent 3.0" in text
    assert "cold batch, CPU seconds" not in text
    # The machine's CPU pressure is its own line, not a component's CPU seconds.
    assert "prewarmed batch: some task waited for a CPU in 42% of its wall time (PSI)" in text
    assert f["prewarmed_cpu_stalled_share"] == 0.42 and "cold_cpu_stalled_share" not in f
    assert "cold batch: some task waited" not in text


def test_the_prepared_runners_own_share_of_the_go_is_read_from_their_start_lines() -> None:
    batch = {"first": {"a": 1.0}, "wall": 1.0, "finish_to_reward": [1.0], "tests": [1.0], "reward_steps": [{}]}
    cold = {**batch, "startup": [{}]}
    # A runner without a go mark (cold, or an older runner) counts for nothing.
    marks = [{"setup": 1.0, "go": 10.0, "first /generate": 10.05}, {"go": 3.0, "first /generate": 3.25}, {"go": 2.0}]
    f = figures({"cold": cold, "prepared": {**batch, "startup": marks}, "prepare_seconds": 1.0})
    assert f["prepared_runner_go_to_generate_p50_s"] == pytest.approx(0.15)
    assert f["prepared_runner_go_to_generate_p99_s"] == pytest.approx(0.25)
    assert "of which in the runner (its go taken -> the request sent): p50 150 ms, p99 250 ms" in report(f)
    f = figures({"cold": cold, "prepared": {**batch, "startup": [{}]}, "prepare_seconds": 1.0})
    assert "prepared_runner_go_to_generate_p50_s" not in f
    assert "of which in the runner: no go mark in the runner logs" in report(f)
