"""Prometheus metrics of the operator.

Base units (seconds, tokens), and no per-object labels: a label per rollout or
pod would grow the series count with every sample (a common cardinality bug).
Labels are limited to small closed sets (phase, reason, code).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from swerollout.api.v1alpha1 import Phase

_STARTUP_BUCKETS = (0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600)


class OperatorMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.rollouts = Gauge(
            "swerollout_rollouts", "SWERollouts currently known to the operator, by phase.", ["phase"], registry=r
        )
        for phase in Phase:
            self.rollouts.labels(phase.value).set(0)
        self.transitions = Counter(
            "swerollout_phase_transitions_total",
            "Phase transitions, by the phase entered.",
            ["phase"],
            registry=r,
        )
        self.pods_created = Counter(
            "swerollout_pods_created_total", "Rollout and eval pods created.", ["role"], registry=r
        )
        self.sandbox_startup = Histogram(
            "swerollout_sandbox_startup_seconds",
            "From pod creation to all containers ready.",
            buckets=_STARTUP_BUCKETS,
            registry=r,
        )
        self.startup_failures = Counter(
            "swerollout_sandbox_startup_failures_total",
            "Rollout pods that never became ready, by reason (ErrImagePull, Timeout, ...).",
            ["reason"],
            registry=r,
        )
        self.reconcile_errors = Counter(
            "swerollout_reconcile_errors_total", "Handler runs that raised, by handler.", ["handler"], registry=r
        )
        self.status_patches = Counter(
            "swerollout_status_patches_total", "Status patches written to SWERollouts.", registry=r
        )
