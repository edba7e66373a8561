"""The evolution archive: hall of fame, MAP-Elites grid, islands with ring migration, recent failures.

Everything is bounded and every `add` costs O(k + log cells) (k = hall-of-fame / island-elite size), so a long
run with thousands of programs does not slow down per step. Programs no structure refers to any more are
dropped (reference counts); the run store keeps the full history.

Determinism: no hidden randomness. Sampling takes a `random.Random` (the archive's own, seeded by `seed`, when
none is given) and iterates only over deterministically ordered structures, so the same programs added in the
same order with the same rng give the same samples and an identical `snapshot()` — which is how a resumed run
is checked against the run it continues.

Design choices:
- Rejected programs (cheats) are never parents, inspirations or the incumbent: they are kept only as failures.
- One rule orders programs everywhere (hall of fame, island elites, grid cells, hence migration, parents and
  the prompt's "best programs"): `score.displaces`. A correct program goes ahead of another correct one only when
  its speedup interval lies wholly above the other's; speedups inside each other's intervals are ties, and on a
  tie the program added earlier stays ahead. Timing noise therefore never reorders programs; without intervals
  (the CPU) a strictly higher score goes ahead, and an incorrect program never goes ahead of a correct one.
- The grid cell of a program is (complexity bin, score band, kernels bin, uses `tl.dot`, fusion bin); a cell
  keeps its first program until one displaces it. Exploration prefers cells whose elite is correct.
- Migration happens when a round ends: `maybe_migrate(r)` says round r is over and migrates when r is a
  positive multiple of `migration_interval` (once per round; rounds skipped over are caught up). `add` also
  ends the earlier rounds itself when the first program of a later round arrives, so re-adding a run's programs
  in their original order reproduces its migrations without any call; only the end of the very last round
  needs `maybe_migrate` (or `rebuild(..., rounds_done=n)`). Programs of an earlier round added late do not move
  the clock back. The seed may use round -1.
- `best()` is the incumbent, replaced only when `score.displaces` says so.
"""

from __future__ import annotations

import bisect
import dataclasses
import hashlib
import json
import math
import random
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kernelsmith.referee.verdict import Status, Verdict
from kernelsmith.workshop.score import displaces, interval_of, score, speedup_of, status_of

ProgramId = int | str


@dataclass(frozen=True)
class Program:
    id: ProgramId
    code: str
    parent_id: ProgramId | None = None
    island: int = 0
    round: int = 0
    score: float = 0.0
    status: str = Status.COMPILE_ERROR.value
    speedup: float | None = None
    speedup_ci: tuple[float, float] | None = None
    features: Mapping[str, Any] = field(default_factory=dict, hash=False, compare=False)
    error: str = ""
    digest: str = ""

    @property
    def correct(self) -> bool:
        return self.status == Status.CORRECT.value

    @classmethod
    def from_verdict(
        cls,
        id: ProgramId,
        code: str,
        verdict: Verdict | Mapping[str, Any],
        *,
        parent_id: ProgramId | None = None,
        island: int = 0,
        round: int = 0,
        features: Mapping[str, Any] | None = None,
        digest: str | None = None,
    ) -> Program:
        """A program from its code and the referee's verdict (score, status, speedup and error filled in)."""
        from kernelsmith.candidate import Candidate
        from kernelsmith.workshop.features import kernel_features

        err = verdict.error if isinstance(verdict, Verdict) else str(verdict.get("error", "") or "")
        return cls(
            id=id,
            code=code,
            parent_id=parent_id,
            island=island,
            round=round,
            score=score(verdict),
            status=status_of(verdict),
            speedup=speedup_of(verdict),
            speedup_ci=interval_of(verdict),
            features=dict(features) if features is not None else kernel_features(code),
            error=err.splitlines()[0][:300] if err else "",
            digest=digest if digest is not None else Candidate(code).digest,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "code": self.code,
            "parent_id": self.parent_id,
            "island": self.island,
            "round": self.round,
            "score": self.score,
            "status": self.status,
            "speedup": self.speedup,
            "speedup_ci": list(self.speedup_ci) if self.speedup_ci is not None else None,
            "features": json.loads(json.dumps(dict(self.features), sort_keys=True)),
            "error": self.error,
            "digest": self.digest,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Program:
        d = dict(d)
        ci = d.get("speedup_ci")
        d["speedup_ci"] = tuple(ci) if ci is not None else None
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in known})


