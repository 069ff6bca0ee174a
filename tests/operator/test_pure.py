"""The operator's pure parts: pod shape, phase machine, pod status reading, tokens."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from swerollout.api import v1alpha1 as api
from swerollout.api.v1alpha1 import ConditionType, Phase
from swerollout_operator import phases, podspec
from swerollout_operator.cache import PodCache, RolloutCache
from swerollout_operator.phases import IllegalTransition, Trigger
from swerollout_operator.podstatus import read_pod
from swerollout_operator.settings import OperatorSettings
from swerollout_operator.tokens import TokenKey, TokenKind

META = {"name": "r1", "namespace": "ns", "uid": "uid-1", "labels": {api.LABEL_BATCH: "b7"}}


def rollout(**spec_overrides: Any) -> api.SWERollout:
    spec: dict[str, Any] = {
        "instance": {
            "instanceId": "demo__calc-1",
            "repo": "demo/calc",
            "baseCommit": "abcdef0",
            "image": "registry.example/calc:1",
            "problemStatement": "p",
            "evaluation": {"failToPass": ["tests/test_calc.py::test_add"]},
        },
        "inference": {"endpoint": "http://sglang:30000", "tokenizer": "qwen-2.5"},
    }
    spec.update(spec_overrides)
    return api.SWERollout.model_validate({"spec": spec})


def test_pod_is_deterministic_owned_and_credential_free() -> None:
    settings = OperatorSettings()
    a = podspec.rollout_pod(rollout(), META, settings, attempt=1)
    b = podspec.rollout_pod(rollout(), META, settings, attempt=1)
    assert a == b
    assert a["metadata"]["name"] == "r1-a1"
    assert podspec.rollout_pod(rollout(), META, settings, attempt=2)["metadata"]["name"] == "r1-a2"
    owner = a["metadata"]["ownerReferences"][0]
    assert owner["uid"] == "uid-1" and owner["controller"] is True and owner["kind"] == "SWERollout"
    assert a["metadata"]["labels"][api.LABEL_BATCH] == "b7"
    spec = a["spec"]
    assert spec["automountServiceAccountToken"] is False
    assert spec["shareProcessNamespace"] is False
    assert spec["activeDeadlineSeconds"] == settings.pod_active_deadline_seconds
    assert [c["name"] for c in spec["initContainers"]] == ["swerex-bundle"]
    assert [c["name"] for c in spec["containers"]] == ["sandbox", "runner"]


def test_only_the_runner_can_read_the_ingest_token() -> None:
    pod = podspec.rollout_pod(rollout(), META, OperatorSettings(), attempt=1)
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    containers = {c["name"]: c for c in pod["spec"]["initContainers"] + pod["spec"]["containers"]}

    def readable_keys(container: dict[str, Any]) -> set[str]:
        keys: set[str] = set()
        for mount in container.get("volumeMounts", []):
            secret = volumes[mount["name"]].get("secret")
            if secret is None:
                continue
            items = secret.get("items")
            keys |= {i["key"] for i in items} if items else {podspec.SECRET_INGEST_KEY, podspec.SECRET_SWEREX_KEY}
        for env in container.get("env", []):
            ref = (env.get("valueFrom") or {}).get("secretKeyRef")
            if ref:
                keys.add(ref["key"])
        return keys

    assert readable_keys(containers["sandbox"]) == {podspec.SECRET_SWEREX_KEY}
    assert podspec.SECRET_INGEST_KEY in readable_keys(containers["runner"])
    assert readable_keys(containers["swerex-bundle"]) == set()
    sandbox_env = {e["name"]: e.get("value") for e in containers["sandbox"]["env"]}
    assert sandbox_env["SWEROLLOUT_BASE_COMMIT"] == "abcdef0"
    assert containers["sandbox"]["workingDir"] == "/testbed"


def test_inference_keys_reach_only_the_rollout_runner() -> None:
    """The spec's key Secrets are mounted into the rollout pod's runner alone, as files the
    runner's environment names; the sandbox, the init container and the eval pod get none."""
    from swerollout.wire.runner_env import RunnerEnv

    inference = {
        "endpoint": "http://sglang:30000",
        "tokenizer": "qwen-2.5",
        "apiKeySecretRef": {"name": "sglang-keys", "key": "api-key"},
        "adminKeySecretRef": {"name": "sglang-admin", "key": "admin.key"},
    }
    pod = podspec.rollout_pod(rollout(inference=inference), META, OperatorSettings(), attempt=1)
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    user_secrets = {
        n: v["secret"]
        for n, v in volumes.items()
        if v.get("secret", {}).get("secretName") in ("sglang-keys", "sglang-admin")
    }
    assert sorted((s["secretName"], s["items"][0]["key"]) for s in user_secrets.values()) == [
        ("sglang-admin", "admin.key"),
        ("sglang-keys", "api-key"),
    ]
    containers = {c["name"]: c for c in pod["spec"]["initContainers"] + pod["spec"]["containers"]}
    mounted = {n: {m["name"] for m in c.get("volumeMounts", [])} & set(user_secrets) for n, c in containers.items()}
    assert mounted == {"swerex-bundle": set(), "sandbox": set(), "runner": set(user_secrets)}
    runner = containers["runner"]
    env = RunnerEnv.from_environ({e["name"]: e["value"] for e in runner["env"] if "value" in e})
    paths = {m["name"]: m["mountPath"] for m in runner["volumeMounts"]}
    for name, secret in user_secrets.items():
        wanted = env.inference_admin_key_file if secret["secretName"] == "sglang-admin" else env.inference_api_key_file
        assert wanted == f"{paths[name]}/{secret['items'][0]['path']}"
    eval_pod = podspec.rollout_pod(rollout(inference=inference), META, OperatorSettings(), attempt=1, role="eval")
    # The rollout's runner loads the spec's tokenizer while its sandbox starts; the eval runner needs none.
    assert env.tokenizer == rollout(inference=inference).spec.inference.tokenizer
    eval_runner = next(c for c in eval_pod["spec"]["containers"] if c["name"] == "runner")
    assert "SWEROLLOUT_TOKENIZER" not in {e["name"] for e in eval_runner["env"]}
    assert not [
        v
        for v in eval_pod["spec"]["volumes"]
        if v.get("secret", {}).get("secretName") in ("sglang-keys", "sglang-admin")
    ]
    # Without references the runner's environment names no key file.
    plain = podspec.rollout_pod(rollout(), META, OperatorSettings(), attempt=1)
    runner_env = {e["name"] for e in plain["spec"]["containers"][1]["env"]}
    assert not {"SWEROLLOUT_INFERENCE_API_KEY_FILE", "SWEROLLOUT_INFERENCE_ADMIN_KEY_FILE"} & runner_env


