"""The runner's cold-start timeline and its tokenizer prefetch (agent_runner/pod/startup.py)."""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
import time

import pytest

from agent_runner.pod.startup import (
    FIRST_GENERATE,
    LINE_PREFIX,
    TokenizerPrefetch,
    new_timeline,
    parse_line,
    process_age,
)
from agent_runner.pod.timeline import Prefetch
from swerollout.runner_tokenizer import load_runner_tokenizer


def test_marks_count_from_the_process_start_keep_the_first_time_and_read_back_from_a_log() -> None:
    age = process_age()
    timeline = new_timeline()
    timeline.mark("imports")
    # The marks count from the kernel's start of this process (the interpreter's and pytest's
    # imports included), not from the timeline's creation: no mark can be younger than the
    # process was before the timeline existed.
    assert age > 0 and timeline.marks["imports"] >= round(age, 3)
    first = timeline.marks["imports"]
    time.sleep(0.01)
    timeline.mark("imports")
    timeline.mark("swerex")
    assert timeline.marks["imports"] == first and timeline.marks["swerex"] > first
    timeline.finish(FIRST_GENERATE)
    timeline.finish(FIRST_GENERATE)  # once: every later send calls it too
    log = (
        f"2026-12-02 00:00:00 INFO x: something\n2026-12-02 00:00:01 INFO agent_runner.pod.startup: {timeline.line()}\n"
    )
    assert parse_line(log) == timeline.marks
    assert list(parse_line(log)) == ["imports", "swerex", "first /generate"]
    assert parse_line("no timeline here") == {}


def test_the_pod_specs_tokenizer_loads_in_a_thread_and_the_setup_finds_it_loaded() -> None:
    load_runner_tokenizer.cache_clear()
    timeline = new_timeline()
    prefetch = TokenizerPrefetch("qwen-2.5", timeline)

    async def setup() -> None:
        await asyncio.wait_for(prefetch.wait("qwen-2.5"), timeout=600)
        # Another name does not wait for this one.
        await asyncio.wait_for(prefetch.wait("llama-3"), timeout=0.1)

    asyncio.run(setup())
    assert "tokenizer" in timeline.marks
    misses = load_runner_tokenizer.cache_info().misses
    load_runner_tokenizer("qwen-2.5")
    assert load_runner_tokenizer.cache_info().misses == misses, "the setup's own load is a cache hit"


def test_no_tokenizer_named_means_nothing_to_wait_for() -> None:
    timeline = new_timeline()
    prefetch = TokenizerPrefetch(None, timeline)
    asyncio.run(asyncio.wait_for(prefetch.wait("qwen-2.5"), timeout=0.1))
    assert "tokenizer" not in timeline.marks


def test_the_runner_entry_imports_no_cli_libraries_torch_or_transformers() -> None:
    # The imports of `python -m agent_runner` up to reading its environment (an empty one
    # here: it exits there): httpx's command line (rich, click) is kept out, as torch is, and
    # transformers is not on the path at all (the compiled tokenizer replaced it).
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "agent_runner"],
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 1 and "SWEROLLOUT_INGEST_URL" in done.stderr
    imported = {line.rsplit("|", 1)[1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    assert "agent_runner.pod.session" in imported and "httpx" in imported
    assert not {m for m in imported if m.split(".")[0] in ("rich", "click", "torch", "transformers")}


def test_a_failed_prefetch_is_logged_and_its_wait_still_ends(caplog: pytest.LogCaptureFixture) -> None:
    """The step that needs the work does it again and reports the error: the prefetch never
    leaves the runner waiting, and never raises into it."""

    def broken() -> None:
        raise OSError("tokenizer.json is truncated")

    with caplog.at_level(logging.INFO, logger="agent_runner.pod.timeline"):
        prefetch = Prefetch("tokenizer prefetch of 'x'", broken)
        asyncio.run(asyncio.wait_for(prefetch.wait(), timeout=30))
    assert "tokenizer prefetch of 'x' failed (tokenizer.json is truncated)" in caplog.text


def test_finish_logs_the_line_once(caplog: pytest.LogCaptureFixture) -> None:
    timeline = new_timeline()
    timeline.mark("imports")
    with caplog.at_level(logging.INFO, logger="agent_runner.pod.timeline"):
        for _ in range(3):
            timeline.finish(FIRST_GENERATE)
    lines = [r.getMessage() for r in caplog.records if LINE_PREFIX in r.getMessage()]
    assert len(lines) == 1 and parse_line(lines[0]) == timeline.marks
