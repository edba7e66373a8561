"""A Python audit hook (PEP 578) in the candidate's child: it cannot be removed once added.

While candidate code is on the stack it blocks — and reports — what only a cheat needs: opening the referee's
own job files or another process's `/proc/PID/environ|mem`, `ctypes`, reaching the referee's frames or objects
(`sys._getframe`, `gc.get_objects`, traceback frames), writing files outside its temp dir, swapping a function's `__code__`, patching torch's or
Triton's classes; and it records threads and processes the candidate starts. Triton's own work inside a
kernel launch (ptxas, ldconfig, its cache) is not the candidate's and passes.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable
from functools import lru_cache

PROC_PRIVATE = re.compile(r"^/proc/(\d+)/(task/\d+/)?(environ|mem|cmdline)")
CONCURRENCY_EVENTS = {"_thread.start_new_thread", "os.fork", "os.forkpty", "subprocess.Popen", "os.system",
                      "os.posix_spawn", "os.spawn", "os.exec"}
SIGNAL_EVENTS = {"os.kill", "os.killpg", "signal.pthread_kill", "os.setns", "os.unshare", "socket.__new__",
                 "socket.connect", "socket.bind"}
CODE_EVENTS = {"compile", "code.__new__"}
INTROSPECTION_EVENTS = {"sys._getframe", "sys._current_frames", "gc.get_objects", "gc.get_referrers",
                        "gc.get_referents", "sys._getframemodulename"}
PATH_EVENTS = {"open", "os.rename", "os.link", "os.symlink", "os.remove", "os.rmdir", "os.truncate", "os.chmod"}
NATIVE_EVENTS = {"ctypes.dlopen", "ctypes.dlsym", "ctypes.dlsym/handle", "ctypes.cdata", "ctypes.string_at",
                 "ctypes.wstring_at", "ctypes.addressof", "ctypes.call_function", "ctypes.cdata/buffer"}
GUARDED_MODULES = ("torch", "triton", "kernelsmith", "threading", "time", "numpy")
CODE_ATTRS = {"__code__", "__defaults__", "__kwdefaults__", "__globals__", "__closure__"}
EVENTS = (CONCURRENCY_EVENTS | INTROSPECTION_EVENTS | PATH_EVENTS | NATIVE_EVENTS | SIGNAL_EVENTS | CODE_EVENTS
          | {"object.__setattr__", "object.__getattr__"})


class AuditGuard:
    """Install with `install()`; `report(name, message)` receives each finding (a guard name)."""

    def __init__(self, candidate_file: str, job_dir: str, in_launch: Callable[[], bool],
                 report: Callable[[str, str], None]):
        self.candidate_file = os.path.realpath(candidate_file)
        self.job_dir = os.path.realpath(job_dir)
        # Where the candidate may write: its temp and cache dirs (and Triton's cache, written inside launches).
        tmp = os.path.realpath(os.environ.get("TMPDIR", "/tmp"))
        self.free_dirs = tuple(os.path.join(self.job_dir, d) + os.sep for d in (".cache", ".triton", ".inductor",
                                                                                  "tmp")) + (tmp + os.sep,)
        self.in_launch = in_launch
        self.report = report
        self._busy = False
        self.self_pid = str(os.getpid())
        # "<...>" names (no file behind them) the candidate compiled code under: frames of that code are its own
        # too (red team, 2026-12-03: three "<lib>" wrapper frames hid a ctypes call from the native-access check).
        self.borrowed_names: set[str] = set()

    def install(self) -> None:
        sys.addaudithook(self._hook)

    def _candidate_frames(self, depth: int) -> bool:
        """Is the candidate's file among the `depth` innermost frames of the code that raised the event
        (0: anywhere on the stack)? Frames 0–2 are this method, `_check` and `_hook`."""
        f = sys._getframe(3)
        n = 0
        while f is not None and (depth == 0 or n < depth):
            name = f.f_code.co_filename
            # Code from a file the candidate could have written is the candidate's too: every other file in its
            # sandbox is read-only system or library code (the referee's own package included, wherever it is).
            if name == self.candidate_file or (name.startswith("/") and _writable_dir(os.path.dirname(name))) \
                    or name in self.borrowed_names:
                return True
            f = f.f_back
            n += 1
        return False

    def _hook(self, event: str, args: tuple) -> None:
        if event not in EVENTS or self._busy:
            return
        self._busy = True  # our own sys._getframe calls raise audit events too
        try:
            self._check(event, args)
        finally:
            self._busy = False

    def _deny(self, name: str, message: str) -> None:
        self.report(name, message)
        raise PermissionError(f"kernelsmith referee: {message}")

    def _check(self, event: str, args: tuple) -> None:
        # Inside a Triton launch the compiler's own work (ptxas, its cache) passes; a grid function or a Python
        # helper the kernel calls is still the candidate's code, and is checked as such.
        if self.in_launch() and not self._candidate_frames(2):
            return
        if event in CODE_EVENTS:
            filename = args[1] if len(args) > 1 else None
            if isinstance(filename, bytes):
                filename = os.fsdecode(filename)
            if isinstance(filename, str) and filename.startswith("<") and self._candidate_frames(1):
                self.borrowed_names.add(filename)
            elif isinstance(filename, str) and not filename.startswith("<") \
                    and os.path.realpath(filename) != self.candidate_file and self._candidate_frames(1):
                self._deny("tampering", f"candidate compiled code under a foreign file name ({filename[:200]}): "
                           "code must not pass for the referee's or a library's")
        elif event in SIGNAL_EVENTS:
            if event.startswith("socket."):  # its link to the judge is the referee's, not the candidate's
                if self._candidate_frames(0):
                    self._deny("referee_access", f"candidate used a socket ({event})")
            elif self._candidate_frames(0):
                target = args[0] if args else ""
                if event == "os.kill" and target == os.getpid():
                    return  # signalling itself (a crash, an abort) harms no one else
                self._deny("referee_access", f"candidate tried {event} {target!r}"[:300])
        elif event in PATH_EVENTS:
            writes = _writes(event, args)
            for path in _paths(event, args):
                why = self._protected(path)
                if why and self._candidate_frames(0):
                    self._deny("secret_access" if why == "proc" else "referee_access",
                               f"candidate tried {event} on {path}")
                if writes and not self._writable(path) and self._candidate_frames(0):
                    self._deny("filesystem_write", f"candidate tried to write {path} (outside its temp dir)")
        elif event in CONCURRENCY_EVENTS:
            if self._candidate_frames(0):
                detail = args[0] if args else ""
                self._deny("extra_thread", f"candidate started concurrent work ({event} {detail!r})"[:300])
        elif event in NATIVE_EVENTS:
            if self._candidate_frames(3):
                self._deny("native_access", f"candidate used ctypes ({event})")
        elif event in INTROSPECTION_EVENTS:
            if self._candidate_frames(1):  # direct calls only: namedtuple, enum, typing use _getframe
                self._deny("referee_access", f"candidate inspected the interpreter's frames or objects ({event})")
        elif event == "object.__getattr__":
            if args[1] in ("tb_frame", "f_back", "gi_frame", "cr_frame", "ag_frame", "f_locals", "f_globals") \
                    and self._candidate_frames(1):
                self._deny("referee_access", f"candidate walked interpreter frames ({args[1]})")
            if args[1] in ("__kwdefaults__", "__defaults__", "__globals__") and self._candidate_frames(1) \
                    and not _own_function(args[0], self.candidate_file):
                self._deny("referee_access", f"candidate read {args[1]} of code that is not its own")
        elif event == "object.__setattr__":
            obj, attr = args[0], args[1]
            if attr in CODE_ATTRS and self._candidate_frames(1):
                self._deny("tampering", f"candidate replaced {getattr(obj, '__qualname__', obj)!r}.{attr}")
            if isinstance(obj, type) and str(getattr(obj, "__module__", "")).startswith(GUARDED_MODULES) \
                    and self._candidate_frames(1):
                self._deny("tampering", f"candidate patched {obj.__module__}.{obj.__qualname__}.{attr}")

    def _writable(self, path: str) -> bool:
        full = os.path.realpath(path)
        return full.startswith(self.free_dirs) or full in ("/dev/null", "/dev/shm") or full.startswith("/dev/shm/")

    def _protected(self, path: str) -> str:
        """'job' for the referee's files, 'proc' for another process's private /proc entries, else ''."""
        if path.startswith("/proc/"):
            m = PROC_PRIVATE.match(path)
            return "proc" if m and m.group(1) != self.self_pid else ""
        full = os.path.realpath(path)
        if full == self.candidate_file or full.startswith(self.free_dirs):
            return ""
        return "job" if full == self.job_dir or full.startswith(self.job_dir + os.sep) else ""


def _own_function(fn: object, candidate_file: str) -> bool:
    code = getattr(fn, "__code__", None)
    return code is not None and code.co_filename == candidate_file


@lru_cache(maxsize=4096)
def _writable_dir(path: str) -> bool:
    """Could this process create or replace a file in `path`? (Read-only binds answer no, whoever owns them.)"""
    return os.access(path, os.W_OK)


WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


def _writes(event: str, args: tuple) -> bool:
    """Does this event change the filesystem? (`open` for writing, or a rename/link/remove/chmod/truncate.)"""
    if event != "open":
        return True
    mode, flags = (args[1] if len(args) > 1 else None), (args[2] if len(args) > 2 else 0)
    if isinstance(mode, str):
        return any(c in mode for c in "wax+")
    return bool((flags or 0) & WRITE_FLAGS)


def _paths(event: str, args: tuple) -> list[str]:
    out = []
    for a in args[:2] if event in ("os.rename", "os.link", "os.symlink") else args[:1]:
        if isinstance(a, (str, bytes, os.PathLike)):
            p = os.fsdecode(a)
            out.append(p if os.path.isabs(p) else os.path.join(os.getcwd(), p))
    return out
