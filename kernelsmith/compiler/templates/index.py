"""Library kernels that index by position or by a class label: `triu`/`tril` and cross-entropy over class indices.

- **triu / tril** (`torch.triu(x, diagonal)`, `x.tril(...)`): one elementwise pass over x viewed as (batch, R, C)
  that keeps an element where its column minus its row is on the kept side of `diagonal`, else writes 0.
- **cross_entropy** (`F.cross_entropy(logits (N, C), target (N,) int64)`, `nn.CrossEntropyLoss`): one program a
  row computes the row's logsumexp online over tiles of C (running max and rescaled sum, fp32) and subtracts
  the target's logit; rows whose target is `ignore_index` give 0 and are not counted. `reduction='none'`
  returns the per-row losses; `sum`/`mean` add them in a second kernel (one program walking the N losses and
  counts in tiles: N is a batch, not a tensor). Class weights, label smoothing, probability targets and extra
  dims are refused by name. A target out of range is not checked (torch raises; the kernel reads it clamped).
Sizes are read at run time; inputs are made contiguous first.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from kernelsmith.compiler.library import LibraryKernel, NodeInfo, TensorInfo
from kernelsmith.compiler.templates.conv import bind_args, bound_value

_TRI_SOURCE = '''
_KS_TRI_BLOCK = 1024


@triton.jit
def _ks_tri_kernel(x_ptr, y_ptr, n, R, C, diagonal, UPPER: tl.constexpr, BLOCK: tl.constexpr):
    # y = x where (col - row) is on the kept side of `diagonal`, else 0; x contiguous (batch, R, C).
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    ok = offs < n
    col = offs % C
    row = (offs // C) % R
    if UPPER:
        keep = (col - row) >= diagonal
    else:
        keep = (col - row) <= diagonal
    x = tl.load(x_ptr + offs, mask=ok & keep, other=0.0)
    tl.store(y_ptr + offs, x, mask=ok)


def _ks_tri(x, diagonal, upper):
    """torch.triu(x, diagonal) (or tril when not `upper`) as one elementwise kernel."""
    if x.dim() < 2:
        raise RuntimeError(f"{'triu' if upper else 'tril'}: input tensor must have at least 2 dimensions")
    xc = x.contiguous()
    y = torch.empty_like(xc)
    n = xc.numel()
    if n:
        block = min(_ks_np2(n), _KS_TRI_BLOCK)
        _ks_tri_kernel[(triton.cdiv(n, block),)](xc, y, n, xc.shape[-2], xc.shape[-1], int(diagonal),
                                                 UPPER=upper, BLOCK=block)
    return y
'''

_XENT_SOURCE = '''
_KS_XENT_BLOCK = 1024


@triton.jit
def _ks_xent_row_kernel(x_ptr, t_ptr, loss_ptr, cnt_ptr, C, ignore_index, BLOCK: tl.constexpr):
    # One row: logsumexp over C in tiles (running max, rescaled sum; fp32) minus the target's logit.
    row = tl.program_id(0).to(tl.int64)
    base = row * C
    m = tl.full((), float("-inf"), tl.float32)
    s = tl.full((), 0.0, tl.float32)
    for start in range(0, C, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        ok = offs < C
        v = tl.load(x_ptr + base + offs, mask=ok, other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m, tl.max(v, axis=0))
        s = s * tl.exp(m - m_new) + tl.sum(tl.where(ok, tl.exp(v - m_new), 0.0), axis=0)
        m = m_new
    t = tl.load(t_ptr + row)
    valid = t != ignore_index
    tc = tl.minimum(tl.maximum(t, 0), C - 1)
    picked = tl.load(x_ptr + base + tc).to(tl.float32)
    loss = tl.where(valid, m + tl.log(s) - picked, 0.0)
    tl.store(loss_ptr + row, loss)
    tl.store(cnt_ptr + row, valid.to(tl.float32))


@triton.jit
def _ks_xent_total_kernel(loss_ptr, cnt_ptr, out_ptr, N, MEAN: tl.constexpr, BLOCK: tl.constexpr):
    # The N row losses (and counts) added by one program in tiles; mean divides by the rows counted.
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    cnt = tl.zeros((BLOCK,), dtype=tl.float32)
    for start in range(0, N, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        ok = offs < N
        acc += tl.load(loss_ptr + offs, mask=ok, other=0.0)
        cnt += tl.load(cnt_ptr + offs, mask=ok, other=0.0)
    total = tl.sum(acc, axis=0)
    if MEAN:
        total = total / tl.sum(cnt, axis=0)
    tl.store(out_ptr, total.to(out_ptr.dtype.element_ty))


def _ks_cross_entropy(x, target, ignore_index=-100, reduction="mean"):
    """F.cross_entropy(x (N, C), target (N,) class indices): a row kernel, then the reduction's kernel."""
    if x.dim() != 2 or target.dim() != 1 or target.shape[0] != x.shape[0]:
        raise ValueError(f"cross_entropy: logits {tuple(x.shape)} and target {tuple(target.shape)} "
                         "(expected (N, C) and (N,))")
    if target.is_floating_point():
        raise TypeError("cross_entropy: probability targets have no template (class indices only)")
    if reduction not in ("none", "mean", "sum"):
        raise ValueError(f"{reduction} is not a valid value for reduction")
    xc, tc = x.contiguous(), target.contiguous()
    N, C = xc.shape
    loss = torch.empty(N, device=x.device, dtype=torch.float32)
    cnt = torch.empty(N, device=x.device, dtype=torch.float32)
    if N:
        _ks_xent_row_kernel[(N,)](xc, tc, loss, cnt, C, int(ignore_index), BLOCK=min(_ks_np2(C), _KS_XENT_BLOCK))
    if reduction == "none":
        return loss.to(x.dtype)
    out = torch.empty((), device=x.device, dtype=x.dtype)
    _ks_xent_total_kernel[(1,)](loss, cnt, out, N, MEAN=reduction == "mean", BLOCK=min(_ks_np2(N), 1024))
    return out
