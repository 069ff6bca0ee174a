"""The batch object as users see it, against the real API server: who suspends a member
(list, get, watch, the client's progress), a leftover batch object refused at submit,
`delete --batch`, and the inference admin key of `swerollout abort` from a file or an
environment variable (never argv).

The commands run in this process through the CLI's own entry point (`main(argv)`), not
as subprocesses: the same code path, without paying the CLI's import once per call on a
loaded machine (tests/swerollout/client/test_client_cli.py runs it as a subprocess)."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from swerollout.cli.main import main
from swerollout.client import AsyncRolloutClient, BatchProgress, ClientConfigError, UnknownBatch, aclient
from swerollout.kube import SWEROLLOUTBATCHES, SWEROLLOUTS, AsyncKubeClient, NotFound
from swerollout.store import ResultStore
from swerollout_dev.controlplane import ControlPlane
from swerollout_dev.policy_server.launch import PolicyServerHandle
from tests.support.client_support import INFERENCE, finish, instance, make_trajectory, run


@dataclass(frozen=True)
class Ran:
    returncode: int
    stdout: str
    stderr: str


@pytest.fixture
def swerollout(
    crd: ControlPlane,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> object:
    """``await swerollout("list", "-n", ns)``: the command's exit code and output. The
    client's warnings (logged; a terminal shows them on stderr) are added to stderr."""
    monkeypatch.setenv("KUBECONFIG", str(crd.kubeconfig_path))
    monkeypatch.setenv("COLUMNS", "200")
    # Keep the client's warnings reaching caplog whatever an earlier import did to logging.
    monkeypatch.setattr(aclient.log, "disabled", False)
    caplog.set_level(logging.WARNING, logger=aclient.log.name)

    async def run_cli(*args: str) -> Ran:
        capsys.readouterr()
        caplog.clear()
        code = await asyncio.to_thread(main, list(args))
        out, err = capsys.readouterr()
        return Ran(code, out, err + "".join(r.getMessage() + "\n" for r in caplog.records))

    return run_cli


def row(stdout: str, name: str) -> str:
    [line] = [line for line in stdout.splitlines() if line.split()[:1] == [name]]
    return line


async def test_list_and_get_show_who_suspends_a_member(
    client: AsyncRolloutClient, swerollout: Any, akube: AsyncKubeClient, namespace: str
) -> None:
    await client.submit_batch([instance(0)], 2, batch="ux", inference=INFERENCE)
    await client.submit_batch([instance(1)], 1, batch="other", inference=INFERENCE)
    await run(akube, namespace, "ux-0-1")
    assert await client.abort(names=["ux-0-0"]) == ["ux-0-0"]
    assert await client.abort("ux") == ["ux-0-1"]

    listed = await swerollout("list", "-n", namespace)
    assert listed.returncode == 0, listed.stderr
    assert "SUSPENDED BY" in listed.stdout
    # ux-0-1 has no own flag: before, it read as not suspended.
    assert row(listed.stdout, "ux-0-1").split()[:3] == ["ux-0-1", "ux", "Running"]
    assert "batch ux" in row(listed.stdout, "ux-0-1") and "spec.suspend" not in row(listed.stdout, "ux-0-1")
    assert "spec.suspend and batch ux" in row(listed.stdout, "ux-0-0")
    assert "spec.suspend" not in row(listed.stdout, "other-0-0") and "batch" not in row(listed.stdout, "other-0-0")

    got = await swerollout("get", "ux-0-1", "-n", namespace)
    assert got.returncode == 0, got.stderr
    assert ["Suspended", "yes,", "by", "batch", "ux"] in [line.split() for line in got.stdout.splitlines()]

    assert await client.resume("ux") == ["ux-0-0", "ux-0-1"]
    listed = await swerollout("list", "--batch", "ux", "-n", namespace)
    assert "batch ux" not in listed.stdout.replace("SUSPENDED BY", "") and "spec.suspend" not in listed.stdout
    got = await swerollout("get", "ux-0-1", "-n", namespace)
    assert ["Suspended", "no"] in [line.split() for line in got.stdout.splitlines()]


