"""The referee's answer for one candidate: status, errors, speedup with its confidence, and guard findings."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any


class Status(str, Enum):
    """Exactly one per verdict. Ordered from worst stage to best for the workshop's scoring."""

    CRASHED = "crashed"  # the child died (signal, CUDA context lost, memory limit)
    TIMEOUT = "timeout"  # the whole evaluation ran past its wall-clock limit
    COMPILE_ERROR = "compile_error"  # the program or a Triton kernel did not build
    RUNTIME_ERROR = "runtime_error"  # an exception while constructing or running ModelNew
    REJECTED = "rejected"  # a guard caught a cheat
    INCORRECT = "incorrect"  # ran, but outputs differ from the reference
    CORRECT = "correct"


class Severity(str, Enum):
    REJECT = "reject"  # makes the verdict `rejected`
    FAIL = "fail"  # makes the verdict `incorrect`
    WARN = "warn"  # reported, does not change the status


@dataclass(frozen=True)
class Finding:
    """One guard's observation. `name` is stable (tests and the workshop key on it); `message` is for people."""

    name: str
    message: str
    severity: Severity = Severity.REJECT

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "message": self.message, "severity": self.severity.value}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Finding:
        return cls(d["name"], d["message"], Severity(d.get("severity", "reject")))


@dataclass
class Verdict:
    status: Status
    speedup: float | None = None
    speedup_ci: list[float] | None = None
    ref_ms: float | None = None
    cand_ms: float | None = None
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    guards: list[Finding] = field(default_factory=list)
    log: str = ""
    device: str = ""
    versions: dict[str, str] = field(default_factory=dict)
    trials: int = 0  # input sets compared against the reference
    error: str = ""  # one line: why it is not correct (first failing check), empty when correct
    ops: dict[str, int] = field(default_factory=dict)  # torch operators executed by forward, by count
    kernels: dict[str, int] = field(default_factory=dict)  # Triton kernels launched by forward, by count
    timing: dict[str, Any] = field(default_factory=dict)  # method, repetitions, spread
    sandbox: dict[str, Any] = field(default_factory=dict)  # what the candidate's child ran as: uid, network
    elapsed_s: float = 0.0
    # Whose failure ended the evaluation when it was not the candidate's: "task" when the task's own code failed
    # (its inputs, its reference), whatever `status` says; "" otherwise. The status keeps its meaning for the
    # workshop's scores; a caller tells the task's fault from the candidate's by this field, not by `error`.
    fault: str = ""
    fault_kind: str = ""  # with fault "task": memory, timeout, inputs (not deterministic), error, crash
    # The numbers' terms: the fp32 matmul/conv precision the evaluation ran at (ieee, tf32x3, tf32; the baselines'
    # too) and the numerics policy that judged them (tolerance, fp32). "" in verdicts recorded before they existed.
    precision: str = ""
    numerics: str = ""
    # Under numerics "fp32": the judge's worst case of the candidate's normwise error against the float64 reference
    # beside the fp32 reference's own (candidate, reference, ratio, limit, output, case).
    fp64_error: dict[str, Any] = field(default_factory=dict)

    @property
    def task_fault(self) -> bool:
        return self.fault == "task"

    @property
    def correct(self) -> bool:
        return self.status is Status.CORRECT

    def finding(self, name: str) -> Finding | None:
        return next((g for g in self.guards if g.name == name), None)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["status"] = self.status.value
        d["correct"] = self.correct
        d["guards"] = [g.to_dict() for g in self.guards]
        return d

    @classmethod
    def coerce(cls, obj: Verdict | Mapping[str, Any]) -> Verdict:
        """A `Verdict` from a verdict or its dict form (the pool's and the service's answer): what is not a
        verdict (no status, a status no verdict has, e.g. the pool's `bad_request`) becomes `crashed` with the
        reason, so a caller never has to tell the shapes apart."""
        if isinstance(obj, Verdict):
            return obj
        d = dict(obj)
        try:
            return cls.from_dict(d)
        except (KeyError, ValueError, TypeError) as exc:
            status = d.get("status", "(none)")
            return cls(Status.CRASHED, error=f"not a verdict (status {status!r}): {d.get('error') or exc}"[:500])

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Verdict:
        d = dict(d)
        d.pop("correct", None)
        d["status"] = Status(d["status"])
        d["guards"] = [Finding.from_dict(g) for g in d.get("guards", [])]
        known = cls.__dataclass_fields__
        return cls(**{k: v for k, v in d.items() if k in known})
