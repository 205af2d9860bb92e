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


def _fp_run(run: str, name: str, args: list, grid: int, block: int) -> None:
    fp = _probe("fp")
    ptx = compile_to_ptx(fp.kernels(), filename="fp.cu", options=("--fmad=true",)).ptx
    if run == "native":
        cpuify.RawModule(ptx=ptx).get_function(name)((grid,), (block,), tuple(args))
    else:
        InterpModule(ptx).launch(name, (grid, 1, 1), (block, 1, 1), list(args))


def _same_bits(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """Equal bit for bit, any NaN equal to any NaN (payloads differ between CPUs and GPUs)."""
    return (got.view(np.uint64 if got.itemsize == 8 else np.uint32)
            == want.view(np.uint64 if want.itemsize == 8 else np.uint32)) | (np.isnan(got) & np.isnan(want))


@pytest.mark.parametrize("run", ["native", "interp"])
@pytest.mark.parametrize("w", [32, 64])
def test_min_max_div_rcp_sqrt_of_special_values_match_h100(run: str, w: int) -> None:
    """min/max (and .NaN) of every pair of ±0, ±1, ±inf, NaN, subnormals; div/rcp/sqrt in the
    four roundings, neg and abs of each: what an H100 gave, bit for bit."""
    fp = _probe("fp")
    truth = np.load(TRUTH / "h100_fp.npz")
    spec = truth[f"spec{w}"]
    n = spec.size
    names = fp.BIN + fp.DIV
    out = np.zeros(n * n * len(names), dtype=spec.dtype)
    _fp_run(run, f"bin{w}", [spec.copy(), out, np.int32(n)], n, n)
    got, want = out.reshape(n, n, -1), truth[f"bin{w}"]
    bad = []
    for q, ins in enumerate(names):
        if "NaN" in ins and w == 64:
            continue
        for j, i in zip(*np.nonzero(~_same_bits(got[:, :, q], want[:, :, q]))):
            bad.append(f"{ins.format(w=w)}({spec[j]!r}, {spec[i]!r}) = {got[j, i, q]!r}, H100: {want[j, i, q]!r}")
    out = np.zeros(n * len(fp.UN), dtype=spec.dtype)
    _fp_run(run, f"un{w}", [spec.copy(), out, np.int32(n)], 1, n)
    got, want = out.reshape(n, -1), truth[f"un{w}"]
    for q, ins in enumerate(fp.UN):
        for i in np.nonzero(~_same_bits(got[:, q], want[:, q]))[0]:
            bad.append(f"{ins.format(w=w)}({spec[i]!r}) = {got[i, q]!r}, H100: {want[i, q]!r}")
    assert not bad, f"{len(bad)} differ: " + "; ".join(bad[:12])


@pytest.mark.parametrize("run", ["native", "interp"])
@pytest.mark.parametrize("w", [32, 64])
def test_unrounded_products_fuse_as_on_h100(run: str, w: int) -> None:
    """ptxas fuses an unrounded mul into the add/subs that use it (a*b+c, a*b-c, c-a*b, and
    one product in two sums: both fused); not a mul.rn, an add.rn, or a product with another
    kind of use (lifting/contract.py; tests/test_contract.py has the other shapes)."""
    truth = np.load(TRUTH / "h100_fp.npz")
    a, b, c = truth[f"fuse{w}_in"]
    out = np.zeros(a.size * 8, dtype=a.dtype)
    _fp_run(run, f"fuse{w}", [a.copy(), b.copy(), c.copy(), out, np.int32(a.size)], 1, a.size)
    got, want = out.reshape(a.size, 8), truth[f"fuse{w}"]
    for k in range(8):
        bad = np.nonzero(~_same_bits(got[:, k], want[:, k]))[0]
        assert bad.size == 0, f"case {k}: {bad.size} of {a.size} differ from the H100"
