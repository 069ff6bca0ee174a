"""Known container escape techniques, run from inside a sandbox container (stdlib only).

Usage: python3 escape_attempts.py TERCES TARGET... ; prints one JSON object: for each
attempt, "blocked" or what it achieved. TERCES is, reversed, a comma-separated list of
strings the sandbox must never read (the runner's token, the inference server's keys;
reversed so this process's own command line does not hold them); each TARGET is
host:port[/path] it must never reach.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import socket
import struct
import sys

libc = ctypes.CDLL(None, use_errno=True)
NR = {
    "x86_64": {"open_by_handle_at": 304, "name_to_handle_at": 303, "keyctl": 250, "bpf": 321, "ptrace": 101},
    "aarch64": {"open_by_handle_at": 265, "name_to_handle_at": 264, "keyctl": 219, "bpf": 280, "ptrace": 117},
}[os.uname().machine]


def failed(rc: int) -> str:
    return "blocked" if rc < 0 else f"succeeded ({rc})"


def open_by_handle() -> str:
    """The "shocker" escape: open the root inode of the file system holding /testbed by handle."""
    mount_fd = os.open("/testbed", os.O_RDONLY)
    results = []
    # A handle for inode 2 (the root of ext4/xfs-like file systems), generation 0.
    for handle_type, payload in ((1, struct.pack("=II", 2, 0)), (0x81, struct.pack("=QI", 2, 0))):
        buf = ctypes.create_string_buffer(struct.pack("=Ii", len(payload), handle_type) + payload)
        fd = libc.syscall(NR["open_by_handle_at"], mount_fd, buf, os.O_RDONLY)
        results.append(failed(fd))
        if fd >= 0:
            results.append(str(os.listdir(fd)))
    handle = ctypes.create_string_buffer(struct.pack("=Ii", 128, 0) + bytes(128))
    mount_id = ctypes.c_int()
    rc = libc.syscall(NR["name_to_handle_at"], -100, b"/testbed", handle, ctypes.byref(mount_id), 0)
    results.append(failed(rc))
    return "blocked" if all(r == "blocked" for r in results) else "; ".join(results)


def proc_secret(secrets: list[str]) -> str:
    """Look for the secrets in every /proc entry of every pid we can see (environ, cmdline, open files, roots)."""
    found = []
    for secret in secrets:
        found += _proc_secret(secret)
    return "blocked" if not found else f"read from {found[:3]}"


def _proc_secret(secret: str) -> list[str]:
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        for rel in ("environ", "cmdline"):
            try:
                if secret.encode() in open(f"/proc/{pid}/{rel}", "rb").read():
                    found.append(f"/proc/{pid}/{rel}")
            except OSError:
                pass
        for base in (f"/proc/{pid}/fd", f"/proc/{pid}/root/var/run/secrets", f"/proc/{pid}/root/etc"):
            for dirpath, _, files in os.walk(base):
                for f in files:
                    try:
                        if secret.encode() in open(os.path.join(dirpath, f), "rb").read(1 << 20):
                            found.append(os.path.join(dirpath, f))
                    except OSError:
                        pass
    return found


def mount() -> str:
    os.makedirs("/tmp/m", exist_ok=True)
    rc = libc.mount(b"none", b"/tmp/m", b"tmpfs", 0, None)
    return failed(rc)


def mknod() -> str:
    try:
        os.mknod("/tmp/mem", 0o600 | 0o020000, os.makedev(1, 1))  # /dev/mem
    except OSError:
        return "blocked"
    return "succeeded"


def syscalls() -> str:
    out = []
    out.append(failed(libc.syscall(NR["keyctl"], 0, -3, 0, 0, 0)))  # KEYCTL_GET_KEYRING_ID of the session keyring
    out.append(failed(libc.syscall(NR["bpf"], 0, None, 0)))  # BPF_MAP_CREATE
    out.append(failed(libc.syscall(NR["ptrace"], 16, 1, 0, 0)))  # PTRACE_ATTACH to pid 1
    return "blocked" if all(r == "blocked" for r in out) else "; ".join(out)


def capabilities() -> str:
    status = dict(line.split(":", 1) for line in open("/proc/self/status").read().splitlines() if ":" in line)
    eff, nnp = status["CapEff"].strip(), status["NoNewPrivs"].strip()
    return "blocked" if int(eff, 16) == 0 and nnp == "1" else f"CapEff={eff} NoNewPrivs={nnp}"


def reach(target: str) -> str:
    if target.startswith("unix:"):
        return reach_unix(target.removeprefix("unix:"))
    hostport, _, path = target.partition("/")
    host, _, port = hostport.rpartition(":")
    try:
        s = socket.create_connection((host, int(port)), timeout=5)
    except OSError as exc:
        return "blocked" if exc.errno in (errno.ECONNREFUSED, errno.ENETUNREACH, errno.EHOSTUNREACH, None) else str(exc)
    with s:
        s.sendall(f"POST /{path} HTTP/1.0\r\nHost: x\r\nContent-Length: 2\r\n\r\n{{}}".encode())
        reply = s.recv(200).decode(errors="replace")
    return f"reached: {reply.splitlines()[0] if reply else 'connected'}"


def reach_unix(path: str) -> str:
    """A host daemon's socket (a cluster's containerd lives under /run): neither visible nor connectable."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.settimeout(5)
        s.connect(path)
    except OSError as exc:
        return "blocked" if exc.errno in (errno.ENOENT, errno.ECONNREFUSED, errno.EACCES, errno.EPERM) else str(exc)
    finally:
        s.close()
    return "reached"


def main() -> None:
    secrets, targets = sys.argv[1][::-1].split(","), sys.argv[2:]
    report = {}
    for name, attempt in (
        ("open_by_handle_at", open_by_handle),
        ("proc_secret", lambda: proc_secret(secrets)),
        ("mount", mount),
        ("mknod", mknod),
        ("syscalls", syscalls),
        ("capabilities", capabilities),
        *((f"reach {t}", lambda t=t: reach(t)) for t in targets),
    ):
        try:
            report[name] = attempt()
        except Exception as exc:  # an attempt that cannot even be made counts as blocked only if it is a denial
            report[name] = "blocked" if isinstance(exc, PermissionError) else f"error: {exc!r}"
    print(json.dumps(report))


if __name__ == "__main__":
    main()
