"""Triton text templates for the seed generator (`seed.py`): per-op expressions and the three kernel shapes.

Everything here returns source text. The generated program computes in fp32 inside every kernel and casts once
when storing. Every kernel reads its external tensor operands through one rule, so broadcasting needs no extra
code: operand `k` of a kernel whose iteration domain (flattened, contiguous) has linear index `i` is read at
`p{k}[i]` when it has the domain's shape (`B{k} == 0`) or at `p{k}[(i // i{k}) % s{k}]` when its non-broadcast
dims form one block of the domain (per-channel bias `(C, 1, 1)`, per-column weight `(N,)`, a scalar): the
Python helper `_ks_bc` decides at run time, from the actual shapes, and materialises anything else.

Templates:
- `elementwise`: one program per BLOCK of the flattened output; a fused chain of elementwise ops.
- `reduction`: the input viewed as (outer, R, inner) with R the product of a contiguous block of reduced dims;
  one program per (outer, inner tile); a fused graph of elementwise ops and sum/mean/max/min/var reductions over
  R (softmax, log-softmax, layer norm, RMS norm, ...). One pass when R fits one tile, else a loop per
  reduction level plus a write pass.
- `matmul_epilogue`: `tl.dot` tiles with fp32 accumulation, grouped tile order, an elementwise epilogue in
  registers; nn.Linear weights are read transposed in place, batched operands through a second grid axis.
"""

from __future__ import annotations

import math

import torch

ELEMENTWISE = "elementwise"
REDUCTION = "reduction"
MATMUL = "matmul_epilogue"

IMPORTS = ["import torch", "import torch.nn as nn", "import triton", "import triton.language as tl"]

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


def _pow(a: str, c: float) -> str:
    if c == int(c) and abs(c) <= 4:
        n = int(abs(c))
        body = " * ".join([a] * n) if n else "1.0"
        return f"(1.0 / ({body}))" if c < 0 else f"({body})"
    if c == 0.5:
        return f"tl.sqrt({a})"
    if c == -0.5:
        return f"(1.0 / tl.sqrt({a}))"
    return f"tl.exp({literal(c)} * tl.log({a}))"


def _softplus(a: str, b: str, threshold: str) -> str:
    return f"tl.where({a} * {b} > {threshold}, {a}, tl.log(1.0 + tl.exp({a} * {b})) / {b})"


