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
from functools import lru_cache
from typing import Any

CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REC, MS_PRIVATE = 0x2, 0x4, 0x8, 0x4000, 0x40000
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS = 1, 4, 24, 38
PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 47, 4
PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 22, 2
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


# ------------------------------------------------------------------------------------------------ seccomp
# System calls no kernel candidate or task needs, that reach state outside the sandbox's namespaces (the
# kernel keyrings are per uid, shared by every sandbox of that uid), add attack surface (io_uring, bpf,
# userfaultfd, perf) or build new namespaces (a user namespace regains capabilities inside it). x86_64 only:
# elsewhere `seccomp_program()` returns None and the verdict's sandbox says `seccomp: none`.
AUDIT_ARCH_X86_64 = 0xC000003E
X86_64_DENY = {
    101: "ptrace", 103: "syslog", 155: "pivot_root", 163: "acct", 165: "mount", 166: "umount2", 167: "swapon",
    168: "swapoff", 169: "reboot", 175: "init_module", 176: "delete_module", 246: "kexec_load", 248: "add_key",
    249: "request_key", 250: "keyctl", 298: "perf_event_open", 303: "name_to_handle_at",
    304: "open_by_handle_at", 308: "setns", 313: "finit_module", 320: "kexec_file_load", 321: "bpf",
    323: "userfaultfd", 425: "io_uring_setup", 426: "io_uring_enter", 427: "io_uring_register",
}
X86_64_CLONE, X86_64_UNSHARE, X86_64_CLONE3 = 56, 272, 435
CLONE_NEWUSER = 0x10000000
_LD_W_ABS, _JEQ_K, _JGE_K, _JSET_K, _RET_K = 0x20, 0x15, 0x35, 0x45, 0x06
X32_BIT = 0x40000000
_ALLOW, _ERRNO = 0x7FFF0000, 0x00050000


@lru_cache(maxsize=1)
def seccomp_program() -> bytes | None:
    """The filter as a raw cBPF program (struct sock_filter[], the form bubblewrap's --seccomp reads)."""
    import platform
    import struct

    if platform.machine() not in ("x86_64", "AMD64"):
        return None
    ins: list[tuple[int, int, int, int]] = []

    def emit(code: int, k: int, jt: int = 0, jf: int = 0) -> None:
        ins.append((code, jt, jf, k))

    eperm, enosys = _ERRNO | 1, _ERRNO | 38
    emit(_LD_W_ABS, 4)  # seccomp_data.arch
    emit(_JEQ_K, AUDIT_ARCH_X86_64, 1, 0)
    emit(_RET_K, _ALLOW)  # another ABI (x32 and i386 are not reached by our interpreters)
    emit(_LD_W_ABS, 0)  # seccomp_data.nr
    emit(_JGE_K, X32_BIT, 0, 1)
    emit(_RET_K, eperm)  # the x32 ABI shares this arch tag: its numbers would slip past the list below
    for nr in sorted(X86_64_DENY):
        emit(_JEQ_K, nr, 0, 1)
        emit(_RET_K, eperm)
    emit(_JEQ_K, X86_64_CLONE3, 0, 1)
    emit(_RET_K, enosys)  # its flags are in memory, out of a filter's reach: libc falls back to clone
    emit(_JEQ_K, X86_64_CLONE, 1, 0)
    emit(_JEQ_K, X86_64_UNSHARE, 0, 3)
    emit(_LD_W_ABS, 16)  # args[0], low word: the clone/unshare flags
    emit(_JSET_K, CLONE_NEWUSER, 0, 1)
    emit(_RET_K, eperm)
    emit(_RET_K, _ALLOW)
    return b"".join(struct.pack("<HBBI", code, jt, jf, k) for code, jt, jf, k in ins)


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def install_seccomp() -> bool:
    """Load the filter into this process (needs no_new_privs first); False where there is none for this ABI."""
    prog = seccomp_program()
    if prog is None:
        return False
    buf = ctypes.create_string_buffer(prog, len(prog))
    fprog = _SockFprog(len(prog) // 8, ctypes.cast(buf, ctypes.c_void_p))
    _check(prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.addressof(fprog)), "prctl(SECCOMP)")
    return True


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
    if os.path.isdir("/dev/pts"):  # its own pseudo-terminals: the template's are every sibling's too
        mount("devpts", "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620")
        if os.path.exists("/dev/ptmx") and not os.path.islink("/dev/ptmx"):
            mount("/dev/pts/ptmx", "/dev/ptmx", None, MS_BIND)
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
    install_seccomp()
    left = capabilities()
    if any(left.get(k, 1) for k in ("CapPrm", "CapEff", "CapBnd", "CapAmb", "CapInh")) or os.getuid() != uid:
        raise NestError(1, f"privileges left after the drop: {left}, uid {os.getuid()}")
