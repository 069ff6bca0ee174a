"""submit_batch against the real API server: names, labels, idempotence, field ownership, abort/resume."""

from __future__ import annotations

from typing import Any

import pytest

from swerollout.api.v1alpha1 import LABEL_BATCH, LABEL_GROUP_SIZE, LABEL_MEMBER
from swerollout.client import FIELD_MANAGER, LABEL_SAMPLE, AsyncRolloutClient, ClientConfigError
from swerollout.kube import SWEROLLOUTBATCHES, SWEROLLOUTS, AsyncKubeClient, ResourceType, load_kubeconfig
from swerollout.store import ResultStore
from swerollout_dev.controlplane import ControlPlane
from swerollout_dev.tasks import DEFAULT_TASKS_DIR, load_instances
from tests.support.client_support import INFERENCE, finish, instance, make_trajectory, run


async def test_submit_creates_samples_times_members_with_names_and_labels(
    client: AsyncRolloutClient, akube: AsyncKubeClient, namespace: str
) -> None:
    names = await client.submit_batch(
        [instance(0), instance(1), instance(2)],
        2,
        batch="step-7",
        inference=INFERENCE,
        labels={"team": "rl"},
        weight_version="w-11",
        mode="validate",
    )
    expected = [f"step-7-{s}-{m}" for s in range(3) for m in range(2)]
    assert names == expected
    items = (await akube.list(SWEROLLOUTS, namespace))["items"]
    assert sorted(o["metadata"]["name"] for o in items) == sorted(expected)
    for obj in items:
        _, sample, member = obj["metadata"]["name"].rsplit("-", 2)
        labels = obj["metadata"]["labels"]
        assert labels[LABEL_BATCH] == "step-7"
        assert labels[LABEL_SAMPLE] == sample and labels[LABEL_MEMBER] == member
        assert labels[LABEL_GROUP_SIZE] == "2", "the group's size: under Kueue its pods are one pod group"
        assert labels["team"] == "rl"
        assert obj["spec"]["instance"]["instanceId"] == f"demo__lib-{sample}"
        assert obj["spec"]["inference"]["weightVersion"] == "w-11"
        assert obj["spec"]["mode"] == "validate"
        managers = {(m["manager"], m["operation"]) for m in obj["metadata"]["managedFields"]}
        assert (FIELD_MANAGER, "Apply") in managers
        # The client never owns spec.suspend, so re-submitting cannot resume an aborted member.
        owned = next(m for m in obj["metadata"]["managedFields"] if m["manager"] == FIELD_MANAGER)
        assert "f:suspend" not in owned["fieldsV1"]["f:spec"]


async def test_resubmitting_the_same_batch_changes_nothing(
    client: AsyncRolloutClient, akube: AsyncKubeClient, namespace: str
) -> None:
    await client.submit_batch([instance(0), instance(1)], 3, batch="again", inference=INFERENCE)
    before = {
        o["metadata"]["name"]: o["metadata"]["resourceVersion"]
        for o in (await akube.list(SWEROLLOUTS, namespace))["items"]
    }
    await client.abort("again")
    # The batch is suspended by its SWERolloutBatch: not one member is written.
    suspended = {
        o["metadata"]["name"]: o["metadata"]["resourceVersion"]
        for o in (await akube.list(SWEROLLOUTS, namespace))["items"]
    }
    assert suspended == before
    assert (await akube.get(SWEROLLOUTBATCHES, "again", namespace))["spec"]["suspend"] is True
    names = await client.submit_batch([instance(0), instance(1)], 3, batch="again", inference=INFERENCE)
    after = (await akube.list(SWEROLLOUTS, namespace))["items"]
    assert len(names) == len(before) == len(after) == 6
    assert {o["metadata"]["name"]: o["metadata"]["resourceVersion"] for o in after} == suspended
    # Re-submitting writes nothing, so it resumes nothing either.
    assert (await akube.get(SWEROLLOUTBATCHES, "again", namespace))["spec"]["suspend"] is True


async def test_submit_accepts_swebench_jsonl_instances(
    client: AsyncRolloutClient, akube: AsyncKubeClient, namespace: str
) -> None:
    instances = load_instances(DEFAULT_TASKS_DIR / "instances.jsonl")[:2]
    await client.submit_batch(instances, 1, batch="jsonl", inference=INFERENCE)
    obj = await akube.get(SWEROLLOUTS, "jsonl-1-0", namespace)
    assert obj["spec"]["instance"]["instanceId"] == instances[1].instance_id
    assert obj["spec"]["instance"]["evaluation"]["failToPass"] == instances[1].FAIL_TO_PASS


