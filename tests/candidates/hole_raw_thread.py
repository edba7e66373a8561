"""Cheat: like hole_import_thread, but the worker thread is started with _thread.start_new_thread, which
bypasses threading.Thread.start and never shows in threading.enumerate(); dispatch modes are thread-local,
so the referee's recorder never sees the worker's torch ops."""
import _thread
import queue

import torch
import torch.nn as nn
import triton
import triton.language as tl

_jobs, _done = queue.Queue(), queue.Queue()


def _worker():
    while True:
        x = _jobs.get()
        _done.put(torch.relu(x))


_thread.start_new_thread(_worker, ())


@triton.jit
def decoy_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=m), mask=m)


class ModelNew(nn.Module):
    def forward(self, x):
        scratch = torch.empty_like(x)
        decoy_kernel[(triton.cdiv(x.numel(), 1024),)](x, scratch, x.numel(), BLOCK=1024)
        _jobs.put(x)
        return _done.get()
