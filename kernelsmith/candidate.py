"""A candidate program: source text defining `class ModelNew`, its EVOLVE-BLOCK, and a normalised hash."""

from __future__ import annotations

import ast
import hashlib
import io
import tokenize
from dataclasses import dataclass
from pathlib import Path

from kernelsmith import pyast

BLOCK_START = "# EVOLVE-BLOCK-START"
BLOCK_END = "# EVOLVE-BLOCK-END"


class CandidateError(pyast.SourceError):
    """A candidate file that cannot be read; syntax errors are not this: they are a `compile_error` verdict."""


def normalise(source: str) -> str:
    """Source with comments, blank lines and formatting removed, so trivially equal programs hash equal."""
    try:
        return ast.unparse(pyast.parse(source))
    except SyntaxError:
        out = []
        try:
            for tok in tokenize.generate_tokens(io.StringIO(source).readline):
                if tok.type not in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT):
                    out.append(tok.string)
        except (tokenize.TokenError, IndentationError):
            return " ".join(source.split())
        return " ".join(out)


@dataclass(frozen=True)
class Candidate:
    """Candidate source; `block` is the evolvable region (the whole program when there are no markers)."""

    source: str
    origin: str = "<candidate>"

    @classmethod
    def from_file(cls, path: str | Path) -> Candidate:
        """A regular file of bounded size, decoded per PEP 263 (`pyast.read_source`); `CandidateError` if not."""
        return cls(pyast.read_source(path, "candidate", CandidateError), str(path))

    @property
    def has_block(self) -> bool:
        return BLOCK_START in self.source and BLOCK_END in self.source

    def split(self) -> tuple[str, str, str]:
        """(before, block, after); before/after are empty when the file has no markers."""
        if not self.has_block:
            return "", self.source, ""
        head, _, rest = self.source.partition(BLOCK_START)
        block, _, tail = rest.partition(BLOCK_END)
        return head + BLOCK_START, block, BLOCK_END + tail

    @property
    def block(self) -> str:
        return self.split()[1]

    def with_block(self, new_block: str) -> Candidate:
        """The same program with its EVOLVE-BLOCK replaced (the whole source when there are no markers)."""
        head, _, tail = self.split()
        if not self.has_block:
            return Candidate(new_block, self.origin)
        return Candidate(head + "\n" + new_block.strip("\n") + "\n" + tail, self.origin)

    @property
    def digest(self) -> str:
        """Hash of the normalised source: duplicates up to formatting and comments share it."""
        return hashlib.sha256(normalise(self.source).encode()).hexdigest()[:16]
