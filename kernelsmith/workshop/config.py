"""Every setting of an evolution run in one validated model: a YAML file, then command-line flags on top.

A bad value is a `ConfigError` naming the file, the setting and, for a number, its allowed range (NaN and
infinities are refused everywhere). Secrets are never settings: the API key is read from the environment
variable that `api_key_env` names.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from kernelsmith import pyast
from kernelsmith.settings import Backend, Device, EvalSettings, Policy, field_range

CONFIG_FILE_BYTES = 1 << 20


class ConfigError(pyast.SourceError):
    """A configuration that cannot be used; the message names the file and the setting."""

    def __init__(self, message: str, file: str | Path | None = None, kind: str = "bad_config"):
        super().__init__(message, file, kind)


class ModelConfig(BaseModel):
    """One model of the (optionally weighted) ensemble."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    name: str
    base_url: str | None = None
    api_key_env: str = "OPENAI_API_KEY"
    weight: float = Field(1.0, gt=0, le=1e6)
    price_in_per_mtok: float = Field(0.0, ge=0, le=1e6)
    price_out_per_mtok: float = Field(0.0, ge=0, le=1e6)


class RunConfig(BaseModel):
    """Defaults follow the Kernel-Smith recipe (40 rounds, temperature 0.6, top-p 0.95, full rewrites). Every
    number is finite and bounded: a limit a run could never use is a typo caught before the run starts."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    task: Path | None = None
    rounds: int = Field(40, ge=1, le=100_000)
    population: int = Field(8, ge=1, le=4096, description="children proposed per round")
    islands: int = Field(4, ge=1, le=1024)
    migration_interval: int = Field(5, ge=1, le=100_000)
    hall_of_fame: int = Field(16, ge=1, le=100_000)
    inspirations: int = Field(3, ge=0, le=64)
    failures_in_prompt: int = Field(3, ge=0, le=64)
    models: list[ModelConfig] = Field(default_factory=list, description="empty: the offline proposer")
    proposer: Literal["auto", "llm", "offline", "mixed"] = Field(
        "auto", description="auto: the model when one is configured, else offline; mixed: model and tuner alternate")
    temperature: float = Field(0.6, ge=0, le=2)
    top_p: float = Field(0.95, gt=0, le=1)
    max_tokens: int = Field(8192, ge=1, le=10_000_000)
    request_timeout_s: float = Field(300, gt=0, le=86400)
    max_retries: int = Field(4, ge=0, le=100)
    concurrency: int = Field(4, ge=1, le=4096, description="model requests in flight")
    eval_workers: int | None = Field(None, ge=1, le=1024, description="evaluations in flight (default: on a GPU the "
                                     "pool's automatic slots, at most the population; 1 on the CPU)")
    max_total_tokens: int | None = Field(None, ge=1, le=10**15)
    max_cost_usd: float | None = Field(None, gt=0, le=1e9)
    response_mode: Literal["full", "diff"] = "full"
    device: Device = "cuda"
    policy: Policy = "strict"
    backend: Backend = Field("triton", description="kernel language: triton, or cuda (load_inline)")
    eval_timeout_s: float = Field(300, gt=0, le=86400)
    referee_url: str | None = Field(None, description="a `kernelsmith serve` URL: evaluate there, not here")
    referee_token_env: str = Field("KERNELSMITH_TOKEN", description="variable holding the service's token")
    overrides: dict[str, Any] = Field(default_factory=dict, description="task constants (--set)")
    templates_dir: Path | None = None
    run_dir: Path = Path("runs/latest")
    seed: int = 0

    def eval_settings(self) -> EvalSettings:
        """The settings every evaluation of this run is asked with (the one settings model)."""
        return EvalSettings(device=self.device, policy=self.policy, timeout_s=self.eval_timeout_s,
                            backend=self.backend)

    @field_validator("overrides")
    @classmethod
    def _names(cls, value: dict[str, Any]) -> dict[str, Any]:
        bad = [k for k in value if not k.isidentifier()]
        if bad:
            raise ValueError(f"not Python identifiers: {', '.join(bad)}")
        return value


def _describe(exc: ValidationError, origin: str, file_keys: set[str] | None = None) -> str:
    """One line: a clause per bad setting, with the value given and a number's allowed range. `file_keys`: the
    settings that came from the file `origin` names (the others came from the command line)."""
    lines = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err["loc"]) or "(top level)"
        if file_keys is not None:
            origin_here = origin if err["loc"] and err["loc"][0] in file_keys else "command line"
        else:
            origin_here = origin
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = f"unknown setting (known: {', '.join(sorted(RunConfig.model_fields))})"
        else:
            value = err.get("input")
            if value is None or isinstance(value, (int, float, bool)) or (isinstance(value, str) and len(value) < 80):
                msg += f" (got {value!r})"
            allowed = field_range(RunConfig, err["loc"])
            if allowed:
                msg += f" (allowed: {allowed})"
        lines.append(f"{origin_here}: setting '{where}': {msg}")
    return "; ".join(lines)


def load_config(path: str | Path | None = None, overrides: dict[str, Any] | None = None) -> RunConfig:
    """Read `path` (YAML: a regular file of at most 1 MiB) if given, apply `overrides` (flags; None values are
    ignored), validate."""
    data: dict[str, Any] = {}
    origin = "command line"
    loaded: Any = None
    if path is not None:
        path = Path(path)
        origin = str(path)
        raw = pyast.read_bytes(path, "config", ConfigError, limit=CONFIG_FILE_BYTES)
        try:
            loaded = yaml.safe_load(raw.decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise ConfigError(f"{path}: not UTF-8 text (byte {raw[exc.start]:#04x} at offset {exc.start})",
                              path, "encoding") from None
        except (yaml.YAMLError, RecursionError) as exc:
            raise ConfigError(f"{path}: not valid YAML: {' '.join(str(exc).split())}", path, "syntax") from None
        if loaded is not None and not isinstance(loaded, dict):
            raise ConfigError(f"{path}: expected a mapping of settings, got {type(loaded).__name__}", path)
        data.update(loaded or {})
    flags = {k: v for k, v in (overrides or {}).items() if v is not None}
    data.update(flags)
    try:
        return RunConfig.model_validate(data)
    except ValidationError as exc:
        from_file = set(loaded or {}) - set(flags)
        blamed = {err["loc"][0] for err in exc.errors() if err["loc"]} & from_file
        raise ConfigError(_describe(exc, origin, from_file), path if blamed else None) from None


# Settings a resumed run may change (recorded in the run): how long it goes on, what it may spend, how much it
# evaluates at once. Everything else is the run's: a different value would make it a different run.
MAY_CHANGE_ON_RESUME = ("rounds", "max_total_tokens", "max_cost_usd", "eval_workers", "concurrency",
                        "request_timeout_s", "max_retries")


def resume_config(run_dir: Path, path: str | Path | None = None,
                  overrides: dict[str, Any] | None = None) -> tuple[RunConfig, dict[str, Any]]:
    """The settings of the run in `run_dir` (its `config.yaml`), with the changes a resume may make; a setting
    (flag or `path`'s) that contradicts the run is refused, naming both values. Returns the config and what
    changed ({setting: [was, now]})."""
    recorded_file = Path(run_dir) / "config.yaml"
    if not recorded_file.is_file():
        raise ConfigError(f"{run_dir}: no run to resume (no config.yaml)", run_dir, "no_run")
    recorded = load_config(recorded_file).model_dump(mode="json")
    asked = load_config(path).model_dump(mode="json", exclude_unset=True) if path is not None else {}
    asked.update({k: v for k, v in (overrides or {}).items() if v is not None})
    asked.pop("run_dir", None)
    changed: dict[str, Any] = {}
    for key, value in asked.items():
        try:
            now = RunConfig.model_validate({**recorded, key: value}).model_dump(mode="json")[key]
        except ValidationError as exc:
            raise ConfigError(_describe(exc, "command line")) from None
        if now == recorded.get(key):
            continue
        if key not in MAY_CHANGE_ON_RESUME:
            raise ConfigError(f"{run_dir}: setting '{key}' is {recorded.get(key)!r} in this run, {now!r} asked; a "
                              f"resumed run keeps its settings (only {', '.join(MAY_CHANGE_ON_RESUME)} may change)")
        changed[key] = [recorded.get(key), now]
    config = RunConfig.model_validate({**recorded, **{k: v[1] for k, v in changed.items()}})
    return config, changed
