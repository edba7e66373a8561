"""Where untrusted code runs: a bubblewrap sandbox per process, limits the kernel enforces, a log we drain.

Every referee child (the judge, which runs task code, and each candidate) starts inside `bwrap` with its own
user, PID, mount, network, IPC, UTS and cgroup namespaces: an unprivileged uid (`nobody`, or the caller's own
uid mapped to it when not root), a read-only view of the system (the interpreter, its packages, the
`kernelsmith` package and, on a GPU, the driver and the one device node it needs), a private tmpfs as its work
dir, `/tmp` and `/dev/shm` (each sized), its own `/proc` that shows no process outside the sandbox, no network
but loopback, no capabilities, a new terminal session, and death with its parent. Whatever it starts dies with
it (the PID namespace ends with its first process). Memory: a cgroup (v2, else v1) with the limit when one can
be made, else `RLIMIT_DATA`; `verdict.sandbox` says which. Nothing it writes reaches the host's disk: its
stdout and stderr go to a pipe that a thread drains, keeping only the head and tail.

Without bubblewrap (or user namespaces) a child runs as a plain process with a scrubbed environment; the
verdict then says `isolation: none` and the `strict` policy refuses to certify the candidate.
"""

from __future__ import annotations

import base64
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import kernelsmith
from kernelsmith.referee.nest import seccomp_program

PASS_ENV = ("PATH", "LANG", "LC_ALL", "CUDA_HOME", "CUDA_PATH", "LD_LIBRARY_PATH",
            "NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES", "TRITON_PTXAS_PATH", "TRITON_LIBCUDA_PATH",
            "NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS", "OPENBLAS_CORETYPE",
            "OPENBLAS_L2_SIZE", "KERNELSMITH_PROFILE")
SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|AUTH", re.IGNORECASE)
PR_SET_PDEATHSIG = 1
NOBODY = 65534
PIDS_MAX = 1024  # processes and threads in one sandbox, where the cgroup has the pids controller (v2)
JOB = "/job"  # the work dir inside the sandbox
SANDBOX_ENV = "KERNELSMITH_SANDBOX"  # "none" forces the unisolated fallback (debugging; verdicts say so)
ETC_FILES = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "passwd", "group", "nsswitch.conf",
             "localtime", "hosts", "gai.conf", "nvidia", "OpenCL", "vulkan")
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32")
GPU_DIRS = ("/usr/local/nvidia", "/usr/local/cuda", "/sys", "/run/nvidia-persistenced")


def _default_memory_mb() -> int:
    """32 GB, or 60% of this machine's memory if that is less: GPU-sized inputs cross host memory."""
    try:
        total_kb = int(next(line.split()[1] for line in open("/proc/meminfo") if line.startswith("MemTotal:")))
    except (OSError, StopIteration, ValueError):
        return 16384
    return int(min(32768, 0.6 * total_kb / 1024))


@dataclass
class Limits:
    memory_mb: int = field(default_factory=_default_memory_mb)  # host memory of one sandbox (cgroup-enforced)
    file_mb: int = 16384  # largest file the child may write
    tmp_mb: int = 4096  # each of its tmpfs: work dir, /tmp, /dev/shm (they count towards memory too)
    log_kb: int = 16  # how much of its output is kept (head and tail)


# ---------------------------------------------------------------------------------------------- secrets


def secret_values(environ: dict[str, str] | None = None) -> list[str]:
    """Values of the parent's secret-looking variables (API keys, tokens): never shown to a child, redacted."""
    env = os.environ if environ is None else environ
    return sorted({v for k, v in env.items() if SECRET_NAME.search(k) and len(v) >= 8}, key=len, reverse=True)


def _encodings(secret: str) -> set[str]:
    """Spellings of a secret a child could print to smuggle it out: literal, reversed, base64 (any alignment,
    standard and URL-safe), hex, URL-quoted. A sandboxed child never holds a secret; this is the second line."""
    raw = secret.encode()
    found = {secret, secret[::-1], raw.hex().upper(), urllib.parse.quote(secret, safe="")}
    for data in (raw, raw[::-1]):
        found.add(data.hex())
        for skip in range(3):
            for enc in (base64.b64encode, base64.urlsafe_b64encode):
                text = enc(data[skip:]).decode().rstrip("=")
                # the middle of the encoding does not depend on what came before the secret
                found.add(text[1:-2] if skip else text[:-2])
    return {f for f in found if len(f) >= 8}


def redact(text: str, secrets: list[str]) -> tuple[str, bool]:
    hit = False
    for s in secrets:
        for form in sorted(_encodings(s), key=len, reverse=True):
            if form in text:
                hit = True
                text = text.replace(form, "[REDACTED]")
    return text, hit


# ------------------------------------------------------------------------------------------ environment


