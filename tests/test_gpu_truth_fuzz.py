"""Fuzzer kernels whose results on a real GPU (an H200, CUDA 13.0, recorded 2026-11-27) first
differed from cpuify's, kept as regression tests with their causes.

All 10,000 kernels of seed 2810 were built with NVIDIA's nvcc 13.0 (`-arch=sm_80`) and run on
the GPU, and each kernel's outputs compared with cpuify's interpreter.  9,963 agreed; 32
differed only because NVIDIA's two compilers differ (the interpreter run on nvcc 13.0's own
PTX for the kernel gives the GPU's bits; cpuify compiles NVRTC 13.5's PTX); 5 differed on
nvcc 13.0's own PTX too (`tests/gpu_truth/fuzz_h200/`: the kernel's spec, that PTX and the
GPU's outputs).  Their causes, found by reading the SASS that ptxas 13.0 makes of that PTX
(nvdisasm, from PyPI's nvidia-cuda-nvdisasm):

- one was cpuify's: ptxas fuses a product into sums in other blocks (here, hoisted out of a
  loop) when that costs no register; cpuify fused only within a block (lifting/contract.py,
  tests/test_contract.py).  It agrees with the GPU now;
- four are ptxas's: the PTX ISA gives cpuify's result, and the SASS drops or folds one PTX
  instruction.  With that one instruction changed in the PTX as ptxas changed it, cpuify's
  interpreter gives the GPU's outputs bit for bit, so nothing else in the kernel differs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from cpuify.interp import InterpModule
from test_fuzz import fuzz      # tools/fuzz.py, loaded once

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "gpu_truth" / "fuzz_h200"



#: kernels cpuify now runs as the GPU did
AGREE = {
    # nvcc hoisted the unrounded product |f1| * 3e38 out of a loop (PTX line 96, the loop's
    # preheader) and subtracts it in the loop body (line 104); ptxas moves the product into
    # the loop as an FFMA (one register operand, one immediate).
    "fz_2810_2948": "f32 results 1 ulp off for values near 1e19",
}

#: kernel -> (PTX as nvcc wrote it, as ptxas compiled it, what the SASS shows)
PTXAS_MISCOMPILES = {
    "fz_2810_7510": ("cvt.rp.f32.u32 \t%f2, %r46;", "mov.b32 \t%f2, %r46;",
                     "no I2F at all: the 0/1 of `selp.u32 %r46, 1, 0, %p4` is stored as the "
                     "float's bits (0x00000001 for 1.0f); in the kernel cut down to what "
                     "keeps the bug, removing the later bar.red.or.pred brings the I2F back"),
    "fz_2810_5985": ("neg.s32 \t%r58, %r2;", "mov.u32 \t%r58, %r2;",
                     "`min(min(1, -s1), x)` becomes one VIMNMX3 of s1 itself (sm_90; sm_80's "
                     "two IMNMX are right): the negation is lost"),
    "fz_2810_7117": ("setp.ge.f32 \t%p2, %f6, 0f00000000;", "setp.equ.f32 \t%p2, %f6, %f6;",
                     "`f*f >= 0` (f6 = f5 * f5) is folded to true: no FSETP, although a NaN "
                     "square is not >= 0"),
    "fz_2810_3559": ("setp.gt.f32 \t%p3, %f3, 0f3F800000;", "setp.equ.f32 \t%p3, %f3, %f3;",
                     "`|x| + 2^24 > 1` is folded to true: no FADD, no FSETP, although it is "
                     "false for a NaN x"),
}


def _differences(name: str, ptx: str) -> str | None:
    spec = fuzz.KernelSpec.from_json(json.loads((DATA / f"{name}.json").read_text()))
    recorded = np.load(DATA / "h200_outputs.npz")
    gpu = {key.split("/", 1)[1]: recorded[key] for key in recorded.files if key.startswith(name + "/")}
    args = fuzz.make_args(spec)
    InterpModule(ptx).launch(spec.name, spec.grid, spec.block, args)
    return fuzz.compare(spec, fuzz.outputs(args), gpu)


@pytest.mark.parametrize("name", sorted(AGREE))
def test_interpreter_matches_the_gpu(name: str) -> None:
    diff = _differences(name, (DATA / f"{name}.ptx").read_text())
    assert diff is None, f"{AGREE[name]} again: {diff[:300]}"


@pytest.mark.parametrize("name", sorted(PTXAS_MISCOMPILES))
def test_gpu_differs_only_by_a_ptxas_miscompile(name: str) -> None:
    """cpuify runs nvcc's PTX as the PTX ISA says, which the GPU did not; the same PTX with
    the one instruction ptxas miscompiled changed to what its SASS does gives every output
    of the GPU."""
    written, compiled, sass = PTXAS_MISCOMPILES[name]
    ptx = (DATA / f"{name}.ptx").read_text()
    assert ptx.count(written) == 1
    assert _differences(name, ptx) is not None, f"{name} agrees with the GPU as written ({sass})"
    diff = _differences(name, ptx.replace(written, compiled))
    assert diff is None, f"{name} differs from the GPU beyond ptxas's {sass}: {diff[:300]}"