def test_sandbox_container_is_restricted_and_declares_its_port() -> None:
    settings = OperatorSettings()
    pod = podspec.rollout_pod(rollout(), META, settings, attempt=1)
    sandbox = next(c for c in pod["spec"]["containers"] if c["name"] == "sandbox")
    ctx = sandbox["securityContext"]
    assert ctx["allowPrivilegeEscalation"] is False and ctx["seccompProfile"] == {"type": "RuntimeDefault"}
    assert {"NET_RAW", "MKNOD", "SYS_CHROOT", "SETFCAP"} <= set(ctx["capabilities"]["drop"])
    assert "privileged" not in ctx and "add" not in ctx["capabilities"]
    assert sandbox["ports"] == [{"name": "swerex", "containerPort": settings.sandbox_port, "protocol": "TCP"}]
    # the runner's egress: the ingest API and the policy server of the spec; an eval pod needs no policy server
    from swerollout.api import v1alpha1 as api

    ingest = settings.ingest_url.split("//")[1].split("/")[0]
    wanted = pod["metadata"]["annotations"][api.ANNOTATION_EGRESS].split(",")
    assert wanted[0] == (ingest if ":" in ingest else ingest + ":80") and len(wanted) == 2
    assert wanted[1] == "sglang:30000"
    eval_pod = podspec.rollout_pod(rollout(), META, settings, attempt=1, role="eval")
    assert eval_pod["metadata"]["annotations"][api.ANNOTATION_EGRESS] == wanted[0]


def test_pod_takes_placement_and_resources_from_the_spec() -> None:
    settings = OperatorSettings(extra_tolerations=[{"key": "swerollout.io/local", "operator": "Exists"}])
    r = rollout(
        sandbox={
            "resources": {"requests": {"cpu": "2"}, "limits": {"memory": "8Gi"}},
            "nodeSelector": {"pool": "sandboxes"},
            "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
            "runtimeClassName": "gvisor",
            "imagePullSecrets": ["regcred"],
        }
    )
    spec = podspec.rollout_pod(r, META, settings, attempt=1)["spec"]
    assert spec["containers"][0]["resources"] == {"requests": {"cpu": "2"}, "limits": {"memory": "8Gi"}}
    assert spec["nodeSelector"] == {"pool": "sandboxes"}
    assert {t["key"] for t in spec["tolerations"]} == {"gpu", "swerollout.io/local"}
    assert spec["runtimeClassName"] == "gvisor"
    assert spec["imagePullSecrets"] == [{"name": "regcred"}]


