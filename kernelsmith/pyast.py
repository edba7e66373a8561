"""`ast.parse` behind one lock, for code that parses from several threads at once.

CPython 3.11 keeps the AST-to-object conversion's recursion counter in state shared by all threads, so two
threads parsing at the same time can fail with "SystemError: AST constructor recursion depth mismatch"
(seen in CI with two evaluations in flight, each loading its task). Parsing is fast; the lock costs nothing.
"""

from __future__ import annotations

import ast
import threading

_LOCK = threading.Lock()


def parse(source: str, filename: str = "<unknown>", mode: str = "exec") -> ast.AST:
    with _LOCK:
        return ast.parse(source, filename=filename, mode=mode)
