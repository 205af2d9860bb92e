"""cpuify against results recorded on a real GPU (tests/gpu_truth/README.md says how each file
was made): the compiler and the reference interpreter must both give the GPU's bits."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

import cpuify
from cpuify.frontend.nvrtc import compile_to_ptx
from cpuify.interp import InterpModule

ROOT = Path(__file__).resolve().parent.parent
TRUTH = Path(__file__).resolve().parent / "gpu_truth"


def _probe(name: str):
    spec = importlib.util.spec_from_file_location(f"cpuify_gpu_probe_{name}",
                                                  ROOT / "tools" / "gpu_probes" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("src", ["f16", "f32", "f64"])
def test_float_to_int_conversions_match_h100(src: str) -> None:
    """cvt.{rni,rzi,rmi,rpi}.{s8..u64}.{f16,f32,f64} of NaNs, infinities, halves and range
    boundaries: bit for bit what an H100 gave (NaN into 64 bits or from f64: the top bit)."""
    cvt = _probe("cvt")
    truth = np.load(TRUTH / "h100_cvt.npz")
    x, want = truth[f"in_{src}"], truth[f"out_{src}"]
    code = cvt.kernel(src)
    for run in ("native", "interp"):
        out = np.zeros((x.size, 32), dtype=np.uint64)
        if run == "native":
            cpuify.RawModule(code=code).get_function(f"cvt_{src}")(
                (1,), (64,), (x.copy(), out, np.int32(x.size)))
        else:
            ptx = compile_to_ptx(code, filename="cvt.cu").ptx
            InterpModule(ptx).launch(f"cvt_{src}", (1, 1, 1), (64, 1, 1), [x.copy(), out, np.int32(x.size)])
        for j, (rnd, (dst, _, _)) in enumerate(cvt.COMBOS):
            bits = int(dst[1:])
            m = np.uint64((1 << bits) - 1)
            bad = np.nonzero((out[:, j] & m) != (want[:, j] & m))[0]
            assert bad.size == 0, (
                f"{run}: cvt.{rnd}.{dst}.{src} of {[hex(int(v)) for v in x[bad][:4]]}: got "
                f"{[hex(int(v)) for v in out[bad, j][:4]]}, the H100 gave {[hex(int(v)) for v in want[bad, j][:4]]}")