def test_long_names_stay_valid_and_distinct() -> None:
    long = "x" * 80
    a = podspec.rollout_pod_name(long, 1)
    b = podspec.rollout_pod_name(long + "y", 1)
    assert len(a) <= 63 and len(b) <= 63 and a != b
    assert a.endswith("-a1")


def test_phase_machine_happy_path_sets_conditions() -> None:
    status: dict[str, Any] = {}
    path = [
        (Trigger.POD_CREATED, Phase.STARTING),
        (Trigger.SANDBOX_READY, Phase.RUNNING),
        (Trigger.ABORTED, Phase.ABORTED),
        (Trigger.RESUME_REQUESTED, Phase.RESUMING),
        (Trigger.RESUMED, Phase.RUNNING),
        (Trigger.FINISHED, Phase.EVALUATING),
        (Trigger.EVALUATED, Phase.SUCCEEDED),
    ]
    for event, expected in path:
        change = phases.apply(
            api.SWERolloutStatus.model_validate(status), event, reason=event.value, message="m", generation=3
        )
        assert change.new == expected
        status = {**status, **change.status_patch}
    conds = {c["type"]: c for c in status["conditions"]}
    assert conds[ConditionType.COMPLETE.value]["status"] == "True"
    assert conds[ConditionType.SUSPENDED.value]["status"] == "False"
    assert status["observedGeneration"] == 3
    assert "completionTime" in status and "startTime" in status


def test_phase_machine_refuses_what_does_not_apply() -> None:
    with pytest.raises(IllegalTransition):
        phases.apply(
            api.SWERolloutStatus.model_validate({"phase": "Succeeded"}),
            Trigger.SANDBOX_READY,
            reason="x",
            message="",
            generation=1,
        )
    with pytest.raises(IllegalTransition):
        phases.apply(
            api.SWERolloutStatus.model_validate({"phase": "Pending"}),
            Trigger.EVALUATED,
            reason="x",
            message="",
            generation=1,
        )


def test_condition_transition_time_moves_only_on_status_change() -> None:
    t1, t2, t3 = (datetime(2026, 12, 1, 12, 0, s, tzinfo=UTC) for s in (1, 2, 3))
    conds = phases.set_condition([], ConditionType.SANDBOX_READY, api.ConditionStatus.FALSE, "A", "", 1, t1)
    conds = phases.set_condition(conds, ConditionType.SANDBOX_READY, api.ConditionStatus.FALSE, "B", "", 1, t2)
    assert conds[0].last_transition_time == t1 and conds[0].reason == "B"
    conds = phases.set_condition(conds, ConditionType.SANDBOX_READY, api.ConditionStatus.TRUE, "C", "", 1, t3)
    assert conds[0].last_transition_time == t3


def _pod(status: dict[str, Any]) -> dict[str, Any]:
    return {
        "metadata": {"name": "p"},
        "spec": {"nodeName": "n1", "containers": [{"name": "sandbox", "image": "registry.example/missing:1"}]},
        "status": status,
    }


def test_read_pod_names_image_pull_failures() -> None:
    state = read_pod(
        _pod(
            {
                "phase": "Pending",
                "containerStatuses": [
                    {"name": "sandbox", "state": {"waiting": {"reason": "ErrImagePull", "message": "not found"}}}
                ],
            }
        )
    )
    assert state.failed and state.reason == "ErrImagePull"
    assert "registry.example/missing:1" in state.message and "not found" in state.message


