import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# EVOLVE-BLOCK-START
relu_cuda_source = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>
#include <c10/cuda/CUDAStream.h>

#define THREADS 256
#define VEC 4

__global__ void relu_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
    int64_t i = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) * VEC;
    if (i + VEC <= n && ((reinterpret_cast<uintptr_t>(x + i) | reinterpret_cast<uintptr_t>(y + i)) % 16 == 0)) {
        float4 v = *reinterpret_cast<const float4*>(x + i);
        // `v < 0` (not `v > 0`) so that NaNs propagate like torch.relu.
        v.x = v.x < 0.f ? 0.f : v.x;
        v.y = v.y < 0.f ? 0.f : v.y;
        v.z = v.z < 0.f ? 0.f : v.z;
        v.w = v.w < 0.f ? 0.f : v.w;
        *reinterpret_cast<float4*>(y + i) = v;
    } else {
        for (int64_t j = i; j < n && j < i + VEC; ++j) {
            float v = x[j];
            y[j] = v < 0.f ? 0.f : v;
        }
    }
}

torch::Tensor relu_forward(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda(), "x must be a CUDA tensor");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "x must be float32");
    auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    int64_t n = xc.numel();
    if (n == 0) return y;
    int64_t blocks = (n + (int64_t)THREADS * VEC - 1) / ((int64_t)THREADS * VEC);
    relu_kernel<<<blocks, THREADS, 0, c10::cuda::getCurrentCUDAStream()>>>(
        xc.data_ptr<float>(), y.data_ptr<float>(), n);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

relu_cpp_source = "torch::Tensor relu_forward(torch::Tensor x);"

relu_ext = load_inline(
    name="kernelsmith_relu",
    cpp_sources=relu_cpp_source,
    cuda_sources=relu_cuda_source,
    functions=["relu_forward"],
    extra_cuda_cflags=["-O3"],
)


class ModelNew(nn.Module):
    """ReLU as one vectorised (float4) memory-bound CUDA pass over the flattened tensor."""

    def __init__(self):
        super(ModelNew, self).__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return relu_ext.relu_forward(x)
# EVOLVE-BLOCK-END