def child_env(device: str, home: str) -> dict[str, str]:
    """An allow-list environment: nothing from the parent but paths and device selection."""
    env = {k: os.environ[k] for k in PASS_ENV if k in os.environ}
    env.update({
        "HOME": home,
        "TMPDIR": "/tmp" if home == JOB else f"{home}/tmp",
        "XDG_CACHE_HOME": f"{home}/.cache",
        "TRITON_CACHE_DIR": f"{home}/.triton",
        "TORCHINDUCTOR_CACHE_DIR": f"{home}/.inductor",
        "TORCH_EXTENSIONS_DIR": f"{home}/.cache/torch-extensions",
        "PYTHONPATH": package_root(),
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONHASHSEED": "0",
        "PYTHONUNBUFFERED": "1",
        "OMP_NUM_THREADS": "1",
        # Keep freed heap memory in place so the poisoning of output memory is seen by the next allocation.
        "MALLOC_MMAP_THRESHOLD_": str(32 << 20),
        "MALLOC_TRIM_THRESHOLD_": str(1 << 40),
        "MALLOC_TOP_PAD_": "0",
        # glibc fills every malloc'd block (beyond the per-thread cache's small sizes) with 0xFE and freed ones
        # with 0x01 (the worker changes the byte per run, so two runs see different garbage).
        "MALLOC_PERTURB_": "1",
    })
    if device == "cpu":
        env["TRITON_INTERPRET"] = "1"
        env["CUDA_VISIBLE_DEVICES"] = ""
    return env


def package_root() -> str:
    return str(Path(kernelsmith.__file__).resolve().parent.parent)


def visible_device(index: int) -> str:
    """The CUDA_VISIBLE_DEVICES entry for the parent's device `index` (the parent may itself be restricted)."""
    parent = [d.strip() for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    return parent[index] if index < len(parent) else str(index)


# ---------------------------------------------------------------------------------------------- bwrap


def bwrap_path() -> str | None:
    if os.environ.get(SANDBOX_ENV, "").lower() == "none":
        return None
    return os.environ.get("KERNELSMITH_BWRAP") or shutil.which("bwrap")


@lru_cache(maxsize=4)
def _probe(bwrap: str) -> str:
    """'' when bwrap can make a sandbox here, else why not (e.g. user namespaces disabled)."""
    argv = [bwrap, *_base_args(), "--", sys.executable, "-c", "pass"]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bwrap did not run: {exc}"
    return "" if proc.returncode == 0 else f"bwrap failed: {proc.stderr.strip()[:300]}"


def isolation() -> tuple[str | None, str]:
    """(bwrap path or None, why there is no isolation)."""
    bwrap = bwrap_path()
    if bwrap is None:
        why = ("disabled by KERNELSMITH_SANDBOX=none" if os.environ.get(SANDBOX_ENV, "").lower() == "none"
               else "bubblewrap (bwrap) is not installed: apt-get install bubblewrap")
        return None, why
    why = _probe(bwrap)
    return (None, why) if why else (bwrap, "")


def _python_dirs() -> list[str]:
    """Everything the interpreter reads: its prefixes and the library dirs on sys.path (never the project)."""
    root = package_root()
    dirs = {sys.prefix, sys.base_prefix, sys.exec_prefix, str(Path(sys.executable).parent)}
    dirs.add(str(Path(os.path.realpath(sys.executable)).parent.parent))
    prefixes = [os.path.realpath(p) + os.sep for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)]
    for entry in sys.path:
        real = os.path.realpath(entry) if entry else ""
        # Only library dirs: a script's own dir, the working dir or tests/ on sys.path may hold anything.
        library = (real + os.sep).startswith(tuple(prefixes)) or any(
            part in ("site-packages", "dist-packages") for part in Path(real).parts)
        if real and os.path.isdir(real) and library:
            dirs.add(real)
    # Keep only outermost dirs; a path under the project root other than the package itself is never shown.
    keep = []
    for d in sorted({os.path.realpath(d) for d in dirs}):
        if any(d == k or d.startswith(k + os.sep) for k in keep):
            continue
        if root.startswith(d + os.sep):  # a prefix above the project (e.g. /work): bind its pieces instead
            continue
        keep.append(d)
    return keep


def _setpriv() -> str | None:
    """As root the sandbox needs no user namespace (which would map its uid back to root on the host): bwrap
    keeps just the right to change uid, and setpriv drops to the sandbox's own unprivileged uid for good."""
    return shutil.which("setpriv") if os.geteuid() == 0 else None


def _base_args(tmp_mb: int = 1024) -> list[str]:
    if _setpriv():
        ns = ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try",
              "--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    else:  # an ordinary user: a user namespace maps the caller's own uid (the only one it has)
        ns = ["--unshare-all", "--cap-drop", "ALL"]
    tmp = str(tmp_mb << 20)
    # The private /tmp first: the interpreter or the project may live under /tmp (a CI clone), and their
    # read-only binds below must land on top of it, not under it.
    args = [*ns, "--die-with-parent", "--new-session", "--proc", "/proc", "--dev", "/dev",
            "--perms", "01777", "--size", tmp, "--tmpfs", "/tmp", "--perms", "01777", "--size", tmp,
            "--tmpfs", "/dev/shm"]
    for d in SYSTEM_DIRS:
        if os.path.islink(d):
            args += ["--symlink", os.readlink(d), d]
        elif os.path.isdir(d):
            args += ["--ro-bind", d, d]
    made: set[str] = set()
    args += _parents("/etc/x", made)
    for name in ETC_FILES:
        args += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
    pkg = str(Path(kernelsmith.__file__).resolve().parent)
    for d in [*_python_dirs(), pkg]:
        args += _parents(d, made) + ["--ro-bind", d, d]
    return args


