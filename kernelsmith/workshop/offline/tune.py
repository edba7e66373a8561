"""The offline tuner: a joint search over a program's launch knobs, judged by the referee's speedup intervals.

Moving one knob at a time at random found little (issue 17: 2 of 12 tasks improved, no child beat the seed in a
3-round evolve): block size, warps and stages interact, so the tuner searches all knobs together.

- **The space.** A program's knobs (found by its backend, `Backend.knobs`) span a grid of configurations. Programs
  that differ only in those literals share a *skeleton* (the source with the knob literals blanked and tuner
  markers removed, normalised); every evaluated program of the parent's skeleton is a measurement of one
  configuration.
- **Sampling.** Latin-hypercube batches over the legal values of all knobs jointly (every value of every knob is
  drawn about equally often), plus neighbours of the best (one knob moved a step, or two at once), those in a
  direction that has paid so far first.
- **Successive halving on intervals.** A configuration's measurements are pooled into one interval (below).
  The best is the configuration with the highest lower bound; a configuration whose interval lies wholly below
  the best's is slower beyond the noise and dropped (no more measurements, no neighbours). The others are alive:
  at each measurement count, the better half of the challengers (by point estimate) and the best itself are
  measured once more, up to `MAX_MEASUREMENTS`, so measurements go where the ranking is still open.
- **Re-measuring** a configuration is proposing its program again with a marker statement (a string literal
  naming the measurement, e.g. `"kernelsmith tuner: measurement 2"`) inside the EVOLVE-BLOCK: the program does
  exactly the same, but its digest differs, so the engine judges it afresh instead of taking it for a duplicate.
  Each measurement is an ordinary verdict, recorded and shown like any other; the archive's own rule (a program
  goes ahead only when its interval lies wholly above) keeps what is faster beyond the noise.
- **Pooling** is the intersection of the measurements' intervals when they agree (each interval covers the true
  speedup, so all of them do, short of the usual error rate per interval), their hull when they do not: an
  inconsistent configuration gets a wider interval, never a narrower one.

Everything is a function of the evaluated history before the current round, the parent and the run's seed, so a
resumed run proposes what the uninterrupted run proposed.
"""

from __future__ import annotations

import hashlib
import itertools
import math
import random
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kernelsmith import pyast
from kernelsmith.candidate import BLOCK_END, normalise
from kernelsmith.workshop.offline.mutate import Knob, KnobFinder, apply_values

Config = tuple[int, ...]

MAX_MEASUREMENTS = 3  # a configuration is judged at most this many times
NOISE = 0.005  # relative half-width assumed for a verdict without an interval (the referee's noise floor)
LHS_BATCH = 8  # configurations per Latin-hypercube batch
NEIGHBOUR_CENTRES = 3  # alive configurations whose neighbourhoods are searched (best first)
PATTERN = ("remeasure", "neighbour", "sample", "neighbour")  # how a round's proposals are interleaved
MARKER = "kernelsmith tuner: measurement"
_MARKER_LINE = re.compile(r'^[ \t]*"kernelsmith tuner: measurement \d+[^"\n]*"[ \t]*(?:\r\n|\r|\n|$)', re.M)


# ---------------------------------------------------------------------------------------------- the space


@dataclass(frozen=True)
class Space:
    """The configurations of one skeleton: knob names (source order) and the legal values of each."""

    skeleton: str
    names: tuple[str, ...]
    domains: tuple[tuple[int, ...], ...]
    labels: tuple[str, ...]

    def size(self) -> int:
        return math.prod(len(d) for d in self.domains)

    def describe(self, config: Config) -> str:
        return ", ".join(f"{n.rsplit('.', 1)[-1] if '.' in n else n}={v}" for n, v in zip(self.names, config))


@dataclass(frozen=True)
class Parsed:
    """A program read as (skeleton, knobs): what configuration of which skeleton it is."""

    skeleton: str
    knobs: tuple[Knob, ...]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(k.name for k in self.knobs)

    @property
    def config(self) -> Config:
        return tuple(k.value for k in self.knobs)


