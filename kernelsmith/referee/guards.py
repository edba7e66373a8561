"""Run-time guards installed inside the candidate's child process (never regex on the source).

They watch what `forward` really does: which Triton kernels it launches (hooked on Triton's launch path), which
torch operators it executes (a `TorchDispatchMode`, so `getattr(torch, "soft" + "max")`, `torch.ops.aten.*`,
`F.*` and `nn.*` submodules are all seen), whether it starts threads or processes, and whether it patched the
functions the referee relies on. They are tamper-evident, not tamper-proof: the comparison that decides
correctness happens in the parent process, out of the candidate's reach.
"""

from __future__ import annotations

import inspect
import os
import sys
import time
from collections import Counter
from collections.abc import Callable
from contextlib import contextmanager
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode, _get_current_dispatch_mode_stack

from kernelsmith.referee.verdict import Finding, Severity


def _ledger() -> tuple[Callable[[str], None], Callable[[], Counter[str]]]:
    """A second, private record of what the recorders saw: a list only these two closures hold. Everything noted
    between `watch` markers must match the recorders' own counters, so a candidate that switches a recorder off
    (`active = False`) or clears or bumps its counters must find and edit this too (defence in depth)."""
    entries: list[str] = []

    def note(entry: str) -> None:
        entries.append(entry)

    def tally() -> Counter[str]:
        inside, seen = False, Counter()
        for e in entries:
            if e in ("<watch>", "</watch>"):
                inside = e == "<watch>"
            elif inside:
                seen[e] += 1
        return seen

    return note, tally


class LaunchRecorder:
    """Wraps Triton's `run` (compiled and interpreted) to count launches made during a guarded call.

    Only kernels defined in the candidate's own file count as the candidate's kernels; launches of kernels
    from elsewhere (a library, torch inductor) are recorded as foreign and do not satisfy the guard.
    """

    def __init__(self, candidate_file: str):
        self.candidate_file = os.path.realpath(candidate_file)
        self.kernels: Counter[str] = Counter()
        self.foreign: Counter[str] = Counter()
        self.depth = 0  # > 0 while inside a launch (ops there are judged apart: OpRecorder.launch_ops)
        self.empty = 0  # launches whose grid had no program
        self.active = False
        self.failure: BaseException | None = None
        self.wrappers: dict[type, Callable[..., Any]] = {}
        self.note: Callable[[str], None] = lambda entry: None  # GuardSession gives it the ledger

    def install(self) -> None:
        from triton.runtime.jit import JITFunction

        classes: list[type] = [JITFunction]
        try:
            from triton.runtime.interpreter import InterpretedFunction

            classes.append(InterpretedFunction)
        except ImportError:  # pragma: no cover - older Triton
            pass
        for cls in classes:

            def run(fn_self: Any, *args: Any, _original: Callable[..., Any] = cls.run,
                    _recorder: LaunchRecorder = self, **kwargs: Any) -> Any:
                if kwargs.get("warmup"):
                    return _original(fn_self, *args, **kwargs)
                grid, programs = kwargs.get("grid"), []
                if callable(grid):
                    def sized(meta: Any, _grid: Any = grid) -> Any:
                        g = _grid(meta)
                        programs.append(_programs(g))
                        return g

                    kwargs["grid"] = sized
                else:
                    programs.append(_programs(grid))
                _recorder.depth += 1
                try:
                    result = _original(fn_self, *args, **kwargs)
                except BaseException as exc:
                    _recorder.failure = exc  # raised while building or running a kernel
                    raise
                finally:
                    _recorder.depth -= 1
                _recorder.launched(fn_self, programs)
                return result

            cls.run = run
            self.wrappers[cls] = run

    def launched(self, fn_self: Any, programs: list[int]) -> None:
        """Count a launch that ran at least one program (an empty grid launches nothing)."""
        if not programs or min(programs) <= 0:
            self.empty += 1 if self.active else 0
            return
        fn = getattr(fn_self, "fn", None)
        name = getattr(fn, "__name__", type(fn_self).__name__)
        code = getattr(fn, "__code__", None)
        own = (os.path.realpath(code.co_filename) if code is not None else "") == self.candidate_file
        self.note(("kernel:" if own else "foreign:") + name)
        if self.active:
            (self.kernels if own else self.foreign)[name] += 1

    def intact(self) -> list[str]:
        return [f"{cls.__name__}.run" for cls, w in self.wrappers.items() if cls.__dict__.get("run") is not w]