def _parents(path: str, made: set[str]) -> list[str]:
    """Traversable (0755) dirs above a bind's destination: bwrap, as root, would make them 0700 root's."""
    out: list[str] = []
    for parent in reversed(Path(path).parents):
        p = str(parent)
        if p != "/" and p not in made and not p.startswith("/usr"):
            made.add(p)
            out += ["--perms", "0755", "--dir", p]
    return out


def _gpu_args(gpu: int | None) -> list[str]:
    args = []
    for d in GPU_DIRS:
        if d.startswith("/usr/") and os.path.isdir("/usr") and not os.path.islink("/usr"):
            continue  # already there with /usr (a symlink like /usr/local/cuda included)
        if os.path.islink(d):
            args += _parents(d, set()) + ["--symlink", os.readlink(d), d]
        elif os.path.exists(d):
            args += _parents(d, set()) + ["--ro-bind", d, d]
    index = visible_device(gpu or 0)
    nodes = ["nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset"]
    nodes.append(f"nvidia{index}" if index.isdigit() else "nvidia0")
    if not index.isdigit():  # a UUID: which node it is cannot be told from here, so show them all
        nodes += [p.name for p in Path("/dev").glob("nvidia[0-9]*")]
    for n in dict.fromkeys(nodes):
        if os.path.exists(f"/dev/{n}"):
            args += ["--dev-bind", f"/dev/{n}", f"/dev/{n}"]
    if os.path.isdir("/dev/dri"):
        args += ["--dev-bind", "/dev/dri", "/dev/dri"]
    return args


# -------------------------------------------------------------------------------------------- cgroups


class MemoryCgroup:
    """A memory cgroup for one sandbox (v2, else v1) when this process may make one; else None."""

    def __init__(self, path: Path, version: int, freezer: Path | None = None):
        self.path, self.version = path, version
        self.freezer = freezer  # v1: a cgroup of the same name in the freezer hierarchy (v2 has cgroup.freeze)

    @classmethod
    def create(cls, limit_bytes: int, freezer: bool = False) -> MemoryCgroup | None:
        """`freezer`: v1 only, also make the freezer cgroup (the timing lease freezes GPU sandboxes; v2 always
        can)."""
        name = f"kernelsmith-{os.getpid()}-{threading.get_ident()}-{time.monotonic_ns()}"
        for version, parent in _cgroup_parents():
            path = parent / name
            try:
                path.mkdir()
            except OSError:
                continue
            try:
                if version == 2:
                    (path / "memory.max").write_text(str(limit_bytes))
                    (path / "memory.swap.max").write_text("0") if (path / "memory.swap.max").exists() else None
                    if (path / "pids.max").exists():  # a fork bomb ends here, not at the host's pid_max
                        (path / "pids.max").write_text(str(PIDS_MAX))
                else:
                    (path / "memory.limit_in_bytes").write_text(str(limit_bytes))
                    return cls(path, version, _v1_freezer(name) if freezer else None)
                return cls(path, version)
            except OSError:
                path.rmdir()
        return None

    def procs_files(self) -> list[str]:
        """Where a process is written to join it (two files on v1 with a freezer)."""
        return [str(self.path / "cgroup.procs")] + ([str(self.freezer / "cgroup.procs")] if self.freezer else [])

    def place(self, pid: int) -> None:
        for name in self.procs_files():
            with open(name, "w") as fh:
                fh.write(str(pid))

    def oom_killed(self) -> bool:
        try:
            if self.version == 2:
                events = (self.path / "memory.events").read_text()
                return any(line.split()[0] in ("oom_kill", "oom") and int(line.split()[1]) > 0
                           for line in events.splitlines())
            failcnt = int((self.path / "memory.failcnt").read_text())
            oom = (self.path / "memory.oom_control").read_text()
            kills = [int(line.split()[1]) for line in oom.splitlines() if line.startswith("oom_kill ")]
            return bool(kills and kills[0] > 0) or failcnt > 0
        except (OSError, ValueError, IndexError):
            return False

    def peak_mb(self) -> float:
        name = "memory.peak" if self.version == 2 else "memory.max_usage_in_bytes"
        try:
            return int((self.path / name).read_text()) / 2**20
        except (OSError, ValueError):
            return 0.0

    def kill_all(self) -> None:
        if self.version == 2 and (self.path / "cgroup.kill").exists():
            try:
                (self.path / "cgroup.kill").write_text("1")
                return
            except OSError:
                pass
        try:
            for pid in (self.path / "cgroup.procs").read_text().split():
                os.kill(int(pid), signal.SIGKILL)
        except (OSError, ValueError):
            pass
        if self.freezer is not None:
            self.freeze(False)  # a v1-frozen task acts on SIGKILL only once thawed

    def freeze(self, frozen: bool, timeout: float = 2.0) -> bool:
        """Stop (or restart) every process in it (v2's `cgroup.freeze`, else the v1 freezer made beside it): False
        where that is not possible. A freeze waits, up to `timeout`, until the kernel reports the cgroup frozen (a task inside a driver call
        stops when the call returns)."""
        if self.version == 2:
            control, state, done = self.path / "cgroup.freeze", self.path / "cgroup.events", "frozen 1"
            value = "1" if frozen else "0"
        elif self.freezer is not None:
            control = state = self.freezer / "freezer.state"
            done, value = "FROZEN", "FROZEN" if frozen else "THAWED"
        else:
            return False
        try:
            control.write_text(value)
            end = time.monotonic() + timeout
            while frozen and done not in state.read_text().splitlines():
                if time.monotonic() > end:
                    break
                time.sleep(0.001)
            return True
        except OSError:
            return False

    def can_freeze(self) -> bool:
        return (self.path / "cgroup.freeze").exists() if self.version == 2 else self.freezer is not None

    def wait_empty(self, timeout: float) -> None:
        """Until every process in it has exited (a GPU process's device memory is free only then)."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            try:
                if not (self.path / "cgroup.procs").read_text().strip():
                    return
            except OSError:
                return
            time.sleep(0.01)

    def remove(self) -> None:
        for path in [self.path] + ([self.freezer] if self.freezer else []):
            for _ in range(50):
                try:
                    path.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    self.kill_all()
                    time.sleep(0.02)


@lru_cache(maxsize=1)
def _freezer_root() -> Path | None:
    """The v1 freezer hierarchy's mount, if there is one."""
    try:
        mounts = Path("/proc/self/mounts").read_text().splitlines()
    except OSError:
        return None
    for line in mounts:
        parts = line.split()
        if len(parts) > 3 and parts[2] == "cgroup" and "freezer" in parts[3].split(","):
            return Path(parts[1])
    return None