'''


def _tri(upper: bool) -> Callable[[NodeInfo], tuple[LibraryKernel, list[str]]]:
    what = "triu" if upper else "tril"

    def entry(info: NodeInfo) -> tuple[LibraryKernel, list[str]]:
        x = info.float_input(what)
        if len(x.shape) < 2:
            raise info.refuse(f"{what} of a {len(x.shape)}-d tensor (at least 2 dims)")
        a = bind_args(info, ("diagonal",), {"diagonal": "0"}, skip=1)
        return LibraryKernel("tri", _TRI_SOURCE, "_ks_tri"), [info.args[0], a["diagonal"], str(upper)]
    return entry


_XENT_SIG = ("target", "weight", "size_average", "ignore_index", "reduce", "reduction", "label_smoothing")


def _check_xent(info: NodeInfo, x: TensorInfo, target: object, weight: object, smoothing: object,
                legacy: bool) -> None:
    if len(x.shape) != 2:
        raise info.refuse(f"cross_entropy over logits of {len(x.shape)} dims (only (N, C))")
    if not isinstance(target, TensorInfo) or target.dtype != torch.int64 or len(target.shape) != 1:
        raise info.refuse("cross_entropy with probability targets or targets of other shapes (only (N,) int64 "
                          "class indices)")
    if weight is not None:
        raise info.refuse("cross_entropy with class weights has no template")
    if smoothing not in (0, 0.0, None):
        raise info.refuse("cross_entropy with label smoothing has no template")
    if legacy:
        raise info.refuse("cross_entropy with the deprecated size_average/reduce arguments")


def _xent_function(info: NodeInfo) -> tuple[LibraryKernel, list[str]]:
    x = info.float_input("cross_entropy")
    a = bind_args(info, _XENT_SIG, {"weight": "None", "size_average": "None", "ignore_index": "-100",
                                    "reduce": "None", "reduction": "'mean'", "label_smoothing": "0.0"}, skip=1)
    value = lambda name, default: bound_value(info, _XENT_SIG, name, default, skip=1)  # noqa: E731
    _check_xent(info, x, value("target", None), value("weight", None), value("label_smoothing", 0.0),
                value("size_average", None) is not None or value("reduce", None) is not None)
    return (LibraryKernel("xent", _XENT_SOURCE, "_ks_cross_entropy"),
            [info.args[0], a["target"], a["ignore_index"], a["reduction"]])


def _xent_module(info: NodeInfo) -> tuple[LibraryKernel, list[str]]:
    x = info.float_input("nn.CrossEntropyLoss")
    m, mod = info.module_expr, info.module
    if m is None or mod is None or len(info.args) != 2 or info.kwargs:
        raise info.refuse("nn.CrossEntropyLoss called with other than (input, target)")
    _check_xent(info, x, info.values[1], getattr(mod, "weight", None), getattr(mod, "label_smoothing", 0.0),
                False)
    return (LibraryKernel("xent", _XENT_SOURCE, "_ks_cross_entropy"),
            [info.args[0], info.args[1], f"{m}.ignore_index", f"{m}.reduction"])


ENTRIES: dict[str, Callable[[NodeInfo], tuple[LibraryKernel, list[str]]]] = {
    "torch.triu": _tri(True), "Tensor.triu": _tri(True), "torch.tril": _tri(False), "Tensor.tril": _tri(False),
    "F.cross_entropy": _xent_function, "nn.CrossEntropyLoss": _xent_module,
}
