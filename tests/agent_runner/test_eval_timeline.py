"""The eval pod's timeline and its grader prefetch (agent_runner/pod/eval_timeline.py)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

from agent_runner.pod.eval_timeline import STEPS, new_timeline, parse_line
from agent_runner.pod.startup import process_age


def test_marks_are_wall_clock_keep_the_first_time_and_read_back_from_a_log() -> None:
    age = process_age()
    before = time.time()
    timeline = new_timeline()
    # `started` is when this process began (the operator's receipts are compared with these
    # marks, so they are Unix seconds, not seconds since the process began): at least the
    # process's age before `before` (less the clock ticks /proc counts in and the ms kept).
    assert age > 0 and before - timeline.marks["started"] >= age - 0.02
    timeline.mark("ready")
    first = timeline.marks["ready"]
    # Marks keep milliseconds.
    assert round(before, 3) <= first <= round(time.time(), 3)
    time.sleep(0.01)
    timeline.mark("ready")
    timeline.mark("assignment")
    assert timeline.marks["ready"] == first and timeline.marks["assignment"] > first
    log = f"2026-12-02 00:00:00 INFO x: other\n2026-12-02 00:00:01 INFO agent_runner.pod.session: {timeline.line()}\n"
    assert parse_line(log) == timeline.marks
    assert list(parse_line(log)) == ["started", "ready", "assignment"]
    assert set(parse_line(log)) <= set(STEPS)
    assert parse_line("no timeline here") == {}


def test_the_grader_is_imported_in_a_thread_before_anything_is_graded() -> None:
    # A fresh interpreter: this one may have imported swebench already.
    code = textwrap.dedent(
        """
        import sys
        from agent_runner.pod.eval_timeline import new_timeline, prefetch_grader
        timeline = new_timeline()
        assert "swebench.harness.grading" not in sys.modules
        thread = prefetch_grader(timeline).thread
        assert thread is not None and thread.daemon
        thread.join(timeout=600)
        assert "swebench.harness.grading" in sys.modules, sorted(m for m in sys.modules if "swebench" in m)
        assert timeline.marks["grader"] >= timeline.marks["started"]
        from agent_runner.eval.grading import swebench_harness_problem
        assert swebench_harness_problem.cache_info().hits == 0
        assert swebench_harness_problem() is None
        assert swebench_harness_problem.cache_info().hits == 1, "grading finds the prefetched answer"
        print("ok")
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
