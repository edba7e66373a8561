"""The offline mutate layer: knobs found statically in Triton candidates, moved within bounds, programs kept valid."""

from __future__ import annotations

import ast
import random
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from kernelsmith.candidate import Candidate
from kernelsmith.workshop.offline.mutate import (
    BLOCK_MAX,
    BLOCK_MIN,
    DOT_BLOCK_MAX,
    STAGES,
    WARPS,
    Knob,
    NothingToMutate,
    knobs,
    mutate,
    set_knobs,
    sweep,
)

ROOT = Path(__file__).resolve().parent.parent
SOLUTIONS = sorted((ROOT / "solutions").glob("level*/*.py"))
TUNABLE = [p for p in SOLUTIONS if knobs(p.read_text())]


def _id(p: Path) -> str:
    return f"{p.parent.name}/{p.stem}"


def _by_name(source: str) -> dict[str, Knob]:
    return {k.name: k for k in knobs(source)}


def _valid(kind: str, value: int, hi: int = BLOCK_MAX) -> bool:
    if kind == "num_warps":
        return value in WARPS
    if kind == "num_stages":
        return value in STAGES
    if kind == "group":
        return value & (value - 1) == 0 and 1 <= value <= 64
    return value & (value - 1) == 0 and BLOCK_MIN <= value <= hi


# ------------------------------------------------------------------------------------- shipped solutions


def test_every_shipped_solution_has_knobs() -> None:
    assert TUNABLE == SOLUTIONS


@pytest.mark.parametrize("path", TUNABLE, ids=_id)
def test_mutation_is_valid_differs_and_stays_in_the_block(path: Path) -> None:
    source = path.read_text()
    before = Candidate(source)
    for seed in range(10):
        m = mutate(source, random.Random(seed), n_changes=1 + seed % 3)
        ast.parse(m.source)
        assert m.source != source
        assert m.changes and len(m.changes) == len(m.edits) <= 1 + seed % 3
        assert len({name for name, _, _ in m.edits}) == len(m.edits)  # distinct knobs
        for text, (_, old, new) in zip(m.changes, m.edits):
            assert text.endswith(f"{old} → {new}") and old != new
        after = Candidate(m.source)
        head, _, tail = before.split()
        assert after.split()[0] == head and after.split()[2] == tail
        # Only the changed literals' lines differ, and only by those literals.
        old_lines, new_lines = source.splitlines(), m.source.splitlines()
        assert len(old_lines) == len(new_lines)
        changed_lines = {_by_name(source)[name].line for name, _, _ in m.edits}
        assert {i + 1 for i, (a, b) in enumerate(zip(old_lines, new_lines)) if a != b} <= changed_lines
        # The knobs read back from the new program carry the new values, everything else is unchanged.
        new_knobs = _by_name(m.source)
        edited = {name: new for name, _, new in m.edits}
        for name, k in _by_name(source).items():
            assert new_knobs[name].value == edited.get(name, k.value)


@pytest.mark.parametrize("path", TUNABLE, ids=_id)
def test_same_seed_same_result_and_seeds_explore(path: Path) -> None:
    source = path.read_text()
    runs = [mutate(source, random.Random(seed)) for seed in range(20)]
    again = [mutate(source, random.Random(seed)) for seed in range(20)]
    assert [m.source for m in runs] == [m.source for m in again]
    assert [m.changes for m in runs] == [m.changes for m in again]
    assert len({m.source for m in runs}) >= 2
    assert len({m.edits[0][0] for m in runs}) >= 2  # different knobs, not only different directions


