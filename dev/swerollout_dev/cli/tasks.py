"""`swerollout tasks`: list the bundled SWE tasks and materialize their repositories.

swerollout tasks list                       # id, repo, base commit, test counts
swerollout tasks materialize --dest DIR     # DIR/<task>/ git repos + DIR/instances.jsonl
swerollout tasks index [--check]            # regenerate (or verify) the committed index
swerollout tasks build-images [--dest F]    # one container image per task (real node; root)
swerollout tasks requirements REPO FILE     # a file:// task's own environment in dev mode
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from swerollout.instances import InstanceError
from swerollout_dev import tasks


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--tasks-dir",
        type=Path,
        default=tasks.DEFAULT_TASKS_DIR,
        help="folder of task folders (default: the bundled examples/tasks)",
    )
    sub = parser.add_subparsers(dest="tasks_command", metavar="ACTION", required=True)

    listing = sub.add_parser("list", help="list the tasks of the committed index")
    listing.set_defaults(func=_list)

    materialize = sub.add_parser("materialize", help="write each task's git repository and a resolved instances.jsonl")
    materialize.add_argument("--dest", type=Path, required=True, help="output folder (created if missing)")
    materialize.set_defaults(func=_materialize)

    index = sub.add_parser("index", help="regenerate instances.jsonl in the tasks folder from the task files")
    index.add_argument("--check", action="store_true", help="only verify it is up to date; exit 1 when stale")
    index.set_defaults(func=_index)

    build = sub.add_parser(
        "build-images",
        help="build one container image per task (Debian base with Python and pytest, repo at its base commit "
        "in /testbed) and load them into the running `swerollout cluster`",
    )
    build.add_argument("--dest", type=Path, help="also write an instances.jsonl naming the images here")
    build.add_argument("--workdir", help="directory of the running cluster (default: the current directory)")
    build.set_defaults(func=_build_images)

    reqs = sub.add_parser(
        "requirements",
        help="give a file:// task repository its own Python environment in dev mode: copy a requirements file "
        "into its git directory, where the node agent looks (docs/dev-mode.md)",
    )
    reqs.add_argument("repo", type=Path, help="the git repository a file:// image names")
    reqs.add_argument("file", type=Path, help="a pip requirements file (an empty one removes the environment)")
    reqs.set_defaults(func=_requirements)


def _list(args: argparse.Namespace) -> int:
    try:
        instances = tasks.load_instances(args.tasks_dir / tasks.INDEX_FILE)
    except InstanceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"{'INSTANCE':<34} {'REPO':<30} {'BASE':<12} {'F2P':>4} {'P2P':>4}")
    for instance in instances:
        print(
            f"{instance.instance_id:<34} {instance.repo:<30} {instance.base_commit[:12]:<12} "
            f"{len(instance.FAIL_TO_PASS):>4} {len(instance.PASS_TO_PASS):>4}"
        )
    return 0


def _materialize(args: argparse.Namespace) -> int:
    try:
        instances = tasks.materialize_tasks(args.dest, args.tasks_dir)
    except InstanceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    for instance in instances:
        print(f"{instance.instance_id}  {instance.base_commit[:12]}  {instance.image}")
    print(f"wrote {len(instances)} instances to {args.dest.resolve() / tasks.INDEX_FILE}")
    return 0


def _index(args: argparse.Namespace) -> int:
    index_path: Path = args.tasks_dir / tasks.INDEX_FILE
    try:
        with tempfile.TemporaryDirectory(prefix="swerollout-index-") as scratch:
            fresh = tasks.build_index(Path(scratch), args.tasks_dir)
        if args.check:
            current = tasks.load_instances(index_path)
            if current != fresh:
                stale = sorted(
                    {i.instance_id for i in fresh} ^ {i.instance_id for i in current}
                    | {f.instance_id for f, c in zip(fresh, current) if f != c}
                )
                print(f"{index_path} is stale ({', '.join(stale)}); run `swerollout tasks index`", file=sys.stderr)
                return 1
            print(f"{index_path} is up to date ({len(fresh)} instances)")
            return 0
        tasks.write_instances(fresh, index_path)
    except InstanceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"wrote {len(fresh)} instances to {index_path}")
    return 0


def _build_images(args: argparse.Namespace) -> int:
    from swerollout_dev.cluster import containerd
    from swerollout_dev.cluster.config import ClusterPaths
    from swerollout_dev.cluster.images import ImageBuildError
    from swerollout_dev.cluster.state import ClusterState
    from swerollout_dev.cluster.taskimages import build_task_images

    try:
        built = build_task_images(args.tasks_dir)
    except (ImageBuildError, InstanceError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    paths = ClusterPaths.under(args.workdir)
    state = ClusterState.read(paths.state)
    running = state is not None and state.status == "ready" and state.supervisor.alive()
    for image in built:
        if running:
            containerd.import_image(paths, image.archive)
        print(f"{image.instance.instance_id}  {image.instance.image}  {image.archive}")
    if args.dest:
        tasks.write_instances([i.instance for i in built], args.dest / tasks.INDEX_FILE)
        print(f"wrote {len(built)} instances to {args.dest.resolve() / tasks.INDEX_FILE}")
    print(
        f"loaded into the cluster in {paths.root}"
        if running
        else "no cluster running: `swerollout cluster up`, then run this again to load them"
    )
    return 0


def _requirements(args: argparse.Namespace) -> int:
    repo: Path = args.repo.resolve()
    if not (repo / ".git").exists() and not (repo / "HEAD").is_file():
        print(f"error: {repo} is not a git repository; name the repository a file:// image points at", file=sys.stderr)
        return 1
    try:
        written = tasks.write_requirements(repo, args.file)
    except OSError as exc:
        print(f"error: cannot copy {args.file}: {exc}", file=sys.stderr)
        return 1
    print(
        f"wrote {written}: pods of file://{repo} get their own environment"
        if written
        else f"file://{repo} names no requirements now: its pods use the node agent's environment"
    )
    return 0
