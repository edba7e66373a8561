"""The offline compiler under `policy="lenient"` (KernelBench's rule): operators no template covers stay torch calls
(externs), everything around them is still fused into Triton kernels, and a program always launches at least one
Triton kernel that does work it needs. Seeds are judged by the real referee on the CPU (Triton's interpreter)
under the lenient policy; strict keeps refusing the same tasks with the op and the line.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from kernelsmith.compiler import SeedUnsupported, generate_seed, generate_seeds
from kernelsmith.compiler.child import main as child_main
from kernelsmith.referee.evaluation import EvalOptions, evaluate

EW, RED, MM = "elementwise", "reduction", "matmul_epilogue"
_HEAD = "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n"
_TAIL = '''

def get_inputs():
    return [{inputs}]


def get_init_inputs():
    return [{init}]
'''


def _task(init: str, forward: str, inputs: str, init_args: str = "", init_values: str = "") -> str:
    return _HEAD + f'''
class Model(nn.Module):
    def __init__(self{init_args}):
        super().__init__()
{init}

    def forward(self, x):
{forward}
''' + _TAIL.format(inputs=inputs, init=init_values)


# name -> (task source, expected kernel patterns, words the externs must name)
TASKS = {
    # a scan no template covers (logcumsumexp; cumsum/cumprod have one), then bias + activation + residual: one
    # fused elementwise kernel after it
    "scan_epilogue": (_task("        self.b = nn.Parameter(torch.randn(7))",
                              "        y = torch.logcumsumexp(x, dim=1)\n        return torch.relu(y + self.b) * 0.5 + x",
                              "torch.randn(5, 7)"), [EW], ["logcumsumexp"]),
    # nothing but an extern: the result is written through a copy kernel (the program's one Triton launch)
    "only_extern": (_task("        pass", "        return torch.logcumsumexp(x, dim=0)", "torch.randn(6, 9)"),
                    [EW], ["logcumsumexp"]),
    # a module returning a tuple, read through getitem, then a fused Linear
    "lstm_head": (_task("        self.lstm = nn.LSTM(6, 8, num_layers=2, batch_first=True)\n"
                        "        self.fc = nn.Linear(8, 3)",
                        "        out, (h, c) = self.lstm(x)\n        return self.fc(out[:, -1, :]) + h[-1].sum()",
                        "torch.randn(3, 5, 6)"), [MM, RED, EW], ["nn.LSTM"]),
    # topk's (values, indices), and max's indices beside its values (reduced in a kernel)
    "topk_argmax": (_task("        pass",
                          "        v, i = torch.topk(x, 3, dim=1)\n        m, j = torch.max(x, dim=1)\n"
                          "        return v * 2.0, i, m + 1.0, j",
                          "torch.randn(4, 10)"), [EW, RED], ["topk", "max"]),
    # a tensor made in forward from Python values: the same torch.tensor call, on the inputs' device, then fused
    # into the elementwise kernel as an operand (a 0-dim one, KernelBench level2/31, is a number in the kernel:
    # `test_offline_seed.py`'s number_tensors_in_forward)
    "tensor_in_forward": (_task("        self.c = c",
                                "        return torch.min(x * 2.0, torch.tensor([self.c, 1.0])) + 1.0",
                                "torch.randn(5, 2)", ", c", "0.25"), [EW], ["torch.tensor([0.25, 1.0])"]),
    # an extern between two fused regions: a fusion barrier
    "barrier": (_task("        self.fc = nn.Linear(6, 6)",
                      "        y = torch.sigmoid(self.fc(x))\n        z = torch.sort(y, dim=1)[0]\n"
                      "        return torch.softmax(z * 3.0, dim=1)",
                      "torch.randn(5, 6)"), [MM, RED], ["sort"]),
    # KernelBench's Mamba2 (level3/48, /49): einops' rearrange stays that call (the program imports einops), and a
    # mask made in forward from a traced size and the input's device (`torch.ones(T, T, device=x.device,
    # dtype=bool)`) is the same torch call; the segment sums around them are fused
    "einops_segsum": (_task("        pass",
                            "        y = rearrange(x, 'b (c l) -> b c l', l=4)\n        T = y.size(-1)\n"
                            "        mask = torch.tril(torch.ones(T, T, device=x.device, dtype=bool))\n"
                            "        s = y[..., :, None] - y[..., None, :]\n"
                            "        return torch.exp(s.masked_fill(~mask, -torch.inf)) * 2.0",
                            "torch.randn(3, 8)").replace(_HEAD, _HEAD + "from einops import rearrange\n"),
                      [EW], ["einops.rearrange", "torch.ones", "torch.tril"]),
}


@pytest.fixture(scope="module")
def seeds(tmp_path_factory) -> dict[str, tuple[Path, Path, object]]:
    out = tmp_path_factory.mktemp("lenient")
    found = {}
    for name, (source, _, _) in TASKS.items():
        task = out / f"task_{name}.py"
        task.write_text(source)
        result = generate_seed(source, filename=str(task), policy="lenient")
        cand = out / f"seed_{name}.py"
        cand.write_text(result.source)
        found[name] = (task, cand, result)
    return found


@pytest.fixture(scope="module")
def verdicts(seeds):
    opts = EvalOptions(device="cpu", timeout_s=240, policy="lenient")
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {name: pool.submit(evaluate, task, cand, opts) for name, (task, cand, _) in seeds.items()}
        return {name: f.result() for name, f in futures.items()}


@pytest.mark.parametrize("name", sorted(TASKS))
def test_lenient_seed_is_correct_and_fuses_around_externs(name: str, seeds, verdicts) -> None:
    _, _, result = seeds[name]
    _, patterns, words = TASKS[name]
    assert sorted(set(result.patterns)) == sorted(set(patterns)), result.patterns
    assert result.policy == "lenient" and "# kernelsmith-policy: lenient" in result.source
    for word in words:
        assert any(word in e for e in result.externs), (word, result.externs)
    v = verdicts[name]
    assert v.status.value == "correct", f"{name}: {v.status.value}: {v.error}\n{v.log[-3000:]}"
    assert v.kernels, "the seed launched no Triton kernel"


@pytest.mark.parametrize("name", ["scan_epilogue", "lstm_head", "topk_argmax", "barrier", "tensor_in_forward",
                                  "einops_segsum"])
def test_strict_still_refuses_with_the_op_and_line(name: str) -> None:
    source, _, words = TASKS[name]
    with pytest.raises(SeedUnsupported, match=r"^task\.py:\d+: ") as info:
        generate_seed(source, filename="task.py")
    assert any(w in str(info.value) for w in words) or "no template" in str(info.value), str(info.value)


def test_the_extern_is_the_torch_call_in_forward(seeds) -> None:
    """The generated forward calls the reference's own submodule and torch function (no fabricated code)."""
    src = seeds["lstm_head"][2].source
    assert "_ks_attr(self, 'lstm')(x)" in src
    assert "torch.logcumsumexp(x, dim=1)" in seeds["scan_epilogue"][2].source
    assert "torch.tensor([0.25, 1.0], dtype=torch.float32, device=x.device)" in seeds["tensor_in_forward"][2].source
    einops = seeds["einops_segsum"][2].source
    assert "import einops" in einops and "einops.rearrange(x, 'b (c l) -> b c l', l=4)" in einops
    assert "dtype=torch.bool" in einops  # `dtype=bool` as the torch dtype it means


