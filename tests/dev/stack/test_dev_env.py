"""`swerollout dev env`: the exports a shell evaluates to use a dev stack (the whole round
trip, on a running stack, is README's "To drive it by hand": tests/e2e/test_readme_by_hand.py)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from swerollout.cli.main import main
from swerollout_dev.cli.dev import render_exports, shell_exports
from swerollout_dev.stack.paths import DevPaths
from swerollout_dev.stack.state import ComponentState, DevState


def test_the_exports_survive_any_workdir_name_in_a_real_shell(tmp_path: Path) -> None:
    # A workdir name a shell would split or expand, unquoted.
    paths = DevPaths.under(tmp_path / "my dir $HOME 'x'")
    paths.root.mkdir(parents=True)
    paths.inference_admin_key.write_text("k3y-with-$-and-'\n")
    state = DevState(
        supervisor=ComponentState(status="running", pid=1),
        kubeconfig=str(paths.kubeconfig),
        status="ready",
        sglang_url="http://127.0.0.1:41234",
        inference_admin_key_secret="swerollout-inference-keys/admin-key",
    )
    bins = tmp_path / "bin dir"
    script = "\n".join(render_exports(shell_exports(paths, state, str(bins))))
    names = (
        "KUBECONFIG",
        "PATH",
        "SWEROLLOUT_STORE_URL",
        "SWEROLLOUT_ENDPOINT",
        "SWEROLLOUT_ADMIN_KEY_SECRET",
        "SWEROLLOUT_INFERENCE_ADMIN_KEY",
    )
    shown = subprocess.run(
        ["bash", "-c", script + "\n" + "".join(f'printf "%s\\0" "${n}"\n' for n in names)],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
        env={"PATH": "/usr/bin:/bin", "HOME": "/nonexistent"},
    ).stdout.split("\0")[:-1]
    assert dict(zip(names, shown)) == {
        "KUBECONFIG": str(paths.kubeconfig),
        "PATH": f"{bins}:/usr/bin:/bin",  # kubectl and helm first, the shell's own PATH kept
        "SWEROLLOUT_STORE_URL": paths.store.as_uri(),  # --store-url's default for results, view, logs
        "SWEROLLOUT_ENDPOINT": "http://127.0.0.1:41234",
        "SWEROLLOUT_ADMIN_KEY_SECRET": "swerollout-inference-keys/admin-key",  # submit --admin-key-secret
        "SWEROLLOUT_INFERENCE_ADMIN_KEY": "k3y-with-$-and-'",  # the client's and `swerollout abort`'s key
    }


def test_without_a_policy_server_there_is_no_endpoint_or_key(tmp_path: Path) -> None:
    paths = DevPaths.under(tmp_path)
    state = DevState(supervisor=ComponentState(), kubeconfig=str(paths.kubeconfig), status="ready")
    assert [name for name, _ in shell_exports(paths, state, "/bins")] == ["KUBECONFIG", "PATH", "SWEROLLOUT_STORE_URL"]


def test_no_running_stack_is_one_line_and_exit_3(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["dev", "env", "--workdir", str(tmp_path)]) == 3
    captured = capsys.readouterr()
    assert captured.out == ""  # nothing an `eval` would run
    assert (
        captured.err
        == f"error: no dev environment is running in {DevPaths.under(tmp_path).root}: `swerollout dev up` first\n"
    )
