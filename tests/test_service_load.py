"""The load-and-faults benchmark (benchmarks/service_load.py), small: 20 submissions from 10 concurrent clients,
4 of them hostile (kill the parent, stop the parent, flood stdout, hang), against `kernelsmith serve` on
loopback. Every honest job ends with exactly one right verdict, every hostile one with a verdict, the service
stays up, and /healthz answers with p99 < 1 s throughout (probed every 0.1 s: over a hundred probes)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent / "benchmarks" / "service_load.py"


def test_service_under_load_and_hostile_jobs(tmp_path: Path) -> None:
    out = tmp_path / "load.json"
    proc = subprocess.run([sys.executable, str(BENCH), "--device", "cpu", "--n", "20", "--clients", "10",
                           "--hostile", "0.2", "--hostile-timeout", "5", "--max-seconds", "240", "--out", str(out)],
                          capture_output=True, text=True, timeout=400)
    assert out.exists(), proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["service_alive"], result
    assert result["honest"] == 16 and result["honest_right"] == 16, result["honest_wrong"]
    assert sorted(result["hostile_outcomes"]) == ["flood", "hang", "kill_parent", "stop_parent"]
    # contained by the sandbox: the signals reach nothing outside it, so they are judged as what they return
    assert result["hostile_outcomes"]["hang"] == {"timeout": 1} and result["hostile_outcomes"]["flood"] == {"timeout": 1}
    for kind in ("kill_parent", "stop_parent"):
        assert "no verdict" not in result["hostile_outcomes"][kind] and "correct" not in result["hostile_outcomes"][kind]
    assert result["healthz"]["failures"] == 0 and result["healthz"]["probes"] >= 50, result["healthz"]
    assert result["healthz"]["p99_s"] < 1.0, result["healthz"]
    assert result["final_health"]["jobs"] == {"queued": 0, "running": 0, "done": 20}
    assert result["passed"] and proc.returncode == 0