@pytest.mark.parametrize("policy", ["strict", "lenient"])
def test_a_forward_fx_cannot_trace_is_refused_under_both_policies(policy: str) -> None:
    source = _task("        pass", "        if x.sum() > 0:\n            return x\n        return -x", "torch.randn(3)")
    with pytest.raises(SeedUnsupported, match=r"^task\.py:12: .*branches on a tensor's value"):
        generate_seed(source, filename="task.py", policy=policy)


def test_unknown_policy_or_precision_is_refused() -> None:
    source = TASKS["only_extern"][0]
    with pytest.raises(ValueError, match="policy"):
        generate_seed(source, policy="loose")
    with pytest.raises(ValueError, match="precision"):
        generate_seed(source, precision="fp8")


def _job(tmp_path: Path, **keys: object) -> dict:
    (tmp_path / "job.json").write_text(json.dumps({"source": TASKS["scan_epilogue"][0],
                                                   "filename": "task.py", **keys}))
    assert child_main(tmp_path) == 0
    return json.loads((tmp_path / "result.json").read_text())


def test_the_sandboxed_job_reads_policy_and_precision(tmp_path: Path) -> None:
    strict = _job(tmp_path)
    assert strict["ok"] is False and "logcumsumexp" in strict["reason"]
    lenient = _job(tmp_path, policy="lenient", precision="ieee")
    assert lenient["ok"] is True and lenient["patterns"] == [EW]
    assert "# kernelsmith-precision: ieee" in lenient["source"]
    bad = _job(tmp_path, policy="sloppy")
    assert bad["ok"] is False and "sloppy" in bad["reason"]



