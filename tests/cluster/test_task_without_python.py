"""A task image with no Python at all: only Debian's essential set, git, patch and the
libraries the swerex bundle needs. The init container copies the bundle in, swerex runs
from it, and an oracle rollout on a shell task is solved and graded with reward 1."""

from __future__ import annotations

import json
import re
import subprocess
import tarfile
from pathlib import Path

from swerollout.instances import SWEBenchInstance, write_instances
from swerollout_dev.cluster import images
from swerollout_dev.cluster.taskimages import MINIMAL_PACKAGES, REGISTRY, repo_image
from swerollout_dev.policy_server.launch import launch
from tests.support.realnode import TERMINAL, RealNode, Rollouts

GIT_ENV = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.invalid",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.invalid",
    "GIT_AUTHOR_DATE": "2024-01-01T00:00:00+0000",
    "GIT_COMMITTER_DATE": "2024-01-01T00:00:00+0000",
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_CONFIG_NOSYSTEM": "1",
    "PATH": "/usr/bin:/bin",
}

CALC = """#!/bin/sh
# calc.sh add|sub A B
case "$1" in
  add) echo $(( $2 - $3 )) ;;
  sub) echo $(( $2 - $3 )) ;;
  *) echo "usage: calc.sh add|sub A B" >&2; exit 2 ;;
esac
"""
# Prints the lines of pytest -rA's summary, which SWE-bench's pytest log parser reads.
RUN_TESTS = """#!/bin/sh
status=0
check() {
  name=$1; expected=$2; shift 2
  got=$(sh calc.sh "$@")
  if [ "$got" = "$expected" ]; then echo "PASSED tests/run.sh::$name"
  else echo "FAILED tests/run.sh::$name - got $got, expected $expected"; status=1; fi
}
check test_sub 1 sub 3 2
"""
EVAL = """#!/bin/bash
echo ">>>>> Start Test Output"
sh tests/run.sh
code=$?
echo ">>>>> End Test Output"
echo ">>>>> Test Exit Code: $code"
"""


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, env=GIT_ENV, check=True, capture_output=True, text=True).stdout


def shell_task(work: Path) -> tuple[SWEBenchInstance, Path]:
    """The task's repository, its patches (made with git), and its image archive."""
    repo = work / "shellcalc"
    (repo / "tests").mkdir(parents=True)
    (repo / "calc.sh").write_text(CALC)
    (repo / "tests" / "run.sh").write_text(RUN_TESTS + 'exit "$status"\n')
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "calc")
    base = _git(repo, "rev-parse", "HEAD").strip()
    (repo / "tests" / "run.sh").write_text(RUN_TESTS + 'check test_add 5 add 3 2\nexit "$status"\n')
    test_patch = _git(repo, "diff")
    _git(repo, "checkout", "-q", ".")
    (repo / "calc.sh").write_text(CALC.replace("add) echo $(( $2 - $3 ))", "add) echo $(( $2 + $3 ))"))
    gold = _git(repo, "diff")
    _git(repo, "checkout", "-q", ".")
    name = f"{REGISTRY}/shellcalc:{base[:12]}"
    archive = repo_image(name, repo, MINIMAL_PACKAGES, work / "shellcalc.tar")
    instance = SWEBenchInstance(
        instance_id="swerollout-examples__shellcalc-1",
        repo="swerollout-examples/shellcalc",
        base_commit=base,
        problem_statement="`calc.sh add 3 2` prints 1; it should print 5.",
        patch=gold,
        test_patch=test_patch,
        FAIL_TO_PASS=["tests/run.sh::test_add"],
        PASS_TO_PASS=["tests/run.sh::test_sub"],
        eval_script=EVAL,
        image=name,
    )
    return instance, archive


def test_a_task_image_without_python_runs_through_the_bundle(
    real_node: RealNode, pod_namespace: str, tmp_path: Path
) -> None:
    instance, archive = shell_task(tmp_path)
    # No Python anywhere in the image: no interpreter, no standard library.
    with tarfile.open(images.base_rootfs(MINIMAL_PACKAGES)) as tar:
        names = ["/" + n.removeprefix("./").lstrip("/") for n in tar.getnames()]
    assert "/usr/bin/git" in names and "/usr/bin/bash" in names
    pythons = [n for n in names if re.search(r"/bin/python|/lib/python\d", n)]
    assert pythons == [], pythons[:20]
    real_node.import_image(archive)
    tasks = tmp_path / "instances.jsonl"
    write_instances([instance], tasks)
    rollouts = Rollouts(real_node, pod_namespace)
    rollouts.instances = [instance]
    with launch(
        "oracle",
        subprocess=True,
        ready_timeout=900,
        tokenizer="qwen-2.5",
        host=real_node.config.node_ip,
        tasks=str(tasks),
    ) as oracle:
        rollouts.create("nopython", oracle.url)
        done = rollouts.wait_phase("nopython", TERMINAL, timeout=600)
    assert done["phase"] == "Succeeded" and done["reward"]["value"] == 1.0, json.dumps(done)[:3000]
    assert done["reward"]["resolved"] is True
