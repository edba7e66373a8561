"""Child-process entry point: the only place task and candidate code is executed.

`python -m kernelsmith.referee.worker JOB_DIR` reads `JOB_DIR/job.json` and plays one role:

- `reference`: runs the task's `Model` on every input case and saves inputs' digests and outputs;
- `candidate`: installs the guards, imports the candidate, runs `ModelNew` on the same cases (with output
  memory poisoned), saves its outputs, then (GPU) waits for the parent's word to time it against `Model`
  and re-checks correctness on a fresh input set afterwards.

Results go to JSON and `.pt` files in JOB_DIR; the parent compares them. Uses torch, triton, numpy, stdlib only.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import random
import sys
import traceback
from pathlib import Path
from typing import Any

ROLE_REFERENCE = "reference"
ROLE_CANDIDATE = "candidate"
POISON_A, POISON_B = 0xFF, 0x7F  # NaN-filled floats, then huge finite ones
# glibc's M_PERTURB fills each malloc'd block with the complement of this byte (and freed ones with the byte):
# on the CPU that poisons every allocation, whatever the heap's layout. Set per run by `_poison`.
M_PERTURB = -6
PERTURB = {POISON_A: 0x01, POISON_B: 0x80}  # fills 0xFE (huge negative floats), then 0x7F (huge positive)
try:
    _LIBC: Any = ctypes.CDLL(None)  # loaded before any candidate code exists in this process
except OSError:  # pragma: no cover - not glibc
    _LIBC = None

CUDA_CRASH_MARKERS = (
    "CUDA error:",  # any sticky CUDA error leaves the context unusable (out-of-memory is not one of them)
    "illegal memory access",
    "unspecified launch failure",
    "misaligned address",
    "illegal instruction",
    "CUDA error: an illegal",
    "device-side assert",
    "cudaErrorLaunchFailure",
    "CUDA_ERROR_ILLEGAL_ADDRESS",
)


class Stage:
    """Where the candidate failed; the parent maps it to a verdict status."""

    IMPORT = "import"
    INIT = "init"
    FORWARD = "forward"
    TIMING = "timing"


def _write_json(path: Path, data: Any) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


def _versions() -> dict[str, str]:
    import platform

    import torch

    try:
        import triton

        triton_version = triton.__version__
    except Exception:  # pragma: no cover - triton missing
        triton_version = "missing"
    return {"python": platform.python_version(), "torch": torch.__version__, "triton": triton_version}


def _seed_all(seed: int) -> None:
    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed % (2**32))
    torch.manual_seed(seed)


FULL_HASH_BYTES = 1 << 20  # tensors up to this size are hashed whole; larger ones by a strided sample


def _fingerprint(tensors: list[Any]) -> str:
    """Cheap cross-process identity of an input set: both roles must have generated the same values.

    Hashing every byte of GPU-sized inputs cost seconds per case (a host copy and a hash of 512 MB); a strided
    sample of 64K elements plus shape and dtype tells apart two differently generated sets just as well.
    Whether forward changed its inputs is checked exactly, where they live, by `_unchanged`.
    """
    import torch

    h = hashlib.blake2b(digest_size=16)
    for t in tensors:
        if isinstance(t, torch.Tensor):
            flat = t.detach().reshape(-1)
            if flat.numel() * flat.element_size() > FULL_HASH_BYTES:
                flat = flat[:: max(1, flat.numel() // 65536)]
            c = flat.to("cpu").contiguous()
            h.update(str((tuple(t.shape), str(t.dtype))).encode())
            h.update(memoryview(c.view(torch.uint8).numpy()) if c.numel() else b"")
        else:
            h.update(repr(t).encode())
    return h.hexdigest()


def _unchanged(inputs: list[Any], pristine: list[Any]) -> bool:
    """Bitwise equality (NaN-safe) of the inputs after forward with a fresh copy of what they were."""
    import torch

    if len(inputs) != len(pristine):
        return False
    for a, b in zip(inputs, pristine):
        if isinstance(a, torch.Tensor) != isinstance(b, torch.Tensor):
            return False
        if not isinstance(a, torch.Tensor):
            if repr(a) != repr(b):
                return False
            continue
        if a.shape != b.shape or a.dtype != b.dtype or a.device != b.device:
            return False
        ab = a.detach().contiguous().reshape(-1).view(torch.uint8)
        bb = b.detach().contiguous().reshape(-1).view(torch.uint8)
        if not torch.equal(ab, bb):
            return False
    return True


def _to_device(values: list[Any], device: str) -> list[Any]:
    import torch

    return [v.to(device) if isinstance(v, torch.Tensor) else v for v in values]


def _default_device(device: str) -> Any:
    """Tensors a task creates without a device land on `device`: generating GPU-sized inputs with the CPU's
    RNG takes seconds per set. Both roles generate the same way, so they see identical values."""
    import torch

    return torch.device(device)


def make_inputs(task: Any, seed: int, device: str) -> list[Any]:
    _seed_all(seed)
    with _default_device(device):
        inputs = list(task.get_inputs())
    return _to_device(inputs, device)


class Cases:
    """The input sets both roles agree on: random trials by seed, the task's hidden test inputs, a check set."""

    def __init__(self, task: Any, job: dict[str, Any]):
        self.task = task
        self.device = job["device"]
        self.names = [f"trial{i}" for i in range(len(job["trial_seeds"]))]
        self.seeds = dict(zip(self.names, job["trial_seeds"]))
        self.test_cases: list[list[Any]] = []
        if job.get("test_inputs") and hasattr(task, "get_test_inputs"):
            _seed_all(job["test_seed"])
            with _default_device(self.device):
                self.test_cases = [list(c) for c in task.get_test_inputs()]
            self.names += [f"test{i}" for i in range(len(self.test_cases))]
        if "check_seed" in job:
            self.seeds["check"] = job["check_seed"]

    def inputs(self, name: str) -> list[Any]:
        if name.startswith("test"):
            import torch

            case = self.test_cases[int(name[4:])]
            return _to_device([c.clone() if isinstance(c, torch.Tensor) else c for c in case], self.device)
        return make_inputs(self.task, self.seeds[name], self.device)


