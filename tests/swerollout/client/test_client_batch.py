"""abort(batch)/resume(batch) through the SWERolloutBatch object, against the real API
server: one write per batch, the members' own flags, and resuming by name a member of a
suspended batch (the rest of the batch stays suspended throughout)."""

from __future__ import annotations

import pytest

from swerollout.api.v1alpha1 import SWERolloutBatchSpec, is_suspended
from swerollout.client import AsyncRolloutClient, ClientConfigError
from swerollout.kube import SWEROLLOUTBATCHES, SWEROLLOUTS, AsyncKubeClient, NotFound
from swerollout.store import ResultStore
from tests.support.client_support import INFERENCE, finish, instance, make_trajectory, run


async def _state(akube: AsyncKubeClient, namespace: str, batch: str) -> dict[str, bool]:
    """Each member's effective suspension (the operator's rule), read from the server."""
    try:
        spec = SWERolloutBatchSpec.model_validate((await akube.get(SWEROLLOUTBATCHES, batch, namespace))["spec"])
    except NotFound:
        spec = None
    items = (await akube.list(SWEROLLOUTS, namespace, label_selector=f"swerollout.io/batch={batch}"))["items"]
    return {o["metadata"]["name"]: is_suspended(bool(o["spec"].get("suspend")), spec) for o in items}


async def test_resuming_a_batch_also_clears_members_suspended_by_name(
    client: AsyncRolloutClient, akube: AsyncKubeClient, namespace: str
) -> None:
    names = await client.submit_batch([instance(0), instance(1)], 1, batch="bn", inference=INFERENCE)
    assert await client.abort(names=["bn-0-0"]) == ["bn-0-0"]
    assert await client.abort("bn") == ["bn-1-0"], "bn-0-0 was suspended already"
    assert await _state(akube, namespace, "bn") == {"bn-0-0": True, "bn-1-0": True}
    assert await client.resume("bn", weight_version="v7") == names
    assert await _state(akube, namespace, "bn") == {"bn-0-0": False, "bn-1-0": False}
    batch = await akube.get(SWEROLLOUTBATCHES, "bn", namespace)
    assert batch["spec"] == {"suspend": False, "weightVersion": "v7"}
    # The weight version goes to the batch object (one write), not to each member.
    assert "weightVersion" not in (await akube.get(SWEROLLOUTS, "bn-0-0", namespace))["spec"]["inference"]
    # A later resume without a version keeps the batch's: it says which weights run from now on.
    assert await client.resume("bn") == []
    assert (await akube.get(SWEROLLOUTBATCHES, "bn", namespace))["spec"]["weightVersion"] == "v7"


async def test_resume_by_name_inside_a_suspended_batch(
    client: AsyncRolloutClient, akube: AsyncKubeClient, store: ResultStore, namespace: str
) -> None:
    await client.submit_batch([instance(0), instance(1), instance(2)], 1, batch="sp", inference=INFERENCE)
    await run(akube, namespace, "sp-0-0")
    await finish(akube, store, namespace, "sp-2-0", trajectory=make_trajectory(4))
    assert await client.abort("sp") == ["sp-0-0", "sp-1-0"]
    before = {
        o["metadata"]["name"]: o["metadata"]["resourceVersion"]
        for o in (await akube.list(SWEROLLOUTS, namespace))["items"]
    }

    assert await client.resume(names=["sp-0-0"]) == ["sp-0-0"]
    state = await _state(akube, namespace, "sp")
    assert state["sp-0-0"] is False and state["sp-1-0"] is True, state
    # The rest of the batch is now suspended by name; the finished member was not written.
    after = {o["metadata"]["name"]: o for o in (await akube.list(SWEROLLOUTS, namespace))["items"]}
    assert after["sp-1-0"]["spec"]["suspend"] is True
    assert after["sp-2-0"]["metadata"]["resourceVersion"] == before["sp-2-0"]
    assert (await akube.get(SWEROLLOUTBATCHES, "sp", namespace))["spec"]["suspend"] is False

    # The last intent wins: the batch suspended again suspends sp-0-0 again; its resume resumes all.
    assert await client.abort("sp") == ["sp-0-0"]
    assert await client.resume("sp") == ["sp-0-0", "sp-1-0"]
    assert await _state(akube, namespace, "sp") == {"sp-0-0": False, "sp-1-0": False, "sp-2-0": False}


async def test_a_named_weight_version_that_the_batch_would_override_is_refused(
    client: AsyncRolloutClient, akube: AsyncKubeClient, namespace: str
) -> None:
    await client.submit_batch([instance(0)], 2, batch="wv", inference=INFERENCE)
    await client.abort("wv")
    await client.resume("wv", weight_version="5")
    await client.abort(names=["wv-0-0"])
    with pytest.raises(ClientConfigError, match=r"resume\('wv', weight_version=\.\.\.\)") as info:
        await client.resume(names=["wv-0-0"], weight_version="6")
    assert "\n" not in str(info.value)
    assert (await _state(akube, namespace, "wv"))["wv-0-0"] is True, "nothing was written"
    assert await client.resume(names=["wv-0-0"], weight_version="5") == ["wv-0-0"]
