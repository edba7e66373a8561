"""Red team, 2026-12-03 (was `crashed`, blamed on the task): the second forward call sends a reply whose tensor
layout has a zero-sized but overflowing shape; torch.empty raised in the judge. Now dimensions are bounded and
anything the candidate's message makes the judge raise is the candidate's fault."""
import os, json
import torch, torch.nn as nn, triton, triton.language as tl

@triton.jit
def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(y_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=m), 0.0), mask=m)

calls = [0]
class ModelNew(nn.Module):
    def forward(self, x):
        calls[0] += 1
        if calls[0] == 2:
            hdr = {"op": "output", "case": "trial0_repeat", "n_outputs": 1, "values": [{"t": 0}],
                   "tensors": [{"dtype": "float32", "shape": [2**62, 2**62, 0], "offset": 0, "nbytes": 0}]}
            os.write(int(os.environ["KERNELSMITH_FD"]), json.dumps(hdr).encode())
        y = torch.empty_like(x)
        relu_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
        return y
