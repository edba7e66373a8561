"""Starting and policing a referee child: scrubbed environment, own temp dir and Triton cache, limits, kill.

Limits: a wall-clock deadline (shared by the whole evaluation), a resident-memory ceiling polled from /proc
(RLIMIT_AS would break CUDA's address-space reservations), no core dumps, a file-size cap, and — when the
parent is root — no network (a fresh network namespace) and, where the interpreter is reachable for it, the
unprivileged `nobody` user. Secrets the parent holds are redacted from everything the child wrote.
"""

from __future__ import annotations

import ctypes
import os
import re
import resource
import signal
import stat
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import kernelsmith

PASS_ENV = ("PATH", "LANG", "LC_ALL", "CUDA_VISIBLE_DEVICES", "CUDA_HOME", "CUDA_PATH", "LD_LIBRARY_PATH",
            "NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES", "TRITON_PTXAS_PATH", "TRITON_LIBCUDA_PATH",
            "NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS", "OPENBLAS_CORETYPE",
            "OPENBLAS_L2_SIZE")
SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|AUTH", re.IGNORECASE)
CLONE_NEWNET = 0x40000000
PR_SET_PDEATHSIG = 1
NOBODY = 65534


@dataclass
class Limits:
    memory_mb: int = 16384  # resident memory of the child
    file_mb: int = 16384  # largest file the child may write


def secret_values(environ: dict[str, str] | None = None) -> list[str]:
    """Values of the parent's secret-looking variables (API keys, tokens): never shown to a child, redacted."""
    env = os.environ if environ is None else environ
    return sorted({v for k, v in env.items() if SECRET_NAME.search(k) and len(v) >= 8}, key=len, reverse=True)


def redact(text: str, secrets: list[str]) -> tuple[str, bool]:
    hit = False
    for s in secrets:
        if s in text:
            hit = True
            text = text.replace(s, "[REDACTED]")
    return text, hit


def child_env(work_dir: Path, device: str) -> dict[str, str]:
    """An allow-list environment: nothing from the parent but paths and device selection."""
    env = {k: os.environ[k] for k in PASS_ENV if k in os.environ}
    package_root = str(Path(kernelsmith.__file__).resolve().parent.parent)
    env.update({
        "HOME": str(work_dir),
        "TMPDIR": str(work_dir / "tmp"),
        "XDG_CACHE_HOME": str(work_dir / "cache"),
        "TRITON_CACHE_DIR": str(work_dir / "triton-cache"),
        "TORCHINDUCTOR_CACHE_DIR": str(work_dir / "inductor-cache"),
        "TORCH_EXTENSIONS_DIR": str(work_dir / "cache" / "torch-extensions"),
        "PYTHONPATH": package_root,
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONHASHSEED": "0",
        "PYTHONUNBUFFERED": "1",
        "OMP_NUM_THREADS": "1",
        # Keep freed heap memory in place so the poisoning of output memory is seen by the next allocation.
        "MALLOC_MMAP_THRESHOLD_": str(32 << 20),
        "MALLOC_TRIM_THRESHOLD_": str(1 << 40),
        "MALLOC_TOP_PAD_": "0",
        # glibc fills every malloc'd block (beyond the per-thread cache's small sizes) with 0xFE and freed
        # ones with 0x01: unwritten CPU output reads as garbage whatever the heap's layout (the worker
        # changes the byte per run, so two runs see different garbage).
        "MALLOC_PERTURB_": "1",
    })
    if device == "cpu":
        env["TRITON_INTERPRET"] = "1"
        env["CUDA_VISIBLE_DEVICES"] = ""
    for sub in ("tmp", "cache", "triton-cache", "inductor-cache"):
        (work_dir / sub).mkdir(exist_ok=True)
    return env