def _programs(grid: Any) -> int:
    """How many programs a launch grid asks for (-1 when it cannot be told)."""
    g = grid if isinstance(grid, (tuple, list)) else (grid,)
    try:
        n = 1
        for x in g:
            n *= int(x)
        return n
    except (TypeError, ValueError):
        return -1


class OpRecorder(TorchDispatchMode):
    """Records every torch operator that reaches the dispatcher while active. Those run inside a Triton launch
    (the interpreter's own copies; a callable grid or a Python helper a kernel calls) are counted apart,
    in `launch_ops`, and judged by the same policy: a launch is no place to hide torch compute."""

    def __init__(self, launches: LaunchRecorder, device: str):
        super().__init__()
        self.launches = launches
        self.device = device
        self.ops: Counter[str] = Counter()
        self.launch_ops: Counter[str] = Counter()
        self.host_transfers = 0
        self.note: Callable[[str], None] = lambda entry: None  # GuardSession gives it the ledger
        self.active = False

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        name = func.name().split(".")[0]
        inside = self.launches.depth > 0
        self.note(("launch_op:" if inside else "op:") + name)
        if self.active and inside:
            self.launch_ops[name] += 1
        elif self.active:
            self.ops[name] += 1
            if self.device != "cpu" and name in ("aten::_to_copy", "aten::copy_", "aten::to"):
                devices = {a.device.type for a in _tensors(args, kwargs)}
                target = kwargs.get("device")
                if target is not None:
                    devices.add(torch.device(target).type)
                if "cpu" in devices:
                    self.host_transfers += 1
        return func(*args, **kwargs)


def _tensors(args: tuple, kwargs: dict) -> list[torch.Tensor]:
    flat = list(args) + list(kwargs.values())
    return [a for a in flat if isinstance(a, torch.Tensor)]


def _children() -> set[str]:
    """Pids of this process's live children (a process the candidate left running)."""
    children: set[str] = set()
    try:
        for tid in os.listdir("/proc/self/task"):
            with open(f"/proc/self/task/{tid}/children") as fh:
                children.update(fh.read().split())
    except OSError:
        pass
    return children


def _on_stack(filename: str) -> bool:
    f = sys._getframe(2)
    while f is not None:
        if f.f_code.co_filename == filename:
            return True
        f = f.f_back
    return False


# Private torch entry points that switch dispatch modes off; the referee's recorder must stay on.
MODE_SWITCHES: list[tuple[Any, str]] = [
    (torch.utils._python_dispatch, "_disable_current_modes"),
    (torch.utils._python_dispatch, "_pop_mode_temporarily"),
    (torch.utils._python_dispatch, "_pop_mode"),
    (torch._C, "_pop_torch_dispatch_stack"),
    (torch._C, "_unset_dispatch_mode"),
    (torch._C, "_DisableTorchDispatch"),
    (torch._C, "_DisablePythonDispatcher"),
    # Below the Python key: the recorder never sees an operator run with that key excluded or redispatched.
    (torch._C, "_ExcludeDispatchKeyGuard"),
    (torch._C, "_dispatch_tls_set_dispatch_key_excluded"),
    (torch._C, "_dispatch_tls_set_dispatch_key_included"),
    (torch._C, "_ForceDispatchKeyGuard"),
    (torch._ops.OpOverload, "redispatch"),
]
# Classes whose attributes a candidate could replace (`torch.Tensor.__eq__ = ...` raises no audit event):
# their whole namespace is snapshotted and compared after every forward.
WATCHED_CLASSES: list[tuple[str, type]] = [
    ("torch.Tensor", torch.Tensor), ("torch._C.TensorBase", torch._C.TensorBase),
    ("torch.nn.Module", torch.nn.Module), ("torch._ops.OpOverload", torch._ops.OpOverload),
    ("TorchDispatchMode", TorchDispatchMode),
]


