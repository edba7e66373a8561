"""The one settings model of an evaluation, shared by every way in: `kernelsmith eval`, the workshop's runs, the
bench, the coach's reward, the pool and the service.

`EvalSettings` is what a caller may choose about one evaluation, validated once here (a device that is not
`cuda`/`cpu`, a NaN or infinite timeout, an unknown option: a `ValueError` naming the setting). `EvalRequest`
is one evaluation asked of the pool: task, candidate and settings. The referee's `EvalOptions` extends the
settings with what the pool decides (GPU, timing lease, spares), so a request's settings can never place work.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

Device = Literal["cuda", "cpu"]
Policy = Literal["strict", "lenient"]
Backend = Literal["triton", "cuda"]  # kernelsmith.backends.BACKEND_NAMES
DEVICES: tuple[str, ...] = ("cuda", "cpu")
MAX_SOURCE = 1 << 20  # characters of task or candidate source in one request


def check_device(device: str | None, what: str = "device") -> str | None:
    """The one check of a device name (CLI flags, configs, requests); None passes (the default applies)."""
    if device is not None and device not in DEVICES:
        raise ValueError(f"{what} {device!r}: expected cuda or cpu")
    return device


class EvalSettings(BaseModel):
    """What a caller may choose about one evaluation."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, validate_assignment=False)
    device: Device = "cuda"
    policy: Policy = Field("strict", description="strict: all compute in Triton; lenient: KernelBench's rule")
    timeout_s: float = Field(300.0, gt=0, le=86400, description="the evaluation, less waits for sandboxes and "
                             "for the GPU's timing lease")
    trials: int = Field(5, ge=1, le=100, description="random input sets, plus the task's get_test_inputs()")
    test_inputs: bool = True
    tolerance: float | None = Field(None, gt=0, le=1, description="overrides the per-dtype default")
    timing: dict[str, Any] = Field(default_factory=dict, description="TimingOptions fields (budget_s, ...)")
    require_kernel: bool = Field(True, description="False only for A/A benchmarks: the reference's own code")
    backend: Backend = Field("triton", description="triton, or cuda (CUDA C++ through load_inline)")
    compile_timeout_s: float = Field(240.0, gt=0, le=3600, description="a backend's build step, within timeout_s")

    def __init__(self, **data: Any):
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise SettingsError(describe(exc, type(self).model_fields)) from None

    @field_validator("timing")
    @classmethod
    def _timing(cls, value: dict[str, Any]) -> dict[str, Any]:
        import dataclasses

        from kernelsmith.referee.timing import TimingOptions

        known = {f.name for f in dataclasses.fields(TimingOptions)}
        unknown = sorted(set(value) - known)
        if unknown:
            raise ValueError(f"unknown timing option(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        try:
            TimingOptions(**value)
        except TypeError as exc:
            raise ValueError(str(exc)) from None
        for k, v in value.items():
            if isinstance(v, float) and not (v == v and abs(v) != float("inf")):
                raise ValueError(f"timing option {k}: must be a finite number")
        return value


class EvalRequest(BaseModel):
    """One evaluation asked of the pool (a dict of this shape at the HTTP and Ray boundaries)."""

    model_config = ConfigDict(extra="forbid")
    task_source: str = Field(min_length=1, max_length=MAX_SOURCE)
    task_name: str = Field("task", max_length=200)
    candidate_source: str = Field(min_length=1, max_length=MAX_SOURCE)
    options: EvalSettings = Field(default_factory=EvalSettings)
    overrides: dict[str, Any] = Field(default_factory=dict, description="task constants (--set)")

    def to_dict(self) -> dict[str, Any]:
        """The request as it crosses HTTP, Ray or the job store: only the settings that were given."""
        d = self.model_dump(exclude={"options"})
        d["options"] = self.options.model_dump(exclude_unset=True)
        return d


class SettingsError(ValueError):
    """Settings that cannot be used; the message names each bad setting and why."""


def describe(exc: ValidationError, known: Any = (), origin: str = "") -> str:
    """A validation error as one line per setting ("timeout_s: Input should be a finite number")."""
    lines = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err["loc"]) or "(top level)"
        msg = err["msg"].removeprefix("Value error, ")
        value = err.get("input")
        if err["type"] == "extra_forbidden":
            msg = "unknown setting" + (f" (known: {', '.join(sorted(known))})" if known else "")
        elif value is None or isinstance(value, (str, int, float, bool)):
            where = f"{where} {value[:80]!r}" if isinstance(value, str) else f"{where} {value}"  # as given
        lines.append(f"{origin + ': ' if origin else ''}{where}: {msg}")
    return "; ".join(lines)
