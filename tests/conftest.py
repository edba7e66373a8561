"""Shared machinery for the referee's adversarial and fault suites.

Each evaluation takes seconds (two child processes import torch), so a test module declares its evaluations
up front as `Job`s and a module-scoped `EvalPool` runs the ones the selected tests need, two at a time, the
first time any of them is asked for. `evaluate()` is thread-safe: every call has its own temporary directory.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from kernelsmith.referee.evaluation import EvalOptions, evaluate
from kernelsmith.referee.verdict import Verdict

CANDIDATES = Path(__file__).parent / "candidates"
TASK_RELU = CANDIDATES / "task_relu.py"
TASK_TINY = CANDIDATES / "task_tiny.py"
TASK_PAIR = CANDIDATES / "task_pair.py"
WORKERS = 2

_TIMINGS: list[tuple[str, str, float, str]] = []  # (module, job, seconds, status) for the summary


@dataclass
class Job:
    """One evaluation: `candidate` is a file name in tests/candidates, or a path (a generated variant)."""

    name: str
    candidate: str | Path
    task: Path = TASK_RELU
    options: dict[str, Any] = field(default_factory=dict)
    after: tuple[str, ...] = ()  # jobs that must have finished before this one starts
    runner: Callable[[Job], Any] | None = None  # instead of evaluate(): e.g. the CLI in a subprocess

    def candidate_path(self) -> Path:
        path = Path(self.candidate)
        return path if path.is_absolute() else CANDIDATES / path

    def opts(self) -> EvalOptions:
        return EvalOptions(**{"device": "cpu", "timeout_s": 120.0, "policy": "strict", **self.options})


def from_template(template: str, placeholder: str, value: str, dest: Path) -> Path:
    """Write tests/candidates/`template` with `placeholder` replaced by `value` to `dest`."""
    source = (CANDIDATES / template).read_text()
    assert placeholder in source, f"{template} has no {placeholder}"
    dest.write_text(source.replace(placeholder, value))
    return dest


class EvalPool:
    """Runs a module's jobs concurrently; `verdict(name)` blocks until that one is done."""

    def __init__(self, module: str, jobs: Iterable[Job], needed: set[str]):
        self.module = module
        self.jobs = {j.name: j for j in jobs}
        unknown = needed - set(self.jobs)
        assert not unknown, f"tests ask for undeclared jobs: {sorted(unknown)}"
        for j in self.jobs.values():  # a job's prerequisites run too
            needed |= set(j.after)
        self.needed = needed
        self.futures: dict[str, Future] = {}
        self.executor: ThreadPoolExecutor | None = None

    def _run(self, job: Job) -> Any:
        for dep in job.after:  # FIFO submission: every prerequisite has started, so this cannot deadlock
            self.futures[dep].result()
        t0 = time.monotonic()
        result = job.runner(job) if job.runner else evaluate(job.task, job.candidate_path(), job.opts())
        verdict = result if isinstance(result, Verdict) else result["verdict"]
        _TIMINGS.append((self.module, job.name, time.monotonic() - t0, verdict.status.value))
        return result

    def start(self) -> None:
        if self.executor is not None:
            return
        self.executor = ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="eval")
        order = [j for j in self.jobs.values() if j.name in self.needed and not j.after]
        order += [j for j in self.jobs.values() if j.name in self.needed and j.after]
        for job in order:
            self.futures[job.name] = self.executor.submit(self._run, job)

    def result(self, name: str) -> Any:
        """What the job's runner returned (a Verdict for a plain evaluation)."""
        self.start()
        if name not in self.futures:
            raise KeyError(f"job {name!r} was not scheduled (not used by any selected test?)")
        return self.futures[name].result()

    def verdict(self, name: str) -> Verdict:
        result = self.result(name)
        return result if isinstance(result, Verdict) else result["verdict"]

    def close(self) -> None:
        if self.executor is not None:
            self.executor.shutdown(wait=True)


def needed_jobs(request: pytest.FixtureRequest, param: str = "case") -> set[str]:
    """Job names the selected tests of this module use: their `param` parameter and `uses(...)` markers."""
    names: set[str] = set()
    for item in request.session.items:
        if getattr(item, "module", None) is not request.module:
            continue
        callspec = getattr(item, "callspec", None)
        if callspec is not None and param in callspec.params:
            names.add(callspec.params[param])
        for mark in item.iter_markers("uses"):
            names.update(mark.args)
    return names


def _uptime_ticks() -> int:
    return int(float(Path("/proc/uptime").read_text().split()[0]) * os.sysconf("SC_CLK_TCK"))


SESSION_START_TICKS = _uptime_ticks()  # processes started before this session are none of ours


def descendants(pid: int) -> list[int]:
    """`pid` and every process below it (by /proc's children lists)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            for tid in os.listdir(f"/proc/{p}/task"):
                todo += [int(c) for c in Path(f"/proc/{p}/task/{tid}/children").read_text().split()]
        except OSError:
            pass
    return out


def _parent(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return 0


def _ancestors(pid: int) -> set[int]:
    seen: set[int] = set()
    while pid > 1 and pid not in seen:
        seen.add(pid)
        try:
            pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
    return seen


def leftover_workers() -> list[tuple[int, str]]:
    """Referee worker processes started during this session that outlived their evaluation: any but those in
    the sandboxes the referee keeps on purpose (spares, judges kept for the next candidate)."""
    from kernelsmith.referee.evaluation import standing_sandboxes
    from kernelsmith.referee.sandbox import template_pids

    standing, templates = set(standing_sandboxes()), set(template_pids())
    inits = {_parent(p) for p in standing}  # a forked sandbox's PID 1, waiting for its (standing) process
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
            started = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[19])
        except (OSError, ValueError, IndexError):
            continue
        if started < SESSION_START_TICKS or "kernelsmith.referee.worker" not in argv:
            continue
        i = argv.index("kernelsmith.referee.worker")
        if i + 1 >= len(argv) or Path(argv[i + 1]).exists():
            continue
        line = _ancestors(int(entry.name))
        if line & standing or int(entry.name) in inits:
            continue
        if line & templates and (entry / "status").read_text().split("Uid:")[1].split()[0] == "0":
            continue  # a template itself, or the parent waiting for one of its forked sandboxes
        found.append((int(entry.name), argv[i + 1]))
    return found


def kill_marked(pidfile: Path) -> bool:
    """Kill the process whose pid our own candidate wrote to `pidfile` (by id, and only if it is still a
    referee worker); True if there was one to kill."""
    try:
        pid = int(pidfile.read_text())
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except (OSError, ValueError):
        return False
    if b"kernelsmith.referee.worker" not in argv:
        return False
    try:
        os.kill(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "uses(*jobs): evaluations (by job name) a test reads")


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not _TIMINGS:
        return
    tr = terminalreporter
    tr.section("referee evaluations")
    by_module: dict[str, float] = {}
    for module, name, seconds, status in sorted(_TIMINGS):
        tr.write_line(f"{module:>18}  {name:<34} {status:<14} {seconds:6.1f} s")
        by_module[module] = by_module.get(module, 0.0) + seconds
    for module, total in by_module.items():
        tr.write_line(f"{module}: {sum(1 for m, *_ in _TIMINGS if m == module)} evaluations, "
                      f"{total:.0f} s of evaluation time ({WORKERS} at a time)")
