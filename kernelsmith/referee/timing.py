"""GPU timing of reference vs candidate, interleaved in one session (runs in the candidate's child process).

Each repetition copies a fresh input set (rotating through a pool) into fixed buffers, flushes L2, then times
one call with CUDA events; the two sides alternate (A B B A ...) so drift and order effects cancel. Launch-bound
calls switch to CUDA-graph replay. Speedup = median(ref) / median(cand) with a paired bootstrap interval.
Only torch, numpy and the stdlib are used: this module must run on a lean GPU image.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

Fn = Callable[..., Any]


CANARY_COPY_BYTES = 256 << 20  # device memory for one chunk's canary copies (both sides)
GRAPH_TARGET_RSE = 0.001  # the CUDA-graph path's settling target (see `_time_graphs`)


@dataclass
class TimingOptions:
    budget_s: float = 2.0  # measured time per evaluation, both sides together
    min_reps: int = 30
    max_reps: int = 3000
    warmup_s: float = 0.1
    graph: str = "auto"  # "auto" (graphs for launch-bound calls), "on", "off"
    graph_threshold_ms: float = 0.03
    pool_bytes: int = 1 << 30  # memory for rotating input sets (at least 2 sets; the L2 is 60 MB on an H200)
    bootstrap: int = 2000
    # Relative widening of the bootstrap interval on each side. The bootstrap sees only the noise among one
    # evaluation's repetitions (±0.05% on the H200); two evaluations of the same pair in two processes differ by
    # 0.2–0.5% (A/A and pool-vs-serial runs, docs/benchmarks.md), and an interval that excludes the next
    # evaluation's number would let noise displace an incumbent.
    noise_floor: float = 0.005
    canary_every: int = 7  # compare candidate vs reference output every k-th repetition
    # Stop before the budget once the paired log-ratios' standard error is below this (0: spend the whole
    # budget). 0.2% gives a sample interval of about ±0.4%, still inside the ±0.5% noise floor above: more
    # repetitions would narrow nothing the verdict reports, and the GPU is held alone meanwhile (every other
    # sandbox on it frozen). At 0.1% a third of the pool's timing phases ran to `max_reps` (H200, 2026-12-03).
    target_rse: float = 0.002
    chunk: int = 100  # repetitions between two looks at the standard error (each look synchronises)


@dataclass
class TimingResult:
    ref_ms: float
    cand_ms: float
    speedup: float
    speedup_ci: list[float]
    method: str
    reps: int
    ref_spread: float  # relative IQR of the reference's times
    cand_spread: float
    canary_failures: int = 0
    hidden_work_ms: float = 0.0  # wall time beyond the events' time, candidate minus reference
    extra: dict[str, Any] = field(default_factory=dict)


def _flat(out: Any) -> list[torch.Tensor]:
    return [t for t in (out if isinstance(out, (tuple, list)) else [out]) if isinstance(t, torch.Tensor)]


def bootstrap_ratio(ref: np.ndarray, cand: np.ndarray, n: int, seed: int = 0) -> tuple[float, float]:
    """95% interval of median(ref)/median(cand), resampling repetition pairs together."""
    rng = np.random.default_rng(seed)
    k = len(ref)
    idx = rng.integers(0, k, size=(n, k))
    ratios = np.median(ref[idx], axis=1) / np.median(cand[idx], axis=1)
    lo, hi = np.percentile(ratios, [2.5, 97.5])
    return float(lo), float(hi)


def _spread(x: np.ndarray) -> float:
    q1, q3 = np.percentile(x, [25, 75])
    return float((q3 - q1) / np.median(x))


class _Side:
    """One model with its own input buffers, refilled from the shared pool before every timed call."""

    def __init__(self, fn: Fn, pool: Sequence[list[Any]]):
        self.fn = fn
        self.pool = pool
        self.work = [a.clone() if isinstance(a, torch.Tensor) else a for a in pool[0]]

    def load(self, i: int) -> None:
        for w, p in zip(self.work, self.pool[i % len(self.pool)]):
            if isinstance(w, torch.Tensor):
                w.copy_(p)

    def __call__(self) -> Any:
        return self.fn(*self.work)


def measure_bandwidth() -> float:
    """Device-memory bandwidth (bytes/s, read + write) of a large copy: the floor for the plausibility guard."""
    n = 256 << 20
    a = torch.empty(n, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    b.copy_(a)
    torch.cuda.synchronize()
    best = 0.0
    for _ in range(10):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        b.copy_(a)
        e.record()
        e.synchronize()
        best = max(best, 2 * n / (s.elapsed_time(e) / 1e3))
    return best


def pool_size(set_bytes: int, opts: TimingOptions) -> int:
    """How many input sets timing rotates through: enough to defeat caches, within `pool_bytes`."""
    return int(max(2, min(8, opts.pool_bytes // max(set_bytes, 1))))


def time_pair(
    ref_fn: Fn,
    cand_fn: Fn,
    make_inputs: Callable[[int], list[Any]],
    outputs_match: Callable[[list[torch.Tensor], list[torch.Tensor]], bool],
    opts: TimingOptions | None = None,
) -> TimingResult:
    """Time `ref_fn` against `cand_fn` on inputs from `make_inputs(seed)` (already on the GPU)."""
    opts = opts or TimingOptions()
    first = make_inputs(0)
    n_pool = pool_size(sum(a.numel() * a.element_size() for a in first if isinstance(a, torch.Tensor)), opts)
    pool = [first] + [make_inputs(i) for i in range(1, n_pool)]
    ref, cand = _Side(ref_fn, pool), _Side(cand_fn, pool)
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    l2 = int(getattr(props, "L2_cache_size", 0) or (50 << 20))
    flush = torch.empty(max(2 * l2, 256 << 20), dtype=torch.uint8, device="cuda")

    # Warm-up: compilation, autotuning, allocator growth.
    t_end = time.perf_counter() + opts.warmup_s
    warm = 0
    while warm < 3 or (time.perf_counter() < t_end and warm < 50):
        ref.load(warm)
        ref()
        cand.load(warm)
        cand()
        warm += 1
    torch.cuda.synchronize()
    eager_ref = _eager_once(ref, flush)
    eager_cand = _eager_once(cand, flush)
    per_call = max(eager_ref, eager_cand)
    # Graphs only when the *reference* is launch-bound: a candidate must not choose its own timing method.
    use_graph = opts.graph == "on" or (opts.graph == "auto" and eager_ref < opts.graph_threshold_ms)
    if use_graph:
        result = _time_graphs(ref, cand, opts, per_call, outputs_match)
    else:
        result = _time_eager(ref, cand, flush, opts, per_call, outputs_match)
    result.hidden_work_ms = _hidden_work(cand, ref)
    result.extra["l2_bytes"] = l2
    return result


def _eager_once(side: _Side, flush: torch.Tensor, n: int = 5) -> float:
    times = []
    for i in range(n):
        side.load(i)
        flush.zero_()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        side()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e))
    return float(np.median(times))


def _reps(opts: TimingOptions, per_call_ms: float, overhead_ms: float) -> int:
    n = int(opts.budget_s * 1e3 / (2 * (per_call_ms + overhead_ms)))
    return max(opts.min_reps, min(opts.max_reps, n))


def repeat_until_settled(run: Callable[[int, int], tuple[np.ndarray, np.ndarray]], max_reps: int,
                         opts: TimingOptions) -> tuple[np.ndarray, np.ndarray]:
    """Call `run(first_rep, n)` (the times of reps first_rep..first_rep+n-1, reference and candidate) chunk by
    chunk until `max_reps`, or sooner once the ratio is known to `opts.target_rse` (after `min_reps`)."""
    ref_t, cand_t = np.empty(0), np.empty(0)
    while len(ref_t) < max_reps:
        r, c = run(len(ref_t), min(max(opts.chunk, 1), max_reps - len(ref_t)))
        ref_t, cand_t = np.concatenate([ref_t, r]), np.concatenate([cand_t, c])
        if opts.target_rse > 0 and len(ref_t) >= max(opts.min_reps, 2) and len(ref_t) < max_reps:
            d = np.log(np.maximum(cand_t, 1e-9)) - np.log(np.maximum(ref_t, 1e-9))
            if float(np.std(d, ddof=1)) / np.sqrt(len(d)) < opts.target_rse:
                break
    return ref_t, cand_t


def _time_eager(ref: _Side, cand: _Side, flush: torch.Tensor, opts: TimingOptions, per_call: float,
                outputs_match: Callable[..., bool]) -> TimingResult:
    canary_failures = 0
    # Canaries are compared after the chunk, from copies taken on the stream right after the rep: comparing at
    # once synchronises, and the rep after each drain measured launch gaps (the GPU idle, waiting for the CPU)
    # as kernel time. Outputs too large to keep a chunk's copies of are compared at once, as before.
    per_chunk = -(-max(opts.chunk, 1) // max(opts.canary_every, 1)) if opts.canary_every else 0
    out_bytes = sum(t.numel() * t.element_size() for t in _flat(ref()) + _flat(cand()))
    defer = per_chunk > 0 and out_bytes * per_chunk <= CANARY_COPY_BYTES

    def run(first: int, n: int) -> tuple[np.ndarray, np.ndarray]:
        nonlocal canary_failures
        events = [[(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(n)]
                  for _ in range(2)]
        kept: list[tuple[list[torch.Tensor], list[torch.Tensor]]] = []
        for j in range(n):
            r = first + j
            order = (0, 1) if r % 2 == 0 else (1, 0)  # A B, B A, ...
            outs: list[Any] = [None, None]
            for side_i in order:
                side = (ref, cand)[side_i]
                side.load(r)
                flush.zero_()
                s, e = events[side_i][j]
                s.record()
                outs[side_i] = side()
                e.record()
            if opts.canary_every and r % opts.canary_every == opts.canary_every // 2:
                if defer:
                    kept.append(([t.clone() for t in _flat(outs[1])], [t.clone() for t in _flat(outs[0])]))
                elif not outputs_match(_flat(outs[1]), _flat(outs[0])):
                    canary_failures += 1
        torch.cuda.synchronize()
        canary_failures += sum(not outputs_match(c, r) for c, r in kept)
        return (np.array([s.elapsed_time(e) for s, e in events[0]]),
                np.array([s.elapsed_time(e) for s, e in events[1]]))

    ref_t, cand_t = repeat_until_settled(run, _reps(opts, per_call, overhead_ms=0.05), opts)
    return _summarise(ref_t, cand_t, "eager+l2flush", len(ref_t), opts, canary_failures)


def _time_graphs(ref: _Side, cand: _Side, opts: TimingOptions, per_call: float,
                 outputs_match: Callable[..., bool]) -> TimingResult:
    """Launch-bound calls: capture `k` calls per graph, replay interleaved; time per call = replay / k."""
    k = int(max(1, min(200, 0.2 / max(per_call, 1e-4))))
    graphs, outs = [], []
    for side in (ref, cand):
        side.load(0)
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            side()  # warm the side stream's allocator pool
        torch.cuda.current_stream().wait_stream(stream)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for _ in range(k):
                out = side()
        graphs.append(g)
        outs.append(out)
    torch.cuda.synchronize()
    # Validate the graphs on contents they were not captured with: a result cached at capture time shows.
    canary_failures = 0
    for i in (1, 2):
        ref.load(i)
        cand.load(i)
        for g in graphs:
            g.replay()
        torch.cuda.synchronize()
        canary_failures += 0 if outputs_match(_flat(outs[1]), _flat(outs[0])) else 1

    def run(first: int, n: int) -> tuple[np.ndarray, np.ndarray]:
        events = [[(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(n)]
                  for _ in range(2)]
        for j in range(n):
            for side_i in ((0, 1) if (first + j) % 2 == 0 else (1, 0)):
                s, e = events[side_i][j]
                s.record()
                graphs[side_i].replay()
                e.record()
        torch.cuda.synchronize()
        return (np.array([s.elapsed_time(e) / k for s, e in events[0]]),
                np.array([s.elapsed_time(e) / k for s, e in events[1]]))

    # A replay costs microseconds, so the tighter target is nearly free here; at 0.2% the tiniest kernels
    # (a 1 µs ReLU) stopped after 200-300 reps and their A/A ratios strayed to 1% (H200, 2026-12-03).
    settle = dataclasses.replace(opts, target_rse=min(opts.target_rse, GRAPH_TARGET_RSE))
    ref_t, cand_t = repeat_until_settled(run, _reps(opts, per_call * k, overhead_ms=0.02), settle)
    res = _summarise(ref_t, cand_t, f"cuda-graph×{k}", len(ref_t), opts, canary_failures)
    res.extra["calls_per_graph"] = k
    return res


def _summarise(ref_t: np.ndarray, cand_t: np.ndarray, method: str, reps: int, opts: TimingOptions,
               canary_failures: int) -> TimingResult:
    ref_ms, cand_ms = float(np.median(ref_t)), float(np.median(cand_t))
    lo, hi = bootstrap_ratio(ref_t, cand_t, opts.bootstrap)
    res = TimingResult(ref_ms, cand_ms, ref_ms / cand_ms, [lo * (1 - opts.noise_floor), hi * (1 + opts.noise_floor)],
                       method, reps, _spread(ref_t), _spread(cand_t), canary_failures)
    res.extra["sample_ci"] = [lo, hi]  # the bootstrap interval alone, before the between-process floor
    return res


def _hidden_work(cand: _Side, ref: _Side, n: int = 7) -> float:
    """Wall time (device synchronised) minus event time: work on other streams shows up only in the former."""

    def gap(side: _Side) -> float:
        gaps = []
        for i in range(n):
            side.load(i)
            torch.cuda.synchronize()
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            t0 = time.perf_counter()
            s.record()
            side()
            e.record()
            torch.cuda.synchronize()
            wall = (time.perf_counter() - t0) * 1e3
            gaps.append(wall - s.elapsed_time(e))
        return float(np.median(gaps))

    return gap(cand) - gap(ref)
