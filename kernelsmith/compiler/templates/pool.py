"""Library kernel: max / average / adaptive pooling, 1-D to 3-D (modules and `F.*` forms).

One output-parallel kernel serves every windowed pool: each program takes BLOCK output elements of (N, C, OD,
OH, OW) (1-D and 2-D pools get unit leading dims), walks the window (kernel size, stride, padding, dilation; or
the adaptive window [floor(o*I/O), ceil((o+1)*I/O)) ) with masked loads, and keeps a max (NaN propagates, as
in torch) or an fp32 sum divided by torch's divisor (count_include_pad, ceil_mode's clipped last window,
divisor_override). Output sizes follow torch's rule, ceil_mode included. A global pool (adaptive output 1 in
every dim, the common classifier head) is a row reduction instead: rows of N*C, tiles of [BLOCK_R, BLOCK_S]
looping over the spatial extent, so a long row does not serialise on one lane. Inputs are read through their
strides; everything is read at run time. `return_indices` is refused (no template writes indices).
"""

from __future__ import annotations

from collections.abc import Callable

from kernelsmith.compiler.library import LibraryKernel, NodeInfo
from kernelsmith.compiler.templates.conv import bind_args, bound_value

_SOURCE = '''
_KS_POOL_BLOCK = 256
_KS_POOL_NUM_WARPS = 4
_KS_POOL_BLOCK_S = 256
_KS_POOL_ROW_ELEMS = 4096


@triton.jit
def _ks_pool_kernel(x_ptr, y_ptr, total, C, D, H, W, OD, OH, OW, KD, KH, KW, sd, sh, sw, pd, ph, pw, dd, dh, dw,
                    sxn, sxc, sxd, sxh, sxw, divisor,
                    IS_MAX: tl.constexpr, COUNT_PAD: tl.constexpr, HAS_DIVISOR: tl.constexpr,
                    ADAPTIVE: tl.constexpr, BLOCK: tl.constexpr):
    e = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    ok = e < total
    ow = e % OW
    t = e // OW
    oh = t % OH
    t = t // OH
    od = t % OD
    t = t // OD
    c = t % C
    n = t // C
    base = n * sxn + c * sxc
    if ADAPTIVE:
        d0 = (od * D) // OD
        h0 = (oh * H) // OH
        w0 = (ow * W) // OW
        d1 = ((od + 1) * D + OD - 1) // OD
        h1 = ((oh + 1) * H + OH - 1) // OH
        w1 = ((ow + 1) * W + OW - 1) // OW
    else:
        d0 = od * sd - pd
        h0 = oh * sh - ph
        w0 = ow * sw - pw
        d1 = d0 + (KD - 1) * dd + 1
        h1 = h0 + (KH - 1) * dh + 1
        w1 = w0 + (KW - 1) * dw + 1
    if IS_MAX:
        acc = tl.full((BLOCK,), float("-inf"), tl.float32)
    else:
        acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for kd in range(0, KD):
        i_d = d0 + kd * dd
        ok_d = ok & (i_d >= 0) & (i_d < D) & (i_d < d1)
        for kh in range(0, KH):
            i_h = h0 + kh * dh
            ok_h = ok_d & (i_h >= 0) & (i_h < H) & (i_h < h1)
            for kw in range(0, KW):
                i_w = w0 + kw * dw
                m = ok_h & (i_w >= 0) & (i_w < W) & (i_w < w1)
                if IS_MAX:
                    v = tl.load(x_ptr + base + i_d * sxd + i_h * sxh + i_w * sxw, mask=m,
                                other=float("-inf")).to(tl.float32)
                    acc = tl.where((v > acc) | (v != v), v, acc)
                else:
                    v = tl.load(x_ptr + base + i_d * sxd + i_h * sxh + i_w * sxw, mask=m, other=0.0)
                    acc += v.to(tl.float32)
    if not IS_MAX:
        if HAS_DIVISOR:
            acc = acc / divisor
        elif ADAPTIVE:
            acc = acc / ((d1 - d0) * (h1 - h0) * (w1 - w0)).to(tl.float32)
        else:
            de = tl.minimum(d0 + KD, D + pd)
            he = tl.minimum(h0 + KH, H + ph)
            we = tl.minimum(w0 + KW, W + pw)
            if COUNT_PAD:
                cnt = (de - d0) * (he - h0) * (we - w0)
            else:
                cnt = ((tl.minimum(de, D) - tl.maximum(d0, 0)) * (tl.minimum(he, H) - tl.maximum(h0, 0))
                       * (tl.minimum(we, W) - tl.maximum(w0, 0)))
            acc = acc / cnt.to(tl.float32)
    tl.store(y_ptr + e, acc.to(y_ptr.dtype.element_ty), mask=ok)


@triton.jit
def _ks_pool_global_kernel(x_ptr, y_ptr, R, S, inv_s, IS_MAX: tl.constexpr, BLOCK_R: tl.constexpr,
                           BLOCK_S: tl.constexpr):
    # rows of S contiguous elements -> one max or mean each; [BLOCK_R, BLOCK_S] tiles.
    rows = tl.program_id(0).to(tl.int64) * BLOCK_R + tl.arange(0, BLOCK_R)
    r_ok = rows < R
    if IS_MAX:
        acc = tl.full((BLOCK_R, BLOCK_S), float("-inf"), tl.float32)
    else:
        acc = tl.zeros((BLOCK_R, BLOCK_S), dtype=tl.float32)
    for s0 in range(0, S, BLOCK_S):
        cols = s0 + tl.arange(0, BLOCK_S)
        m = r_ok[:, None] & (cols < S)[None, :]
        if IS_MAX:
            v = tl.load(x_ptr + rows[:, None] * S + cols[None, :], mask=m, other=float("-inf")).to(tl.float32)
            acc = tl.where((v > acc) | (v != v), v, acc)
        else:
            v = tl.load(x_ptr + rows[:, None] * S + cols[None, :], mask=m, other=0.0)
            acc += v.to(tl.float32)
    if IS_MAX:
        nan = tl.max((acc != acc).to(tl.int32), axis=1)
        out = tl.where(nan > 0, float("nan"), tl.max(acc, axis=1))
    else:
        out = tl.sum(acc, axis=1) * inv_s
    tl.store(y_ptr + rows, out.to(y_ptr.dtype.element_ty), mask=r_ok)


def _ks_pool_tuple(v, nd, what):
    if v is None:
        return None
    if isinstance(v, int):
        return (int(v),) * nd
    v = tuple(v)
    if len(v) == 1:
        v = v * nd
    if len(v) != nd:
        raise ValueError(f"pool: {what}={v} for a {nd}-d pool")
    return v


def _ks_pool_out(i, k, s, p, d, ceil):
    o = (i + 2 * p - d * (k - 1) - 1 + (s - 1 if ceil else 0)) // s + 1
    if ceil and (o - 1) * s >= i + p:
        o -= 1
    return o


def _ks_pool_launch(x, nd, osz, ks, st, pad, dil, is_max, count_pad, divisor, adaptive):
    if x.dtype not in (torch.float16, torch.bfloat16, torch.float32):
        raise TypeError(f"pool: input dtype {x.dtype}")
    if x.dim() == nd + 1:
        return _ks_pool_launch(x.unsqueeze(0), nd, osz, ks, st, pad, dil, is_max, count_pad, divisor,
                               adaptive).squeeze(0)
    if x.dim() != nd + 2:
        raise ValueError(f"pool: input of shape {tuple(x.shape)} for a {nd}-d pool")
    if min(osz) <= 0:
        raise ValueError(f"pool: input {tuple(x.shape)} gives output size {tuple(osz)}")
    y = torch.empty((*x.shape[:2], *osz), device=x.device, dtype=x.dtype)
    if y.numel() == 0:
        return y
    x3 = x
    for _ in range(3 - nd):
        x3 = x3.unsqueeze(2)
    lift = 3 - nd
    ks, st, pad, dil = (1,) * lift + ks, (1,) * lift + st, (0,) * lift + pad, (1,) * lift + dil
    osz = (1,) * lift + tuple(osz)
    total = y.numel()
    block = _KS_POOL_BLOCK
    _ks_pool_kernel[(triton.cdiv(total, block),)](
        x3, y, total, x.shape[1], *x3.shape[2:], *osz, *ks, *st, *pad, *dil, *x3.stride(),
        float(divisor or 1.0), IS_MAX=bool(is_max), COUNT_PAD=bool(count_pad), HAS_DIVISOR=bool(divisor),
        ADAPTIVE=bool(adaptive), BLOCK=block, num_warps=_KS_POOL_NUM_WARPS)
    return y


def _ks_max_pool(x, nd, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False):
    """torch's max_pool{nd}d (no indices)."""
    ks = _ks_pool_tuple(kernel_size, nd, "kernel_size")
    st = _ks_pool_tuple(stride, nd, "stride") if stride not in (None, (), []) else ks
    pad = _ks_pool_tuple(padding, nd, "padding")
    dil = _ks_pool_tuple(dilation, nd, "dilation")
    isz = x.shape[-nd:]
    osz = [_ks_pool_out(int(i), k, s, p, d, ceil_mode) for i, k, s, p, d in zip(isz, ks, st, pad, dil)]
    return _ks_pool_launch(x, nd, osz, ks, st, pad, dil, True, False, None, False)


def _ks_avg_pool(x, nd, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
                 divisor_override=None):
    """torch's avg_pool{nd}d."""
    ks = _ks_pool_tuple(kernel_size, nd, "kernel_size")
    st = _ks_pool_tuple(stride, nd, "stride") if stride not in (None, (), []) else ks
    pad = _ks_pool_tuple(padding, nd, "padding")
    isz = x.shape[-nd:]
    osz = [_ks_pool_out(int(i), k, s, p, 1, ceil_mode) for i, k, s, p in zip(isz, ks, st, pad)]
    return _ks_pool_launch(x, nd, osz, ks, st, pad, (1,) * nd, False, count_include_pad, divisor_override, False)


def _ks_adaptive_pool(x, nd, output_size, is_max):
    """torch's adaptive_{avg,max}_pool{nd}d (no indices); output 1 everywhere is a row reduction."""
    isz = [int(i) for i in x.shape[-nd:]]
    out = _ks_pool_tuple(output_size, nd, "output_size")
    osz = [i if o is None else int(o) for i, o in zip(isz, out)]
    if all(o == 1 for o in osz) and x.dim() == nd + 2 and min(isz) > 0 and x.dtype in (
            torch.float16, torch.bfloat16, torch.float32):
        xc = x.contiguous()
        rows, s = int(x.shape[0] * x.shape[1]), 1
        for i in isz:
            s *= i
        y = torch.empty((*x.shape[:2], *osz), device=x.device, dtype=x.dtype)
        if rows == 0:
            return y
        block_s = min(_KS_POOL_BLOCK_S, triton.next_power_of_2(s))
        block_r = max(1, min(_KS_POOL_ROW_ELEMS // block_s, triton.next_power_of_2(rows)))
        _ks_pool_global_kernel[(triton.cdiv(rows, block_r),)](xc, y, rows, s, 1.0 / s, IS_MAX=bool(is_max),
                                                              BLOCK_R=block_r, BLOCK_S=block_s,
                                                              num_warps=_KS_POOL_NUM_WARPS)
        return y
    ks = []
    for i, o in zip(isz, osz):
        if o <= 0:
            raise ValueError(f"adaptive pool: output size {tuple(osz)}")
        ks.append(max(((j + 1) * i + o - 1) // o - (j * i) // o for j in range(o)) if o <= 1024
                  else (i + o - 1) // o + 1)
    return _ks_pool_launch(x, nd, osz, tuple(ks), (1,) * nd, (0,) * nd, (1,) * nd, is_max, False, None, True)
'''


