"""Cheat template: forward starts concurrent work (__HOW__ = thread / fork / subprocess), computes honestly."""
import os
import subprocess
import sys
import threading

import torch
import torch.nn as nn
import triton
import triton.language as tl

HOW = "__HOW__"


@triton.jit
def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(y_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=m), 0.0), mask=m)


def launch(x, y):
    relu_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        if HOW == "thread":
            t = threading.Thread(target=launch, args=(x, y))
            t.start()
            t.join()
        elif HOW == "fork":
            pid = os.fork()
            if pid == 0:
                os._exit(0)
            os.waitpid(pid, 0)
            launch(x, y)
        elif HOW == "subprocess":
            subprocess.run([sys.executable, "-c", "pass"], check=True)
            launch(x, y)
        return y