def strip_markers(source: str) -> str:
    return _MARKER_LINE.sub("", source)


def parse(source: str, finder: KnobFinder) -> Parsed | None:
    """The program's skeleton and knobs; None when it does not parse or has no knob."""
    try:
        found = tuple(sorted(finder(source), key=lambda k: (k.line, k.col)))
    except (SyntaxError, ValueError, RecursionError):
        return None
    if not found:
        return None
    try:
        blank = apply_values(source, [(k, 0) for k in found])
    except SyntaxError:
        return None
    digest = hashlib.sha256(normalise(strip_markers(blank)).encode()).hexdigest()[:16]
    return Parsed(digest, found)


def space_of(parent: Parsed, family: Iterable[Config] = ()) -> Space:
    """The parent's knobs, each over its legal values and every value the skeleton's programs were measured at
    (a grow-only block reached from a smaller one keeps that smaller one in its domain)."""
    seen = [set(k.allowed) for k in parent.knobs]
    for config in family:
        for s, v in zip(seen, config):
            s.add(v)
    return Space(parent.skeleton, parent.names, tuple(tuple(sorted(s)) for s in seen),
                 tuple(k.label for k in parent.knobs))


def with_config(source: str, space: Space, config: Config, finder: KnobFinder, measurement: int = 1) -> str:
    """The program at `config` (without the parent's markers); from the second measurement on, with the marker
    that makes the engine judge it again. ValueError when the program is not of `space`'s skeleton or the marker
    has no place (the caller then skips the step)."""
    base = strip_markers(source)
    found = parse(base, finder)
    if found is None or found.skeleton != space.skeleton or found.names != space.names:
        raise ValueError("the program is not of this configuration space")
    out = apply_values(base, list(zip(found.knobs, config)))
    return _mark(out, measurement) if measurement > 1 else out


def _mark(source: str, measurement: int) -> str:
    """The marker statement on its own line just before the EVOLVE-BLOCK's end (the engine keeps only the block
    of an answer), else at the end of a file without markers."""
    note = f'"{MARKER} {measurement} of this configuration"'
    lines = source.splitlines(keepends=True)
    for i in range(len(lines) - 1, -1, -1):
        if lines[i].strip().startswith(BLOCK_END):
            indent = lines[i][: len(lines[i]) - len(lines[i].lstrip())]
            nl = "\r\n" if lines[i].endswith("\r\n") else "\n"
            candidate = "".join(lines[:i]) + (("" if not i or lines[i - 1].endswith(("\n", "\r")) else nl)
                                              + indent + note + nl) + "".join(lines[i:])
            if _parses(candidate):
                return candidate
            break
    candidate = source + ("" if source.endswith("\n") else "\n") + note + "\n"
    if "# EVOLVE-BLOCK" in source or not _parses(candidate):
        raise ValueError("no place for the measurement marker")
    return candidate


def _parses(source: str) -> bool:
    try:
        pyast.parse(source)
    except SyntaxError:
        return False
    return True


# ---------------------------------------------------------------------------------------------- evidence


@dataclass
class Evidence:
    """Every measurement of one configuration, pooled."""

    config: Config
    order: int  # when it was first measured (ties go to the earlier configuration)
    n: int = 0
    failed: bool = False
    intervals: list[tuple[float, float, float]] = field(default_factory=list)  # (low, point, high)
    program: str = ""  # the name of its first program

    @property
    def interval(self) -> tuple[float, float, float] | None:
        return pool(self.intervals) if self.intervals else None


def pool(intervals: Sequence[tuple[float, float, float]]) -> tuple[float, float, float]:
    """(low, point, high) of several measurements of one configuration: the intersection of their intervals when
    it is not empty, else their hull; the point is the geometric mean of the points, kept inside."""
    lo = max(i[0] for i in intervals)
    hi = min(i[2] for i in intervals)
    if lo > hi:
        lo, hi = min(i[0] for i in intervals), max(i[2] for i in intervals)
    point = math.exp(sum(math.log(max(i[1], 1e-12)) for i in intervals) / len(intervals))
    return lo, min(max(point, lo), hi), hi


