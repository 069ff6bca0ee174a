"""Prometheus metrics of the operator.

Base units (seconds, tokens), and no per-object labels: a label per rollout or
pod would grow the series count with every sample (a common cardinality bug).
Labels are limited to small closed sets (phase, reason, code).

The label values the operator knows in advance are exported at 0 from the start: a
series that appears only at its first increment starts at 1, and `rate`/`increase`
never count that first step (the dashboard and the alerts would miss the first failure).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector

from swerollout.api.v1alpha1 import Phase
from swerollout.exit_status import ExitStatus

# Why a run was aborted, as the runner reports it: a suspension the trainer asked for, or
# the inference server aborting the request. Anything else counts as `other`, so a new or
# misspelled reason never adds a series.
ABORT_REASONS = ("Suspended", "InferenceAborted")
OTHER_REASON = "other"
# The label values known in advance (see the module's docstring).
HANDLERS = ("rollout", "sweep", "delete")
POD_ROLES = ("rollout", "eval")
OWN_STARTUP_FAILURES = ("Timeout", "PodDeleted")
"""The startup failures the operator names itself; the kubelet's reasons (ErrImagePull, ...) join as they come."""

_STARTUP_BUCKETS = (0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600)
_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300)


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
        self.phase_ages: Callable[[], Mapping[Phase, float]] = dict
        """The age of the oldest rollout in each phase (set by the runtime to the rollout cache's)."""
        r.register(_PhaseAges(lambda: self.phase_ages()))
        self.transitions = Counter(
            "swerollout_phase_transitions_total",
            "Phase transitions, by the phase entered.",
            ["phase"],
            registry=r,
        )
        for phase in Phase:
            self.transitions.labels(phase.value)
        self.pods_created = Counter(
            "swerollout_pods_created_total", "Rollout and eval pods created.", ["role"], registry=r
        )
        for role in POD_ROLES:
            self.pods_created.labels(role)
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
        for reason in OWN_STARTUP_FAILURES:
            self.startup_failures.labels(reason)
        self.reconcile_errors = Counter(
            "swerollout_reconcile_errors_total", "Handler runs that raised, by handler.", ["handler"], registry=r
        )
        for handler in HANDLERS:
            self.reconcile_errors.labels(handler)
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
        self.status_patches_skipped = Counter(
            "swerollout_status_patches_skipped_total",
            "Status writes not sent: the partial status held nothing the cached status did not.",
            registry=r,
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
        for exit_status in (*ExitStatus, OTHER_REASON):
            self.exit_statuses.labels(exit_status)
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
        self.abort_fanout = Histogram(
            "swerollout_abort_fanout_seconds",
            "From the operator seeing a running rollout suspended (its own flag or its batch's) to its runner's "
            "Aborted report.",
            buckets=(0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300),
            registry=r,
        )
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
        for resolved in ("true", "false"):
            self.resolved.labels(resolved)
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
        self.shards_owned = Gauge(
            "swerollout_shards_owned",
            "Shards this replica holds the Lease of (0 without --shards).",
            registry=r,
        )
        self.ingest_seconds = Histogram(
            "swerollout_ingest_request_seconds",
            "Time to answer an ingest API request, by route (a long poll counts its wait; an event, its status write).",
            ["route"],
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 90, 180),
            registry=r,
        )
        # Where a rollout's time to its pod goes (the scale bench prints their p50/p99): the
        # watch's delay, the wait for a worker, and each API request's wait for a slot and answer.
        self.watch_lag = Histogram(
            "swerollout_watch_lag_seconds",
            "From a rollout's creation (metadata.creationTimestamp, whole seconds) to this process first "
            "seeing it, for rollouts first seen without a status (new ones, not a restart's listing).",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.work_queue_wait = Histogram(
            "swerollout_work_queue_wait_seconds",
            "From a rollout being queued for a pass to a worker starting it.",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.api_request_seconds = Histogram(
            "swerollout_api_request_seconds",
            "An API request's time, its wait for one of the client's in-flight slots included, by HTTP "
            "method and priority (urgent: a runner waits on it).",
            ["method", "priority"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.api_slot_wait = Histogram(
            "swerollout_api_slot_wait_seconds",
            "An API request's wait for one of the client's in-flight slots (--api-max-in-flight), by priority.",
            ["priority"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.event_loop_lag = Histogram(
            "swerollout_event_loop_lag_seconds",
            "How late the event loop woke a timer: what every answer and event waits behind work that does not yield.",
            buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
            registry=r,
        )
        self.report_lock_wait = Histogram(
            "swerollout_report_lock_wait_seconds",
            "A runner's report's wait for its rollout's lock (held by a pass or a progress write).",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )


class _PhaseAges(Collector):
    """swerollout_phase_oldest_seconds, read from the rollout cache at each scrape: one
    series per unfinished phase, whatever the number of rollouts."""

    def __init__(self, source: Callable[[], Mapping[Phase, float]]) -> None:
        self._source = source

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily(
            "swerollout_phase_oldest_seconds",
            "Seconds the longest-resident rollout of each unfinished phase has been in it (0: none there), "
            "counted from when this operator process first saw it there.",
            labels=["phase"],
        )
        ages = self._source()
        for phase in Phase:
            if not phase.is_terminal:
                family.add_metric([phase.value], ages.get(phase, 0.0))
        yield family


def abort_reason_label(reason: str | None) -> str:
    """The closed label value of an abort reason (unknown -> ``other``)."""
    return reason if reason in ABORT_REASONS else OTHER_REASON
