"""The compiler's layering (pyproject.toml, [tool.importlinter]): frontend and IR at the
bottom, then lifting, analysis, transforms, code generation, the compiler driver, and the
API, nvcc driver and CLI on top; no layer imports one above it, so there are no import
cycles between them, and the reference interpreter imports nothing of the compiler past
the IR (an oracle must not share code with what it checks)."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_layers_and_interpreter_independence() -> None:
    pytest.importorskip("importlinter")
    exe = shutil.which("lint-imports") or str(Path(sys.executable).parent / "lint-imports")
    proc = subprocess.run([exe, "--config", str(ROOT / "pyproject.toml")], cwd=ROOT,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "BROKEN" not in proc.stdout
