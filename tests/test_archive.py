"""The workshop's archive, score and static features (pure Python, no torch, no timing)."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest

from kernelsmith.referee.verdict import Status, Verdict
from kernelsmith.workshop.archive import Archive, GridBins, Program
from kernelsmith.workshop.features import kernel_features
from kernelsmith.workshop.score import displaces, score

SOLUTIONS = Path(__file__).resolve().parents[1] / "solutions"

FEATS = {"complexity": 300, "n_kernels": 1, "uses_dot": False, "fusion": 1}


def prog(pid, s=1.0, status="correct", island=0, round=0, speedup=None, ci=None, features=None, error=""):
    return Program(
        id=pid, code=f"# {pid}", island=island, round=round, score=s, status=status, speedup=speedup,
        speedup_ci=ci, features=dict(FEATS if features is None else features), error=error, digest=str(pid),
    )


# ---- score ----------------------------------------------------------------------------------------------------------
def test_score_orders_stages():
    def s(status, **kw):
        return score({"status": status, **kw})

    assert s("rejected") < s("crashed") == s("timeout") < s("compile_error") < s("runtime_error")
    assert s("runtime_error") < s("incorrect") < s("incorrect", max_rel_err=10.0) < s("incorrect", max_rel_err=0.0)
    assert s("incorrect", max_rel_err=0.0) < 0.5 < s("correct", speedup=0.01)
    assert s("correct") == 1.0  # CPU: correct, speedup not measured
    assert s("correct", speedup=1.0) == 1.0
    assert s("correct", speedup=2.0) == pytest.approx(2.0)
    assert s("correct", speedup=4.0) == pytest.approx(3.0)
    assert s("correct", speedup=0.5) < s("correct", speedup=1.0) < s("correct", speedup=1.2)
    assert s("correct", speedup=1e9) == s("correct", speedup=64.0)  # clipped
    assert s("correct", speedup=float("nan")) == 1.0 and s("correct", speedup=-1.0) == 1.0
    assert s("no-such-status") == 0.0
    v = Verdict(Status.CORRECT, speedup=1.7, speedup_ci=[1.6, 1.8])
    assert score(v) == score(v.to_dict()) == pytest.approx(1.0 + math.log2(1.7))


def test_displacement_respects_confidence_intervals():
    inc = {"status": "correct", "speedup": 2.0, "speedup_ci": [1.8, 2.2]}
    inside = {"status": "correct", "speedup": 2.15, "speedup_ci": [2.0, 2.3]}
    above = {"status": "correct", "speedup": 2.5, "speedup_ci": [2.25, 2.7]}
    assert score(inside) > score(inc) and not displaces(inside, inc)  # higher point estimate, overlapping CI
    assert displaces(above, inc)
    assert not displaces({"status": "incorrect", "max_rel_err": 0.0}, inc)
    assert not displaces({"status": "correct", "speedup": 9.0, "speedup_ci": [9.0, 9.1]} | {"status": "rejected"}, inc)
    # point speedups when there are no intervals
    assert displaces({"status": "correct", "speedup": 2.3}, inc)  # 2.3 > upper bound 2.2
    assert not displaces({"status": "correct", "speedup": 2.1}, inc)
    assert displaces({"status": "correct", "speedup": 1.2}, {"status": "correct", "speedup": 1.1})
    # CPU: correct without speedups never displaces an equal program
    assert not displaces({"status": "correct"}, {"status": "correct"})
    # an incorrect incumbent: any higher score
    assert displaces({"status": "correct"}, {"status": "compile_error"})
    assert displaces({"status": "runtime_error"}, {"status": "compile_error"})
    assert not displaces({"status": "crashed"}, {"status": "compile_error"})
    assert displaces({"status": "compile_error"}, None) and not displaces({"status": "rejected"}, None)
    # Programs work too (their stored score is used)
    a = prog("a", 2.0, speedup=2.0, ci=(1.8, 2.2))
    b = prog("b", 2.1, speedup=2.15, ci=(2.0, 2.3))
    assert not displaces(b, a)


# ---- archive ----------------------------------------------------------------------------------------------------------
def test_hall_of_fame_order_and_bound():
    a = Archive(islands=1, hall_of_fame=3)
    for pid, s in [("a", 1.0), ("b", 3.0), ("c", 2.0), ("d", 3.0), ("e", 0.9), ("f", 2.5)]:
        a.add(prog(pid, s))
    assert [p.id for p in a.hall_of_fame()] == ["b", "d", "f"]  # ties by insertion order: b before d


def test_grid_keeps_best_per_cell():
    a = Archive(islands=1, hall_of_fame=1)
    a.add(prog("x", 1.1))
    a.add(prog("y", 1.3))  # same cell (score band [1.0, 1.5), same features)
    a.add(prog("z", 1.2))
    a.add(prog("w", 1.3))  # equal: the first one stays
    a.add(prog("dot", 1.2, features={**FEATS, "uses_dot": True}))
    grid = a.grid()
    assert len(grid) == 2
    cell = a.bins.cell(prog("q", 1.25))
    assert grid[cell].id == "y"
    assert grid[a.bins.cell(prog("q", 1.2, features={**FEATS, "uses_dot": True}))].id == "dot"
    # the axes: complexity, score band, kernels, dot, fusion
    bins = GridBins()
    assert bins.cell(prog("p", 0.3, status="runtime_error", features={})) == (0, 0, 0, 0, 0)
    big = {"complexity": 5000, "n_kernels": 7, "uses_dot": True, "fusion": 20}
    assert bins.cell(prog("p", 6.0, features=big)) == (5, 5, 3, 1, 3)


def test_islands_and_ring_migration():
    a = Archive(islands=3, hall_of_fame=4, migration_interval=2, island_elites=4)
    a.add(prog("i0", 3.0, island=0))
    a.add(prog("i1", 2.0, island=1))
    a.add(prog("i2", 1.5, island=2))
    a.add(prog("i0b", 1.2, island=0, round=1))
    assert [p.id for p in a.elites(1)] == ["i1"]  # no migration before round 2
    assert a.maybe_migrate(2)  # the best of each island goes to the next one
    assert not a.maybe_migrate(2)  # once per round
    assert not a.maybe_migrate(3)
    assert [p.id for p in a.elites(1)] == ["i0", "i1"]
    assert [p.id for p in a.elites(2)] == ["i1", "i2"]  # i1, not i0: no cascade within one migration
    assert [p.id for p in a.elites(0)] == ["i0", "i2", "i0b"]
    assert a.get("i0").island == 0  # a migrant keeps its origin
    # the round clock: the first round-5 program ends round 4 (a migration round) before it is added
    a.add(prog("late", 0.7, island=1, round=5))
    assert a.snapshot()["last_migration"] == 4
    assert [p.id for p in a.elites(2)] == ["i0", "i1", "i2"]


def test_round_clock_runs_every_due_migration():
    a = Archive(islands=2, migration_interval=1)
    a.add(prog("a", 2.0, island=0))
    assert a.maybe_migrate(3)  # rounds 1, 2 and 3 all ended
    assert a.snapshot()["migrations"] == 3 and a.snapshot()["rounds_ended"] == 3
    assert not a.maybe_migrate(3) and not a.maybe_migrate(2)
    a.add(prog("b", 1.0, island=1, round=2))  # a late result of an earlier round: no migration
    assert a.snapshot()["migrations"] == 3
    a.add(prog("c", 1.0, island=1, round=6))  # ends rounds 4 and 5
    assert a.snapshot()["migrations"] == 5 and a.snapshot()["round"] == 6


def test_failures_bounded_per_island_newest_first():
    a = Archive(islands=2, failures_kept=3)
    for i in range(10):
        a.add(prog(f"f{i}", 0.2, status="compile_error", island=i % 2, error=f"err {i}"))
    a.add(prog("ok", 1.0, island=0))
    assert [p.id for p in a.failures(0)] == ["f8", "f6", "f4"]
    assert [p.error for p in a.failures(1, 2)] == ["err 9", "err 7"]
    assert a.failures(0, 0) == []


def test_rejected_programs_are_never_parents_or_best():
    a = Archive(islands=1)
    a.add(prog("cheat", 0.0, status="rejected", error="guard: cached_output"))
    assert a.best() is None and a.sample_parent(0, random.Random(0)) is None
    assert [p.id for p in a.failures(0)] == ["cheat"]
    assert a.hall_of_fame() == [] and a.grid() == {}
    a.add(prog("bad", 0.2, status="compile_error"))
    assert a.best().id == "bad"
    assert a.sample_parent(0, random.Random(0)).id == "bad"


def test_incumbent_changes_only_on_displacement():
    a = Archive(islands=2)
    assert a.best() is None
    assert a.add(prog("broken", 0.2, status="compile_error"))
    assert a.add(prog("first", 2.0, speedup=2.0, ci=(1.8, 2.2), island=1))
    assert not a.add(prog("noise", 2.1, speedup=2.15, ci=(2.0, 2.3)))  # inside the incumbent's interval
    assert a.best().id == "first"
    assert [p.id for p in a.hall_of_fame()][:2] == ["first", "noise"]  # a tie: the earlier stays ahead
    assert a.add(prog("real", 2.5, speedup=2.5, ci=(2.3, 2.7)))
    assert a.best().id == "real"
    assert not a.add(prog("incorrect", 0.45, status="incorrect"))
    assert a.best().id == "real"


def _population(n, seed=1, islands=4):
    rng = random.Random(seed)
    statuses = ["correct"] * 5 + ["incorrect", "compile_error", "runtime_error", "timeout", "rejected"]
    out = []
    for i in range(n):
        status = rng.choice(statuses)
        sp = rng.uniform(0.3, 6.0) if status == "correct" else None
        ci = (sp * 0.95, sp * 1.05) if sp is not None and rng.random() < 0.8 else None
        s = score({"status": status, "speedup": sp, "max_rel_err": rng.random()})
        feats = {
            "complexity": rng.randrange(100, 3000),
            "n_kernels": rng.randrange(0, 5),
            "uses_dot": rng.random() < 0.3,
            "fusion": rng.randrange(0, 10),
        }
        out.append(prog(i, s, status=status, island=i % islands, round=i // 40, speedup=sp, ci=ci, features=feats,
                        error="" if status == "correct" else f"{status} #{i}"))
    return out


def test_sampling_is_deterministic_for_a_seed():
    progs = _population(400)

    def draws(seed):
        a = Archive.rebuild(progs, islands=4, seed=seed)
        rng = random.Random(seed)
        out = []
        for i in range(60):
            parent = a.sample_parent(i % 4, rng)
            insp = a.inspirations(i % 4, 5, rng, parent=parent)
            assert parent is not None and parent.status != "rejected"
            assert parent.id not in [p.id for p in insp]
            assert len(insp) == 5 and len({p.id for p in insp}) == 5
            assert all(p.status != "rejected" for p in insp)
            out.append((parent.id, [p.id for p in insp]))
        return out

    assert draws(7) == draws(7)
    assert draws(7) != draws(8)
    # the archive's own rng (seeded) when none is passed
    a1, a2 = Archive.rebuild(progs, seed=3), Archive.rebuild(progs, seed=3)
    assert [a1.sample_parent(0).id for _ in range(20)] == [a2.sample_parent(0).id for _ in range(20)]


def test_sampling_mixes_exploitation_and_exploration():
    a = Archive.rebuild(_population(800), islands=4, seed=0)
    rng = random.Random(0)
    elites = {p.id for p in a.elites(0)}
    hof = {p.id for p in a.hall_of_fame()}
    picks = [a.sample_parent(0, rng).id for _ in range(300)]
    assert any(p in elites for p in picks)
    assert any(p not in elites and p not in hof for p in picks)  # grid cells: exploration


def test_snapshot_identical_after_rebuild():
    progs = _population(600)
    live = Archive(islands=4, hall_of_fame=8, failures_kept=5, migration_interval=3, seed=11)
    for i, p in enumerate(progs):  # the engine's way: a round's adds, then `maybe_migrate` at its end
        live.add(p)
        if i + 1 == len(progs) or progs[i + 1].round != p.round:
            live.maybe_migrate(p.round)
    kw = {"islands": 4, "hall_of_fame": 8, "failures_kept": 5, "migration_interval": 3, "seed": 11}
    rebuilt = Archive.rebuild(progs, rounds_done=progs[-1].round + 1, **kw)
    snap = live.snapshot()
    assert snap["migrations"] > 0
    assert json.loads(json.dumps(snap)) == snap  # JSON-serialisable, unchanged by a round trip
    assert rebuilt.snapshot() == snap
    assert rebuilt.snapshot_digest() == live.snapshot_digest()
    # programs round-trip through their dicts (as through the store)
    again = Archive.rebuild([Program.from_dict(p.to_dict()) for p in progs], rounds_done=progs[-1].round + 1, **kw)
    assert again.snapshot() == snap
    # and a different history gives a different snapshot
    other = Archive.rebuild(progs[:-1], rounds_done=progs[-1].round + 1, **kw)
    assert other.snapshot() != snap


def test_structures_stay_bounded_at_scale():
    bins = GridBins()
    a = Archive(islands=4, hall_of_fame=16, failures_kept=16, island_elites=8, grid_bins=bins)
    for p in _population(5000, seed=5):
        a.add(p)
    sizes = a.sizes()
    assert sizes["added"] == len(a) == 5000
    assert sizes["hall_of_fame"] <= 16
    assert all(n <= 8 for n in sizes["elites"])
    assert all(n <= 16 for n in sizes["failures"])
    assert sizes["grid_cells"] <= bins.n_cells
    assert sizes["live"] <= 16 + 4 * 8 + bins.n_cells + 4 * 16 + 1  # only what some structure still holds
    assert len(a._refs) == len(a._live) == len(a._seq_of) == sizes["live"]
    dropped = next(i for i in range(5000) if a.get(i) is None)
    assert dropped in a and 5000 not in a  # ever added vs held
    with pytest.raises(ValueError):
        a.add(prog(dropped, 1.0))  # a second add of a dropped program is still refused


def test_program_from_verdict():
    code = (SOLUTIONS / "level1" / "01_relu.py").read_text()
    v = Verdict(Status.INCORRECT, max_rel_err=0.5, error="trial 0: max error 0.5\nmore detail")
    p = Program.from_verdict(7, code, v, parent_id=3, island=1, round=2)
    assert (p.id, p.parent_id, p.island, p.round, p.status) == (7, 3, 1, 2, "incorrect")
    assert p.score == score(v) and p.error == "trial 0: max error 0.5"
    assert p.features["n_kernels"] == 1 and len(p.digest) == 16
    q = Program.from_verdict(8, code, {"status": "correct", "speedup": 1.5, "speedup_ci": [1.4, 1.6]})
    assert q.speedup_ci == (1.4, 1.6) and q.correct


def test_bad_adds_refused():
    a = Archive(islands=2)
    with pytest.raises(ValueError):
        a.add(prog("x", island=2))
    a.add(prog("x"))
    with pytest.raises(ValueError):
        a.add(prog("x"))
    with pytest.raises(ValueError):
        a.add(prog("nan", float("nan")))


# ---- features ---------------------------------------------------------------------------------------------------------
def _features(rel):
    return kernel_features((SOLUTIONS / rel).read_text())


def test_features_relu():
    f = _features("level1/01_relu.py")
    assert not f["parse_error"]
    assert (f["n_kernels"], f["kernels"], f["uses_dot"], f["uses_atomics"]) == (1, ["relu_kernel"], False, False)
    assert (f["n_loads"], f["n_stores"], f["n_loops"], f["n_launch_sites"]) == (1, 1, 0, 1)
    assert f["launch_constexprs"] == {"BLOCK": [4096]}  # BLOCK=self.BLOCK resolved to the class constant
    assert f["tile_sizes"] == [4096] and f["dynamic_tiles"] == []
    assert f["num_warps"] == [8] and f["num_stages"] == []
    assert f["fusion"] == 1  # tl.where
    assert f["complexity"] == f["ast_nodes"] > 0 and 15 < f["lines"] < 30


def test_features_softmax():
    f = _features("level1/05_softmax.py")
    assert (f["n_kernels"], f["n_loads"], f["n_stores"], f["n_loops"]) == (1, 3, 2, 2)
    assert f["tile_sizes"] == [4096]  # `block = LOOP_BLOCK`; the other assignment is computed at run time
    assert f["dynamic_tiles"] == ["BLOCK"]
    assert f["num_warps"] == [4, 8, 16]  # the values _num_warps() returns
    assert f["fusion"] == 5  # exp, max, maximum, sum, where
    assert not f["uses_dot"]


def test_features_matmul_and_mlp():
    mm = _features("level1/10_matmul_fp16.py")
    assert mm["uses_dot"] and (mm["n_loads"], mm["n_stores"], mm["n_loops"]) == (2, 1, 1)
    assert mm["launch_constexprs"]["GROUP_M"] == [8]
    assert mm["dynamic_tiles"] == ["BLOCK_K", "BLOCK_M", "BLOCK_N"]
    assert mm["num_warps"] == [4, 8] and mm["num_stages"] == [3]
    mlp = _features("level3/01_mlp.py")
    assert (mlp["n_kernels"], mlp["kernels"], mlp["uses_dot"]) == (1, ["linear_kernel"], True)
    assert (mlp["n_loads"], mlp["n_stores"], mlp["n_loops"], mlp["n_launch_sites"]) == (3, 1, 1, 1)
    assert mlp["num_warps"] == [4, 8] and mlp["num_stages"] == [3]
    assert mlp["fusion"] == 2  # dot + maximum (the fused ReLU)
    assert mlp["complexity"] > mm["complexity"] > _features("level1/01_relu.py")["complexity"]
    ffn = _features("level3/02_prenorm_ffn_block.py")
    assert ffn["n_kernels"] == 2 and ffn["n_launch_sites"] == 2


def test_features_synthetic_kernel():
    src = '''
import triton
import triton.language as language
from triton import jit

TILE = 1 << 7

@triton.autotune(configs=[triton.Config({"BLOCK": 128}, num_warps=4), triton.Config({"BLOCK": 256}, num_stages=2)],
                 key=["n"])
@triton.jit
def k1(x, out, n, BLOCK: language.constexpr):
    for i in language.static_range(4):
        v = language.load(x + i)
        language.atomic_add(out, language.sum(v, axis=0))

@jit
def k2(x, n, TILE_N: language.constexpr, STAGES: language.constexpr):
    while n > 0:
        n -= 1

def launch(x, out, n, big):
    k1[(1,)](x, out, n)
    k2[(1,)](x, n, TILE, 3 if big else 1, num_warps=2 ** 2)
'''
    f = kernel_features(src)
    assert f["kernels"] == ["k1", "k2"] and f["n_kernels"] == 2
    assert f["uses_atomics"] and not f["uses_dot"]
    assert (f["n_loads"], f["n_stores"], f["n_loops"], f["n_launch_sites"]) == (1, 0, 2, 2)
    assert f["n_autotune_configs"] == 2
    assert f["launch_constexprs"] == {"BLOCK": [128, 256], "STAGES": [1, 3], "TILE_N": [128]}
    assert f["tile_sizes"] == [128, 256]
    assert f["num_warps"] == [4] and f["num_stages"] == [2]
    assert f["fusion"] == 2  # atomic_add, sum


def test_features_broken_code_and_determinism():
    for bad in ["def f(:\n    pass\n", "@triton.jit\ndef k(x):\n  return (", "x = '\0'", "\t  if"]:
        f = kernel_features(bad)
        assert f["parse_error"] is True and f["error"]
        assert f["n_kernels"] == 0 and f["complexity"] == 0
    deep = "x = " + "(" * 5000 + "1" + ")" * 5000
    assert kernel_features(deep)["parse_error"] is True
    src = (SOLUTIONS / "level3" / "01_mlp.py").read_text()
    assert json.dumps(kernel_features(src), sort_keys=True) == json.dumps(kernel_features(src), sort_keys=True)
    assert kernel_features(src)["parse_error"] is False


def test_noise_never_reorders_programs_anywhere():
    """Speedups inside each other's intervals are ties everywhere (hall of fame, island elites, grid cells): the
    earlier program stays ahead, whatever the point estimates say; only a wholly higher interval goes ahead."""
    a = Archive(islands=1)
    a.add(prog("steady", 1.585, speedup=1.50, ci=(1.46, 1.54)))
    a.add(prog("lucky", 1.6, speedup=1.52, ci=(1.40, 1.64)))  # a higher point, inside the other's interval
    a.add(prog("plain", 1.0))  # correct, no timing (the CPU): below anything measured faster
    assert [p.id for p in a.hall_of_fame()] == ["steady", "lucky", "plain"]
    assert [p.id for p in a.elites(0)] == ["steady", "lucky", "plain"]
    assert a.grid()[a.bins.cell(a.get("steady"))].id == "steady"
    a.add(prog("faster", 1.8, speedup=1.74, ci=(1.70, 1.78)))  # wholly above both
    assert [p.id for p in a.hall_of_fame()][:3] == ["faster", "steady", "lucky"]
    assert a.best().id == "faster"
    # the same programs in the same order give the same archive (the rule is fixed, so resume rebuilds it)
    b = Archive(islands=1)
    for pid in ("steady", "lucky", "plain", "faster"):
        b.add(a.get(pid))
    assert b.snapshot_digest() == a.snapshot_digest()