def _v1_freezer(name: str) -> Path | None:
    """A v1 freezer cgroup named `name` beside the memory one, where this process may make one."""
    root = _freezer_root()
    if root is None:
        return None
    try:
        (root / name).mkdir()
        return root / name
    except OSError:
        return None


@lru_cache(maxsize=1)
def _cgroup_parents() -> list[tuple[int, Path]]:
    """Writable places for a new memory cgroup, best first (swept once of those a killed referee left)."""
    found = _find_cgroup_parents()
    root = _freezer_root()
    for parent in [p for _, p in found] + ([root] if root and any(v == 1 for v, _ in found) else []):
        for stale in parent.glob("kernelsmith-*"):
            try:
                pid = int(stale.name.split("-")[1])
                if not Path(f"/proc/{pid}").exists():
                    stale.rmdir()  # fails, harmlessly, while anything still runs in it
            except (ValueError, IndexError, OSError):
                pass
    return found


def _find_cgroup_parents() -> list[tuple[int, Path]]:
    found: list[tuple[int, Path]] = []
    try:
        mounts = Path("/proc/self/mounts").read_text().splitlines()
        own = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return found
    for line in mounts:
        parts = line.split()
        if len(parts) < 4:
            continue
        mnt, fstype, opts = parts[1], parts[2], parts[3].split(",")
        if fstype == "cgroup2":
            rel = next((c.split(":", 2)[2] for c in own if c.startswith("0::")), "/")
            for base in (Path(mnt) / rel.lstrip("/"), Path(mnt)):
                try:
                    if "memory" in (base / "cgroup.subtree_control").read_text().split() and os.access(base, os.W_OK):
                        found.append((2, base))
                        break
                except OSError:
                    continue
        elif fstype == "cgroup" and "memory" in opts:
            rel = next((c.split(":", 2)[2] for c in own if ":memory:" in c), "/")
            for base in (Path(mnt) / rel.lstrip("/"), Path(mnt)):
                if base.is_dir() and os.access(base, os.W_OK) and (base / "memory.limit_in_bytes").exists():
                    found.append((1, base))
                    break
    found.sort(key=lambda vp: -vp[0])
    return found


# --------------------------------------------------------------------------------------------- the log


class LogDrain:
    """Reads a child's output pipe to its end, keeping the first and the last `limit` bytes: a candidate that
    prints gigabytes costs the orchestrator a bounded buffer, and nothing touches the disk."""

    def __init__(self, fd: int, limit: int):
        self.head, self.tail, self.dropped = bytearray(), bytearray(), 0
        self.limit = limit
        self._thread = threading.Thread(target=self._drain, args=(fd,), daemon=True, name="kernelsmith-log")
        self._thread.start()

    def _drain(self, fd: int) -> None:
        with os.fdopen(fd, "rb", buffering=0) as pipe:
            while chunk := pipe.read(1 << 16):
                room = self.limit // 4 - len(self.head)
                if room > 0:
                    self.head += chunk[:room]
                    chunk = chunk[room:]
                self.tail += chunk
                if len(self.tail) > self.limit:
                    self.dropped += len(self.tail) - self.limit
                    del self.tail[: len(self.tail) - self.limit]

    def text(self, wait: float = 2.0) -> str:
        self._thread.join(wait)
        head = bytes(self.head).decode(errors="replace")
        tail = bytes(self.tail).decode(errors="replace")
        return head + (f"\n[... {self.dropped} bytes cut ...]\n" if self.dropped else "") + tail


# ------------------------------------------------------------------------------------------ a child


_LAUNCHER: Any = None
_LAUNCHER_LOCK = threading.Lock()


