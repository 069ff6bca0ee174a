"""What the pages draw, as plain JSON-able data: the batch summary (one row per rollout
plus the batch's aggregates) and one rollout's detail (conversation, patch, report,
token view with its markers)."""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from swerollout.tokenizers import TokenizerError
from swerollout.viewer.model import ViewRecord
from swerollout.viewer.tokens import decoder_for

# Lifecycle phases the batch page times: (name, from timestamp, to timestamp). A phase
# whose end is unknown (e.g. no evaluation) falls through to the next known timestamp.
PHASES = ("queued", "starting", "running", "evaluating")
_MARKS = ("created", "sandbox_started", "running", "evaluating", "completed")
HISTOGRAM_BINS = 12


def clean_dict(value: dict[str, Any]) -> dict[str, Any]:
    cleaned: dict[str, Any] = clean(value)
    return cleaned


def clean(value: Any) -> Any:
    """The value with every string made valid Unicode (lone surrogates, as decoding
    invalid UTF-8 with surrogateescape leaves them, become U+FFFD)."""
    if isinstance(value, str):
        return value.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
    if isinstance(value, list):
        return [clean(v) for v in value]
    if isinstance(value, dict):
        return {clean(k): clean(v) for k, v in value.items()}
    return value


def _seconds(times: dict[str, str]) -> dict[str, float]:
    parsed: dict[str, datetime] = {}
    for mark in _MARKS:
        if mark in times:
            try:
                parsed[mark] = datetime.fromisoformat(times[mark])
            except ValueError:
                continue
    out: dict[str, float] = {}
    known = [m for m in _MARKS if m in parsed]
    for start, end in zip(known, known[1:]):
        phase = {"created": "queued", "sandbox_started": "starting"}.get(start, start)
        out[phase] = max(0.0, (parsed[end] - parsed[start]).total_seconds())
    if "created" in parsed and "completed" in parsed:
        out["total"] = max(0.0, (parsed["completed"] - parsed["created"]).total_seconds())
    return out


def turn_marks(record: ViewRecord) -> tuple[list[dict[str, Any]], int, int]:
    """Abort and resume markers (positions in the full token list), and the counts of
    aborts and resumes, from the runner's turn log.

    Each turn that sampled tokens is one run of loss-mask-1 tokens, in order; an aborted
    request sat where the next run starts (its tokens were dropped), or under onAbort
    Keep after the tokens it kept inside that run."""
    log = record.info.get("turn_log") or []
    offset = len(record.prompt_ids)
    runs: list[int] = []
    previous = 0
    for i, m in enumerate(record.loss_mask):
        if m == 1 and previous == 0:
            runs.append(offset + i)
        previous = m
    end = offset + len(record.response_ids)
    marks: list[dict[str, Any]] = []
    aborts = resumes = 0
    run = 0
    pending_abort = False
    kept_in_run = 0
    for turn in log:
        if not isinstance(turn, dict):
            continue
        if turn.get("finish") == "abort" or turn.get("kept") is False:
            aborts += 1
            kept = int(turn.get("kept_tokens") or 0)
            kept_in_run += kept
            at = min(runs[run] + kept_in_run, end) if run < len(runs) else end
            version = turn.get("weight_version")
            dropped = int(turn.get("sampled") or 0) - kept
            label = f"aborted: {dropped} sampled tokens dropped (weights {version})"
            if kept:
                label = f"aborted: {kept} sampled tokens kept, {dropped} dropped (weights {version})"
            marks.append({"at": at, "kind": "abort", "label": label})
            pending_abort = True
            continue
        if pending_abort:
            resumes += 1
            at = min(runs[run] + kept_in_run, end) if run < len(runs) else end
            marks.append({"at": at, "kind": "resume", "label": f"resumed (weights {turn.get('weight_version')})"})
            pending_abort = False
        if int(turn.get("sampled") or 0) > 0 or kept_in_run:
            run += 1
            kept_in_run = 0
    return marks, aborts, resumes


def version_marks(record: ViewRecord) -> list[dict[str, Any]]:
    """A marker where the weight version of sampled tokens changes."""
    offset = len(record.prompt_ids)
    marks: list[dict[str, Any]] = []
    last: str | None = None
    for i, (m, version) in enumerate(zip(record.loss_mask, record.weight_versions)):
        if m != 1 or version is None:
            continue
        if last is not None and version != last:
            marks.append({"at": offset + i, "kind": "version", "label": f"weights {last} \u2192 {version}"})
        last = version
    return marks


