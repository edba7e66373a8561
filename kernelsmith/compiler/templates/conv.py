"""Library kernel: convolution (Conv1d/2d/3d, ConvTranspose1d/2d/3d and their `F.*` forms) as one implicit GEMM.

Every convolution is run as a 3-D one (1-D and 2-D get unit leading spatial dims through views), so a single
kernel serves all six module kinds and every stride / padding / dilation / groups / output_padding: per group,
C[M, N] = A[M, K] @ B[K, N] with M = batch x output positions, N = output channels of the group, K = input
channels of the group x kernel volume. A is never materialised: each (m, k) is decoded into an input address
(masked where the window leaves the input), and tiles are multiplied with `tl.dot` into an fp32 accumulator.
The transposed convolution is its gather form: output o reads input i where o + pad - k*dil = i*stride, masked
when that is not a whole index; without dilation it is split by stride phase instead (outputs with one
(o + pad) % stride meet only the taps k = that residue + j*stride: one GEMM per phase, no wasted taps, which
the gather form would spend stride^dims times over). All tensors are read through their strides, so channels-last inputs need no
copy. Everything shape-like is read at run time (hidden sizes work); only the block sizes and launch knobs are
module-level constants (`_KS_CONV_BLOCK_M`, ...) so the tuner can move them. fp32 dots use the `precision`
chosen at build time (default "tf32x3"); fp16/bf16 dots are native with fp32 accumulation.

Groups with at most 4 input and output channels (depthwise convolutions) would leave a GEMM tile mostly
padding, so they take a direct kernel instead: one output per lane, a loop over the group's channels and taps.

An optional epilogue (elementwise Triton lines over `acc`, the fp32 result after bias — a [BLOCK_M, BLOCK_N] tile
or a [BLOCK] vector — and `co`, the output channel of each column / lane, broadcastable against `acc` only in the
GEMM kernel) lets a fuser fold activations into the store.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from typing import Any

from kernelsmith.compiler.ir import SeedUnsupported
from kernelsmith.compiler.library import LibraryKernel, NodeInfo

PRECISIONS = ("ieee", "tf32x3", "tf32")
DEFAULT_PRECISION = "tf32x3"

_SOURCE = '''
_KS_CONV_BLOCK_M = 64
_KS_CONV_BLOCK_N = 64
_KS_CONV_BLOCK_K = 32
_KS_CONV_NUM_WARPS = 4
_KS_CONV_NUM_STAGES = 3
_ks_conv_precision = "__PRECISION__"
_KS_CONV_DIRECT_BLOCK = 256
_KS_CONV_DIRECT_NUM_WARPS = 4
_ks_conv_dot_min = 16  # tl.dot's smallest tile side: a floor, not a knob
_ks_conv_direct_max = 4  # at most this many channels in and out per group: the direct kernel


@triton.jit
def _ks_conv_kernel(
    x_ptr, w_ptr, b_ptr, y_ptr,
    M, K, D, H, W, OD, OH, OW, KH, KW, KVOL, cin_g, cout_g,
    sd, sh, sw, pd, ph, pw, dd, dh, dw,
    sxn, sxc, sxd, sxh, sxw,
    sw0, sw1, swd, swh, sww,
    syn, syc, syd, syh, syw,
    HAS_BIAS: tl.constexpr, TRANSPOSED: tl.constexpr, PRECISION: tl.constexpr, UPCAST: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    g = tl.program_id(2)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    m_ok = offs_m < M
    n_ok = offs_n < cout_g
    # output position of each row: (batch, od, oh, ow)
    ow = offs_m % OW
    t = offs_m // OW
    oh = t % OH
    t = t // OH
    od = t % OD
    nb = t // OD
    x_row = nb.to(tl.int64) * sxn + (g * cin_g).to(tl.int64) * sxc
    co = g * cout_g + offs_n
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        offs_k = k0 + tl.arange(0, BLOCK_K)
        k_ok = offs_k < K
        ci = offs_k // KVOL
        r = offs_k % KVOL
        kd = r // (KH * KW)
        r = r % (KH * KW)
        kh = r // KW
        kw = r % KW
        if TRANSPOSED:
            td = od[:, None] + pd - kd[None, :] * dd
            th = oh[:, None] + ph - kh[None, :] * dh
            tw = ow[:, None] + pw - kw[None, :] * dw
            i_d = td // sd
            i_h = th // sh
            i_w = tw // sw
            ok = (td >= 0) & (th >= 0) & (tw >= 0) & (i_d * sd == td) & (i_h * sh == th) & (i_w * sw == tw)
        else:
            i_d = od[:, None] * sd - pd + kd[None, :] * dd
            i_h = oh[:, None] * sh - ph + kh[None, :] * dh
            i_w = ow[:, None] * sw - pw + kw[None, :] * dw
            ok = (i_d >= 0) & (i_h >= 0) & (i_w >= 0)
        ok = ok & (i_d < D) & (i_h < H) & (i_w < W) & m_ok[:, None] & k_ok[None, :]
        a_off = x_row[:, None] + ci[None, :] * sxc + i_d * sxd + i_h * sxh + i_w * sxw
        a = tl.load(x_ptr + a_off, mask=ok, other=0.0)
        tap = kd * swd + kh * swh + kw * sww
        if TRANSPOSED:
            b_off = (g * cin_g + ci)[:, None] * sw0 + offs_n[None, :] * sw1 + tap[:, None]
        else:
            b_off = co[None, :] * sw0 + ci[:, None] * sw1 + tap[:, None]
        b = tl.load(w_ptr + b_off, mask=k_ok[:, None] & n_ok[None, :], other=0.0)
        if UPCAST:  # Triton's interpreter (CPU tensors) computes bf16 tl.dot wrongly: fp32 tiles there
            a = a.to(tl.float32)
            b = b.to(tl.float32)
        acc = tl.dot(a, b, acc, input_precision=PRECISION)
    if HAS_BIAS:
        bias = tl.load(b_ptr + co, mask=n_ok, other=0.0).to(tl.float32)
        acc = acc + bias[None, :]
    # EPILOGUE
    y_off = (nb.to(tl.int64) * syn + od * syd + oh * syh + ow * syw)[:, None] + co[None, :].to(tl.int64) * syc
    tl.store(y_ptr + y_off, acc.to(y_ptr.dtype.element_ty), mask=m_ok[:, None] & n_ok[None, :])


@triton.jit
def _ks_conv_direct_kernel(
    x_ptr, w_ptr, b_ptr, y_ptr,
    total, C_out, D, H, W, OD, OH, OW, KD, KH, KW, cin_g, cout_g,
    sd, sh, sw, pd, ph, pw, dd, dh, dw,
    sxn, sxc, sxd, sxh, sxw,
    sw0, sw1, swd, swh, sww,
    HAS_BIAS: tl.constexpr, TRANSPOSED: tl.constexpr, BLOCK: tl.constexpr,
):
    # Depthwise-like groups (few channels per group): a GEMM tile would be mostly padding, so each lane
    # computes one output (y contiguous) as a loop over its group's input channels and the kernel taps.
    e = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    ok = e < total
    ow = e % OW
    t = e // OW
    oh = t % OH
    t = t // OH
    od = t % OD
    t = t // OD
    co = t % C_out
    nb = t // C_out
    g = co // cout_g
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for ci in range(0, cin_g):
        x_row = nb * sxn + (g * cin_g + ci) * sxc
        if TRANSPOSED:
            w_row = (g * cin_g + ci) * sw0 + (co - g * cout_g) * sw1
        else:
            w_row = co * sw0 + ci * sw1
        for kd in range(0, KD):
            if TRANSPOSED:
                td = od + pd - kd * dd
                i_d = td // sd
                ok_d = ok & (td >= 0) & (i_d * sd == td) & (i_d < D)
            else:
                i_d = od * sd - pd + kd * dd
                ok_d = ok & (i_d >= 0) & (i_d < D)
            for kh in range(0, KH):
                if TRANSPOSED:
                    th = oh + ph - kh * dh
                    i_h = th // sh
                    ok_h = ok_d & (th >= 0) & (i_h * sh == th) & (i_h < H)
                else:
                    i_h = oh * sh - ph + kh * dh
                    ok_h = ok_d & (i_h >= 0) & (i_h < H)
                for kw in range(0, KW):
                    if TRANSPOSED:
                        tw = ow + pw - kw * dw
                        i_w = tw // sw
                        m = ok_h & (tw >= 0) & (i_w * sw == tw) & (i_w < W)
                    else:
                        i_w = ow * sw - pw + kw * dw
                        m = ok_h & (i_w >= 0) & (i_w < W)
                    xv = tl.load(x_ptr + x_row + i_d * sxd + i_h * sxh + i_w * sxw, mask=m, other=0.0)
                    wv = tl.load(w_ptr + w_row + kd * swd + kh * swh + kw * sww, mask=ok, other=0.0)
                    acc += xv.to(tl.float32) * wv.to(tl.float32)
    if HAS_BIAS:
        acc = acc + tl.load(b_ptr + co, mask=ok, other=0.0).to(tl.float32)
    # EPILOGUE
    tl.store(y_ptr + e, acc.to(y_ptr.dtype.element_ty), mask=ok)


@triton.jit
def _ks_convt_kernel(
    x_ptr, w_ptr, b_ptr, y_ptr,
    N, D, H, W, OD, OH, OW, KD, KH, KW, cin_g, cout_g, n_groups,
    sd, sh, sw, pd, ph, pw,
    sxn, sxc, sxd, sxh, sxw,
    sw0, sw1, swd, swh, sww,
    syn, syc, syd, syh, syw,
    HAS_BIAS: tl.constexpr, PRECISION: tl.constexpr, UPCAST: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):
    # Transposed conv, dilation 1, as stride-phase GEMMs: the outputs o with (o + pad) % stride == r only
    # meet the taps k = r + j*stride, at input i = b + t - j (o = o0 + t*stride) — no masked-out taps.
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    z = tl.program_id(2)
    g = z % n_groups
    cls = z // n_groups
    rw = cls % sw
    rh = (cls // sw) % sh
    rd = cls // (sw * sh)
    o0d = ((rd - pd) % sd + sd) % sd
    o0h = ((rh - ph) % sh + sh) % sh
    o0w = ((rw - pw) % sw + sw) % sw
    bd = (o0d + pd - rd) // sd
    bh = (o0h + ph - rh) // sh
    bw = (o0w + pw - rw) // sw
    cd = (OD - o0d + sd - 1) // sd
    ch = (OH - o0h + sh - 1) // sh
    cw = (OW - o0w + sw - 1) // sw
    td_n = (KD - rd + sd - 1) // sd
    th_n = (KH - rh + sh - 1) // sh
    tw_n = (KW - rw + sw - 1) // sw
    M = N * cd * ch * cw
    TAPS = td_n * th_n * tw_n
    K = cin_g * TAPS
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    m_ok = offs_m < M
    n_ok = offs_n < cout_g
    tw = offs_m % tl.maximum(cw, 1)
    t = offs_m // tl.maximum(cw, 1)
    th = t % tl.maximum(ch, 1)
    t = t // tl.maximum(ch, 1)
    tdd = t % tl.maximum(cd, 1)
    nb = t // tl.maximum(cd, 1)
    x_row = nb.to(tl.int64) * sxn + (g * cin_g).to(tl.int64) * sxc
    co = g * cout_g + offs_n
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        offs_k = k0 + tl.arange(0, BLOCK_K)
        k_ok = offs_k < K
        ci = offs_k // tl.maximum(TAPS, 1)
        r = offs_k % tl.maximum(TAPS, 1)
        jd = r // tl.maximum(th_n * tw_n, 1)
        r = r % tl.maximum(th_n * tw_n, 1)
        jh = r // tl.maximum(tw_n, 1)
        jw = r % tl.maximum(tw_n, 1)
        i_d = bd + tdd[:, None] - jd[None, :]
        i_h = bh + th[:, None] - jh[None, :]
        i_w = bw + tw[:, None] - jw[None, :]
        ok = (i_d >= 0) & (i_h >= 0) & (i_w >= 0) & (i_d < D) & (i_h < H) & (i_w < W)
        ok = ok & m_ok[:, None] & k_ok[None, :]
        a = tl.load(x_ptr + x_row[:, None] + ci[None, :] * sxc + i_d * sxd + i_h * sxh + i_w * sxw, mask=ok,
                    other=0.0)
        tap = (rd + jd * sd) * swd + (rh + jh * sh) * swh + (rw + jw * sw) * sww
        b = tl.load(w_ptr + (g * cin_g + ci)[:, None] * sw0 + offs_n[None, :] * sw1 + tap[:, None],
                    mask=k_ok[:, None] & n_ok[None, :], other=0.0)
        if UPCAST:
            a = a.to(tl.float32)
            b = b.to(tl.float32)
        acc = tl.dot(a, b, acc, input_precision=PRECISION)
    if HAS_BIAS:
        bias = tl.load(b_ptr + co, mask=n_ok, other=0.0).to(tl.float32)
        acc = acc + bias[None, :]
    # EPILOGUE
    od = o0d + tdd * sd
    oh = o0h + th * sh
    ow = o0w + tw * sw
    y_off = (nb.to(tl.int64) * syn + od * syd + oh * syh + ow * syw)[:, None] + co[None, :].to(tl.int64) * syc
    tl.store(y_ptr + y_off, acc.to(y_ptr.dtype.element_ty), mask=m_ok[:, None] & n_ok[None, :])


def _ks_conv_tuple(v, nd):
    if isinstance(v, int):
        return (int(v),) * nd
    v = tuple(int(e) for e in v)
    return v * nd if len(v) == 1 else v


def _ks_conv(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, output_padding=0, transposed=False):
    """y = conv(x, weight, bias) (or its transpose), every hyper-parameter read now: hidden sizes work."""
    nd = weight.dim() - 2
    if x.dim() == nd + 1:
        return _ks_conv(x.unsqueeze(0), weight, bias, stride, padding, dilation, groups, output_padding,
                        transposed).squeeze(0)
    if x.dim() != nd + 2:
        raise ValueError(f"conv: input of shape {tuple(x.shape)} for a {nd}-d weight")
    if x.dtype not in (torch.float16, torch.bfloat16, torch.float32) or weight.dtype != x.dtype:
        raise TypeError(f"conv: input {x.dtype} and weight {weight.dtype} (float16/bfloat16/float32, alike)")
    groups = int(groups)
    stride = _ks_conv_tuple(stride, nd)
    dilation = _ks_conv_tuple(dilation, nd)
    ks = tuple(int(k) for k in weight.shape[2:])
    n, c_in = int(x.shape[0]), int(x.shape[1])
    isz = tuple(int(s) for s in x.shape[2:])
    if transposed:
        cin_g, cout_g = c_in // groups, int(weight.shape[1])
        pad = _ks_conv_tuple(padding, nd)
        opad = _ks_conv_tuple(output_padding, nd)
        osz = tuple((i - 1) * s - 2 * p + d * (k - 1) + op + 1
                    for i, s, p, d, k, op in zip(isz, stride, pad, dilation, ks, opad))
    else:
        cin_g, cout_g = int(weight.shape[1]), int(weight.shape[0]) // groups
        if padding == "valid":
            padding = 0
        if padding == "same":
            pad = tuple(d * (k - 1) // 2 for d, k in zip(dilation, ks))
            osz = isz
        else:
            pad = _ks_conv_tuple(padding, nd)
            osz = tuple((i + 2 * p - d * (k - 1) - 1) // s + 1
                        for i, s, p, d, k in zip(isz, stride, pad, dilation, ks))
    if cin_g * groups != c_in or min(osz) <= 0:
        raise ValueError(f"conv: input {tuple(x.shape)}, weight {tuple(weight.shape)}, groups {groups} "
                         f"give output size {osz}")
    c_out = cout_g * groups
    y = torch.empty((n, c_out, *osz), device=x.device, dtype=x.dtype)  # contiguous (the direct kernel)
    if y.numel() == 0:
        return y
    lift = 3 - nd
    x3, w3, y3 = x, weight, y
    for _ in range(lift):
        x3, w3, y3 = x3.unsqueeze(2), w3.unsqueeze(2), y3.unsqueeze(2)
    one = (1,) * lift
    zero = (0,) * lift
    stride, pad, dilation = one + stride, zero + pad, one + dilation
    D, H, W = x3.shape[2:]
    OD, OH, OW = y3.shape[2:]
    KD, KH, KW = w3.shape[2:]
    M = n * OD * OH * OW
    K = cin_g * KD * KH * KW
    has_bias = bias is not None
    if cin_g <= _ks_conv_direct_max and cout_g <= _ks_conv_direct_max:
        total = y.numel()
        _ks_conv_direct_kernel[(triton.cdiv(total, _KS_CONV_DIRECT_BLOCK),)](
            x3, w3, bias if has_bias else w3, y3,
            total, c_out, D, H, W, OD, OH, OW, KD, KH, KW, cin_g, cout_g,
            *stride, *pad, *dilation, *x3.stride(), *w3.stride(),
            HAS_BIAS=has_bias, TRANSPOSED=bool(transposed), BLOCK=_KS_CONV_DIRECT_BLOCK,
            num_warps=_KS_CONV_DIRECT_NUM_WARPS,
        )
        return y
    block_m = _KS_CONV_BLOCK_M
    block_n = min(_KS_CONV_BLOCK_N, max(_ks_conv_dot_min, triton.next_power_of_2(cout_g)))
    block_k = min(_KS_CONV_BLOCK_K, max(_ks_conv_dot_min, triton.next_power_of_2(K)))
    upcast = x.dtype == torch.bfloat16 and x.device.type == "cpu"
    precision = _ks_conv_precision if x.dtype == torch.float32 else ("ieee" if upcast else "tf32")
    if transposed and dilation == (1, 1, 1) and stride != (1, 1, 1):
        phases = stride[0] * stride[1] * stride[2]
        m_max = n * triton.cdiv(OD, stride[0]) * triton.cdiv(OH, stride[1]) * triton.cdiv(OW, stride[2])
        k_max = cin_g * triton.cdiv(KD, stride[0]) * triton.cdiv(KH, stride[1]) * triton.cdiv(KW, stride[2])
        block_k = min(_KS_CONV_BLOCK_K, max(_ks_conv_dot_min, triton.next_power_of_2(k_max)))
        grid = (triton.cdiv(m_max, block_m), triton.cdiv(cout_g, block_n), groups * phases)
        _ks_convt_kernel[grid](
            x3, w3, bias if has_bias else w3, y3,
            n, D, H, W, OD, OH, OW, KD, KH, KW, cin_g, cout_g, groups,
            *stride, *pad, *x3.stride(), *w3.stride(), *y3.stride(),
            HAS_BIAS=has_bias, PRECISION=precision, UPCAST=upcast,
            BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k,
            num_warps=_KS_CONV_NUM_WARPS, num_stages=_KS_CONV_NUM_STAGES,
        )
        return y
    grid = (triton.cdiv(M, block_m), triton.cdiv(cout_g, block_n), groups)
    _ks_conv_kernel[grid](
        x3, w3, bias if has_bias else w3, y3,
        M, K, D, H, W, OD, OH, OW, KH, KW, KD * KH * KW, cin_g, cout_g,
        *stride, *pad, *dilation,
        *x3.stride(), *w3.stride(), *y3.stride(),
        HAS_BIAS=has_bias, TRANSPOSED=bool(transposed),
        PRECISION=precision, UPCAST=upcast,
        BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k,
        num_warps=_KS_CONV_NUM_WARPS, num_stages=_KS_CONV_NUM_STAGES,
    )
    return y
'''


def conv_kernel(precision: str | None = None, epilogue: Sequence[str] = ()) -> LibraryKernel:
    """The convolution library kernel for `precision` (fp32 dots), with `epilogue` lines applied to `acc`.

    Variants with an epilogue get their own name (a hash of the lines), so several can share one program."""
    precision = precision or DEFAULT_PRECISION
    if precision not in PRECISIONS:
        raise SeedUnsupported(f"conv: precision {precision!r} (expected one of {', '.join(PRECISIONS)})")
    name = "conv"
    source = _SOURCE.replace("__PRECISION__", precision)
    if epilogue:
        name = "conv_" + hashlib.sha1("\n".join(epilogue).encode()).hexdigest()[:8]
        source = source.replace("    # EPILOGUE\n", "".join(f"    {line}\n" for line in epilogue))
        source = source.replace("_ks_conv", f"_ks_{name}").replace("_KS_CONV", f"_KS_{name.upper()}")
    return LibraryKernel(name=name, source=source, launcher=f"_ks_{name}")


# ----------------------------------------------------------------------------------------------- the entries


def bind_args(info: NodeInfo, names: Sequence[str], defaults: dict[str, str], skip: int = 0) -> dict[str, str]:
    """The call's argument expressions by parameter name (positional then keyword), defaults filled in.

    `names` is the function's signature after the first `skip` positional arguments; an argument it does not
    name is refused (it would change the semantics silently)."""
    pos = list(info.args[skip:])
    if len(pos) > len(names):
        raise info.refuse(f"{len(info.args)} positional arguments (expected at most {len(names) + skip})")
    out = dict(defaults)
    out.update(zip(names, pos))
    for key, expr in info.kwargs.items():
        if key not in names:
            raise info.refuse(f"argument {key}= is not supported")
        out[key] = expr
    missing = [n for n in names if n not in out]
    if missing:
        raise info.refuse(f"missing argument {missing[0]}")
    return out


def bound_value(info: NodeInfo, names: Sequence[str], name: str, default: Any, skip: int = 0) -> Any:
    """The trace-time value of argument `name` (as `bind_args` binds it), or `default` when not given."""
    pos = list(info.values[skip:])
    if name in names and names.index(name) < len(pos):
        return pos[names.index(name)]
    return info.kwvalues.get(name, default)


def _options(info: NodeInfo, precision: str | None) -> str | None:
    return precision if precision is not None else info.precision


def _conv_module(transposed: bool) -> Callable[..., tuple[LibraryKernel, list[str]]]:
    def entry(info: NodeInfo, precision: str | None = None,
              epilogue: Sequence[str] = ()) -> tuple[LibraryKernel, list[str]]:
        info.float_input()
        mod, m = info.module, info.module_expr
        if mod is None or m is None:
            raise info.refuse("convolution module not available")
        if getattr(mod, "padding_mode", "zeros") != "zeros":
            raise info.refuse(f"padding_mode={mod.padding_mode!r} (only 'zeros')")
        if len(info.args) != 1 or info.kwargs:
            raise info.refuse("a convolution module called with more than its input (output_size=...)")
        bias = info.params.get("bias") or "None"
        weight = info.params.get("weight") or f"{m}.weight"
        args = [info.args[0], weight, bias, f"{m}.stride", f"{m}.padding", f"{m}.dilation", f"{m}.groups"]
        if transposed:
            args += [f"{m}.output_padding", "True"]
        return conv_kernel(_options(info, precision), epilogue), args
    return entry


_CONV_SIG = ("weight", "bias", "stride", "padding", "dilation", "groups")
_CONV_DEF = {"bias": "None", "stride": "1", "padding": "0", "dilation": "1", "groups": "1"}
_CONVT_SIG = ("weight", "bias", "stride", "padding", "output_padding", "groups", "dilation")
_CONVT_DEF = {"bias": "None", "stride": "1", "padding": "0", "output_padding": "0", "groups": "1", "dilation": "1"}


def _conv_function(transposed: bool) -> Callable[..., tuple[LibraryKernel, list[str]]]:
    def entry(info: NodeInfo, precision: str | None = None,
              epilogue: Sequence[str] = ()) -> tuple[LibraryKernel, list[str]]:
        info.float_input()
        if "input" in info.kwargs:
            raise info.refuse("input= given by keyword")
        if transposed:
            a = bind_args(info, _CONVT_SIG, _CONVT_DEF, skip=1)
            args = [info.args[0], a["weight"], a["bias"], a["stride"], a["padding"], a["dilation"], a["groups"],
                    a["output_padding"], "True"]
        else:
            a = bind_args(info, _CONV_SIG, _CONV_DEF, skip=1)
            args = [info.args[0], a["weight"], a["bias"], a["stride"], a["padding"], a["dilation"], a["groups"]]
        return conv_kernel(_options(info, precision), epilogue), args
    return entry


ENTRIES: dict[str, Callable[..., tuple[LibraryKernel, list[str]]]] = {}
for _d in (1, 2, 3):
    ENTRIES[f"nn.Conv{_d}d"] = _conv_module(False)
    ENTRIES[f"nn.ConvTranspose{_d}d"] = _conv_module(True)
    for _ns in ("F", "torch"):
        ENTRIES[f"{_ns}.conv{_d}d"] = _conv_function(False)
        ENTRIES[f"{_ns}.conv_transpose{_d}d"] = _conv_function(True)