# Functions and classes the referee relies on inside the child; a candidate that rebinds one is tampering.
WATCHED: list[tuple[str, Any, str]] = [
    ("torch", torch, "allclose"),
    ("torch", torch, "equal"),
    ("torch", torch, "manual_seed"),
    ("torch", torch, "save"),
    ("torch", torch, "randn"),
    ("torch", torch, "rand"),
    ("torch.testing", torch.testing, "assert_close"),
    ("torch.Tensor", torch.Tensor, "clone"),
    ("torch.Tensor", torch.Tensor, "cpu"),
    ("torch.Tensor", torch.Tensor, "copy_"),
    ("torch.Tensor", torch.Tensor, "view"),
    ("torch.Tensor", torch.Tensor, "reshape"),
    ("torch.Tensor", torch.Tensor, "contiguous"),
    ("torch.Tensor", torch.Tensor, "__torch_function__"),
    ("torch.cuda", torch.cuda, "synchronize"),
    ("torch.cuda", torch.cuda, "Event"),
    ("torch.cuda", torch.cuda, "CUDAGraph"),
    ("torch.cuda.Event", torch.cuda.Event, "record"),
    ("torch.cuda.Event", torch.cuda.Event, "elapsed_time"),
    ("time", time, "perf_counter"),
    ("time", time, "time"),
    ("time", time, "monotonic"),
    ("os", os, "_exit"),
]


class TamperCheck:
    """Identity snapshot of watched attributes (plus extra ones registered by the worker)."""

    def __init__(self, extra: list[tuple[str, Any, str]] | None = None):
        self.watched = list(WATCHED) + list(extra or [])
        self.snapshot = [(label, obj, attr, *_identity(obj, attr)) for label, obj, attr in self.watched]
        self.classes = [(label, cls, dict(vars(cls))) for label, cls in WATCHED_CLASSES]

    def changed(self) -> list[str]:
        out = [f"{label}.{attr}" for label, obj, attr, ref, code in self.snapshot
               if _identity(obj, attr) != (ref, code)]
        for label, cls, before in self.classes:
            now = vars(cls)
            out += [f"{label}.{k}" for k in set(before) | set(now) if before.get(k) is not now.get(k)]
        return out


def _identity(obj: Any, attr: str) -> tuple[Any, Any]:
    """The stored attribute and its code object: swapping `__code__` keeps the function's identity."""
    value = _static(obj, attr)
    return value, getattr(value, "__code__", None)


def _static(obj: Any, attr: str) -> Any:
    """The attribute as stored (no descriptor binding, which makes a fresh object per lookup), unwrapped:
    torch._dynamo, when something imports it, rebinds `torch.manual_seed` to a functools.wraps wrapper."""
    value = inspect.getattr_static(obj, attr, None)
    try:
        return inspect.unwrap(value) if callable(value) else value
    except ValueError:  # pragma: no cover - a cycle of __wrapped__
        return value


def check_output(out: Any, device: str) -> tuple[list[torch.Tensor] | None, str]:
    """Flatten forward's result into plain dense tensors; a reason when it is anything else."""
    items = list(out) if isinstance(out, (tuple, list)) else [out]
    tensors: list[torch.Tensor] = []
    for i, t in enumerate(items):
        if type(t) is not torch.Tensor:  # noqa: E721 - subclasses (lazy, fake, wrapper tensors) are refused
            return None, f"output {i} is {type(t).__module__}.{type(t).__qualname__}, not a plain torch.Tensor"
        if t.layout is not torch.strided or t.is_meta or t.is_sparse or t.is_quantized or t.is_nested:
            return None, f"output {i} is not a dense strided tensor (layout {t.layout}, meta={t.is_meta})"
        if t.device.type != device:
            return None, f"output {i} is on {t.device}, expected {device}"
        if getattr(t, "__dict__", None):  # an instance attribute could shadow detach/cpu/copy when it is sent
            return None, f"output {i} carries instance attributes ({', '.join(sorted(t.__dict__))[:200]})"
        if t.numel() and t.untyped_storage().data_ptr() == 0:
            return None, f"output {i} has no storage"
        tensors.append(t)
    return tensors, ""


