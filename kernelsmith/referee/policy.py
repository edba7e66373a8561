"""Which torch operators a candidate's `forward` may execute outside Triton kernels.

`strict`: only allocation, views, copies/casts and fills — every FLOP must be in a Triton kernel.
`lenient`: KernelBench's rule — any torch operator, as long as at least one Triton kernel is launched.
"""

from __future__ import annotations

from collections.abc import Mapping

POLICIES = ("strict", "lenient")

# aten operator names (overload stripped) that move, shape or allocate memory but compute nothing.
NON_COMPUTE_OPS = frozenset(
    "aten::" + name
    for name in """
    empty empty_like empty_strided new_empty new_empty_strided zeros zeros_like new_zeros ones ones_like new_ones
    full full_like new_full fill_ zero_ resize_ resize_as_
    view _unsafe_view view_as reshape _reshape_alias as_strided expand expand_as permute transpose transpose_
    t t_ unsqueeze unsqueeze_ squeeze squeeze_ select slice narrow split split_with_sizes chunk unbind alias
    detach detach_ flatten unflatten movedim diagonal unfold contiguous clone copy_ _to_copy to
    lift_fresh lift_fresh_copy _local_scalar_dense is_nonzero item cat stack _foreach_copy_ set_
    """.split()
)


def disallowed_ops(ops: Mapping[str, int], policy: str) -> dict[str, int]:
    """The operators (with counts) that `policy` does not allow."""
    if policy not in POLICIES:
        raise ValueError(f"unknown policy {policy!r}: expected one of {', '.join(POLICIES)}")
    if policy == "lenient":
        return {}
    return {name: n for name, n in ops.items() if name not in NON_COMPUTE_OPS and not name.startswith("prim::")}