@dataclass(frozen=True)
class GridBins:
    """Bin edges of the MAP-Elites axes; a value v falls in bin `bisect_right(edges, v)` (len(edges) + 1 bins)."""

    complexity: tuple[float, ...] = (250, 500, 800, 1200, 1800)  # AST nodes of the EVOLVE-BLOCK
    score: tuple[float, ...] = (0.5, 1.0, 1.5, 2.0, 3.0)  # failing | slower | ~1x | 1.4x | 2x | 4x+
    kernels: tuple[float, ...] = (1, 2, 3)  # 0 | 1 | 2 | 3+ Triton kernels
    fusion: tuple[float, ...] = (2, 4, 7)  # distinct compute tl ops in the largest kernel

    @property
    def n_cells(self) -> int:
        return (len(self.complexity) + 1) * (len(self.score) + 1) * (len(self.kernels) + 1) * 2 * (len(self.fusion) + 1)

    def cell(self, program: Program) -> tuple[int, int, int, int, int]:
        f = program.features or {}

        def num(name: str) -> float:
            v = f.get(name, 0)
            return float(v) if isinstance(v, (int, float)) and math.isfinite(v) else 0.0

        return (
            bisect.bisect_right(self.complexity, num("complexity")),
            bisect.bisect_right(self.score, program.score),
            bisect.bisect_right(self.kernels, num("n_kernels")),
            1 if f.get("uses_dot") else 0,
            bisect.bisect_right(self.fusion, num("fusion")),
        )

    def to_dict(self) -> dict[str, list[float]]:
        return {k: list(v) for k, v in dataclasses.asdict(self).items()}


class _TopK:
    """The k best programs, best first (k is small). A newcomer goes in ahead of the first program it displaces
    (`score.displaces`: its interval wholly above, or a strictly higher score without intervals) and behind every
    one it ties with or loses to, so earlier programs keep their place on ties; the last one drops out."""

    def __init__(self, k: int):
        self.k = k
        self.items: list[Program] = []

    def offer(self, p: Program, seq: int) -> tuple[bool, Program | None]:
        """(inserted, evicted)."""
        if self.k <= 0:
            return False, None
        i = next((j for j, q in enumerate(self.items) if displaces(p, q)), len(self.items))
        if i >= self.k:
            return False, None
        self.items.insert(i, p)
        if len(self.items) > self.k:
            return True, self.items.pop()
        return True, None

    def __contains__(self, pid: ProgramId) -> bool:
        return any(p.id == pid for p in self.items)

    def __len__(self) -> int:
        return len(self.items)


# The ranking rule, recorded in every run: a run resumed under another rule would rebuild another archive.
RANKING_RULE = "displaces-v1: a correct program goes ahead only when its speedup interval lies wholly above; " \
    "overlapping intervals tie and the earlier program stays ahead; without intervals, a strictly higher score"


def run_order(round_: int, name: str) -> tuple[int, int]:
    """The order a run adds its programs in, so the order every rebuild uses: the seed (round -1) first, then by
    round and child number (names are "r{round}c{child}")."""
    if round_ < 0:
        return (-1, 0)
    tail = str(name).rsplit("c", 1)[-1]
    return (round_, int(tail) if tail.isdigit() else 0)


