"""Which FAIL_TO_PASS / PASS_TO_PASS ids a test log can show at all.

The grader (agent_runner.eval.grading) reads one log line at a time and matches each known
id whole against pytest's summary lines, so ids with spaces and brackets are fine. An
id with a line break, a tab, or leading or trailing whitespace can never appear whole
on a summary line: no parser matches it and the instance can never be resolved. Loading
such an instance warns, naming the ids (instances.load_instances).
"""

from __future__ import annotations

from collections.abc import Iterable


class UnmatchableTestIdWarning(UserWarning):
    """An instance names test ids no log parser can match; it will never be resolved."""


def unmatchable(test_ids: Iterable[str]) -> list[str]:
    """The ids no log line can show whole, in their given order."""
    return [
        test for test in test_ids if not test.strip() or test != test.strip() or any(c in test for c in "\n\r\t\v\f")
    ]


def describe(instance_id: str, ids: list[str]) -> str:
    shown = ", ".join(repr(t) for t in ids[:5]) + (f" and {len(ids) - 5} more" if len(ids) > 5 else "")
    return (
        f"{instance_id}: {len(ids)} test id(s) can never match a test log line (line breaks, tabs or surrounding "
        f"whitespace), so the instance can never be resolved: {shown}; fix FAIL_TO_PASS / PASS_TO_PASS"
    )