@pytest.mark.parametrize("path", TUNABLE, ids=_id)
def test_values_stay_in_bounds(path: Path) -> None:
    source = path.read_text()
    current = source
    kinds = {k.name: k for k in knobs(source)}
    for k in kinds.values():
        assert k.value in k.allowed and set(k.moves()) <= set(k.allowed)
        assert all(_valid(k.kind, v) for v in k.allowed if v != k.value), k
        if "tl.dot" in source and any(u.rsplit(".", 1)[1] in ("BLOCK_M", "BLOCK_N", "BLOCK_K") for u in k.uses):
            assert max(k.allowed) <= DOT_BLOCK_MAX, k  # GEMM tiles stay within 16..256
    rng = random.Random(7)
    for _ in range(40):  # a random walk: knobs never leave their bounds however far it goes
        m = mutate(current, rng, n_changes=3)
        for name, _, new in m.edits:
            k = kinds[name]
            assert _valid(k.kind, new), (name, new)
            assert not k.grow_only or new >= k.value
        current = m.source
    ast.parse(current)


def test_knobs_found_in_shipped_solutions() -> None:
    relu = _by_name((ROOT / "solutions/level1/01_relu.py").read_text())
    assert set(relu) == {"ModelNew.BLOCK", "relu_kernel.num_warps"}
    assert relu["ModelNew.BLOCK"].label == "relu_kernel launch: BLOCK"
    assert relu["ModelNew.BLOCK"].uses == ("relu_kernel.BLOCK",)
    assert relu["relu_kernel.num_warps"].moves() == (4, 16)

    softmax = _by_name((ROOT / "solutions/level1/05_softmax.py").read_text())
    assert set(softmax) == {"MAX_SINGLE_BLOCK", "LOOP_BLOCK", "_num_warps.return1", "_num_warps.return2",
                            "_num_warps.return3"}
    assert softmax["_num_warps.return3"].kind == "num_warps" and softmax["_num_warps.return3"].moves() == (8,)
    assert softmax["LOOP_BLOCK"].label == "softmax_kernel launch: BLOCK (LOOP_BLOCK)"

    matmul = _by_name((ROOT / "solutions/level1/10_matmul_fp16.py").read_text())
    assert {"forward.block_m.hi", "forward.block_k.lo", "matmul_kernel.GROUP_M", "matmul_kernel.num_stages",
            "matmul_kernel.num_warps.if", "matmul_kernel.num_warps.else"} <= set(matmul)
    assert matmul["forward.block_m.hi"].allowed[-1] == DOT_BLOCK_MAX  # tl.dot tiles stay small
    assert matmul["matmul_kernel.GROUP_M"].kind == "group"
    assert matmul["matmul_kernel.num_stages"].moves() == (2, 4)
    assert matmul["matmul_kernel.num_warps.if"].label == "matmul_kernel launch: num_warps (if big)"

    mean = _by_name((ROOT / "solutions/level1/09_mean_dim.py").read_text())
    assert set(mean) == {"ModelNew.TILE", "forward.block_n.cap", "mean_dim_kernel.num_warps"}
    assert "min cap" in mean["forward.block_n.cap"].label


# ------------------------------------------------------------------------------------- synthetic programs

HEADER = "import torch\nimport triton\nimport triton.language as tl\n"

ROW_KERNEL = HEADER + textwrap.dedent('''
    BLOCK_OUTSIDE = 1024
    # EVOLVE-BLOCK-START
    @triton.jit
    def row_kernel(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        BLOCK_INSIDE = 64
        x = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols)
        tl.store(y_ptr + row * n_cols + cols, x, mask=cols < n_cols)


    @triton.jit
    def looped_kernel(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        for start in range(0, n_cols, BLOCK):
            cols = start + tl.arange(0, BLOCK)
            tl.store(y_ptr + row * n_cols + cols, tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols),
                     mask=cols < n_cols)


    def forward(x, y):
        n_rows, n_cols = x.shape
        block = min(triton.next_power_of_2(n_cols), 4096)  # a single block per row: must cover the row
        row_kernel[(n_rows,)](x, y, n_cols, BLOCK=block, num_warps=4)
        looped_kernel[(n_rows,)](x, y, n_cols, BLOCK=min(triton.next_power_of_2(n_cols), 2048))
        return y
    # EVOLVE-BLOCK-END
''')


