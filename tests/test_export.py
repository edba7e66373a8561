"""`kernelsmith export`: a real CPU run's best program as a package that runs with torch and triton only."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kernelsmith.workshop.record import RunReader

REPO = Path(__file__).resolve().parents[1]
RELU = REPO / "tests" / "candidates" / "task_relu.py"
SCALE_BIAS = REPO / "tasks" / "level2" / "02_scale_bias_clamp_sigmoid.py"

# Runs in `python -I` (no PYTHONPATH, no cwd on sys.path) with kernelsmith made unimportable: the editable install
# would otherwise find it. It runs the package's pytest file, then an optional check script, and proves kernelsmith
# was never imported.
DRIVER = """
import importlib.abc, sys
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "kernelsmith" or name.startswith("kernelsmith."):
            raise ImportError("kernelsmith is not installed here")
sys.meta_path.insert(0, Block())
sys.path.insert(0, sys.argv[1])
import pytest
code = pytest.main(["-q", "-p", "no:cacheprovider", "-rs", sys.argv[2]])
if len(sys.argv) > 3:
    exec(compile(open(sys.argv[3]).read(), sys.argv[3], "exec"))
assert not any(m == "kernelsmith" or m.startswith("kernelsmith.") for m in sys.modules), "kernelsmith imported"
print("KERNELSMITH_NOT_IMPORTED")
sys.exit(code)
"""


def cli(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kernelsmith.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=600, env={**os.environ, "TRITON_INTERPRET": "1"})


def evolve(task: Path, run_dir: Path, rounds: int = 2) -> Path:
    proc = cli("evolve", str(task), "--device", "cpu", "--rounds", str(rounds), "--population", "2", "--run-dir",
               str(run_dir))
    assert proc.returncode in (0, 1), proc.stderr[-2000:]
    return run_dir


def run_package(pkg: Path, check: str = "") -> subprocess.CompletedProcess[str]:
    """The package's own tests (and `check`), isolated from this repo, on the CPU through Triton's interpreter."""
    driver = pkg.parent / "driver.py"
    driver.write_text(DRIVER)
    args = [sys.executable, "-I", str(driver), str(pkg.parent), str(pkg)]
    if check:
        script = pkg.parent / "check.py"
        script.write_text(textwrap.dedent(check))
        args.append(str(script))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    return subprocess.run(args, cwd=pkg.parent, capture_output=True, text=True, timeout=600,
                          env={**env, "TRITON_INTERPRET": "1"})


def one_line_error(proc: subprocess.CompletedProcess[str], *parts: str) -> None:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:"), proc.stderr
    for part in parts:
        assert part in lines[0], lines[0]


@pytest.fixture(scope="module")
def relu_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return evolve(RELU, tmp_path_factory.mktemp("relu") / "run")


def test_exported_package_passes_its_own_tests_without_kernelsmith(relu_run: Path, tmp_path: Path) -> None:
    pkg = tmp_path / "relu_fast"
    proc = cli("export", str(relu_run), "--out", str(pkg), "--json")
    assert proc.returncode == 0, proc.stderr
    manifest = json.loads(proc.stdout)
    with RunReader(relu_run) as reader:
        best_id = reader.summary()["best_id"]
        best = next(p for p in reader.programs() if p.name == best_id)
        hardware = reader.counters()["hardware"]
    assert manifest["source"]["program"] == best_id and best.correct
    assert (pkg / "kernels.py").read_text() == best.code == (relu_run / "best.py").read_text()
    assert "class Model" in (pkg / "reference.py").read_text()
    proc = run_package(pkg)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "4 passed" in proc.stdout and "KERNELSMITH_NOT_IMPORTED" in proc.stdout, proc.stdout
    assert "defines no get_test_inputs" in proc.stdout  # task_relu has no hidden shapes: said, not hidden
    readme = (pkg / "README.md").read_text()
    assert "task_relu" in readme and "not measured" in readme and "| device | cpu" in readme
    assert f"torch {hardware['torch']}, triton {hardware['triton']}" in readme
    assert "apply(model)" in readme


def test_apply_carries_weights_and_names_mismatched_keys(tmp_path: Path) -> None:
    run = evolve(SCALE_BIAS, tmp_path / "run", rounds=1)
    pkg = tmp_path / "scale_bias"
    proc = cli("export", str(run), "--out", str(pkg))
    assert proc.returncode == 0, proc.stderr
    assert "batch_size = 2" in (pkg / "reference.py").read_text()  # the run's CPU_OVERRIDES: shapes as verified
    check = """
    import torch
    import scale_bias as pkg
    torch.manual_seed(7)
    model = pkg.Model(*pkg.get_init_inputs())
    with torch.no_grad():
        model.bias.copy_(torch.linspace(-1.0, 1.0, model.bias.numel()).reshape(model.bias.shape))
    torch.manual_seed(7)
    fast = pkg.apply(model)
    assert torch.equal(fast.bias, model.bias), "bias not carried"
    x = pkg.get_inputs()[0]
    torch.testing.assert_close(fast(x), model(x), rtol=1e-3, atol=1e-3)

    class Other(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.ones(3))
    try:
        pkg.apply(Other())
    except pkg.StateMismatch as exc:
        assert "'bias'" in str(exc) and "'weight'" in str(exc), str(exc)
        print("MISMATCH_NAMED")
    else:
        raise AssertionError("a mismatched model was accepted")
    """
    proc = run_package(pkg, check)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "5 passed" in proc.stdout, proc.stdout  # three seeds, the hidden shapes, the state carried
    assert "MISMATCH_NAMED" in proc.stdout and "KERNELSMITH_NOT_IMPORTED" in proc.stdout, proc.stdout
    readme = (pkg / "README.md").read_text()
    assert "02_scale_bias_clamp_sigmoid" in readme and "hidden shapes" in readme


def test_a_run_without_a_correct_program_is_refused(tmp_path: Path) -> None:
    task = tmp_path / "fft_task.py"  # no offline template translates rfft: nothing correct
    task.write_text(RELU.read_text().replace("return torch.relu(x)", "return torch.fft.rfft(x).abs()"))
    run = evolve(task, tmp_path / "run", rounds=1)
    pkg = tmp_path / "pkg"
    one_line_error(cli("export", str(run), "--out", str(pkg)), str(run), "no correct program")
    assert not pkg.exists()


def test_bad_inputs_are_refused_with_one_line(relu_run: Path, tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    one_line_error(cli("export", str(empty), "--out", str(tmp_path / "pkg")), str(empty), "not a run dir")
    proc = cli("export", str(empty), "--out", str(tmp_path / "pkg"), "--json")
    assert json.loads(proc.stdout)["kind"] == "not_a_run"
    one_line_error(cli("export", str(relu_run), "--out", str(tmp_path / "not-a-name")), "not a Python package name")
    foreign = tmp_path / "taken"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    one_line_error(cli("export", str(relu_run), "--out", str(foreign)), str(foreign / "notes.txt"))
    assert (foreign / "notes.txt").read_text() == "mine"


def test_a_previous_export_is_replaced(relu_run: Path, tmp_path: Path) -> None:
    pkg = tmp_path / "again"
    assert cli("export", str(relu_run), "--out", str(pkg)).returncode == 0
    (pkg / "__pycache__").mkdir()
    (pkg / "__pycache__" / "x.pyc").write_bytes(b"")
    (pkg / "kernels.py").write_text("stale")
    proc = cli("export", str(relu_run), "--out", str(pkg))
    assert proc.returncode == 0, proc.stderr
    assert (pkg / "kernels.py").read_text() == (relu_run / "best.py").read_text()
    assert not (pkg / "__pycache__").exists()
