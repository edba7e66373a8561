"""Turning a model's response into a candidate program: code fences, prose, missing markers, SEARCH/REPLACE.

Every failure is a `ParseError` with a reason the workshop stores as a failed attempt (and shows the model).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kernelsmith import pyast
from kernelsmith.candidate import BLOCK_END, BLOCK_START, Candidate

FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)(?:```|\Z)", re.DOTALL)
DIFF = re.compile(r"<{5,}[ \t]*SEARCH[^\n]*\n(.*?)\n={5,}[^\n]*\n(.*?)\n?>{5,}[ \t]*REPLACE", re.DOTALL)
IMPORT = re.compile(r"^\s*(import|from)\s+\w", re.MULTILINE)
MODES = ("full", "diff")


class ParseError(ValueError):
    """The response holds no usable program; the message says why."""


@dataclass(frozen=True)
class Parsed:
    candidate: Candidate
    how: str  # "block", "program", "diff": what the response contained


def _code_blocks(text: str) -> list[str]:
    """Fenced blocks (python-ish languages first), or the whole text when there are no fences."""
    blocks = [(lang.lower(), body) for lang, body in FENCE.findall(text)]
    code = [body for lang, body in blocks if lang in ("", "python", "py", "python3", "triton")]
    return code or [body for _, body in blocks] or [text]


def _pick(blocks: list[str]) -> str:
    """Prefer a block with the EVOLVE markers, then one defining ModelNew, then the longest."""
    for test in (lambda b: BLOCK_START in b, lambda b: "class ModelNew" in b):
        hits = [b for b in blocks if test(b)]
        if hits:
            return max(hits, key=len)
    return max(blocks, key=len)


def _check_syntax(source: str) -> None:
    try:
        pyast.parse(source)
    except SyntaxError as exc:
        raise ParseError(f"the program has a syntax error at line {exc.lineno}: {exc.msg}") from None


def parse_full(text: str, parent: Candidate) -> Parsed:
    """The model returned the whole program (or just the block) with the EVOLVE-BLOCK rewritten."""
    if not text.strip():
        raise ParseError("empty response")
    code = _pick(_code_blocks(text)).strip("\n")
    if BLOCK_START in code and parent.has_block:
        block = Candidate(code).block if BLOCK_END in code else code.split(BLOCK_START, 1)[1]
        child, how = parent.with_block(block), "block"
    elif "class ModelNew" in code and (not parent.has_block or IMPORT.search(code)):
        child, how = Candidate(code + "\n", parent.origin), "program"  # a whole program, imports and all
    elif parent.has_block and ("def " in code or "class " in code):
        child, how = parent.with_block(code), "block"
    else:
        raise ParseError("no program in the response: no code defining ModelNew and no EVOLVE-BLOCK")
    _check_syntax(child.source)
    if "class ModelNew" not in child.source:
        raise ParseError("the program defines no class ModelNew")
    return Parsed(child, how)


def parse_diff(text: str, parent: Candidate) -> Parsed:
    """SEARCH/REPLACE edits applied in order to the parent's EVOLVE-BLOCK (whole program without markers)."""
    edits = DIFF.findall(text)
    if not edits:
        raise ParseError("no SEARCH/REPLACE block in the response")
    block = parent.block
    for i, (search, replace) in enumerate(edits, 1):
        if search not in block:
            stripped = search.strip()
            if not stripped or stripped not in block:
                first = stripped.splitlines()[0] if stripped else ""
                raise ParseError(f"edit {i}: SEARCH text not found in the program (first line: {first[:80]!r})")
            search = stripped
            replace = replace.strip()
        block = block.replace(search, replace, 1)
    child = parent.with_block(block)
    _check_syntax(child.source)
    return Parsed(child, "diff")


def parse_response(text: str, parent: Candidate, mode: str = "full") -> Parsed:
    if mode not in MODES:
        raise ValueError(f"response mode {mode!r}: expected one of {', '.join(MODES)}")
    return parse_full(text, parent) if mode == "full" else parse_diff(text, parent)