def archive_settings(config: Mapping[str, Any]) -> dict[str, Any]:
    """An archive's settings from a run's config (a `RunConfig` dump): the one place they are derived."""
    return {"islands": int(config.get("islands", 4)), "hall_of_fame": int(config.get("hall_of_fame", 16)),
            "failures_kept": max(16, int(config.get("failures_in_prompt", 3))), "seed": int(config.get("seed", 0)),
            "migration_interval": int(config.get("migration_interval", 5))}


class Archive:
    def __init__(
        self,
        islands: int = 4,
        hall_of_fame: int = 16,
        grid_bins: GridBins | Mapping[str, Iterable[float]] | None = None,
        failures_kept: int = 16,
        seed: int = 0,
        *,
        island_elites: int = 8,
        migration_interval: int = 5,
        exploit_ratio: float = 0.6,
        hof_ratio: float = 0.2,
    ):
        if islands < 1:
            raise ValueError("islands must be >= 1")
        if not 0 <= exploit_ratio <= 1 or not 0 <= hof_ratio <= 1 or exploit_ratio + hof_ratio > 1:
            raise ValueError("exploit_ratio and hof_ratio must be in [0, 1] and sum to at most 1")
        if isinstance(grid_bins, Mapping):
            grid_bins = GridBins(**{k: tuple(v) for k, v in grid_bins.items()})
        self.bins: GridBins = grid_bins or GridBins()
        self.n_islands = islands
        self.failures_kept = failures_kept
        self.migration_interval = migration_interval
        self.exploit_ratio = exploit_ratio
        self.hof_ratio = hof_ratio
        self.seed = seed
        self.rng = random.Random(seed)

        self._seq = 0  # programs added
        self._ids: set[ProgramId] = set()  # every id ever added (ids only: the programs may have been dropped)
        self._seq_of: dict[ProgramId, int] = {}  # insertion order of the live programs
        self._live: dict[ProgramId, Program] = {}
        self._refs: dict[ProgramId, int] = {}
        self._hof = _TopK(hall_of_fame)
        self._elites = [_TopK(island_elites) for _ in range(islands)]
        self._grid: dict[tuple[int, ...], Program] = {}
        self._cells: list[tuple[int, ...]] = []  # occupied cells, sorted
        self._failures: list[deque[Program]] = [deque() for _ in range(islands)]
        self._incumbent: Program | None = None
        self._round = 0  # the latest round a program was added in
        self._ended = 0  # rounds up to this one have ended (their migration, if due, is done)
        self._last_migration: int | None = None
        self._migrations = 0

    # -- reference counting: a program lives while some structure holds it ---------------------------------------
    def _ref(self, p: Program, seq: int) -> None:
        n = self._refs.get(p.id, 0)
        if n == 0:
            self._live[p.id] = p
            self._seq_of[p.id] = seq
        self._refs[p.id] = n + 1

    def _unref(self, p: Program | None) -> None:
        if p is None:
            return
        n = self._refs[p.id] - 1
        if n:
            self._refs[p.id] = n
        else:
            del self._refs[p.id], self._live[p.id], self._seq_of[p.id]

    # -- adding -------------------------------------------------------------------------------------------------
    def add(self, program: Program) -> bool:
        """Adds one evaluated program; returns whether it became the incumbent."""
        if not 0 <= program.island < self.n_islands:
            raise ValueError(f"program {program.id!r}: island {program.island} not in [0, {self.n_islands})")
        if program.id in self._ids:
            raise ValueError(f"program {program.id!r} is already in the archive")
        if not math.isfinite(program.score):
            raise ValueError(f"program {program.id!r}: score {program.score!r} is not finite")
        if program.round > self._round:  # the first program of a new round: the rounds before it have ended
            self.maybe_migrate(program.round - 1)
            self._round = program.round
        seq = self._seq
        self._seq += 1
        self._ids.add(program.id)

        if not program.correct and self.failures_kept > 0:
            q = self._failures[program.island]
            if len(q) >= self.failures_kept:
                self._unref(q.popleft())
            q.append(program)
            self._ref(program, seq)
        if program.status == Status.REJECTED.value:
            return False

        for top in (self._hof, self._elites[program.island]):
            inserted, evicted = top.offer(program, seq)
            if inserted:
                self._ref(program, seq)
                self._unref(evicted)

        cell = self.bins.cell(program)
        old = self._grid.get(cell)
        if old is None:
            bisect.insort(self._cells, cell)
        if old is None or displaces(program, old):
            self._grid[cell] = program
            self._ref(program, seq)
            self._unref(old)

        if self._incumbent is None or displaces(program, self._incumbent):
            self._ref(program, seq)
            self._unref(self._incumbent)
            self._incumbent = program
            return True
        return False

    # -- islands --------------------------------------------------------------------------------------------------
    def maybe_migrate(self, round: int) -> bool:
        """Round `round` has ended: migrates if it is a positive multiple of `migration_interval` (and every such
        round up to it not handled yet); returns whether a migration happened. Idempotent per round."""
        migrated = False
        while self._ended < round:
            self._ended += 1
            if self.migration_interval > 0 and self._ended > 0 and self._ended % self.migration_interval == 0:
                self._last_migration = self._ended
                self.migrate()
                migrated = True
        return migrated

    def migrate(self) -> list[tuple[int, ProgramId]]:
        """Copies the best of each island into the next island's elites (a ring); returns (to island, id)."""
        if self.n_islands < 2:
            return []
        bests = [e.items[0] if len(e) else None for e in self._elites]  # taken before any move: no cascade
        moved = []
        for i, best in enumerate(bests):
            if best is None:
                continue
            j = (i + 1) % self.n_islands
            if best.id in self._elites[j]:
                continue
            inserted, evicted = self._elites[j].offer(best, self._seq_of[best.id])
            if inserted:
                self._ref(best, self._seq_of[best.id])
                self._unref(evicted)
                moved.append((j, best.id))
        self._migrations += 1
        return moved

    # -- reading --------------------------------------------------------------------------------------------------
    def best(self) -> Program | None:
        return self._incumbent

    def hall_of_fame(self) -> list[Program]:
        return list(self._hof.items)

    def elites(self, island: int) -> list[Program]:
        return list(self._elites[island].items)

    def grid(self) -> dict[tuple[int, ...], Program]:
        return {c: self._grid[c] for c in self._cells}

    def failures(self, island: int, k: int | None = None) -> list[Program]:
        """The island's most recent failures, newest first (with their `error`)."""
        q = self._failures[island]
        out = list(reversed(q))
        return out if k is None else out[: max(k, 0)]

    def get(self, pid: ProgramId) -> Program | None:
        """The program if some structure still holds it (dropped programs are in the run store only);
        use `pid in archive` to ask whether it was ever added."""
        return self._live.get(pid)

    def __contains__(self, pid: object) -> bool:
        return pid in self._ids

    def __len__(self) -> int:
        return self._seq

    def sizes(self) -> dict[str, Any]:
        """Sizes of the internal structures (all bounded)."""
        return {
            "added": self._seq,
            "live": len(self._live),
            "hall_of_fame": len(self._hof),
            "elites": [len(e) for e in self._elites],
            "grid_cells": len(self._grid),
            "failures": [len(q) for q in self._failures],
        }

    # -- sampling -------------------------------------------------------------------------------------------------
    def _explore_pool(self) -> list[Program]:
        cells = [self._grid[c] for c in self._cells]
        correct = [p for p in cells if p.correct]
        return correct or cells

    def sample_parent(self, island: int, rng: random.Random | None = None) -> Program | None:
        """A parent for the next child on `island`; None when the archive holds no candidate parent yet.

        With probability `exploit_ratio` a rank-weighted pick (weight 1/(rank+1)) among the island's elites,
        with `hof_ratio` a uniform pick from the hall of fame, otherwise (exploration) the elite of a uniformly
        drawn grid cell. An empty pool falls through to the next one.
        """
        rng = rng or self.rng
        r = rng.random()
        elites = self._elites[island].items
        hof = self._hof.items
        explore = self._explore_pool()
        if r < self.exploit_ratio:
            order = [elites, hof, explore]
        elif r < self.exploit_ratio + self.hof_ratio:
            order = [hof, elites, explore]
        else:
            order = [explore, elites, hof]
        for pool in order:
            if pool:
                if pool is elites:
                    return rng.choices(pool, weights=[1.0 / (i + 1) for i in range(len(pool))])[0]
                return pool[rng.randrange(len(pool))]
        return None

    def inspirations(
        self, island: int, k: int, rng: random.Random | None = None, parent: Program | ProgramId | None = None
    ) -> list[Program]:
        """Up to k programs to show next to the parent: the best half (island elites, then the hall of fame) and
        the rest drawn from distinct grid cells not already represented; the parent is never among them."""
        rng = rng or self.rng
        if k <= 0:
            return []
        exclude = parent.id if isinstance(parent, Program) else parent
        chosen: list[Program] = []
        seen = {exclude}
        n_top = (k + 1) // 2
        for p in [*self._elites[island].items, *self._hof.items]:
            if len(chosen) >= n_top:
                break
            if p.id not in seen:
                chosen.append(p)
                seen.add(p.id)
        used_cells = {self.bins.cell(p) for p in chosen}
        pool = [self._grid[c] for c in self._cells if c not in used_cells and self._grid[c].id not in seen]
        for group in ([p for p in pool if p.correct], [p for p in pool if not p.correct]):  # correct ones first
            n = min(k - len(chosen), len(group))
            if n > 0:
                for p in rng.sample(group, n):
                    chosen.append(p)
                    seen.add(p.id)
        if len(chosen) < k:  # not enough distinct cells: fill from the hall of fame
            for p in self._hof.items:
                if len(chosen) >= k:
                    break
                if p.id not in seen:
                    chosen.append(p)
                    seen.add(p.id)
        return chosen

    # -- state ----------------------------------------------------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        """A JSON-serialisable picture of the whole state; equal for equal histories."""

        def ids(items: Iterable[Program]) -> list[Any]:
            return [p.id for p in items]

        return {
            "params": {
                "islands": self.n_islands,
                "hall_of_fame": self._hof.k,
                "island_elites": self._elites[0].k,
                "failures_kept": self.failures_kept,
                "migration_interval": self.migration_interval,
                "exploit_ratio": self.exploit_ratio,
                "hof_ratio": self.hof_ratio,
                "seed": self.seed,
                "grid_bins": self.bins.to_dict(),
            },
            "added": self._seq,
            "round": self._round,
            "rounds_ended": self._ended,
            "last_migration": self._last_migration,
            "migrations": self._migrations,
            "incumbent": self._incumbent.id if self._incumbent is not None else None,
            "hall_of_fame": ids(self._hof.items),
            "elites": [ids(e.items) for e in self._elites],
            "grid": [[list(c), self._grid[c].id] for c in self._cells],
            "failures": [ids(q) for q in self._failures],
            "programs": [
                [self._seq_of[pid], self._live[pid].to_dict()] for pid in sorted(self._live, key=self._seq_of.get)
            ],
        }

    def snapshot_digest(self) -> str:
        return hashlib.sha256(json.dumps(self.snapshot(), sort_keys=True).encode()).hexdigest()[:16]

    @classmethod
    def rebuild(cls, programs: Iterable[Program], *, rounds_done: int | None = None, **kwargs: Any) -> Archive:
        """An archive built by adding `programs` in order (what a resumed run does); `rounds_done` = n also ends
        rounds 0..n-1 (the last one's migration included)."""
        archive = cls(**kwargs)
        for p in programs:
            archive.add(p)
        if rounds_done is not None:
            archive.maybe_migrate(rounds_done - 1)
        return archive