async def test_wait_reports_the_members_its_batch_suspends(
    client: AsyncRolloutClient, akube: AsyncKubeClient, store: ResultStore, namespace: str
) -> None:
    names = await client.submit_batch([instance(0), instance(1)], 1, batch="wp", inference=INFERENCE)
    await client.abort("wp")
    seen: list[BatchProgress] = []
    waiting = asyncio.create_task(client.wait("wp", progress=seen.append, timeout=120))
    await finish(akube, store, namespace, names[0], trajectory=make_trajectory(3))
    async with asyncio.timeout(60):
        while not any(s.finished == 1 for s in seen):  # the change reached the watch
            await asyncio.sleep(0.05)
    await finish(akube, store, namespace, names[1], trajectory=make_trajectory(4))
    final = await waiting
    assert final.done
    middle = next(s for s in seen if s.finished == 1)
    unfinished = next(m for m in middle.members if m.name == names[1])
    assert (unfinished.suspend, unfinished.suspended_by) == (True, "batch wp")
    assert middle.suspended == 1, "finished members are not counted as suspended"


async def test_a_leftover_suspended_batch_object_is_refused_at_submit(
    client: AsyncRolloutClient, akube: AsyncKubeClient, namespace: str
) -> None:
    names = await client.submit_batch([instance(0)], 1, batch="again", inference=INFERENCE)
    await client.abort("again")
    await client.delete(names)  # the rollouts go; the batch object stays, still suspending
    fresh = AsyncRolloutClient(akube, namespace)  # another run of the trainer (shares the admin connection)
    with pytest.raises(ClientConfigError, match=r"swerollout delete --batch again") as info:
        await fresh.submit_batch([instance(0)], 1, batch="again", inference=INFERENCE)
    assert "\n" not in str(info.value) and "spec.suspend: true" in str(info.value)
    with pytest.raises(ClientConfigError, match="left over"):
        await fresh.submit_one(instance(0), batch="again", sample=0, inference=INFERENCE)
    assert (await akube.list(SWEROLLOUTS, namespace))["items"] == [], "nothing was created"

    # The fix named in the error: delete the batch; then the name starts afresh, not suspended.
    assert await fresh.delete_batch("again") == []
    with pytest.raises(NotFound):
        await akube.get(SWEROLLOUTBATCHES, "again", namespace)
    assert await fresh.submit_batch([instance(0)], 1, batch="again", inference=INFERENCE) == names
    assert not (await fresh.batch_specs())


