"""Library kernel: batch, group, instance and (over few long rows) layer normalisation, modules and `F.*` forms.

All three are one pattern: statistics (mean, biased variance) per *row* of a contiguous (N, C, S) view, then an
elementwise apply. A row is a channel across the batch for BatchNorm (N segments of S elements, C apart), an
(n, c) instance for InstanceNorm, an (n, group) slab for GroupNorm. Rows are often few and long (BatchNorm: C
rows of N*S), so the statistics are a split reduction that fills the GPU: kernel 1 gives each (row, split) a
chunk and writes its count, mean and M2 (a Welford state per lane, the lanes combined with Chan's formula: no
catastrophic cancellation from sum-of-squares); kernel 2 combines a row's partials the same way and, in
BatchNorm training, updates the running statistics exactly like torch (momentum, or a cumulative average when
momentum is None; unbiased variance); kernel 3 normalises and applies the per-channel affine, and bumps
`num_batches_tracked` (over long contiguous segments, a program takes a block of columns of one or more
segments: the index arithmetic per segment, not per element).
InstanceNorm with `track_running_stats` averages its per-instance statistics over the batch into the running
buffers (torch's rule) in a small fourth kernel. Everything is read at run time (hidden sizes work); the
block size and target program count are module-level knobs.

LayerNorm is the same pattern with rows of prod(normalized_shape) elements and a per-element affine, which the
apply reads once per block of columns for several rows (re-read per row, 16 rows of a 4M-element affine would
cost the DRAM traffic of x itself). It comes here only when the traced rows are few and long
(`LAYER_NORM_SPLIT_ROWS`, `LAYER_NORM_SPLIT_LENGTH`): one program per row (the fused reduction template) would
leave most of the GPU idle — KernelBench's LayerNorm has 16 rows of 4M elements for 132 multiprocessors.
Otherwise the entry declines and the fused template, which also fuses the norm's neighbours, keeps it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from kernelsmith.compiler.library import LibraryKernel, NodeInfo, SeedUnsupported, TensorInfo
from kernelsmith.compiler.templates.conv import bind_args

_SOURCE = '''
_KS_NORM_BLOCK = 1024
_KS_NORM_APPLY_BLOCK = 1024
_KS_NORM_NUM_WARPS = 4
_KS_NORM_SEG_MIN = 512
_ks_norm_programs = 1056


@triton.jit
def _ks_norm_stats_kernel(x_ptr, part_ptr, total, L, row_stride, a_stride, chunk, SPLIT,
                          CONTIG: tl.constexpr, BLOCK: tl.constexpr):
    # (count, mean, M2) of elements [s*chunk, (s+1)*chunk) of row r; element e is at r*row_stride +
    # (e // L) * a_stride + e % L, or at r*row_stride + e when the row is contiguous (CONTIG: no per-element
    # integer division, vector loads). Each lane keeps its own Welford state; the lanes are combined once at
    # the end with Chan's formula (no reduction across warps inside the loop).
    r = tl.program_id(0)
    s = tl.program_id(1)
    base = r.to(tl.int64) * row_stride
    start = s.to(tl.int64) * chunk
    cnt = tl.zeros((BLOCK,), dtype=tl.float32)
    mean = tl.zeros((BLOCK,), dtype=tl.float32)
    m2 = tl.zeros((BLOCK,), dtype=tl.float32)
    for it in range(0, tl.cdiv(chunk, BLOCK)):
        # chunk is a multiple of BLOCK: a lane drops out only at the row's end and stays out, so a lane still in
        # has seen exactly it + 1 elements (one reciprocal per iteration, not a division per element).
        idx = it * BLOCK + tl.arange(0, BLOCK)
        e = start + idx
        ok = (idx < chunk) & (e < total)
        if CONTIG:
            v = tl.load(x_ptr + base + e, mask=ok, other=0.0).to(tl.float32)
        else:
            v = tl.load(x_ptr + base + (e // L) * a_stride + e % L, mask=ok, other=0.0).to(tl.float32)
        cnt += ok.to(tl.float32)
        delta = v - mean
        mean += tl.where(ok, delta * (1.0 / (it + 1.0)), 0.0)
        m2 += tl.where(ok, delta * (v - mean), 0.0)
    n = tl.sum(cnt, axis=0)
    mu = tl.sum(cnt * mean, axis=0) / tl.maximum(n, 1.0)
    d = mean - mu
    p = part_ptr + (r * SPLIT + s) * 3
    tl.store(p, n)
    tl.store(p + 1, mu)
    tl.store(p + 2, tl.sum(m2, axis=0) + tl.sum(cnt * d * d, axis=0))


@triton.jit
def _ks_norm_combine_kernel(part_ptr, mean_ptr, var_ptr, rm_ptr, rv_ptr, nbt_ptr, SPLIT, momentum,
                            UPDATE: tl.constexpr, CUMULATIVE: tl.constexpr, BLOCK_S: tl.constexpr):
    # One row: combine its partials; in BatchNorm training also move the running statistics.
    r = tl.program_id(0)
    j = tl.arange(0, BLOCK_S)
    ok = j < SPLIT
    p = part_ptr + (r * SPLIT + j) * 3
    cnt = tl.load(p, mask=ok, other=0.0)
    mu = tl.load(p + 1, mask=ok, other=0.0)
    m2 = tl.load(p + 2, mask=ok, other=0.0)
    n = tl.sum(cnt, axis=0)
    mean = tl.sum(cnt * mu, axis=0) / n
    d = tl.where(ok, mu - mean, 0.0)
    m2 = tl.sum(m2, axis=0) + tl.sum(cnt * d * d, axis=0)
    tl.store(mean_ptr + r, mean)
    tl.store(var_ptr + r, m2 / n)
    if UPDATE:
        if CUMULATIVE:
            f = 1.0 / (tl.load(nbt_ptr).to(tl.float32) + 1.0)
        else:
            f = momentum
        rm = tl.load(rm_ptr + r).to(tl.float32)
        rv = tl.load(rv_ptr + r).to(tl.float32)
        tl.store(rm_ptr + r, (1.0 - f) * rm + f * mean)
        tl.store(rv_ptr + r, (1.0 - f) * rv + f * (m2 / (n - 1.0)))


@triton.jit
def _ks_norm_running_kernel(mean_ptr, var_ptr, rm_ptr, rv_ptr, N, C, count, momentum, BLOCK: tl.constexpr):
    # InstanceNorm's running statistics: the batch average of the per-instance update (torch's rule).
    c = tl.program_id(0)
    sm = tl.zeros((BLOCK,), dtype=tl.float32)
    sv = tl.zeros((BLOCK,), dtype=tl.float32)
    for n0 in range(0, N, BLOCK):
        n = n0 + tl.arange(0, BLOCK)
        ok = n < N
        sm += tl.load(mean_ptr + n * C + c, mask=ok, other=0.0)
        sv += tl.load(var_ptr + n * C + c, mask=ok, other=0.0)
    mean = tl.sum(sm, axis=0) / N
    var = tl.sum(sv, axis=0) / N * (count / (count - 1.0))
    rm = tl.load(rm_ptr + c).to(tl.float32)
    rv = tl.load(rv_ptr + c).to(tl.float32)
    tl.store(rm_ptr + c, (1.0 - momentum) * rm + momentum * mean)
    tl.store(rv_ptr + c, (1.0 - momentum) * rv + momentum * var)


@triton.jit
def _ks_norm_apply_kernel(x_ptr, y_ptr, mean_ptr, var_ptr, w_ptr, b_ptr, nbt_ptr, total, S, C, RDIV, RMOD, eps,
                          HAS_W: tl.constexpr, HAS_B: tl.constexpr, BUMP: tl.constexpr, BLOCK: tl.constexpr):
    # y = (x - mean[row]) / sqrt(var[row] + eps) * w[ch] + b[ch], x contiguous (N, C, S).
    pid = tl.program_id(0)
    e = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    ok = e < total
    row = (e // RDIV) % RMOD
    x = tl.load(x_ptr + e, mask=ok, other=0.0).to(tl.float32)
    mean = tl.load(mean_ptr + row, mask=ok, other=0.0).to(tl.float32)
    var = tl.load(var_ptr + row, mask=ok, other=1.0).to(tl.float32)
    y = (x - mean) / tl.sqrt(var + eps)
    if HAS_W or HAS_B:
        ch = (e // S) % C
        if HAS_W:
            y = y * tl.load(w_ptr + ch, mask=ok, other=1.0).to(tl.float32)
        if HAS_B:
            y = y + tl.load(b_ptr + ch, mask=ok, other=0.0).to(tl.float32)
    tl.store(y_ptr + e, y.to(y_ptr.dtype.element_ty), mask=ok)
    if BUMP:
        if pid == 0:
            tl.store(nbt_ptr, tl.load(nbt_ptr) + 1)


@triton.jit
def _ks_norm_apply_seg_kernel(x_ptr, y_ptr, mean_ptr, var_ptr, w_ptr, b_ptr, nbt_ptr, S, C, QDIV, QMOD, Q, QPP, eps,
                              PER_ELEM: tl.constexpr, HAS_W: tl.constexpr, HAS_B: tl.constexpr,
                              BUMP: tl.constexpr, BLOCK: tl.constexpr):
    # The same map over segments of S contiguous elements that share their statistics row and, unless PER_ELEM
    # (LayerNorm's affine per element of the row), their channel: segment q is channel q % C of row
    # (q // QDIV) % QMOD. A program takes one block of columns of QPP consecutive segments: the index arithmetic
    # is per segment, and LayerNorm's weight and bias block is read once for all of them (read per row, a
    # 4M-element affine costs DRAM traffic equal to x's own).
    col = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = col < S
    if PER_ELEM:
        if HAS_W:
            w = tl.load(w_ptr + col, mask=ok, other=1.0).to(tl.float32)
        if HAS_B:
            b = tl.load(b_ptr + col, mask=ok, other=0.0).to(tl.float32)
    for i in range(0, QPP):
        q = tl.minimum(tl.program_id(1) * QPP + i, Q - 1)  # a spare turn of the last program stores nothing
        live = col < tl.where(tl.program_id(1) * QPP + i < Q, S, 0)
        off = q.to(tl.int64) * S + col
        row = (q // QDIV) % QMOD
        mean = tl.load(mean_ptr + row).to(tl.float32)
        rstd = 1.0 / tl.sqrt_rn(tl.load(var_ptr + row).to(tl.float32) + eps)
        x = tl.load(x_ptr + off, mask=live, other=0.0).to(tl.float32)
        y = (x - mean) * rstd
        if PER_ELEM:
            if HAS_W:
                y = y * w
            if HAS_B:
                y = y + b
        else:
            if HAS_W:
                y = y * tl.load(w_ptr + q % C).to(tl.float32)
            if HAS_B:
                y = y + tl.load(b_ptr + q % C).to(tl.float32)
        tl.store(y_ptr + off, y.to(y_ptr.dtype.element_ty), mask=live)
    if BUMP:
        if (tl.program_id(0) == 0) & (tl.program_id(1) == 0):
            tl.store(nbt_ptr, tl.load(nbt_ptr) + 1)


def _ks_norm_stats(x, rows, length, row_stride, a_stride, seg, rm=None, rv=None, nbt=None, momentum=0.0):
    """Per-row (mean, biased var) in fp32, a split reduction; rows of `length` elements in segments of `seg`."""
    mean = torch.empty(rows, device=x.device, dtype=torch.float32)
    var = torch.empty(rows, device=x.device, dtype=torch.float32)
    block = min(_KS_NORM_BLOCK, triton.next_power_of_2(max(length, 16)))
    split = max(1, min(triton.cdiv(_ks_norm_programs, rows), triton.cdiv(length, block), 1024))
    chunk = triton.cdiv(triton.cdiv(length, split), block) * block
    split = triton.cdiv(length, chunk)
    part = torch.empty((rows, split, 3), device=x.device, dtype=torch.float32)
    _ks_norm_stats_kernel[(rows, split)](x, part, length, seg, row_stride, a_stride, chunk, split,
                                         CONTIG=seg == length, BLOCK=block, num_warps=_KS_NORM_NUM_WARPS)
    update = rm is not None
    cumulative = update and momentum is None
    _ks_norm_combine_kernel[(rows,)](part, mean, var, rm if update else mean, rv if update else var,
                                     nbt if cumulative else mean, split, float(momentum or 0.0),
                                     UPDATE=update, CUMULATIVE=cumulative,
                                     BLOCK_S=triton.next_power_of_2(split))
    return mean, var


def _ks_norm_apply(x, mean, var, weight, bias, eps, C, S, rdiv, rmod, nbt=None, per_elem=False):
    """y from x contiguous (N, C, S) and per-row statistics, row of element e = (e // rdiv) % rmod; the
    affine per channel, or per element of S when `per_elem` (LayerNorm: C == 1, S the row)."""
    y = torch.empty_like(x)
    total = x.numel()
    block = _KS_NORM_APPLY_BLOCK
    w = weight if weight is not None else mean
    b = bias if bias is not None else mean
    n = nbt if nbt is not None else mean
    segments = total // S
    cols = triton.cdiv(S, block)
    # LayerNorm: as many rows per program as keep about _ks_norm_programs programs (its affine is read once
    # per program); per-channel affines: one segment per program.
    per = max(1, min(segments, cols * segments // _ks_norm_programs)) if per_elem else 1
    if triton.cdiv(segments, per) <= 65535 and (per_elem or (S >= _KS_NORM_SEG_MIN and rdiv % S == 0)):
        # Long contiguous segments: no per-element index division.
        _ks_norm_apply_seg_kernel[(cols, triton.cdiv(segments, per))](
            x, y, mean, var, w, b, n, S, C, rdiv // S, rmod, segments, per, float(eps), PER_ELEM=per_elem,
            HAS_W=weight is not None, HAS_B=bias is not None, BUMP=nbt is not None, BLOCK=block,
            num_warps=_KS_NORM_NUM_WARPS)
        return y
    if per_elem:
        C, S = S, 1  # the flat kernel's channel of e is (e // S) % C: here the element's place in its row
    _ks_norm_apply_kernel[(triton.cdiv(total, block),)](
        x, y, mean, var, w, b, n, total, S, C, rdiv, rmod, float(eps),
        HAS_W=weight is not None, HAS_B=bias is not None, BUMP=nbt is not None, BLOCK=block,
        num_warps=_KS_NORM_NUM_WARPS)
    return y


def _ks_norm_check(x, what):
    if x.dim() < 2:
        raise ValueError(f"{what}: input of shape {tuple(x.shape)} (expected (N, C, ...))")
    if x.dtype not in (torch.float16, torch.bfloat16, torch.float32):
        raise TypeError(f"{what}: input dtype {x.dtype}")
    return x.contiguous(), int(x.shape[0]), int(x.shape[1]), x.numel() // max(int(x.shape[0] * x.shape[1]), 1)


def _ks_batch_norm(x, running_mean, running_var, weight=None, bias=None, training=False, momentum=0.1,
                   eps=1e-5, num_batches_tracked=None):
    """torch's batch norm; `num_batches_tracked` given (a module in training with running stats): it is
    bumped, and a None momentum means the cumulative average (the module's rule)."""
    x, N, C, S = _ks_norm_check(x, "batch_norm")
    if x.numel() == 0:
        return torch.empty_like(x)
    if training or running_mean is None or running_var is None:
        if N * S <= 1:
            raise ValueError(f"Expected more than 1 value per channel when training, got input size {tuple(x.shape)}")
        update = training and running_mean is not None and running_var is not None
        if not update:
            num_batches_tracked = None
        elif momentum is None and num_batches_tracked is None:
            momentum = 0.0
        mean, var = _ks_norm_stats(x, C, N * S, S, C * S, S, running_mean if update else None,
                                   running_var if update else None, num_batches_tracked, momentum)
        return _ks_norm_apply(x, mean, var, weight, bias, eps, C, S, S, C, num_batches_tracked)
    return _ks_norm_apply(x, running_mean, running_var, weight, bias, eps, C, S, S, C)


def _ks_group_norm(x, num_groups, weight=None, bias=None, eps=1e-5):
    """torch's group norm: statistics per (n, group) over its C/G channels and all positions."""
    x, N, C, S = _ks_norm_check(x, "group_norm")
    G = int(num_groups)
    if C % G:
        raise ValueError(f"group_norm: {C} channels in {G} groups")
    if x.numel() == 0:
        return torch.empty_like(x)
    length = (C // G) * S
    mean, var = _ks_norm_stats(x, N * G, length, length, 0, length)
    return _ks_norm_apply(x, mean, var, weight, bias, eps, C, S, length, N * G)


def _ks_instance_norm(x, running_mean=None, running_var=None, weight=None, bias=None, use_input_stats=True,
                      momentum=0.1, eps=1e-5):
    """torch's instance norm; with running buffers and input statistics, the buffers get the batch average."""
    x, N, C, S = _ks_norm_check(x, "instance_norm")
    if x.numel() == 0:
        return torch.empty_like(x)
    if not use_input_stats:
        return _ks_norm_apply(x, running_mean, running_var, weight, bias, eps, C, S, S, C)
    if S <= 1:
        raise ValueError(f"Expected more than 1 spatial element when training, got input size {tuple(x.shape)}")
    mean, var = _ks_norm_stats(x, N * C, S, S, 0, S)
    if running_mean is not None and running_var is not None:
        _ks_norm_running_kernel[(C,)](mean, var, running_mean, running_var, N, C, float(S),
                                      float(momentum or 0.0), BLOCK=min(triton.next_power_of_2(N), 1024))
    return _ks_norm_apply(x, mean, var, weight, bias, eps, C, S, S, N * C)


def _ks_layer_norm(x, normalized_shape, weight=None, bias=None, eps=1e-5):
    """torch's layer norm: statistics per row of prod(normalized_shape) trailing elements (a split reduction),
    the affine per element of that span."""
    shape = tuple(normalized_shape) if isinstance(normalized_shape, (list, tuple, torch.Size)) else (
        int(normalized_shape),)
    if tuple(x.shape[x.dim() - len(shape):]) != shape:
        raise ValueError(f"layer_norm: normalized_shape {shape} does not end input shape {tuple(x.shape)}")
    if x.dtype not in (torch.float16, torch.bfloat16, torch.float32):
        raise TypeError(f"layer_norm: input dtype {x.dtype}")
    x = x.contiguous()
    length = _ks_prod(shape)
    if x.numel() == 0:
        return torch.empty_like(x)
    rows = x.numel() // length
    w = weight.contiguous() if weight is not None else None
    b = bias.contiguous() if bias is not None else None
    mean, var = _ks_norm_stats(x, rows, length, length, 0, length)
    return _ks_norm_apply(x, mean, var, w, b, eps, 1, length, length, rows, per_elem=True)
'''


def _kernel(launcher: str) -> LibraryKernel:
    # One source (one paste) with three launchers: the lowering pastes per name, so they share the name "norm".
    return LibraryKernel(name="norm", source=_SOURCE, launcher=launcher)


def _module_parts(info: NodeInfo) -> tuple[str, str, str]:
    if info.module is None or info.module_expr is None:
        raise info.refuse("norm module not available")
    if len(info.args) != 1 or info.kwargs:
        raise info.refuse("a norm module called with more than its input")
    p = info.params
    return info.module_expr, p.get("weight") or "None", p.get("bias") or "None"


def _batch_norm_module(info: NodeInfo) -> tuple[LibraryKernel, list[str]]:
    x = info.float_input()
    m, w, b = _module_parts(info)
    want = {"nn.BatchNorm1d": (2, 3), "nn.BatchNorm2d": (4,), "nn.BatchNorm3d": (5,)}.get(info.key, ())
    if want and len(x.shape) not in want:
        raise info.refuse(f"input of {len(x.shape)} dims")
    rm = info.params.get("running_mean") or f"{m}.running_mean"
    rv = info.params.get("running_var") or f"{m}.running_var"
    # torch: batch statistics in training or without running buffers; the buffers move only in training.
    nbt = f"({m}.num_batches_tracked if {m}.training and {m}.track_running_stats else None)"
    return _kernel("_ks_batch_norm"), [info.args[0], rm, rv, w, b, f"{m}.training", f"{m}.momentum",
                                       f"{m}.eps", nbt]


def _group_norm_module(info: NodeInfo) -> tuple[LibraryKernel, list[str]]:
    info.float_input()
    m, w, b = _module_parts(info)
    return _kernel("_ks_group_norm"), [info.args[0], f"{m}.num_groups", w, b, f"{m}.eps"]


def _instance_norm_module(info: NodeInfo) -> tuple[LibraryKernel, list[str]]:
    x = info.float_input()
    m, w, b = _module_parts(info)
    nd = int(info.key[-2])
    if len(x.shape) != nd + 2:
        raise info.refuse(f"input of {len(x.shape)} dims (unbatched instance norm is not supported)")
    rm = info.params.get("running_mean") or "None"
    rv = info.params.get("running_var") or "None"
    use = f"({m}.training or not {m}.track_running_stats)"
    mom = f"({m}.momentum if {m}.momentum is not None else 0.0)"
    return _kernel("_ks_instance_norm"), [info.args[0], rm, rv, w, b, use, mom, f"{m}.eps"]


LAYER_NORM_SPLIT_ROWS = 512  # fewer traced rows than this (about 4 per multiprocessor) ...
LAYER_NORM_SPLIT_LENGTH = 8192  # ... of at least this many elements: the split reduction


def _layer_norm(info: NodeInfo, x: TensorInfo, normalized: tuple[int, ...], call: list[str]) -> tuple[
        LibraryKernel, list[str]]:
    length = 1
    for d in normalized:
        length *= int(d)
    rows = 1
    for d in x.shape[:len(x.shape) - len(normalized)]:
        rows *= int(d)
    if rows >= LAYER_NORM_SPLIT_ROWS or length < LAYER_NORM_SPLIT_LENGTH:
        raise info.decline(f"{rows} rows of {length}: the fused reduction template fills the GPU")
    return _kernel("_ks_layer_norm"), call


def _layer_norm_module(info: NodeInfo) -> tuple[LibraryKernel, list[str]]:
    x = info.float_input()
    m, w, b = _module_parts(info)
    normalized = tuple(info.hyper.get("normalized_shape") or ())
    if not normalized:
        raise info.decline("normalized_shape unknown")
    return _layer_norm(info, x, normalized, [info.args[0], f"{m}.normalized_shape", w, b, f"{m}.eps"])


def _or_templates(entry: Callable[[NodeInfo], tuple[LibraryKernel, list[str]]]) -> Callable[
        [NodeInfo], tuple[LibraryKernel, list[str]]]:
    """LayerNorm had the fused template before it had this entry: any form the entry cannot take goes back there."""
    def wrapped(info: NodeInfo) -> tuple[LibraryKernel, list[str]]:
        try:
            return entry(info)
        except SeedUnsupported as exc:
            raise info.decline(str(exc)) from None
    return wrapped


_LN_SIG = ("normalized_shape", "weight", "bias", "eps")
_LN_DEF = {"weight": "None", "bias": "None", "eps": "1e-05"}


def _layer_norm_functional(info: NodeInfo) -> tuple[LibraryKernel, list[str]]:
    x = info.float_input()
    if "input" in info.kwargs:
        raise info.decline("input= given by keyword")
    shape = info.values[1] if len(info.values) > 1 else info.kwvalues.get("normalized_shape")
    if isinstance(shape, int):
        shape = (shape,)
    if not isinstance(shape, (list, tuple)) or not all(type(d) is int for d in shape):
        raise info.decline("normalized_shape not a constant")
    a = bind_args(info, _LN_SIG, _LN_DEF, skip=1)
    return _layer_norm(info, x, tuple(shape), [info.args[0], *(a[n] for n in _LN_SIG)])


_BN_SIG = ("running_mean", "running_var", "weight", "bias", "training", "momentum", "eps")
_BN_DEF = {"weight": "None", "bias": "None", "training": "False", "momentum": "0.1", "eps": "1e-05"}
_GN_SIG = ("num_groups", "weight", "bias", "eps")
_GN_DEF = {"weight": "None", "bias": "None", "eps": "1e-05"}
_IN_SIG = ("running_mean", "running_var", "weight", "bias", "use_input_stats", "momentum", "eps")
_IN_DEF = {"running_mean": "None", "running_var": "None", "weight": "None", "bias": "None",
           "use_input_stats": "True", "momentum": "0.1", "eps": "1e-05"}


def _functional(launcher: str, sig: Sequence[str],
                defaults: dict[str, str]) -> Callable[[NodeInfo], tuple[LibraryKernel, list[str]]]:
    def entry(info: NodeInfo) -> tuple[LibraryKernel, list[str]]:
        info.float_input()
        if "input" in info.kwargs:
            raise info.refuse("input= given by keyword")
        a = bind_args(info, sig, defaults, skip=1)
        return _kernel(launcher), [info.args[0], *(a[n] for n in sig)]
    return entry


ENTRIES: dict[str, Callable[[NodeInfo], tuple[LibraryKernel, list[str]]]] = {
    "nn.GroupNorm": _group_norm_module,
    "nn.LayerNorm": _or_templates(_layer_norm_module),
    "F.layer_norm": _or_templates(_layer_norm_functional),
    "F.batch_norm": _functional("_ks_batch_norm", _BN_SIG, _BN_DEF),
    "F.group_norm": _functional("_ks_group_norm", _GN_SIG, _GN_DEF),
    "F.instance_norm": _functional("_ks_instance_norm", _IN_SIG, _IN_DEF),
}
for _d in (1, 2, 3):
    ENTRIES[f"nn.BatchNorm{_d}d"] = _batch_norm_module
    ENTRIES[f"nn.InstanceNorm{_d}d"] = _instance_norm_module
