"""Prometheus metrics of the operator.

Base units (seconds, tokens), and no per-object labels: a label per rollout or
pod would grow the series count with every sample (a common cardinality bug).
Labels are limited to small closed sets (phase, reason, code).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

from swerollout.api.v1alpha1 import Phase

# Why a run was aborted, as the runner reports it: a suspension the trainer asked for, or
# the inference server aborting the request. Anything else counts as `other`, so a new or
# misspelled reason never adds a series.
ABORT_REASONS = ("Suspended", "InferenceAborted")
OTHER_REASON = "other"

_STARTUP_BUCKETS = (0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600)


class OperatorMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        # What every Prometheus client exports by default (process_*, python_info, python_gc_*),
        # here on our own registry.
        ProcessCollector(registry=r)
        PlatformCollector(registry=r)
        GCCollector(registry=r)
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
        self.reconciles = Counter(
            "swerollout_reconciles_total", "Reconcile passes over a rollout (coalesced per rollout).", registry=r
        )
        self.api_requests = Counter(
            "swerollout_api_requests_total",
            "Requests the operator sent to the API server, by HTTP method (GET = reads), not counting watches.",
            ["method"],
            registry=r,
        )
        self.work_queue = Gauge(
            "swerollout_work_queue_depth", "Rollouts queued for or in a reconcile pass.", registry=r
        )
        self.status_patches = Counter(
            "swerollout_status_patches_total", "Status patches written to SWERollouts.", registry=r
        )
        self.rollout_duration = Histogram(
            "swerollout_rollout_duration_seconds",
            "From creation to Succeeded or Failed.",
            buckets=(10, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200, 14400),
            registry=r,
        )
        self.turns = Histogram(
            "swerollout_rollout_turns",
            "Model turns of finished rollouts.",
            buckets=(1, 2, 5, 10, 20, 30, 50, 75, 100, 200),
            registry=r,
        )
        self.exit_statuses = Counter(
            "swerollout_exit_status_total", "Finished rollouts by exit status.", ["exit_status"], registry=r
        )
        self.generated_tokens = Counter(
            "swerollout_generated_tokens_total", "Tokens sampled by the policy, as reported by runners.", registry=r
        )
        self.generation_seconds = Histogram(
            "swerollout_turn_generation_seconds",
            "Model time per turn (runner-side).",
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120),
            registry=r,
        )
        self.tool_seconds = Histogram(
            "swerollout_turn_tool_seconds",
            "Tool execution time per turn (runner-side).",
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 120),
            registry=r,
        )
        self.aborts = Counter(
            "swerollout_aborts_total",
            "Runs aborted mid-way, by reason (Suspended, InferenceAborted, other).",
            ["reason"],
            registry=r,
        )
        for reason in (*ABORT_REASONS, OTHER_REASON):
            self.aborts.labels(reason)
        self.resumes = Counter("swerollout_resumes_total", "Runs resumed from a snapshot.", registry=r)
        self.replays = Counter(
            "swerollout_replays_total", "Resumes into a fresh pod (the old one was gone).", registry=r
        )
        self.rewards = Histogram(
            "swerollout_reward", "Rewards of graded rollouts.", buckets=(0.0, 0.25, 0.5, 0.75, 1.0), registry=r
        )
        self.resolved = Counter(
            "swerollout_graded_total", "Graded rollouts, by whether the task was resolved.", ["resolved"], registry=r
        )
        self.eval_duration = Histogram(
            "swerollout_eval_duration_seconds",
            "From eval pod creation to the reported reward.",
            buckets=(1, 5, 10, 30, 60, 120, 300, 600, 1800),
            registry=r,
        )
        self.ingest_requests = Counter(
            "swerollout_ingest_requests_total",
            "Ingest API requests, by route and HTTP status code.",
            ["route", "code"],
            registry=r,
        )


def abort_reason_label(reason: str | None) -> str:
    """The closed label value of an abort reason (unknown -> ``other``)."""
    return reason if reason in ABORT_REASONS else OTHER_REASON