def _kernel(launcher: str) -> LibraryKernel:
    # One source with three launchers, pasted once (the lowering pastes per name).
    return LibraryKernel(name="pool", source=_SOURCE, launcher=launcher)


def _module(info: NodeInfo) -> str:
    if info.module is None or info.module_expr is None:
        raise info.refuse("pooling module not available")
    if len(info.args) != 1 or info.kwargs:
        raise info.refuse("a pooling module called with more than its input")
    if getattr(info.module, "return_indices", False):
        raise info.refuse("return_indices=True (no template writes indices)")
    return info.module_expr


def _max_module(nd: int) -> Callable[[NodeInfo], tuple[LibraryKernel, list[str]]]:
    def entry(info: NodeInfo) -> tuple[LibraryKernel, list[str]]:
        info.float_input()
        m = _module(info)
        return _kernel("_ks_max_pool"), [info.args[0], str(nd), f"{m}.kernel_size", f"{m}.stride",
                                         f"{m}.padding", f"{m}.dilation", f"{m}.ceil_mode"]
    return entry


def _avg_module(nd: int) -> Callable[[NodeInfo], tuple[LibraryKernel, list[str]]]:
    def entry(info: NodeInfo) -> tuple[LibraryKernel, list[str]]:
        info.float_input()
        m = _module(info)
        div = f"{m}.divisor_override" if nd > 1 else "None"
        return _kernel("_ks_avg_pool"), [info.args[0], str(nd), f"{m}.kernel_size", f"{m}.stride",
                                         f"{m}.padding", f"{m}.ceil_mode", f"{m}.count_include_pad", div]
    return entry


