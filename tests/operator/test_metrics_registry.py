"""The operator's registry: abort reasons are a closed label set, and the process, platform
and GC collectors are exported next to ours."""

from __future__ import annotations

from prometheus_client import generate_latest

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
