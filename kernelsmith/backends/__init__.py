"""Backends: what a candidate is, how it is built, which launches count as its kernels, what the prompt says.

A backend is one module implementing `Backend`; the referee, the prompt and the offline tuner ask it instead of
assuming Triton. `triton` is today's behaviour unchanged; `cuda` is CUDA C++ through
`torch.utils.cpp_extension.load_inline` (KernelBench's format). A third backend (HIP/ROCm, a vendor DSL) is a
new module registered in `BACKENDS`, plus whatever build step and launch recorder it needs.

The seams, in the order an evaluation meets them:
- `build(candidate_source, ...)` (orchestrator, before any candidate code runs): compile what can be compiled
  without running the candidate; a `BuildResult` with trimmed compiler errors. Triton builds lazily at launch,
  so its `build` does nothing.
- `guard_name` / `kernel_label`: the finding when `forward` ran none of the candidate's own kernels, and what
  a kernel is called in messages.
- `prompt_notes`: the backend's rules for the model (the system template's `{backend_rules}`).
- `knobs(source)` / `mutate(...)`: the launch-configuration knobs the offline tuner edits.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

BACKEND_NAMES = ("triton", "cuda")


@dataclass
class BuildResult:
    """What a backend's build step says: ok, or a compile error trimmed for a person (or a model)."""

    ok: bool = True
    error: str = ""  # the trimmed compiler message (first errors with file:line), empty when ok
    log: str = ""  # a longer (still bounded) tail of the compiler output
    extensions: list[dict[str, Any]] = field(default_factory=list)  # what the candidate child must load
    info: dict[str, Any] = field(default_factory=dict)  # seconds, cached, mode: goes to verdict.timing["build"]


class Backend(Protocol):
    name: str
    guard_name: str  # the finding when forward launched none of the candidate's kernels
    kernel_label: str  # "Triton kernel", "CUDA kernel from the candidate's extension"
    prompt_notes: str  # backend-specific rules for the model
    language: str  # the language of its kernels, for the prompt ("Triton", "CUDA C++")

    def build(self, source: str, *, device: str, deadline: float, cache_dir: str | None,
              gpu: int | None = None, limits: Any = None) -> BuildResult: ...

    def knobs(self, source: str) -> list[Any]: ...


def get_backend(name: str) -> Backend:
    if name == "triton":
        from kernelsmith.backends.triton import TritonBackend

        return TritonBackend()
    if name == "cuda":
        from kernelsmith.backends.cuda import CudaBackend

        return CudaBackend()
    raise ValueError(f"backend {name!r}: expected one of {', '.join(BACKEND_NAMES)}")
