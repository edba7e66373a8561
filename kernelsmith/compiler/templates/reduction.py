"""The `reduction` template: the input viewed as (outer, R, inner) with R the product of a contiguous block of
reduced dims; one program per (outer, inner tile); a fused graph of elementwise ops and sum/mean/max/min/var
reductions over R (softmax, log-softmax, layer norm, RMS norm, ...). One pass when R fits one tile, else a loop
per reduction level plus a write pass; with one level, no full-size output and fewer row programs than SMs, R is
split over programs (partials into a workspace, then a combining launch)."""

from __future__ import annotations

from kernelsmith.compiler.templates.common import _signature

REDUCTION = "reduction"


def reduction_kernel(name: str, doc: str, n_in: int, n_out: int, n_scalar: int, prologue: list[str],
                     single: list[str], looped: list[str], sizes: list[str] | None = None,
                     consts: list[str] | None = None) -> str:
    """`sizes`/`consts` beyond R, I, n_ib / BLOCK_R, BLOCK_I, SINGLE: the split variant's workspaces and
    phase (see `emit._reduction`)."""
    sig = _signature(n_in, n_out, n_scalar, sizes or ["R", "I", "n_ib"], consts or ["BLOCK_R", "BLOCK_I", "SINGLE"])
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
