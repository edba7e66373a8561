"""`kernelsmith extract`: tiny models written here (an MLP, a conv+bn+relu block, a transformer block, one fx
cannot trace), cut into tasks that load and run, ranked by share (shares sum to at most 1, --top respected), each
checked against the model's own intermediates; bad files and failing models are one line and exit 2; a model that
reaches for the parent's environment or the host's files during extraction finds nothing (it runs sandboxed); and
the orchestrator renders only specs it can vouch for."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from kernelsmith.cli import EXIT_BAD_INPUT, EXIT_CORRECT, EXIT_NOT_CORRECT
from kernelsmith.extract import spec as S
from kernelsmith.extract.model import line_map, validate_group
from kernelsmith.task import Task, load_module

CLI = [sys.executable, "-c", "from kernelsmith.cli import app; app()"]
SECRET = "ks-extract-secret-7f3a9c"

MLP = '''import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, d_in, d_hidden, d_out):
        super().__init__()
        self.fc1 = nn.Linear(d_in, d_hidden)
        self.fc2 = nn.Linear(d_hidden, d_hidden)
        self.fc3 = nn.Linear(d_hidden, d_out)

    def forward(self, x):
        x = F.relu(self.fc1(x))  # fc1
        x = torch.relu(self.fc2(x))
        return self.fc3(x)


batch_size = 16
d_in = 256
d_hidden = 512
d_out = 16


def get_inputs():
    return [torch.randn(batch_size, d_in)]


def get_init_inputs():
    return [d_in, d_hidden, d_out]
'''

CONV = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))  # block
        out = self.bn2(self.conv2(out))
        return self.relu(out + x)


batch_size = 2
channels = 8
size = 16


def get_inputs():
    return [torch.randn(batch_size, channels, size, size)]


def get_init_inputs():
    return [channels]
'''

TRANSFORMER = '''import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class Attention(nn.Module):
    def __init__(self, dim, heads, max_seq):
        super().__init__()
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.heads = heads
        self.register_buffer("mask", torch.tril(torch.ones(max_seq, max_seq)).view(1, 1, max_seq, max_seq))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.qkv(x).split(C, dim=2)
        q = q.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        k = k.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        v = v.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))  # scores
        att = att.masked_fill(self.mask[:, :, :T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.proj(y)


class Model(nn.Module):
    def __init__(self, dim, heads, max_seq):
        super().__init__()
        self.ln1 = nn.LayerNorm(dim)
        self.attn = Attention(dim, heads, max_seq)
        self.ln2 = nn.LayerNorm(dim)
        self.fc = nn.Linear(dim, 4 * dim)
        self.out = nn.Linear(4 * dim, dim)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        x = x + self.out(F.gelu(self.fc(self.ln2(x))))
        return x


batch_size = 2
seq = 32
max_seq = 64
dim = 32
heads = 4


def get_inputs():
    return [torch.randn(batch_size, seq, dim)]


def get_init_inputs():
    return [dim, heads, max_seq]
'''

# data-dependent control flow: torch.fx cannot trace it, module hooks take over
BRANCHY = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.fc = nn.Linear(dim, dim)
        self.norm = nn.LayerNorm(dim)

    def forward(self, x):
        y = self.fc(x)  # fc call
        if y.sum() > 0:
            y = y * 2
        return self.norm(y)


dim = 48


def get_inputs():
    return [torch.randn(4, dim)]


def get_init_inputs():
    return [dim]
'''

# an optional state argument get_inputs() leaves out, made inside forward; nn.GRU takes *args
RECURRENT = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, n_in, hidden, layers):
        super().__init__()
        self.gru = nn.GRU(n_in, hidden, layers, batch_first=True)
        self.head = nn.Linear(hidden, 4)
        self.layers, self.hidden = layers, hidden

    def forward(self, x, h0=None):
        if h0 is None:
            h0 = torch.randn(self.layers, x.size(0), self.hidden)
        out, _ = self.gru(x, h0)  # recurrence
        return self.head(out[:, -1, :])


def get_inputs():
    return [torch.randn(2, 12, 8)]


def get_init_inputs():
    return [8, 16, 2]
'''

# the linear's epilogue multiplies by a random buffer: no task can reproduce its values
NOISY = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.fc = nn.Linear(dim, dim)
        self.register_buffer("noise", torch.randn(dim, dim))

    def forward(self, x):
        return torch.relu(self.fc(x) * self.noise)


dim = 64


def get_inputs():
    return [torch.randn(dim, dim)]


def get_init_inputs():
    return [dim]
'''

HOSTILE = '''import glob
import os

import torch
import torch.nn as nn

SECRET = {secret!r}
TARGETS = {targets!r}


def _snoop():
    """What this model could see of the parent: its environment, a host file, other processes' environments."""
    seen = SECRET in "".join(os.environ.values())
    for path in [{secret_file!r}] + glob.glob("/proc/*/environ"):
        try:
            with open(path, "rb") as fh:
                seen = seen or SECRET.encode() in fh.read()
        except OSError:
            pass
    for path in TARGETS:
        try:
            with open(path, "w") as fh:
                fh.write(SECRET)
        except OSError:
            pass
    return seen


