"""The viewer in a real browser (Debian's Chromium, headless, through Playwright): the
served pages (`swerollout view --from`) and the one-file report (`--out`)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

URL_LINE = re.compile(r"at (http://127\.0\.0\.1:\d+/)")


@pytest.fixture(scope="module")
def served(demo_batch: Any) -> Iterator[str]:
    """`swerollout view --from results.jsonl --port 0` as the user runs it; yields its URL."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "swerollout.cli.main", "view", "--from", str(demo_batch.jsonl), "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        match = URL_LINE.search(first)
        assert match, f"no URL in {first!r}; stderr: {proc.stderr.read() if proc.poll() is not None else ''}"
        assert "loopback only" in proc.stdout.readline()
        yield match.group(1)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _check_batch_page(page: Any, demo_batch: Any) -> None:
    records = demo_batch.records
    page.wait_for_selector("tr.rollout-row")
    assert page.inner_text("[data-testid=total]") == str(len(records))
    resolved = sum(1 for r in records if r.resolved)
    assert page.inner_text("[data-testid=resolved]") == str(resolved)
    assert page.inner_text("[data-testid=resolved-rate]") == f"{100 * resolved / len(records):.1f}%"
    assert page.locator("tr.rollout-row").count() == len(records)
    for exit_status, count in Counter(r.exit_status for r in records).items():
        assert page.inner_text(f"[data-testid='exit-{exit_status}']") == str(count)
    assert page.inner_text("[data-testid=aborted]") == "1" and page.inner_text("[data-testid=resumed]") == "1"
    # Grouped by task and GRPO group: one group row per (task, sample).
    assert page.locator("tr.group-row").count() == len({(r.instance_id, r.sample) for r in records})
    # Filters: a task, then reward.
    task = records[0].instance_id
    page.select_option("[data-testid=f-task]", task)
    assert page.locator("tr.rollout-row").count() == sum(1 for r in records if r.instance_id == task)
    page.select_option("[data-testid=f-reward]", "resolved")
    assert page.locator("tr.rollout-row").count() == sum(1 for r in records if r.instance_id == task and r.resolved)
    page.select_option("[data-testid=f-task]", "")
    page.select_option("[data-testid=f-reward]", "")
    assert page.locator("tr.rollout-row").count() == len(records)


def _check_rollout_page(page: Any, record: Any) -> None:
    page.wait_for_selector("[data-testid=tokens] .tk")
    assert page.inner_text("[data-testid=rollout-name]") == record.name
    assert page.locator("[data-testid=message]").count() == len(record.messages)
    page.click("[data-testid=show-all]")
    total = len(record.prompt_ids) + len(record.response_ids)
    assert page.inner_text("[data-testid=tokens-shown]") == f"showing {total} of {total} tokens"
    assert page.locator("[data-testid=tokens] .tk").count() == total
    assert page.locator("[data-testid=tokens] .tk.m1").count() == int(record.loss_mask.sum())
    report = record.report
    tests = len(
        report["fail_to_pass"]["success"]
        + report["fail_to_pass"]["failure"]
        + report["pass_to_pass"]["success"]
        + report["pass_to_pass"]["failure"]
    )
    assert page.locator("tr.eval-test").count() == tests
    assert page.locator("[data-testid=patch] .add").count() >= 1


def test_served_batch_page(page: Any, served: str, demo_batch: Any, screenshot: Any) -> None:
    page.goto(served)
    _check_batch_page(page, demo_batch)
    screenshot(page, "batch")
    assert page.errors == []


def test_served_rollout_page_token_view(page: Any, served: str, demo_batch: Any, screenshot: Any) -> None:
    record = next(r for r in demo_batch.records if r.name == demo_batch.aborted)
    page.goto(served)
    page.click(f"tr.rollout-row[data-name='{record.name}'] a")
    _check_rollout_page(page, record)
    assert page.locator("[data-testid=mark-abort]").count() == 1
    assert page.locator("[data-testid=mark-resume]").count() == 1
    assert page.locator("[data-testid=mark-version]").inner_text() == "weights v1 \u2192 v2"
    # Hovering a trained token shows its logprob and weight version.
    page.hover("[data-testid=tokens] .tk.m1 >> nth=-1")
    tip = page.inner_text("#tip")
    assert "trained (loss mask 1)" in tip and "logprob 0" in tip and 'weights "v2"' in tip
    # The token view's end: the resumed turn with its abort, resume and version markers.
    page.evaluate(
        "document.querySelector('.legend').scrollIntoView();"
        "const box = document.querySelector('[data-testid=tokens]'); box.scrollTop = box.scrollHeight"
    )
    page.mouse.move(0, 0)
    screenshot(page, "rollout-tokens")
    assert page.eval_on_selector("[data-testid=tokens] .tk.m1", "el => el.style.background") == ""
    page.check("[data-testid=heat]")
    assert page.eval_on_selector("[data-testid=tokens] .tk.m1", "el => el.style.background") != ""
    page.evaluate("window.scrollTo(0, 0)")
    screenshot(page, "rollout")
    assert page.errors == []