def test_read_pod_ready_and_unschedulable() -> None:
    ready = read_pod(
        _pod({"phase": "Running", "podIP": "10.0.0.5", "conditions": [{"type": "Ready", "status": "True"}]})
    )
    assert ready.ready and not ready.failed and ready.pod_ip == "10.0.0.5" and ready.node_name == "n1"
    pending = read_pod(
        _pod(
            {
                "phase": "Pending",
                "conditions": [
                    {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/3 nodes"}
                ],
            }
        )
    )
    assert not pending.ready and not pending.failed and pending.reason == "Unschedulable"
    failed = read_pod(
        _pod(
            {
                "phase": "Failed",
                "containerStatuses": [
                    {"name": "sandbox", "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}
                ],
            }
        )
    )
    assert failed.failed and "137" in failed.message


def test_tokens_are_per_rollout_and_constant_time_checked(tmp_path: Path) -> None:
    key = TokenKey.random()
    t = key.derive(TokenKind.INGEST, "ns", "r1", "uid-1")
    assert key.verify(t, TokenKind.INGEST, "ns", "r1", "uid-1")
    assert not key.verify(t, TokenKind.INGEST, "ns", "r2", "uid-2")
    assert not key.verify(t, TokenKind.SWEREX, "ns", "r1", "uid-1")
    # Same name, new incarnation: the old token does not carry over.
    assert not key.verify(t, TokenKind.INGEST, "ns", "r1", "uid-9")
    path = tmp_path / "key"
    path.write_bytes(b"k" * 40)
    assert TokenKey.from_file(path).derive(TokenKind.INGEST, "a", "b", "c") == TokenKey(b"k" * 40).derive(
        TokenKind.INGEST, "a", "b", "c"
    )
    path.write_bytes(b"short")
    with pytest.raises(ValueError, match="at least 32 bytes"):
        TokenKey.from_file(path)


def test_read_pod_treats_an_exited_container_as_the_end_of_the_pod() -> None:
    """A crashed runner must not leave its rollout Running forever."""
    pod = _pod(
        {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "False"}],
            "containerStatuses": [
                {"name": "sandbox", "state": {"running": {}}},
                {"name": "runner", "state": {"terminated": {"exitCode": 1, "reason": "Error"}}},
            ],
        }
    )
    pod["spec"]["containers"].append({"name": "runner", "image": "swerollout:dev"})
    state = read_pod(pod)
    assert state.failed and state.reason == "ContainerExited"
    assert "runner exited 1" in state.message and "swerollout logs p -c runner" in state.message


def test_status_message_is_cut_to_the_crd_bound() -> None:
    """A runner's or pod's message can be longer than status.message may hold; the API
    server would refuse the whole status write (and the transition with it)."""
    long = "E" + "x" * (3 * api.MESSAGE_LIMIT)
    change = phases.apply(None, Trigger.FAILED, reason="RunnerFailed", message=long, generation=1)
    status = api.SWERolloutStatus.model_validate({**change.status_patch})
    assert len(status.message) == api.MESSAGE_LIMIT and status.message.startswith("Ex")
    assert status.message.endswith("\u2026")
    assert all(len(c.message) <= api.MESSAGE_LIMIT for c in status.conditions)
    short = phases.apply(None, Trigger.FAILED, reason="RunnerFailed", message="short", generation=1)
    assert short.status_patch["message"] == "short"


def _kubelet_pod(status: dict[str, Any]) -> dict[str, Any]:
    """A pod as the API server sends it: the fields podstatus reads among everything it does not."""
    pod = _pod(status)
    pod["metadata"].update(
        uid="pod-uid",
        resourceVersion="7",
        namespace="ns",
        managedFields=[{"manager": "kubelet"}],
        ownerReferences=[{"kind": api.KIND, "uid": "uid-1", "controller": True}],
    )
    pod["spec"]["containers"].append(
        {"name": "runner", "image": "swerollout:dev", "env": [{"name": "A", "value": "1"}]}
    )
    pod["spec"]["initContainers"] = [{"name": "bundle", "image": "swerollout:dev", "command": ["cp"]}]
    noise = {
        "imageID": "sha256:" + "a" * 64,
        "containerID": "containerd://" + "b" * 64,
        "restartCount": 3,
        "ready": False,
        "started": True,
        "lastState": {"terminated": {"exitCode": 2}},
        "volumeMounts": [{"name": "v"}],
    }
    for key in ("containerStatuses", "initContainerStatuses"):
        for cs in status.get(key) or []:
            cs.update({k: v for k, v in noise.items() if k not in cs})
    status.setdefault("conditions", []).extend(
        {"type": t, "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z", "lastProbeTime": None}
        for t in ("Initialized", "ContainersReady", "PodReadyToStartContainers")
    )
    status.update(
        hostIP="10.0.0.2", podIPs=[{"ip": "10.0.0.5"}], qosClass="Burstable", startTime="2026-01-01T00:00:00Z"
    )
    return pod


