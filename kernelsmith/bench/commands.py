"""`kernelsmith bench`, `compare` and `report`: registered on the main typer app by `register`."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add this part's commands to `app` (filled in by the bench/report issue)."""
