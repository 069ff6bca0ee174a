"""Memory of the operator's caches per rollout, against holding the bodies as sent.

    python -m bench.operator_cache [--rollouts 2000]

Rollouts and their pods shaped as the API server sends them for a Running rollout
(managedFields, kopf's annotation, a kubelet's pod status), each decoded from its own
JSON as a watch event is. Baseline: the decoded bodies kept as they are. Ours: what
`RolloutCache` and `PodCache` keep, and the parsed spec and status models, which a
rollout at rest drops (`RolloutCache.release_idle`). Measured with tracemalloc, so
the numbers are Python allocations, not RSS (the process's imports are not in them).
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import tracemalloc
import uuid
from typing import Any

from bench.lifecycle import _rollout
from swerollout.api import v1alpha1 as api
from swerollout_operator import podspec
from swerollout_operator.cache import PodCache, RolloutCache
from swerollout_operator.settings import OperatorSettings

AT = "2026-12-01T12:00:02Z"


def _rollout_body(i: int) -> dict[str, Any]:
    body = _rollout(f"r{i:05d}")
    name = body["metadata"]["name"]
    body["metadata"].update(
        namespace="rest",
        uid=str(uuid.uuid4()),
        resourceVersion=str(1000 + i),
        generation=1,
        creationTimestamp=AT,
        finalizers=[api.FINALIZER],
        managedFields=[
            {
                "manager": m,
                "operation": "Update",
                "time": AT,
                "fieldsType": "FieldsV1",
                "fieldsV1": {"f:status": {"f:phase": {}, "f:sandbox": {".": {}, "f:podName": {}}}},
            }
            for m in ("swerollout", "kopf", "swerollout-client")
        ],
        annotations={"kopf.zalando.org/last-handled-configuration": json.dumps(body["spec"])},
    )
    body["status"] = {
        "phase": "Running",
        "attempts": 1,
        "observedGeneration": 1,
        "startTime": AT,
        "message": f"pod {name}-a1 is ready",
        "sandbox": {
            "podName": f"{name}-a1",
            "podUID": str(uuid.uuid4()),
            "podIP": "10.0.0.1",
            "nodeName": "node-1",
            "startedAt": AT,
        },
        "conditions": [
            {
                "type": t,
                "status": "True",
                "reason": "SandboxReady",
                "message": "ready",
                "lastTransitionTime": AT,
                "observedGeneration": 1,
            }
            for t in ("Ready", "Started")
        ],
    }
    return body


def _pod_body(rollout: dict[str, Any], settings: OperatorSettings) -> dict[str, Any]:
    meta = {k: rollout["metadata"][k] for k in ("namespace", "name", "uid", "labels")}
    spec = api.SWERolloutSpec.model_validate(rollout["spec"])
    pod = podspec.rollout_pod(api.SWERollout.model_construct(spec=spec), meta, settings, attempt=1, role="rollout")
    pod["metadata"].update(
        namespace="rest",
        uid=str(uuid.uuid4()),
        resourceVersion="5",
        creationTimestamp=AT,
        managedFields=[{"manager": "kubelet", "operation": "Update", "time": AT}],
    )
    pod["spec"]["nodeName"] = "node-1"
    statuses = [
        {
            "name": c["name"],
            "image": c["image"],
            "imageID": "sha256:" + "a" * 64,
            "containerID": "containerd://" + uuid.uuid4().hex * 2,
            "ready": True,
            "restartCount": 0,
            "started": True,
            "state": {"running": {"startedAt": AT}},
            "lastState": {},
        }
        for c in pod["spec"]["containers"]
    ]
    pod["status"] = {
        "phase": "Running",
        "podIP": "10.0.0.1",
        "podIPs": [{"ip": "10.0.0.1"}],
        "hostIP": "10.0.0.2",
        "startTime": AT,
        "qosClass": "Burstable",
        "containerStatuses": statuses,
        "initContainerStatuses": [
            {
                "name": c["name"],
                "image": c["image"],
                "ready": True,
                "restartCount": 0,
                "state": {"terminated": {"exitCode": 0, "reason": "Completed", "finishedAt": AT}},
            }
            for c in pod["spec"].get("initContainers") or []
        ],
        "conditions": [
            {"type": t, "status": "True", "lastProbeTime": None, "lastTransitionTime": AT}
            for t in ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled")
        ],
    }
    return pod


def _allocated(build: Any) -> tuple[int, Any]:
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    kept = build()
    gc.collect()
    size = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    return size, kept


def run(rollouts: int = 2000) -> dict[str, Any]:
    settings = OperatorSettings()
    bodies = [_rollout_body(i) for i in range(rollouts)]
    wire = [(json.dumps(b), json.dumps(_pod_body(b, settings))) for b in bodies]
    del bodies

    raw_size, raw = _allocated(lambda: [(json.loads(r), json.loads(p)) for r, p in wire])
    del raw

    def fill() -> tuple[RolloutCache, PodCache]:
        rollouts_cache, pods = RolloutCache(), PodCache()
        for r, p in wire:
            rollouts_cache.observe(json.loads(r))
            pods.update(json.loads(p))
        return rollouts_cache, pods

    cache_size, (cache, pods) = _allocated(fill)

    def parse() -> None:
        for entry in cache.entries.values():
            entry.rollout_spec  # noqa: B018 - parsed and kept, as a pass leaves it
            entry.rollout_status  # noqa: B018

    parsed_size, _ = _allocated(parse)
    released = cache.release_idle(-1.0)  # everything counts as idle
    assert released == rollouts and len(pods.pods) == rollouts
    kib = 1024 * rollouts
    return {
        "rollouts": rollouts,
        "as_sent_kib": raw_size / kib,
        "cached_kib": cache_size / kib,
        "parsed_models_kib": parsed_size / kib,
    }


def report(result: dict[str, Any]) -> str:
    n, sent, kept, parsed = (result[k] for k in ("rollouts", "as_sent_kib", "cached_kib", "parsed_models_kib"))
    return (
        f"operator caches, {n} Running rollouts and their pods (Python allocations per rollout):\n"
        f"  bodies as sent {sent:.1f} KiB; cached {kept:.1f} KiB = {kept / sent:.2f}x; "
        f"parsed spec + status {parsed:.1f} KiB more while in use, 0 at rest\n"
        f"  at rest: {kept * n / 1024:.0f} MiB for {n} (as sent and parsed: {(sent + parsed) * n / 1024:.0f} MiB)"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rollouts", type=int, default=2000)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = run(args.rollouts)
    print(json.dumps(result, indent=2) if args.json else report(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