@pytest.mark.parametrize(
    "status",
    [
        {
            "phase": "Running",
            "podIP": "10.0.0.5",
            "conditions": [{"type": "Ready", "status": "True"}],
            "containerStatuses": [{"name": "sandbox", "state": {"running": {"startedAt": "t"}}}],
        },
        {
            "phase": "Pending",
            "containerStatuses": [
                {
                    "name": "sandbox",
                    "image": "registry.example/missing:1",
                    "state": {"waiting": {"reason": "ImagePullBackOff", "message": "back-off pulling"}},
                }
            ],
        },
        {
            "phase": "Pending",
            "initContainerStatuses": [
                {"name": "bundle", "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "exited 1"}}}
            ],
        },
        {
            "phase": "Pending",
            "conditions": [
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/3 nodes"}
            ],
        },
        {
            "phase": "Failed",
            "reason": "Evicted",
            "message": "low on memory",
            "containerStatuses": [
                {"name": "sandbox", "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}
            ],
        },
        {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "False"}],
            "containerStatuses": [
                {"name": "sandbox", "state": {"running": {}}},
                {"name": "runner", "state": {"terminated": {"exitCode": 1, "reason": "Error"}}},
            ],
        },
    ],
    ids=["ready", "image-pull", "init-crash", "unschedulable", "evicted", "runner-exited"],
)
def test_the_pod_cache_keeps_everything_podstatus_reads(status: dict[str, Any]) -> None:
    """The cache keeps a trimmed pod (memory at thousands of rollouts); reading it must
    give exactly what reading the pod as the API server sent it gives."""
    full = _kubelet_pod(status)
    cache = PodCache()
    cache.update(full)
    kept = cache.get("ns", "p")
    assert kept is not None and read_pod(kept) == read_pod(full)
    assert kept["metadata"]["uid"] == "pod-uid" and cache.owned_by("uid-1") == [kept]
    assert "managedFields" not in kept["metadata"] and "env" not in kept["spec"]["containers"][1]
    assert {c["type"] for c in kept["status"]["conditions"]} <= {"Ready", "PodScheduled"}


def _cached_rollout(uid: str) -> dict[str, Any]:
    return {
        "metadata": {"name": f"r-{uid}", "namespace": "ns", "uid": uid, "resourceVersion": "3", "generation": 1},
        "spec": rollout().spec.model_dump(mode="json", by_alias=True, exclude_none=True),
        "status": {"phase": "Running", "attempts": 1, "sandbox": {"podName": f"r-{uid}-a1"}},
    }


def test_rollouts_at_rest_hold_no_parsed_models_and_parse_again_when_read() -> None:
    cache = RolloutCache()
    busy, idle = (cache.observe(_cached_rollout(uid))[0] for uid in ("busy", "idle"))
    spec, status = idle.rollout_spec, idle.rollout_status
    busy_spec = busy.rollout_spec
    assert cache.release_idle(3600) == 0, "read within the hour: kept"
    busy.parsed_used_at = idle.parsed_used_at = 0.0  # as if read long ago
    busy.rollout_status  # noqa: B018 - read again just now
    assert cache.release_idle(60) == 1
    assert idle.release_parsed(float("inf")) is False, "nothing left to release"
    # The next read parses again, to the same models.
    assert idle.rollout_spec == spec and idle.rollout_spec is not spec
    assert idle.rollout_status == status
    assert busy.rollout_spec is busy_spec, "the busy one kept its parse"


def test_find_by_name_follows_incarnations_of_a_name() -> None:
    cache = RolloutCache()
    old, _ = cache.observe(_cached_rollout("u1"))
    assert cache.find("ns", "r-u1") is old
    assert cache.find("ns", "r-u2") is None and cache.find("other", "r-u1") is None
    # Deleted and created again under the same name: a new uid, seen before the old one's DELETED.
    again = {**_cached_rollout("u2"), "metadata": {**_cached_rollout("u2")["metadata"], "name": "r-u1"}}
    new, _ = cache.observe(again)
    assert cache.find("ns", "r-u1") is new
    cache.forget("u1")  # the old incarnation's DELETED leaves the new one findable
    assert cache.find("ns", "r-u1") is new
    cache.forget("u2")
    assert cache.find("ns", "r-u1") is None


