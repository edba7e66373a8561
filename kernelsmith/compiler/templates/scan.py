"""Library kernel: cumulative sum and product along one dimension (`torch.cumsum`/`cumprod`, `x.cumsum(...)`).

The input is viewed as (outer, size, inner) around the scanned dim. When the dim is innermost (inner = 1, the
usual case: KernelBench's 32768 rows of 32768) one program takes one row and walks it in tiles of BLOCK: a
tile's scan (`tl.associative_scan`, a log-depth tree in registers) plus the carry of the tiles before it, in
fp32, so the row is read once and written once and the GPU is filled by rows. Otherwise one program takes a tile
of BLOCK_I inner positions of one outer index and steps through `size` with a running fp32 vector: the loads
stay coalesced along the contiguous inner dim. Sizes and the dim are read at run time (hidden shapes differ);
non-contiguous inputs are made contiguous first. Integer and bool inputs (torch promotes them to int64) are
refused under strict and stay torch's call under lenient.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from kernelsmith.compiler.library import LibraryKernel, NodeInfo, TensorInfo
from kernelsmith.compiler.templates.conv import bind_args, bound_value

_SOURCE = '''
_KS_SCAN_BLOCK = 1024
_KS_SCAN_BLOCK_I = 128


@triton.jit
def _ks_scan_add(a, b):
    return a + b


@triton.jit
def _ks_scan_mul(a, b):
    return a * b


@triton.jit
def _ks_scan_row_kernel(x_ptr, y_ptr, size, PROD: tl.constexpr, BLOCK: tl.constexpr):
    # One row of `size` contiguous elements: tile scans plus the carry of the tiles before (fp32).
    base = tl.program_id(0).to(tl.int64) * size
    if PROD:
        carry = tl.full((), 1.0, tl.float32)
    else:
        carry = tl.full((), 0.0, tl.float32)
    for start in range(0, size, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        ok = offs < size
        if PROD:
            v = tl.load(x_ptr + base + offs, mask=ok, other=1.0).to(tl.float32)
            s = tl.associative_scan(v, 0, _ks_scan_mul) * carry
            carry = carry * tl.reduce(v, 0, _ks_scan_mul)
        else:
            v = tl.load(x_ptr + base + offs, mask=ok, other=0.0).to(tl.float32)
            s = tl.associative_scan(v, 0, _ks_scan_add) + carry
            carry = carry + tl.sum(v, axis=0)
        tl.store(y_ptr + base + offs, s.to(y_ptr.dtype.element_ty), mask=ok)


@triton.jit
def _ks_scan_col_kernel(x_ptr, y_ptr, size, inner, n_ib, PROD: tl.constexpr, BLOCK_I: tl.constexpr):
    # A tile of inner positions of one outer index, stepping through the scanned dim with a running vector.
    pid = tl.program_id(0)
    o = (pid // n_ib).to(tl.int64)
    ii = (pid % n_ib) * BLOCK_I + tl.arange(0, BLOCK_I)
    ok = ii < inner
    base = o * size * inner + ii
    if PROD:
        acc = tl.full((BLOCK_I,), 1.0, tl.float32)
    else:
        acc = tl.zeros((BLOCK_I,), dtype=tl.float32)
    for s in range(0, size):
        v = tl.load(x_ptr + base + s * inner, mask=ok, other=0.0).to(tl.float32)
        if PROD:
            acc = acc * v
        else:
            acc = acc + v
        tl.store(y_ptr + base + s * inner, acc.to(y_ptr.dtype.element_ty), mask=ok)


def _ks_scan(x, dim, prod, dtype=None):
    """torch.cumsum(x, dim, dtype=dtype) (or cumprod when `prod`) as one Triton kernel, fp32 accumulation."""
    if not (x.is_floating_point() and (dtype is None or dtype.is_floating_point)):
        raise TypeError(f"scan: {x.dtype} input, dtype {dtype} (floating point only)")
    nd = max(x.dim(), 1)
    if not -nd <= dim < nd:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-nd}, {nd - 1}], but got {dim})")
    xc = x.contiguous()
    y = torch.empty(xc.shape, dtype=dtype or x.dtype, device=x.device)
    if xc.numel() == 0:
        return y
    shape = list(xc.shape) or [1]
    dim %= nd
    size, inner = shape[dim], _ks_prod(shape[dim + 1:])
    outer = _ks_prod(shape[:dim])
    if inner == 1:
        _ks_scan_row_kernel[(outer,)](xc, y, size, PROD=prod, BLOCK=min(_ks_np2(size), _KS_SCAN_BLOCK))
    else:
        block_i = min(_ks_np2(inner), _KS_SCAN_BLOCK_I)
        n_ib = triton.cdiv(inner, block_i)
        _ks_scan_col_kernel[(outer * n_ib,)](xc, y, size, inner, n_ib, PROD=prod, BLOCK_I=block_i)
    return y
'''

_SIG = ("dim", "dtype")
_FLOATS = (torch.float16, torch.bfloat16, torch.float32)  # accumulated in fp32: float64 would lose digits


def _scan(prod: bool) -> Callable[[NodeInfo], tuple[LibraryKernel, list[str]]]:
    what = "cumprod" if prod else "cumsum"

    def entry(info: NodeInfo) -> tuple[LibraryKernel, list[str]]:
        x = info.values[0] if info.values else None
        if not isinstance(x, TensorInfo):
            raise info.refuse(f"{what} of a non-tensor")
        a = bind_args(info, _SIG, {"dtype": "None"}, skip=1)
        dtype = bound_value(info, _SIG, "dtype", None, skip=1)
        if x.dtype not in _FLOATS or (dtype is not None and dtype not in _FLOATS):
            raise info.refuse(f"{what} of {x.dtype} (dtype={dtype}): float16/bfloat16/float32 only (torch promotes "
                              "integers to int64; float64 would be accumulated in fp32)")
        return LibraryKernel("scan", _SOURCE, "_ks_scan"), [info.args[0], a["dim"], str(prod), a["dtype"]]
    return entry


ENTRIES: dict[str, Callable[[NodeInfo], tuple[LibraryKernel, list[str]]]] = {
    "torch.cumsum": _scan(False), "Tensor.cumsum": _scan(False),
    "torch.cumprod": _scan(True), "Tensor.cumprod": _scan(True),
}