def visible_device(index: int) -> str:
    """The CUDA_VISIBLE_DEVICES entry for the parent's device `index` (the parent may itself be restricted)."""
    parent = [d.strip() for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    return parent[index] if index < len(parent) else str(index)


def _world_accessible(path: Path) -> bool:
    """Can an unprivileged user read `path` (every directory above it searchable)?"""
    path = path.resolve()
    for p in [path, *path.parents]:
        try:
            mode = p.stat().st_mode
        except OSError:
            return False
        need = stat.S_IXOTH if stat.S_ISDIR(mode) else stat.S_IROTH
        if not mode & need:
            return False
    return True


def can_drop_to_nobody() -> bool:
    if os.geteuid() != 0:
        return False
    import torch

    needed = [Path(sys.executable), Path(kernelsmith.__file__), Path(torch.__file__)]
    return all(_world_accessible(p) for p in needed)


def _preexec(limits: Limits, isolate_net: bool, drop: bool) -> None:
    """In the child before exec: limits, a private network namespace (needs root), then the user drop."""
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    fsize = limits.file_mb << 20
    resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
    if isolate_net:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.unshare(CLONE_NEWNET)  # best effort: without the privilege the child keeps the host network
    if drop:
        os.setgroups([])
        os.setgid(NOBODY)
        os.setuid(NOBODY)
    # After the user change (which clears it): the child dies with the thread that started it, so a killed
    # orchestrator or service leaves no candidate running on (a hang would otherwise run forever).
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


@dataclass
class ChildOutcome:
    returncode: int | None
    timed_out: bool = False
    memory_exceeded: bool = False
    signal_name: str = ""
    elapsed_s: float = 0.0
    peak_rss_mb: float = 0.0


@dataclass
class Child:
    """A running worker; `wait_for` polls it for a file, its exit, the deadline and its memory."""

    proc: subprocess.Popen
    work_dir: Path
    limits: Limits
    started: float = field(default_factory=time.monotonic)
    peak_rss_mb: float = 0.0

    @classmethod
    def start(cls, work_dir: Path, device: str, limits: Limits, untrusted: bool = True,
              gpu: int | None = None, module: str = "kernelsmith.referee.worker") -> Child:
        """Start a worker in `work_dir`; `untrusted` (candidate code) drops to `nobody` where possible;
        `gpu` pins it to that one device (it then sees it as cuda:0); `module` is the entry point (a backend's
        builder, e.g. `kernelsmith.backends.cuda`)."""
        env = child_env(work_dir, device)
        if gpu is not None and device == "cuda":
            env["CUDA_VISIBLE_DEVICES"] = visible_device(gpu)
        log = open(work_dir / "log.txt", "ab")
        root = os.geteuid() == 0
        drop = untrusted and can_drop_to_nobody()
        if drop:
            os.chmod(work_dir.parent, 0o711)  # traversable to reach its own dir, not listable
            for p in [work_dir, *work_dir.rglob("*")]:
                os.chown(p, NOBODY, NOBODY)
        proc = subprocess.Popen(
            [sys.executable, "-m", module, str(work_dir)],
            cwd=work_dir, env=env, stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True, close_fds=True,
            preexec_fn=lambda: _preexec(limits, isolate_net=root, drop=drop),
        )
        log.close()
        return cls(proc, work_dir, limits)

    def rss_mb(self) -> float:
        try:
            with open(f"/proc/{self.proc.pid}/status") as fh:
                for line in fh:
                    if line.startswith("VmRSS:"):
                        return int(line.split()[1]) / 1024
        except OSError:
            pass
        return 0.0

    def wait_for(self, path: Path | None, deadline: float) -> ChildOutcome | None:
        """Block until `path` exists (→ None) or the child ends, overruns or outgrows its memory (→ outcome)."""
        delay = 0.005
        while True:
            code = self.proc.poll()
            if path is not None and path.exists():
                return None
            if code is not None:
                return self._outcome(code)
            rss = self.rss_mb()
            self.peak_rss_mb = max(self.peak_rss_mb, rss)
            if rss > self.limits.memory_mb:
                self.kill()
                return ChildOutcome(self.proc.returncode, memory_exceeded=True,
                                    elapsed_s=self.elapsed(), peak_rss_mb=self.peak_rss_mb)
            if time.monotonic() > deadline:
                self.kill()
                return ChildOutcome(self.proc.returncode, timed_out=True, elapsed_s=self.elapsed(),
                                    peak_rss_mb=self.peak_rss_mb)
            time.sleep(delay)
            delay = min(delay * 1.5, 0.05)

    def send(self, line: str) -> None:
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.write((line + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            pass

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def _outcome(self, code: int) -> ChildOutcome:
        sig = ""
        if code < 0:
            try:
                sig = signal.Signals(-code).name
            except ValueError:
                sig = f"signal {-code}"
        return ChildOutcome(code, signal_name=sig, elapsed_s=self.elapsed(), peak_rss_mb=self.peak_rss_mb)

    def kill(self) -> None:
        """Kill the child's whole process group (it may have spawned helpers)."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:  # pragma: no cover
            pass

    def finish(self, deadline: float) -> ChildOutcome:
        """Let the child exit by itself (closing its stdin), within the deadline."""
        if self.proc.stdin:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
        outcome = self.wait_for(None, deadline)
        assert outcome is not None
        return outcome

    def log(self, limit: int = 8000) -> str:
        try:
            data = (self.work_dir / "log.txt").read_bytes()
        except OSError:
            return ""
        text = data.decode(errors="replace")
        if len(text) > limit:
            text = f"[... {len(text) - limit} characters cut ...]\n" + text[-limit:]
        return text
