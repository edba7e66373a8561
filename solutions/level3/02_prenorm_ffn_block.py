import torch
import torch.nn as nn
import triton
import triton.language as tl


# EVOLVE-BLOCK-START
@triton.jit
def layernorm_kernel(x_ptr, w_ptr, b_ptr, y_ptr, n_cols, stride_x, stride_y, eps,
                     BLOCK: tl.constexpr, SINGLE_PASS: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * stride_x
    y_row = y_ptr + row * stride_y
    cols = tl.arange(0, BLOCK)
    if SINGLE_PASS:
        # Whole row in registers.
        mask = cols < n_cols
        x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
        mean = tl.sum(x, axis=0) / n_cols
        d = tl.where(mask, x - mean, 0.0)
        rstd = 1.0 / tl.sqrt(tl.sum(d * d, axis=0) / n_cols + eps)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        b = tl.load(b_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_row + cols, (d * rstd * w + b).to(y_ptr.dtype.element_ty), mask=mask)
    else:
        # Wide rows: mean pass, centred variance pass, write pass.
        acc = tl.zeros([BLOCK], tl.float32)
        for start in range(0, n_cols, BLOCK):
            offs = start + cols
            acc += tl.load(x_row + offs, mask=offs < n_cols, other=0.0).to(tl.float32)
        mean = tl.sum(acc, axis=0) / n_cols
        acc = tl.zeros([BLOCK], tl.float32)
        for start in range(0, n_cols, BLOCK):
            offs = start + cols
            mask = offs < n_cols
            x = tl.load(x_row + offs, mask=mask, other=0.0).to(tl.float32)
            d = tl.where(mask, x - mean, 0.0)
            acc += d * d
        rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / n_cols + eps)
        for start in range(0, n_cols, BLOCK):
            offs = start + cols
            mask = offs < n_cols
            x = tl.load(x_row + offs, mask=mask, other=0.0).to(tl.float32)
            w = tl.load(w_ptr + offs, mask=mask, other=0.0).to(tl.float32)
            b = tl.load(b_ptr + offs, mask=mask, other=0.0).to(tl.float32)
            tl.store(y_row + offs, ((x - mean) * rstd * w + b).to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def linear_kernel(x_ptr, w_ptr, bias_ptr, res_ptr, y_ptr, M, N, K,
                  stride_xm, stride_xk, stride_wn, stride_wk,
                  stride_rm, stride_rn, stride_ym, stride_yn,
                  APPLY_GELU: tl.constexpr, ADD_RESIDUAL: tl.constexpr,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                  GROUP_M: tl.constexpr):
    # y = epilogue(x @ W^T + bias); epilogue = exact GELU and/or + residual.
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_pid_in_group = GROUP_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_xm = offs_m % M
    offs_wn = offs_n % N
    offs_k = tl.arange(0, BLOCK_K)
    x_ptrs = x_ptr + offs_xm[:, None] * stride_xm + offs_k[None, :] * stride_xk
    w_ptrs = w_ptr + offs_k[:, None] * stride_wk + offs_wn[None, :] * stride_wn

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k_mask = offs_k < K - k0
        a = tl.load(x_ptrs, mask=k_mask[None, :], other=0.0)
        b = tl.load(w_ptrs, mask=k_mask[:, None], other=0.0)
        acc = tl.dot(a, b, acc)
        x_ptrs += BLOCK_K * stride_xk
        w_ptrs += BLOCK_K * stride_wk

    bias = tl.load(bias_ptr + offs_wn).to(tl.float32)
    out = acc + bias[None, :]
    if APPLY_GELU:
        out = 0.5 * out * (1.0 + tl.erf(out * 0.7071067811865476))
    y_mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    if ADD_RESIDUAL:
        r_ptrs = res_ptr + offs_m[:, None] * stride_rm + offs_n[None, :] * stride_rn
        out += tl.load(r_ptrs, mask=y_mask, other=0.0).to(tl.float32)
    y_ptrs = y_ptr + offs_m[:, None] * stride_ym + offs_n[None, :] * stride_yn
    tl.store(y_ptrs, out.to(y_ptr.dtype.element_ty), mask=y_mask)


# Widest LayerNorm row (in elements) kept entirely in registers by one program.
MAX_SINGLE_BLOCK = 8192
LOOP_BLOCK = 4096


def _pick_block(n, lo, hi):
    return max(lo, min(hi, triton.next_power_of_2(n)))


def triton_linear(x, weight, bias, gelu=False, residual=None):
    M, K = x.shape
    N = weight.shape[0]
    y = torch.empty((M, N), dtype=x.dtype, device=x.device)
    if M == 0:
        return y
    block_m = _pick_block(M, 16, 128)
    block_n = _pick_block(N, 16, 128)
    block_k = _pick_block(K, 16, 32)
    big = block_m * block_n >= 128 * 128
    res = residual if residual is not None else y   # dummy pointer when unused
    grid = (triton.cdiv(M, block_m) * triton.cdiv(N, block_n),)
    linear_kernel[grid](
        x, weight, bias, res, y, M, N, K,
        x.stride(0), x.stride(1), weight.stride(0), weight.stride(1),
        res.stride(0), res.stride(1), y.stride(0), y.stride(1),
        APPLY_GELU=gelu, ADD_RESIDUAL=residual is not None,
        BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, GROUP_M=8,
        num_warps=8 if big else 4, num_stages=3,
    )
    return y


class ModelNew(nn.Module):
    """LayerNorm kernel, then GEMM+bias+GELU, then GEMM+bias+residual (3 launches)."""

    def __init__(self, d_model, d_ff):
        super(ModelNew, self).__init__()
        # Same modules and init calls, in the same order, as the reference.
        self.norm = nn.LayerNorm(d_model)
        self.fc1 = nn.Linear(d_model, d_ff)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(d_ff, d_model)
        with torch.no_grad():
            self.norm.weight.copy_(1.0 + 0.5 * torch.randn(d_model))
            self.norm.bias.copy_(0.5 * torch.randn(d_model))

    def forward(self, x):
        shape = x.shape
        d_model = shape[-1]
        x2 = x.contiguous().view(-1, d_model)
        n_rows = x2.shape[0]
        h = torch.empty_like(x2)
        if n_rows > 0:
            block = triton.next_power_of_2(d_model)
            single = block <= MAX_SINGLE_BLOCK
            if not single:
                block = LOOP_BLOCK
            layernorm_kernel[(n_rows,)](
                x2, self.norm.weight, self.norm.bias, h, d_model, x2.stride(0), h.stride(0),
                self.norm.eps, BLOCK=block, SINGLE_PASS=single,
                num_warps=4 if block <= 1024 else 8,
            )
        u = triton_linear(h, self.fc1.weight, self.fc1.bias, gelu=True)
        y = triton_linear(u, self.fc2.weight, self.fc2.bias, residual=x2)
        return y.view(shape)
# EVOLVE-BLOCK-END