class GuardSession:
    """All guards for one candidate process. `watch()` wraps each forward call that is judged."""

    def __init__(self, candidate_file: str, device: str, policy: str, require_kernel: bool = True,
                 watch: list[tuple[str, Any, str]] | None = None, job_dir: str | None = None,
                 backend: str = "triton"):
        self.require_kernel = require_kernel
        self.backend = backend
        self.custom: Counter[str] = Counter()  # calls into the candidate's compiled extension (cuda backend)
        self.device = device
        self.policy = policy
        self.launches = LaunchRecorder(candidate_file)
        self.launches.install()
        self.ops = OpRecorder(self.launches, device)
        note, self._tally = _ledger()
        self.launches.note = self.ops.note = self._note = note
        self.baseline_children = _children()
        self.baseline_threads = len(sys._current_frames())
        self.findings: dict[str, Finding] = {}
        self._guard_mode_switches(candidate_file)
        self._guard_thread_starts(candidate_file)
        self.compile_calls: list[str] = []
        self._block_compile()
        self.tamper = TamperCheck(
            [("torch", torch, "compile"),
             ("guards", sys.modules[__name__], "check_output"), ("guards.GuardSession", GuardSession, "judge"),
             ("guards.GuardSession", GuardSession, "watch"), ("guards.GuardSession", GuardSession, "add"),
             *(watch or [])]
        )
        from kernelsmith.referee.audit import AuditGuard

        AuditGuard(candidate_file, job_dir or os.path.dirname(candidate_file),
                   lambda: self.launches.depth > 0, self.add).install()

    def _guard_thread_starts(self, candidate_file: str) -> None:
        """Python 3.11/3.12 raise no audit event for new threads: wrap the primitives `threading` uses too."""
        import _thread
        import threading

        real = os.path.realpath(candidate_file)
        for module in (_thread, threading):
            for name in ("start_new_thread", "_start_new_thread", "start_joinable_thread",
                         "_start_joinable_thread"):
                original = getattr(module, name, None)
                if original is None:
                    continue

                def start(*args: Any, _original: Any = original, _name: str = name, **kwargs: Any) -> Any:
                    if self.launches.depth == 0 and _on_stack(real):
                        self.add("extra_thread", f"candidate started a thread ({_name})")
                        raise PermissionError("kernelsmith referee: candidates may not start threads")
                    return _original(*args, **kwargs)

                setattr(module, name, start)

    def _guard_mode_switches(self, candidate_file: str) -> None:
        """Calls from candidate code to switch the dispatch recorder off are tampering, and refused."""
        real = os.path.realpath(candidate_file)
        for module, name in MODE_SWITCHES:
            original = getattr(module, name, None)
            if original is None:
                continue

            def switch(*args: Any, _original: Any = original, _name: str = name, **kwargs: Any) -> Any:
                f = sys._getframe(1)
                for _ in range(3):
                    if f is None:
                        break
                    if f.f_code.co_filename == real:
                        self.add("tampering", f"candidate switched the dispatch recorder off ({_name})")
                        raise PermissionError(f"kernelsmith referee: {_name} is not allowed in a candidate")
                    f = f.f_back
                return _original(*args, **kwargs)

            setattr(module, name, switch)

    def _block_compile(self) -> None:
        """torch.compile would launch inductor's Triton kernels and hide torch compute: run eagerly instead."""
        session = self

        def compile(model: Any = None, **kwargs: Any) -> Any:
            session.compile_calls.append("torch.compile")
            if model is None:
                return lambda m: m
            return model

        torch.compile = compile  # type: ignore[assignment]

    @contextmanager
    def watch(self) -> Any:
        self._note("<watch>")
        self.launches.active = self.ops.active = True
        try:
            with self.ops:
                yield
                stack = _get_current_dispatch_mode_stack()
                if not stack or stack[-1] is not self.ops:
                    self.add("tampering", "forward removed or replaced the referee's dispatch mode")
        finally:
            self.launches.active = self.ops.active = False
            self._note("</watch>")
            if _children() - self.baseline_children:
                self.add("extra_thread", "child process(es) alive after forward")
            if len(sys._current_frames()) > self.baseline_threads:
                self.add("extra_thread", "a Python thread besides the referee's is alive after forward")
            if _get_current_dispatch_mode_stack():
                self.add("tampering", "the referee's dispatch mode was left on the stack or replaced")

    def record_custom(self, label: str) -> None:
        """A call into the candidate's own compiled extension (a non-Triton backend's custom kernel)."""
        if self.launches.active:
            self.custom[label] += 1

    def kernels(self) -> dict[str, int]:
        """The candidate's own kernels launched while watched, for the backend in use."""
        return dict(self.launches.kernels) if self.backend == "triton" else dict(self.custom)

    def add(self, name: str, message: str, severity: Severity = Severity.REJECT) -> None:
        self.findings.setdefault(name, Finding(name, message, severity))

    def check_tamper(self) -> None:
        changed = self.tamper.changed() + self.launches.intact()
        if changed:
            self.add("tampering", f"candidate rebound referee-watched functions: {', '.join(changed)}")

    def judge(self) -> list[Finding]:
        """Findings from everything watched so far, by the policy."""
        from kernelsmith.referee.policy import NON_COMPUTE_OPS, disallowed_ops

        self.check_tamper()
        recorded = Counter({f"kernel:{k}": n for k, n in self.launches.kernels.items()})
        recorded.update({f"foreign:{k}": n for k, n in self.launches.foreign.items()})
        recorded.update({f"op:{k}": n for k, n in self.ops.ops.items()})
        recorded.update({f"launch_op:{k}": n for k, n in self.ops.launch_ops.items()})
        if +recorded != +self._tally():
            self.add("tampering", "the referee's record of operators or kernel launches was altered during "
                     "forward (a recorder switched off, or its counts changed)")
        if self.require_kernel and self.backend != "triton" and not self.custom:
            self.add("no_custom_kernel", f"forward called no function of the candidate's {self.backend} extension")
        if self.require_kernel and self.backend == "triton" and not self.launches.kernels:
            foreign = f" (only foreign kernels: {dict(self.launches.foreign)})" if self.launches.foreign else ""
            self.add("no_triton_kernel", f"forward launched no Triton kernel defined in the candidate{foreign}")
        bad = disallowed_ops(self.ops.ops, self.policy)
        if bad:
            listed = ", ".join(f"{k}×{v}" for k, v in sorted(bad.items()))
            self.add("torch_compute_op", f"policy {self.policy}: torch compute outside Triton: {listed}")
        hidden = {k: v for k, v in self.ops.launch_ops.items() if k not in NON_COMPUTE_OPS}
        if hidden and self.policy == "strict":
            listed = ", ".join(f"{k}×{v}" for k, v in sorted(hidden.items()))
            self.add("torch_compute_op", f"torch compute inside a Triton launch (a grid function or a Python "
                     f"helper, not kernel code): {listed}")
        if self.policy == "strict" and self.ops.host_transfers:
            self.add("host_transfer", f"forward copied data between device and host {self.ops.host_transfers}×")
        if self.compile_calls:
            self.add(
                "torch_compile",
                "candidate called torch.compile (ran eagerly instead)",
                Severity.REJECT if self.policy == "strict" else Severity.WARN,
            )
        return list(self.findings.values())
