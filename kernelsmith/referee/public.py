"""What the service may show a client: text with the server's own paths taken out.

Error messages and verdicts are built from exceptions and logs that name files on the server (the temporary
directory a task was checked in, the service's work dir, the interpreter and the package). A client needs
none of them, and a temp path with a random name tells an attacker where the seeds of a running evaluation
live. Paths inside a sandbox (`/job/...`) are the client's own view and stay.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

import kernelsmith


class PathScrubber:
    """Replaces server paths in strings (and in the strings of nested dicts and lists) by short labels."""

    def __init__(self, extra: dict[str, str] | None = None):
        roots: dict[str, str] = {os.getcwd(): "<cwd>"}
        tmp = os.path.realpath(tempfile.gettempdir())
        roots[str(Path(kernelsmith.__file__).resolve().parent.parent)] = "<kernelsmith>"
        for prefix in {sys.prefix, sys.base_prefix, sys.exec_prefix}:
            roots[os.path.realpath(prefix)] = "<python>"
            roots[prefix] = "<python>"
        roots[tmp] = "<tmp>"
        roots[tempfile.gettempdir()] = "<tmp>"
        roots[os.path.expanduser("~")] = "<home>"
        roots.update(extra or {})
        roots = {k.rstrip("/"): v for k, v in roots.items() if k and k.rstrip("/") not in ("", "/")}
        # A task is checked in `SOMEWHERE/kernelsmith-task-XXXX/NAME.py`: the client knows NAME, nothing else.
        self._scratch = re.compile(r"(?:/[^\s'\"/:]+)*/kernelsmith-(?:task|child|build)-[A-Za-z0-9_]+/")
        longest_first = sorted(roots, key=len, reverse=True)
        self._roots = re.compile("|".join(re.escape(r) + r"(?=/|\b|$)" for r in longest_first))
        self._labels = roots

    def text(self, value: str) -> str:
        value = self._scratch.sub("", value)
        return self._roots.sub(lambda m: self._labels[m.group(0)], value)

    def __call__(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {k: self(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self(v) for v in value]
        return value
