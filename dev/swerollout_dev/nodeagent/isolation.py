"""How a container's file system view is built: bubblewrap, or a mapped directory.

With bubblewrap (``bwrap``) each container gets a new mount namespace whose
root is a tmpfs holding read-only binds of the host paths it may see, a private
/tmp, fresh /dev and /proc, and its volume mounts at their real mountPath.
Host directories that contain a mount target or a hidden path are "split": the
directory is recreated and each sibling bound one by one, so a mount can land
at e.g. /etc/swerollout even though the host has no such directory, and the
node agent's pod directories (other pods' secrets) are never visible.

Without bubblewrap, absolute mountPaths cannot exist, so each one becomes a
symlink under a per-container directory whose path the process receives in
SWEROLLOUT_MOUNT_ROOT (e.g. mountPath /etc/token -> $SWEROLLOUT_MOUNT_ROOT/etc/token);
the pod's status says it runs unisolated.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from . import seccomp

MOUNT_ROOT_ENV = "SWEROLLOUT_MOUNT_ROOT"

# Host system paths every container sees, read-only. Nothing else of the host is visible
# except what visible_host_paths adds: not home directories (~/.kube/config, SSH keys),
# /var/tmp, /work or other checkouts (their .swerollout/ admin kubeconfigs and certs).
SYSTEM_PATHS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt")
# System paths whose entries that are not world-readable are hidden (see private_entries).
# /etc is where a host keeps its secrets (shadow, TLS keys, /etc/kubernetes/admin.conf on a
# kubeadm node); it is small enough to scan at every container start, /usr is not.
_SCANNED_FOR_PRIVATE = ("/etc",)
# The packages a runner image is made of, found where they are imported from.
_OWN_PACKAGES = ("swerollout", "agent_runner", "swerollout_operator")
_REPLACED = (PurePosixPath("/proc"), PurePosixPath("/dev"), PurePosixPath("/tmp"))
# Never visible to any container: host daemons keep their sockets here (containerd,
# a `cluster up` node's containerd under /run/swerollout-cluster, dbus), and a read-only
# bind does not stop connect() on a socket. Volume mounts below it (/var/run/secrets)
# still land on an otherwise empty /run.
HOST_RUNTIME_DIRS = (Path("/run"),)


@dataclass(frozen=True)
class Mount:
    source: Path
    dest: PurePosixPath
    read_only: bool


def find_bwrap() -> str | None:
    return shutil.which("bwrap")


# Every container: its own user, pid, ipc and uts namespaces; no capabilities (bwrap also
# sets no_new_privs); the seccomp filter of seccomp.py read from fd 9, which the shell
# in front of bwrap opens from the filter file (so a persisted argv stays valid).
_CONFINE = ["--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--cap-drop", "ALL", "--seccomp", "9"]
_OPEN_FILTER = 'exec "$@" 9<"$0"'


def write_seccomp_filter(path: Path) -> Path:
    """Write the compiled filter where every container's launcher reads it."""
    data = seccomp.program()
    if not path.exists() or path.read_bytes() != data:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(data)
        tmp.replace(path)
    return path


def confined(bwrap: str, seccomp_file: Path) -> list[str]:
    """The launcher prefix: a shell that opens the filter on fd 9, then bwrap with its confinement flags."""
    return ["/bin/sh", "-c", _OPEN_FILTER, str(seccomp_file), bwrap, *_CONFINE]