def ew_expr(op: str, a: list[str], p: dict) -> str:
    """The fp32 Triton expression for elementwise `op` over operand expressions `a` with parameters `p`."""
    x = a[0] if a else ""
    simple = {
        "add": lambda: f"{a[0]} + {a[1]}",
        "sub": lambda: f"{a[0]} - {a[1]}",
        "mul": lambda: f"{a[0]} * {a[1]}",
        "div": lambda: f"{a[0]} / {a[1]}",
        "neg": lambda: f"-{x}",
        "maximum": lambda: f"tl.maximum({a[0]}, {a[1]})",
        "minimum": lambda: f"tl.minimum({a[0]}, {a[1]})",
        "relu": lambda: f"tl.maximum({x}, 0.0)",
        "relu6": lambda: f"tl.minimum(tl.maximum({x}, 0.0), 6.0)",
        "sigmoid": lambda: f"1.0 / (1.0 + tl.exp(-{x}))",
        "silu": lambda: f"{x} / (1.0 + tl.exp(-{x}))",
        "tanh": lambda: f"_ks_tanh({x})",
        "gelu": lambda: f"0.5 * {x} * (1.0 + tl.erf({x} * 0.7071067811865476))",
        "gelu_tanh": lambda: (f"0.5 * {x} * (1.0 + _ks_tanh(0.7978845608028654 * ({x} + 0.044715 * {x} * {x} "
                              f"* {x})))"),
        "leaky_relu": lambda: f"tl.where({x} > 0.0, {x}, {x} * {a[1]})",          # a[1]: the slope
        "elu": lambda: f"tl.where({x} > 0.0, {x}, {a[1]} * (tl.exp({x}) - 1.0))",  # a[1]: alpha
        "selu": lambda: (f"1.0507009873554805 * tl.where({x} > 0.0, {x}, 1.6732632423543772 * "
                         f"(tl.exp({x}) - 1.0))"),
        "softplus": lambda: _softplus(x, a[1], a[2]),                               # beta, threshold
        "mish": lambda: f"{x} * _ks_tanh({_softplus(x, '1.0', '20.0')})",
        "hardsigmoid": lambda: f"tl.minimum(tl.maximum({x} / 6.0 + 0.5, 0.0), 1.0)",
        "hardswish": lambda: f"{x} * tl.minimum(tl.maximum({x} / 6.0 + 0.5, 0.0), 1.0)",
        "logsigmoid": lambda: f"tl.minimum({x}, 0.0) - tl.log(1.0 + tl.exp(-tl.abs({x})))",
        "softsign": lambda: f"{x} / (1.0 + tl.abs({x}))",
        "exp": lambda: f"tl.exp({x})",
        "log": lambda: f"tl.log({x})",
        "abs": lambda: f"tl.abs({x})",
        "sqrt": lambda: f"tl.sqrt({x})",
        "rsqrt": lambda: f"1.0 / tl.sqrt({x})",
        "reciprocal": lambda: f"1.0 / {x}",
        "erf": lambda: f"tl.erf({x})",
        "sin": lambda: f"tl.sin({x})",
        "cos": lambda: f"tl.cos({x})",
        "floor": lambda: f"tl.floor({x})",
        "ceil": lambda: f"tl.ceil({x})",
        "square": lambda: f"{x} * {x}",
        "log1p": lambda: f"tl.log(1.0 + {x})",
        "expm1": lambda: f"tl.exp({x}) - 1.0",
        "log2": lambda: f"tl.log2({x})",
        "log10": lambda: f"tl.log({x}) * 0.4342944819032518",
        "exp2": lambda: f"tl.exp2({x})",
        "sign": lambda: f"tl.where({x} > 0.0, 1.0, tl.where({x} < 0.0, -1.0, {x}))",
        "trunc": lambda: f"tl.where({x} < 0.0, tl.ceil({x}), tl.floor({x}))",
        "pow": lambda: _pow(x, p["exponent"]),
        "rpow": lambda: f"tl.exp({x} * {literal(math.log(p['base']))})",
        "identity": lambda: x,
    }
    if op in simple:
        return simple[op]()
    if op == "clamp":
        out = x
        if p.get("min"):
            out = f"tl.maximum({out}, {a[1]})"
        if p.get("max"):
            out = f"tl.minimum({out}, {a[-1]})"
        return out
    if op == "cast":  # round to the target precision; arithmetic continues in fp32
        dt = p["to"]
        if dt in (torch.float16, torch.bfloat16):
            return f"{x}.to({_TL_DTYPES[dt]}).to(tl.float32)"
        return x
    raise KeyError(op)


EW_OPS = frozenset(
    "add sub mul div neg maximum minimum relu relu6 sigmoid silu tanh gelu gelu_tanh leaky_relu elu selu softplus "
    "mish hardsigmoid hardswish logsigmoid softsign exp log abs sqrt rsqrt reciprocal erf sin cos floor ceil "
    "square log1p expm1 log2 log10 exp2 sign trunc pow rpow identity clamp cast".split()
)


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


def elementwise_kernel(name: str, doc: str, n_in: int, n_out: int, n_scalar: int, body: list[str]) -> str:
    sig = _signature(n_in, n_out, n_scalar, ["n"], ["BLOCK"])
    lines = [
        "@triton.jit",
        f"def {name}({sig}):",
        f"    # {doc}",
        "    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)",
        "    mask = offs < n",
    ]
    return "\n".join(lines + body) + "\n"