def measurement(program: Any) -> tuple[bool, tuple[float, float, float] | None]:
    """(correct, (low, point, high) or None) of one evaluated program (an `archive.Program` or the like)."""
    if getattr(program, "status", None) != "correct":
        return False, None
    s = getattr(program, "speedup", None)
    if not isinstance(s, (int, float)) or not math.isfinite(s) or s <= 0:
        return True, None
    ci = getattr(program, "speedup_ci", None)
    if ci is not None and len(ci) == 2 and all(isinstance(x, (int, float)) and math.isfinite(x) for x in ci) \
            and 0 < ci[0] <= ci[1]:
        return True, (float(ci[0]), float(s), float(ci[1]))
    return True, (s * (1 - NOISE), float(s), s * (1 + NOISE))


def gather(space: Space, measured: Iterable[tuple[str, Parsed, Any]]) -> dict[Config, Evidence]:
    """Evidence per configuration of `space` from (program name, parsed, program) in the run's order."""
    out: dict[Config, Evidence] = {}
    for name, parsed, program in measured:
        if parsed.skeleton != space.skeleton or parsed.names != space.names:
            continue
        config = parsed.config
        ev = out.get(config)
        if ev is None:
            ev = out[config] = Evidence(config, len(out), program=name)
        ev.n += 1
        ok, interval = measurement(program)
        if not ok:
            ev.failed = True
        elif interval is not None:
            ev.intervals.append(interval)
    return out


# ---------------------------------------------------------------------------------------------- halving


@dataclass(frozen=True)
class Standing:
    """Where the search stands: the best configuration, those still alive, those dropped."""

    best: Config | None
    alive: tuple[Config, ...]  # best first, then by point estimate
    dropped: tuple[Config, ...]  # slower than the best beyond the noise
    failed: tuple[Config, ...]
    remeasure: tuple[Config, ...]  # the next measurements, in order


def standing(evidence: Mapping[Config, Evidence], max_measurements: int = MAX_MEASUREMENTS) -> Standing:
    timed = [e for e in evidence.values() if not e.failed and e.interval is not None]
    failed = tuple(e.config for e in evidence.values() if e.failed)
    if not timed:
        return Standing(None, (), (), failed, ())
    best = max(timed, key=lambda e: (e.interval[0], e.interval[1], -e.order))  # type: ignore[index]
    b_lo = best.interval[0]  # type: ignore[index]
    alive = [e for e in timed if e.interval[2] >= b_lo]  # type: ignore[index]
    alive.sort(key=lambda e: (e is not best, -e.interval[1], e.order))  # type: ignore[index]
    dropped = tuple(e.config for e in timed if e.interval[2] < b_lo)  # type: ignore[index]
    remeasure: list[Config] = []
    if len(alive) > 1:
        for n in sorted({e.n for e in alive}):
            if n >= max_measurements:
                continue
            rung = [e for e in alive if e.n == n and e is not best]  # challengers, by point estimate
            promoted = rung[: math.ceil(len(rung) / 2)]
            if best.n == n:
                promoted.insert(0, best)  # the incumbent is judged as often as its challengers
            remeasure += [e.config for e in promoted]
    return Standing(best.config, tuple(e.config for e in alive), dropped, failed, tuple(remeasure))


# ---------------------------------------------------------------------------------------------- sampling


def latin_hypercube(space: Space, n: int, rng: random.Random) -> list[Config]:
    """n configurations; for each knob, its values' strata are each used about n / len(values) times."""
    columns = []
    for domain in space.domains:
        perm = list(range(n))
        rng.shuffle(perm)
        columns.append([domain[min(len(domain) - 1, int((p + rng.random()) * len(domain) / n))] for p in perm])
    return [tuple(col[i] for col in columns) for i in range(n)]


