"""`make bench`: run every benchmark and print one report.

Targets live here, not in the test suite: shared 2-core machines make timed
assertions flaky, so each benchmark reports its numbers next to a baseline
measured in the same run, and the ratios are what to compare across runs.

    python -m bench                 # all
    python -m bench runner lifecycle
    python -m bench prepared --json  # a suite's figures as JSON (JSON_SUITES)
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

SUITES: dict[str, tuple[str, Callable[[], str]]] = {}


def _runner() -> str:
    from bench import runner_overhead

    result = runner_overhead.run()
    lines = [f"runner overhead per turn (tokenizer {result['tokenizer']}, generation excluded):"]
    for n in result["per_turn"].values():
        lines.append(
            f"  {n['context_tokens']:>6.0f} ctx tokens: {n['ours_ms']:.2f} ms "
            f"(naive re-tokenize {n['naive_retokenize_ms']:.1f} ms = {n['naive_vs_ours']:.0f}x ours)"
        )
    s = result["snapshot_32k"]
    lines.append(
        f"  snapshot at {s['tokens']:.0f} tokens: encode {s['encode_ms']:.1f} ms + decode {s['decode_ms']:.1f} ms, "
        f"{s['bytes_per_token']:.2f} bytes/token (raw arrays {s['raw_packed_bytes_per_token']})"
    )
    return "\n".join(lines)


def _nodeagent() -> str:
    from bench import nodeagent_pods

    r = nodeagent_pods.run()
    return (
        f"node agent: {r['pods']} light pods: bind->Running p50 {r['bind_to_running_p50_s'] * 1000:.0f} ms, "
        f"p99 {r['bind_to_running_p99_s'] * 1000:.0f} ms, {r['pods_per_second']:.1f} pods/s "
        f"(bare process spawns {r['baseline_spawns_per_second']:.0f}/s; ratio {r['ratio_vs_baseline']:.3f})"
    )


def _store() -> str:
    out = subprocess.run([sys.executable, "-m", "bench.store_throughput"], capture_output=True, text=True, check=True)
    return "result store:\n" + "\n".join("  " + line for line in out.stdout.strip().splitlines())


def _lifecycle() -> str:
    from bench import lifecycle

    return lifecycle.report(lifecycle.run(500))


def _scale() -> str:
    from bench import scale

    result = scale.run()
    return scale.report(result, scale.write_plot(result, scale.DEFAULT_PLOT))


def _kube_client() -> str:
    from bench import kube_client

    return kube_client.report(kube_client.run())


def _realnode() -> str:
    from bench import realnode_steps

    return realnode_steps.report(realnode_steps.run())


def _prepared_figures() -> dict[str, float]:
    from bench import prepared_starts

    return prepared_starts.run()


def _prepared() -> str:
    from bench import prepared_starts

    return prepared_starts.report(_prepared_figures())


def _operator_cache() -> str:
    from bench import operator_cache

    return operator_cache.report(operator_cache.run())


def _viewer() -> str:
    from bench import viewer_pages

    return viewer_pages.report(viewer_pages.run())


def _abort() -> str:
    from bench import abort_latency

    return abort_latency.report(abort_latency.run())


def _checkpoint() -> str:
    from bench import checkpoint

    return checkpoint.report(checkpoint.run())


def _podkill() -> str:
    from bench import pod_kills

    return pod_kills.report(pod_kills.run())


def _tiny_lm() -> str:
    from bench import tiny_lm

    return tiny_lm.report(tiny_lm.run())


def _fleet_json() -> dict[str, Any]:
    from bench import fleet

    return fleet.run()


def _fleet() -> str:
    from bench import fleet

    return fleet.report(fleet.run())


SUITES = {
    "runner": ("runner overhead and snapshot size", _runner),
    "abort": ("abort -> runner Aborted on the SGLang stand-in", _abort),
    "checkpoint": ("per-turn checkpoints: visible cost per turn and bytes per checkpoint at 4k/16k/32k", _checkpoint),
    "podkill": (
        "5 % of pods killed at random moments mid-run: GRPO groups complete, tokens re-sampled / kept",
        _podkill,
    ),
    "tinylm": (
        "the stand-in's tiny-lm: prefill and per-turn CPU against its old attention, with prefix reuse",
        _tiny_lm,
    ),
    "store": ("result store throughput", _store),
    "nodeagent": ("node agent: 200 pods", _nodeagent),
    "kubeclient": ("async kube client: HTTP/1.1 pool vs in-flight cap vs HTTP/2 under a write burst", _kube_client),
    "opcache": ("operator caches: memory per rollout at rest vs the bodies as sent", _operator_cache),
    "scale": (
        "a whole RL step at 1,000, 5,000, 10,000 and 20,000 rollouts on KWOK nodes with simulated runners; table and PNG",
        _scale,
    ),
    "lifecycle": (
        "operator at batch scale: 500 rollouts burst and 50/s, abort and resume fan-out, writes per rollout, 2,000 at rest",
        _lifecycle,
    ),
    "prepared": (
        "warm starts on the node agent: a prepared batch's go -> first /generate vs a cold batch's",
        _prepared,
    ),
    "realnode": (
        "a rollout's steps on the real node (kubelet, containerd, images) against the node agent (root)",
        _realnode,
    ),
    "viewer": ("viewer: 2,000-rollout batch page, 32k-token rollout in headless Chromium", _viewer),
    "fleet": (
        "4 tiny-lm engines behind smg: prefix cache hits keyed vs round robin, CPU per rollout, batch abort drain",
        _fleet,
    ),
}

# Suites that can print their figures as one JSON object (`python -m bench NAME --json`).
JSON_SUITES: dict[str, Callable[[], dict[str, Any]]] = {"fleet": _fleet_json, "prepared": _prepared_figures}


def main(argv: list[str]) -> int:
    if argv[:1] == ["scale"] and len(argv) > 1:
        # `python -m bench scale --sizes 1000,5000 --json`: the scale bench's own flags.
        from bench import scale

        return scale.main(argv[1:])
    if argv[:1] == ["podkill"] and len(argv) > 1:
        # `python -m bench podkill --groups 4 --json`: the pod-kill bench's own flags.
        from bench import pod_kills

        return pod_kills.main(argv[1:])
    if "--json" in argv:
        names = [a for a in argv if a != "--json"]
        if len(names) != 1 or names[0] not in JSON_SUITES:
            print(f"--json takes one benchmark of {list(JSON_SUITES)}", file=sys.stderr)
            return 2
        print(json.dumps(JSON_SUITES[names[0]]()))
        return 0
    chosen = argv or list(SUITES)
    unknown = [c for c in chosen if c not in SUITES]
    if unknown:
        print(f"unknown benchmark(s) {unknown}; choose from {list(SUITES)}", file=sys.stderr)
        return 2
    report: dict[str, str] = {}
    for name in chosen:
        title, fn = SUITES[name]
        print(f"== {name}: {title}", flush=True)
        start = time.monotonic()
        report[name] = fn()
        print(report[name])
        print(f"   ({time.monotonic() - start:.0f} s)\n", flush=True)
    print(json.dumps({"suites": list(report)}, indent=None))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
