"""Precision, said plainly: the `precision` setting and the referee's `numerics` policy.

Under numerics "fp32" the judge also runs the task in float64 and refuses a candidate whose error against it is
far above the fp32 reference's own: fp16-, bf16- or tf32-rounded operands fail there and pass KernelBench's
tolerance; an exact dot, a tf32x3 dot and a sum in another order pass both. CPU, Triton's interpreter (its
`tl.dot` is exact fp32, so tf32 is emulated by rounding the mantissa away, as the hardware does).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from conftest import EvalPool, Job, needed_jobs

from kernelsmith.referee.verdict import Status, Verdict
from kernelsmith.referee.worker import FP64_FACTOR, fp64_errors
from kernelsmith.settings import EvalSettings, SettingsError

MATMUL_TASK = '''"""fp32 matmul, small enough for the interpreter."""
import torch
import torch.nn as nn

M, K, N = 16, 64, 16


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return torch.matmul(a, b)


def get_inputs():
    return [torch.randn(M, K), torch.randn(K, N)]


def get_init_inputs():
    return []
'''

SUM_TASK = '''"""Row sums of an fp32 matrix."""
import torch
import torch.nn as nn

ROWS, COLS = 8, 1024


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.sum(x, dim=1)


def get_inputs():
    return [torch.randn(ROWS, COLS)]


def get_init_inputs():
    return []
'''

# A task whose forward pins float32 itself: it has no float64 version to judge against.
PINNED_TASK = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(64, 16))

    def forward(self, a):
        return torch.matmul(a.float(), self.w)


def get_inputs():
    return [torch.randn(16, 64)]


def get_init_inputs():
    return []
'''

MATMUL_CANDIDATE = '''import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _tf32(x):
    # round to nearest, 10 mantissa bits kept: what a tf32 tensor core does to an fp32 operand
    return ((x.to(tl.int32, bitcast=True) + 0x1000) & -8192).to(tl.float32, bitcast=True)


@triton.jit
def mm_kernel(a_ptr, b_ptr, c_ptr, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr, BK: tl.constexpr):
    rm = tl.arange(0, M)
    rn = tl.arange(0, N)
    acc = tl.zeros((M, N), dtype=tl.float32)
    for k0 in range(0, K, BK):
        rk = k0 + tl.arange(0, BK)
        a = tl.load(a_ptr + rm[:, None] * K + rk[None, :])
        b = tl.load(b_ptr + rk[:, None] * N + rn[None, :])
        __DOT__
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        M, K = a.shape
        N = b.shape[1]
        c = torch.empty((M, N), device=a.device, dtype=torch.float32)
        mm_kernel[(1,)](a, b, c, M, N, K, BK=16)
        return c
'''

DOTS = {
    "exact": 'acc += tl.dot(a, b, input_precision="ieee")',
    "fp16": "acc += tl.dot(a.to(tl.float16), b.to(tl.float16), out_dtype=tl.float32)",
    # (the interpreter's bf16 dot multiplies raw bits: the operands are rounded, the dot is fp32's)
    "bf16": "acc += tl.dot(a.to(tl.bfloat16).to(tl.float32), b.to(tl.bfloat16).to(tl.float32))",
    "tf32": "acc += tl.dot(_tf32(a), _tf32(b))",
    # the compiler's tf32x3: each operand as a tf32 high part plus a tf32 low part, three products
    "tf32x3": ("a_hi = _tf32(a)\n        b_hi = _tf32(b)\n        acc += tl.dot(a_hi, _tf32(b - b_hi))\n"
               "        acc += tl.dot(_tf32(a - a_hi), b_hi)\n        acc += tl.dot(a_hi, b_hi)"),
}

SUM_CANDIDATE = '''import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def row_sum(x_ptr, y_ptr, COLS: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    acc = 0.0
    for i in range(COLS // BLOCK):  # last block first: another order than torch's
        offs = (COLS // BLOCK - 1 - i) * BLOCK + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * COLS + offs)
        acc += tl.sum(__X__, axis=0)
    tl.store(y_ptr + row, acc)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        rows, cols = x.shape
        y = torch.empty((rows,), device=x.device, dtype=torch.float32)
        row_sum[(rows,)](x, y, cols, BLOCK=64)
        return y
'''


def _jobs(gen: Path) -> list[Job]:
    tasks = {}
    for name, text in (("matmul", MATMUL_TASK), ("sum", SUM_TASK), ("pinned", PINNED_TASK)):
        tasks[name] = gen / f"task_{name}.py"
        tasks[name].write_text(text)
    cands = {}
    for name, dot in DOTS.items():
        cands[name] = gen / f"mm_{name}.py"
        cands[name].write_text(MATMUL_CANDIDATE.replace("__DOT__", dot))
    for name, x in (("sum_reordered", "x"), ("sum_fp16", "x.to(tl.float16).to(tl.float32)")):
        cands[name] = gen / f"{name}.py"
        cands[name].write_text(SUM_CANDIDATE.replace("__X__", x))
    cands["pinned"] = gen / "pinned.py"
    cands["pinned"].write_text(MATMUL_CANDIDATE.replace("__DOT__", DOTS["exact"]).replace(
        "def forward(self, a, b):", "def forward(self, a):\n        b = self.w\n        return self._mm(a, b)\n\n"
        "    def _mm(self, a, b):").replace("super().__init__()", "super().__init__()\n"
                                            "        self.w = nn.Parameter(torch.randn(64, 16))"))
    jobs = []
    for numerics in ("tolerance", "fp32"):
        for name in ("exact", "fp16", "tf32", "tf32x3"):
            jobs.append(Job(f"{name}-{numerics}", cands[name], tasks["matmul"], {"numerics": numerics}))
        # bf16 is outside fp32's tolerance (1e-3): at bf16's own (2e-2) only the numerics policy refuses it
        jobs.append(Job(f"bf16-{numerics}", cands["bf16"], tasks["matmul"],
                        {"numerics": numerics, "tolerance": 2e-2}))
        jobs.append(Job(f"sum_reordered-{numerics}", cands["sum_reordered"], tasks["sum"], {"numerics": numerics}))
        jobs.append(Job(f"sum_fp16-{numerics}", cands["sum_fp16"], tasks["sum"], {"numerics": numerics}))
    jobs.append(Job("exact-ieee", cands["exact"], tasks["matmul"], {"numerics": "fp32", "precision": "ieee"}))
    jobs.append(Job("pinned-fp32", cands["pinned"], tasks["pinned"], {"numerics": "fp32", "policy": "lenient"}))
    return jobs


@pytest.fixture(scope="module")
def pool(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    needed = needed_jobs(request, param="")  # the parameters name candidates; their marks name the jobs
    p = EvalPool("precision", _jobs(tmp_path_factory.mktemp("precision")), needed)
    yield p
    p.close()


def _both(*names: str) -> list:
    """Parameters naming a candidate, each marked with its two evaluations (one per policy)."""
    return [pytest.param(n, marks=pytest.mark.uses(f"{n}-tolerance", f"{n}-fp32")) for n in names]


@pytest.mark.parametrize("case", _both("exact", "tf32x3", "sum_reordered"))
def test_fp32_arithmetic_passes_both_policies(pool: EvalPool, case: str) -> None:
    loose, strict = pool.verdict(f"{case}-tolerance"), pool.verdict(f"{case}-fp32")
    for v in (loose, strict):
        assert v.status is Status.CORRECT, v.error + "\n" + v.log
    assert not loose.fp64_error  # the tolerance rule never runs the float64 reference
    err = strict.fp64_error
    assert err["candidate"] <= err["limit"] and err["ratio"] < FP64_FACTOR / 2, err
    assert err["limit"] == pytest.approx(FP64_FACTOR * max(err["reference"], 2.0**-23))


@pytest.mark.parametrize("case", _both("fp16", "bf16", "tf32", "sum_fp16"))
def test_reduced_precision_passes_tolerance_and_fails_fp32(pool: EvalPool, case: str) -> None:
    loose, strict = pool.verdict(f"{case}-tolerance"), pool.verdict(f"{case}-fp32")
    assert loose.status is Status.CORRECT, loose.error + "\n" + loose.log
    assert strict.status is Status.INCORRECT, strict.error
    assert strict.finding("reduced_precision") is not None
    assert strict.error.startswith("reduced precision: error "), strict.error
    assert "vs fp32 reference" in strict.error and strict.fp64_error["ratio"] > 3 * FP64_FACTOR
    assert strict.fp64_error["candidate"] > strict.fp64_error["limit"]
    assert f"x{strict.fp64_error['ratio']:.0f}" in strict.error


@pytest.mark.uses("exact-ieee", "exact-tolerance", "tf32-fp32")
def test_every_verdict_names_its_precision_and_policy(pool: EvalPool) -> None:
    ieee, default, refused = pool.verdict("exact-ieee"), pool.verdict("exact-tolerance"), pool.verdict("tf32-fp32")
    assert (ieee.precision, ieee.numerics) == ("ieee", "fp32")
    assert (default.precision, default.numerics) == ("tf32x3", "tolerance")
    assert (refused.precision, refused.numerics) == ("tf32x3", "fp32")
    again = Verdict.from_dict(json.loads(json.dumps(refused.to_dict())))  # as the store keeps it
    assert again.precision == "tf32x3" and again.numerics == "fp32" and again.fp64_error == refused.fp64_error


@pytest.mark.uses("pinned-fp32")
def test_a_task_without_a_float64_version_is_the_tasks_failure(pool: EvalPool) -> None:
    v = pool.verdict("pinned-fp32")
    assert v.task_fault, (v.status, v.error)
    assert "numerics fp32 needs the task's forward in float64" in v.error, v.error


def test_settings_refuse_tf32_under_fp32_numerics() -> None:
    with pytest.raises(SettingsError, match="numerics fp32 refuses tf32"):
        EvalSettings(precision="tf32", numerics="fp32")
    with pytest.raises(SettingsError, match="precision 'fp16'"):
        EvalSettings(precision="fp16")
    assert EvalSettings().precision == "tf32x3" and EvalSettings().numerics == "tolerance"


def test_fp64_errors_judge_fp32_outputs_only() -> None:
    torch.manual_seed(0)
    a, b = torch.randn(32, 256), torch.randn(256, 32)
    ref64 = a.double() @ b.double()
    half = (a.half().float() @ b.half().float())
    found = fp64_errors([half, half.half()], [a @ b, (a @ b).half()], [ref64, ref64])
    assert [e["output"] for e in found] == [0]  # an fp16 output's precision is the task's own choice
    assert found[0]["candidate"] > found[0]["limit"] and found[0]["ratio"] > 100
    exact = fp64_errors([torch.relu(a)], [torch.relu(a)], [torch.relu(a.double())])[0]
    assert exact["reference"] == 0.0 and exact["candidate"] == 0.0 and exact["limit"] == FP64_FACTOR * 2.0**-23


def test_bench_records_precision_in_rows_settings_and_report(tmp_path: Path) -> None:
    """`kernelsmith bench --numerics fp32`: the settings, each row and the report say what the numbers mean; the
    tf32 candidate that KernelBench's tolerance would pass is incorrect."""
    from typer.testing import CliRunner

    from kernelsmith.cli import app

    tasks, cands, out = tmp_path / "kb", tmp_path / "cands", tmp_path / "out"
    for d in (tasks / "level1", cands / "level1"):
        d.mkdir(parents=True)
    for name, dot in (("1_matmul_exact.py", "exact"), ("2_matmul_tf32.py", "tf32")):
        (tasks / "level1" / name).write_text(MATMUL_TASK)
        (cands / "level1" / name).write_text(MATMUL_CANDIDATE.replace("__DOT__", DOTS[dot]))
    result = CliRunner().invoke(app, ["bench", str(tasks), "--candidates", str(cands), "--device", "cpu", "--out",
                                      str(out), "--numerics", "fp32", "--timeout", "120"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    label = "precision: tf32x3 (fp32 dots as 3 tf32 passes), numerics: fp32"
    assert label in " ".join(result.output.split())
    rows = {r["task"]: r for r in map(json.loads, (out / "results.jsonl").read_text().splitlines())}
    exact, tf32 = rows["level1/1_matmul_exact.py"], rows["level1/2_matmul_tf32.py"]
    assert exact["status"] == "correct" and tf32["status"] == "incorrect", rows
    assert tf32["error"].startswith("reduced precision:") and tf32["fp64_error"]["ratio"] > FP64_FACTOR
    assert all((r["precision"], r["numerics"]) == ("tf32x3", "fp32") for r in rows.values())
    settings = json.loads((out / "bench.json").read_text())["settings"]
    assert (settings["precision"], settings["numerics"]) == ("tf32x3", "fp32")
    assert label in (out / "report.html").read_text().replace("&#x27;", "'")
    # the same OUT under another precision is another bench: refused, not mixed
    again = CliRunner().invoke(app, ["bench", str(tasks), "--candidates", str(cands), "--device", "cpu", "--out",
                                     str(out), "--precision", "ieee", "--numerics", "fp32"])
    assert again.exit_code == 2 and "precision: 'tf32x3' → 'ieee'" in " ".join(again.output.split())


def test_bench_refuses_fp32_numerics_with_tf32(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from kernelsmith.cli import app

    (tmp_path / "kb" / "level1").mkdir(parents=True)
    (tmp_path / "kb" / "level1" / "1_matmul.py").write_text(MATMUL_TASK)
    result = CliRunner().invoke(app, ["bench", str(tmp_path / "kb"), "--candidates", str(tmp_path), "--device",
                                      "cpu", "--out", str(tmp_path / "out"), "--precision", "tf32", "--numerics",
                                      "fp32"])
    assert result.exit_code == 2 and "numerics fp32 refuses tf32" in " ".join(result.output.split())


def test_run_report_says_the_runs_precision(tmp_path: Path) -> None:
    """A run's report reads the precision from its config or, before the run config had it, its verdicts."""
    from typer.testing import CliRunner

    from kernelsmith.cli import app

    root = Path(__file__).resolve().parent.parent
    run = tmp_path / "run"
    evolved = CliRunner().invoke(app, ["evolve", str(root / "tasks/level1/01_relu.py"), "--device", "cpu",
                                       "--rounds", "1", "--population", "1", "--proposer", "offline",
                                       "--seed-program", str(root / "solutions/level1/01_relu.py"),
                                       "--run-dir", str(run)], catch_exceptions=False)
    assert evolved.exit_code in (0, 1), evolved.output
    shown = CliRunner().invoke(app, ["report", str(run)], catch_exceptions=False)
    assert shown.exit_code == 0, shown.output
    page = (run / "report.html").read_text().replace("&#x27;", "'")
    assert ('id="precision">precision: tf32x3 (fp32 dots as 3 tf32 passes), numerics: tolerance '
            "(KernelBench's atol/rtol rule)") in page
