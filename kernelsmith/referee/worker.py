"""Child-process entry point: the only place task and candidate code is executed, each in its own sandbox.

`python -m kernelsmith.referee.worker judge|candidate` talks over the socket in `$KERNELSMITH_FD`:

- `judge` (task code, trusted to define the truth, sandboxed from the host): gets the task and the seeds from
  the orchestrator, makes every input set, runs `Model`, keeps the reference outputs on its device, hands the
  candidate the inputs of one case at a time over its link and compares what comes back, there and then. It
  accepts only the answer to the case it asked for; a missing case is a failure.
- `candidate`: installs the in-process guards, imports the candidate, builds `ModelNew` from the init inputs
  the judge sends, runs each case it is given (output memory poisoned) and returns outputs and inputs. It
  never sees a seed, the task's file, a reference output or the judge. On a GPU, after correctness, it times
  `ModelNew` against the task's `Model` (which it gets then) and the judge checks the claim.

Uses torch, triton, numpy, stdlib only.
"""

from __future__ import annotations

import ctypes
import json
import math
import os
import random
import socket
import stat
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from kernelsmith.referee import channel

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
    "device-side assert",
    "cudaErrorLaunchFailure",
    "CUDA_ERROR_ILLEGAL_ADDRESS",
)
BOUND_TARGET_MS = 50.0  # the wall-clock bound runs enough calls to last about this long
# Numerics "fp32": a candidate's normwise error against the float64 reference may be at most FP64_FACTOR times the
# fp32 reference's own (at least FP64_FLOOR: an exact op's reference has none). Measured on the CPU (torch 2.13,
# benchmarks in docs): fp32 candidates that sum in another order (blocked K loops, tree or serial reductions,
# tf32x3 dots, other exp/tanh formulas) stay within 0.3-7x of the reference's error (a serial sum of 65536
# terms: 31x); fp16- or tf32-rounded operands are 48-4000x, bf16 390-19000x.
FP64_FACTOR = 16.0
FP64_FLOOR = 2.0**-23  # fp32's machine epsilon: a few ulps of a different formula stay within 16 of these
REPORT_LIMIT = 256 << 10  # bytes of JSON a candidate's guard report may take


class Stage:
    """Where the candidate failed; the orchestrator maps it to a verdict status."""

    IMPORT = "import"
    INIT = "init"
    FORWARD = "forward"
    TIMING = "timing"


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


def _to_device(values: list[Any], device: str) -> list[Any]:
    import torch

    return [v.to(device) if isinstance(v, torch.Tensor) else v for v in values]


def make_inputs(task: Any, seed: int, device: str) -> list[Any]:
    """Inputs for `seed`. Tensors a task creates without a device land on `device`: generating GPU-sized inputs
    with the CPU's RNG takes seconds per set."""
    import torch

    _seed_all(seed)
    with torch.device(device):
        inputs = list(task.get_inputs())
    return _to_device(inputs, device)


def init_inputs(task: Any, seed: int, device: str) -> list[Any]:
    _seed_all(seed)
    return _to_device(list(task.get_init_inputs()), device)


def _build(module: Any, cls_name: str, task: Any, seed: int, device: str, init: list[Any] | None = None) -> Any:
    """Construct a model the way KernelBench does: same seed before init inputs and before the constructor."""
    init = init_inputs(task, seed, device) if init is None else init
    _seed_all(seed)
    model = getattr(module, cls_name)(*init)
    if hasattr(model, "to"):
        model = model.to(device)
    return model


def _unchanged(inputs: list[Any], pristine: list[Any]) -> bool:
    """Bitwise equality (NaN-safe) of the inputs after forward with what they were."""
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
        if a.shape != b.shape or a.dtype != b.dtype:
            return False
        ab = a.detach().contiguous().reshape(-1).view(torch.uint8)
        bb = b.detach().to(a.device).contiguous().reshape(-1).view(torch.uint8)
        if not torch.equal(ab, bb):
            return False
    return True


def _nbytes(values: list[Any]) -> int:
    import torch

    return sum(t.numel() * t.element_size() for t in values if isinstance(t, torch.Tensor))


def _device_name(device: str) -> str:
    import torch

    return torch.cuda.get_device_name() if device == "cuda" else "cpu (Triton interpreter)"