def _adaptive_module(nd: int, is_max: bool) -> Callable[[NodeInfo], tuple[LibraryKernel, list[str]]]:
    def entry(info: NodeInfo) -> tuple[LibraryKernel, list[str]]:
        info.float_input()
        m = _module(info)
        return _kernel("_ks_adaptive_pool"), [info.args[0], str(nd), f"{m}.output_size", str(is_max)]
    return entry


_MAX_SIG = ("kernel_size", "stride", "padding", "dilation", "ceil_mode", "return_indices")
_MAX_DEF = {"stride": "None", "padding": "0", "dilation": "1", "ceil_mode": "False", "return_indices": "False"}
_AVG_SIG = ("kernel_size", "stride", "padding", "ceil_mode", "count_include_pad", "divisor_override")
_AVG_DEF = {"stride": "None", "padding": "0", "ceil_mode": "False", "count_include_pad": "True",
            "divisor_override": "None"}


def _max_function(nd: int) -> Callable[[NodeInfo], tuple[LibraryKernel, list[str]]]:
    def entry(info: NodeInfo) -> tuple[LibraryKernel, list[str]]:
        info.float_input()
        a = bind_args(info, _MAX_SIG, _MAX_DEF, skip=1)
        if bound_value(info, _MAX_SIG, "return_indices", False, skip=1) is not False:
            raise info.refuse("return_indices (no template writes indices)")
        return _kernel("_ks_max_pool"), [info.args[0], str(nd), a["kernel_size"], a["stride"], a["padding"],
                                         a["dilation"], a["ceil_mode"]]
    return entry