def test_phase_counts_follow_every_way_a_cached_body_changes() -> None:
    cache = RolloutCache()

    def body(uid: str, phase: str, rv: int) -> dict[str, Any]:
        return {
            **_cached_rollout(uid),
            "status": {"phase": phase},
            "metadata": {**_cached_rollout(uid)["metadata"], "resourceVersion": str(rv)},
        }

    def counted() -> dict[Phase, int]:
        expected = {p: 0 for p in Phase}
        for entry in cache.entries.values():
            expected[entry.phase] += 1
        return expected

    a, _ = cache.observe(body("a", "Running", 1))
    cache.observe(body("b", "Running", 2))
    cache.observe(body("a", "Aborted", 3))  # a watch event
    a.writes_in_flight += 1
    cache.observe_own(a, body("a", "Resuming", 4))  # the response to our own write
    cache.observe(body("b", "Pending", 1))  # older than held: ignored
    assert cache.phase_counts() == counted()
    assert cache.phase_counts()[Phase.RESUMING] == 1 and cache.phase_counts()[Phase.RUNNING] == 1
    cache.forget("b")
    cache.forget("b")  # twice: counted once
    assert cache.phase_counts() == counted() and sum(cache.phase_counts().values()) == 1
    # Forgotten (its shard went to another replica) with a write in flight: the write's
    # response changes the orphan's phase, not the counts.
    a.writes_in_flight += 1
    cache.forget("a")
    cache.observe_own(a, body("a", "Running", 5))
    assert cache.phase_counts() == counted() == {p: 0 for p in Phase}


def test_a_status_write_sends_only_what_changed_and_nothing_when_nothing_did() -> None:
    """write_status's diff (Tracked.status_delta): a partial status set over the cached one
    becomes a merge patch of what differs; a repeated transition (a level-triggered pass
    seeing the same event again) writes nothing."""
    cache = RolloutCache()
    body = rollout().to_wire()
    body["metadata"] = {**META, "resourceVersion": "5", "generation": 1}
    entry, _ = cache.observe(body)
    queued = phases.apply(entry.rollout_status, Trigger.QUEUED, reason="QuotaExceeded", message="m", generation=1)
    first = entry.status_delta(queued.status)
    assert first["phase"] == "Queued" and first["queue"]["reason"] == "QuotaExceeded"
    body["status"] = {**first}
    body["metadata"] = {**body["metadata"], "resourceVersion": "6"}
    entry, _ = cache.observe(body)
    again = phases.apply(entry.rollout_status, Trigger.QUEUED, reason="QuotaExceeded", message="m", generation=1)
    assert entry.status_delta(again.status) == {}
    other = phases.apply(entry.rollout_status, Trigger.QUEUED, reason="Unschedulable", message="m", generation=1)
    delta = entry.status_delta(other.status)
    assert delta["queue"] == {"reason": "Unschedulable"} and "phase" not in delta and "startTime" not in delta
    assert {c["type"]: c["reason"] for c in delta["conditions"]} == {"SandboxReady": "Unschedulable"}
    # An explicit null clears what is there, and only that.
    handle = api.SandboxHandle.model_validate({"pod_name": "r1-a1", "pod_ip": None})
    assert entry.status_delta(api.SWERolloutStatus(sandbox=handle)) == {"sandbox": {"podName": "r1-a1"}}


def _millicores(quantity: str | None) -> int:
    if not quantity:
        return 0
    return int(quantity[:-1]) if quantity.endswith("m") else int(float(quantity) * 1000)


def _scheduled_cpu(pod: dict[str, Any]) -> int:
    """What the scheduler reserves: the larger of the biggest init container and the containers' sum."""

    def cpu(c: dict[str, Any]) -> int:
        return _millicores(c.get("resources", {}).get("requests", {}).get("cpu"))

    spec = pod["spec"]
    return max(
        max((cpu(c) for c in spec.get("initContainers", [])), default=0), sum(cpu(c) for c in spec["containers"])
    )


@pytest.mark.parametrize("role", ["rollout", "eval"])
def test_the_bundle_copy_never_raises_a_pods_cpu_request_past_its_containers(role: str) -> None:
    settings = OperatorSettings(runner_resources={"requests": {"cpu": "10m", "memory": "64Mi"}})
    small = rollout(sandbox={"resources": {"requests": {"cpu": "20m", "memory": "256Mi"}}})
    pod = podspec.rollout_pod(small, META, settings, attempt=1, role=role)
    assert [c["name"] for c in pod["spec"]["initContainers"]] == [podspec.BUNDLE_CONTAINER]
    assert _scheduled_cpu(pod) == 30
    unset = OperatorSettings(runner_resources={"limits": {"memory": "1Gi"}})
    bare = podspec.rollout_pod(rollout(), META, unset, attempt=1, role=role)
    assert "cpu" not in bare["spec"]["initContainers"][0]["resources"]["requests"]
