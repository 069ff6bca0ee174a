"""An install from before SWERolloutBatch (its CRD set has only SWERollout; `helm upgrade`
never adds a CRD) keeps working, and the documented upgrade step (README, the chart's
NOTES, docs/client.md) turns batch abort/resume into one write, against a real API
server of its own (the session's has both CRDs)."""

from __future__ import annotations

import logging
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from swerollout.client import AsyncRolloutClient, BatchProgress, aclient
from swerollout.kube import NAMESPACES, SWEROLLOUTBATCHES, SWEROLLOUTS, NotFound
from swerollout_dev.binaries import find_binaries
from swerollout_dev.controlplane import ControlPlane
from tests.support.client_support import INFERENCE, instance
from tests.support.cluster import BATCH_CRD_NAME, CRD_NAME, wait_established

# Its own control plane (an old install): not for make test-unit.
pytestmark = pytest.mark.cluster

ROOT = Path(__file__).resolve().parents[3]
CHART = ROOT / "helm" / "swerollout"


@pytest.fixture
def old_install(tmp_path: Path) -> Iterator[ControlPlane]:
    plane = ControlPlane(tmp_path)
    plane.start()
    try:
        applied = plane.kubectl("apply", "--server-side", "-f", str(ROOT / "crds" / "swerollout.io_swerollouts.yaml"))
        assert applied.returncode == 0, applied.stderr
        wait_established(plane, CRD_NAME)
        yield plane
    finally:
        plane.stop(delete_data=True)


def served(plane: ControlPlane, short_name: str) -> None:
    """Wait until discovery lists the resource (it can lag the Established condition)."""
    deadline = time.monotonic() + 60
    while plane.kubectl("get", short_name, "-A").returncode != 0:
        assert time.monotonic() < deadline, f"the API server never served {short_name}"
        time.sleep(0.2)


async def test_an_install_without_the_batch_crd_works_and_the_documented_step_enables_batches(
    old_install: ControlPlane, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(aclient.log, "disabled", False)
    caplog.set_level(logging.WARNING, logger=aclient.log.name)
    async with old_install.admin_async_client() as kube:
        await kube.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "train"}})
        async with AsyncRolloutClient.connect(old_install.kubeconfig_path, namespace="train") as client:
            names = await client.submit_batch([instance(0)], 2, batch="old", inference=INFERENCE)
            assert await client.abort("old", inference=False) == names
            assert any("does not serve swerolloutbatches" in r.getMessage() for r in caplog.records)
            # Each member carries its own mark, and every reader says so.
            assert all(o["spec"]["suspend"] for o in (await kube.list(SWEROLLOUTS, "train"))["items"])
            assert await client.batch_specs() == {}
            state = BatchProgress.from_objects("old", await client.members("old"), await client.batch_specs())
            assert {(m.suspend, m.suspended_by) for m in state.members} == {(True, "spec.suspend")}
            assert await client.resume("old") == names

        # The documented step: the chart's CRDs, applied with kubectl (helm upgrade does not).
        crds = subprocess.run(
            [str(find_binaries().helm), "show", "crds", str(CHART)],
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        ).stdout
        applied = old_install.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", input=crds)
        assert applied.returncode == 0, applied.stderr
        wait_established(old_install, BATCH_CRD_NAME)
        served(old_install, "swerb")

        caplog.clear()
        async with AsyncRolloutClient.connect(old_install.kubeconfig_path, namespace="train") as client:
            assert await client.abort("old", inference=False) == names
            assert not any("does not serve" in r.getMessage() for r in caplog.records)
            # One write to the batch object; no member was marked.
            assert (await kube.get(SWEROLLOUTBATCHES, "old", "train"))["spec"] == {"suspend": True}
            assert not any(o["spec"]["suspend"] for o in (await kube.list(SWEROLLOUTS, "train"))["items"])
            state = BatchProgress.from_objects("old", await client.members("old"), await client.batch_specs())
            assert {(m.suspend, m.suspended_by) for m in state.members} == {(True, "batch old")}
            assert await client.delete_batch("old") == names
        with pytest.raises(NotFound):
            await kube.get(SWEROLLOUTBATCHES, "old", "train")
