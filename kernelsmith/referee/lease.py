"""Per-GPU timing leases: many evaluations may compile and check on one GPU at once, but timing runs alone.

An evaluation holds a *shared* lease from its start (its sandboxes compile, run the reference and the
correctness trials) and trades it for the *exclusive* lease for its timing phase. Timing phases on one GPU
never overlap, and nothing else runs beside one:

- In this process, the timing evaluation does not wait for its neighbours to finish: it *freezes* every other
  sandbox on the GPU (their cgroups, `cgroup.freeze`: the kernel stops every process in them) and thaws them
  when it is done; their deadlines are extended by the time they spent frozen. A candidate that hangs in its
  correctness phase therefore stalls no one. Work that cannot be frozen (a holder whose sandboxes have no
  freezable cgroup, e.g. an ordinary user's, or one that has not named them yet) is waited for instead, with writer preference:
  once a timing request waits for it, no new holder starts.
- Across processes (whoever submits: workshop, coach, bench, pool, two runs on one machine), each process holds
  a lock file per GPU (`flock`): shared while any of its evaluations works, exclusive while one of them times.
"""

from __future__ import annotations

import fcntl
import os
import re
import tempfile
import threading
import time
from typing import Any, Protocol

_LEASES: dict[str, GpuLease] = {}
_LEASES_LOCK = threading.Lock()


class Freezable(Protocol):
    """A sandbox the lease can stop and restart (sandbox.Child)."""

    def freezable(self) -> bool: ...

    def freeze(self, frozen: bool) -> bool: ...

    def gone(self) -> bool: ...


def lease_for(key: str) -> GpuLease:
    """This process's lease for the GPU named `key` (one per GPU, shared by every caller)."""
    with _LEASES_LOCK:
        return _LEASES.setdefault(key, GpuLease(key, lock_file=True))


class FileLease:
    """A per-GPU lock file: shared while this process works on the GPU, exclusive while it times there."""

    def __init__(self, key: str):
        folder = os.environ.get("KERNELSMITH_LOCK_DIR") or tempfile.gettempdir()
        path = os.path.join(folder, "kernelsmith-" + re.sub(r"[^A-Za-z0-9_.-]", "_", key) + ".lock")
        old = os.umask(0)
        try:
            self.fd = os.open(path, os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC, 0o666)
        finally:
            os.umask(old)
        self.mode = ""

    def set(self, mode: str) -> None:
        """Move this process's lock to `mode` ("", "shared" or "exclusive"); blocks while another process's lock
        conflicts."""
        if mode != self.mode:
            fcntl.flock(self.fd, {"": fcntl.LOCK_UN, "shared": fcntl.LOCK_SH, "exclusive": fcntl.LOCK_EX}[mode])
            self.mode = mode


