"""What a fresh candidate process pays to compile and launch a small Triton kernel, per specialization.

The referee's candidate runs in a fresh sandbox with an empty Triton cache, and a kernel is compiled once per
specialization (an integer argument divisible by 16 or not, ...), so a task whose hidden test inputs have
other shapes compiles its kernel 2-3 times per evaluation. This measures each first launch after the worker's
own warm-up kernel, and profiles one of them (cProfile, top functions by cumulative time).

    TRITON_CACHE_DIR=$(mktemp -d) python benchmarks/compile_cost.py --out $OUT/compile.json
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    t0 = time.perf_counter()
    import torch
    import triton
    import triton.language as tl

    t_import = time.perf_counter() - t0
    torch.cuda.init()
    torch.zeros(1, device="cuda")
    t_ctx = time.perf_counter() - t0 - t_import

    @triton.jit
    def warm_kernel(x_ptr, n, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + 1, mask=offs < n)

    @triton.jit
    def relu_kernel(x_ptr, y_ptr, n_elements, BLOCK: tl.constexpr):
        pid = tl.program_id(0).to(tl.int64)
        offs = pid * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n_elements
        x = tl.load(x_ptr + offs, mask=mask)
        tl.store(y_ptr + offs, tl.where(x < 0, 0.0, x), mask=mask)

    t1 = time.perf_counter()
    w = torch.zeros(16, device="cuda")
    warm_kernel[(1,)](w, 16, BLOCK=16)
    torch.cuda.synchronize()
    t_warm = time.perf_counter() - t1
    rows = []
    prof_text = ""
    for i, n in enumerate([4096 * 1024, 4099 * 1019, 4096 * 1024 + 1, 4096 * 1024 * 2]):
        x = torch.randn(n, device="cuda")
        y = torch.empty_like(x)
        prof = cProfile.Profile() if i == 1 else None
        t1 = time.perf_counter()
        if prof:
            prof.enable()
        relu_kernel[(triton.cdiv(n, 4096),)](x, y, n, BLOCK=4096, num_warps=8)
        torch.cuda.synchronize()
        if prof:
            prof.disable()
            s = io.StringIO()
            pstats.Stats(prof, stream=s).sort_stats("cumulative").print_stats(30)
            prof_text = s.getvalue()
        rows.append({"n": n, "first_launch_s": round(time.perf_counter() - t1, 4)})
    result = {"torch": torch.__version__, "triton": triton.__version__, "import_s": round(t_import, 3),
              "cuda_context_s": round(t_ctx, 3), "warm_kernel_s": round(t_warm, 3), "launches": rows}
    print(json.dumps(result, indent=1))
    print(prof_text)
    if args.out:
        Path(args.out).write_text(json.dumps({**result, "profile": prof_text}, indent=1))


if __name__ == "__main__":
    main()
