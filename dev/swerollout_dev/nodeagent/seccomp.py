"""The seccomp filter every bubblewrap container runs under, compiled here to classic BPF.

No libseccomp: the program is a short list of comparisons, and building it in
Python means a fresh machine needs nothing beyond bubblewrap (which loads it
with ``--seccomp FD`` and sets no_new_privs first).

What it refuses, and why (the calls a container escape or a kernel attack uses;
a test suite never needs them):
- file handles (``open_by_handle_at`` reads any inode of a mounted file system,
  bypassing the mount namespace; ``name_to_handle_at`` finds the handles);
- mounting in every form (old and new mount API, ``pivot_root``, ``chroot``);
- device nodes (``mknod``), kernel modules, kexec, reboot, swap, acct, quotas;
- other processes' memory (``ptrace``, ``process_vm_readv/writev``);
- the kernel keyring, ``bpf``, ``perf_event_open``, ``userfaultfd``, ``syslog``;
- new namespaces (``unshare``, ``setns``, ``clone`` with namespace flags), so a
  process cannot gain capabilities in a user namespace of its own;
- ``clone3`` answers ENOSYS, as Docker's profile does: its flags live in memory a
  filter cannot read, and libc falls back to ``clone``.
Anything from another syscall ABI (i386, x32) is refused outright, because the
numbers below would not apply to it.
"""

from __future__ import annotations

import errno
import os
import platform
import struct
import tempfile
from dataclasses import dataclass

BLOCKED = (
    "open_by_handle_at",
    "name_to_handle_at",
    "mount",
    "umount2",
    "mount_setattr",
    "move_mount",
    "open_tree",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "pivot_root",
    "chroot",
    "mknod",
    "mknodat",
    "init_module",
    "finit_module",
    "delete_module",
    "kexec_load",
    "kexec_file_load",
    "reboot",
    "swapon",
    "swapoff",
    "acct",
    "quotactl",
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "keyctl",
    "add_key",
    "request_key",
    "bpf",
    "perf_event_open",
    "userfaultfd",
    "syslog",
    "lookup_dcookie",
    "unshare",
    "setns",
    "iopl",
    "ioperm",
)

# Syscall numbers (from the kernel's unistd headers); None: the ABI has no such call.
_X86_64: dict[str, int | None] = {
    "open_by_handle_at": 304,
    "name_to_handle_at": 303,
    "mount": 165,
    "umount2": 166,
    "mount_setattr": 442,
    "move_mount": 429,
    "open_tree": 428,
    "fsopen": 430,
    "fsconfig": 431,
    "fsmount": 432,
    "fspick": 433,
    "pivot_root": 155,
    "chroot": 161,
    "mknod": 133,
    "mknodat": 259,
    "init_module": 175,
    "finit_module": 313,
    "delete_module": 176,
    "kexec_load": 246,
    "kexec_file_load": 320,
    "reboot": 169,
    "swapon": 167,
    "swapoff": 168,
    "acct": 163,
    "quotactl": 179,
    "ptrace": 101,
    "process_vm_readv": 310,
    "process_vm_writev": 311,
    "keyctl": 250,
    "add_key": 248,
    "request_key": 249,
    "bpf": 321,
    "perf_event_open": 298,
    "userfaultfd": 323,
    "syslog": 103,
    "lookup_dcookie": 212,
    "unshare": 272,
    "setns": 308,
    "iopl": 172,
    "ioperm": 173,
    "clone": 56,
    "clone3": 435,
}
_AARCH64: dict[str, int | None] = {
    "open_by_handle_at": 265,
    "name_to_handle_at": 264,
    "mount": 40,
    "umount2": 39,
    "mount_setattr": 442,
    "move_mount": 429,
    "open_tree": 428,
    "fsopen": 430,
    "fsconfig": 431,
    "fsmount": 432,
    "fspick": 433,
    "pivot_root": 41,
    "chroot": 51,
    "mknod": None,
    "mknodat": 33,
    "init_module": 105,
    "finit_module": 273,
    "delete_module": 106,
    "kexec_load": 104,
    "kexec_file_load": 294,
    "reboot": 142,
    "swapon": 224,
    "swapoff": 225,
    "acct": 89,
    "quotactl": 60,
    "ptrace": 117,
    "process_vm_readv": 270,
    "process_vm_writev": 271,
    "keyctl": 219,
    "add_key": 217,
    "request_key": 218,
    "bpf": 280,
    "perf_event_open": 241,
    "userfaultfd": 282,
    "syslog": 116,
    "lookup_dcookie": 18,
    "unshare": 97,
    "setns": 268,
    "iopl": None,
    "ioperm": None,
    "clone": 220,
    "clone3": 435,
}


