"""The one settings model of an evaluation, shared by every way in: `kernelsmith eval`, the workshop's runs, the
bench, the coach's reward, the pool and the service.

`EvalSettings` is what a caller may choose about one evaluation, validated once here (a device that is not
`cuda`/`cpu`, a NaN or infinite timeout, an unknown option: a `ValueError` naming the setting). `EvalRequest`
is one evaluation asked of the pool: task, candidate and settings. The referee's `EvalOptions` extends the
settings with what the pool decides (GPU, timing lease, spares), so a request's settings can never place work.
"""

from __future__ import annotations

import inspect
import math
import typing
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator

Device = Literal["cuda", "cpu"]
Policy = Literal["strict", "lenient"]
Backend = Literal["triton", "cuda"]  # kernelsmith.backends.BACKEND_NAMES
# The fp32 matmul/convolution precision: what the compiler generates for fp32 dots and what the baselines (eager,
# torch.compile) run at, so that a speedup compares like with like. tf32x3 splits each fp32 operand into a tf32
# high and low part and sums three tf32 products: about fp32's accuracy at a fraction of the cost of "ieee".
Precision = Literal["ieee", "tf32x3", "tf32"]
PRECISIONS: dict[str, str] = {"ieee": "fp32 dots in full fp32", "tf32x3": "fp32 dots as 3 tf32 passes",
                              "tf32": "fp32 dots as 1 tf32 pass (10-bit mantissa operands)"}
DEFAULT_PRECISION = "tf32x3"
# How the referee decides that a candidate's numbers are right: "tolerance" is KernelBench's atol/rtol rule;
# "fp32" also refuses reduced-precision arithmetic on fp32 outputs (judged against a float64 reference).
Numerics = Literal["tolerance", "fp32"]
NUMERICS: dict[str, str] = {"tolerance": "KernelBench's atol/rtol rule",
                            "fp32": "fp32 outputs as accurate as the fp32 reference, judged against float64"}
DEVICES: tuple[str, ...] = ("cuda", "cpu")
MAX_SOURCE = 1 << 20  # characters of task or candidate source in one request
# The timing options a request may set, each with its allowed range: a budget of 1e9 s would hold a GPU alone.
TIMING_LIMITS: dict[str, tuple[type, float, float]] = {
    "budget_s": (float, 0.01, 600), "min_reps": (int, 1, 100_000), "max_reps": (int, 1, 1_000_000),
    "warmup_s": (float, 0, 60), "graph_threshold_ms": (float, 0, 1000), "pool_bytes": (int, 0, 1 << 36),
    "bootstrap": (int, 0, 100_000), "noise_floor": (float, 0, 1), "canary_every": (int, 1, 1_000_000),
    "target_rse": (float, 0, 1), "chunk": (int, 1, 100_000),
}


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
    precision: Precision = Field(DEFAULT_PRECISION, description="fp32 matmul/conv precision of the generated code "
                                 "and of the baselines: ieee, tf32x3 or tf32")
    numerics: Numerics = Field("tolerance", description="tolerance: KernelBench's rule; fp32: also refuse "
                               "reduced-precision arithmetic on fp32 outputs")

    def __init__(self, **data: Any):
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise SettingsError(describe(exc, type(self).model_fields, model=type(self)), exc) from None

    @field_validator("numerics")
    @classmethod
    def _numerics(cls, value: str, info: ValidationInfo) -> str:
        if value == "fp32" and info.data.get("precision") == "tf32":
            raise ValueError("numerics fp32 refuses tf32 arithmetic, which precision tf32 asks for: use precision "
                             "ieee or tf32x3 with it")
        return value

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
            if k == "graph":
                if v not in ("auto", "on", "off"):
                    raise ValueError(f"timing option graph {v!r}: expected auto, on or off")
                continue
            kind, lo, hi = TIMING_LIMITS[k]
            number = isinstance(v, (int, float)) and not isinstance(v, bool) and (kind is float or isinstance(v, int))
            if not number or not math.isfinite(v) or not lo <= v <= hi:
                what = "an integer" if kind is int else "a finite number"
                raise ValueError(f"timing option {k} {v!r}: must be {what} in [{lo:g}, {hi:g}]")
        if value.get("min_reps", 0) > value.get("max_reps", math.inf):
            raise ValueError("timing options: min_reps must not exceed max_reps")
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
    """Settings that cannot be used; the message names each bad setting and why. `cause`: pydantic's errors,
    for a caller that names the settings its own way (the CLI names its flags)."""

    def __init__(self, message: str, cause: ValidationError | None = None):
        super().__init__(message)
        self.cause = cause


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model a field holds (directly, in a list, or optional), to follow a nested error's path."""
    if inspect.isclass(annotation) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = _model_in(arg)
        if found is not None:
            return found
    return None


def field_range(model: type[BaseModel] | None, loc: tuple[Any, ...] | list[Any]) -> str:
    """The allowed range of the numeric setting at `loc` in words ("> 0 and <= 86400"); '' when unbounded."""
    info = None
    for part in loc:
        if isinstance(part, int):
            continue
        if model is None or part not in model.model_fields:
            return ""
        info = model.model_fields[part]
        model = _model_in(info.annotation)
    bounds = []
    for meta in info.metadata if info is not None else []:
        for attr, sym in (("gt", ">"), ("ge", ">="), ("lt", "<"), ("le", "<=")):
            bound = getattr(meta, attr, None)
            if isinstance(bound, (int, float)):
                bounds.append(f"{sym} {bound:g}")
    return " and ".join(bounds)


def describe(exc: ValidationError, known: Any = (), origin: str = "", model: type[BaseModel] | None = None,
             names: dict[str, str] | None = None) -> str:
    """A validation error as one line, a clause per setting ("timeout_s nan: Input should be a finite number
    (allowed: > 0 and <= 86400)"): the value as given and, for a bounded number, its limits. `names`: what to
    call a setting instead (a CLI flag: {"timeout_s": "--timeout"})."""
    lines = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err["loc"]) or "(top level)"
        where = (names or {}).get(where, where)
        msg = err["msg"].removeprefix("Value error, ")
        value = err.get("input")
        if err["type"] == "extra_forbidden":
            msg = "unknown setting" + (f" (known: {', '.join(sorted(known))})" if known else "")
        elif value is None or isinstance(value, (str, int, float, bool)):
            where = f"{where} {value[:80]!r}" if isinstance(value, str) else f"{where} {value}"  # as given
        allowed = field_range(model, err["loc"])
        if allowed:
            msg += f" (allowed: {allowed})"
        lines.append(f"{origin + ': ' if origin else ''}{where}: {msg}")
    return "; ".join(lines)