def _launch(fn: Any, *args: Any) -> Any:
    """Run `fn(*args)` in the launcher thread (created once, idle between calls, alive until exit)."""
    global _LAUNCHER
    from concurrent.futures import ThreadPoolExecutor

    if threading.current_thread().name.startswith("kernelsmith-launcher"):
        return fn(*args)
    with _LAUNCHER_LOCK:
        if _LAUNCHER is None:
            _LAUNCHER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kernelsmith-launcher")
    return _LAUNCHER.submit(fn, *args).result()


@dataclass
class ChildOutcome:
    returncode: int | None
    timed_out: bool = False
    memory_exceeded: bool = False
    signal_name: str = ""
    elapsed_s: float = 0.0
    peak_rss_mb: float = 0.0


def _preexec(limits: Limits, procs_files: list[str], rlimit_data: bool) -> None:
    """In the child, before exec: no core dumps, a file-size cap, the cgroup (so everything it starts is in
    it before any of its code runs), a data-size cap where no cgroup could be made, death with its parent."""
    import ctypes

    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    fsize = limits.file_mb << 20
    resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
    for name in procs_files:
        with open(name, "w") as fh:
            fh.write("0")
    if rlimit_data:
        data = limits.memory_mb << 20
        resource.setrlimit(resource.RLIMIT_DATA, (data, data))
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


