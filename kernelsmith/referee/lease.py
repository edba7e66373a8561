"""Per-GPU timing leases: many evaluations may compile and check on one GPU at once, but timing runs alone.

A readers-writer lock with writer preference. An evaluation holds a *shared* lease from its start (its
children compile, run the reference and the correctness trials) and trades it for the *exclusive* lease for
its timing phase: once a timing request waits, no new shared holder enters, the current ones finish their
correctness work, and the timing sees an otherwise idle GPU. Without this, a neighbour's compilation or
trials would land inside someone's measured interval and skew both speedups.

Whoever submits: an evaluation with no pool's lease uses this process's lease for its GPU (`lease_for`), and
every evaluation also holds a file lock per GPU (`flock`, shared / exclusive the same way), so timing phases
on one GPU never overlap across threads, callers (workshop, coach, bench, pool) or processes.
"""

from __future__ import annotations

import fcntl
import os
import re
import tempfile
import threading
import time

_LEASES: dict[str, GpuLease] = {}
_LEASES_LOCK = threading.Lock()


def lease_for(key: str) -> GpuLease:
    """This process's lease for the GPU named `key` (one per GPU, shared by every caller)."""
    with _LEASES_LOCK:
        return _LEASES.setdefault(key, GpuLease(key))


class FileLease:
    """A per-GPU lock file: shared while correctness runs, exclusive while timing, across processes."""

    def __init__(self, key: str):
        folder = os.environ.get("KERNELSMITH_LOCK_DIR") or tempfile.gettempdir()
        path = os.path.join(folder, "kernelsmith-" + re.sub(r"[^A-Za-z0-9_.-]", "_", key) + ".lock")
        old = os.umask(0)
        try:
            self.fd = os.open(path, os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC, 0o666)
        finally:
            os.umask(old)

    def shared(self) -> None:
        fcntl.flock(self.fd, fcntl.LOCK_SH)

    def exclusive(self) -> None:
        fcntl.flock(self.fd, fcntl.LOCK_EX)

    def release(self) -> None:
        fcntl.flock(self.fd, fcntl.LOCK_UN)

    def close(self) -> None:
        os.close(self.fd)


class GpuLease:
    def __init__(self, name: str = "gpu"):
        self.name = name
        self._cond = threading.Condition()
        self._shared = 0
        self._exclusive = False
        self._waiting_exclusive = 0
        self.exclusive_s = 0.0  # total time held exclusively (for metrics)

    def acquire_shared(self) -> None:
        with self._cond:
            self._cond.wait_for(lambda: not self._exclusive and not self._waiting_exclusive)
            self._shared += 1

    def release_shared(self) -> None:
        with self._cond:
            self._shared -= 1
            self._cond.notify_all()

    def acquire_exclusive(self) -> None:
        with self._cond:
            self._waiting_exclusive += 1
            self._cond.wait_for(lambda: not self._exclusive and not self._shared)
            self._waiting_exclusive -= 1
            self._exclusive = True
            self._since = time.monotonic()

    def release_exclusive(self) -> None:
        with self._cond:
            self._exclusive = False
            self.exclusive_s += time.monotonic() - self._since
            self._cond.notify_all()

    def state(self) -> dict[str, int | bool]:
        with self._cond:
            return {"shared": self._shared, "exclusive": self._exclusive, "waiting": self._waiting_exclusive}


class LeaseHolder:
    """One evaluation's hold on its GPU: shared at first, exclusive for timing, released exactly once.

    `key` names the GPU across processes (None on the CPU: nothing to hold); `lease` is a pool's, else this
    process's `lease_for(key)`."""

    def __init__(self, lease: GpuLease | None, key: str | None = None):
        self.lease = lease if lease is not None or key is None else lease_for(key)
        self.file = FileLease(key) if key is not None else None
        self.mode = ""
        if self.lease is not None:
            self.lease.acquire_shared()
            if self.file is not None:
                self.file.shared()
            self.mode = "shared"

    def exclusive(self) -> None:
        if self.lease is None or self.mode == "exclusive":
            return
        self._drop()
        self.lease.acquire_exclusive()
        if self.file is not None:
            self.file.exclusive()
        self.mode = "exclusive"

    def _drop(self) -> None:
        if self.file is not None and self.mode:
            self.file.release()
        if self.mode == "shared":
            self.lease.release_shared()
        elif self.mode == "exclusive":
            self.lease.release_exclusive()
        self.mode = ""

    def release(self) -> None:
        if self.lease is None:
            return
        self._drop()
        if self.file is not None:
            self.file.close()
            self.file = None
