"""The lenient seed of a model the compiler cannot take whole (a forward torch.fx cannot trace: Python loops over
a traced size, asserts or branches on values, state kept on `self`): its module calls get seeds of their own.

`kernelsmith extract` (in its referee sandbox, on the CPU) runs the model with hooks and writes each hot module
call as a task with the real shapes; the compiler seeds each task (in its sandbox); `optimize`'s assembler
writes one program — the task's own file, the part programs renamed into it, and a `ModelNew(Model)` whose
modules' calls go through the part when called as recorded (same shapes and arguments) and stay the module's
own otherwise. KernelBench's rule (`lenient`) only: the rest of the forward stays torch. The referee judges the
result like any other candidate.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from kernelsmith.workshop.offline.proposer import SEED_TIMEOUT_S, Seeds, sandboxed_seed

TOP = 8  # module calls seeded, by share of the model's time


def parts_seed(task_source: str, task_path: str, *, precision: str | None = None, top: int = TOP,
               timeout_s: float = SEED_TIMEOUT_S) -> Seeds:
    """The assembled program (`Seeds.source`), or None with why: the extraction failed, no module call was
    extracted, or none of them could be seeded."""
    from kernelsmith.extract.model import ExtractError, ExtractOptions, extract
    from kernelsmith.optimize.assemble import AssembleError, Part, render_file
    from kernelsmith.task import TaskError

    name = Path(task_path or "task.py").name
    with tempfile.TemporaryDirectory(prefix="ks-parts-") as tmp:
        model = Path(tmp) / name
        model.write_text(task_source)
        out = Path(tmp) / "extract"
        try:
            report = extract(model, out, ExtractOptions(device="cpu", top=top, timeout_s=timeout_s))
        except (ExtractError, TaskError) as exc:
            return Seeds(None, [], f"its module calls could not be extracted: {exc}")
        parts: list[Part] = []
        patterns: list[str] = []
        why: list[str] = []
        for t in report.get("tasks", []):
            site = t.get("site") or {}
            if site.get("kind") != "module" or not t.get("file"):
                continue
            text = (out / t["file"]).read_text()
            got = sandboxed_seed(text, str(out / t["file"]), timeout_s=timeout_s, policy="lenient",
                                 precision=precision)
            if got.source is None:
                why.append(f"{t['name']}: {got.why.splitlines()[0][:160] if got.why else 'no seed'}")
            else:
                patterns += got.patterns
            parts.append(Part(index=len(parts), name=str(t["name"]), site=site, code=got.source,
                              swap=got.source is not None,
                              shapes=[[i["shape"], i["dtype"]] for i in t.get("inputs", [])]))
        if not any(p.code for p in parts):
            return Seeds(None, [], "no module call could be seeded" + (f" ({'; '.join(why[:3])})" if why else
                                                                       " (none was extracted)"))
        try:
            text, skipped = render_file(task_source, None, parts)
        except AssembleError as exc:
            return Seeds(None, [], f"the parts could not be assembled: {exc}")
    if len(skipped) == sum(p.code is not None for p in parts):
        return Seeds(None, [], "no seeded part could be placed: " + "; ".join(skipped.values())[:300])
    placed = [p.name for p in parts if p.code is not None and p.index not in skipped]
    return Seeds(text, [f"parts:{', '.join(placed)}"] + list(dict.fromkeys(patterns)))
