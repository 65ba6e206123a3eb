"""The examples' own environment (examples/requirements.txt: O-RAN SC's Python xApp framework),
which ``make test`` creates beside the project's at .venv/examples."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES_PYTHON = ROOT / ".venv" / "examples" / "bin" / "python"


def examples_python() -> Path:
    """The examples' interpreter; the calling test is skipped where it was not made."""
    if not (EXAMPLES_PYTHON.parent.parent / ".installed").exists():
        pytest.skip("the examples' environment is missing: make test creates it "
                    "(make .venv/examples/.installed)")
    return EXAMPLES_PYTHON