def _avg_function(nd: int) -> Callable[[NodeInfo], tuple[LibraryKernel, list[str]]]:
    sig = _AVG_SIG if nd > 1 else _AVG_SIG[:-1]

    def entry(info: NodeInfo) -> tuple[LibraryKernel, list[str]]:
        info.float_input()
        a = bind_args(info, sig, _AVG_DEF, skip=1)
        return _kernel("_ks_avg_pool"), [info.args[0], str(nd), *(a[n] for n in _AVG_SIG)]
    return entry


def _adaptive_function(nd: int, is_max: bool) -> Callable[[NodeInfo], tuple[LibraryKernel, list[str]]]:
    sig = ("output_size", "return_indices") if is_max else ("output_size",)

    def entry(info: NodeInfo) -> tuple[LibraryKernel, list[str]]:
        info.float_input()
        a = bind_args(info, sig, {"return_indices": "False"}, skip=1)
        if is_max and bound_value(info, sig, "return_indices", False, skip=1) is not False:
            raise info.refuse("return_indices (no template writes indices)")
        return _kernel("_ks_adaptive_pool"), [info.args[0], str(nd), a["output_size"], str(is_max)]
    return entry


ENTRIES: dict[str, Callable[[NodeInfo], tuple[LibraryKernel, list[str]]]] = {}
for _d in (1, 2, 3):
    ENTRIES[f"nn.MaxPool{_d}d"] = _max_module(_d)
    ENTRIES[f"nn.AvgPool{_d}d"] = _avg_module(_d)
    ENTRIES[f"nn.AdaptiveAvgPool{_d}d"] = _adaptive_module(_d, False)
    ENTRIES[f"nn.AdaptiveMaxPool{_d}d"] = _adaptive_module(_d, True)
    ENTRIES[f"F.max_pool{_d}d"] = _max_function(_d)
    ENTRIES[f"F.avg_pool{_d}d"] = _avg_function(_d)
    ENTRIES[f"F.adaptive_avg_pool{_d}d"] = _adaptive_function(_d, False)
    ENTRIES[f"F.adaptive_max_pool{_d}d"] = _adaptive_function(_d, True)
    ENTRIES[f"torch.max_pool{_d}d"] = _max_function(_d)
ENTRIES["torch.avg_pool1d"] = _avg_function(1)
ENTRIES["torch.adaptive_avg_pool1d"] = _adaptive_function(1, False)
