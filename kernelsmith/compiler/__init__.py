"""The offline compiler: translate a KernelBench reference into a first Triton candidate, with no language model.

`generate_seed(task_source, init_inputs, example_inputs)` (passes: `trace` → `lower` → `fuse` →
`templates` → `emit`) executes the task in a fresh module, builds
`Model(*init_inputs)` on the meta device (no memory, no compute), traces it with `torch.fx.symbolic_trace` and
propagates shapes on meta tensors. Every traced node is lowered to a small IR:

- elementwise ops (`ew`): activations, arithmetic with tensors or scalars, casts, comparisons (masks: 1.0/0.0
  in a kernel, stored as bool), `masked_fill` and three-argument `torch.where` — nn modules, `F.*`, `torch.*`
  and tensor methods all map to the same ops;
- reductions (`red`): sum / mean / max / min / sum-divided-by-(R - correction) over a contiguous block of
  dims; softmax, log-softmax, logsumexp, var/std, layer norm, RMS norm and the common losses (MSE, L1,
  smooth L1/Huber, KL divergence, triplet margin) are lowered to them;
- matmuls (`mm`): nn.Linear / F.linear (weight read transposed in place), matmul / mm / bmm / `@`, addmm;
- glue: views, reshapes, permutes, sizes and Python arithmetic on them (`math.sqrt(k.size(-1))` too) — left to
  torch in `forward` (the strict policy allows views, copies and allocation outside kernels).

The IR is fused greedily (each node joins the newest kernel that produced one of its operands when it fits):
an elementwise chain over one domain → one `elementwise` kernel; reductions with their elementwise prologue
and epilogue over one (outer, R, inner) geometry → one `reduction` kernel (so residual add → RMS norm, or the
whole of softmax, is one kernel); a matmul plus the elementwise chain that follows it → one `matmul_epilogue`
kernel. A graph of several such pieces (an MLP, a pre-norm FFN block) becomes several kernels launched in
order. Operators with a library kernel (`library.py`: convolution, pooling, norms, ...) become one launcher
call each, a fusion barrier, under both policies.

Policy. `strict` (the default): anything else raises `SeedUnsupported` naming the operator and the task's line,
before any shape is propagated. `lenient` (KernelBench's rule): an operator no template or library kernel
covers stays the torch call (an *extern*: `self.<module>(...)`, `torch.<fn>(...)`, `x.<method>(...)`), its
result's shape from shape propagation, and everything around it is still fused; when nothing else would launch
a Triton kernel, the results are written through an elementwise copy kernel. A forward torch.fx cannot trace
is refused under both.

Precision. fp32 matmuls' `tl.dot` input precision is `precision=` "ieee" (exact fp32), "tf32x3" (the default:
three TF32 products, about fp32 accuracy) or "tf32"; the program records it in a header line
`# kernelsmith-precision: <p>` (and `# kernelsmith-policy: <policy>`). fp16/bf16 matmuls are unaffected.

The candidate's `ModelNew` is a copy of the reference's `Model` class with `forward` replaced, so it creates
its parameters with the same code in the same order (the referee seeds both constructors alike). Shapes are
read at run time and every kernel is masked, so hidden inputs of other sizes work. Float attributes that
forward reads (`x * self.scale`, found by retracing with sentinel values) and nn modules' hyper-parameters
(eps, slopes, bounds) are read from `self` at run time and passed to the kernels; what Python computes from
them while tracing (`self.scale * 2`), reduction dims and pow exponents are specialised to the traced values.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch

from kernelsmith import pyast
from kernelsmith.compiler.emit import _emit, _forward_signature
from kernelsmith.compiler.ir import (
    DEFAULT_PRECISION,
    POLICIES,
    PRECISIONS,
    SeedResult,
    SeedUnsupported,
    _at,
    _counter,
    _exc_line,
    _first_line,
)
from kernelsmith.compiler.lower import _Lowerer
from kernelsmith.compiler.trace import _task_inputs, _trace
from kernelsmith.task import Task, TaskMissingModule, check_imports, load_module

__all__ = ["DEFAULT_PRECISION", "POLICIES", "PRECISIONS", "VENDOR_FIRST", "SeedResult", "SeedUnsupported",
           "generate_seed", "generate_seeds", "seed_for_task"]

# Lenient seeds leave these library families to torch first (cuDNN's convolution, neighbours fused in Triton):
# on the H200 that seed was often faster than the Triton implicit-GEMM one (docs/benchmarks.md, 2026-12-04).
# Scans and attention too (torch's flash/cuDNN attention), until the Triton kernels are measured against torch's
# on a GPU: both seeds are measured in round 0.
VENDOR_FIRST = ("conv", "scan", "attention")


def generate_seed(task_source: str, init_inputs: Any = None, example_inputs: list | None = None, *,
                  filename: str = "<task>", policy: str = "strict", precision: str | None = None,
                  vendor: Iterable[str] = ()) -> SeedResult:
    """Translate the task's `Model` into a Triton candidate (see the module docstring).

    `policy`: "strict" (every operator in a generated kernel, else `SeedUnsupported`) or "lenient" (an operator
    no template covers stays a torch call; at least one Triton kernel still does real work). `precision`: the
    fp32 matmul's `tl.dot` input precision, "ieee" | "tf32x3" | "tf32" (None: the default, "tf32x3").
    `vendor` (lenient only): library families ("conv", "pool", "norm", "scan", "index", "attention") whose
    operators stay torch calls — cuDNN's convolution instead of the Triton implicit GEMM — with their neighbours
    still fused around them.

    `init_inputs` / `example_inputs` default to the task's own `get_init_inputs()` / `get_inputs()`; a string
    in `init_inputs`' place is taken as the task's file name (the form `generate_seed(source, path)`).
    Raises `SeedUnsupported` naming the first operator no template covers."""
    if isinstance(init_inputs, (str, Path)):
        filename, init_inputs = str(init_inputs), None
    if policy not in POLICIES:
        raise ValueError(f"policy {policy!r}: one of {', '.join(POLICIES)}")
    if precision is not None and precision not in PRECISIONS:
        raise ValueError(f"precision {precision!r}: one of {', '.join(PRECISIONS)}")
    name = f"kernelsmith_seed_task_{next(_counter)}"
    try:
        check_imports(pyast.parse(task_source, filename=filename), filename)
    except SyntaxError as exc:
        raise SeedUnsupported(f"{filename}:{exc.lineno}: syntax error in the task: {exc.msg}") from None
    except TaskMissingModule as exc:
        raise SeedUnsupported(str(exc)) from None
    try:
        try:
            module = load_module(task_source, filename, name)
        except Exception as exc:
            raise SeedUnsupported(f"{_at(filename, _exc_line(exc, filename))}the task does not run "
                                  f"({_first_line(exc)})") from None
        with torch.random.fork_rng(devices=[]):  # the caller's random state is left as it was
            torch.manual_seed(0)
            try:
                if init_inputs is None:
                    init_inputs = list(module.get_init_inputs())
                real = None
                if example_inputs is None:
                    example_inputs = _task_inputs(module)
                    real = module.get_inputs
            except Exception as exc:
                raise SeedUnsupported(f"{_at(filename, _exc_line(exc, filename))}get_inputs() or "
                                      f"get_init_inputs() fails ({_first_line(exc)})") from None
            gm, model = _trace(module, list(init_inputs), list(example_inputs), real, filename, task_source,
                              refuse_unknown=policy == "strict")
        signature, _ = _forward_signature(module.Model)
    finally:
        sys.modules.pop(name, None)
    low = _Lowerer(gm, model, filename, policy, frozenset(vendor), precision or DEFAULT_PRECISION)
    low.run()
    return _emit(task_source, low, signature, filename, precision or DEFAULT_PRECISION, policy)


def generate_seeds(task_source: str, init_inputs: Any = None, example_inputs: list | None = None, *,
                   filename: str = "<task>", policy: str = "strict", precision: str | None = None) -> list[SeedResult]:
    """The seeds a run starts from, the likeliest fastest first (arguments as `generate_seed`).

    Strict, or a model without a `VENDOR_FIRST` family: one seed. Lenient with convolutions (scans, attention):
    the seed with them left to torch (cuDNN; everything around them still fused in Triton), then the all-Triton
    one (implicit GEMM, the scan or attention kernel), so the search measures both. When leaving them to torch
    would leave no Triton work but a copy (a task that is one convolution), the all-Triton seed alone. Raises
    `SeedUnsupported` as `generate_seed` does."""
    kw: dict[str, Any] = {"filename": filename, "policy": policy, "precision": precision}
    base = generate_seed(task_source, init_inputs, example_inputs, **kw)
    if policy != "lenient" or not set(VENDOR_FIRST) & set(base.families):
        return [base]
    try:
        vendored = generate_seed(task_source, init_inputs, example_inputs, vendor=VENDOR_FIRST, **kw)
    except SeedUnsupported:
        return [base]
    return [base] if vendored.copy_only or vendored.source == base.source else [vendored, base]


def seed_for_task(path: str | Path, device: str = "cpu", overrides: dict | None = None, *, policy: str = "strict",
                  precision: str | None = None) -> SeedResult:
    """The seed for a task file, with its sizes as the referee would use them on `device`."""
    task = Task.load(path, overrides=overrides, device=device)
    return generate_seed(task.source, filename=str(path), policy=policy, precision=precision)
