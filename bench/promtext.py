"""Quantiles of Prometheus histograms read from a /metrics page, the way the benches look
at where a component's time went: the whole run so far, or the part since an earlier scrape."""

from __future__ import annotations

import re

_BUCKET = re.compile(r"^(\w+)_bucket\{([^}]*)\} ([0-9.e+]+)$")
_LABEL = re.compile(r'(\w+)="([^"]*)"')

LATENCIES = {
    "ingest": ("swerollout_ingest_request_seconds", ("route",)),
    "watch_lag": ("swerollout_watch_lag_seconds", ()),
    "work_queue_wait": ("swerollout_work_queue_wait_seconds", ()),
    "api_request": ("swerollout_api_request_seconds", ("method", "priority")),
    "api_slot_wait": ("swerollout_api_slot_wait_seconds", ("priority",)),
    "report_lock_wait": ("swerollout_report_lock_wait_seconds", ()),
    "event_loop_lag": ("swerollout_event_loop_lag_seconds", ()),
}
"""The operator's histograms the benches read: where a rollout's time to its pod, and a
report's time to its answer, goes (name -> (metric, the labels that split it))."""


def _buckets(text: str, metric: str, labels: tuple[str, ...]) -> dict[str, dict[float, float]]:
    """Cumulative bucket counts by `le`, per key of `labels` (summed over the labels not split by)."""
    buckets: dict[str, dict[float, float]] = {}
    for line in text.splitlines():
        m = _BUCKET.match(line)
        if not m or m.group(1) != metric:
            continue
        found = dict(_LABEL.findall(m.group(2)))
        key = " ".join(found.get(label, "") for label in labels) or "all"
        per = buckets.setdefault(key, {})
        le = float(found["le"])
        per[le] = per.get(le, 0.0) + float(m.group(3))
    return buckets


def histogram_quantiles(
    text: str, metric: str, labels: tuple[str, ...], since: str = ""
) -> dict[str, dict[str, float]]:
    """p50 and p99 (the upper bound of their histogram bucket) and the count of one
    histogram in `text`, split by `labels` (joined with " "; "all" without); with `since`
    (an earlier scrape of the same process), of the observations made after it only."""
    base = _buckets(since, metric, labels) if since else {}
    out = {}
    for key, per in _buckets(text, metric, labels).items():
        before = base.get(key, {})
        cumulative = sorted((le, count - before.get(le, 0.0)) for le, count in per.items())
        total = cumulative[-1][1]
        if not total:
            continue
        quantile = {q: next(le for le, count in cumulative if count >= q * total) for q in (0.5, 0.99)}
        out[key] = {"count": total, "p50_s": quantile[0.5], "p99_s": quantile[0.99]}
    return out
