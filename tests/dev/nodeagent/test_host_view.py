"""What of the host a container sees under bubblewrap: the same short list for both container kinds.

A runner image container parses model output, so it must not reach Kubernetes
credentials any more than a sandbox may: files planted where they live on a
developer's machine (a kubeconfig in HOME, a dev stack's state in a checkout,
admin certificates under /var/tmp, a root-only admin.conf in /etc) and the session control plane's own admin
kubeconfig are unreadable from both containers of one pod, while the runner
still imports our packages and loads a bundled tokenizer and one from a host
directory the node agent shows runners only (``--runner-path``).
"""

from __future__ import annotations

import json
import secrets
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from swerollout.kube import PODS, KubeClient
from swerollout.tokenizers import resolve_tokenizer_dir
from swerollout_dev.controlplane import ControlPlane
from swerollout_dev.nodeagent.layout import container_logs, find_pod_dirs
from tests.support.nodeagent_support import AgentProcess, phase_is, pod_manifest, wait_pod

RUNNER = "swerollout:dev"
CHECKOUT = Path(__file__).parents[3]

# Prints one JSON line: each path -> "blocked", or what could be read of it.
_TRY_READ = (
    "import json, sys\n"
    "def attempt(path):\n"
    "    try:\n"
    "        with open(path) as f:\n"
    "            return 'read: ' + f.read(40)\n"
    "    except OSError:\n"
    "        return 'blocked'\n"
    "print(json.dumps({p: attempt(p) for p in sys.argv[1:]}), flush=True)\n"
)
# What a rollout's runner needs: our packages (an editable install imports them from the
# checkout) and a tokenizer: a bundled one, extracted into its HOME's cache, and the same
# one from a host directory the agent was told to show runners (--runner-path).
_RUNNER_WORKS = (
    "import os, agent_runner.agent.loop, swerollout_operator, tokenizers\n"
    "from swerollout.tokenizers import resolve_tokenizer_dir\n"
    "for name in ('qwen-2.5', os.environ['TOKENIZER_DIR']):\n"
    "    tok = tokenizers.Tokenizer.from_file(str(resolve_tokenizer_dir(name) / 'tokenizer.json'))\n"
    "    print('runner tokens:', len(tok.encode('def add(a, b): return a + b').ids), flush=True)\n"
)


@pytest.fixture
def planted(control_plane: ControlPlane) -> Iterator[list[Path]]:
    """Secrets where a developer's machine keeps them; the session's real admin kubeconfig last."""
    tag = secrets.token_hex(4)
    dirs = [
        Path.home() / f".swerollout-view-{tag}",
        CHECKOUT / ".swerollout" / f"view-{tag}",
        Path("/var/tmp") / f"swerollout-view-{tag}",
        Path("/etc") / f"swerollout-view-{tag}",
    ]
    files = [
        dirs[0] / ".kube" / "config",
        dirs[1] / "dev" / "admin.kubeconfig",
        dirs[2] / "pki" / "admin.key",
        dirs[3] / "admin.conf",
    ]
    try:
        for f in files:
            f.parent.mkdir(parents=True)
            f.write_text(f"secret {tag}\n")
            f.chmod(0o644)  # readable by anyone on the host: only the container's view may stop it
        # As /etc/kubernetes/admin.conf on a kubeadm node: in a visible directory, readable by its owner
        # only, and under a root node agent the container's user maps to that owner.
        files[3].chmod(0o600)
        yield [*files, control_plane.kubeconfig_path]
    finally:
        for d in dirs:
            shutil.rmtree(d, ignore_errors=True)


def task_repo(path: Path) -> None:
    env = {
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@x",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@x",
        "PATH": "/usr/bin:/bin",
    }
    path.mkdir()
    (path / "README").write_text("task\n")
    subprocess.run(["git", "init", "-q", str(path)], check=True, env=env)
    subprocess.run(["git", "-C", str(path), "add", "."], check=True, env=env)
    subprocess.run(["git", "-C", str(path), "commit", "-q", "-m", "task"], check=True, env=env)


def test_no_container_reads_host_credentials_and_the_runner_still_works(
    agent_factory: Callable[..., AgentProcess],
    kube: KubeClient,
    namespace: str,
    tmp_path: Path,
    planted: list[Path],
) -> None:
    tokenizer = tmp_path / "tokenizer"
    shutil.copytree(resolve_tokenizer_dir("qwen-2.5"), tokenizer)
    agent = agent_factory("--runner-path", str(tokenizer))  # no --hide: the view itself must keep these out
    paths = [str(p) for p in planted]
    for p in planted:  # the host really has them, readable
        assert p.read_text()
    task_repo(tmp_path / "task")
    shown = str(tokenizer / "tokenizer_config.json")
    kube.create(
        PODS,
        pod_manifest(
            "view",
            agent.node,
            [
                {
                    "name": "runner",
                    "image": RUNNER,
                    "command": ["python", "-c", _RUNNER_WORKS + _TRY_READ, *paths],
                    "env": [{"name": "TOKENIZER_DIR", "value": str(tokenizer)}],
                },
                {
                    "name": "sandbox",
                    "image": f"file://{tmp_path / 'task'}",
                    "workingDir": "/testbed",
                    "command": ["python3", "-c", _TRY_READ, *paths, shown],
                },
            ],
            restartPolicy="Never",
        ),
        namespace,
    )
    try:
        pod = wait_pod(kube, namespace, "view", phase_is("Succeeded", "Failed"), timeout=180)
        [pod_dir] = find_pod_dirs(agent.root, namespace, "view")
        logs = {c: container_logs(pod_dir, c)[-1].read_text() for c in ("runner", "sandbox")}
        assert pod["status"]["phase"] == "Succeeded", logs
        isolated = next(c for c in pod["status"]["conditions"] if c["type"] == "swerollout.io/Isolated")
        assert isolated["status"] == "True", isolated
        counts = [int(line.split(":")[1]) for line in logs["runner"].splitlines() if line.startswith("runner tokens:")]
        assert len(counts) == 2 and counts[0] == counts[1] > 0, logs["runner"]
        for container, out in logs.items():
            report = json.loads(out.strip().splitlines()[-1])
            assert {p: report[p] for p in paths} == {p: "blocked" for p in paths}, (container, out)
        # the runner path is the runner's alone
        assert json.loads(logs["sandbox"].strip().splitlines()[-1])[shown] == "blocked", logs["sandbox"]
    finally:
        kube.delete(PODS, "view", namespace, grace_period_seconds=1)
        wait_pod(kube, namespace, "view", lambda p: not p, timeout=30)
