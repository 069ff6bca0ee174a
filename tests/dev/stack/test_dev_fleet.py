"""`swerollout dev up --policy oracle --engines 2 --gateway smg`: two stand-in engines and the
real smg in front of them, keyed as in production, a rollout through the gateway, and all of
it stopped by `dev down`."""

from __future__ import annotations

import asyncio
import base64
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from swerollout import fleet
from swerollout.kube import SECRETS
from swerollout_dev.stack.paths import DevPaths
from swerollout_dev.stack.state import DevState
from tests.support.devstack import dump, running_dev_stack


def cli(*args: str, timeout: float = 400) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "swerollout.cli.main", *args], capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture
def workdir(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path
    cli("dev", "down", "--workdir", str(tmp_path))


def test_engines_and_a_gateway_need_a_policy(workdir: Path) -> None:
    for extra in (["--engines", "2"], ["--gateway", "smg"]):
        refused = cli("dev", "up", "--workdir", str(workdir), *extra)
        assert refused.returncode == 2 and "give --policy too" in refused.stderr, refused.stderr
    refused = cli("dev", "up", "--workdir", str(workdir), "--policy", "null", "--engines", "0")
    assert refused.returncode == 2 and "--engines must be 1 to 16" in refused.stderr
    assert DevState.read(DevPaths.under(workdir).state) is None


def test_dev_up_runs_engines_behind_the_real_gateway_and_a_rollout_through_it(tmp_path: Path) -> None:
    with running_dev_stack(tmp_path, "--engines", "2", "--gateway", "smg") as stack:
        paths, state = stack.paths, stack.state()
        assert len(state.engine_urls) == 2 and state.sglang_url not in state.engine_urls
        for name in ("policy-server", "policy-server-2", "gateway"):
            assert state.components[name].alive(), name
        key = paths.inference_admin_key.read_text().strip()
        auth = {"Authorization": f"Bearer {key}"}
        body = {"input_ids": [11, 12, 13], "sampling_params": {"max_new_tokens": 2}}
        # The gateway requires its key (the engines' admin key) of every caller.
        assert httpx.post(f"{state.sglang_url}/generate", json=body, timeout=60).status_code == 401
        assert httpx.post(f"{state.sglang_url}/generate", json=body, headers=auth, timeout=60).status_code == 200

        async def abort_everywhere() -> list[fleet.EngineAnswer]:
            async with httpx.AsyncClient() as http:
                return await fleet.abort_all(http, state.sglang_url, headers=auth, timeout=10)

        answers = asyncio.run(abort_everywhere())
        assert sorted(a.engine for a in answers) == sorted(state.engine_urls) and all(a.ok for a in answers)
        assert state.api_key_secret_ref() == {"name": "swerollout-inference-keys", "key": "api-key"}
        data = stack.kube.get(SECRETS, "swerollout-inference-keys", "default")["data"]
        assert {k: base64.b64decode(v).decode() for k, v in data.items()} == {"admin-key": key, "api-key": key}

        # A rollout through the gateway (its pod reaches only the gateway): every turn on one engine.
        created = stack.rollout("via-gateway", endpoint=state.sglang_url)
        done = stack.wait_phase("via-gateway", {"Succeeded", "Failed"}, timeout=600)
        assert done["phase"] == "Succeeded", dump(done)
        prefix = f"{created['metadata']['uid']}-t"
        with httpx.Client(timeout=10) as http:
            served = [
                engine
                for engine in state.engine_urls
                for record in http.get(f"{engine}/_standin/requests").json()["requests"]
                if record["rid"].startswith(prefix)
            ]
        assert served and len(set(served)) == 1, served
    assert not any(state.components[n].alive() for n in ("policy-server", "policy-server-2", "gateway"))
