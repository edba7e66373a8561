"""Per-GPU timing leases: many evaluations may compile and check on one GPU at once, but timing runs alone.

A readers-writer lock with writer preference. An evaluation holds a *shared* lease from its start (its
children compile, run the reference and the correctness trials) and trades it for the *exclusive* lease for
its timing phase: once a timing request waits, no new shared holder enters, the current ones finish their
correctness work, and the timing sees an otherwise idle GPU. Without this, a neighbour's compilation or
trials would land inside someone's measured interval and skew both speedups.
"""

from __future__ import annotations

import threading
import time


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
    """One evaluation's hold on a lease: shared at first, exclusive for timing, released exactly once."""

    def __init__(self, lease: GpuLease | None):
        self.lease, self.mode = lease, ""
        if lease is not None:
            lease.acquire_shared()
            self.mode = "shared"

    def exclusive(self) -> None:
        if self.lease is None or self.mode == "exclusive":
            return
        if self.mode == "shared":
            self.lease.release_shared()
        self.mode = ""
        self.lease.acquire_exclusive()
        self.mode = "exclusive"

    def release(self) -> None:
        if self.lease is None:
            return
        if self.mode == "shared":
            self.lease.release_shared()
        elif self.mode == "exclusive":
            self.lease.release_exclusive()
        self.mode = ""
