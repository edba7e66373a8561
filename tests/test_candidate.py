"""Candidates: reading the file, EVOLVE-BLOCK handling and the normalised hash used to skip duplicates."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kernelsmith.candidate import Candidate, CandidateError

SRC = """import torch
# EVOLVE-BLOCK-START
def f(x):
    return x + 1
# EVOLVE-BLOCK-END
print('tail')
"""


def test_block_split_and_replace() -> None:
    c = Candidate(SRC)
    assert c.has_block and "return x + 1" in c.block
    new = c.with_block("def f(x):\n    return x * 2\n")
    assert "x * 2" in new.block and "x + 1" not in new.source
    assert new.source.startswith("import torch") and new.source.rstrip().endswith("print('tail')")


def test_no_markers_means_whole_program() -> None:
    c = Candidate("x = 1\n")
    assert not c.has_block and c.block == "x = 1\n"
    assert c.with_block("y = 2\n").source == "y = 2\n"


def test_digest_ignores_comments_and_formatting() -> None:
    a = Candidate("def f(x):\n    return x+1\n")
    b = Candidate("# a comment\ndef f( x ):\n\n    return (x + 1)  # same\n")
    assert a.digest == b.digest
    assert a.digest != Candidate("def f(x):\n    return x+2\n").digest
    assert Candidate("def f(:\n").digest  # unparsable source still hashes


def test_a_pep263_candidate_is_decoded_by_its_coding_line(tmp_path: Path) -> None:
    path = tmp_path / "cand.py"
    path.write_bytes("# vim: set fileencoding=latin-1 :\nNAME = 'Ærø'\r\nclass ModelNew: pass\n".encode("latin-1"))
    c = Candidate.from_file(path)
    assert c.source == "# vim: set fileencoding=utf-8 :\nNAME = 'Ærø'\nclass ModelNew: pass\n"
    assert c.origin == str(path)
    bom = tmp_path / "bom.py"
    bom.write_bytes(b"\xef\xbb\xbfx = 1\n")
    assert Candidate.from_file(bom).source == "x = 1\n"


@pytest.mark.parametrize(("path", "needle", "kind"), [
    ("/dev/zero", "it is a character device", "not_a_file"),
    ("fifo", "it is a FIFO", "not_a_file"),
    ("absent.py", "no such file", "missing"),
])
def test_only_regular_files_are_read(tmp_path: Path, path: str, needle: str, kind: str) -> None:
    target = Path(path) if path.startswith("/") else tmp_path / path
    if path == "fifo":
        os.mkfifo(target)
    with pytest.raises(CandidateError) as exc:
        Candidate.from_file(target)  # neither blocks (a FIFO) nor fills memory (/dev/zero)
    assert str(exc.value) == f"{target}: cannot read candidate file: {needle}" + (
        ", not a regular file" if kind == "not_a_file" else "")
    assert (exc.value.kind, exc.value.file) == (kind, str(target))