def _sync(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


def _flat(out: Any) -> list[Any]:
    return list(out) if isinstance(out, (tuple, list)) else [out]


def set_precision(precision: str) -> None:
    """This process's fp32 matmul/convolution precision for torch's own kernels (the reference, eager and
    torch.compile baselines): "tf32" lets cuBLAS and cuDNN round fp32 operands to tf32; "ieee" and "tf32x3"
    (the compiler's 3-pass split, about fp32's accuracy) compare against full-fp32 baselines."""
    import torch

    tf32 = precision == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32  # torch's default is True: convolutions would run in tf32
    torch.set_float32_matmul_precision("high" if tf32 else "highest")


def _to_fp64(values: list[Any]) -> list[Any]:
    import torch

    return [v.detach().to(torch.float64, copy=True) if isinstance(v, torch.Tensor) and v.is_floating_point() else v
            for v in values]


def _sci(x: float) -> str:
    """3.1e-4, not 3.1e-04."""
    return f"{x:.1e}".replace("e-0", "e-").replace("e+0", "e+")


def fp64_errors(out: list[Any], ref: list[Any], ref64: list[Any]) -> list[dict[str, float]]:
    """Per fp32 output: the candidate's and the fp32 reference's normwise error against the float64 reference
    (||x - ref64|| / ||ref64|| over the elements where both references are finite), and the limit the candidate's
    must stay within. Outputs of other dtypes are skipped: their precision is the task's own choice."""
    import torch

    if len(ref64) != len(ref):
        raise RuntimeError(f"the task in float64 returned {len(ref64)} outputs, in float32 {len(ref)}")
    found = []
    for i, (o, r, r64) in enumerate(zip(out, ref, ref64)):
        if not isinstance(r, torch.Tensor) or r.dtype != torch.float32:
            continue
        if not isinstance(r64, torch.Tensor) or tuple(r64.shape) != tuple(r.shape):
            raise RuntimeError(f"the task in float64 returned output {i} with another shape or type")
        r64 = r64.to(device=r.device, dtype=torch.float64)
        keep = torch.isfinite(r64) & torch.isfinite(r)
        r64, r_d, o_d = r64[keep], r[keep].to(torch.float64), o[keep].to(torch.float64)
        norm = max(float(torch.linalg.vector_norm(r64)), 1e-300)
        e_ref = float(torch.linalg.vector_norm(r_d - r64)) / norm
        e_out = float(torch.linalg.vector_norm(o_d - r64)) / norm
        limit = FP64_FACTOR * max(e_ref, FP64_FLOOR)
        found.append({"output": i, "candidate": e_out, "reference": e_ref, "limit": limit,
                      "ratio": e_out / max(e_ref, FP64_FLOOR)})
    return found


def _link() -> socket.socket:
    return socket.socket(fileno=int(os.environ["KERNELSMITH_FD"]))


# ================================================================================================ the judge


class Cases:
    """The input sets of one evaluation: random trials by seed, the task's hidden test inputs, a check set."""

    def __init__(self, task: Any, job: dict[str, Any]):
        self.task = task
        self.device = job["device"]
        self.names = [f"trial{i}" for i in range(len(job["trial_seeds"]))]
        self.seeds = dict(zip(self.names, job["trial_seeds"]))
        self.seeds["check"] = job["check_seed"]
        self.test_cases: list[list[Any]] = []
        if job.get("test_inputs") and hasattr(task, "get_test_inputs"):
            _seed_all(job["test_seed"])
            import torch

            with torch.device(self.device):
                self.test_cases = [list(c) for c in task.get_test_inputs()]
            self.names += [f"test{i}" for i in range(len(self.test_cases))]

    def inputs(self, name: str) -> list[Any]:
        if name.startswith("test"):
            import torch

            case = self.test_cases[int(name[4:])]
            return _to_device([c.clone() if isinstance(c, torch.Tensor) else c for c in case], self.device)
        return make_inputs(self.task, self.seeds[name], self.device)


class CandidateFault(Exception):
    """The candidate ended the conversation: it died, reported an error, or broke the protocol."""

    def __init__(self, report: dict[str, Any]):
        super().__init__(report.get("op", ""))
        self.report = report


class Judge:
    """One evaluation as the judge runs it. Every message to the orchestrator is a fact the judge observed."""

    def __init__(self, ctl: socket.socket, link: channel.Link, job: dict[str, Any]):
        self.ctl, self.link, self.job = ctl, link, job
        self.device = job["device"]
        self.tol = job.get("tolerance")
        self.precision = str(job.get("precision") or "tf32x3")
        self.numerics = str(job.get("numerics") or "tolerance")
        self.model64: Any = None  # numerics "fp32": the task's Model in float64 (same seed, same weights)
        self.spent: dict[str, float] = {}  # seconds per step of the cases, summed (verdict.timing["judge_s"])
        self.ended = False  # the orchestrator already said `end`

    def tell(self, op: str, **fields: Any) -> None:
        channel.send(self.ctl, {"op": op, **fields})

    def request(self, header: dict[str, Any], values: list[Any] | None = None) -> None:
        try:
            self.link.send(header, values)
        except channel.PeerGone:
            raise CandidateFault({"op": "gone", "during": header["op"], "case": header.get("case", "")}) from None

    def answer(self, header: dict[str, Any], expect: str) -> channel.Message:
        """The candidate's answer to `header`, which must be `expect`: an error report, a closed link or anything
        else ends the evaluation as the candidate's fault."""
        self.tell("waiting", on=header["op"], case=header.get("case", ""))
        try:
            reply = self.link.recv()
        except channel.PeerGone:
            raise CandidateFault({"op": "gone", "during": header["op"], "case": header.get("case", "")}) from None
        except channel.ChannelError as exc:
            raise CandidateFault({"op": "violation", "message": str(exc)}) from None
        if reply.get("op") == "error":
            reply.close()
            raise CandidateFault(_bounded(reply, "error"))
        if reply.get("op") != expect or (header.get("case") and reply.get("case") != header["case"]):
            reply.close()
            raise CandidateFault({"op": "violation", "message": f"answered {str(reply.get('op'))[:40]!r} "
                                  f"to {header['op']!r} {header.get('case', '')}"})
        if self.link.pending():  # a second answer queued behind the first: someone else is talking
            reply.close()
            raise CandidateFault({"op": "violation", "message": f"sent a message nobody asked for after its "
                                  f"answer to {header['op']!r} {header.get('case', '')}"})
        return reply

    def ask(self, header: dict[str, Any], values: list[Any] | None = None, expect: str = "") -> channel.Message:
        self.request(header, values)
        return self.answer(header, expect)

    def sync(self) -> None:
        """One more round trip before a fact is told: an answer the candidate's own runner sent after a forged
        one (code in its process that spoke out of turn) arrives before `synced` and ends it as a violation."""
        self.ask({"op": "sync"}, expect="synced").close()

    def run(self, task: Any) -> None:
        """One evaluation, up to its last fact. On a GPU, after a passed check, the orchestrator decides whether
        timing follows (`time`) or not (`end`: another candidate's timing may hold the GPU)."""
        self.tell("loaded", versions=_versions(), device=_device_name(self.device))
        cases = Cases(task, self.job)
        first, again = cases.inputs(cases.names[0]), cases.inputs(cases.names[0])
        if not _unchanged(first, again):
            raise TaskFault("get_inputs() is not deterministic under torch.manual_seed")
        del first, again
        set_precision(self.precision)  # the reference, and the judge's own timing of it, at the run's precision
        init = init_inputs(task, self.job["init_seed"], self.device)
        model = _build(task, "Model", task, self.job["init_seed"], self.device, init=list(init))
        if self.numerics == "fp32":
            self.model64 = self.build_fp64(task, init)
        self.tell("reference_ready")
        try:
            clock = _Clock(self.spent)
            self.ask({"op": "init", "init_seed": self.job["init_seed"]}, init, expect="ready").close()
            clock("init")
            result = self.correctness(task, model, cases)
            cases.test_cases = []  # timing needs none of them: the device memory goes to the candidate
            if self.device == "cuda":
                import torch

                torch.cuda.empty_cache()
            self.tell("checked", **result, spent={k: round(v, 3) for k, v in self.spent.items()})
            report = self.ask({"op": "report", "trace": bool(result["ok"])}, expect="report")  # trace: timed next
            report.close()
            if self.device == "cuda" and result["ok"]:
                self.stage_timing(task)  # before the GPU is held alone: the timing phase only times
            self.sync()
            self.tell("candidate_report", report=_bounded(report, "report"))
            if self.device == "cuda" and result["ok"]:
                msg = channel.recv(self.ctl)
                if msg.get("op") == "time":
                    self.timing(model, cases)
                else:
                    self.ended = msg.get("op") == "end"
        except CandidateFault as fault:
            self.tell("candidate_fault", fault=fault.report)

    def build_fp64(self, task: Any, init: list[Any]) -> Any:
        """The reference model again (same seed and init inputs, so the same weights), cast to float64: what
        numerics "fp32" measures both the fp32 reference and the candidate against. A task that cannot run in
        float64 cannot be judged under that policy: the task's failure, said as such."""
        import torch

        try:
            return _build(task, "Model", task, self.job["init_seed"], self.device, init=_to_fp64(init)).to(
                torch.float64)
        except Exception as exc:
            raise RuntimeError(f"numerics fp32 needs the task's Model in float64, which failed: "
                               f"{type(exc).__name__}: {str(exc)[:300]}") from None

    def reference_fp64(self, inputs64: list[Any]) -> list[Any]:
        try:
            return _flat(self.model64(*inputs64))
        except Exception as exc:
            raise RuntimeError(f"numerics fp32 needs the task's forward in float64, which failed: "
                               f"{type(exc).__name__}: {str(exc)[:300]}") from None

    def check_fp64(self, res: dict[str, Any], ref64: list[Any], run_name: str) -> None:
        """Numerics "fp32", on an answer within tolerance: refuse reduced-precision arithmetic (operands rounded
        to fp16, bf16 or tf32) that the tolerance admits, from errors the judge measured itself."""
        errors = fp64_errors(res["out"], res["ref"], ref64)
        if not errors:
            return
        worst = max(errors, key=lambda e: e["ratio"])
        res["fp64"] = {**worst, "case": run_name}
        if worst["candidate"] > worst["limit"]:
            res.update(ok=False, finding="reduced_precision", message=(
                f"reduced precision: error {_sci(worst['candidate'])} vs fp32 reference {_sci(worst['reference'])} "
                f"(x{worst['ratio']:.0f}; at most x{FP64_FACTOR:g}, floor {_sci(FP64_FLOOR)}) on output "
                f"{worst['output']} of {run_name}, normwise against the task run in float64"))

    def case(self, model: Any, cases: Cases, name: str, run_name: str, poison: int) -> dict[str, Any]:
        """Send one case, run the reference meanwhile, compare the answer on the device."""
        import torch

        from kernelsmith.referee.compare import compare_outputs

        inputs = cases.inputs(name)
        in_bytes = _nbytes(inputs)
        # The candidate's inputs come back after forward, for the judge's own bitwise check that forward left
        # them alone: always on the CPU; on a GPU (gigabytes each way) for the first case, the candidate's
        # process checks the others itself.
        back = self.device == "cpu" or run_name == cases.names[0]
        header = {"op": "run", "case": run_name, "poison": poison, "return_inputs": back}
        clock = _Clock(self.spent)
        self.request(header, inputs)
        clock("send")
        inputs64 = _to_fp64(inputs) if self.model64 is not None else None  # before a task's in-place ops
        with torch.no_grad():  # while the candidate works on its copy
            ref = _flat(model(*inputs))
            ref64 = self.reference_fp64(inputs64) if inputs64 is not None else None
        del inputs64
        _sync(self.device)
        clock("reference")
        reply = self.answer(header, expect="output")
        clock("candidate")
        try:
            n_out = reply.get("n_outputs")
            values = reply.values(self.device, max_bytes=2 * (_nbytes(ref) + in_bytes) + (1 << 20))
        except channel.ChannelError as exc:
            return {"ok": False, "finding": "output_structure", "message": f"{run_name}: {exc}"}
        except Exception as exc:  # noqa: BLE001 - whatever the candidate's message makes torch do: its fault
            raise CandidateFault({"op": "violation", "message": f"{run_name}: undecodable answer: "
                                  f"{type(exc).__name__}: {str(exc)[:200]}"}) from None
        finally:
            reply.close()
        clock("receive")
        if not isinstance(n_out, int) or not 0 <= n_out <= len(values):
            raise CandidateFault({"op": "violation", "message": "output message without a valid output count"})
        out, returned_inputs = values[:n_out], values[n_out:]
        if not all(isinstance(t, torch.Tensor) for t in out):
            return {"ok": False, "finding": "output_not_dense", "message": f"{run_name}: an output is no tensor"}
        res = {"ref": ref, "out": out, "bytes": in_bytes + _nbytes(ref)}
        if not back:
            mutated = reply.get("inputs_unchanged") is not True
        else:
            mutated = not _unchanged(returned_inputs, inputs) and not _unchanged(returned_inputs, cases.inputs(name))
        if mutated:
            res.update(ok=False, finding="input_mutated", message=f"forward changed its inputs in place ({name})")
            return res
        cmp = compare_outputs(out, ref, self.tol)
        res.update(ok=cmp.ok, cmp=cmp)
        if cmp.ok and ref64 is not None:
            self.check_fp64(res, ref64, run_name)
        clock("compare")
        return res

    def correctness(self, task: Any, model: Any, cases: Cases) -> dict[str, Any]:
        """Every case in order, stopping at the first failure. Trial 0 runs twice with differently poisoned
        output memory; the two answers must agree before either is compared with the reference."""
        from kernelsmith.referee.compare import compare_outputs, degenerate_reason

        result: dict[str, Any] = {"ok": True, "trials": 0, "max_abs_err": 0.0, "max_rel_err": 0.0, "findings": []}
        earlier: dict[str, list[Any]] = {}  # references of passed cases, to name a cached result
        kept = 0
        first = cases.names[0]
        r0 = self.case(model, cases, first, first, POISON_A)
        r1 = self.case(model, cases, first, first + "_repeat", POISON_B)
        if "ref" in r0:
            reason = degenerate_reason(r0["ref"])  # on the device: a GPU-sized output never crosses to the host
            if reason:
                result["findings"].append(_finding("degenerate_task", "task outputs are degenerate, a trivial "
                                                   f"output may pass: {reason}", "warn"))
        if "out" in r0 and "out" in r1:
            again = compare_outputs(r1["out"], r0["out"], self.tol)
            if not again.ok:
                return _fail(result, "poisoned_memory", "two runs on the same input disagree with differently "
                             f"poisoned output memory (it reads memory it did not write): {again.reason}")
        pending = [(first, r0, True), (first, r1, False)]
        names = iter(cases.names[1:])
        while pending or (name := next(names, None)) is not None:
            if pending:
                name, res, counts = pending.pop(0)
            else:
                res, counts = self.case(model, cases, name, name, POISON_A), True
            cmp = res.get("cmp")
            if cmp is not None:
                result["max_abs_err"] = max(result["max_abs_err"], _finite(cmp.max_abs_err))
                result["max_rel_err"] = max(result["max_rel_err"], _finite(cmp.max_rel_err))
            if "fp64" in res and res["fp64"]["ratio"] >= result.get("fp64_error", {}).get("ratio", -1.0):
                result["fp64_error"] = res["fp64"]
            if not res["ok"]:
                if "finding" in res:
                    return _fail(result, res["finding"], res["message"])
                if cmp.kind == "structure":
                    return _fail(result, "output_structure", f"{name}: wrong output structure: {cmp.reason}")
                if cmp.kind == "nonfinite":
                    return _fail(result, "nonfinite_output", f"{name}: NaN/Inf where the reference has none: "
                                 f"{cmp.reason}")
                hit = next((c for c, ref in earlier.items() if compare_outputs(res["out"], ref, self.tol).ok), None)
                if hit:
                    return _fail(result, "cached_result", f"{name}: returned the result for an earlier input "
                                 f"({hit}): {cmp.reason}")
                return _fail(result, "output_mismatch", f"{name}: outputs differ from the reference: {cmp.reason}")
            if counts:
                result["trials"] += 1
                size = _nbytes(res["ref"])
                if kept + size <= (256 << 20):
                    earlier[name] = res["ref"]
                    kept += size
            self.tell("case_ok", case=name)
        return result

    def stage_timing(self, task: Any) -> None:
        """The timing inputs are the judge's too (`timing_seed`), sent one set per message (a GPU-sized set is
        gigabytes) while the GPU is still shared."""
        from kernelsmith.referee.timing import TimingOptions, pool_size

        opts = TimingOptions(**self.job.get("timing", {}))
        base = int(self.job["timing_seed"])
        first = make_inputs(task, base, self.device)
        n_pool = pool_size(_nbytes(first), opts)
        for i in range(n_pool):
            self.ask({"op": "timing_inputs", "index": i}, first if i == 0 else make_inputs(task, base + i, self.device),
                     expect="stored").close()

    def timing(self, model: Any, cases: Cases) -> None:
        """The candidate times `ModelNew` against `Model` in its own process (one CUDA context: stable ratios);
        then a fresh check case, and the judge's own wall-clock bound on the claim."""
        import torch

        t0 = time.perf_counter()
        reply = self.ask({"op": "time", "task_source": self.job["task_source"], "init_seed": self.job["init_seed"],
                          "timing": self.job.get("timing", {}), "tolerance": self.tol}, expect="timing")
        phase_wall_ms = (time.perf_counter() - t0) * 1e3
        claim = _bounded(reply, "timing")
        reply.close()
        check = self.case(model, cases, "check", "check", POISON_A)
        check_result = {"ok": check["ok"], "message": check.get("message") or
                        (check["cmp"].reason if "cmp" in check else "")}
        bound: dict[str, Any] = {"phase_wall_ms": phase_wall_ms, "bytes": check.get("bytes", 0)}
        cand_ms = claim.get("timing", {}).get("cand_ms")
        if check["ok"] and isinstance(cand_ms, (int, float)) and cand_ms > 0:
            k = int(min(2000, max(3, math.ceil(BOUND_TARGET_MS / max(cand_ms, 1e-3)))))
            t0 = time.perf_counter()
            self.ask({"op": "bound", "k": k}, expect="bound").close()
            bound.update(k=k, cand_wall_ms=(time.perf_counter() - t0) * 1e3)
            inputs = cases.inputs("check")
            with torch.no_grad():
                model(*inputs)
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                for _ in range(k):
                    model(*inputs)
                torch.cuda.synchronize()
            bound["ref_wall_ms"] = (time.perf_counter() - t0) * 1e3
        self.sync()
        self.tell("timed", claim=claim, check=check_result, bound=bound)


class _Clock:
    """Adds the seconds since the last call to `spent[step]`."""

    def __init__(self, spent: dict[str, float]):
        self.spent, self.t = spent, time.perf_counter()

    def __call__(self, step: str) -> None:
        now = time.perf_counter()
        self.spent[step] = self.spent.get(step, 0.0) + now - self.t
        self.t = now


class TaskFault(Exception):
    """The task itself is broken (non-deterministic inputs, an error in its code): never the candidate's fault."""


def _task_error_kind(exc: BaseException) -> str:
    """"memory" when the task's code ran out of memory (host or device: the sizes are too large here), else
    "error": the orchestrator's hint to the user depends on it."""
    text = str(exc)[:2000].lower()
    if isinstance(exc, MemoryError) or type(exc).__name__ == "OutOfMemoryError" or "out of memory" in text \
            or "can't allocate memory" in text:
        return "memory"
    return "error"


def _finite(x: float) -> float:
    return x if math.isfinite(x) else 1e300


def _finding(name: str, message: str, severity: str = "fail") -> dict[str, str]:
    return {"name": name, "message": message[:2000], "severity": severity}


def _fail(result: dict[str, Any], name: str, message: str) -> dict[str, Any]:
    result["ok"] = False
    result["findings"].append(_finding(name, message))
    return result


def _bounded(msg: dict[str, Any], op: str) -> dict[str, Any]:
    """A candidate's free-form report, passed on as data: bounded in size, never trusted for correctness."""
    data = {k: v for k, v in msg.items() if k not in ("op", "values", "tensors")}
    text = json.dumps(data)
    if len(text) > REPORT_LIMIT:
        return {"op": op, "truncated": True}
    return {"op": op, **data}


def _preload(device: str, candidate: bool = False, cuda: bool = True) -> None:
    """What every evaluation needs, done before the first message: a spare sandbox is ready to work at once."""
    import numpy  # noqa: F401
    import torch
    import triton  # noqa: F401

    if candidate:  # imported lazily by the first op dispatched under the guards' mode: 1-1.5 s of forward
        import torch._dynamo  # noqa: F401

    import kernelsmith.referee.compare  # noqa: F401
    import kernelsmith.task  # noqa: F401

    if device == "cuda" and cuda:
        torch.cuda.init()


def run_judge() -> int:
    """Judge evaluations of one task, one after another, until the orchestrator closes the channel. The task's
    module is loaded once (its code runs once per judge); every evaluation gets its own candidate link, seeds,
    inputs and a freshly built reference model, and leaves nothing behind but the module."""
    import gc

    ctl = _link()
    device = os.environ["KERNELSMITH_DEVICE"]
    _preload(device)
    task, source = None, None
    while True:
        try:
            first = channel.recv(ctl)  # the candidate's channel, handed on by the orchestrator
        except channel.PeerGone:
            return 0
        if first.get("op") != "link" or first.fd is None or not stat.S_ISSOCK(os.fstat(first.fd).st_mode):
            return 2
        link = channel.Link(socket.socket(fileno=first.fd), pin=device == "cuda")
        first.fd = None
        job = channel.recv(ctl)
        judge = Judge(ctl, link, job)
        try:
            if task is None:
                from kernelsmith.task import load_module

                source = job["task_source"]
                path = Path(os.environ.get("HOME", ".")) / "task.py"
                path.write_text(source)
                task = load_module(source, str(path), "kernelsmith_task")
            elif job["task_source"] != source:
                return 2  # a judge judges one task: the orchestrator keys its judges by the task
            judge.run(task)
        except TaskFault as exc:
            channel.send(ctl, {"op": "task_error", "type": "TaskError", "message": str(exc), "kind": "inputs"})
            return 3
        except BaseException as exc:  # noqa: BLE001 - the task's own failure, reported as the task's
            try:
                channel.send(ctl, {"op": "task_error", "type": type(exc).__name__, "message": str(exc)[:2000],
                                   "traceback": traceback.format_exc()[-4000:], "kind": _task_error_kind(exc)})
            except channel.ChannelError:
                pass
            return 3
        finally:
            link.close()
        try:
            if not judge.ended and channel.recv(ctl).get("op") != "end":
                return 2
        except channel.ChannelError:
            return 0  # the orchestrator is done with this judge
        del judge
        gc.collect()
        if device == "cuda":
            import torch

            torch.cuda.empty_cache()  # the next candidate gets the device memory this evaluation used
        channel.send(ctl, {"op": "idle"})


# ============================================================================================ the candidate


def _observed_sandbox() -> dict[str, Any]:
    """What the child actually got: its user, network interfaces, what /proc shows of other processes."""
    try:
        with open("/proc/self/net/dev") as fh:
            interfaces = [line.split(":")[0].strip() for line in fh.readlines()[2:]]
    except OSError:
        interfaces = []
    visible = sum(1 for p in os.listdir("/proc") if p.isdigit())
    return {"uid": os.getuid(), "network": "isolated" if interfaces in ([], ["lo"]) else "host",
            "interfaces": interfaces, "pid": os.getpid(), "visible_processes": visible}


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
    elif isinstance(exc, MemoryError) or "Cannot allocate memory" in str(exc) or (
            "can't allocate memory" in str(exc)):  # the kernel refused (RLIMIT_DATA, where no cgroup could be made)
        kind = "memory"
    elif stage == Stage.IMPORT and (isinstance(exc, (SyntaxError, ImportError)) or "CompilationError" in names):
        kind = "compile"
    elif "CompilationError" in names or any(m.startswith("triton.compiler") for m in modules):
        kind = "compile"
    elif interpreter and inside_launch:
        kind = "compile"
    message = str(exc).replace(os.getcwd() + os.sep, "")  # no work-dir paths: verdicts compare across runs
    return {"stage": stage, "kind": kind, "type": type(exc).__name__, "message": message[:2000],
            "traceback": text[-6000:], "inside_triton": inside_launch}


class CandidateRunner:
    """Answers the judge's requests. Its state (guards, model) lives in this object, which the candidate's code
    is kept from reaching by the audit hook; nothing it reports decides correctness."""

    def __init__(self, link: channel.Link, device: str):
        """Made (guards installed) before the sandbox knows its candidate: a spare is ready at once. The
        candidate's settings arrive with `configure`."""
        import torch

        from kernelsmith.referee.guards import GuardSession

        self.link, self.device = link, device
        home = os.environ.get("HOME", os.getcwd())
        self.cand_path = Path(home) / "candidate.py"
        me = sys.modules[__name__]
        watch = [("worker", me, name) for name in ("_unchanged", "_poison", "_build", "make_inputs")]
        watch += [("channel", channel, name) for name in ("send", "recv", "encode", "_places", "_layout")]
        watch += [("channel.Link", channel.Link, name) for name in ("send", "recv")]
        watch += [("channel._Inbound", channel._Inbound, "read"), ("channel._Outbound", channel._Outbound, "write")]
        watch += [("worker.CandidateRunner", CandidateRunner, name) for name in ("run_case", "serve", "report")]
        self.guards = GuardSession(str(self.cand_path), device, "strict", True, watch, home)
        self.stage = Stage.IMPORT
        self.model: Any = None
        self.last_inputs: list[Any] = []
        self.timing_pool: list[list[Any]] = []  # input sets for timing, from the judge
        self.out_sizes: list[int] = []
        self.precision = "tf32x3"
        self.spent: dict[str, float] = {}  # where this process's time went (reported; informational only)
        if device == "cuda":
            torch.cuda.init()

    def configure(self, policy: str, require_kernel: bool, backend: str, precision: str = "tf32x3") -> None:
        from kernelsmith.referee.policy import POLICIES

        self.guards.policy = policy if policy in POLICIES else "strict"
        self.guards.require_kernel = bool(require_kernel)
        self.guards.backend = backend
        self.precision = precision
        set_precision(precision)  # before the candidate's code: its torch calls run at the run's precision

    def fail(self, exc: BaseException) -> None:
        inside = self.guards.launches.depth > 0 or _in_chain(exc, self.guards.launches.failure)
        err = _classify(exc, self.stage, inside, self.device == "cpu")
        err["findings"] = [f.to_dict() for f in self.guards.findings.values()]  # a blocked cheat is a rejection
        sys.stderr.write(err["traceback"])
        sys.stderr.flush()
        try:
            self.link.send({"op": "error", **err})
        except channel.ChannelError:
            pass
        os._exit(3)  # a broken CUDA context must not get a chance to hang interpreter shutdown

    def serve(self) -> None:
        while True:
            msg = self.link.recv()
            op = msg.get("op")
            try:
                if op == "init":
                    self.init(msg)
                elif op == "run":
                    self.run_case(msg)
                elif op == "report":
                    self.report(trace=bool(msg.get("trace")))
                elif op == "timing_inputs":
                    self.timing_pool.append(msg.values(self.device))
                    self.link.send({"op": "stored"})
                elif op == "time":
                    self.stage = Stage.TIMING
                    self.time(msg)
                elif op == "bound":
                    self.bound(int(msg.get("k", 1)))
                elif op == "sync":
                    self.link.send({"op": "synced"})
            finally:
                msg.close()

    def init(self, msg: channel.Message) -> None:
        from kernelsmith.task import load_module

        clock = _Clock(self.spent)
        init = msg.values("cpu")
        if self.guards.backend == "cuda":  # built by the orchestrator
            from kernelsmith.backends.cuda import install_prebuilt

            exts = json.loads(os.environ.get("KERNELSMITH_CUDA_EXTENSIONS", "[]"))
            install_prebuilt(exts, self.cand_path.parent, self.guards.record_custom)
        module = load_module(self.cand_path.read_text(), str(self.cand_path), "kernelsmith_candidate")
        if not hasattr(module, "ModelNew"):
            raise ImportError("candidate defines no class ModelNew")
        clock("import")
        self.stage = Stage.INIT
        self.model = _build(module, "ModelNew", None, msg["init_seed"], self.device,
                            init=_to_device(init, self.device))
        clock("init")
        self.stage = Stage.FORWARD
        self.link.send({"op": "ready"})

    def run_case(self, msg: channel.Message) -> None:
        import torch

        from kernelsmith.referee.guards import check_output

        clock = _Clock(self.spent)
        inputs = msg.values(self.device)
        msg.close()
        pristine = None if msg.get("return_inputs", True) else [
            t.clone() if isinstance(t, torch.Tensor) else t for t in inputs]
        in_sizes = [t.numel() * t.element_size() for t in inputs if isinstance(t, torch.Tensor)]
        clock("receive")
        # The inputs' own earlier blocks are freed memory too: poison them as well.
        _poison(self.out_sizes + in_sizes * 2, int(msg.get("poison", POISON_A)), self.device)
        _sync(self.device)
        clock("poison")
        with self.guards.watch(), torch.no_grad():
            out = self.model(*inputs)
            _sync(self.device)
        clock("forward")
        tensors, problem = check_output(out, self.device)
        self.guards.check_tamper()
        clock("guards")
        if tensors is None:
            self.guards.add("output_not_dense", problem)
            raise TypeError(problem)
        self.out_sizes = [t.numel() * t.element_size() for t in tensors]
        self.last_inputs = inputs
        header = {"op": "output", "case": msg["case"], "n_outputs": len(tensors)}
        if pristine is not None:  # checked here: defence in depth only (see Judge.case)
            header["inputs_unchanged"] = _unchanged(inputs, pristine)
            del pristine
        self.link.send(header, [torch.Tensor.detach(t) for t in tensors]
                       + (list(inputs) if msg.get("return_inputs", True) else []))
        clock("send")

    def report(self, trace: bool = False) -> None:
        """The guards' findings and what forward ran; with `trace` (a correct candidate, on a GPU) the device's
        own trace of one more call too."""
        g = self.guards
        kernels, ops = g.kernels(), dict(g.ops.ops)  # the checked cases', before the traced call adds its own
        trace_ = self.device_trace() if trace and self.device == "cuda" and self.last_inputs else {}
        self.link.send({"op": "report", "findings": [f.to_dict() for f in g.judge()],
                                 "ops": ops, "kernels": kernels,
                                 "foreign_kernels": dict(g.launches.foreign), "sandbox": _observed_sandbox(),
                                 "versions": _versions(), "spent": {k: round(v, 3) for k, v in self.spent.items()},
                                 **({"device_trace": trace_} if trace_ else {}), **_profile_text()})

    def device_trace(self) -> dict[str, Any]:
        """One more forward (the last case's inputs) under the profiler's device-activity trace (CUPTI): what ran
        on the GPU, by kernel name, beside what the launch recorder counted in the same call. The names come
        from the driver, not from Python-level counting; like the recorder, it is read in this process (defence
        in depth: the orchestrator only lets it make a verdict stricter)."""
        import torch
        from torch.profiler import ProfilerActivity, profile

        clock = _Clock(self.spent)
        before = dict(self.guards.kernels())
        names: dict[str, int] = {}
        try:
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                with self.guards.watch(), torch.no_grad():
                    self.model(*self.last_inputs)
                    _sync(self.device)
            for event in prof.events():
                kernels = [k.name for k in getattr(event, "kernels", [])]
                if str(getattr(event, "device_type", "")).endswith("CUDA"):
                    kernels.append(event.name)
                for name in kernels:
                    names[str(name)[:200]] = names.get(str(name)[:200], 0) + 1
        except Exception as exc:  # noqa: BLE001 - no trace is a fact too (reported, never a pass)
            return {"error": f"{type(exc).__name__}: {exc}"[:300]}
        finally:
            clock("device_trace")
        self.guards.check_tamper()
        after = self.guards.kernels()
        recorded = {k: n - before.get(k, 0) for k, n in after.items() if n - before.get(k, 0) > 0}
        # The names that account for a recorded launch first, then the busiest: a long list is never cut
        # where the orchestrator would look for a recorded launch.
        top = sorted(names.items(), key=lambda kv: (not any(k in kv[0] for k in recorded), -kv[1]))
        return {"kernels": dict(top[:channel.MAX_NAMES]),
                "recorded": dict(list(recorded.items())[:channel.MAX_NAMES])}

    def time(self, msg: channel.Message) -> None:
        import torch

        from kernelsmith.referee.compare import compare_outputs
        from kernelsmith.referee.timing import TimingOptions, measure_bandwidth, time_pair
        from kernelsmith.task import load_module

        task = load_module(msg["task_source"], str(self.cand_path.parent / "task.py"), "kernelsmith_task")
        set_precision(self.precision)  # again: the reference is timed at the run's precision, whatever was set
        reference = _build(task, "Model", task, msg["init_seed"], "cuda")
        tol, pool = msg.get("tolerance"), self.timing_pool

        def outputs_match(out: list[Any], ref: list[Any]) -> bool:
            return compare_outputs(out, ref, tol).ok

        with torch.no_grad():
            res = time_pair(reference, self.model, lambda i: pool[i % len(pool)], outputs_match,
                            TimingOptions(**msg.get("timing", {})))
        self.timing_pool = []
        del reference
        self.guards.check_tamper()
        self.link.send({"op": "timing", "timing": res.__dict__, "bandwidth": measure_bandwidth(),
                                 "findings": [f.to_dict() for f in self.guards.findings.values()]})

    def bound(self, k: int) -> None:
        import torch

        with torch.no_grad():
            for _ in range(max(1, min(k, 100000))):
                self.model(*self.last_inputs)
            _sync(self.device)
        self.link.send({"op": "bound"})


def _warm_triton(device: str) -> None:
    """One launch of the referee's own kernel before any candidate exists: Triton's launcher (built with the C
    compiler on a GPU) and the interpreter's machinery are ready when the candidate's first launch comes."""
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def warm_kernel(x_ptr, n, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + 1, mask=offs < n)

    x = torch.zeros(16, device=device)
    warm_kernel[(1,)](x, 16, BLOCK=16)
    _sync(device)


_PROFILE: Any = None


def _profile_text() -> dict[str, str]:
    """With KERNELSMITH_PROFILE=1 (a developer's switch, passed into the sandbox): the candidate process's
    profile so far, top functions by cumulative time, in its report (and so in verdict.timing)."""
    if _PROFILE is None:
        return {}
    import io
    import pstats

    _PROFILE.disable()
    out = io.StringIO()
    pstats.Stats(_PROFILE, stream=out).sort_stats("cumulative").print_stats(40)
    _PROFILE.enable()
    return {"profile": out.getvalue()[-60000:]}


def run_candidate() -> int:
    device = os.environ["KERNELSMITH_DEVICE"]
    _preload(device, candidate=True)
    link = channel.Link(_link(), pin=device == "cuda")
    try:
        _warm_triton(device)
    except Exception as exc:  # noqa: BLE001 - a cold start is slower, not wrong
        sys.stderr.write(f"kernelsmith: Triton warm-up failed ({type(exc).__name__}: {exc})\n")
    runner = CandidateRunner(link, device)
    config = link.recv()  # who this candidate is: sent when an evaluation takes this sandbox
    if config.get("op") != "config":
        return 2
    if not runner.cand_path.exists():  # bound read-only where the sandbox was made for it
        runner.cand_path.write_text(str(config.get("source", "")))
    os.environ["KERNELSMITH_CUDA_EXTENSIONS"] = json.dumps(config.get("cuda_extensions", []))
    runner.configure(str(config.get("policy", "strict")), bool(config.get("require_kernel", True)),
                     str(config.get("backend", "triton")), str(config.get("precision", "tf32x3")))
    if os.environ.get("KERNELSMITH_PROFILE") == "1":
        import cProfile

        global _PROFILE
        _PROFILE = cProfile.Profile()
        _PROFILE.enable()
    try:
        runner.serve()
    except channel.ChannelError:
        return 0  # the judge is gone: nothing left to answer
    except BaseException as exc:  # noqa: BLE001 - every failure becomes a verdict
        runner.fail(exc)
    return 0


# ============================================================================ the template that forks candidates


def run_zygote() -> int:
    """Import everything a candidate needs once, then fork a walled-in child per `spawn` (nest.py). Runs as root
    in its own sandbox, referee code only: no candidate code ever runs before its child's privileges are gone."""
    import signal

    import kernelsmith.referee.audit  # noqa: F401 - what the candidate imports, imported once here
    import kernelsmith.referee.guards  # noqa: F401
    import kernelsmith.referee.policy  # noqa: F401
    import kernelsmith.referee.timing  # noqa: F401

    ctl = _link()
    device = os.environ["KERNELSMITH_DEVICE"]
    _preload(device, candidate=True, cuda=False)  # no CUDA context: it does not survive a fork
    if device == "cpu":
        try:
            _warm_triton(device)
        except Exception:  # noqa: BLE001 - each child warms up itself then
            pass
    import torch

    threads = len(os.listdir("/proc/self/task"))
    forkable = threads == 1 and not (device == "cuda" and torch.cuda.is_initialized())
    channel.send(ctl, {"op": "ready" if forkable else "unforkable", "threads": threads})
    if not forkable:  # a threaded process's fork copies locks held by threads the child does not have
        return 4
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the waiting parents are reaped by the kernel
    while True:
        try:
            data, fds, _, _ = socket.recv_fds(ctl, channel.INLINE, 3)
        except OSError:
            return 0
        if not data:
            return 0
        try:
            spec = json.loads(data)
        except ValueError:
            spec = {}
        if spec.get("op") != "spawn" or len(fds) != 3:
            for fd in fds:
                os.close(fd)
            continue
        if os.fork() == 0:
            _forked(ctl, spec, *fds)  # never returns
        for fd in fds:
            os.close(fd)


def _forked(ctl: socket.socket, spec: dict[str, Any], chan: int, log: int, status: int) -> None:
    """The template's child: new namespaces, then a grandchild (PID 1 of the new PID namespace) that walls itself
    in and forks the candidate (PID 2); this process waits and writes the exit status for the orchestrator."""
    import signal

    from kernelsmith.referee import nest

    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        nest.die_with_parent()
        os.close(ctl.detach())
        nest.unshare(nest.NAMESPACES)
        pid = os.fork()
    except BaseException:  # noqa: BLE001
        os._exit(70)
    if pid == 0:
        _walled_in(spec, chan, log)
    os.close(chan)
    os.close(log)
    try:
        _, st = os.waitpid(pid, 0)
        os.write(status, str(os.waitstatus_to_exitcode(st)).encode())
    finally:
        os._exit(0)


def _run_script() -> int:
    """Role `exec` (tests of the boundary itself): run the script the orchestrator sends, unguarded, as an
    attacker's native code would run."""
    msg = channel.recv(_link())
    sys.argv = [str(a) for a in msg.get("argv", ["script"])]
    try:
        exec(compile(str(msg.get("source", "")), sys.argv[0], "exec"), {"__name__": "__main__"})  # noqa: S102
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 1
    return 0


def _walled_in(spec: dict[str, Any], chan: int, log: int) -> None:
    import signal

    from kernelsmith.referee import nest

    code = 71
    try:
        os.dup2(log, 1)
        os.dup2(log, 2)
        null = os.open("/dev/null", os.O_RDONLY)
        os.dup2(null, 0)
        nest.wall_in(int(spec["uid"]), int(spec["tmp_mb"]), int(spec["file_mb"]),
                     int(spec["data_mb"]) if spec.get("data_mb") is not None else None, keep_fds=[chan])
        pid = os.fork()
        if pid:  # PID 1 of the namespace, like bubblewrap's init: the candidate is an ordinary process (signals
            os.close(chan)  # it sends itself are not ignored), and when it ends everything it started ends
            nest.prctl(nest.PR_SET_DUMPABLE, 0)  # not ptrace-able by the candidate's (same) uid
            for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2):
                signal.signal(sig, signal.SIG_IGN)
            while True:  # reaps every orphan of the namespace, not only the candidate: no zombie heap
                got, st = os.waitpid(-1, 0)
                if got == pid:
                    status = os.waitstatus_to_exitcode(st)
                    os._exit(128 - status if status < 0 else status)
        nest.die_with_parent()
        os.environ["KERNELSMITH_FD"] = str(chan)
        sock = socket.socket(fileno=chan)
        sock.sendall(b'{"op": "hello"}')  # the orchestrator learns this process's host pid from the kernel
        placed = sock.recv(4096)
        sock.detach()
        if placed != b'{"op": "placed"}':
            os._exit(72)
        role = spec.get("role", "candidate")
        code = run_candidate() if role == "candidate" else run_judge() if role == "judge" else _run_script()
    except BaseException as exc:  # noqa: BLE001 - no candidate code has run if this is reached before `placed`
        try:
            sys.stderr.write(f"kernelsmith: the forked sandbox failed: {type(exc).__name__}: {exc}\n")
        except Exception:  # noqa: BLE001
            pass
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001
                pass
        os._exit(code)


def main(argv: list[str]) -> int:
    role = argv[1] if len(argv) > 1 else ""
    if role == "judge":
        return run_judge()
    if role == "candidate":
        return run_candidate()
    if role == "zygote":
        return run_zygote()
    sys.stderr.write("usage: python -m kernelsmith.referee.worker judge|candidate\n")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