def reduction_kernel(name: str, doc: str, n_in: int, n_out: int, n_scalar: int, prologue: list[str],
                     single: list[str], looped: list[str]) -> str:
    sig = _signature(n_in, n_out, n_scalar, ["R", "I", "n_ib"], ["BLOCK_R", "BLOCK_I", "SINGLE"])
    lines = [
        "@triton.jit",
        f"def {name}({sig}):",
        f"    # {doc}",
        "    # The input is viewed as (outer, R, I): one program per (outer row, tile of I); reductions over R.",
        "    pid = tl.program_id(0)",
        "    o = (pid // n_ib).to(tl.int64)",
        "    ii = (pid % n_ib) * BLOCK_I + tl.arange(0, BLOCK_I)",
        "    rmask = (ii < I)[None, :]",
        "    rl = o * I + ii[None, :]  # linear index of the reduced output, shape [1, BLOCK_I]",
        "    base = o * R * I",
    ]
    lines += prologue
    lines += ["    if SINGLE:"] + single + ["    else:"] + looped
    return "\n".join(lines) + "\n"


def full_index(rr: str, pad: str) -> list[str]:
    return [
        f"{pad}fmask = ({rr}[:, None] < R) & rmask",
        f"{pad}fl = base + {rr}[:, None].to(tl.int64) * I + ii[None, :]",
    ]


def matmul_kernel(name: str, doc: str, n_in: int, n_out: int, n_scalar: int, precision: str | None,
                  epilogue: list[str], acc_var: str, upcast: bool = False) -> str:
    """`upcast` (bf16 operands): a constexpr UPCAST converts the tiles to fp32 before `tl.dot`; the launcher sets
    it only on the CPU, where Triton's interpreter computes bf16 `tl.dot` wrongly."""
    sizes = ["a_ptr", "b_ptr", "M", "N", "K", "s_ab", "s_am", "s_ak", "s_bb", "s_bk", "s_bn"]
    consts = ["BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M"] + (["UPCAST"] if upcast else [])
    sig = _signature(n_in, n_out, n_scalar, sizes, consts)
    prec = f', input_precision="{precision}"' if precision else ""
    up = ["        if UPCAST:", "            a = a.to(tl.float32)", "            b = b.to(tl.float32)"] if upcast else []
    lines = [
        "@triton.jit",
        f"def {name}({sig}):",
        f"    # {doc}",
        "    pid = tl.program_id(0)",
        "    bt = tl.program_id(1).to(tl.int64)",
        "    num_pid_m = tl.cdiv(M, BLOCK_M)",
        "    num_pid_n = tl.cdiv(N, BLOCK_N)",
        "    num_pid_in_group = GROUP_M * num_pid_n",
        "    group_id = pid // num_pid_in_group",
        "    first_pid_m = group_id * GROUP_M",
        "    group_size_m = min(num_pid_m - first_pid_m, GROUP_M)",
        "    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)",
        "    pid_n = (pid % num_pid_in_group) // group_size_m",
        "    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)",
        "    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)",
        "    offs_am = offs_m % M  # wrapped rows/cols: in-bounds loads, results masked on store",
        "    offs_bn = offs_n % N",
        "    offs_k = tl.arange(0, BLOCK_K)",
        "    a_ptrs = a_ptr + bt * s_ab + offs_am[:, None].to(tl.int64) * s_am + offs_k[None, :] * s_ak",
        "    b_ptrs = b_ptr + bt * s_bb + offs_k[:, None] * s_bk + offs_bn[None, :].to(tl.int64) * s_bn",
        "    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)",
        "    for k0 in range(0, K, BLOCK_K):",
        "        k_mask = offs_k < K - k0",
        "        a = tl.load(a_ptrs, mask=k_mask[None, :], other=0.0)",
        "        b = tl.load(b_ptrs, mask=k_mask[:, None], other=0.0)",
        *up,
        f"        acc = tl.dot(a, b, acc{prec})",
        "        a_ptrs += BLOCK_K * s_ak",
        "        b_ptrs += BLOCK_K * s_bk",
        "    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)",
        "    lin = bt * M * N + offs_m[:, None].to(tl.int64) * N + offs_n[None, :]",
        f"    {acc_var} = acc",
    ]
    return "\n".join(lines + epilogue) + "\n"
