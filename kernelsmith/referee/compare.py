"""Output comparison, run in the orchestrator on tensors loaded from the children (out of the candidate's reach).

Tolerances are per dtype and relative to the output's scale as well as elementwise: an element passes when
`|out - ref| <= tol * scale + tol * |ref|`, where `scale = max |ref|`. So returning zeros fails a task whose
outputs are tiny, and a float32 matmul with TF32 (≈5e-4 relative) still passes.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

# fp32's 1e-3 admits Triton's default TF32 `tl.dot` on float32 inputs; fp16/bf16 follow their mantissas.
DEFAULT_TOLERANCE = {
    torch.float64: 1e-6,
    torch.float32: 1e-3,
    torch.float16: 1e-2,
    torch.bfloat16: 2e-2,
}


@dataclass(frozen=True)
class Comparison:
    ok: bool
    max_abs_err: float
    max_rel_err: float  # max |out - ref| / scale
    reason: str = ""  # first mismatch, with where and the two values
    kind: str = ""  # "", "structure", "nonfinite", "mismatch"


def _where(t: torch.Tensor, flat_index: int) -> str:
    idx = []
    for size in reversed(t.shape):
        idx.append(flat_index % size)
        flat_index //= size
    return "(" + ", ".join(str(i) for i in reversed(idx)) + ")"


def compare_outputs(
    out: list[torch.Tensor], ref: list[torch.Tensor], tolerance: float | None = None
) -> Comparison:
    """Compare a candidate's outputs with the reference's; `tolerance` overrides the per-dtype default."""
    if len(out) != len(ref):
        return Comparison(False, float("inf"), float("inf"), f"returned {len(out)} outputs, expected {len(ref)}", "structure")
    worst_abs = worst_rel = 0.0
    for i, (o, r) in enumerate(zip(out, ref)):
        if o.shape != r.shape:
            return Comparison(False, float("inf"), float("inf"), f"output {i}: shape {tuple(o.shape)}, expected {tuple(r.shape)}", "structure")
        if o.dtype != r.dtype:
            return Comparison(False, float("inf"), float("inf"), f"output {i}: dtype {o.dtype}, expected {r.dtype}", "structure")
        if not (r.is_floating_point() or r.is_complex()):
            diff = (o != r).reshape(-1)
            if bool(diff.any()):
                k = int(diff.nonzero()[0])
                return Comparison(False, float("inf"), float("inf"),
                                  f"output {i}: {int(diff.sum())} of {diff.numel()} values differ; first at "
                                  f"{_where(r, k)}: got {o.reshape(-1)[k].item()}, expected {r.reshape(-1)[k].item()}",
                                  "mismatch")
            continue
        tol = tolerance if tolerance is not None else DEFAULT_TOLERANCE.get(r.dtype, 1e-3)
        hp = torch.float64 if r.dtype == torch.float64 else torch.float32  # fp32 holds fp16/bf16 errors exactly
        o_hp, r_hp = o.to(hp), r.to(hp)
        err = (o_hp - r_hp).abs_()
        if bool(torch.isfinite(err).all()):
            # Fast path (no NaN/Inf anywhere): a few passes, no per-element bookkeeping.
            lo, hi = torch.aminmax(r_hp) if r_hp.numel() else (torch.zeros(()), torch.zeros(()))
            scale = max(abs(float(lo)), abs(float(hi)), torch.finfo(r.dtype).tiny)
            max_abs = float(err.max()) if err.numel() else 0.0
            excess = err.sub_(r_hp.abs().mul_(tol))  # |err| - tol·|ref|, must stay ≤ tol·scale
            ok = (float(excess.max()) if excess.numel() else 0.0) <= tol * scale
            worst_abs, worst_rel = max(worst_abs, max_abs), max(worst_rel, max_abs / scale)
            if ok:
                continue
            del excess
        res = _slow_compare(i, o_hp, r_hp, r, tol)
        if res is not None:
            return Comparison(False, max(worst_abs, res[1]), max(worst_rel, res[2]), res[0], res[3])
    return Comparison(True, worst_abs, worst_rel)


def _slow_compare(i: int, o64: torch.Tensor, r64: torch.Tensor, r: torch.Tensor, tol: float
                  ) -> tuple[str, float, float, str] | None:
    """The first failure with where it is and the two values: (reason, max_abs, max_rel, kind)."""
    inf = float("inf")
    finite = torch.isfinite(r64)
    bad_nonfinite = (~torch.isfinite(o64) & finite) | (torch.isnan(r64) & ~torch.isnan(o64))
    bad_nonfinite |= torch.isinf(r64) & (o64 != r64)
    if bool(bad_nonfinite.any()):
        k = int(bad_nonfinite.reshape(-1).nonzero()[0])
        return (f"output {i}: {int(bad_nonfinite.sum())} non-finite values where the reference has none; first "
                f"at {_where(r, k)}: got {o64.reshape(-1)[k].item()}, expected {r64.reshape(-1)[k].item()}",
                inf, inf, "nonfinite")
    rf = torch.where(finite, r64, torch.zeros_like(r64))
    of = torch.where(finite, o64, torch.zeros_like(o64))
    err = (of - rf).abs()
    scale = max(float(rf.abs().max()) if rf.numel() else 0.0, torch.finfo(r.dtype).tiny)
    max_abs = float(err.max()) if err.numel() else 0.0
    over = err > tol * scale + tol * rf.abs()
    if not bool(over.any()):
        return None
    k = int(err.reshape(-1).argmax())
    return (f"output {i}: {int(over.sum())} of {over.numel()} elements outside tolerance (tol {tol:g} × scale "
            f"{scale:.3g}); max |err| {max_abs:.3g} at {_where(r, k)}: got {of.reshape(-1)[k].item():.6g}, "
            f"expected {rf.reshape(-1)[k].item():.6g}", max_abs, max_abs / scale, "mismatch")


def degenerate_reason(ref: list[torch.Tensor]) -> str:
    """Why a trivial output could pass this task (outputs ~0 or nearly constant), or ""."""
    for i, r in enumerate(ref):
        if not r.is_floating_point() or r.numel() < 2:
            continue
        r32 = r.float()
        if not bool(torch.isfinite(r32).all()):
            r32 = r32[torch.isfinite(r32)]
        if not r32.numel():
            return f"output {i} has no finite values"
        lo, hi = torch.aminmax(r32)
        scale = max(abs(float(lo)), abs(float(hi)))
        if scale < 1e-6:
            return f"output {i} is nearly zero everywhere (max |ref| = {scale:.3g})"
        std = float(r32.std())
        if std < 1e-4 * scale:
            return f"output {i} is nearly constant (std {std:.3g} vs max {scale:.3g})"
    return ""
