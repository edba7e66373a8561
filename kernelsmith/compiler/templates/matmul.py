"""The `matmul_epilogue` template: `tl.dot` tiles with fp32 accumulation, grouped tile order, an elementwise
epilogue in registers; nn.Linear weights are read transposed in place, batched operands through a second grid
axis. Split-K when the output has too few tiles to fill the GPU (a 256 x 256 product over K = 512Ki is 16 tiles
of 128 x 128 on 132 SMs): PHASE 1 programs (a third grid axis) each reduce one slice of K into an fp32
workspace, then PHASE 2 sums the slices per tile and runs the epilogue; PHASE 0 is the one-pass kernel."""

from __future__ import annotations

from kernelsmith.compiler.templates.common import _signature

MATMUL = "matmul_epilogue"


def matmul_kernel(name: str, doc: str, n_in: int, n_out: int, n_scalar: int, precision: str | None,
                  epilogue: list[str], acc_var: str, upcast: bool = False) -> str:
    """`upcast` (bf16 operands): a constexpr UPCAST converts the tiles to fp32 before `tl.dot`; the launcher sets
    it only on the CPU, where Triton's interpreter computes bf16 `tl.dot` wrongly."""
    sizes = ["a_ptr", "b_ptr", "ws_ptr", "split_k", "M", "N", "K", "s_ab", "s_am", "s_ak", "s_bb", "s_bk", "s_bn"]
    consts = ["BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "PHASE"] + (["UPCAST"] if upcast else [])
    sig = _signature(n_in, n_out, n_scalar, sizes, consts)
    prec = f', input_precision="{precision}"' if precision else ""
    up = ["            if UPCAST:", "                a = a.to(tl.float32)", "                b = b.to(tl.float32)"] if upcast else []
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
        "    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)",
        "    lin = bt * M * N + offs_m[:, None].to(tl.int64) * N + offs_n[None, :]",
        "    ws_stride = tl.num_programs(1).to(tl.int64) * M * N  # one K slice of the workspace",
        "    if PHASE == 2:  # the K slices' partial products, summed",
        "        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)",
        "        for s in range(0, split_k):",
        "            acc += tl.load(ws_ptr + s * ws_stride + lin, mask=mask, other=0.0)",
        "    else:",
        "        kid = tl.program_id(2)",
        "        k_span = tl.cdiv(tl.cdiv(K, split_k), BLOCK_K) * BLOCK_K",
        "        k_lo = kid * k_span",
        "        k_hi = tl.minimum(K, k_lo + k_span)",
        "        offs_am = offs_m % M  # wrapped rows/cols: in-bounds loads, results masked on store",
        "        offs_bn = offs_n % N",
        "        offs_k = tl.arange(0, BLOCK_K)",
        "        a_ptrs = a_ptr + bt * s_ab + offs_am[:, None].to(tl.int64) * s_am + (k_lo + offs_k)[None, :] * s_ak",
        "        b_ptrs = b_ptr + bt * s_bb + (k_lo + offs_k)[:, None] * s_bk + offs_bn[None, :].to(tl.int64) * s_bn",
        "        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)",
        "        for k0 in range(k_lo, k_hi, BLOCK_K):",
        "            k_mask = offs_k < k_hi - k0",
        "            a = tl.load(a_ptrs, mask=k_mask[None, :], other=0.0)",
        "            b = tl.load(b_ptrs, mask=k_mask[:, None], other=0.0)",
        *up,
        f"            acc = tl.dot(a, b, acc{prec})",
        "            a_ptrs += BLOCK_K * s_ak",
        "            b_ptrs += BLOCK_K * s_bk",
        "        if PHASE == 1:",
        "            tl.store(ws_ptr + kid.to(tl.int64) * ws_stride + lin, acc, mask=mask)",
        "    if PHASE != 1:",
        f"        {acc_var} = acc",
    ]
    return "\n".join(lines + ["    " + ln if ln.strip() else ln for ln in epilogue]) + "\n"
