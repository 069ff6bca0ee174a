"""The portable swerex bundle that the rollout pod's init container installs.

Task images (SWE-bench's among them) come with whatever Python and libc they
have, often none suitable for SWE-ReX. So the runner image carries a
self-contained bundle — a relocatable CPython with swe-rex installed under
`python/`, built in the Dockerfile — and the init container copies it into an
emptyDir at /swerex that the sandbox container mounts read-only:

    /swerex/python/bin/python3      the bundled interpreter
    /swerex/bin/swerex-serve        launcher: reads the token file, serves on loopback

In the embedded dev mode the runner image maps to the installed environment,
which has no bundle directory: then the launcher uses this interpreter instead.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

BUNDLE_SOURCE_ENV = "SWEROLLOUT_BUNDLE_SRC"
DEFAULT_BUNDLE_SOURCE = Path("/opt/swerex-bundle")
LAUNCHER = "bin/swerex-serve"

# The launcher runs the server in-process so the token never appears in argv
# (where /proc/<pid>/cmdline would show it), and it refuses an empty token:
# swerex-remote disables authentication when the token is empty.
_LAUNCHER_BODY = '''
"""Serve swerex-remote on loopback for this pod's runner (installed by swerollout)."""
import os
import sys


def probe(host, port):
    """Readiness: exit 0 when the server accepts connections. A kubelet's tcpSocket
    probe would dial the pod IP, but the server listens on loopback only."""
    import socket

    try:
        socket.create_connection((host, port), timeout=2).close()
    except OSError as exc:
        sys.exit(f"swerex-serve: not serving on {host}:{port}: {exc}")
    sys.exit(0)


def main():
    host = os.environ.get("SWEROLLOUT_POD_LOOPBACK") or os.environ.get("SWEREX_HOST") or "127.0.0.1"
    port = int(os.environ.get("SWEREX_PORT", "8880"))
    if sys.argv[1:] == ["--probe"]:
        probe(host, port)
    token_file = os.environ.get("SWEREX_AUTH_TOKEN_FILE", "")
    try:
        with open(token_file) as f:
            token = f.read().strip()
    except OSError as exc:
        sys.exit(f"swerex-serve: cannot read SWEREX_AUTH_TOKEN_FILE={token_file!r}: {exc}")
    if not token:
        sys.exit("swerex-serve: the auth token is empty; refusing to serve without authentication")
    import uvicorn
    from swerex import server

    server.AUTH_TOKEN = token
    uvicorn.run(server.app, host=host, port=port, log_level="warning")


if __name__ == "__main__":
    main()
'''


def launcher_text(interpreter: str) -> str:
    return f"#!{interpreter}\n{_LAUNCHER_BODY.lstrip()}"


def install(dest: Path, source: Path | None = None) -> Path:
    """Install the bundle (or, without one, a launcher for this interpreter) into dest."""
    src = source if source is not None else Path(os.environ.get(BUNDLE_SOURCE_ENV, DEFAULT_BUNDLE_SOURCE))
    dest.mkdir(parents=True, exist_ok=True)
    if (src / "python" / "bin" / "python3").exists():
        # Entry by entry, not copytree(src, dest): dest is usually a volume's mount point
        # owned by root (an emptyDir), and copying src's mode and times onto it fails
        # with EPERM for the non-root init container.
        for entry in src.iterdir():
            if entry.is_dir() and not entry.is_symlink():
                shutil.copytree(entry, dest / entry.name, symlinks=True, dirs_exist_ok=True)
            else:
                shutil.copy2(entry, dest / entry.name, follow_symlinks=False)
        interpreter = str(dest / "python" / "bin" / "python3")
    else:
        interpreter = sys.executable
    launcher = dest / LAUNCHER
    launcher.parent.mkdir(parents=True, exist_ok=True)
    tmp = launcher.with_suffix(".tmp")
    tmp.write_text(launcher_text(interpreter))
    tmp.chmod(0o755)
    tmp.replace(launcher)
    return launcher
