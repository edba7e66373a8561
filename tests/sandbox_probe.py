"""Runs inside a referee sandbox as an attacker with arbitrary code would: tries every way out it knows and
prints one JSON line of what it could do. Used by tests/test_sandbox.py (never by the referee itself).

argv: MARKER_DIR SECRET_NAME PROJECT_DIR — a host dir it must not be able to write, the name of a secret to look
for, and the project's checkout (of which only the package and its virtual environment may be visible).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys


def attempt(fn) -> str:
    try:
        result = fn()
        return f"ok {result!r}"[:200]
    except BaseException as exc:  # noqa: BLE001
        return f"refused {type(exc).__name__}"


def main() -> None:
    marker_dir, secret_name, project = sys.argv[1], sys.argv[2], sys.argv[3]
    seen: dict[str, object] = {"uid": os.getuid(), "pid": os.getpid(), "ppid": os.getppid()}
    seen["processes"] = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
    seen["env_secret"] = secret_name in os.environ
    # Secrets of any other process, in any spelling it could be read back in.
    found = []
    for pid in seen["processes"]:
        for what in ("environ",):
            try:
                with open(f"/proc/{pid}/{what}", "rb") as fh:
                    if secret_name.encode() in fh.read():
                        found.append(f"{pid}/{what}")
            except OSError:
                pass
    seen["secret_in_proc"] = found
    # Host files: the project, root's home, the orchestrator's temp dirs, another job's dir.
    seen["listable"] = {p: attempt(lambda p=p: sorted(os.listdir(p))) for p in
                        ("/root", "/home", marker_dir, "/var")}
    seen["project"] = attempt(lambda: sorted(os.listdir(project)))
    seen["etc"] = sorted(os.listdir("/etc"))
    seen["write_marker"] = attempt(lambda: open(os.path.join(marker_dir, "escaped.txt"), "w").write("x"))
    seen["write_tmp"] = attempt(lambda: open("/tmp/sandbox-probe.txt", "w").write("x"))
    seen["write_shm"] = attempt(lambda: open("/dev/shm/sandbox-probe", "wb").write(b"x" * 1024))
    seen["write_usr"] = attempt(lambda: open("/usr/sandbox-probe", "w").write("x"))
    seen["write_job"] = attempt(lambda: open("job-file.txt", "w").write("x"))
    # The network and the judge's and orchestrator's processes.
    seen["net_interfaces"] = open("/proc/net/dev").read().count(":")
    seen["connect"] = attempt(lambda: socket.create_connection(("127.0.0.1", 22), timeout=1))
    seen["kill_ppid"] = attempt(lambda: os.kill(os.getppid(), signal.SIGKILL))
    seen["stop_ppid"] = attempt(lambda: os.kill(os.getppid(), signal.SIGSTOP))
    seen["kill_all"] = attempt(lambda: os.kill(-1, 0))
    seen["ptrace_devices"] = sorted(os.listdir("/dev"))
    seen["pts"] = sorted(os.listdir("/dev/pts")) if os.path.isdir("/dev/pts") else []
    # Kernel state outside the namespaces (red team, 2026-12-03): the keyrings are per uid, shared by every
    # sandbox of that uid; a new user namespace would give back capabilities; io_uring is attack surface.
    import ctypes
    import platform

    libc = ctypes.CDLL(None, use_errno=True)

    def syscall(*args: int) -> str:
        rc = libc.syscall(*[ctypes.c_long(a) for a in args])
        return "ok" if rc >= 0 else f"refused {os.strerror(ctypes.get_errno())}"

    if platform.machine() == "x86_64":
        seen["keyctl"] = syscall(250, 0, -4, 0)  # KEYCTL_GET_KEYRING_ID of @u (-4)
        seen["add_key"] = syscall(248, 0, 0, 0, 0, -4)
        seen["unshare_user"] = syscall(272, 0x10000000)
        seen["io_uring"] = syscall(425, 1, 0)
    # A daemon that tries to outlive the sandbox: it writes its pid to the marker dir after 1 s if it can.
    pid = os.fork()
    if pid == 0:
        os.setsid()
        if os.fork() == 0:
            import time

            time.sleep(1.0)
            try:
                with open(os.path.join(marker_dir, "daemon.txt"), "w") as fh:
                    fh.write(str(os.getpid()))
            except OSError:
                pass
            os._exit(0)
        os._exit(0)
    os.waitpid(pid, 0)
    print("PROBE " + json.dumps(seen), flush=True)


if __name__ == "__main__":
    main()
