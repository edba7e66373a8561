"""The Triton backend: today's behaviour, behind the `Backend` seam.

Triton kernels are built lazily at their first launch inside the candidate's child (the launch hook in
`referee/guards.py` sees compile errors there), so `build` has nothing to do; only kernels defined in the
candidate's own file count (`LaunchRecorder`).
"""

from __future__ import annotations

from typing import Any

from kernelsmith.backends import BuildResult


class TritonBackend:
    name = "triton"
    language = "Triton"
    guard_name = "no_triton_kernel"
    kernel_label = "Triton kernel defined in the candidate"
    prompt_notes = ("- All compute must happen in Triton kernels (`@triton.jit`) that the program defines and "
                    "launches.")

    def build(self, source: str, *, device: str, deadline: float, cache_dir: str | None,
              gpu: int | None = None, limits: Any = None) -> BuildResult:
        return BuildResult(ok=True)

    def knobs(self, source: str) -> list[Any]:
        """The launch knobs the offline tuner moves: block sizes, GROUP, num_warps, num_stages (static analysis,
        nothing runs)."""
        from kernelsmith.workshop.offline.mutate import triton_knobs

        return triton_knobs(source)