def _build(module: Any, cls_name: str, task: Any, seed: int, device: str) -> Any:
    """Construct a model the way KernelBench does: same seed before init inputs and before the constructor."""
    _seed_all(seed)
    init_inputs = _to_device(list(task.get_init_inputs()), device)
    _seed_all(seed)
    model = getattr(module, cls_name)(*init_inputs)
    if hasattr(model, "to"):
        model = model.to(device)
    return model


def _save(path: Path, tensors: list[Any]) -> None:
    import torch

    torch.save([t.detach().to("cpu") for t in tensors], path)


def _load_task(job: dict[str, Any], job_dir: Path) -> Any:
    from kernelsmith.task import load_module

    path = job_dir / "task.py"
    return load_module(path.read_text(), str(path), "kernelsmith_task")


def run_reference(job: dict[str, Any], job_dir: Path) -> None:
    import torch

    task = _load_task(job, job_dir)
    cases = Cases(task, job)
    first = cases.inputs(cases.names[0])
    again = cases.inputs(cases.names[0])
    if not _unchanged(first, again):
        _write_json(job_dir / "error.json", {"stage": "task", "type": "TaskError",
                                             "message": "get_inputs() is not deterministic under torch.manual_seed"})
        return
    model = _build(task, "Model", task, job["init_seed"], job["device"])
    result: dict[str, Any] = {"cases": {}, "versions": _versions(), "device": _device_name(job["device"])}
    out_dir = job_dir / "out"
    out_dir.mkdir(exist_ok=True)
    for name in cases.names + ["check"]:
        inputs = cases.inputs(name)
        fingerprint = _fingerprint(inputs)
        with torch.no_grad():
            out = model(*inputs)
        outs = list(out) if isinstance(out, (tuple, list)) else [out]
        _save(out_dir / f"{name}.pt", outs)
        result["cases"][name] = {
            "fingerprint": fingerprint,
            "bytes": sum(t.numel() * t.element_size() for t in inputs + outs if isinstance(t, torch.Tensor)),
        }
    _write_json(job_dir / "result.json", result)


def _device_name(device: str) -> str:
    import torch

    if device == "cuda":
        return torch.cuda.get_device_name()
    return "cpu (Triton interpreter)"


def _observed_sandbox() -> dict[str, Any]:
    """What the child actually got: its user, network interfaces, and whether secrets reached its env."""
    try:
        with open("/proc/self/net/dev") as fh:
            interfaces = [line.split(":")[0].strip() for line in fh.readlines()[2:]]
    except OSError:
        interfaces = []
    return {"uid": os.getuid(), "network": "isolated" if interfaces in ([], ["lo"]) else "host",
            "interfaces": interfaces}


