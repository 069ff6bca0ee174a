"""The README's general "Running on a real cluster" block, run as written on the real node.

One substitution: no registry exists here, so "build the image and push it to your
registry" becomes "tag the image `cluster up` built from our Dockerfile as
`<registry>/swerollout:0.1.0` in the node's containerd" (the chart's pull policy is
IfNotPresent, so the kubelet never pulls). Everything else runs as the README shows:
`helm install` with its values (a namespaced Role, the chart's defaults), then
`examples/rollout-minimal.yaml` with the edit its comment asks for (endpoint and image),
then `get swer`.

The README installs the same release name in the same namespace as `cluster up`, so the
session's release is uninstalled first and restored at the end (this module sorts last).
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from swerollout_dev.binaries import find_binaries
from swerollout_dev.cluster import containerd
from swerollout_dev.cluster.buildimage import IMAGE
from swerollout_dev.cluster.supervisor import POLICY_PORT, RELEASE, RELEASE_NAMESPACE, chart_install_args
from tests.support.docblocks import blocks_run_by
from tests.support.realnode import SWEROLLOUTS, TERMINAL, RealNode, Rollouts

ROOT = Path(__file__).resolve().parents[2]
THIS_TEST = "tests/cluster/test_user_install.py::test_the_readme_general_block_as_written"
REGISTRY = "registry.swerollout.invalid"  # `.invalid`: a name that can never resolve (RFC 2606)


def readme_steps() -> list[str]:
    """The commands of the README's general block (continuations joined, comments dropped)."""
    (block,) = blocks_run_by("README.md", THIS_TEST)
    return block.commands()


def _operator_ready(node: RealNode) -> bool:
    deployment = node.kubectl("get", "deployment", RELEASE, "-n", RELEASE_NAMESPACE, "-o", "json")
    if deployment.returncode != 0:
        return False
    status = json.loads(deployment.stdout).get("status") or {}
    return bool(
        status.get("readyReplicas") == 1
        and status.get("updatedReplicas") == 1
        and not status.get("unavailableReplicas")
    )


@pytest.fixture
def readme_release(real_node: RealNode) -> Iterator[None]:
    """The session's release out of the way while the README's is installed; back afterwards."""
    helm = str(find_binaries().helm)
    kubeconfig = f"--kubeconfig={real_node.paths.kubeconfig}"

    def run_helm(*args: str) -> None:
        done = subprocess.run([helm, kubeconfig, *args], capture_output=True, text=True, timeout=600, check=False)
        assert done.returncode == 0, f"helm {' '.join(args)}: {done.stderr}"

    run_helm("uninstall", RELEASE, "-n", RELEASE_NAMESPACE, "--wait", "--timeout", "5m")
    try:
        yield
    finally:
        subprocess.run(
            [helm, kubeconfig, "uninstall", RELEASE, "-n", RELEASE_NAMESPACE, "--wait", "--timeout", "5m"],
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        run_helm(*chart_install_args(), "--wait", "--timeout", "8m")


def test_the_readme_general_block_as_written(real_node: RealNode, readme_release: None, tmp_path: Path) -> None:
    steps = readme_steps()
    assert steps == [
        "helm install swerollout helm/swerollout -n swerollout-system --create-namespace "
        "--set image.repository=<your registry>/swerollout --set image.tag=0.1.0",
        "kubectl -n swerollout-system apply -f examples/rollout-minimal.yaml",
        "kubectl -n swerollout-system get swer -w",
    ], "the README's block changed: make this test follow it"
    install, apply, watch = steps

    # "Push to your registry": the image built from our Dockerfile, under the registry's name.
    image = f"{REGISTRY}/swerollout:0.1.0"
    tagged = containerd.ctr(real_node.paths, "images", "tag", "--force", IMAGE, image)
    assert tagged.returncode == 0, tagged.stderr

    bins = find_binaries()
    env = {
        **os.environ,
        "PATH": f"{bins.kubectl.parent}:{os.environ['PATH']}",
        "KUBECONFIG": str(real_node.paths.kubeconfig),
    }

    def sh(command: str) -> str:
        done = subprocess.run(
            ["bash", "-c", command], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False
        )
        assert done.returncode == 0, f"{command}: {done.stderr}"
        return done.stdout

    sh(install.replace("<your registry>", REGISTRY))
    real_node.wait_for("the README's operator Deployment Ready", lambda: _operator_ready(real_node), timeout=600)

    def running_images() -> set[str]:
        pods = real_node.get("pods", "-n", RELEASE_NAMESPACE, "-l", "app.kubernetes.io/name=swerollout")["items"]
        return {c["image"] for p in pods if p["status"]["phase"] == "Running" for c in p["spec"]["containers"]}

    # The fixture's uninstall waits for the Deployment, not for its pods: the garbage collector
    # may still be taking the earlier release's operator pod away when the new one is Ready.
    real_node.wait_for("only the README release's operator running", lambda: running_images() == {image}, timeout=180)
    assert running_images() == {image}
    # The README's values: the chart's defaults, so a Role in the release namespace, no ClusterRole.
    assert real_node.kubectl("get", "role", "-n", RELEASE_NAMESPACE, "-o", "name").stdout.strip()

    # "edit endpoint/image first": a policy pods reach (the oracle on the node IP) and an image
    # the node has (a bundled task's); the instance stays the example's. Its test does not
    # exist in that image, so the rollout is graded 0.
    example = yaml.safe_load((ROOT / "examples" / "rollout-minimal.yaml").read_text())
    rollouts = Rollouts(real_node, RELEASE_NAMESPACE)
    example["spec"]["inference"]["endpoint"] = f"http://{real_node.config.node_ip}:{POLICY_PORT}"
    example["spec"]["instance"]["image"] = rollouts.instances[0].image
    edited = tmp_path / "rollout-minimal.yaml"
    edited.write_text(yaml.safe_dump(example))
    name = example["metadata"]["name"]
    sh(apply.replace("examples/rollout-minimal.yaml", str(edited)))
    try:
        done = rollouts.wait_phase(name, TERMINAL, timeout=900)
        assert done["phase"] == "Succeeded", json.dumps(done)[:3000]
        assert done["reward"]["value"] == 0.0 and done["reward"]["resolved"] is False, json.dumps(done)[:3000]
        # `-w` streams until interrupted; the same listing, read once the rollout is final.
        shown = sh(watch.removesuffix(" -w"))
        assert name in shown and "Succeeded" in shown, shown
    finally:
        real_node.kubectl("delete", SWEROLLOUTS, name, "-n", RELEASE_NAMESPACE, "--wait=false")