async def test_a_batch_name_reused_with_other_instances_is_refused(client: AsyncRolloutClient) -> None:
    await client.submit_batch([instance(0)], 1, batch="reuse", inference=INFERENCE)
    with pytest.raises(ClientConfigError, match="choose a new batch name"):
        await client.submit_batch([instance(5)], 1, batch="reuse", inference=INFERENCE)


@pytest.mark.parametrize("batch", ["Upper", "with_underscore", "-lead", "x" * 41, ""])
async def test_bad_batch_names_are_refused_before_any_request(client: AsyncRolloutClient, batch: str) -> None:
    with pytest.raises(ClientConfigError, match="batch name"):
        await client.submit_batch([instance(0)], 1, batch=batch, inference=INFERENCE)


async def test_invalid_inputs_name_the_problem(client: AsyncRolloutClient) -> None:
    with pytest.raises(ClientConfigError, match="group_size"):
        await client.submit_batch([instance(0)], 0, batch="b", inference=INFERENCE)
    with pytest.raises(ClientConfigError, match="instances is empty"):
        await client.submit_batch([], 1, batch="b", inference=INFERENCE)
    with pytest.raises(ClientConfigError, match="instance #1"):
        await client.submit_batch([instance(0), {"instanceId": "x"}], 1, batch="b", inference=INFERENCE)
    with pytest.raises(ClientConfigError, match="endpoint"):
        await client.submit_batch([instance(0)], 1, batch="b", inference={"endpoint": "not a url"})
    with pytest.raises(ClientConfigError, match="inference.tokenizer is required"):
        await client.submit_batch([instance(0)], 1, batch="b", inference={"endpoint": "http://127.0.0.1:9"})
    with pytest.raises(ClientConfigError, match="set by the client"):
        await client.submit_batch([instance(0)], 1, batch="b", inference=INFERENCE, labels={LABEL_BATCH: "x"})
    # A template typo is refused at submit, in one line naming the template (the operator and
    # the runner refuse it the same way).
    with pytest.raises(ClientConfigError) as typo:
        await client.submit_batch(
            [instance(0)], 1, batch="b", inference=INFERENCE, agent={"templates": {"instanceTemplate": "{{ problem }}"}}
        )
    assert str(typo.value).startswith(
        "the rollout spec is not valid: spec.agent.templates.instanceTemplate: instance_template uses unknown variable(s) ['problem']"
    )
    assert "\n" not in str(typo.value)


async def test_abort_and_resume_touch_only_unfinished_members(
    client: AsyncRolloutClient, akube: AsyncKubeClient, store: ResultStore, namespace: str
) -> None:
    await client.submit_batch([instance(0), instance(1)], 2, batch="ab", inference=INFERENCE)
    await run(akube, namespace, "ab-0-0")
    await finish(akube, store, namespace, "ab-0-1", trajectory=make_trajectory(1))
    await finish(akube, store, namespace, "ab-1-0", trajectory=make_trajectory(2, "exit_error"), phase="Failed")

    assert await client.abort("ab") == ["ab-0-0", "ab-1-1"]
    assert (await akube.get(SWEROLLOUTBATCHES, "ab", namespace))["spec"] == {"suspend": True}
    assert await client.abort("ab") == []  # already suspended: nothing to write

    await finish(akube, store, namespace, "ab-1-1", trajectory=make_trajectory(3))
    assert await client.resume("ab") == ["ab-0-0"]
    assert (await akube.get(SWEROLLOUTBATCHES, "ab", namespace))["spec"] == {"suspend": False}
    suspend = {
        o["metadata"]["name"]: o["spec"].get("suspend") for o in (await akube.list(SWEROLLOUTS, namespace))["items"]
    }
    assert suspend == {"ab-0-0": False, "ab-0-1": False, "ab-1-0": False, "ab-1-1": False}


async def test_a_member_that_finishes_during_abort_is_left_alone(
    crd: ControlPlane, akube: AsyncKubeClient, store: ResultStore, store_url: str, namespace: str
) -> None:
    class FinishFirstDuringPatch(AsyncKubeClient):
        """Lets race-0-0 finish between the client's read and its patch (the race abort must survive)."""

        raced = False

        async def patch(self, rt: ResourceType, name: str, patch: Any, namespace: str | None = None, **kw: Any) -> Any:
            if name == "race-0-0" and kw.get("patch_type") == "json" and not self.raced:
                self.raced = True
                await finish(akube, store, namespace or "", name, trajectory=make_trajectory(9))
            return await super().patch(rt, name, patch, namespace, **kw)

    kube = FinishFirstDuringPatch(load_kubeconfig(crd.kubeconfig_path))
    async with AsyncRolloutClient(kube, namespace, store_url=store_url, owns_kube=True) as client:
        names = await client.submit_batch([instance(0)], 3, batch="race", inference=INFERENCE)
        assert await client.abort(names=names) == ["race-0-1", "race-0-2"]
        assert kube.raced
    suspend = {o["metadata"]["name"]: o["spec"]["suspend"] for o in (await akube.list(SWEROLLOUTS, namespace))["items"]}
    assert suspend == {"race-0-0": False, "race-0-1": True, "race-0-2": True}