def neighbours(space: Space, centre: Config, rng: random.Random,
               trend: Mapping[tuple[int, int], float] | None = None) -> list[Config]:
    """Configurations one step from `centre` on one knob, then on two knobs at once; within each, moves in a
    direction that helped before (`trend`, see `trends`) come first and those that hurt last, ties shuffled."""
    trend = trend or {}
    steps: list[list[tuple[int, int, int]]] = []  # (knob, value, direction)
    for i, (domain, v) in enumerate(zip(space.domains, centre)):
        at = domain.index(v) if v in domain else None
        moves = [] if at is None else [(domain[j], j - at) for j in (at - 1, at + 1) if 0 <= j < len(domain)]
        steps.append([(i, m, d) for m, d in moves])
    one = [([s], trend.get((s[0], s[2]), 0.0)) for knob in steps for s in knob]
    two = [([a, b], trend.get((a[0], a[2]), 0.0) + trend.get((b[0], b[2]), 0.0))
           for x, y in itertools.combinations(range(len(steps)), 2) for a in steps[x] for b in steps[y]]
    out = []
    for group in (one, two):
        rng.shuffle(group)
        group.sort(key=lambda g: -g[1])  # stable: the shuffle breaks ties
        out += [_moved(centre, [(i, v) for i, v, _ in moves]) for moves, _ in group]
    return out


def trends(space: Space, evidence: Mapping[Config, Evidence]) -> dict[tuple[int, int], float]:
    """(knob, direction) -> mean log-speedup change of the measured pairs one step apart on that knob alone: which
    way each knob has paid so far (0 where nothing says)."""
    timed = {c: e.interval[1] for c, e in evidence.items() if not e.failed and e.interval is not None}
    sums: dict[tuple[int, int], list[float]] = {}
    for a, sa in timed.items():
        for i, domain in enumerate(space.domains):
            if a[i] not in domain:
                continue
            at = domain.index(a[i])
            for d in (-1, 1):
                if 0 <= at + d < len(domain):
                    b = a[:i] + (domain[at + d],) + a[i + 1:]
                    if b in timed:
                        sums.setdefault((i, d), []).append(math.log(timed[b] / sa))
    return {k: sum(v) / len(v) for k, v in sums.items()}


def _moved(config: Config, moves: Sequence[tuple[int, int]]) -> Config:
    out = list(config)
    for i, v in moves:
        out[i] = v
    return tuple(out)


# ---------------------------------------------------------------------------------------------- the plan


@dataclass(frozen=True)
class Step:
    config: Config
    why: str  # "remeasure", "neighbour", "sample"
    measurement: int  # 1 for a new configuration, k for its k-th judgement


def plan(space: Space, evidence: Mapping[Config, Evidence], rng: random.Random, count: int,
         start: Config | None = None) -> list[Step]:
    """The next `count` proposals (fewer when the space is exhausted): re-measurements the halving asks for,
    neighbours of the alive configurations (best first), Latin-hypercube samples, interleaved by `PATTERN`.
    `start` is the centre when nothing is timed yet (the parent's own configuration)."""
    st = standing(evidence)
    taken: set[Config] = set(evidence)

    def remeasures() -> Iterator[Step]:
        for c in st.remeasure:
            yield Step(c, "remeasure", evidence[c].n + 1)

    def near() -> Iterator[Step]:
        centres = list(st.alive[:NEIGHBOUR_CENTRES]) or ([start] if start is not None else [])
        trend = trends(space, evidence)
        for c in centres:
            for nb in neighbours(space, c, rng, trend):
                yield Step(nb, "neighbour", 1)

    def samples() -> Iterator[Step]:
        idle = 0
        while idle < 8:  # eight batches in a row with nothing new: the space is (nearly) exhausted
            fresh = False
            for c in latin_hypercube(space, LHS_BATCH, rng):
                if c not in taken:
                    fresh = True
                    yield Step(c, "sample", 1)
            idle = 0 if fresh else idle + 1

    streams = {"remeasure": remeasures(), "neighbour": near(), "sample": samples()}
    out: list[Step] = []
    live = dict(streams)
    while len(out) < count and live:
        for kind in PATTERN:
            if len(out) >= count or kind not in live:
                continue
            for step in live[kind]:
                if step.why == "remeasure" or step.config not in taken:
                    taken.add(step.config)
                    out.append(step)
                    break
            else:
                del live[kind]
    return out
