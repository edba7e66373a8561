import torch
import torch.nn as nn
import triton
import triton.language as tl


# EVOLVE-BLOCK-START
@triton.jit
def linear_kernel(x_ptr, w_ptr, bias_ptr, y_ptr, M, N, K,
                  stride_xm, stride_xk, stride_wn, stride_wk, stride_ym, stride_yn,
                  APPLY_RELU: tl.constexpr,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                  GROUP_M: tl.constexpr):
    # y = [relu](x @ W^T + bias), W stored (N, K) as in nn.Linear; fp32 accumulation.
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
    offs_xm = offs_m % M   # wrapped rows/cols: in-bounds loads, results masked on store
    offs_wn = offs_n % N
    offs_k = tl.arange(0, BLOCK_K)
    x_ptrs = x_ptr + offs_xm[:, None] * stride_xm + offs_k[None, :] * stride_xk
    w_ptrs = w_ptr + offs_k[:, None] * stride_wk + offs_wn[None, :] * stride_wn

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k_mask = offs_k < K - k0
        a = tl.load(x_ptrs, mask=k_mask[None, :], other=0.0)
        b = tl.load(w_ptrs, mask=k_mask[:, None], other=0.0)
        # fp32 inputs on tensor cores: plain TF32 drifts past the fp32 tolerance over
        # three K=4096 layers, so use the 3-pass split-TF32 mode (~fp32 accuracy).
        acc = tl.dot(a, b, acc, input_precision="tf32x3")
        x_ptrs += BLOCK_K * stride_xk
        w_ptrs += BLOCK_K * stride_wk

    bias = tl.load(bias_ptr + offs_wn).to(tl.float32)
    out = acc + bias[None, :]
    if APPLY_RELU:
        out = tl.maximum(out, 0.0)

    y_ptrs = y_ptr + offs_m[:, None] * stride_ym + offs_n[None, :] * stride_yn
    y_mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    tl.store(y_ptrs, out.to(y_ptr.dtype.element_ty), mask=y_mask)


def _pick_block(n, lo, hi):
    return max(lo, min(hi, triton.next_power_of_2(n)))


def triton_linear(x, weight, bias, relu):
    M, K = x.shape
    N = weight.shape[0]
    y = torch.empty((M, N), dtype=x.dtype, device=x.device)
    if M == 0:
        return y
    block_m = _pick_block(M, 16, 128)
    block_n = _pick_block(N, 16, 128)
    block_k = _pick_block(K, 16, 32)   # fp32 tiles: 32-wide K keeps 3 stages in shared memory
    big = block_m * block_n >= 128 * 128
    grid = (triton.cdiv(M, block_m) * triton.cdiv(N, block_n),)
    linear_kernel[grid](
        x, weight, bias, y, M, N, K,
        x.stride(0), x.stride(1), weight.stride(0), weight.stride(1), y.stride(0), y.stride(1),
        APPLY_RELU=relu,
        BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, GROUP_M=8,
        num_warps=8 if big else 4, num_stages=3,
    )
    return y


class ModelNew(nn.Module):
    """MLP where every layer is one Triton GEMM with bias (+ReLU) fused in the epilogue."""

    def __init__(self, input_size, layer_sizes, output_size):
        super(ModelNew, self).__init__()
        # Identical module structure to the reference so the seeded init matches.
        layers = []
        current_input_size = input_size
        for layer_size in layer_sizes:
            layers.append(nn.Linear(current_input_size, layer_size))
            layers.append(nn.ReLU())
            current_input_size = layer_size
        layers.append(nn.Linear(current_input_size, output_size))
        self.network = nn.Sequential(*layers)

    def forward(self, x):
        h = x.contiguous()
        linears = [m for m in self.network if isinstance(m, nn.Linear)]
        for i, lin in enumerate(linears):
            h = triton_linear(h, lin.weight, lin.bias, relu=(i < len(linears) - 1))
        return h
# EVOLVE-BLOCK-END
