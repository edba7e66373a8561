"""What every generated program shares: imports, the jit and Python helpers, and the operand load/store rule.

Every kernel reads its external tensor operands through one rule, so broadcasting needs no extra code: operand
`k` of a kernel whose iteration domain (flattened, contiguous) has linear index `i` is read at `p{k}[i]` when it
has the domain's shape (`B{k} == 0`) or at `p{k}[(i // i{k}) % s{k}]` when its non-broadcast dims form one
block of the domain (per-channel bias `(C, 1, 1)`, per-column weight `(N,)`, a scalar): the Python helper
`_ks_bc` decides at run time, from the actual shapes, and materialises anything else. Kernels compute in fp32
and cast once when storing.
"""

from __future__ import annotations

import math

import torch

IMPORTS = ["import math", "import torch", "import torch.nn as nn", "import triton", "import triton.language as tl"]

JIT_HELPERS = '''
@triton.jit
def _ks_tanh(x):
    # tanh(x) = 1 - 2 / (1 + exp(2x)): saturates cleanly to +-1 for large |x|.
    return 1.0 - 2.0 / (1.0 + tl.exp(2.0 * x))
'''

PY_HELPERS = '''
def _ks_attr(obj, path):
    """A parameter or buffer by its dotted path ("network.0.weight")."""
    for name in path.split("."):
        obj = getattr(obj, name)
    return obj


def _ks_prod(values):
    out = 1
    for v in values:
        out *= int(v)
    return out


def _ks_np2(n):
    return triton.next_power_of_2(max(int(n), 1))


def _ks_sms(t):
    """Streaming multiprocessors of `t`'s GPU (cached by torch); a few for the CPU (Triton's interpreter)."""
    if t.is_cuda:
        return torch.cuda.get_device_properties(t.device).multi_processor_count
    return 4


def _ks_split_k(tiles, outputs, K, block_k, t):
    """Slices of K for a matmul whose `tiles` output tiles (batch included) leave most of the GPU idle: enough
    to give every SM two programs, each slice at least 8 K-blocks long, at most 64 slices and a 64 MiB fp32
    workspace (`outputs` elements per slice); 1 (the one-pass kernel) when the tiles fill the GPU."""
    sms = _ks_sms(t)
    if tiles * 2 >= sms:
        return 1
    return max(1, min(64, triton.cdiv(2 * sms, tiles), K // (8 * block_k), (16 << 20) // max(outputs, 1)))


def _ks_bshape(*shapes):
    """The broadcast of `shapes` (plain Python: no torch operator runs)."""
    nd = max(len(s) for s in shapes)
    out = [1] * nd
    for s in shapes:
        for j, d in enumerate(s, nd - len(s)):
            if d != 1:
                if out[j] not in (1, d):
                    raise ValueError(f"shapes {shapes} do not broadcast")
                out[j] = d
    return tuple(out)


def _ks_bc(t, shape):
    """Operand `t` read over a contiguous iteration domain of `shape`: (tensor, mode, inner, size).

    mode 0: element i is t[i] (same shape). mode 1: element i is t[(i // inner) % size] (the dims of t that
    are not broadcast form one block of `shape`: a per-channel or per-column parameter, a scalar). Anything
    else is materialised by expand + contiguous (a copy, no arithmetic).
    """
    shape = tuple(shape)
    if tuple(t.shape) == shape:
        return t.contiguous(), 0, 1, 1
    nd = len(shape)
    ts = (1,) * (nd - t.dim()) + tuple(t.shape)
    kept = [d for d in range(nd) if ts[d] != 1]
    if not kept:
        return t.contiguous(), 1, 1, 1
    a, b = kept[0], kept[-1] + 1
    if all(ts[d] == shape[d] for d in range(a, b)):
        return t.contiguous(), 1, _ks_prod(shape[b:]), _ks_prod(shape[a:b])
    return t.expand(shape).contiguous(), 0, 1, 1


def _ks_rdims(spec, nd):
    """The reduced dims `spec` (None: all) of a rank-`nd` tensor as a half-open block [a, b)."""
    dims = sorted({d % nd for d in spec}) if spec else list(range(nd))
    if not dims:
        return 0, 0
    if dims != list(range(dims[0], dims[-1] + 1)):
        raise ValueError(f"reduced dims {spec} are not contiguous")
    return dims[0], dims[-1] + 1


def _ks_mm_geometry(A, B, linear):
    """(a, b, batch, M, N, K, out_shape, a_strides, b_strides) with strides as (batch, row, col) of the
    (K, N) view of B; nn.Linear's (N, K) weight is read transposed in place."""
    if B.dim() == 2:
        a = A.reshape(-1, A.shape[-1])
        M, K = a.shape
        sa = (0, a.stride(0), a.stride(1))
        if linear:
            N, sb = B.shape[0], (0, B.stride(1), B.stride(0))
        else:
            N, sb = B.shape[1], (0, B.stride(0), B.stride(1))
        return a, B, 1, M, N, K, tuple(A.shape[:-1]) + (N,), sa, sb
    a = A.reshape(-1, A.shape[-2], A.shape[-1])
    b = B.reshape(-1, B.shape[-2], B.shape[-1])
    batch, M, K = a.shape
    N = b.shape[2]
    return a, b, batch, M, N, K, tuple(A.shape[:-1]) + (N,), a.stride(), b.stride()
'''

_TL_DTYPES = {torch.float16: "tl.float16", torch.bfloat16: "tl.bfloat16", torch.float32: "tl.float32",
              torch.float64: "tl.float64"}


def literal(x: object) -> str:
    """A Python number as a float literal for a kernel body (computed in fp32)."""
    x = float(x)  # type: ignore[arg-type]
    if math.isnan(x):
        return 'float("nan")'
    if math.isinf(x):
        return 'float("inf")' if x > 0 else '(-float("inf"))'
    text = repr(x)
    return f"({text})" if x < 0 else text


def load(k: int, index: str, mask: str, pad: str) -> list[str]:
    """Load external operand k (fp32) at linear `index` of the kernel's domain."""
    return [
        f"{pad}if B{k} == 0:",
        f"{pad}    x{k} = tl.load(p{k} + {index}, mask={mask}, other=0.0).to(tl.float32)",
        f"{pad}else:",
        f"{pad}    x{k} = tl.load(p{k} + ({index} // i{k}) % s{k}, mask={mask}, other=0.0).to(tl.float32)",
    ]


def store(k: int, value: str, index: str, mask: str, pad: str) -> str:
    return f"{pad}tl.store(o{k} + {index}, {value}.to(o{k}.dtype.element_ty), mask={mask})"


def _signature(n_in: int, n_out: int, n_scalar: int, sizes: list[str], consts: list[str]) -> str:
    parts = [f"p{k}" for k in range(n_in)] + [f"o{k}" for k in range(n_out)] + sizes
    parts += [f"i{k}, s{k}" for k in range(n_in)] + [f"c{k}" for k in range(n_scalar)]
    parts += [f"B{k}: tl.constexpr" for k in range(n_in)] + [f"{c}: tl.constexpr" for c in consts]
    return ", ".join(parts)
