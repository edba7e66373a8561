"""`kernelsmith optimize` on the CPU (Triton's interpreter, offline proposer, 1 round of 2): a tiny MLP of our own
and KernelBench's level-3 MLP shrunk, end to end — optimized.py exists, runs on its own in a fresh interpreter and
matches the model, the referee's verdict is recorded, the export of the dir passes its own tests without
kernelsmith; a run killed mid-way finishes on the same command without redoing finished parts; a changed model
file or setting is refused, a bad MODEL_FILE is one line; and the assembler's renaming and placement rules."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from kernelsmith.optimize.assemble import AssembleError, Part, plan, rename_program, render_model
from kernelsmith.task import Task, parse_overrides

REPO = Path(__file__).resolve().parents[1]
SMALL = ["--set", "batch_size=4", "--set", "input_size=32", "--set", "layer_sizes=[64, 32]", "--set", "output_size=16"]
FAST = ["--device", "cpu", "--rounds", "1", "--population", "2", "--proposer", "offline", "--swap", "correct"]

MLP = '''import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, d_in, d_hidden, d_out):
        super().__init__()
        self.fc1 = nn.Linear(d_in, d_hidden)
        self.fc2 = nn.Linear(d_hidden, d_out)

    def forward(self, x):
        h = F.relu(self.fc1(x))
        return torch.sigmoid(self.fc2(h)) * 2.0


batch_size = 8
d_in = 32
d_hidden = 64
d_out = 16


def get_inputs():
    return [torch.randn(batch_size, d_in)]


def get_init_inputs():
    return [d_in, d_hidden, d_out]
'''

# KernelBench's level-3 1_MLP.py, as shipped but for whitespace-only lines (its sizes shrunk with --set: SMALL)
KB_MLP = '''import torch
import torch.nn as nn
import torch.nn.functional as F

class Model(nn.Module):
    def __init__(self, input_size, layer_sizes, output_size):
        """
        :param input_size: The number of input features
        :param layer_sizes: A list of ints containing the sizes of each hidden layer
        :param output_size: The number of output features
        """
        super(Model, self).__init__()

        layers = []
        current_input_size = input_size

        for layer_size in layer_sizes:
            layers.append(nn.Linear(current_input_size, layer_size))
            layers.append(nn.ReLU())
            current_input_size = layer_size

        layers.append(nn.Linear(current_input_size, output_size))

        self.network = nn.Sequential(*layers)

    def forward(self, x):
        """
        :param x: The input tensor, shape (batch_size, input_size)
        :return: The output tensor, shape (batch_size, output_size)
        """
        return self.network(x)

# Test code
batch_size = 128
input_size = 16384
layer_sizes = [16384, 16384]
output_size = 8192

def get_inputs():
    return [torch.rand(batch_size, input_size)]

def get_init_inputs():
    return [input_size, layer_sizes, output_size]'''

# Imports optimized.py and the model file by path (no kernelsmith), builds both from one seed and compares them
# on inputs of another seed.
STANDALONE = '''
import importlib.util, sys
import torch

def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod

opt, ref = load(sys.argv[1], "optimized"), load(sys.argv[2], "reference")
torch.manual_seed(0)
model = ref.Model(*ref.get_init_inputs())
torch.manual_seed(0)
new = opt.ModelNew(*ref.get_init_inputs())
assert sorted(new.state_dict()) == sorted(model.state_dict())
assert any(p is not None for p in new._ks_parts), "no part swapped in"
torch.manual_seed(123)
x = ref.get_inputs()
with torch.no_grad():
    torch.testing.assert_close(new(*x), model(*x), rtol=1e-3, atol=1e-3)
assert not any(m.startswith("kernelsmith") for m in sys.modules)
print("STANDALONE_OK", sorted(i for i, p in enumerate(new._ks_parts) if p is not None))
'''


def cli(*args: str, timeout: float = 300, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kernelsmith.cli", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, "TRITON_INTERPRET": "1"})


def one_line_error(proc: subprocess.CompletedProcess[str], *parts: str) -> None:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = [ln for ln in proc.stderr.strip().splitlines() if ln.startswith("error:")]  # after progress lines
    assert len(lines) == 1 and proc.stderr.strip().endswith(lines[0]), proc.stderr
    assert "Traceback" not in proc.stderr
    for part in parts:
        assert part in lines[0], lines[0]


def standalone(optimized: Path, model_file: Path, tmp: Path) -> str:
    script = tmp / "standalone.py"
    script.write_text(STANDALONE)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    proc = subprocess.run([sys.executable, "-I", str(script), str(optimized), str(model_file)], cwd=tmp,
                          capture_output=True, text=True, timeout=300, env={**env, "TRITON_INTERPRET": "1"})
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return proc.stdout


@pytest.fixture(scope="module")
def mlp_dir(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, subprocess.CompletedProcess[str]]:
    tmp = tmp_path_factory.mktemp("opt_mlp")
    model = tmp / "mlp.py"
    model.write_text(MLP)
    run_dir = tmp / "run"
    t0 = time.monotonic()
    # Relative paths from the model's folder: the dir must still export from anywhere else (the tests run it
    # from the repo).
    proc = cli("optimize", "mlp.py", "--run-dir", "run", "--top", "2", *FAST, cwd=tmp)
    print(f"tiny optimize (2 parts, 1 round of 2, CPU): {time.monotonic() - t0:.1f} s")
    return model, run_dir, proc


def test_tiny_mlp_end_to_end(mlp_dir: tuple[Path, Path, Any], tmp_path: Path) -> None:
    model, run_dir, proc = mlp_dir
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    report = json.loads((run_dir / "optimize.json").read_text())
    assert [p["rank"] for p in report["parts"]] == [1, 2]
    extracted = json.loads((run_dir / "extract" / "extract.json").read_text())
    for row, task in zip(report["parts"], extracted["tasks"]):
        assert row["share_before"] == task["share"] and row["status"] == "finished"
        assert (run_dir / row["run_dir"] / "run.db").exists()
        assert row["swapped"] == (row["winner_status"] == "correct")
        if row["swapped"]:
            assert 0 < row["share_after"] <= 1 and row["measured_after_ms"] > 0
    assert report["swapped"], report
    verdict = json.loads((run_dir / "verdict.json").read_text())
    assert verdict == report["verdict"] and verdict["correct"] and verdict["status"] == "correct"
    optimized = (run_dir / "optimized.py").read_text()
    assert verdict["optimized_sha256"] == report["optimized_sha256"]
    assert optimized.startswith(MLP.rstrip("\n"))  # the user's file, then the kernels and ModelNew
    assert "class ModelNew(Model)" in optimized and "@triton.jit" in optimized
    assert "end to end: correct" in (run_dir / "optimize.md").read_text()
    assert "share before" in proc.stdout and "end to end: correct" in proc.stdout
    out = standalone(run_dir / "optimized.py", model, tmp_path)
    assert f"STANDALONE_OK {report['swapped']}" in out


def test_export_of_an_optimize_dir(mlp_dir: tuple[Path, Path, Any], tmp_path: Path) -> None:
    from test_export import run_package

    _, run_dir, _ = mlp_dir
    pkg = tmp_path / "mlp_fast"
    proc = cli("export", str(run_dir), "--out", str(pkg), "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["source"]["kind"] == "optimize"
    assert (pkg / "kernels.py").read_text() == (run_dir / "optimized.py").read_text()
    check = """
    import torch
    import mlp_fast as pkg
    torch.manual_seed(3)
    model = pkg.Model(*pkg.get_init_inputs())
    ref = pkg.Model(*pkg.get_init_inputs())
    ref.load_state_dict(model.state_dict())
    weight = model.fc1.weight
    assert pkg.apply(model) is model and isinstance(model, pkg.ModelNew)
    with torch.no_grad():
        model.fc1.weight.mul_(0.5)  # a change to the model's weights reaches the kernels: nothing was copied
        ref.fc1.weight.mul_(0.5)
        x = pkg.get_inputs()[0]
        torch.testing.assert_close(model(x), ref(x), rtol=1e-3, atol=1e-3)
    bound = [p.impl for p in model._ks_parts if p is not None]
    assert any(any(t is weight for t in impl.parameters()) for impl in bound), "weights were copied"
    try:
        pkg.apply(torch.nn.Linear(3, 3))
    except pkg.StateMismatch as exc:
        print("MISMATCH_NAMED", "fc1.weight" in str(exc))
    """
    proc = run_package(pkg, check)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "4 passed" in proc.stdout and "KERNELSMITH_NOT_IMPORTED" in proc.stdout, proc.stdout
    assert "MISMATCH_NAMED True" in proc.stdout
    readme = (pkg / "README.md").read_text()
    assert "| fc" not in readme and "linear_relu" in readme and "share before" in readme


def test_changed_model_or_settings_are_refused_and_bad_files_are_one_line(
        mlp_dir: tuple[Path, Path, Any], tmp_path: Path) -> None:
    model, run_dir, _ = mlp_dir
    before = (run_dir / "optimize.json").read_text()
    one_line_error(cli("optimize", str(model), "--run-dir", str(run_dir), "--top", "3", *FAST), "top was 2")
    edited = tmp_path / "mlp.py"
    edited.write_text(MLP.replace("* 2.0", "* 3.0"))
    one_line_error(cli("optimize", str(edited), "--run-dir", str(run_dir), "--top", "2", *FAST),
                   str(edited), "changed")
    assert (run_dir / "optimize.json").read_text() == before
    one_line_error(cli("optimize", str(tmp_path / "missing.py"), "--run-dir", str(tmp_path / "r1"), *FAST),
                   "missing.py")
    broken = tmp_path / "broken.py"
    broken.write_text("import torch\nclass Model(:\n")
    one_line_error(cli("optimize", str(broken), "--run-dir", str(tmp_path / "r2"), *FAST), "broken.py:2", "syntax")
    failing = tmp_path / "failing.py"
    failing.write_text(MLP.replace("return [d_in, d_hidden, d_out]", "return [d_in, d_hidden]"))
    one_line_error(cli("optimize", str(failing), "--run-dir", str(tmp_path / "r3"), *FAST), "failing.py")
    assert not any((tmp_path / r).exists() for r in ("r1", "r2", "r3"))  # nothing left to refuse a fixed re-run


def test_kernelbench_mlp_resumes_after_a_kill(tmp_path: Path) -> None:
    model = tmp_path / "1_MLP.py"
    model.write_text(KB_MLP)
    run_dir = tmp_path / "run"
    args = [sys.executable, "-m", "kernelsmith.cli", "optimize", str(model), "--run-dir", str(run_dir), *SMALL,
            *FAST]
    proc = subprocess.Popen(args, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**os.environ, "TRITON_INTERPRET": "1"}, start_new_session=True)
    deadline = time.monotonic() + 240
    finished: list[Path] = []
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            finished = sorted((run_dir / "parts").glob("*/summary.json")) if (run_dir / "parts").exists() else []
            if finished:
                break
            time.sleep(0.2)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert finished, "no part finished before the deadline"
    assert not (run_dir / "optimize.json").exists()  # killed mid-run
    stamps = {p.parent.name: json.loads(p.read_text())["finished_at"] for p in finished}
    done = cli("optimize", str(model), "--run-dir", str(run_dir), *SMALL, *FAST, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "reused" in done.stderr  # the extraction
    report = json.loads((run_dir / "optimize.json").read_text())
    assert len(report["parts"]) == 3 and all(p["status"] == "finished" for p in report["parts"])
    for row in report["parts"]:
        summary = json.loads((run_dir / row["run_dir"] / "summary.json").read_text())
        if row["run_dir"].split("/")[-1] in stamps:  # finished before the kill: not run again
            assert summary["finished_at"] == stamps[row["run_dir"].split("/")[-1]] and row["reused"] is True
    assert report["verdict"]["correct"], report["verdict"]
    assert "self.network" in (run_dir / "optimized.py").read_text()
    shrunk = tmp_path / "small" / "1_MLP.py"  # the sizes the optimize ran at
    shrunk.parent.mkdir()
    shrunk.write_text(Task.load(model, parse_overrides(SMALL[1::2]), device="cpu").source)
    standalone(run_dir / "optimized.py", shrunk, tmp_path)


BRANCHY = """import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.fc = nn.Linear(dim, dim)

    def forward(self, x):
        y = self.fc(x)
        if y.sum() > 0:  # data-dependent: fx cannot trace it, the extraction hooks the module calls
            y = y * 2
        return torch.tanh(y)


