"""The bubblewrap command line: what a container can see."""

from __future__ import annotations

from pathlib import Path, PurePosixPath

from swerollout.dev.nodeagent.isolation import bwrap_argv


def test_paths_under_tmp_stay_visible_on_top_of_the_private_tmp(tmp_path: Path) -> None:
    venv = Path("/tmp") / f"swerollout-argv-test-{tmp_path.name}" / ".venv"
    venv.mkdir(parents=True, exist_ok=True)
    try:
        outside = Path("/usr")  # not under /tmp: already exposed, not re-bound
        args = bwrap_argv(
            "bwrap", exposed=[Path("/")], hidden=[], mounts=[], private_tmp=tmp_path,
            workdir=PurePosixPath("/tmp"), hostname="pod", seccomp_file=tmp_path / "f.bpf", keep_visible=[venv, outside, venv / "missing"],
        )
        tmp_bind = args.index("/tmp", args.index(str(tmp_path)))
        rebinds = [i for i in range(len(args) - 2) if args[i] == "--ro-bind" and args[i + 1] == str(venv)]
        assert rebinds and rebinds[0] > tmp_bind, "the venv must be bound after (on top of) the private /tmp"
        assert str(venv / "missing") not in args
        assert not any(args[i] == "--ro-bind" and args[i + 1] == "/usr" and i > tmp_bind for i in range(len(args) - 1))
    finally:
        venv.rmdir()
        venv.parent.rmdir()