def _row(record: ViewRecord) -> dict[str, Any]:
    _, aborts, resumes = turn_marks(record)
    versions = Counter(v for m, v in zip(record.loss_mask, record.weight_versions) if m == 1 and v is not None)
    seconds = _seconds(record.times)
    return clean_dict(
        {
            "name": record.name,
            "batch": record.batch,
            "sample": record.sample,
            "member": record.member,
            "instance_id": record.instance_id,
            "phase": record.phase,
            "status": record.status,
            "exit_status": record.exit_status,
            "reward": record.reward,
            "resolved": record.resolved,
            "turns": record.turns,
            "tokens": len(record.prompt_ids) + len(record.response_ids),
            "sampled": sum(record.loss_mask),
            "duration": seconds.get("total"),
            "phases": {p: seconds[p] for p in PHASES if p in seconds},
            "aborts": aborts,
            "resumes": resumes,
            "attempts": record.attempts,
            "versions": dict(versions),
        }
    )


def _histogram(values: Sequence[float]) -> dict[str, Any]:
    if not values:
        return {"lo": 0, "hi": 0, "counts": []}
    lo, hi = min(values), max(values)
    bins = HISTOGRAM_BINS if hi > lo else 1
    width = (hi - lo) / bins if hi > lo else 1.0
    counts = [0] * bins
    for v in values:
        counts[min(bins - 1, int((v - lo) / width))] += 1
    return {"lo": lo, "hi": hi, "counts": counts}


def _stats(values: Sequence[float]) -> dict[str, float]:
    return {"mean": statistics.fmean(values), "median": statistics.median(values), "max": max(values)}


def batch_summary(records: Iterable[ViewRecord], source: str) -> dict[str, Any]:
    rows = [_row(r) for r in records]
    versions: Counter[str] = Counter()
    for row in rows:
        versions.update(row["versions"])
    durations = [r["duration"] for r in rows if r["duration"] is not None]
    resolved = sum(1 for r in rows if r["resolved"])
    return clean_dict(
        {
            "batches": sorted({r["batch"] for r in rows}),
            "source": source,
            "total": len(rows),
            "resolved": resolved,
            "resolved_rate": resolved / len(rows) if rows else 0.0,
            "exit_statuses": dict(Counter(r["exit_status"] or "(none)" for r in rows).most_common()),
            "statuses": dict(Counter(r["status"] for r in rows).most_common()),
            "aborted": sum(1 for r in rows if r["aborts"]),
            "resumed": sum(1 for r in rows if r["resumes"]),
            "replayed": sum(1 for r in rows if r["attempts"] > 1),
            "versions": dict(sorted(versions.items())),
            "histograms": {
                "turns": _histogram([r["turns"] for r in rows]),
                "tokens": _histogram([r["tokens"] for r in rows]),
                "duration": _histogram(durations),
            },
            "phases": {
                p: _stats(values) for p in PHASES if (values := [r["phases"][p] for r in rows if p in r["phases"]])
            },
            "rollouts": rows,
        }
    )


def rollout_detail(record: ViewRecord, group: Sequence[str] = ()) -> dict[str, Any]:
    """One rollout: its summary row, conversation, patch, eval report and token view."""
    ids = [*record.prompt_ids, *record.response_ids]
    pieces: list[str] | None = None
    tokenizer_error = ""
    if record.tokenizer:
        try:
            pieces = decoder_for(record.tokenizer).pieces(ids)
        except TokenizerError as exc:
            tokenizer_error = str(exc)
    else:
        tokenizer_error = "the record names no tokenizer (spec.inference.tokenizer); showing token ids"
    table: list[str | None] = [None]
    index: dict[str | None, int] = {None: 0}
    slots = []
    for version in record.weight_versions:
        if version not in index:
            index[version] = len(table)
            table.append(version)
        slots.append(index[version])
    abort_marks, _, _ = turn_marks(record)
    marks = sorted([*abort_marks, *version_marks(record)], key=lambda m: (m["at"], m["kind"]))
    prompt = len(record.prompt_ids)
    text = clean_dict(
        {
            **_row(record),
            "group": [g for g in group if g != record.name],
            "tokenizer": record.tokenizer,
            "messages": record.messages,
            "submission": record.submission,
            "report": record.report,
            "timings": record.timings,
        }
    )
    # Numbers need no cleaning, and the tokenizer's pieces are valid Unicode already.
    text["token_view"] = {
        "ids": ids,
        "pieces": pieces,
        "tokenizer_error": tokenizer_error,
        "prompt": prompt,
        "mask": [0] * prompt + record.loss_mask,
        "logprobs": [0.0] * prompt + [round(lp, 4) for lp in record.logprobs],
        "versions": [0] * prompt + slots,
        "version_table": clean(table),
        "marks": clean(marks),
    }
    return text


def groups(records: Iterable[ViewRecord]) -> dict[str, list[str]]:
    """Rollout name -> every member of its GRPO group (same batch and sample)."""
    members: dict[tuple[str, int, str], list[str]] = {}
    for r in records:
        members.setdefault((r.batch, r.sample, r.instance_id), []).append(r.name)
    return {name: names for names in members.values() for name in names}