class GpuLease:
    def __init__(self, name: str = "gpu", lock_file: bool = False):
        self.name = name
        self._cond = threading.Condition()
        self._working: set[LeaseHolder] = set()  # shared holders
        self._timer: LeaseHolder | None = None
        self._waiting = 0  # holders waiting for the exclusive lease
        self._sandboxes: list[Freezable] = []  # every sandbox on this GPU (spares and kept judges too)
        self._frozen: list[Freezable] = []
        self._file = FileLease(name) if lock_file else None
        self._file_lock = threading.Lock()  # orders this process's changes to the lock file
        self.exclusive_s = 0.0  # total time held exclusively (for metrics and for frozen holders' deadlines)
        self._since = 0.0

    # -- sandboxes
    def track(self, sandbox: Freezable) -> None:
        """A sandbox now runs on this GPU: frozen at once if a timing phase is under way (not the timer's own:
        its sandboxes exist before it asks for the lease). One that cannot be frozen is not tracked: its
        holder is waited for instead."""
        if not sandbox.freezable():
            return
        with self._cond:
            self._sandboxes = [s for s in self._sandboxes if not s.gone()] + [sandbox]
            if self._timer is not None and sandbox.freeze(True):
                self._frozen.append(sandbox)

    # -- holders
    def acquire_shared(self, holder: LeaseHolder) -> None:
        with self._cond:
            self._cond.wait_for(lambda: self._timer is None and not self._waiting_for_unfreezable())
            self._working.add(holder)
            holder.clock0 = self.clock()
        self._sync_file()

    def release_shared(self, holder: LeaseHolder) -> None:
        with self._cond:
            self._working.discard(holder)
            self._cond.notify_all()
        self._sync_file()

    def acquire_exclusive(self, holder: LeaseHolder) -> None:
        with self._cond:
            self._working.discard(holder)
            self._waiting += 1
            try:
                self._cond.wait_for(lambda: self._timer is None and not any(
                    not h.freezable() for h in self._working))
            finally:
                self._waiting -= 1
            self._timer = holder
            self._since = time.monotonic()
            own = {id(s) for s in holder.sandboxes}
            self._frozen = [s for s in self._sandboxes if id(s) not in own and not s.gone() and s.freeze(True)]
        self._sync_file()  # then wait for other processes' work to end

    def release_exclusive(self, holder: LeaseHolder) -> None:
        with self._cond:
            if self._timer is not holder:
                return
        with self._file_lock:  # back to shared (or nothing) before anyone here resumes work
            if self._file is not None:
                with self._cond:
                    mode = "shared" if self._working else ""
                self._file.set(mode)
            with self._cond:
                for s in self._frozen:
                    s.freeze(False)
                self._frozen = []
                self.exclusive_s += time.monotonic() - self._since
                self._timer = None
                self._cond.notify_all()

    def changed(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def clock(self) -> float:
        """Seconds this GPU has been held exclusively so far (the current phase included): the time every
        other evaluation spent frozen."""
        with self._cond:
            return self.exclusive_s + (time.monotonic() - self._since if self._timer is not None else 0.0)

    def _waiting_for_unfreezable(self) -> bool:
        """Writer preference where it is needed: a timing request that waits for unfreezable work holds back
        new holders (their work would only prolong the wait)."""
        return self._waiting > 0 and any(not h.freezable() for h in self._working)

    def _sync_file(self) -> None:
        if self._file is None:
            return
        with self._file_lock:
            with self._cond:
                mode = "exclusive" if self._timer is not None else "shared" if self._working else ""
            self._file.set(mode)

    def state(self) -> dict[str, Any]:
        with self._cond:
            return {"shared": len(self._working), "exclusive": self._timer is not None, "waiting": self._waiting,
                    "frozen": len(self._frozen)}


class LeaseHolder:
    """One evaluation's hold on its GPU: shared at first, exclusive for timing, released exactly once.

    `key` names the GPU across processes (None on the CPU: nothing to hold); `lease` is a pool's, else this
    process's `lease_for(key)`. `own(...)` names the evaluation's sandboxes: if every one of them can be frozen,
    a neighbour's timing freezes them instead of waiting for them."""

    def __init__(self, lease: GpuLease | None, key: str | None = None):
        self.lease = lease if lease is not None or key is None else lease_for(key)
        self.sandboxes: list[Freezable] = []
        self.mode = ""
        self.clock0 = 0.0
        self._own_s = 0.0  # of the lease's exclusive time, this holder's own timing
        if self.lease is not None:
            self.lease.acquire_shared(self)
            self.mode = "shared"

    def own(self, *sandboxes: Freezable) -> None:
        self.sandboxes = list(sandboxes)
        if self.lease is not None:
            self.lease.changed()  # a timing request waiting for this holder may now freeze it instead

    def freezable(self) -> bool:
        return bool(self.sandboxes) and all(s.freezable() for s in self.sandboxes)

    def paused_s(self) -> float:
        """How long this holder's sandboxes have been frozen for others' timing (to add to its deadline)."""
        if self.lease is None or not self.mode:
            return 0.0
        if self.mode == "exclusive":
            return self._own_s
        return self.lease.clock() - self.clock0

    def exclusive(self) -> None:
        if self.lease is None or self.mode == "exclusive":
            return
        self._own_s = self.paused_s()
        self.lease.acquire_exclusive(self)
        self.mode = "exclusive"

    def release(self) -> None:
        if self.lease is None:
            return
        if self.mode == "shared":
            self.lease.release_shared(self)
        elif self.mode == "exclusive":
            self.lease.release_exclusive(self)
        self.mode = ""
