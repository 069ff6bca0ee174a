"""The bubblewrap command line and the host paths it exposes: what a container can see."""

from __future__ import annotations

import sys
from pathlib import Path, PurePosixPath

import agent_runner
from swerollout_dev.nodeagent.isolation import Masks, bwrap_argv, own_source_dirs, visible_host_paths


def test_paths_under_tmp_stay_visible_on_top_of_the_private_tmp(tmp_path: Path) -> None:
    venv = Path("/tmp") / f"swerollout-argv-test-{tmp_path.name}" / ".venv"
    venv.mkdir(parents=True, exist_ok=True)
    try:
        outside = Path("/usr")  # not under /tmp: already exposed, not re-bound
        args = bwrap_argv(
            "bwrap",
            exposed=[Path("/")],
            hidden=[],
            mounts=[],
            private_tmp=tmp_path,
            workdir=PurePosixPath("/tmp"),
            hostname="pod",
            seccomp_file=tmp_path / "f.bpf",
            keep_visible=[venv, outside, venv / "missing"],
        )
        tmp_bind = args.index("/tmp", args.index(str(tmp_path)))
        rebinds = [i for i in range(len(args) - 2) if args[i] == "--ro-bind" and args[i + 1] == str(venv)]
        assert rebinds and rebinds[0] > tmp_bind, "the venv must be bound after (on top of) the private /tmp"
        assert str(venv / "missing") not in args
        assert not any(args[i] == "--ro-bind" and args[i + 1] == "/usr" and i > tmp_bind for i in range(len(args) - 1))
    finally:
        venv.rmdir()
        venv.parent.rmdir()


def test_runner_and_sandbox_views_share_one_list_and_never_expose_the_root_or_home() -> None:
    bin_dir = Path(sys.executable).parent
    runner = visible_host_paths(bin_dir, runner_image=True)
    sandbox = visible_host_paths(bin_dir, runner_image=False)
    assert runner[: len(sandbox)] == sandbox, "the runner's view is the sandbox's plus our source dirs"
    assert set(runner) - set(sandbox) <= set(own_source_dirs())
    assert Path(agent_runner.__file__).parent in runner and Path(agent_runner.__file__).parent not in sandbox
    assert bin_dir.parent in sandbox and Path(sys.base_prefix) in sandbox
    assert {Path("/"), Path.home(), Path("/var/tmp"), Path("/home"), Path("/tmp")}.isdisjoint(runner)


def test_private_entries_of_visible_paths_are_covered_by_an_unreadable_mask(tmp_path: Path) -> None:
    masks = Masks.write(tmp_path / "mask")
    visible, elsewhere, cut = Path("/etc/passwd"), Path("/var/lib/dpkg/status"), Path("/etc/hostname")
    args = bwrap_argv(
        "bwrap",
        exposed=[Path("/etc"), Path("/usr")],
        hidden=[cut],
        mounts=[],
        private_tmp=tmp_path,
        workdir=PurePosixPath("/tmp"),
        hostname="pod",
        seccomp_file=tmp_path / "f.bpf",
        private=[visible, Path("/etc/apt"), elsewhere, cut],
        masks=masks,
    )
    binds = [(args[i + 1], args[i + 2]) for i in range(len(args) - 2) if args[i] == "--ro-bind"]
    assert (str(masks.file), "/etc/passwd") in binds and (str(masks.directory), "/etc/apt") in binds
    assert not any(dest in (str(elsewhere), str(cut)) for _, dest in binds)
    assert (masks.file.stat().st_mode & 0o777, masks.directory.stat().st_mode & 0o777) == (0, 0)