def test_single_block_row_kernel_may_only_grow() -> None:
    ks = _by_name(ROW_KERNEL)
    row = ks["forward.block.cap"]
    assert row.grow_only and row.value == 4096 and row.moves() == (8192,)
    assert row.label == "row_kernel launch: BLOCK (min cap)"
    looped = ks["looped_kernel.BLOCK.cap"]
    assert not looped.grow_only and looped.moves() == (1024, 4096)
    for seed in range(30):
        for name, old, new in mutate(ROW_KERNEL, random.Random(seed), n_changes=3).edits:
            if name == "forward.block.cap":
                assert new > old


def test_a_grid_derived_from_the_block_through_locals_lets_it_shrink() -> None:
    """The matmul launcher computes its tile count a few lines above the grid (`tiles = cdiv(M, block_m) *
    ...`, `grid = (tiles, batch, split)`): the output blocks are tiled, so their caps move both ways (they once
    could only grow, and every tuner variant was a 128-256 tile: slow to compile, slow to run on small K)."""
    source = HEADER + textwrap.dedent('''
        @triton.jit
        def mm_kernel(a_ptr, o_ptr, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
            pid = tl.program_id(0)
            tl.store(o_ptr + pid, tl.load(a_ptr + pid))


        def launch(a, o, M, N, split):
            block_m = min(max(triton.next_power_of_2(M), 16), 128)
            block_n = min(max(triton.next_power_of_2(N), 16), 128)
            tiles = triton.cdiv(M, block_m) * triton.cdiv(N, block_n)
            for phase in (1, 2) if split > 1 else (0,):
                grid = (tiles, 1, split if phase == 1 else 1)
                mm_kernel[grid](a, o, M, N, BLOCK_M=block_m, BLOCK_N=block_n, num_warps=4)
    ''')
    ks = _by_name(source)
    for name in ("launch.block_m.cap", "launch.block_n.cap"):
        assert not ks[name].grow_only, name
        assert ks[name].moves() == (64, 256), name


def test_literals_outside_the_block_and_inside_kernels_are_not_knobs() -> None:
    names = set(_by_name(ROW_KERNEL))
    assert names == {"forward.block.cap", "row_kernel.num_warps", "looped_kernel.BLOCK.cap"}


def test_no_markers_autotune_configs_and_positional_constexprs() -> None:
    source = HEADER + textwrap.dedent('''
        @triton.autotune(configs=[triton.Config({"BLOCK_M": 64}, num_warps=4, num_stages=2)], key=["n"])
        @triton.jit
        def auto_kernel(x_ptr, n, BLOCK_M: tl.constexpr):
            tl.store(x_ptr + tl.arange(0, BLOCK_M), tl.dot(x_ptr, x_ptr))


        @triton.jit
        def ew_kernel(x_ptr, n, BLOCK: tl.constexpr):
            pid = tl.program_id(0)


        class ModelNew(torch.nn.Module):
            def forward(self, x):
                n = x.numel()
                auto_kernel[(1,)](x, n)
                BLOCK_SIZE = 1024 if n > 4096 else 256  # the block
                ew_kernel[(triton.cdiv(n, BLOCK_SIZE),)](x, n, BLOCK_SIZE, num_warps=8)
                return x
    ''')
    ks = _by_name(source)
    assert set(ks) == {"config1.BLOCK_M", "config1.num_warps", "config1.num_stages", "ew_kernel.num_warps",
                       "forward.BLOCK_SIZE.if", "forward.BLOCK_SIZE.else"}
    assert ks["config1.BLOCK_M"].allowed[-1] == DOT_BLOCK_MAX
    assert ks["config1.num_stages"].label == "auto_kernel triton.Config #1: num_stages"
    assert ks["forward.BLOCK_SIZE.else"].uses == ("ew_kernel.BLOCK",)
    out = set_knobs(source, {"forward.BLOCK_SIZE.if": 2048, "config1.num_warps": 8})
    assert "BLOCK_SIZE = 2048 if n > 4096 else 256  # the block" in out
    assert 'triton.Config({"BLOCK_M": 64}, num_warps=8, num_stages=2)' in out


