"""What the prompt says about the machine: read in a child process, so the orchestrator never touches CUDA."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

PROBE = r"""
import json, platform
import torch
try:
    import triton
    tv = triton.__version__
except Exception:
    tv = None
out = {"torch": torch.__version__, "triton": tv, "python": platform.python_version()}
if DEVICE == "cuda" and torch.cuda.is_available():
    p = torch.cuda.get_device_properties(0)
    out.update(name=p.name, sm_count=p.multi_processor_count, memory_gb=round(p.total_memory / 2**30, 1),
               capability=f"{p.major}.{p.minor}", l2_mb=round(getattr(p, "L2_cache_size", 0) / 2**20, 1) or None)
    a = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    best = 0.0
    for _ in range(6):  # measured, not the datasheet: read + write of a large device-to-device copy
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record(); b.copy_(a); e.record(); e.synchronize()
        best = max(best, 2 * a.numel() / (s.elapsed_time(e) / 1e3))
    out["bandwidth_gbs"] = round(best / 1e9)
else:
    out.update(name="cpu (Triton interpreter: correctness only, no timing)")
print(json.dumps(out))
"""


def probe_hardware(device: str, timeout_s: float = 120) -> dict[str, Any]:
    """GPU name, SM count, memory, L2, compute capability and versions; {"name": "unknown"} if the probe fails."""
    code = f"DEVICE = {device!r}\n" + PROBE
    try:
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout_s)
        return json.loads(proc.stdout.strip().splitlines()[-1])
    except (subprocess.TimeoutExpired, json.JSONDecodeError, IndexError, OSError):
        return {"name": "unknown"}