@dataclass
class Child:
    """One sandboxed process: started with `start`, polled for its exit and memory, killed from outside."""

    proc: subprocess.Popen
    limits: Limits
    drain: LogDrain
    info: dict[str, Any]
    cgroup: MemoryCgroup | None = None
    host_dir: Path | None = None  # the work dir on the host, when there is no sandbox tmpfs
    started: float = field(default_factory=time.monotonic)
    peak_rss_mb: float = 0.0

    @classmethod
    def start(cls, argv: list[str], device: str, limits: Limits, gpu: int | None = None,
              pass_fds: tuple[int, ...] = (), ro_files: dict[str, str] | None = None,
              rw_dir: Path | None = None, uid: int = NOBODY, env: dict[str, str] | None = None,
              template: bool = False) -> Child:
        """Run `python argv...` sandboxed ("{work}" in argv becomes the work dir as the child sees it).
        `ro_files` maps names in the work dir to host files (bound read-only); `rw_dir`, if given, is a host dir
        bound as the work dir (a builder's outputs), else a private tmpfs; `pass_fds` keep their numbers.
        `template` (root only): the sandbox keeps root and CAP_SYS_ADMIN/SETPCAP so that it can fork walled-in
        children (`Zygote`); it runs referee code only. Started from the referee's one long-lived launcher
        thread: a child dies with the thread that started it (PR_SET_PDEATHSIG), and a kept judge or a
        template outlives the evaluation (and the thread) that first needed it."""
        return _launch(cls._start, argv, device, limits, gpu, pass_fds, ro_files, rw_dir, uid, env, template)

    @classmethod
    def _start(cls, argv: list[str], device: str, limits: Limits, gpu: int | None, pass_fds: tuple[int, ...],
               ro_files: dict[str, str] | None, rw_dir: Path | None, uid: int, env: dict[str, str] | None,
               template: bool) -> Child:
        bwrap, why = isolation()
        home = JOB if bwrap else None
        host_dir = None
        seccomp_fd: int | None = None
        if bwrap is None:
            host_dir = rw_dir or Path(tempfile.mkdtemp(prefix="kernelsmith-child-"))
            home = str(host_dir)
            for name, src in (ro_files or {}).items():
                shutil.copyfile(src, host_dir / name)
        argv = [a.replace("{work}", home) for a in argv]
        environ = child_env(device, home)
        if gpu is not None and device == "cuda":
            environ["CUDA_VISIBLE_DEVICES"] = visible_device(gpu)
        environ.update(env or {})
        cgroup = MemoryCgroup.create(limits.memory_mb << 20, freezer=device == "cuda") if bwrap else None
        cmd = [sys.executable, *argv]
        if bwrap:
            tmp = str(limits.tmp_mb << 20)
            args = [bwrap, *_base_args(limits.tmp_mb)]
            if device == "cuda":
                args += _gpu_args(gpu)
            if rw_dir is not None:
                if os.geteuid() == 0:  # its work dir is the one host dir it may write; bwrap (no DAC
                    os.chown(rw_dir, uid, uid)  # capabilities left) must still be able to enter it
                    os.chmod(rw_dir, 0o711)
                args += ["--bind", str(rw_dir), JOB]
            else:
                args += ["--perms", "01777", "--size", tmp, "--tmpfs", JOB]  # a tmpfs only this sandbox sees
            for name, src in (ro_files or {}).items():
                args += ["--ro-bind", src, f"{JOB}/{name}"]
            args += ["--hostname", "sandbox", "--chdir", JOB]
            if not template and (program := seccomp_program()) is not None:
                seccomp_fd = os.memfd_create("kernelsmith-seccomp", 0)  # inherited by bwrap, read at its start
                os.write(seccomp_fd, program)
                os.lseek(seccomp_fd, 0, os.SEEK_SET)
                pass_fds = (*pass_fds, seccomp_fd)
                args += ["--seccomp", str(seccomp_fd)]
            setpriv = _setpriv()
            if template:
                if not setpriv:
                    raise OSError("a template sandbox needs root")
                args += ["--cap-add", "CAP_SYS_ADMIN", "--cap-add", "CAP_SETPCAP"]
                cmd = [*args, "--", *cmd]
            elif setpriv:
                drop = [setpriv, f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--inh-caps=-all",
                        "--no-new-privs", "--"]
                cmd = [*args, "--", *drop, *cmd]
            else:
                cmd = [*args, "--uid", str(uid), "--gid", str(uid), "--", *cmd]
        read_fd, write_fd = os.pipe()
        try:
            proc = subprocess.Popen(
                cmd, cwd=home if bwrap is None else "/", env=environ, stdin=subprocess.DEVNULL, stdout=write_fd,
                stderr=write_fd, start_new_session=True, close_fds=True, pass_fds=pass_fds,
                preexec_fn=lambda: _preexec(limits, cgroup.procs_files() if cgroup else [],
                                            rlimit_data=bool(bwrap) and cgroup is None and device == "cpu"),
            )
        except BaseException:
            os.close(read_fd)
            if cgroup:
                cgroup.remove()
            raise
        finally:
            os.close(write_fd)
            if seccomp_fd is not None:
                os.close(seccomp_fd)
        info = {"isolation": "bwrap" if bwrap else "none",
                "host_uid": (0 if template else uid if _setpriv() else os.geteuid()) if bwrap else os.geteuid(),
                "memory_limit": (f"cgroup-v{cgroup.version}" if cgroup
                                 else "rlimit-data" if bwrap and device == "cpu" else "polled"),
                "limit_mb": limits.memory_mb,
                "seccomp": "filter" if bwrap and not template and seccomp_program() is not None else "none"}
        if not bwrap:
            info["why"] = why
        return cls(proc, limits, LogDrain(read_fd, limits.log_kb << 10), info, cgroup, host_dir)

    def rss_mb(self) -> float:
        """Resident memory of the sandbox (the cgroup's usage, else the process tree's RSS)."""
        if self.cgroup is not None:
            name = "memory.current" if self.cgroup.version == 2 else "memory.usage_in_bytes"
            try:
                return int((self.cgroup.path / name).read_text()) / 2**20
            except (OSError, ValueError):
                return 0.0
        total = 0.0
        for pid in _tree(self.proc.pid):
            try:
                with open(f"/proc/{pid}/status") as fh:
                    for line in fh:
                        if line.startswith("VmRSS:"):
                            total += int(line.split()[1]) / 1024
            except OSError:
                pass
        return total

    def check(self, deadline: float) -> ChildOutcome | None:
        """None while it runs within its limits; else why it ended (killing it if it overran)."""
        code = self.proc.poll()
        if code is not None:
            return self._outcome(code)
        rss = self.rss_mb()
        self.peak_rss_mb = max(self.peak_rss_mb, rss)
        if rss > self.limits.memory_mb:
            self.kill()
            return ChildOutcome(self.proc.returncode, memory_exceeded=True, elapsed_s=self.elapsed(),
                                peak_rss_mb=self.peak_rss_mb)
        if time.monotonic() > deadline:
            self.kill()
            return ChildOutcome(self.proc.returncode, timed_out=True, elapsed_s=self.elapsed(),
                                peak_rss_mb=self.peak_rss_mb)
        return None

    def wait(self, deadline: float) -> ChildOutcome:
        """Until it exits, overruns or outgrows its memory."""
        delay = 0.005
        while (outcome := self.check(deadline)) is None:
            time.sleep(delay)
            delay = min(delay * 1.5, 0.05)
        return outcome

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    # The timing lease's view (lease.Freezable): a neighbour's timing phase stops this sandbox meanwhile.
    def freezable(self) -> bool:
        return self.cgroup is not None and self.cgroup.can_freeze()

    def freeze(self, frozen: bool) -> bool:
        return self.cgroup is not None and self.cgroup.freeze(frozen)

    def gone(self) -> bool:
        return self.cgroup is None or not self.cgroup.path.exists()

    def _outcome(self, code: int) -> ChildOutcome:
        sig = ""
        if self.info["isolation"] == "bwrap" and code > 128:
            code = -(code - 128)  # bwrap reports a child killed by signal N as 128 + N
        if code < 0:
            try:
                sig = signal.Signals(-code).name
            except ValueError:
                sig = f"signal {-code}"
        oom = self.cgroup is not None and self.cgroup.oom_killed() and sig == "SIGKILL"
        if self.cgroup is not None:
            self.peak_rss_mb = max(self.peak_rss_mb, self.cgroup.peak_mb())
        return ChildOutcome(code, memory_exceeded=oom, signal_name=sig, elapsed_s=self.elapsed(),
                            peak_rss_mb=self.peak_rss_mb)

    def kill(self) -> None:
        """Kill the sandbox and everything in it (its process group, its cgroup; the PID namespace follows)."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        if self.cgroup is not None:
            self.cgroup.kill_all()
            self.cgroup.wait_empty(10.0)
        elif self.info["isolation"] == "none":
            for pid in _tree(self.proc.pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:  # pragma: no cover
            pass

    def close(self) -> None:
        """Kill if still running, then release its cgroup and host dir."""
        if self.proc.poll() is None:
            self.kill()
        if self.cgroup is not None:
            self.cgroup.remove()
        if self.host_dir is not None:
            shutil.rmtree(self.host_dir, ignore_errors=True)

    def log(self) -> str:
        return self.drain.text()


def _tree(pid: int) -> list[int]:
    """`pid` and its descendants (by /proc's parent links)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += children.get(p, [])
    return out


# ---------------------------------------------------------------------------------- forked candidate sandboxes


class _ForkedProcess:
    """`subprocess.Popen`'s face for a sandbox forked by a template: its host pid (a pidfd holds it, so the
    pid cannot be recycled under us) and its exit status, which the template's waiting parent writes to a pipe."""

    def __init__(self, pid: int, pidfd: int, status_fd: int):
        self.pid, self.pidfd, self.status_fd = pid, pidfd, status_fd
        self.returncode: int | None = None
        self._buf = b""

    def poll(self) -> int | None:
        import select

        while self.returncode is None and select.select([self.status_fd], [], [], 0)[0]:
            data = os.read(self.status_fd, 64)
            if data:
                self._buf += data
                continue
            try:  # EOF: the status, or nothing if its parent was killed (the sandbox went with it)
                self.returncode = int(self._buf.decode().strip())
            except ValueError:
                self.returncode = -signal.SIGKILL
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        end = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if end is not None and time.monotonic() > end:
                raise subprocess.TimeoutExpired("forked sandbox", timeout or 0)
            time.sleep(0.005)
        return self.returncode  # type: ignore[return-value]

    def kill(self) -> None:
        try:
            signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)
        except (ProcessLookupError, OSError):
            pass

    def close(self) -> None:
        for fd in (self.pidfd, self.status_fd):
            try:
                os.close(fd)
            except OSError:
                pass


