"""Parsing model responses into programs: fences, prose, markers, SEARCH/REPLACE, clear failures."""

from __future__ import annotations

import pytest

from kernelsmith.candidate import Candidate
from kernelsmith.workshop.parse import ParseError, parse_response

PARENT = Candidate(
    "import torch\nimport torch.nn as nn\n\n# EVOLVE-BLOCK-START\nclass ModelNew(nn.Module):\n"
    "    def forward(self, x):\n        return x\n# EVOLVE-BLOCK-END\n\nHELPER = 1\n"
)
NEW_BLOCK = "class ModelNew(nn.Module):\n    def forward(self, x):\n        return x * 2\n"


def test_fenced_full_program_with_prose() -> None:
    text = f"Here is a faster version.\n\n```python\nimport torch\nimport torch.nn as nn\n# EVOLVE-BLOCK-START\n{NEW_BLOCK}# EVOLVE-BLOCK-END\n```\nIt fuses the ops."
    p = parse_response(text, PARENT)
    assert p.how == "block" and "x * 2" in p.candidate.source
    assert p.candidate.source.rstrip().endswith("HELPER = 1")  # the parent's fixed tail is kept


def test_bare_block_without_markers_or_fences() -> None:
    p = parse_response(NEW_BLOCK, PARENT)
    assert p.how == "block" and "x * 2" in p.candidate.block and "import torch" in p.candidate.source


def test_missing_end_marker_and_unclosed_fence() -> None:
    text = f"```python\n# EVOLVE-BLOCK-START\n{NEW_BLOCK}"
    assert "x * 2" in parse_response(text, PARENT).candidate.block


def test_whole_program_for_unmarked_parent() -> None:
    parent = Candidate("import torch\nclass ModelNew: pass\n")
    p = parse_response("```py\nimport torch\nclass ModelNew:\n    x = 1\n```", parent)
    assert p.how == "program" and "x = 1" in p.candidate.source


def test_prefers_the_block_with_modelnew() -> None:
    text = "```bash\npip install triton\n```\n```python\nprint('setup')\n```\n```python\n" + NEW_BLOCK + "```"
    assert "x * 2" in parse_response(text, PARENT).candidate.source


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "empty response"),
        ("I cannot help with that.", "no program"),
        ("```python\nclass ModelNew(nn.Module:\n    pass\n```", "syntax error at line"),
    ],
)
def test_unusable_responses_say_why(text: str, reason: str) -> None:
    with pytest.raises(ParseError, match=reason):
        parse_response(text, PARENT)


def test_search_replace_edits_apply_in_order() -> None:
    text = (
        "<<<<<<< SEARCH\n        return x\n=======\n        return x + 1\n>>>>>>> REPLACE\n"
        "<<<<<<< SEARCH\nreturn x + 1\n=======\nreturn (x + 1) * 3\n>>>>>>> REPLACE\n"
    )
    p = parse_response(text, PARENT, mode="diff")
    assert "return (x + 1) * 3" in p.candidate.block and p.how == "diff"


def test_search_not_found_and_no_edits() -> None:
    with pytest.raises(ParseError, match="edit 1: SEARCH text not found"):
        parse_response("<<<<<<< SEARCH\nreturn y\n=======\nreturn z\n>>>>>>> REPLACE", PARENT, mode="diff")
    with pytest.raises(ParseError, match="no SEARCH/REPLACE"):
        parse_response(NEW_BLOCK, PARENT, mode="diff")
    with pytest.raises(ValueError, match="response mode"):
        parse_response(NEW_BLOCK, PARENT, mode="patch")
