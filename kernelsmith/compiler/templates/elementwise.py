"""The `elementwise` template: one program per BLOCK of the flattened output; a fused chain of elementwise ops,
and the fp32 Triton expression of every elementwise op the lowering produces."""

from __future__ import annotations

import math

import torch

from kernelsmith.compiler.templates.common import _TL_DTYPES, _signature, literal

ELEMENTWISE = "elementwise"


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


_COMPARE = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}


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
        # selections: booleans are 1.0 / 0.0 inside a kernel (comparisons: `_COMPARE`), stored as torch.bool
        "logical_not": lambda: f"tl.where({x} != 0.0, 0.0, 1.0)",
        "where": lambda: f"tl.where({a[0]} != 0.0, {a[1]}, {a[2]})",           # where(cond, a, b)
        "masked_fill": lambda: f"tl.where({a[1]} != 0.0, {a[2]}, {a[0]})",     # masked_fill(x, mask, value)
    }
    if op in simple:
        return simple[op]()
    if op in _COMPARE:
        return f"tl.where({a[0]} {_COMPARE[op]} {a[1]}, 1.0, 0.0)"
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
    "square log1p expm1 log2 log10 exp2 sign trunc pow rpow identity clamp cast logical_not where masked_fill".split()
) | frozenset(_COMPARE)


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
