"""Red team, 2026-12-03 (was `crashed`, blamed on the task, killing the kept judge): forward writes a deeply
nested JSON header straight onto the channel fd; json.loads raised RecursionError in the judge. Now a malformed
message is the candidate's protocol violation."""
import os
import torch, torch.nn as nn, triton, triton.language as tl

@triton.jit
def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(y_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=m), 0.0), mask=m)

class ModelNew(nn.Module):
    def forward(self, x):
        fd = int(os.environ["KERNELSMITH_FD"])
        os.write(fd, b'{"op": "output", "case": "trial0", "n_outputs": 1, "x": ' + b"[" * 100000 + b"]" * 100000 + b"}")
        y = torch.empty_like(x)
        relu_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
        return y
