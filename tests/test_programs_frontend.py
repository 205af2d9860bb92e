"""Whole programs (`cpuify nvcc`) that use the frontend constructs of issue 16: warpSize,
large by-value struct parameters indexed at run time, nested PTX register scopes (double
trig of huge arguments), volatile flags, virtual functions and function-pointer tables.
Outputs are checked against NumPy or hand-computed values."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

PROGRAMS = Path(__file__).parent / "programs"
CPUIFY = [sys.executable, "-m", "cpuify.cli.main"]


def _have_nvcc() -> bool:
    import shutil
    try:
        from cpuify.nvcc.toolkit import find_toolkit
        find_toolkit()
    except Exception:
        return False
    return shutil.which("g++") is not None


pytestmark = pytest.mark.skipif(not _have_nvcc(), reason="nvcc wheel (nvidia-cuda-nvcc) or g++ missing")


def build_and_run(name: str, tmp_path: Path, *args: str) -> list[str]:
    exe = tmp_path / name
    r = subprocess.run([*CPUIFY, "nvcc", f"-I{PROGRAMS}", str(PROGRAMS / f"{name}.cu"), "-o", str(exe)],
                       capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    run = subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    return run.stdout.splitlines()


def test_warp_size_struct_parameters_trig_volatile_flags_and_virtual_calls(tmp_path: Path) -> None:
    out = build_and_run("frontend_gaps", tmp_path)
    t = np.arange(96)
    lanes = t % 32 + 100 * (t // 32) + np.where(t < 32, 10000, 0)
    assert out[0] == f"lanes {int((lanes * (t + 1)).sum())}"
    k = np.arange(1000)
    idx = (k * 7919) % 8100
    weights = k + 1
    big = int(((3 * idx + 1) * weights).sum())
    mid = int(((7 - idx % 300) * weights).sum())
    assert out[1] == f"struct {big} {mid}"
    i = np.arange(64)
    virtual = np.where(i % 2, i + i, 3 * i) + np.where(i % 3 == 0, i * i, -i)
    assert out[-1] == f"dispatch {int((virtual * (i + 1)).sum())}"
    b = np.arange(64)
    assert out[-2] == f"flags {3 * int((42 + b * (b > 0)).sum())} {int((20 + b).sum())}"
    rows = [list(map(float, line.split()[1:])) for line in out[2:] if line.startswith("trig")]
    assert len(rows) == 8
    x, s, c, tn = (np.array(col) for col in zip(*rows))
    for got, want in ((s, np.sin(x)), (c, np.cos(x)), (tn, np.tan(x))):
        assert (np.abs(got - want) <= 2 * np.spacing(np.abs(want))).all(), (got, want)