def test_edits_keep_formatting_and_handle_non_ascii_columns() -> None:
    source = HEADER + textwrap.dedent('''
        @triton.jit
        def k(x_ptr, BLOCK: tl.constexpr):
            pass


        def forward(x):
            k[(1,)](x, BLOCK=  256, num_warps=4)  # é ü: wide characters after the literals
            s = "ñ";  k[(1,)](x, BLOCK=512)   # and before one
    ''')
    out = set_knobs(source, {"k.BLOCK": 1024, "k.BLOCK#2": 64, "k.num_warps": 2})
    assert 'k[(1,)](x, BLOCK=  1024, num_warps=2)  # é ü: wide characters after the literals' in out
    assert 's = "ñ";  k[(1,)](x, BLOCK=64)   # and before one' in out


def test_sweep_gives_one_program_per_value() -> None:
    source = (ROOT / "solutions/level1/01_relu.py").read_text()
    programs = sweep(source, "relu_kernel.num_warps")
    assert len(programs) == len(WARPS)
    assert [_by_name(p)["relu_kernel.num_warps"].value for p in programs] == list(WARPS)
    assert [_by_name(p)["ModelNew.BLOCK"].value for p in sweep(source, "ModelNew.BLOCK", [1024, 2048])] == [
        1024, 2048]
    with pytest.raises(KeyError, match="no knob named nope"):
        sweep(source, "nope")
    with pytest.raises(ValueError):
        set_knobs(source, {"ModelNew.BLOCK": 0})


def test_nothing_to_mutate() -> None:
    plain = HEADER + textwrap.dedent('''
        # EVOLVE-BLOCK-START
        @triton.jit
        def k(x_ptr, n, BLOCK: tl.constexpr):
            tl.store(x_ptr + tl.arange(0, BLOCK), 0.0)


        class ModelNew(torch.nn.Module):
            def forward(self, x):
                k[(1,)](x, x.numel(), BLOCK=triton.next_power_of_2(x.numel()))
                return x
        # EVOLVE-BLOCK-END
    ''')
    assert knobs(plain) == []
    with pytest.raises(NothingToMutate, match="no tunable knob"):
        mutate(plain, random.Random(0))
    with pytest.raises(NothingToMutate, match="does not parse"):
        mutate("def broken(:\n", random.Random(0))
    assert knobs("def broken(:\n") == []


# ------------------------------------------------------------------------------------- through the referee

REFEREE_CASES = [("level1/01_relu", seed) for seed in (1, 2, 3)] + [("level1/05_softmax", seed) for seed in (1, 2, 3)]


@pytest.fixture(scope="module")
def mutated_verdicts(tmp_path_factory):
    from kernelsmith.referee.evaluation import EvalOptions, evaluate

    out = tmp_path_factory.mktemp("mutated")
    jobs = {}
    for name, seed in REFEREE_CASES:
        m = mutate((ROOT / "solutions" / f"{name}.py").read_text(), random.Random(seed), n_changes=2)
        path = out / f"{name.replace('/', '_')}_{seed}.py"
        path.write_text(m.source)
        jobs[(name, seed)] = (path, m.changes)
    opts = EvalOptions(device="cpu", timeout_s=240)
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {key: pool.submit(evaluate, ROOT / "tasks" / f"{key[0]}.py", path, opts)
                   for key, (path, _) in jobs.items()}
        return {key: (f.result(), jobs[key][1]) for key, f in futures.items()}


@pytest.mark.parametrize("case", REFEREE_CASES, ids=lambda c: f"{c[0]}-seed{c[1]}")
def test_mutated_solution_is_still_correct(case, mutated_verdicts) -> None:
    verdict, changes = mutated_verdicts[case]
    assert verdict.status.value == "correct", f"{changes}: {verdict.status.value} {verdict.error}\n{verdict.log[-2000:]}"
