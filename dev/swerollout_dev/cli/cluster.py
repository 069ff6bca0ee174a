"""`swerollout cluster up | status | down`: a real single-node Kubernetes on this machine.

`build-image` builds only the image, for use elsewhere.
`up` (as root) builds what is missing, starts a detached supervisor
(swerollout_dev.cluster.supervisor) and waits until the node is Ready; `status`
reports each component and the node; `down` stops everything and removes every
process, mount, interface, iptables rule and containerd state the cluster made.
See docs/real-node.md.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import subprocess
import sys
import time
from pathlib import Path

from swerollout_dev.cluster import teardown
from swerollout_dev.cluster.buildimage import IMAGE, build_image
from swerollout_dev.cluster.config import ClusterConfig, ClusterPaths
from swerollout_dev.cluster.images import ImageBuildError
from swerollout_dev.cluster.nodebins import find_node_binaries, missing_host_tools
from swerollout_dev.cluster.state import ClusterState
from swerollout_dev.cluster.supervisor import repo_root
from swerollout_dev.cluster.taskimages import build_task_images
from swerollout_dev.stack.stop import stop_supervisor
from swerollout_dev.tasks import INDEX_FILE, write_instances

EXIT_NOT_RUNNING = 3


def register(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="cluster_command", metavar="ACTION", required=True)
    up = sub.add_parser("up", help="start etcd, the API server, controllers, containerd, kubelet and kube-proxy")
    up.add_argument("--timeout", type=float, default=900.0, help="seconds to wait for readiness (default 900)")
    up.add_argument(
        "--no-operator", action="store_true", help="do not build the image from the Dockerfile nor install the chart"
    )
    up.add_argument(
        "--policy",
        choices=["oracle", "null", "tiny-lm"],
        help="start the bundled policy server on the node IP, port 30000",
    )
    up.add_argument(
        "--tasks",
        help="JSONL of tasks for the policy server (default: the bundled tasks, whose "
        "images are then built and loaded, and listed in .swerollout/cluster/tasks/instances.jsonl)",
    )
    up.set_defaults(func=up_command)
    status = sub.add_parser("status", help="report each component")
    status.set_defaults(func=status_command)
    down = sub.add_parser("down", help="stop everything and remove every trace")
    down.set_defaults(func=down_command)
    for p in (up, status, down):
        p.add_argument("--workdir", help="directory holding .swerollout/cluster (default: the current directory)")
    image = sub.add_parser(
        "build-image",
        help="build the swerollout image from this checkout's Dockerfile with buildah, offline (root), "
        "and print the docker-archive to load or push",
    )
    image.set_defaults(func=build_image_command)


def _print_state(state: ClusterState) -> None:
    print(f"cluster: {state.status}" + (f" ({state.message})" if state.message else ""))
    print(f"  {'supervisor':<24} {'running' if state.supervisor.alive() else 'dead':<8} pid {state.supervisor.pid}")
    for name, comp in state.components.items():
        status = "dead" if comp.status == "running" and comp.pid is not None and not comp.alive() else comp.status
        print(f"  {name:<24} {status:<8} pid {comp.pid or '-':<8} {comp.detail}")
    if state.server_url:
        print(f"API server: {state.server_url}; node {state.node_name} at {state.node_ip}")
    print(f"kubeconfig: {state.kubeconfig}")


def up_command(args: argparse.Namespace) -> int:
    paths = ClusterPaths.under(args.workdir)
    if os.geteuid() != 0:
        print(
            "error: `cluster up` needs root (containerd, the kubelet and kube-proxy manage mounts, "
            "interfaces and iptables); use `swerollout dev up` without root",
            file=sys.stderr,
        )
        return 1
    missing = missing_host_tools()
    if missing:
        print(
            f"error: missing {', '.join(missing)}; install them with `hack/install-cluster-deps.sh` "
            "(Debian: containerd runc containernetworking-plugins iptables conntrack)",
            file=sys.stderr,
        )
        return 1
    state = ClusterState.read(paths.state)
    if state is not None and state.supervisor.alive():
        print(
            f"error: a cluster already runs from {paths.root}; `swerollout cluster status` or "
            "`swerollout cluster down` first",
            file=sys.stderr,
        )
        return 1
    find_node_binaries()  # builds them (minutes, once) with its output on our terminal
    paths.root.mkdir(parents=True, exist_ok=True)
    paths.state.unlink(missing_ok=True)
    paths.logs.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "swerollout_dev.cluster.supervisor", "--cluster-dir", str(paths.root)]
    if not args.no_operator:
        print(
            "building the swerollout image from the Dockerfile with buildah (minutes the first time)", file=sys.stderr
        )
        try:
            archive = build_image(repo_root())
        except ImageBuildError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        argv += ["--operator-image", str(archive)]
    if args.policy:
        argv += ["--policy", args.policy]
        if args.tasks:
            argv += ["--tasks", os.path.abspath(args.tasks)]
        else:
            print("building the bundled tasks' images (once)", file=sys.stderr)
            tasks_file, archives = _bundled_tasks(paths)
            argv += ["--tasks", str(tasks_file)]
            for archive in archives:
                argv += ["--load-image", str(archive)]
    with open(paths.logs / "supervisor.log", "ab") as log, open(os.devnull, "rb") as devnull:
        supervisor = subprocess.Popen(argv, stdin=devnull, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + args.timeout
    state = None
    while time.monotonic() < deadline:
        code = supervisor.poll()
        state = ClusterState.read(paths.state)
        if state is not None and state.status in ("ready", "failed"):
            break
        if code is not None:
            state = ClusterState.read(paths.state)
            break
        time.sleep(0.3)
    else:
        print(f"error: the node was not Ready after {args.timeout:.0f}s; see {paths.logs}; stopping", file=sys.stderr)
        down_command(args)
        return 1
    if state is None:
        print(f"error: the cluster supervisor exited; see {paths.logs / 'supervisor.log'}", file=sys.stderr)
        return 1
    _print_state(state)
    if state.status != "ready":
        print(f"error: cluster up failed: {state.message}\nlogs in {paths.logs}", file=sys.stderr)
        return 1
    print(f"export KUBECONFIG={state.kubeconfig}")
    return 0


def build_image_command(args: argparse.Namespace) -> int:
    """The image `cluster up` runs, for a cluster that is not this machine's: the same
    offline build (reused when nothing it copies changed), as a docker-archive file."""
    if os.geteuid() != 0:
        print(
            "error: building with buildah here needs root (its chroot isolation mounts); "
            "elsewhere build the Dockerfile with `docker build` (see docs/real-node.md)",
            file=sys.stderr,
        )
        return 1
    try:
        archive = build_image(repo_root())
    except ImageBuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"image {IMAGE}: {archive}")
    print(f"load it where the kubelet runs: ctr -n k8s.io images import {archive}")
    print(f"or push it to your registry: skopeo copy docker-archive:{archive} docker://REGISTRY/swerollout:TAG")
    return 0


def _bundled_tasks(paths: ClusterPaths) -> tuple[Path, list[Path]]:
    """The bundled tasks' images (built once, cached) and an instances.jsonl naming them,
    for the oracle policy server and for rollouts."""
    built = build_task_images()
    out = paths.root / "tasks" / INDEX_FILE
    write_instances([image.instance for image in built], out)
    return out, [image.archive for image in built]


def status_command(args: argparse.Namespace) -> int:
    paths = ClusterPaths.under(args.workdir)
    state = ClusterState.read(paths.state)
    if state is None:
        print(f"no cluster in {paths.root}")
        return EXIT_NOT_RUNNING
    _print_state(state)
    return 0 if state.supervisor.alive() and state.status == "ready" else EXIT_NOT_RUNNING


def down_command(args: argparse.Namespace) -> int:
    paths = ClusterPaths.under(args.workdir)
    state = ClusterState.read(paths.state)
    if state is not None and not stop_supervisor(state.supervisor, grace=180):
        print("warning: the supervisor did not stop in 180s; killed it and what it started", file=sys.stderr)
    # Whatever a crashed supervisor left: only with the machine lock, so a cluster
    # that another directory runs is never touched.
    paths.runtime.mkdir(parents=True, exist_ok=True)
    with open(paths.lock, "a+") as lock:
        # Our supervisor may still be exiting (it holds the lock until its last moment):
        # wait a little before concluding that another cluster holds the machine.
        deadline = time.monotonic() + 60
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    lock.seek(0)
                    print(
                        f"error: another cluster holds this machine ({lock.read().strip()}); not touching it",
                        file=sys.stderr,
                    )
                    return 1
                time.sleep(0.5)
        teardown.stop_recorded(state)
        problems = teardown.clean_node(ClusterConfig(), paths)
        teardown.forget_control_plane(paths)
    paths.state.unlink(missing_ok=True)
    if problems:
        print("error: could not remove: " + "; ".join(problems), file=sys.stderr)
        return 1
    print(f"cluster in {paths.root} stopped; nothing left behind")
    return 0
