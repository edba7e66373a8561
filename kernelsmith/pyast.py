"""Python source as the loaders see it: read from a file (bounded, decoded per PEP 263) and parsed.

`ast.parse` runs behind one lock: CPython 3.11 keeps the AST-to-object conversion's recursion counter in state
shared by all threads, so two threads parsing at the same time can fail with "SystemError: AST constructor
recursion depth mismatch" (seen in CI with two evaluations in flight, each loading its task). Parsing is fast;
the lock costs nothing.

Files are read only when they are regular files of at most `MAX_FILE_BYTES`: a FIFO would block the reader
forever and `/dev/zero` would fill its memory.
"""

from __future__ import annotations

import ast
import io
import os
import re
import stat
import threading
import tokenize
from pathlib import Path

_LOCK = threading.Lock()
MAX_FILE_BYTES = 1 << 20  # as many as a request may carry characters (settings.MAX_SOURCE)
_COOKIE = re.compile(r"^[ \t\f]*#.*?coding[:=][ \t]*([-\w.]+)", re.ASCII)  # PEP 263, as tokenize reads it


class SourceError(ValueError):
    """An input file that cannot be used. The message names the file and the problem; `file` and `kind` (a
    stable word: missing, unreadable, not_a_file, too_large, encoding, syntax, ...) are for machines."""

    def __init__(self, message: str, file: str | Path | None = None, kind: str = "bad_input"):
        super().__init__(message)
        self.file = str(file) if file is not None else None
        self.kind = kind


def parse(source: str, filename: str = "<unknown>", mode: str = "exec") -> ast.AST:
    with _LOCK:
        return ast.parse(source, filename=filename, mode=mode)


def _what_it_is(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def read_bytes(path: str | Path, what: str, error: type[SourceError] = SourceError,
               limit: int = MAX_FILE_BYTES) -> bytes:
    """The bytes of `path`, a regular file of at most `limit` bytes; `error` (naming the file and, in words,
    `what` it should be) otherwise. Opened without blocking, so a FIFO is refused rather than waited on."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    except FileNotFoundError:
        raise error(f"{path}: cannot read {what} file: no such file", path, "missing") from None
    except OSError as exc:
        raise error(f"{path}: cannot read {what} file: {exc.strerror or exc}", path, "unreadable") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise error(f"{path}: cannot read {what} file: it is {_what_it_is(st.st_mode)}, not a regular file",
                        path, "not_a_file")
        size = f"{limit >> 20} MiB" if limit % (1 << 20) == 0 else f"{limit} bytes"
        too_large = f"{path}: cannot read {what} file: larger than {size}, the limit for one"
        if st.st_size > limit:
            raise error(too_large, path, "too_large")
        chunks, total = [], 0
        while total <= limit:
            try:
                chunk = os.read(fd, limit + 1 - total)
            except OSError as exc:
                raise error(f"{path}: cannot read {what} file: {exc.strerror or exc}", path, "unreadable") from None
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        if total > limit:  # a file that grows, or one whose size the kernel does not report (/proc)
            raise error(too_large, path, "too_large")
        return b"".join(chunks)
    finally:
        os.close(fd)


def decode_source(data: bytes, path: str | Path, what: str, error: type[SourceError] = SourceError) -> str:
    """Python source text from bytes, decoded as Python decodes a file: UTF-8 unless a BOM or a PEP 263 coding
    line says otherwise; newlines made `\\n`. The text is Unicode from here on, so a coding line naming another
    encoding is rewritten to say utf-8 (same line, same numbering): a file written from the text reads back
    the same, in a referee child or in Triton's source lookup."""
    if b"\0" in data:
        raise error(f"{path}: contains NUL bytes: not a Python source file", path, "encoding")
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError as exc:
        if not str(exc.msg).startswith("invalid or missing encoding"):  # an unknown or contradictory cookie
            raise error(f"{path}: {exc.msg} (its PEP 263 coding line)", path, "encoding") from None
        encoding = "utf-8"  # no cookie and not UTF-8 in the first lines: the decode below says where
    try:
        text = data.decode(encoding)
    except UnicodeDecodeError as exc:
        raise error(f"{path}: not valid {encoding} text (byte {data[exc.start]:#04x} at offset {exc.start}); "
                    "save it as UTF-8 or declare its encoding in a PEP 263 coding line", path, "encoding") from None
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    if encoding not in ("utf-8", "utf-8-sig"):
        lines = text.split("\n", 2)
        for i, line in enumerate(lines[:2]):
            m = _COOKIE.match(line)
            if m:
                lines[i] = line[:m.start(1)] + "utf-8" + line[m.end(1):]
                break
            if line.strip() and not line.lstrip().startswith("#"):
                break  # PEP 263: the second line counts only after a blank or comment line
        text = "\n".join(lines)
    return text


def read_source(path: str | Path, what: str, error: type[SourceError] = SourceError) -> str:
    """A Python source file's text: a bounded regular file, decoded per PEP 263."""
    return decode_source(read_bytes(path, what, error), path, what, error)


def bound_names(tree: ast.Module) -> tuple[set[str], bool]:
    """Names a module binds at its top level (however: def, class, assignment, import, also inside top-level
    if/try/with/for blocks), and whether a `from ... import *` may bind more."""
    names: set[str] = set()
    star = False

    def targets(node: ast.AST) -> None:
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, (ast.Tuple, ast.List)):
            for elt in node.elts:
                targets(elt)
        elif isinstance(node, ast.Starred):
            targets(node.value)

    def visit(body: list[ast.stmt]) -> None:
        nonlocal star
        for node in body:
            if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                names.add(node.name)
            elif isinstance(node, ast.Assign):
                for t in node.targets:
                    targets(t)
            elif isinstance(node, (ast.AnnAssign, ast.AugAssign)) and (
                    not isinstance(node, ast.AnnAssign) or node.value is not None):
                targets(node.target)
            elif isinstance(node, ast.Import):
                names.update(a.asname or a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                for a in node.names:
                    if a.name == "*":
                        star = True
                    else:
                        names.add(a.asname or a.name)
            elif isinstance(node, (ast.For, ast.AsyncFor)):
                targets(node.target)
                visit(node.body + node.orelse)
            elif isinstance(node, (ast.With, ast.AsyncWith)):
                for item in node.items:
                    if item.optional_vars is not None:
                        targets(item.optional_vars)
                visit(node.body)
            elif isinstance(node, (ast.If, ast.While)):
                visit(node.body + node.orelse)
            elif isinstance(node, ast.Try) or type(node).__name__ == "TryStar":
                visit(node.body + node.orelse + node.finalbody + [s for h in node.handlers for s in h.body])
            elif isinstance(node, ast.Expr) and isinstance(node.value, ast.NamedExpr):
                targets(node.value.target)

    visit(tree.body)
    return names, star