@dataclass
class ForkedChild(Child):
    """A candidate sandbox forked from a `Zygote` (see nest.py): killed by its pidfd and its cgroup."""

    def kill(self) -> None:
        self.proc.kill()  # type: ignore[attr-defined]
        super().kill()

    def close(self) -> None:
        super().close()
        self.proc.close()  # type: ignore[attr-defined]


class Zygote:
    """A template sandbox (`worker.py zygote`: torch, dynamo, Triton and the referee imported, no CUDA context)
    that forks each sandbox instead of starting an interpreter (0.09 s against 3.2 s on the CPU machine,
    benchmarks/spawn_cost.py; nest.py says what the fork gets). Root only; one per (device, GPU);
    `zygote_for` starts it and restarts it if it died."""

    def __init__(self, child: Child, ctl: Any):
        self.child, self.ctl = child, ctl
        self._lock = threading.Lock()

    def alive(self) -> bool:
        return self.child.proc.poll() is None

    def spawn(self, device: str, limits: Limits, uid: int = NOBODY, timeout: float = 60.0,
              role: str = "candidate", placed: Any = None) -> tuple[Child, Any]:
        """A new walled-in child and the orchestrator's end of its channel; OSError if it could not be made.
        `role` "exec" runs, unguarded, the script sent next ({"op": "exec", "source", "argv"}): tests of the
        boundary itself. `placed(child)` is called once it is in its cgroup, before any of its own code runs
        (the timing lease tracks it from there)."""
        import json
        import socket
        import struct

        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        mine.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)  # the kernel names the sender's pid, in ours
        log_r, log_w = os.pipe()
        status_r, status_w = os.pipe()
        cgroup = MemoryCgroup.create(limits.memory_mb << 20, freezer=device == "cuda")
        child: ForkedChild | None = None
        done = False
        try:
            spec = {"op": "spawn", "role": role, "uid": uid, "tmp_mb": limits.tmp_mb, "file_mb": limits.file_mb,
                    "data_mb": limits.memory_mb if cgroup is None and device == "cpu" else None}
            with self._lock:
                socket.send_fds(self.ctl, [json.dumps(spec).encode()], [theirs.fileno(), log_w, status_w])
            for fd in (log_w, status_w):
                os.close(fd)
            log_w = status_w = -1
            theirs.close()
            mine.settimeout(timeout)
            try:
                data, anc, _, _ = mine.recvmsg(4096, socket.CMSG_SPACE(struct.calcsize("3i")))
            except (TimeoutError, OSError) as exc:
                raise OSError(f"the forked sandbox did not start: {exc}") from exc
            creds = [d for level, kind, d in anc if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS]
            if data != b'{"op": "hello"}' or not creds:
                drain, log_r = LogDrain(log_r, 4096), -1
                raise OSError("the forked sandbox did not start: " + drain.text(1.0)[-2000:])
            pid = struct.unpack("3i", creds[0][:12])[0]
            pidfd = os.pidfd_open(pid)  # it waits for `placed`: alive, so this pid is still its own
            if cgroup is not None:
                cgroup.place(pid)
            info = {"isolation": "bwrap", "started": "forked", "host_uid": uid,
                    "seccomp": "filter" if seccomp_program() is not None else "none",
                    "memory_limit": f"cgroup-v{cgroup.version}" if cgroup else "rlimit-data" if device == "cpu"
                    else "polled", "limit_mb": limits.memory_mb}
            child = ForkedChild(_ForkedProcess(pid, pidfd, status_r), limits,  # type: ignore[arg-type]
                                LogDrain(log_r, limits.log_kb << 10), info, cgroup, None)
            status_r = log_r = -1  # the child's now: closed with it
            if placed is not None:
                placed(child)
            mine.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 0)
            mine.settimeout(None)
            mine.sendall(b'{"op": "placed"}')
            done = True
            return child, mine
        finally:
            if not done:
                for fd in (log_w, status_w, status_r, log_r):
                    if fd >= 0:
                        os.close(fd)
                mine.close()
                theirs.close()
                if child is not None:
                    child.close()  # kills it, closes its pidfd and status pipe, removes its cgroup
                elif cgroup is not None:
                    cgroup.remove()

    def close(self) -> None:
        self.ctl.close()
        self.child.close()