dim = 16


def get_inputs():
    return [torch.randn(4, dim)]


def get_init_inputs():
    return [dim]
"""

OTHER_SHAPE = """
import importlib.util, sys
import torch
spec = importlib.util.spec_from_file_location("optimized", sys.argv[1])
opt = importlib.util.module_from_spec(spec)
sys.modules["optimized"] = opt
spec.loader.exec_module(opt)
torch.manual_seed(0)
model = opt.Model(16)
torch.manual_seed(0)
new = opt.ModelNew(16)
calls = []
new._ks_call = lambda k, original, inputs, consts: calls.append(k) or opt.ModelNew._ks_call(new, k, original, inputs, consts)
with torch.no_grad():
    for batch in (4, 3):  # the recorded shape goes through the part; another one is the module's own call
        x = torch.randn(batch, 16)
        torch.testing.assert_close(new(x), model(x), rtol=1e-3, atol=1e-3)
        print("CALLS", batch, len(calls))
"""


def test_a_model_fx_cannot_trace_gets_its_module_calls_swapped(tmp_path: Path) -> None:
    model = tmp_path / "branchy.py"
    model.write_text(BRANCHY)
    run_dir = tmp_path / "run"
    proc = cli("optimize", str(model), "--run-dir", str(run_dir), "--top", "1", *FAST)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    extracted = json.loads((run_dir / "extract" / "extract.json").read_text())
    assert extracted["trace"] == "hooks" and extracted["tasks"][0]["site"]["kind"] == "module"
    report = json.loads((run_dir / "optimize.json").read_text())
    assert report["swapped"] == [0] and report["verdict"]["correct"]
    optimized = run_dir / "optimized.py"
    assert "_KS_HOOKED" in optimized.read_text()
    assert "STANDALONE_OK [0]" in standalone(optimized, model, tmp_path)
    script = tmp_path / "other_shape.py"
    script.write_text(OTHER_SHAPE)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    ran = subprocess.run([sys.executable, "-I", str(script), str(optimized)], cwd=tmp_path, capture_output=True,
                         text=True, timeout=300, env={**env, "TRITON_INTERPRET": "1"})
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert "CALLS 4 1" in ran.stdout and "CALLS 3 1" in ran.stdout, ran.stdout


# ------------------------------------------------------------------------------------------ the assembler
PROGRAM = '''import torch
import torch.nn as nn
BLOCK = {block}
SCALE = 2


def helper(BLOCK, x):
    return x * BLOCK + SCALE


def run(x):
    total = [helper(BLOCK=BLOCK, x=v) for v in x]
    return sum(total) + (lambda SCALE: SCALE)(0)


class ModelNew(nn.Module):
    def forward(self, x):
        return run(x)
'''


def test_programs_renamed_into_one_module_keep_their_meaning() -> None:
    taken = {"torch": "import torch", "BLOCK": "own:model", "helper": "own:model"}
    a, bound_a, _ = rename_program(PROGRAM.format(block=3), "_ks0_", taken)
    taken.update(bound_a)
    b, bound_b, _ = rename_program(PROGRAM.format(block=5), "_ks1_", taken)
    assert "_ks0_BLOCK" in bound_a and "torch" in bound_a and "_ks0_torch" not in bound_a  # the same import: shared
    assert "def helper" not in a and "def _ks0_helper(BLOCK, x)" in a  # a parameter is not the global
    space: dict[str, Any] = {"BLOCK": "the model's", "helper": None}
    exec(compile(a + "\n" + b, "<both>", "exec"), space)
    assert space["_ks0_ModelNew"]().forward([1, 2]) == (1 * 3 + 2) + (2 * 3 + 2)
    assert space["_ks1_ModelNew"]().forward([1, 2]) == (1 * 5 + 2) + (2 * 5 + 2)
    assert space["BLOCK"] == "the model's"
    with pytest.raises(AssembleError, match="import \\*"):
        rename_program("from math import *\nclass ModelNew: pass\n", "_ks2_", taken)


def _graph(*steps: tuple[str, str, str, list[Any]]) -> dict[str, Any]:
    out = [{"out": "x", "op": "placeholder", "target": "x", "args": [], "kwargs": {}}]
    for name, op, target, args in steps:
        out.append({"out": name, "op": op, "target": target, "args": args, "kwargs": {}})
    out.append({"out": "output", "op": "output", "args": [{"ref": steps[-1][0]}], "kwargs": {}})
    return {"steps": out}


def _part(index: int, nodes: list[str], feeds: list[str], returns: list[str]) -> Part:
    site = {"nodes": nodes, "members": nodes, "feeds": feeds, "returns": returns, "modules": {}, "tensors": {}}
    return Part(index=index, name=f"p{index}", site=site, code=None, swap=False)


def test_parts_are_placed_after_their_inputs_or_left_as_original_ops() -> None:
    graph = _graph(("a", "function", "torch.relu", [{"ref": "x"}]),
                   ("b", "function", "torch.exp", [{"ref": "x"}]),
                   ("c", "function", "operator.add", [{"ref": "a"}, {"ref": "b"}]),
                   ("d", "function", "torch.tanh", [{"ref": "c"}]))
    items, skipped = plan(graph, [_part(0, ["a"], ["x"], ["a"]), _part(1, ["c", "d"], ["a", "b"], ["d"])])
    assert not skipped
    order = [it.name if isinstance(it, Part) else it["out"] for it in items]
    assert order.index("p0") < order.index("p1") and order.index("b") < order.index("p1")
    text, _ = render_model(graph, [_part(0, ["a"], ["x"], ["a"]), _part(1, ["c", "d"], ["a", "b"], ["d"])])
    assert "d, = self._ks_call(1, self._ks_orig_1, (a, b,), ())" in text
    assert "c = (a + b)" in text and "d = torch.tanh(c)" in text  # the original ops, inside _ks_orig_1
    # a part whose output `a` feeds `b`, which one of its own nodes (`c`) needs: not contiguous, stays as is
    chained = _graph(("a", "function", "torch.relu", [{"ref": "x"}]),
                     ("b", "function", "torch.exp", [{"ref": "a"}]),
                     ("c", "function", "operator.add", [{"ref": "a"}, {"ref": "b"}]))
    items, skipped = plan(chained, [_part(0, ["a", "c"], ["x", "b"], ["a", "c"])])
    assert list(skipped) == [0] and "contiguous" in skipped[0]
    assert [it["out"] for it in items] == ["x", "a", "b", "c", "output"]


def test_a_part_whose_reference_fails_beside_other_evaluations_is_judged_again_alone(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Seen on an H100 (2026-12-06, KernelBench level3/44_MiniGPTBlock at its real sizes): two parts judged eight
    at a time ran the GPU out of memory in their references (a task failure, not the candidates'), both parts'
    runs stopped and nothing was swapped. Here the referee fails the task whenever another evaluation is in flight:
    each part is run once more one evaluation at a time, finishes, and is swapped in."""
    import threading

    from kernelsmith.optimize import OptimizeOptions, optimize
    from kernelsmith.referee.pool import LocalPool
    from kernelsmith.workshop.config import load_config

    real_run = LocalPool.run
    lock = threading.Lock()
    state = {"in_flight": 0, "faults": 0, "alone": 0}

    def crowded_run(self: LocalPool, request: Any) -> dict[str, Any]:
        with lock:
            state["in_flight"] += 1
            crowded = state["in_flight"] > 1
        try:
            time.sleep(0.3)  # long enough for the evaluations started with it to overlap
            with lock:
                crowded = crowded or state["in_flight"] > 1
            if crowded:
                state["faults"] += 1
                return {"status": "runtime_error", "correct": False, "fault": "task", "fault_kind": "memory",
                        "error": "the task's reference failed: OutOfMemoryError: CUDA out of memory"}
            state["alone"] += 1
            return real_run(self, request)
        finally:
            with lock:
                state["in_flight"] -= 1

    monkeypatch.setattr(LocalPool, "run", crowded_run)
    (tmp_path / "mlp.py").write_text(MLP)
    cfg = load_config(None, {"rounds": 1, "population": 2, "run_dir": tmp_path / "run", "proposer": "offline",
                             "device": "cpu", "eval_workers": 4})  # as on a GPU: parts judged side by side
    said: list[str] = []
    report = optimize(tmp_path / "mlp.py", cfg, OptimizeOptions(top=2, swap="correct"), say=said.append)
    assert state["faults"] > 0 and state["alone"] > 0, state  # the first round was crowded, the retry was not
    assert sum("once more, one evaluation at a time" in line for line in said) >= 1, said
    assert all(p["status"] == "finished" for p in report["parts"]), report["parts"]
    assert report["swapped"] and report["verdict"]["correct"], report


def test_a_part_that_keeps_failing_says_why_it_stopped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A task failure that is not transient stops the part after its one retry; the report names the failure
    (not "no judged program") and the next optimize of the dir evolves that part again."""
    from kernelsmith.optimize import OptimizeOptions, optimize
    from kernelsmith.referee.pool import LocalPool
    from kernelsmith.workshop.config import load_config

    def failing_run(self: LocalPool, request: Any) -> dict[str, Any]:
        return {"status": "runtime_error", "correct": False, "fault": "task", "fault_kind": "error",
                "error": "the task's reference failed: RuntimeError: planted"}

    monkeypatch.setattr(LocalPool, "run", failing_run)
    (tmp_path / "mlp.py").write_text(MLP)
    cfg = load_config(None, {"rounds": 1, "population": 2, "run_dir": tmp_path / "run", "proposer": "offline",
                             "device": "cpu"})
    report = optimize(tmp_path / "mlp.py", cfg, OptimizeOptions(top=1, swap="correct"))
    (row,) = report["parts"]
    assert row["status"] == "stopped" and not row["swapped"], row
    assert "planted" in row["reason"] and "TaskFailed" in row["reason"], row