@dataclass(frozen=True)
class _Arch:
    audit: int  # AUDIT_ARCH_* as seccomp_data.arch reports it
    numbers: dict[str, int | None]
    x32_bit: bool  # x86_64 also accepts x32 calls (nr | 0x40000000): refuse them


_ARCHES = {
    "x86_64": _Arch(0xC000003E, _X86_64, True),
    "aarch64": _Arch(0xC00000B7, _AARCH64, False),
}

# classic BPF opcodes
_LD_W_ABS = 0x20
_JEQ_K = 0x15
_JGE_K = 0x35
_JSET_K = 0x45
_RET_K = 0x06
_RET_ALLOW = 0x7FFF0000
_RET_ERRNO = 0x00050000

_OFF_NR, _OFF_ARCH, _OFF_ARG0 = 0, 4, 16  # offsets in struct seccomp_data (arg0's low word on little endian)
# CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET | NEWTIME
_NAMESPACE_FLAGS = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000 | 0x80


class UnsupportedArch(RuntimeError):
    pass


def _insn(code: int, jt: int, jf: int, k: int) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def program(machine: str | None = None) -> bytes:
    """The filter for ``machine`` (default: this one) as struct sock_filter[] bytes."""
    machine = machine or platform.machine()
    arch = _ARCHES.get(machine)
    if arch is None:
        raise UnsupportedArch(f"no seccomp syscall table for {machine!r} (known: {', '.join(_ARCHES)})")
    blocked = [n for n in (arch.numbers[name] for name in BLOCKED) if n is not None]
    clone, clone3 = arch.numbers["clone"], arch.numbers["clone3"]
    assert clone is not None and clone3 is not None
    # Layout: header, one JEQ per blocked call (jumping to DENY), the clone checks, ALLOW, DENY, ENOSYS.
    body: list[tuple[int, int, int, int]] = []
    body.append((_LD_W_ABS, 0, 0, _OFF_ARCH))
    body.append((_JEQ_K, 1, 0, arch.audit))  # our ABI: skip the next instruction
    body.append((_RET_K, 0, 0, _RET_ERRNO | errno.ENOSYS))
    body.append((_LD_W_ABS, 0, 0, _OFF_NR))
    checks: list[tuple[int, int]] = []  # (opcode, k) that jump to DENY when true
    if arch.x32_bit:
        checks.append((_JGE_K, 0x40000000))
    checks += [(_JEQ_K, n) for n in blocked]
    # after the checks: clone3 -> ENOSYS; clone with namespace flags -> DENY; ALLOW; DENY; ENOSYS
    n_checks = len(checks)
    tail = 6  # JEQ clone3, JEQ clone, LD arg0, JSET, RET ALLOW, RET DENY(, RET ENOSYS after)
    for i, (op, k) in enumerate(checks):
        to_deny = (n_checks - 1 - i) + tail - 1
        body.append((op, to_deny, 0, k))
    body.append((_JEQ_K, 5, 0, clone3))  # -> ENOSYS
    body.append((_JEQ_K, 0, 2, clone))  # not clone -> ALLOW
    body.append((_LD_W_ABS, 0, 0, _OFF_ARG0))
    body.append((_JSET_K, 1, 0, _NAMESPACE_FLAGS))  # -> DENY
    body.append((_RET_K, 0, 0, _RET_ALLOW))
    body.append((_RET_K, 0, 0, _RET_ERRNO | errno.EPERM))
    body.append((_RET_K, 0, 0, _RET_ERRNO | errno.ENOSYS))
    if len(body) > 255:
        raise AssertionError("seccomp program too long for 8-bit jumps")
    return b"".join(_insn(*i) for i in body)


def program_fd(machine: str | None = None) -> int:
    """An open, rewound file holding the program, for bubblewrap's ``--seccomp FD``."""
    data = program(machine)
    with tempfile.TemporaryFile() as f:
        f.write(data)
        f.flush()
        fd = os.dup(f.fileno())
    os.lseek(fd, 0, os.SEEK_SET)
    return fd
