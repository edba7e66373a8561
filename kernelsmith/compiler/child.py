"""The offline seed generated in a referee sandbox: tracing the reference runs the task's code, and task code runs
only in sandboxed children (docs/architecture.md). `python -m kernelsmith.compiler.child WORK_DIR` reads
`job.json` (the task's source and file name; optional `policy`: "strict" | "lenient", default strict, and
`precision`: null | "ieee" | "tf32x3" | "tf32") and writes `result.json` (the seed's source and patterns, the
other seeds worth measuring as `alternates` — `generate_seeds` — or why there is none). The orchestrator gets
text back: a candidate program, judged by the referee like any other.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path


def main(work_dir: Path) -> int:
    job = json.loads((work_dir / "job.json").read_text())
    try:
        from kernelsmith.compiler import SeedUnsupported, generate_seeds

        policy, precision = job.get("policy") or "strict", job.get("precision")
        if policy not in ("strict", "lenient") or precision not in (None, "ieee", "tf32x3", "tf32"):
            raise SeedUnsupported(f"{job['filename']}: policy {policy!r} / precision {precision!r} unknown")
        first, *others = generate_seeds(job["source"], filename=job["filename"], policy=policy, precision=precision)
        out = {"ok": True, "source": first.source, "patterns": list(first.patterns),
               "alternates": [{"source": r.source, "patterns": list(r.patterns), "vendor": r.vendor} for r in others],
               "vendor": first.vendor}
    except SeedUnsupported as exc:
        out = {"ok": False, "reason": str(exc)[:2000]}
    except Exception as exc:  # noqa: BLE001 - the task's own failure, said in one line
        out = {"ok": False, "reason": f"{job['filename']}: the task failed while it was traced: "
                                      f"{type(exc).__name__}: {str(exc)[:500]}"}
    tmp = work_dir / "result.tmp"
    tmp.write_text(json.dumps(out))
    os.replace(tmp, work_dir / "result.json")
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
