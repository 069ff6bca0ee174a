"""The viewer in headless Chromium: a 2,000-rollout batch page and a 32k-token rollout.

Targets (issue 13): the batch page opens in under 2 s; the 32k-token token view stays
responsive (it renders in chunks). Measured against the same browser opening a
trivial page from the same server (the baseline), so the ratio is what to compare.

    python -m bench viewer
"""

from __future__ import annotations

import random
import threading
import time
from typing import Any

from swerollout.viewer.model import ViewRecord
from swerollout.viewer.server import Catalog, make_server

ROLLOUTS = 2000
TOKENS_PER_ROLLOUT = 1500
LONG_TOKENS = 32_768
CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def _record(i: int, rng: random.Random, tokens: int) -> ViewRecord:
    prompt = [rng.randrange(0, 150_000) for _ in range(300)]
    n = tokens - len(prompt)
    mask = [1 if (j // 200) % 2 else 0 for j in range(n)]
    return ViewRecord(
        name=f"bench-{i // 8}-{i % 8}",
        batch="bench",
        sample=i // 8,
        member=i % 8,
        instance_id=f"task__{i // 64}",
        phase="Succeeded",
        status="completed",
        exit_status=rng.choice(["submitted", "submitted", "exit_format", "exit_context"]),
        reward=float(rng.random() < 0.3),
        resolved=rng.random() < 0.3,
        turns=rng.randrange(1, 40),
        prompt_ids=prompt,
        response_ids=[rng.randrange(0, 150_000) for _ in range(n)],
        loss_mask=mask,
        logprobs=[-rng.random() * 3 if m else 0.0 for m in mask],
        weight_versions=[("v1" if j < n // 2 else "v2") if m else None for j, m in enumerate(mask)],
        messages=[{"role": "user", "content": "x" * 500}, {"role": "assistant", "content": "y" * 500}],
        tokenizer="qwen-2.5",
        times={
            "created": "2026-01-01T00:00:00Z",
            "sandbox_started": "2026-01-01T00:00:02Z",
            "running": "2026-01-01T00:00:05Z",
            "completed": f"2026-01-01T00:{rng.randrange(1, 59):02d}:00Z",
        },
    )


def run() -> dict[str, Any]:
    from playwright.sync_api import sync_playwright

    rng = random.Random(13)
    records = [_record(i, rng, TOKENS_PER_ROLLOUT) for i in range(ROLLOUTS - 1)]
    records.append(_record(ROLLOUTS - 1, rng, LONG_TOKENS).model_copy(update={"name": "long"}))
    start = time.perf_counter()
    catalog = Catalog(records, "bench")
    catalog.summary()
    summary_s = time.perf_counter() - start
    server = make_server(catalog, "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/"
    result: dict[str, Any] = {"rollouts": ROLLOUTS, "summary_s": summary_s}
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(url + "static/viewer.css")  # warm the connection
            start = time.perf_counter()
            page.goto(url + "static/viewer.css")
            result["baseline_s"] = time.perf_counter() - start
            start = time.perf_counter()
            page.goto(url)
            page.wait_for_selector("tr.rollout-row", timeout=120_000)
            page.wait_for_function(
                f"() => document.querySelector('[data-testid=shown]').textContent === 'showing {ROLLOUTS} of {ROLLOUTS} rollouts'"
            )
            page.evaluate("() => new Promise((done) => requestAnimationFrame(() => setTimeout(done, 0)))")  # painted
            result["batch_page_s"] = time.perf_counter() - start
            start = time.perf_counter()
            while page.locator("tr.rollout-row").count() < ROLLOUTS:
                page.mouse.wheel(0, 20_000)
                page.wait_for_timeout(50)
            result["batch_all_rows_s"] = time.perf_counter() - start
            start = time.perf_counter()
            page.goto(url + "#r/long")
            page.wait_for_selector("[data-testid=tokens] .tk", timeout=120_000)
            result["long_first_chunk_s"] = time.perf_counter() - start
            start = time.perf_counter()
            page.hover("[data-testid=tokens] .tk.m1 >> nth=5")
            page.wait_for_selector("#tip", state="visible")
            result["hover_s"] = time.perf_counter() - start
            start = time.perf_counter()
            page.click("[data-testid=show-all]")
            page.wait_for_function(
                f"() => document.querySelector('[data-testid=tokens-shown]').textContent === 'showing {LONG_TOKENS} of {LONG_TOKENS} tokens'"
            )
            result["long_all_s"] = time.perf_counter() - start
            start = time.perf_counter()
            page.hover("[data-testid=tokens] .tk >> nth=-1")
            page.wait_for_function("() => document.getElementById('tip').textContent.includes('#32767')")
            result["hover_after_all_s"] = time.perf_counter() - start
            browser.close()
    finally:
        server.shutdown()
        server.server_close()
    return result


def report(r: dict[str, Any]) -> str:
    base = r["baseline_s"]
    return "\n".join(
        [
            f"viewer: {r['rollouts']} rollouts (summary computed in {r['summary_s']:.2f} s before serving)",
            f"  batch page open (summary, charts, first rows painted): {r['batch_page_s']:.2f} s "
            f"(target < 2 s; {r['batch_page_s'] / base:.0f}x a static asset); every row after scrolling to the end: "
            f"{r['batch_all_rows_s']:.2f} s",
            f"  32k-token rollout, first chunk drawn: {r['long_first_chunk_s']:.2f} s (decode + transfer + 2,000 tokens)",
            f"  hover tooltip: {r['hover_s'] * 1000:.0f} ms; after rendering all 32k tokens ({r['long_all_s']:.2f} s): "
            f"{r['hover_after_all_s'] * 1000:.0f} ms",
        ]
    )


if __name__ == "__main__":
    print(report(run()))
