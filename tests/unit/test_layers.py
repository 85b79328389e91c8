"""The layers of docs/design.md hold: the import-linter contracts in pyproject.toml are kept."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_import_contracts_are_kept():
    lint = Path(sys.executable).parent / "lint-imports"
    res = subprocess.run([str(lint), "--no-cache"], cwd=REPO, capture_output=True, text=True, timeout=120)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-3000:]
    assert "CLI above engine above libraries above schedulers KEPT" in out
    assert "No import cycles between the modules of a package KEPT" in out