CONV_RELU = _task("        self.conv = nn.Conv2d(3, 4, 3, padding=1)", "        return torch.relu(self.conv(x)) * 2.0 + 0.5",
                  "torch.randn(2, 3, 6, 6)")
ONLY_CONV = _task("        self.conv = nn.Conv2d(3, 4, 3, stride=2)", "        return self.conv(x)", "torch.randn(2, 3, 7, 7)")


def test_lenient_convolutions_seed_cudnn_first_then_triton(tmp_path: Path) -> None:
    """Under lenient a model with convolutions starts from two seeds: cuDNN's convolution with the epilogue fused
    in Triton, then the implicit-GEMM one; both are correct. A task that is one convolution gets the Triton seed
    alone (leaving it to cuDNN would leave nothing for Triton but a copy), and strict gets one seed."""
    task = tmp_path / "conv_relu.py"
    task.write_text(CONV_RELU)
    first, second = generate_seeds(CONV_RELU, filename=str(task), policy="lenient")
    assert first.vendor == ["conv"] and first.patterns == [EW] and "_ks_attr(self, 'conv')(x)" in first.source
    assert second.vendor == [] and second.patterns == ["library:conv", EW] and not second.externs
    opts = EvalOptions(device="cpu", timeout_s=240, policy="lenient")
    for k, seed in enumerate((first, second)):
        cand = tmp_path / f"seed{k}.py"
        cand.write_text(seed.source)
        v = evaluate(task, cand, opts)
        assert v.status.value == "correct" and v.kernels, f"seed {k}: {v.status.value}: {v.error}"
    (only,) = generate_seeds(ONLY_CONV, filename="one_conv.py", policy="lenient")
    assert only.vendor == [] and only.patterns == ["library:conv"] and not only.copy_only
    (strict,) = generate_seeds(CONV_RELU, filename="conv_relu.py", policy="strict")
    assert strict.vendor == [] and strict.patterns == ["library:conv", EW]
    (plain,) = generate_seeds(TASKS["barrier"][0], filename="barrier.py", policy="lenient")  # no convolution
    assert plain.vendor == [] and plain.families == []


def test_the_sandboxed_job_sends_the_other_seeds(tmp_path: Path) -> None:
    (tmp_path / "job.json").write_text(json.dumps({"source": CONV_RELU, "filename": "task.py", "policy": "lenient"}))
    assert child_main(tmp_path) == 0
    out = json.loads((tmp_path / "result.json").read_text())
    assert out["ok"] and out["vendor"] == ["conv"] and out["patterns"] == [EW]
    (alt,) = out["alternates"]
    assert alt["vendor"] == [] and alt["patterns"] == ["library:conv", EW] and "ModelNew" in alt["source"]