def _poison(sizes: list[int], byte: int, device: str) -> None:
    """Fill soon-to-be-reused allocator blocks with garbage so reads of unwritten output memory show."""
    import torch

    if device == "cpu" and _LIBC is not None and hasattr(_LIBC, "mallopt"):
        _LIBC.mallopt(M_PERTURB, PERTURB.get(byte, 0x01))
    # Slack: CPU tensors come from posix_memalign(64, n), which needs a chunk somewhat larger than n.
    blocks = [torch.full((n + 4096,), byte, dtype=torch.uint8, device=device) for n in sizes if n > 0]
    del blocks


def _in_chain(exc: BaseException, target: BaseException | None) -> bool:
    e: BaseException | None = exc
    for _ in range(10):
        if e is None or target is None:
            return False
        if e is target:
            return True
        e = e.__cause__ or e.__context__
    return False


def _classify(exc: BaseException, stage: str, inside_launch: bool, interpreter: bool) -> dict[str, Any]:
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    chain = []
    e: BaseException | None = exc
    while e is not None and len(chain) < 10:
        chain.append(e)
        e = e.__cause__ or e.__context__
    names = {type(x).__name__ for x in chain}
    modules = {type(x).__module__ for x in chain}
    kind = "runtime"
    if any(m in text for m in CUDA_CRASH_MARKERS) and "out of memory" not in str(exc):
        kind = "crash"
    elif stage == Stage.IMPORT and (isinstance(exc, (SyntaxError, ImportError)) or "CompilationError" in names):
        kind = "compile"
    elif "CompilationError" in names or any(m.startswith("triton.compiler") for m in modules):
        kind = "compile"
    elif interpreter and inside_launch:
        kind = "compile"
    message = str(exc).replace(os.getcwd() + os.sep, "")  # no temp-dir paths: verdicts compare across runs
    return {"stage": stage, "kind": kind, "type": type(exc).__name__, "message": message[:2000],
            "traceback": text[-6000:], "inside_triton": inside_launch}


def run_candidate(job: dict[str, Any], job_dir: Path) -> None:
    import torch

    from kernelsmith.referee.compare import compare_outputs
    from kernelsmith.referee.guards import GuardSession, check_output
    from kernelsmith.task import load_module

    device = job["device"]
    cand_path = job_dir / "candidate.py"
    me = sys.modules[__name__]
    watch = [("worker", me, name) for name in ("_fingerprint", "_unchanged", "_save", "_poison", "_write_json", "_time", "Cases")]
    guards = GuardSession(str(cand_path), device, job["policy"], job.get("require_kernel", True), watch,
                          str(job_dir), backend=job.get("backend", "triton"))
    task = _load_task(job, job_dir)
    out_dir = job_dir / "out"
    out_dir.mkdir(exist_ok=True)
    stage = Stage.IMPORT
    if device == "cuda":
        torch.cuda.init()
    # Start-up above overlaps the reference's run; candidate code runs only once the parent has read and
    # deleted the reference's outputs and says "go". The seeds come with it: they are in no file.
    command, _, payload = sys.stdin.readline().strip().partition(" ")
    if command != "go":
        return
    job.update(json.loads(payload))
    cases = Cases(task, job)

    def fail(exc: BaseException) -> None:
        inside = guards.launches.depth > 0 or _in_chain(exc, guards.launches.failure)
        err = _classify(exc, stage, inside, device == "cpu")
        err["findings"] = [f.to_dict() for f in guards.findings.values()]  # a blocked cheat is a rejection
        _write_json(job_dir / "error.json", err)
        sys.stderr.write(err["traceback"])
        sys.stderr.flush()
        os._exit(3)  # a broken CUDA context must not get a chance to hang interpreter shutdown

    try:
        if job.get("backend", "triton") == "cuda":  # the orchestrator built them; no candidate code has run
            from kernelsmith.backends.cuda import install_prebuilt

            install_prebuilt(job.get("cuda_extensions", []), job_dir, guards.record_custom)
        module = load_module(cand_path.read_text(), str(cand_path), "kernelsmith_candidate")
        if not hasattr(module, "ModelNew"):
            raise ImportError("candidate defines no class ModelNew")
        stage = Stage.INIT
        model = _build(module, "ModelNew", task, job["init_seed"], device)
        stage = Stage.FORWARD
        phase1: dict[str, Any] = {"cases": {}, "versions": _versions(), "device": _device_name(device),
                                  "sandbox": _observed_sandbox()}
        out_sizes: list[int] = []
        runs = [(cases.names[0], POISON_A), (cases.names[0] + "_repeat", POISON_B)]
        runs += [(n, POISON_A) for n in cases.names[1:]]
        for run_name, byte in runs:
            inputs = cases.inputs(run_name.removesuffix("_repeat"))
            fingerprint = _fingerprint(inputs)
            in_sizes = [t.numel() * t.element_size() for t in inputs if isinstance(t, torch.Tensor)]
            if job.get("poison", True):
                # The pristine copy `_unchanged` compared the last inputs with is a freed block too.
                _poison(out_sizes + in_sizes * 2, byte, device)
            with guards.watch(), torch.no_grad():
                out = model(*inputs)
            if device == "cuda":
                torch.cuda.synchronize()
            tensors, problem = check_output(out, device)
            if tensors is None:
                guards.add("output_not_dense", problem)
                break
            out_sizes = [t.numel() * t.element_size() for t in tensors]
            _save(out_dir / f"{run_name}.pt", tensors)
            phase1["cases"][run_name] = {
                "fingerprint": fingerprint,
                "inputs_unchanged": _unchanged(inputs, cases.inputs(run_name.removesuffix("_repeat"))),
            }
            del inputs
            guards.check_tamper()
        phase1["findings"] = [f.to_dict() for f in guards.judge()]
        phase1["ops"] = dict(guards.ops.ops)
        phase1["kernels"] = guards.kernels()
        phase1["foreign_kernels"] = dict(guards.launches.foreign)
        _write_json(job_dir / "phase1.json", phase1)
        if device != "cuda":
            return
        command, _, payload = sys.stdin.readline().strip().partition(" ")
        if command != "time":
            return
        job.update(json.loads(payload))
        cases.seeds["check"] = job["check_seed"]
        stage = Stage.TIMING
        _time(job, job_dir, task, model, cases, guards, compare_outputs)
    except BaseException as exc:  # noqa: BLE001 - every failure becomes a verdict
        fail(exc)


