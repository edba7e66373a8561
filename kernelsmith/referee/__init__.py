"""The referee: judges one candidate against one task and returns one `Verdict`."""

from kernelsmith.referee.verdict import Finding, Severity, Status, Verdict

__all__ = ["EvalOptions", "Finding", "Severity", "Status", "Verdict", "evaluate"]


def __getattr__(name: str):  # evaluate pulls in torch; the worker and light callers need not
    if name in ("evaluate", "EvalOptions"):
        from kernelsmith.referee import evaluation

        return getattr(evaluation, name)
    raise AttributeError(name)