async def test_submitting_into_a_live_suspended_batch_warns_and_joins_it(
    client: AsyncRolloutClient,
    akube: AsyncKubeClient,
    namespace: str,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(aclient.log, "disabled", False)
    caplog.set_level(logging.WARNING, logger=aclient.log.name)
    await client.submit_one(instance(0), batch="live", sample=0, inference=INFERENCE)
    await client.abort("live")
    # Submitting during a weight update is normal: the new sample joins the suspended batch.
    fresh = AsyncRolloutClient(akube, namespace)
    assert await fresh.submit_one(instance(1), batch="live", sample=1, inference=INFERENCE) == "live-1-0"
    warnings = [r.getMessage() for r in caplog.records if "start suspended" in r.getMessage()]
    assert len(warnings) == 1 and "resume" in warnings[0], warnings
    await fresh.submit_one(instance(2), batch="live", sample=2, inference=INFERENCE)
    assert len([r for r in caplog.records if "start suspended" in r.getMessage()]) == 1, "read once per batch"
    assert await fresh.resume("live") == ["live-0-0", "live-1-0", "live-2-0"]


async def test_delete_batch_removes_the_members_then_the_object(
    client: AsyncRolloutClient, swerollout: Any, akube: AsyncKubeClient, namespace: str
) -> None:
    names = await client.submit_batch([instance(0)], 2, batch="gone", inference=INFERENCE)
    await client.submit_batch([instance(1)], 1, batch="kept", inference=INFERENCE)
    await client.abort("gone")
    await client.abort("kept")

    # Without a terminal the CLI asks for --yes and deletes nothing.
    refused = await swerollout("delete", "--batch", "gone", "-n", namespace)
    assert refused.returncode == 2 and "--yes" in refused.stderr and "2 rollout(s)" in refused.stderr, refused.stderr
    assert len((await akube.list(SWEROLLOUTS, namespace, label_selector="swerollout.io/batch=gone"))["items"]) == 2

    done = await swerollout("delete", "--batch", "gone", "--yes", "-n", namespace)
    assert done.returncode == 0, done.stderr
    assert "deleted 2 rollout(s) of batch gone" in done.stdout
    left = {o["metadata"]["name"] for o in (await akube.list(SWEROLLOUTS, namespace))["items"]}
    assert left == {"kept-0-0"} and not left & set(names)
    with pytest.raises(NotFound):
        await akube.get(SWEROLLOUTBATCHES, "gone", namespace)
    # Other batches and their objects are untouched.
    assert (await akube.get(SWEROLLOUTBATCHES, "kept", namespace))["spec"]["suspend"] is True

    again = await swerollout("delete", "--batch", "gone", "--yes", "-n", namespace)
    assert again.returncode == 2 and "batch 'gone' has no SWERollouts" in again.stderr, again.stderr
    with pytest.raises(UnknownBatch):
        await client.delete_batch("gone")


async def test_cli_abort_reads_the_admin_key_from_a_file_or_an_env_name(
    client: AsyncRolloutClient,
    swerollout: Any,
    namespace: str,
    keyed_server: PolicyServerHandle,
    server_aborts: list[bool],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    inference = {"endpoint": keyed_server.url, "tokenizer": "qwen-2.5"}
    await client.submit_batch([instance(0)], 1, batch="key", inference=inference)
    monkeypatch.delenv("SWEROLLOUT_INFERENCE_ADMIN_KEY", raising=False)

    async def abort(*extra: str) -> Ran:
        try:
            done: Ran = await swerollout("abort", "--batch", "key", "-n", namespace, *extra)
        except SystemExit as exc:  # argparse's own usage errors
            return Ran(int(exc.code or 0), "", "")
        if done.returncode == 0:
            await client.resume("key")
        return done

    refused = await abort()
    assert refused.returncode == 0 and "refused the abort (HTTP 401)" in refused.stderr and server_aborts == []

    key_file = tmp_path / "admin-key"
    key_file.write_text("k-admin\n")
    assert (await abort("--admin-key-file", str(key_file))).returncode == 0
    assert server_aborts == [True]
    monkeypatch.setenv("MY_SGLANG_ADMIN", "k-admin")
    done = await abort("--admin-key-env", "MY_SGLANG_ADMIN")
    assert done.returncode == 0 and "refused" not in done.stderr and server_aborts == [True, True]

    # Bad sources are one-line usage errors naming the flag, before anything is aborted.
    for extra, says in (
        (["--admin-key-env", "NOT_SET_ANYWHERE"], "--admin-key-env NOT_SET_ANYWHERE"),
        (["--admin-key-file", str(tmp_path / "missing")], "cannot read --admin-key-file"),
        (["--admin-key-file", str(key_file), "--admin-key-env", "X"], "not allowed with argument"),
    ):
        bad = await abort(*extra)
        assert bad.returncode == 2 and says in bad.stderr + capsys.readouterr().err, bad.stderr
    assert server_aborts == [True, True]
    spec = await client.batch_spec("key")
    assert spec is not None and spec.suspend is False, "the refused runs suspended nothing"
