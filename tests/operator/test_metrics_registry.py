"""The operator's registry: abort reasons are a closed label set, and the process, platform
and GC collectors are exported next to ours."""

from __future__ import annotations

from prometheus_client import generate_latest

from swerollout.api.v1alpha1 import Phase
from swerollout_operator.metrics import OperatorMetrics, abort_reason_label


def test_abort_reasons_are_a_closed_set() -> None:
    metrics = OperatorMetrics()
    for reason in ("Suspended", "InferenceAborted", "SomethingNew", "", None, "suspended"):
        metrics.aborts.labels(abort_reason_label(reason)).inc()
    text = generate_latest(metrics.registry).decode()
    values = {
        line.split('reason="')[1].split('"')[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("swerollout_aborts_total{")
    }
    assert values == {"Suspended": 1.0, "InferenceAborted": 1.0, "other": 4.0}


def test_process_platform_and_gc_collectors_are_on_our_registry() -> None:
    text = generate_latest(OperatorMetrics().registry).decode()
    for name in (
        "process_resident_memory_bytes",
        "process_cpu_seconds_total",
        "python_info",
        "python_gc_objects_collected_total",
    ):
        assert f"\n{name}" in text or text.startswith(name), name


def test_known_label_values_are_exported_at_zero_from_the_start() -> None:
    # A series born at its first increment starts at 1: rate() and increase() never count
    # that step, so the first failure of its kind would be invisible to the alerts.
    text = generate_latest(OperatorMetrics().registry).decode()
    for series in (
        'swerollout_phase_transitions_total{phase="Failed"} 0.0',
        'swerollout_reconcile_errors_total{handler="rollout"} 0.0',
        'swerollout_sandbox_startup_failures_total{reason="Timeout"} 0.0',
        'swerollout_exit_status_total{exit_status="submitted"} 0.0',
        'swerollout_graded_total{resolved="true"} 0.0',
        'swerollout_pods_created_total{role="eval"} 0.0',
        'swerollout_phase_oldest_seconds{phase="Starting"} 0.0',
        "swerollout_abort_fanout_seconds_count 0.0",
    ):
        assert f"\n{series}\n" in text, series
    assert 'swerollout_phase_oldest_seconds{phase="Succeeded"}' not in text, "finished rollouts are never stuck"


def test_phase_ages_are_read_at_each_scrape() -> None:
    metrics = OperatorMetrics()
    metrics.phase_ages = lambda: {Phase.RUNNING: 42.5}
    text = generate_latest(metrics.registry).decode()
    assert '\nswerollout_phase_oldest_seconds{phase="Running"} 42.5\n' in text
    assert '\nswerollout_phase_oldest_seconds{phase="Pending"} 0.0\n' in text
