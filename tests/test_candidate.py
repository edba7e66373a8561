"""Candidates: EVOLVE-BLOCK handling and the normalised hash used to skip duplicates."""

from kernelsmith.candidate import Candidate

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