_ZYGOTES: dict[tuple, Zygote | None] = {}
_ZYGOTE_LOCK = threading.Lock()


def template_pids() -> list[int]:
    """Host pids of the running templates' sandboxes (their forked candidates are not theirs to answer for)."""
    with _ZYGOTE_LOCK:
        return [z.child.proc.pid for z in _ZYGOTES.values() if z is not None and z.alive()]


def read_child_report(path: Path, limit: int = 64 << 20) -> dict[str, Any] | None:
    """A sandboxed child's JSON report from its work dir: a regular file (never through a symlink the child made),
    at most `limit` bytes, a JSON object; None otherwise. Read it before `Child.close`: without bubblewrap the
    child's dir is removed with it."""
    import json
    import stat

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        chunks, total = [], 0
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
            total += len(chunk)
            if total > limit:
                return None
    finally:
        os.close(fd)
    try:
        data = json.loads(b"".join(chunks))
    except (ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) else None


def run_job(module: str, job: dict[str, Any], device: str, timeout_s: float, *, limits: Limits | None = None,
            gpu: int | None = None, report_limit: int = 64 << 20) -> tuple[dict[str, Any] | None, Any, str]:
    """(report or None, outcome, log): `python -m MODULE WORK_DIR` in a sandbox whose only writable dir holds
    `job.json`; its `result.json` read back with `read_child_report` before the child and its dir go. For work that
    runs task or model code outside an evaluation (the offline seed, extract)."""
    import json

    root = Path(tempfile.mkdtemp(prefix="kernelsmith-job-"))
    try:
        work = root / "job"
        work.mkdir(mode=0o700)
        (work / "job.json").write_text(json.dumps(job))
        child = Child.start(["-m", module, "{work}"], device, limits or Limits(),
                            gpu=gpu if device == "cuda" else None, rw_dir=work)
        try:
            outcome = child.wait(time.monotonic() + timeout_s)
            return read_child_report(work / "result.json", report_limit), outcome, child.log()
        finally:
            child.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)


def zygote_for(device: str, gpu: int | None, limits: Limits) -> Zygote | None:
    """The template for this device and GPU, started on first use; None where candidates cannot be forked
    (not root, no bubblewrap, KERNELSMITH_ZYGOTE=0, or the template failed to start: each candidate then gets
    its own bubblewrap sandbox, as before)."""
    import json
    import socket

    if os.environ.get("KERNELSMITH_ZYGOTE", "1") == "0" or not _setpriv() or isolation()[0] is None:
        return None
    key = (device, gpu)
    with _ZYGOTE_LOCK:
        z = _ZYGOTES.get(key, ...)
        if z is None:
            return None  # failed before: do not retry on every candidate
        if isinstance(z, Zygote) and z.alive():
            return z
        if isinstance(z, Zygote):
            z.close()
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            child = Child.start(["-m", "kernelsmith.referee.worker", "zygote"], device, limits, gpu=gpu,
                                pass_fds=(theirs.fileno(),), uid=0, template=True,
                                env={"KERNELSMITH_FD": str(theirs.fileno()), "KERNELSMITH_DEVICE": device})
        except OSError:
            mine.close()
            _ZYGOTES[key] = None
            return None
        finally:
            theirs.close()
        mine.settimeout(120)
        try:
            ready = json.loads(mine.recv(4096) or b"{}")
        except (OSError, ValueError):
            ready = {}
        mine.settimeout(None)
        z = Zygote(child, mine)
        if ready.get("op") != "ready" or (device == "cuda" and not _forked_cuda_works(z, limits)):
            z.close()
            _ZYGOTES[key] = None
            return None
        _ZYGOTES[key] = z
        return z


CUDA_CHECK = """import torch
x = torch.ones(1 << 20, device="cuda")
assert float(x.sum()) == float(1 << 20)
"""


def _forked_cuda_works(z: Zygote, limits: Limits) -> bool:
    """CUDA does not survive a fork once the driver is initialised: the template never initialises it, and this
    proves it on the machine at hand (a forked child makes a context and sums on the device) before any
    candidate depends on it; if it fails, candidates get sandboxes of their own."""
    import json

    try:
        child, sock = z.spawn("cuda", limits, role="exec")
    except OSError:
        return False
    try:
        sock.sendall(json.dumps({"op": "exec", "argv": ["cuda_check.py"], "source": CUDA_CHECK}).encode())
        return child.wait(time.monotonic() + 120).returncode == 0
    finally:
        child.close()
        sock.close()