def _time(job: dict[str, Any], job_dir: Path, task: Any, model: Any, cases: Cases, guards: Any,
          compare_outputs: Any) -> None:
    import torch

    from kernelsmith.referee.guards import check_output
    from kernelsmith.referee.timing import TimingOptions, measure_bandwidth, time_pair

    reference = _build(task, "Model", task, job["init_seed"], "cuda")
    base = job["timing_seed"]

    def pool_inputs(i: int) -> list[Any]:
        return make_inputs(task, base + i, "cuda")

    tol = job.get("tolerance")

    def outputs_match(out: list[torch.Tensor], ref: list[torch.Tensor]) -> bool:
        return compare_outputs(out, ref, tol).ok

    opts = TimingOptions(**job.get("timing", {}))
    with torch.no_grad():
        res = time_pair(reference, model, pool_inputs, outputs_match, opts)
        del reference
        inputs = cases.inputs("check")
        fingerprint = _fingerprint(inputs)
        _poison([], POISON_A, "cuda")
        out = model(*inputs)
        torch.cuda.synchronize()
    tensors, problem = check_output(out, "cuda")
    if tensors is None:
        guards.add("output_not_dense", problem)
    else:
        _save(job_dir / "out" / "check.pt", tensors)
    guards.check_tamper()
    _write_json(job_dir / "phase2.json", {
        "timing": res.__dict__, "bandwidth": measure_bandwidth(),
        "check_fingerprint": fingerprint,
        "check_inputs_unchanged": _unchanged(inputs, cases.inputs("check")),
        "findings": [f.to_dict() for f in guards.findings.values()],
    })


def main(argv: list[str]) -> int:
    job_dir = Path(argv[1])
    job = json.loads((job_dir / "job.json").read_text())
    if job["role"] == ROLE_REFERENCE:
        try:
            run_reference(job, job_dir)
        except BaseException as exc:  # noqa: BLE001
            _write_json(job_dir / "error.json", {"stage": "task", "type": type(exc).__name__,
                                                 "message": str(exc)[:2000], "traceback": traceback.format_exc()})
            return 3
        return 0
    run_candidate(job, job_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