async def test_member_inference_gives_each_group_member_its_own_policy(
    client: AsyncRolloutClient, akube: AsyncKubeClient, namespace: str
) -> None:
    oracle = {**INFERENCE, "endpoint": "http://oracle:30000"}
    null = {**INFERENCE, "endpoint": "http://null:30000"}
    await client.submit_batch(
        [instance(0), instance(1)],
        2,
        batch="ab",
        inference=INFERENCE,
        member_inference=[oracle, null],
        weight_version="w-3",
    )
    items = (await akube.list(SWEROLLOUTS, namespace))["items"]
    endpoints = {o["metadata"]["name"]: o["spec"]["inference"]["endpoint"] for o in items}
    assert endpoints == {
        "ab-0-0": "http://oracle:30000",
        "ab-0-1": "http://null:30000",
        "ab-1-0": "http://oracle:30000",
        "ab-1-1": "http://null:30000",
    }
    assert {o["spec"]["inference"]["weightVersion"] for o in items} == {"w-3"}
    with pytest.raises(ClientConfigError, match="one per group member"):
        await client.submit_batch([instance(0)], 3, batch="ab2", inference=INFERENCE, member_inference=[oracle, null])


async def test_issue_images_for_a_text_only_template_are_refused_at_submit(
    client: AsyncRolloutClient, akube: AsyncKubeClient, namespace: str
) -> None:
    """Never a silent drop: refused for qwen-2.5's text-only template, accepted as Links or for a vision tokenizer."""
    shot = {**instance(7), "issueImages": ["https://user-images.example/a.png"]}
    with pytest.raises(ClientConfigError) as refused:
        await client.submit_batch([shot], 1, batch="img", inference=INFERENCE)
    assert str(refused.value).startswith(
        "demo__lib-7: spec.inference.tokenizer 'qwen-2.5': its chat template cannot show images"
    )
    assert "spec.agent.issueImageMode: Links" in str(refused.value)
    with pytest.raises(ClientConfigError, match="cannot show images"):
        await client.submit_batch(
            [shot],
            2,
            batch="img",
            inference=INFERENCE,
            member_inference=[{**INFERENCE, "tokenizer": "glm-4.5v"}, INFERENCE],
        )
    await client.submit_batch([shot], 1, batch="img-links", inference=INFERENCE, agent={"issueImageMode": "Links"})
    await client.submit_batch([shot], 1, batch="img-vision", inference={**INFERENCE, "tokenizer": "glm-4.5v"})
    links = await akube.get(SWEROLLOUTS, "img-links-0-0", namespace)
    assert links["spec"]["agent"]["issueImageMode"] == "Links"
    assert links["spec"]["instance"]["issueImages"] == shot["issueImages"]
    assert (await akube.get(SWEROLLOUTS, "img-vision-0-0", namespace))["spec"]["inference"]["tokenizer"] == "glm-4.5v"


async def test_a_tokenizer_that_cannot_spell_ordinary_text_is_refused_at_submit(
    client: AsyncRolloutClient, akube: AsyncKubeClient, namespace: str
) -> None:
    """jiutian-139moe-chat has no newline and no byte fallback: every rollout would record <unk>
    for each newline it saw. Refused before anything is created, batch or one rollout, also as
    one group member's tokenizer; a ChatAgent (the server tokenizes) is not checked."""
    jiutian = {**INFERENCE, "tokenizer": "jiutian-139moe-chat"}
    with pytest.raises(ClientConfigError) as refused:
        await client.submit_batch([instance(0)], 1, batch="unk", inference=jiutian)
    message = str(refused.value)
    assert message.startswith("spec.inference.tokenizer 'jiutian-139moe-chat' cannot encode ordinary text: ")
    assert "'\\n' (newline, U+000A)" in message and "'<unk>'" in message, message
    with pytest.raises(ClientConfigError, match="'jiutian-139moe-chat' cannot encode ordinary text"):
        await client.submit_batch(
            [instance(0)], 2, batch="unk", inference=INFERENCE, member_inference=[INFERENCE, jiutian]
        )
    with pytest.raises(ClientConfigError, match="cannot encode ordinary text"):
        await client.submit_one(instance(0), batch="unk", sample=0, inference=jiutian)
    assert (await akube.list(SWEROLLOUTS, namespace))["items"] == []
    await client.submit_batch([instance(0)], 1, batch="unk-chat", inference=jiutian, agent={"kind": "ChatAgent"})
    assert (await akube.get(SWEROLLOUTS, "unk-chat-0-0", namespace))["spec"]["agent"]["kind"] == "ChatAgent"
