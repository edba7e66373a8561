"""Candidate sandboxes forked from a template: the kernel interfaces a forked child uses to wall itself in.

A candidate's sandbox costs an interpreter, torch, `torch._dynamo` and Triton imported before its first message
(1.5 s of a core on the CPU machine, ~5.5 s on the H200), and every candidate needs a fresh one. The template
(`worker.py zygote`, itself in a bubblewrap sandbox: read-only view, no network) pays that once and forks a
child per candidate. The child gets what bubblewrap gives a sandbox, from the same kernel interfaces, before
any candidate code exists in it: its own mount, PID, network, IPC and UTS namespaces (it is PID 1 of its own:
nothing else is visible, and everything it starts dies with it), fresh sized tmpfs on its work dir, `/tmp` and
`/dev/shm` (with the template's read-only binds below them put back: a checkout under /tmp), its own `/proc`, an unprivileged uid with no groups, no capabilities (bounding set emptied), no new
privileges, rlimits, and only its channel and log as open files. Root only: the template needs CAP_SYS_ADMIN
to make namespaces for others, which an ordinary user's sandbox has only inside a user namespace (there the
referee starts each candidate with bubblewrap, as before).

stdlib only; Linux only.
"""

from __future__ import annotations

import ctypes
import os
import resource
import signal
from typing import Any

CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REC, MS_PRIVATE = 0x2, 0x4, 0x8, 0x4000, 0x40000
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS = 1, 4, 24, 38
PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 47, 4
NAMESPACES = CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWNET | CLONE_NEWUTS

_libc: Any = ctypes.CDLL(None, use_errno=True)


class NestError(OSError):
    """A step of walling the child in failed: the child must not run candidate code."""


def _check(rc: int, what: str) -> None:
    if rc != 0:
        err = ctypes.get_errno()
        raise NestError(err, f"{what}: {os.strerror(err)}")


def unshare(flags: int) -> None:
    _check(_libc.unshare(ctypes.c_int(flags)), "unshare")


def mount(source: str, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    _check(_libc.mount(source.encode(), target.encode(), fstype.encode() if fstype else None,
                       ctypes.c_ulong(flags), data.encode() if data else None), f"mount {target}")


def prctl(option: int, arg: int = 0, arg3: int = 0) -> int:
    return _libc.prctl(ctypes.c_int(option), ctypes.c_ulong(arg), ctypes.c_ulong(arg3), ctypes.c_ulong(0),
                       ctypes.c_ulong(0))


def die_with_parent() -> None:
    _check(prctl(PR_SET_PDEATHSIG, signal.SIGKILL), "prctl(PDEATHSIG)")


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def clear_capabilities() -> None:
    """Empty the effective, permitted and inheritable sets (capset(2), version 3: two 32-bit words each)."""
    header = _CapHeader(0x20080522, 0)
    data = (_CapData * 2)()
    _check(_libc.capset(ctypes.byref(header), data), "capset")


def capabilities() -> dict[str, int]:
    """The capability sets this process holds (from its /proc/self/status)."""
    caps = {}
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(("CapInh:", "CapPrm:", "CapEff:", "CapBnd:", "CapAmb:")):
                key, value = line.split(":", 1)
                caps[key] = int(value.strip(), 16)
    return caps


MS_BIND, MS_REMOUNT, MS_RDONLY = 0x1000, 0x20, 0x1
SCRATCH = ("/job", "/tmp", "/dev/shm")


def _mounts_under(dirs: tuple[str, ...]) -> list[str]:
    """Mount points below `dirs` in this mount namespace (the template's read-only binds of an interpreter or
    checkout that lives under /tmp, say), parents first. Octal escapes in mountinfo are decoded."""
    found = []
    with open("/proc/self/mountinfo") as fh:
        for line in fh:
            point = line.split()[4].encode().decode("unicode_escape")
            if any(point.startswith(d + "/") for d in dirs):
                found.append(point)
    return sorted(set(found), key=lambda p: (p.count("/"), p))


def _fresh_scratch(tmp_mb: int) -> None:
    """New empty tmpfs on the scratch dirs, with the read-only binds the template had below them put back (held
    by descriptors across the over-mount, bound again from /proc/self/fd)."""
    held = []
    for point in _mounts_under(SCRATCH):
        held.append((point, os.open(point, os.O_PATH | os.O_CLOEXEC), os.path.isdir(point)))
    size = f"size={tmp_mb << 20},mode=1777"
    for path in SCRATCH:
        mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV, size)
    for point, fd, is_dir in held:
        parent = point if is_dir else os.path.dirname(point)
        os.makedirs(parent, mode=0o755, exist_ok=True)
        if not is_dir and not os.path.exists(point):
            os.close(os.open(point, os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC, 0o444))
        mount(f"/proc/self/fd/{fd}", point, None, MS_BIND | MS_REC)
        mount("none", point, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)
        os.close(fd)


def wall_in(uid: int, tmp_mb: int, file_mb: int, data_mb: int | None, keep_fds: list[int]) -> None:
    """In a freshly forked child of the template, already in new namespaces (`unshare(NAMESPACES)` by its
    parent, of whose PID namespace this is the first process): make its private filesystem and drop to
    `uid` for good. Raises `NestError` if any step fails; afterwards only `keep_fds` (and 0-2) are open."""
    die_with_parent()
    mount("none", "/", None, MS_REC | MS_PRIVATE)  # nothing mounted here propagates back, or in
    _fresh_scratch(tmp_mb)
    mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)  # this PID namespace's only
    os.chdir("/job")
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_FSIZE, (file_mb << 20, file_mb << 20))
    if data_mb is not None:
        resource.setrlimit(resource.RLIMIT_DATA, (data_mb << 20, data_mb << 20))
    for fd in [int(n) for n in os.listdir("/proc/self/fd")]:
        if fd > 2 and fd not in keep_fds:
            try:
                os.close(fd)
            except OSError:
                pass
    for cap in range(64):  # the bounding set first (needs CAP_SETPCAP), then the uid change clears the rest
        if prctl(PR_CAPBSET_DROP, cap) != 0 and ctypes.get_errno() == 22:  # EINVAL: past the last capability
            break
    prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL)
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
    clear_capabilities()
    _check(prctl(PR_SET_NO_NEW_PRIVS, 1), "prctl(NO_NEW_PRIVS)")
    left = capabilities()
    if any(left.get(k, 1) for k in ("CapPrm", "CapEff", "CapBnd", "CapAmb", "CapInh")) or os.getuid() != uid:
        raise NestError(1, f"privileges left after the drop: {left}, uid {os.getuid()}")