LEAKED = _snoop()


class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.fc = nn.Linear(dim, 5 if LEAKED else 3)  # what it saw shows in the output's shape

    def forward(self, x):
        _snoop()
        return torch.relu(self.fc(x))


dim = 16


def get_inputs():
    return [torch.randn(4, dim)]


def get_init_inputs():
    return [dim]
'''


def run_cli(*args: str, env: dict[str, str] | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "COLUMNS": "200", **(env or {})})


def extract_json(tmp: Path, name: str, source: str, *args: str, env: dict[str, str] | None = None,
                 expect: int = EXIT_CORRECT) -> tuple[dict[str, Any], Path, Path]:
    model = tmp / f"{name}.py"
    model.write_text(source)
    out = tmp / f"out_{name}"
    proc = run_cli("extract", str(model), "--device", "cpu", "--out", str(out), "--json", *args, env=env)
    assert proc.returncode == expect, (proc.returncode, proc.stdout[-3000:], proc.stderr[-3000:])
    report = json.loads(proc.stdout)
    assert json.loads((out / "extract.json").read_text()) == report
    return report, model, out


def line_of(source: str, marker: str) -> int:
    return next(i for i, line in enumerate(source.splitlines(), 1) if marker in line)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[dict[str, Any], Path, Path]]:
    """Each model extracted once, its report shared by the tests that read it."""
    tmp = tmp_path_factory.mktemp("extract")
    return {
        "mlp": extract_json(tmp, "mlp", MLP, "--top", "2", "--set", "batch_size=8"),
        "conv": extract_json(tmp, "conv", CONV),
        "transformer": extract_json(tmp, "transformer", TRANSFORMER, "--top", "8"),
        "branchy": extract_json(tmp, "branchy", BRANCHY),
        "recurrent": extract_json(tmp, "recurrent", RECURRENT),
    }


def run_task(path: Path) -> list[torch.Tensor]:
    """The written task file as the referee would use it: loaded statically, then its reference run."""
    task = Task.load(path)
    module = load_module(task.source, str(path), f"extracted_{path.stem}")
    torch.manual_seed(0)
    model = module.Model(*module.get_init_inputs())
    with torch.no_grad():
        out = model(*module.get_inputs())
    return list(out) if isinstance(out, tuple) else [out]


@pytest.mark.parametrize("name", ["mlp", "conv", "transformer", "branchy", "recurrent"])
def test_tasks_load_run_and_match_the_model(runs: dict, name: str) -> None:
    report, _, out = runs[name]
    assert report["tasks"] and not report["not_extracted"], report
    for t in report["tasks"]:
        assert t["check"]["ok"] and t["check"]["max_abs_err"] is not None, t
        assert t["standalone"]["ok"], t
        outputs = run_task(out / t["file"])
        assert [list(o.shape) for o in outputs] == [o["shape"] for o in t["outputs"]]
        assert all(torch.isfinite(o).all() for o in outputs)
    assert sorted(p.name for p in out.glob("*.py")) == sorted(t["file"] for t in report["tasks"])


@pytest.mark.parametrize("name", ["mlp", "conv", "transformer", "branchy", "recurrent"])
def test_shares_rank_and_add_up_to_at_most_one(runs: dict, name: str) -> None:
    report, _, _ = runs[name]
    ranked = sorted([*report["tasks"], *report["not_extracted"]], key=lambda t: t["rank"])
    shares = [t["share"] for t in ranked]
    assert shares == sorted(shares, reverse=True) and all(0 < s <= 1 for s in shares)
    assert sum(shares) + report["rest"]["share"] <= 1 + 1e-6
    assert abs(sum(shares) + report["rest"]["share"] + report["unattributed_share"] - 1) < 1e-3
    assert report["model_ms"] > 0 and report["profile"], report


def test_mlp_top_n_shapes_and_lines(runs: dict) -> None:
    report, model, _ = runs["mlp"]
    assert report["trace"] == "fx" and report["top"] == 2
    assert len(report["tasks"]) == 2 and report["rest"]["groups"] == 1  # three linear layers, two asked for
    assert report["overrides"] == {"batch_size": 8}
    by_line = {t["line"]: t for t in report["tasks"]}
    fc1 = by_line[line_of(MLP, "# fc1")]  # the 256 -> 512 and 512 -> 512 layers outweigh the 512 -> 16 one
    assert fc1["name"].startswith("linear_relu") and fc1["ops"] == ["Linear", "relu"]
    assert fc1["inputs"] == [{"shape": [8, 256], "dtype": "float32"}]  # --set batch_size=8 reached the shapes
    assert fc1["outputs"] == [{"shape": [8, 512], "dtype": "float32"}]
    assert fc1["code"] == "x = F.relu(self.fc1(x))  # fc1"
    assert report["model"] == str(model)


def test_conv_bn_relu_is_one_task(runs: dict) -> None:
    report, _, out = runs["conv"]
    first = next(t for t in report["tasks"] if t["line"] == line_of(CONV, "# block"))
    assert first["ops"] == ["Conv2d", "BatchNorm2d", "ReLU"] and first["name"] == "conv2d_batchnorm2d_relu"
    second = next(t for t in report["tasks"] if t is not first)
    assert second["ops"] == ["Conv2d", "BatchNorm2d", "add", "ReLU"]  # the residual add joins the epilogue
    text = (out / first["file"]).read_text()
    assert "nn.Conv2d(" in text and "inplace=False" in text  # a task never changes its inputs in place


def test_transformer_attention_block_and_norms(runs: dict) -> None:
    report, _, out = runs["transformer"]
    names = [t["name"] for t in report["tasks"]]
    attention = next(t for t in report["tasks"] if t["name"].startswith("attention"))
    assert [o for o in attention["ops"] if o in ("matmul", "softmax")] == ["matmul", "softmax", "matmul"]
    assert attention["line"] == line_of(TRANSFORMER, "# scores")
    assert attention["inputs"] == [{"shape": [2, 32, 96], "dtype": "float32"}]  # the qkv projection's output
    assert attention["outputs"] == [{"shape": [2, 4, 32, 8], "dtype": "float32"}]
    text = (out / attention["file"]).read_text()
    assert "torch.tril(torch.full((1, 1, 64, 64), 1.0" in text  # the causal mask is rebuilt, not random
    assert sum(n.startswith("layernorm") for n in names) == 2
    assert any(n.startswith("linear_gelu") for n in names)


def test_untraceable_model_falls_back_to_module_hooks(runs: dict) -> None:
    report, _, _ = runs["branchy"]
    assert report["trace"] == "hooks" and "torch.fx" in report["trace_note"]
    ops = {t["ops"][0]: t for t in report["tasks"]}
    assert set(ops) == {"Linear", "LayerNorm"}
    assert ops["Linear"]["line"] == line_of(BRANCHY, "# fc call")


def test_defaulted_arguments_and_tensors_made_in_forward(runs: dict) -> None:
    report, _, out = runs["recurrent"]
    assert report["trace"] == "fx", report["trace_note"]  # h0=None is traced as the constant it is
    gru = report["tasks"][0]
    assert gru["name"] == "gru" and gru["line"] == line_of(RECURRENT, "# recurrence")
    assert gru["inputs"] == [{"shape": [2, 12, 8], "dtype": "float32"}, {"shape": [2, 2, 16], "dtype": "float32"}]
    assert "nn.GRU(input_size=8, hidden_size=16, num_layers=2" in (out / gru["file"]).read_text()


def test_a_subgraph_that_cannot_stand_alone_is_listed_with_its_reason(tmp_path: Path) -> None:
    report, _, out = extract_json(tmp_path, "noisy", NOISY, "--top", "1", expect=EXIT_NOT_CORRECT)
    assert report["tasks"] == [] and len(report["not_extracted"]) == 1
    missing = report["not_extracted"][0]
    assert "noise" in missing["reason"] and "cannot reproduce" in missing["reason"], missing
    assert missing["ops"] == ["Linear", "mul", "relu"] and missing["share"] > 0
    assert list(out.glob("*.py")) == []


def test_a_broken_model_file_is_one_line_and_exit_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("import torch\nclass Model(:\n")
    proc = run_cli("extract", str(bad), "--device", "cpu", "--out", str(tmp_path / "o"))
    assert proc.returncode == EXIT_BAD_INPUT and "Traceback" not in proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and str(bad) in lines[0] and "syntax" in lines[0], proc.stderr
    assert not (tmp_path / "o").exists()
    notask = tmp_path / "notask.py"
    notask.write_text("x = 1\n")
    proc = run_cli("extract", str(notask), "--device", "cpu", "--out", str(tmp_path / "o"), "--json")
    assert proc.returncode == EXIT_BAD_INPUT
    assert json.loads(proc.stdout)["kind"] == "not_a_task"
    good = tmp_path / "mlp.py"
    good.write_text(MLP)
    for flags, needle in ((["--set", "batch_size=abc"], "batch_size"), (["--top", "0"], "--top"),
                          (["--device", "tpu"], "--device")):
        proc = run_cli("extract", str(good), "--out", str(tmp_path / "o"), *flags)
        assert proc.returncode == EXIT_BAD_INPUT and needle in proc.stderr and "Traceback" not in proc.stderr


def test_a_model_that_fails_on_its_own_is_one_line_and_exit_2(tmp_path: Path) -> None:
    failing = tmp_path / "failing.py"
    failing.write_text(MLP.replace("        return self.fc3(x)", "        return self.fc3(x[:, :3])"))
    proc = run_cli("extract", str(failing), "--device", "cpu", "--out", str(tmp_path / "o"), "--json")
    assert proc.returncode == EXIT_BAD_INPUT, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip() and not ln.startswith("device:")]
    assert len(lines) == 1 and "failed on its own" in lines[0] and "Model.forward" in lines[0], proc.stderr
    line = line_of(failing.read_text(), "x[:, :3]")
    assert f"line {line}: RuntimeError" in lines[0]
    assert json.loads(proc.stdout)["kind"] == "model_failed"


def test_the_model_cannot_read_the_parents_environment_or_write_outside(tmp_path: Path) -> None:
    secret_file = tmp_path / "secret.txt"
    secret_file.write_text(SECRET)
    out = tmp_path / "out_hostile"
    home = Path(os.path.expanduser("~"))
    targets = [str(tmp_path / "escaped.txt"), str(out / "escaped.txt"), str(home / "ks-extract-escaped.txt"),
               str(Path.cwd() / "ks-extract-escaped.txt"), "/var/tmp/ks-extract-escaped.txt"]
    source = HOSTILE.format(secret=SECRET, targets=targets, secret_file=str(secret_file))
    try:
        report, _, out = extract_json(tmp_path, "hostile", source, env={"KS_EXTRACT_API_TOKEN": SECRET})
        assert report["model_outputs"] == [{"shape": [4, 3], "dtype": "float32"}]  # it saw nothing
        assert report["tasks"][0]["check"]["ok"]
        for target in targets:
            assert not Path(target).exists(), target
        written = "".join(p.read_text() for p in out.iterdir())
        assert SECRET not in written
    finally:
        for target in targets:
            Path(target).unlink(missing_ok=True)


# ------------------------------------------------------------------------------ the trust boundary, unit by unit
def _spec(**changes: Any) -> dict[str, Any]:
    spec = {"name": "t", "inputs": [{"name": "x", "shape": [2, 3], "dtype": "float32"}], "modules": [],
            "tensors": [], "body": [{"out": "y", "op": "function", "target": "torch.relu",
                                     "args": [{"ref": "x"}], "kwargs": {}}], "outputs": ["y"]}
    spec.update(changes)
    return spec


def _step(**changes: Any) -> list[dict[str, Any]]:
    return [{"out": "y", "op": "function", "target": "torch.relu", "args": [{"ref": "x"}], "kwargs": {}, **changes}]


@pytest.mark.parametrize("spec", [
    _spec(body=_step(target="os.system")),
    _spec(body=_step(target="torch.save")),
    _spec(body=_step(target="torch._C._nn.linear")),
    _spec(body=_step(op="method", target="__class__")),
    _spec(body=_step(op="function", target="builtins.getattr", args=[{"ref": "x"}, "__dict__"])),
    _spec(body=_step(out="y = __import__('os')")),
    _spec(inputs=[{"name": "x):\n        import os\n        (", "shape": [2], "dtype": "float32"}]),
    _spec(inputs=[{"name": "x", "shape": [2], "dtype": "torch.float32; import os"}]),
    _spec(body=_step(args=[{"ref": "undefined"}])),
    _spec(body=_step(args=[{"code": "import os"}])),
    _spec(modules=[{"attr": "m", "cls": "Linear(1, 1); import os; nn.Linear", "kwargs": {}}]),
    _spec(tensors=[{"attr": "b", "kind": "buffer", "shape": [2], "dtype": "float32",
                    "init": {"kind": "fill", "value": "1); import os; (1"}}]),
])
def test_the_renderer_refuses_what_is_not_a_computation(spec: dict[str, Any]) -> None:
    with pytest.raises(S.SpecError):
        S.render_code(spec)


def test_the_renderer_writes_a_loadable_task(tmp_path: Path) -> None:
    spec = _spec(modules=[{"attr": "fc", "cls": "Linear", "kwargs": {"in_features": 3, "out_features": 4}}],
                 body=[{"out": "h", "op": "module", "target": "fc", "args": [{"ref": "x"}], "kwargs": {}},
                       {"out": "y", "op": "function", "target": "operator.getitem",
                        "args": [{"ref": "h"}, {"tuple": [{"slice": [None, None, None]}, {"slice": [None, 2, None]}]}],
                        "kwargs": {}}])
    code = S.render_code(spec)
    assert "y = h[:, :2]" in code
    path = tmp_path / "t.py"
    path.write_text(S.header(["a\nheader"]) + code)
    assert run_task(path)[0].shape == (2, 2)


def test_a_forged_report_is_refused() -> None:
    good = {"name": "linear_relu", "share": 0.5, "ms": 1.0, "ops": ["Linear"], "lines": [3]}
    assert validate_group(good, {3: 5})["lines"] == [5]
    for bad in ({**good, "name": "../../etc/passwd"}, {**good, "share": 1.5}, {**good, "share": float("nan")},
                {**good, "lines": ["3"]}, {**good, "ops": "Linear"}):
        with pytest.raises(ValueError):
            validate_group(bad, {})


def test_lines_map_back_through_overrides() -> None:
    original = "a = 1\n\n\ndef f(x):\n    return (x +\n            a)\n"
    rewritten = "a = 2\n\ndef f(x):\n    return x + a\n"
    assert line_map(original, rewritten)[4] == 5


@pytest.mark.parametrize("name", ["mlp", "conv", "transformer", "branchy", "recurrent"])
def test_the_graph_and_each_tasks_site_reassemble_the_model(runs: dict, name: str) -> None:
    """What `optimize` builds on: graph.json and each task's site, rendered with every part as its original ops
    (the blocks in place, no winner), give the model's own output."""
    from kernelsmith.optimize.assemble import Part, render_file

    report, model_file, out = runs[name]
    if report["trace"] != "fx":
        assert "graph" not in report and report["graph_note"] and not (out / "graph.json").exists()
        return
    graph = json.loads((out / report["graph"]).read_text())
    steps = {s["out"] for s in graph["steps"]}
    parts = []
    for t in report["tasks"]:
        site = t["site"]
        assert set(site["nodes"]) <= set(site["members"]) <= steps and set(site["feeds"]) <= steps
        assert set(site["returns"]) <= set(site["nodes"]) and site["returns"]
        parts.append(Part(index=len(parts), name=t["name"], site=site))
    task = Task.load(model_file, report["overrides"])
    text, skipped = render_file(task.source, graph, parts)
    assert not skipped and text.count("= self._ks_call(") == len(parts)  # a block each
    path = out.parent / f"reassembled_{name}.py"
    path.write_text(text)
    module = load_module(text, str(path), f"reassembled_{name}")
    torch.manual_seed(0)
    model = module.Model(*module.get_init_inputs())
    torch.manual_seed(0)
    new = module.ModelNew(*module.get_init_inputs())
    assert sorted(new.state_dict()) == sorted(model.state_dict())
    torch.manual_seed(1)
    inputs = module.get_inputs()
    with torch.no_grad():
        torch.manual_seed(2)
        want = model(*inputs)
        torch.manual_seed(2)
        got = new(*inputs)
    want, got = (list(v) if isinstance(v, tuple) else [v] for v in (want, got))
    assert len(got) == len(want) and all(torch.allclose(g, w, atol=1e-5) for g, w in zip(got, want))
