"""What a new sandbox costs: forked from the template (`Zygote.spawn`, as root) against a bubblewrap sandbox of
its own that imports what a candidate needs. Both timed here, side by side, `--n` times each; medians.

    python benchmarks/spawn_cost.py --n 10 --out $OUT/spawn.json
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kernelsmith.referee import channel  # noqa: E402
from kernelsmith.referee.sandbox import Child, Limits, zygote_for  # noqa: E402

IMPORTS = "import numpy, torch, torch._dynamo, triton"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=10)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    limits = Limits()
    t0 = time.perf_counter()
    zygote = zygote_for(args.device, None, limits)
    template_s = time.perf_counter() - t0
    forked, own = [], []
    for _ in range(args.n):
        if zygote is not None:  # until the child is walled in, placed in its cgroup and running
            t0 = time.perf_counter()
            child, sock = zygote.spawn(args.device, limits, role="exec")
            channel.send(sock, {"op": "exec", "source": "pass\n", "argv": ["x"]})
            child.wait(time.monotonic() + 60)
            forked.append(time.perf_counter() - t0)
            child.close()
            sock.close()
        t0 = time.perf_counter()  # a sandbox of its own, up to the same point: the candidate's imports done
        child = Child.start(["-c", IMPORTS], args.device, limits)
        child.wait(time.monotonic() + 120)
        own.append(time.perf_counter() - t0)
        child.close()
    import torch
    import triton

    result = {"date": str(date.today()), "python": platform.python_version(), "torch": torch.__version__,
              "triton": triton.__version__, "device": args.device, "n": args.n,
              "template_start_s": round(template_s, 3) if zygote else None,
              "forked_median_s": round(statistics.median(forked), 4) if forked else None,
              "forked_s": [round(x, 4) for x in forked],
              "own_sandbox_median_s": round(statistics.median(own), 3), "own_sandbox_s": [round(x, 3) for x in own]}
    print(json.dumps(result, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