def bwrap_works(bwrap: str, seccomp_file: Path) -> str | None:
    """None when bubblewrap can build a confined sandbox here, else its error (some
    container runtimes forbid the namespaces it needs)."""
    try:
        write_seccomp_filter(seccomp_file)
        result = subprocess.run(
            [*confined(bwrap, seccomp_file), "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--", "true"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired, seccomp.UnsupportedArch) as exc:
        return str(exc)
    return None if result.returncode == 0 else (result.stderr.strip() or f"exit code {result.returncode}")


def visible_host_paths(python_bin_dir: Path, *, runner_image: bool, runner_paths: Sequence[Path] = ()) -> list[Path]:
    """The host paths a container sees read-only: the one rule for both container kinds.

    Every container: the system paths, the Python environment the node agent maps
    runner images to (``python_bin_dir``'s parent; a sandbox runs the swerex launcher
    with it) and the installation that environment's interpreter comes from. A runner
    image container also sees the source directories of our own packages, which an
    editable install imports from a checkout, and the ``runner_paths`` the node agent was
    given. Its bundled tokenizers are package data in the environment and its caches go to
    its HOME, the private /tmp or an emptyDir.
    """
    paths = [*(Path(p) for p in SYSTEM_PATHS), python_bin_dir.parent, *_interpreter_prefixes(python_bin_dir)]
    if runner_image:
        paths += [*own_source_dirs(), *runner_paths]
    out: list[Path] = []
    for path in paths:
        # "/" would expose everything (an interpreter at /bin/python3 on a merged-usr-less host).
        if path != Path("/") and path not in out:
            out.append(path)
    return out


def private_entries() -> list[Path]:
    """Entries of the scanned system paths that other users may not read: a container must
    not read them either. Under a root node agent a container's user maps to host root, which
    owns them, so dropping capabilities alone does not stop ``cat /etc/shadow``; bwrap_argv
    covers each with a mask."""
    found: list[Path] = []
    for top in _SCANNED_FOR_PRIVATE:
        for root, dirs, files in os.walk(top):
            for name in [*dirs, *files]:
                path = os.path.join(root, name)
                try:
                    mode = os.lstat(path).st_mode
                except OSError:
                    continue
                if stat.S_ISLNK(mode):
                    continue
                wanted = 0o005 if stat.S_ISDIR(mode) else 0o004  # a directory must be listable and enterable
                if mode & wanted != wanted:
                    found.append(Path(path))
                    if name in dirs:
                        dirs.remove(name)  # hidden whole
    return found


def _interpreter_prefixes(python_bin_dir: Path) -> list[Path]:
    """Where the interpreter of the environment really lives (a venv's python is a symlink
    into e.g. ~/.pyenv/versions/3.11.7 or uv's python directory), and this process's own base."""
    prefixes = [Path(sys.base_prefix)]
    for name in ("python3", "python"):
        exe = python_bin_dir / name
        if exe.exists():
            prefixes.append(exe.resolve().parent.parent)
            break
    return prefixes


def own_source_dirs() -> list[Path]:
    """Where our own packages are imported from (an editable install points into the
    checkout, not the environment)."""
    dirs: list[Path] = []
    for module in _OWN_PACKAGES:
        spec = importlib.util.find_spec(module)
        if spec is not None and spec.origin:
            dirs.append(Path(spec.origin).parent)
    return dirs


@dataclass(frozen=True)
class Masks:
    """What is bound over a private entry: an empty file and an empty directory of mode 000,
    which a container, holding no capabilities, cannot open even as their owner. Cheaper than
    splitting /etc into one bind per entry, and reading gives EACCES rather than a fake file."""

    file: Path
    directory: Path

    @classmethod
    def write(cls, directory: Path) -> Masks:
        masks = cls(directory / "file", directory / "dir")
        directory.mkdir(parents=True, exist_ok=True)
        masks.file.touch(exist_ok=True)
        masks.directory.mkdir(exist_ok=True)
        for path in (masks.file, masks.directory):
            path.chmod(0)
        return masks


def _under(path: PurePosixPath, parent: PurePosixPath) -> bool:
    return path == parent or parent in path.parents


def _emit(host: Path, dest: PurePosixPath, cuts: list[PurePosixPath], args: list[str]) -> None:
    if host.is_symlink():
        if not any(c == dest for c in cuts):
            args += ["--symlink", os.readlink(host), str(dest)]
        return
    if not host.exists():
        return
    inner = [c for c in cuts if _under(c, dest)]
    if dest in inner:
        return
    if not inner or not host.is_dir():
        args += ["--ro-bind", str(host), str(dest)]
        return
    if str(dest) != "/":
        args += ["--dir", str(dest)]
    try:
        children = sorted(host.iterdir())
    except OSError:
        return
    for child in children:
        _emit(child, dest / child.name, inner, args)


def _through_symlinks(dest: PurePosixPath, exposed: list[Path]) -> PurePosixPath:
    """Where ``dest`` really is inside the container.

    A mountPath under a symlink the container sees (Debian's /var/run -> /run) must be
    mounted at the symlink's target: bwrap creates mount points while setting up, when
    an absolute symlink would still point into the host.
    """
    roots = [PurePosixPath(e) for e in exposed]
    for _ in range(40):
        for i in range(1, len(dest.parts) + 1):
            prefix = PurePosixPath(*dest.parts[:i])
            host = Path(prefix)
            if not any(prefix == r or r in prefix.parents for r in roots) or not host.is_symlink():
                continue
            target = PurePosixPath(os.readlink(host))
            resolved = target if target.is_absolute() else prefix.parent / target
            dest = PurePosixPath(os.path.normpath(resolved.joinpath(*dest.parts[i:])))
            break
        else:
            return dest
    return dest


def bwrap_argv(
    bwrap: str,
    *,
    exposed: list[Path],
    hidden: list[Path],
    mounts: list[Mount],
    private_tmp: Path,
    workdir: PurePosixPath,
    hostname: str,
    seccomp_file: Path,
    keep_visible: list[Path] | None = None,
    private: list[Path] | None = None,
    masks: Masks | None = None,
) -> list[str]:
    """The bwrap prefix for one container (the command follows after ``--``).

    ``private``: exposed host paths the container must not read; each visible one is
    covered with one of ``masks``.

    ``keep_visible``: paths the container needs even where they live under /tmp (a
    checkout or venv in /tmp, as CI clones often are), which the private /tmp would
    otherwise hide; they are bound read-only on top of it."""
    mounts = [Mount(m.source, _through_symlinks(m.dest, exposed), m.read_only) for m in mounts]
    cuts = [*_REPLACED, *(PurePosixPath(p) for p in hidden), *(m.dest for m in mounts)]
    args = [*confined(bwrap, seccomp_file), "--hostname", hostname[:63], "--die-with-parent"]
    for path in exposed:
        _emit(path, PurePosixPath(path), cuts, args)
    roots = [PurePosixPath(p) for p in exposed]
    for path in private or []:
        dest = PurePosixPath(path)
        if masks is None:
            raise ValueError("private paths need masks to cover them")
        if any(_under(dest, r) for r in roots) and not any(_under(dest, c) for c in cuts) and path.exists():
            args += ["--ro-bind", str(masks.directory if path.is_dir() else masks.file), str(dest)]
    args += ["--dev", "/dev", "--proc", "/proc", "--bind", str(private_tmp), "/tmp"]
    for path in keep_visible or []:
        if path.exists() and Path("/tmp") in path.resolve().parents:
            args += ["--ro-bind", str(path), str(path)]
    for m in sorted(mounts, key=lambda m: len(m.dest.parts)):
        args += ["--ro-bind" if m.read_only else "--bind", str(m.source), str(m.dest)]
    args += ["--chdir", str(workdir), "--"]
    return args


def map_unisolated(mount_root: Path, mounts: list[Mount], workdir: PurePosixPath | None) -> Path | None:
    """Expose each mount as a symlink under ``mount_root``; return the host path of ``workdir``."""
    mount_root.mkdir(parents=True, exist_ok=True)
    for m in sorted(mounts, key=lambda m: len(m.dest.parts)):
        link = mount_root / m.dest.relative_to("/")
        link.parent.mkdir(parents=True, exist_ok=True)
        if link.is_symlink() or link.exists():
            if link.is_dir() and not link.is_symlink():
                shutil.rmtree(link)
            else:
                link.unlink()
        link.symlink_to(m.source)
    if workdir is None:
        return None
    host = mount_root / workdir.relative_to("/")
    host.mkdir(parents=True, exist_ok=True)
    return host
