"""Library kernel: `F.scaled_dot_product_attention` as one flash-style kernel (no L x L matrix in memory).

q (..., L, E), k (..., S, E), v (..., S, Ev), the leading dims flattened into a batch. One program takes BLOCK_M
queries of one batch entry and one tile of BLOCK_EV output features, and walks the keys in tiles of BLOCK_N:
scores `q k^T * scale` (the E dim in chunks of BLOCK_E, fp32 accumulation, `tl.dot` at the seed's precision), the
causal mask (torch's `is_causal`: query i sees keys j <= i), an online softmax (running max and rescaled sum, a row
with no key left gives NaN as torch's does) and the weighted sum of v. Output features beyond one tile
(KernelBench's E = Ev = 1024) are split over programs, each recomputing the scores: the registers hold a tile,
never a row of E. Operands are read as fp32. A mask tensor, dropout and grouped-query attention are refused by
name (under lenient: torch's call).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from kernelsmith.compiler.ir import SeedUnsupported
from kernelsmith.compiler.library import LibraryKernel, NodeInfo, TensorInfo
from kernelsmith.compiler.templates.conv import DEFAULT_PRECISION, PRECISIONS, bind_args, bound_value

_SOURCE = '''
_ks_attn_precision = "__PRECISION__"
_KS_ATTN_BLOCK_M = 64
_KS_ATTN_BLOCK_N = 64
_KS_ATTN_BLOCK_E = 64
_KS_ATTN_BLOCK_EV = 128


@triton.jit
def _ks_attn_kernel(q_ptr, k_ptr, v_ptr, o_ptr, L, S, E, EV, scale, n_ev,
                    CAUSAL: tl.constexpr, PRECISION: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                    BLOCK_E: tl.constexpr, BLOCK_EV: tl.constexpr):
    # BLOCK_M queries of batch entry `b`, output features [ev0, ev0 + BLOCK_EV): keys in tiles, online softmax.
    pid = tl.program_id(0)
    b = tl.program_id(1).to(tl.int64)
    pid_m = pid // n_ev
    ev0 = (pid % n_ev) * BLOCK_EV
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_e = tl.arange(0, BLOCK_E)
    offs_v = ev0 + tl.arange(0, BLOCK_EV)
    m_ok = offs_m < L
    v_ok = offs_v < EV
    q_base = q_ptr + b * L * E
    k_base = k_ptr + b * S * E
    v_base = v_ptr + b * S * EV
    m_i = tl.full((BLOCK_M,), float("-inf"), tl.float32)
    l_i = tl.zeros((BLOCK_M,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_M, BLOCK_EV), dtype=tl.float32)
    hi = S
    if CAUSAL:
        hi = tl.minimum(S, (pid_m + 1) * BLOCK_M)
    for n0 in range(0, hi, BLOCK_N):
        offs_n = n0 + tl.arange(0, BLOCK_N)
        n_ok = offs_n < S
        s = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for e0 in range(0, E, BLOCK_E):
            e_ok = (e0 + offs_e) < E
            q = tl.load(q_base + offs_m[:, None].to(tl.int64) * E + e0 + offs_e[None, :],
                        mask=m_ok[:, None] & e_ok[None, :], other=0.0).to(tl.float32)
            kt = tl.load(k_base + offs_n[None, :].to(tl.int64) * E + e0 + offs_e[:, None],
                         mask=n_ok[None, :] & e_ok[:, None], other=0.0).to(tl.float32)
            s = tl.dot(q, kt, s, input_precision=PRECISION)
        s = s * scale
        keep = n_ok[None, :]
        if CAUSAL:
            keep = keep & (offs_n[None, :] <= offs_m[:, None])
        s = tl.where(keep, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # no key yet: exp(-inf - 0) = 0, not NaN
        p = tl.exp(s - m_safe[:, None])
        alpha = tl.exp(m_i - m_safe)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        vt = tl.load(v_base + offs_n[:, None].to(tl.int64) * EV + offs_v[None, :],
                     mask=n_ok[:, None] & v_ok[None, :], other=0.0).to(tl.float32)
        acc = tl.dot(p, vt, acc * alpha[:, None], input_precision=PRECISION)
        m_i = m_new
    out = acc / l_i[:, None]
    tl.store(o_ptr + b * L * EV + offs_m[:, None].to(tl.int64) * EV + offs_v[None, :],
             out.to(o_ptr.dtype.element_ty), mask=m_ok[:, None] & v_ok[None, :])


def _ks_attention(q, k, v, is_causal=False, scale=None):
    """F.scaled_dot_product_attention(q, k, v, is_causal=, scale=) without a mask, dropout or GQA."""
    if q.dim() < 2 or k.dim() != q.dim() or v.dim() != q.dim():
        raise ValueError(f"attention: q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}")
    lead = q.shape[:-2]
    if k.shape[:-2] != lead or v.shape[:-2] != lead or k.shape[-1] != q.shape[-1] or v.shape[-2] != k.shape[-2]:
        raise ValueError(f"attention: q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)} do not match")
    L, E = q.shape[-2], q.shape[-1]
    S, EV = k.shape[-2], v.shape[-1]
    B = _ks_prod(lead)
    out = torch.empty((*lead, L, EV), device=q.device, dtype=q.dtype)
    if out.numel() == 0:
        return out
    qc, kc, vc = q.contiguous(), k.contiguous(), v.contiguous()
    scale = float(scale) if scale is not None else 1.0 / math.sqrt(E)
    block_m = min(_KS_ATTN_BLOCK_M, max(16, _ks_np2(L)))
    block_n = min(_KS_ATTN_BLOCK_N, max(16, _ks_np2(S)))
    block_e = min(_KS_ATTN_BLOCK_E, max(16, _ks_np2(E)))
    block_ev = min(_KS_ATTN_BLOCK_EV, max(16, _ks_np2(EV)))
    n_ev = triton.cdiv(EV, block_ev)
    _ks_attn_kernel[(triton.cdiv(L, block_m) * n_ev, B)](
        qc, kc, vc, out, L, S, E, EV, scale, n_ev, CAUSAL=bool(is_causal), PRECISION=_ks_attn_precision,
        BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_E=block_e, BLOCK_EV=block_ev)
    return out
'''

_SIG = ("key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa")
_DEF = {"attn_mask": "None", "dropout_p": "0.0", "is_causal": "False", "scale": "None", "enable_gqa": "False"}
_FLOATS = (torch.float16, torch.bfloat16, torch.float32)


def attention_kernel(precision: str | None) -> LibraryKernel:
    precision = precision or DEFAULT_PRECISION
    if precision not in PRECISIONS:
        raise SeedUnsupported(f"attention: precision {precision!r} (expected one of {', '.join(PRECISIONS)})")
    return LibraryKernel("attn", _SOURCE.replace("__PRECISION__", precision), "_ks_attention")


def _sdpa(info: NodeInfo) -> tuple[LibraryKernel, list[str]]:
    a = bind_args(info, _SIG, _DEF, skip=1)
    q = info.values[0] if info.values else None
    k, v = bound_value(info, _SIG, "key", None, skip=1), bound_value(info, _SIG, "value", None, skip=1)
    if not all(isinstance(t, TensorInfo) for t in (q, k, v)):
        raise info.refuse("attention of non-tensors")
    if any(t.dtype not in _FLOATS or t.dtype != q.dtype for t in (k, v)) or q.dtype not in _FLOATS:
        raise info.refuse(f"attention on {q.dtype}/{k.dtype}/{v.dtype} (one of float16/bfloat16/float32)")
    if bound_value(info, _SIG, "attn_mask", None, skip=1) is not None:
        raise info.refuse("attention with a mask tensor has no template")
    if bound_value(info, _SIG, "dropout_p", 0.0, skip=1) not in (0, 0.0):
        raise info.refuse("attention with dropout is random")
    if bound_value(info, _SIG, "enable_gqa", False, skip=1):
        raise info.refuse("grouped-query attention (enable_gqa) has no template")
    return attention_kernel(info.precision), [info.args[0], a["key"], a["value"], a["is_causal"], a["scale"]]


ENTRIES: dict[str, Callable[[NodeInfo], tuple[LibraryKernel, list[str]]]] = {
    "F.scaled_dot_product_attention": _sdpa,
}