def test_served_side_by_side(page: Any, served: str, demo_batch: Any, screenshot: Any) -> None:
    a, b = (r for r in demo_batch.records if r.sample == 0)
    page.goto(served + "#r/" + a.name)
    page.click(f"text=side by side with {b.name}")
    page.wait_for_selector("[data-testid=side] [data-testid=tokens] .tk")
    sides = page.locator("[data-testid=side]")
    assert sides.count() == 2
    assert sides.nth(0).locator("[data-testid=message]").count() == len(a.messages)
    assert sides.nth(1).locator("[data-testid=message]").count() == len(b.messages)
    screenshot(page, "side-by-side")


def _check_hostile_inert(page: Any, name: str) -> None:
    page.wait_for_selector("[data-testid=tokens] .tk")
    assert page.evaluate("window.__pwned") is None
    # Markup from the trajectory is text: no element it names exists, its source shows as is.
    assert page.locator("main b:text('bold?')").count() == 0
    # The problem statement's inline image shows; the remote one is named, never fetched.
    images = page.locator("main img")
    assert images.count() == 1 and images.first.get_attribute("src", timeout=5000).startswith("data:image/png")
    assert images.first.evaluate("img => img.complete && img.naturalWidth") == 4
    assert page.locator(".img-note").inner_text().endswith("http://203.0.113.7/issue.png")
    tool = page.locator(".msg.tool")
    assert tool.count() == 1
    # The huge observation starts folded; opened, it shows the markup as text and U+FFFD for the bad bytes.
    tool.locator("details summary").first.click()
    # The page fills the body on the details' toggle event, which fires after the click returns.
    page.wait_for_function("() => document.querySelector('.msg.tool details pre').textContent.length > 0")
    text = tool.locator("details pre").first.inner_text()
    assert text.startswith("<script>window.__pwned = 1</script><img src=x") and "\ufffd" in text
    assert len(text) > 200_000
    assert "<script>" in page.inner_text("[data-testid=patch]")
    page.click("[data-testid=show-all]")
    assert "<script>" in page.inner_text("[data-testid=tokens]")
    assert page.evaluate("window.__pwned") is None


def test_hostile_trajectory_renders_inert_when_served(page: Any, served: str, demo_batch: Any) -> None:
    requests: list[str] = []
    page.on("request", lambda request: requests.append(request.url))
    page.goto(served + "#r/" + demo_batch.hostile)
    _check_hostile_inert(page, demo_batch.hostile)
    # Everything came from the viewer itself (or inline data).
    assert requests and all(u.startswith((served, "data:")) for u in requests), requests
    assert page.errors == []


def test_report_file_works_offline(page: Any, demo_batch: Any, tmp_path: Path, screenshot: Any) -> None:
    out = tmp_path / "report.html"
    run = subprocess.run(
        [sys.executable, "-m", "swerollout.cli.main", "view", "--from", str(demo_batch.parquet), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    requests: list[str] = []
    page.on("request", lambda request: requests.append(request.url))
    page.goto(out.as_uri())
    _check_batch_page(page, demo_batch)
    record = demo_batch.records[0]
    page.click(f"tr.rollout-row[data-name='{record.name}'] a")
    _check_rollout_page(page, record)
    page.goto(out.as_uri() + "#r/" + demo_batch.hostile)
    page.reload()
    _check_hostile_inert(page, demo_batch.hostile)
    # One file: the page asked for nothing but itself.
    assert {u.split("#")[0] for u in requests if not u.startswith("data:")} == {out.as_uri()}
    assert page.errors == []
