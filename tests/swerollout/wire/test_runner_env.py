"""The pod -> runner environment contract: written by the operator, read by the runner."""

from __future__ import annotations

from pathlib import Path

import pytest

from swerollout.wire.runner_env import ENV_NAMES, POD_LOOPBACK_ENV, InferenceKeys, RunnerEnv, RunnerEnvError, RunnerRole


def _env(tmp_path: Path) -> RunnerEnv:
    (tmp_path / "ingest").write_text("tok-ingest\n")
    (tmp_path / "swerex").write_text("tok-swerex")
    return RunnerEnv(
        role=RunnerRole.EVAL,
        ingest_url="http://op:8081",
        namespace="ns",
        name="r-1",
        uid="u-1",
        attempt=3,
        ingest_token_file=str(tmp_path / "ingest"),
        swerex_url="http://127.0.0.1:8000",
        swerex_token_file=str(tmp_path / "swerex"),
    )


def _as_environ(entries: list[dict[str, object]], pod_name: str) -> dict[str, str]:
    # What a kubelet does: literal values as they are, the downward API resolved.
    out = {}
    for entry in entries:
        out[str(entry["name"])] = str(entry["value"]) if "value" in entry else pod_name
    return out


def test_pod_spec_env_round_trips_into_the_runner(tmp_path: Path) -> None:
    env = _env(tmp_path)
    environ = _as_environ(env.to_env(), "r-1-a3")
    back = RunnerEnv.from_environ({**environ, "UNRELATED": "x"})
    assert back == env.model_copy(update={"pod_name": "r-1-a3"})
    assert back.read_ingest_token() == "tok-ingest" and back.read_swerex_token() == "tok-swerex"
    # Credentials travel as file paths, never as values.
    assert "tok-ingest" not in str(env.to_env())
    # The inference keys' files are named only when the spec references key Secrets; an
    # eval runner (this one) is given no tokenizer to load early.
    optional = {"pod_loopback", "inference_api_key_file", "inference_admin_key_file", "tokenizer"}
    assert set(environ) == {v for k, v in ENV_NAMES.items() if k not in optional}
    assert back.read_inference_keys() == InferenceKeys()


def test_inference_keys_are_read_from_their_files_and_never_printed(tmp_path: Path) -> None:
    (tmp_path / "api").write_text("k-api\n")
    (tmp_path / "admin").write_text("k-admin")
    env = _env(tmp_path).model_copy(
        update={"inference_api_key_file": str(tmp_path / "api"), "inference_admin_key_file": str(tmp_path / "admin")}
    )
    back = RunnerEnv.from_environ(_as_environ(env.to_env(), "p"))
    keys = back.read_inference_keys()
    assert (keys.api_key, keys.admin_key) == ("k-api", "k-admin")
    assert "k-api" not in repr(keys) and "k-admin" not in f"{keys}"
    gone = env.model_copy(update={"inference_admin_key_file": str(tmp_path / "nope")})
    with pytest.raises(RunnerEnvError, match="SWEROLLOUT_INFERENCE_ADMIN_KEY_FILE.*Secret mounted"):
        gone.read_inference_keys()


def test_missing_or_bad_variables_are_named(tmp_path: Path) -> None:
    environ = _as_environ(_env(tmp_path).to_env(), "p")
    del environ["SWEROLLOUT_INGEST_URL"]
    with pytest.raises(RunnerEnvError, match="SWEROLLOUT_INGEST_URL"):
        RunnerEnv.from_environ(environ)
    environ = _as_environ(_env(tmp_path).to_env(), "p") | {"SWEROLLOUT_ATTEMPT": "zero"}
    with pytest.raises(RunnerEnvError, match="SWEROLLOUT_ATTEMPT"):
        RunnerEnv.from_environ(environ)
    environ = _as_environ(_env(tmp_path).to_env(), "p") | {"SWEROLLOUT_ROLE": "judge"}
    with pytest.raises(RunnerEnvError, match="SWEROLLOUT_ROLE"):
        RunnerEnv.from_environ(environ)


def test_unreadable_or_empty_secret_says_so(tmp_path: Path) -> None:
    env = _env(tmp_path).model_copy(update={"ingest_token_file": str(tmp_path / "nope")})
    with pytest.raises(RunnerEnvError, match="SWEROLLOUT_INGEST_TOKEN_FILE.*Secret mounted"):
        env.read_ingest_token()
    (tmp_path / "empty").write_text("  \n")
    with pytest.raises(RunnerEnvError, match="empty"):
        env.model_copy(update={"swerex_token_file": str(tmp_path / "empty")}).read_swerex_token()


def test_node_loopback_rewrites_the_sandbox_url(tmp_path: Path) -> None:
    environ = _as_environ(_env(tmp_path).to_env(), "p") | {POD_LOOPBACK_ENV: "127.3.4.5"}
    assert RunnerEnv.from_environ(environ).sandbox_url() == "http://127.3.4.5:8000"
    assert _env(tmp_path).sandbox_url() == "http://127.0.0.1:8000"
