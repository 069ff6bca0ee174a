"""A script that ends without closing its RolloutClient still exits: the portal thread is
closed by threading's pre-join exit hook (README's trainer block once hung here for good)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u, namespace: default}}]
current-context: x
"""


def test_a_script_that_never_closes_its_client_exits(tmp_path: Path) -> None:
    (tmp_path / "kubeconfig").write_text(KUBECONFIG)  # connect() reads it; nothing is contacted
    script = "from swerollout.client import RolloutClient\nclient = RolloutClient.connect('kubeconfig')\nprint('ok')\n"
    # Generous for a loaded machine: the import alone takes seconds; before the fix it never ended.
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0 and done.stdout == "ok\n", done.stderr[-3000:]
