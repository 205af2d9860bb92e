"""Compile-time choices that must not change results: the parsed PTX module shared by a
program's block-shape specializations, object emission without loop strength reduction
for functions with very many masked vector accesses (jit.lsr_too_costly), and half fmas
called out of line in kernels with very many of them (half_float.fma_half_call).

Timings are not asserted (benchmarks/compile_time.py measures them)."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import numpy as np
import pytest

import cpuify
from benchmarks.compile_time import (
    RATES,
    rates_reference,
    rates_source,
    rates_statements,
)
from cpuify import compiler
from cpuify.codegen import jit
from cpuify.errors import SpecializationWarning

TWO_KERNELS = r"""
extern "C" __global__ void scale(float *x, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= a;
}
extern "C" __global__ void shift(float *x, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += a;
}
"""


@pytest.fixture
def no_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CPUIFY_NO_CACHE", "1")


@pytest.fixture
def small_modules_in_parallel(monkeypatch: pytest.MonkeyPatch) -> None:
    """The parallel device build for the small modules of these tests."""
    from cpuify.nvcc import device
    monkeypatch.setattr(device, "PARALLEL_FROM_PTX_LINES", 0)


def test_specializations_of_one_module_parse_it_once(no_cache: None,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    compiled = compiler.compile_cuda(TWO_KERNELS)
    parses: list[int] = []
    real_parse = compiler.parse_ptx

    def counting_parse(text: str):  # type: ignore[no-untyped-def]
        parses.append(len(text))
        return real_parse(text)

    monkeypatch.setattr(compiler, "parse_ptx", counting_parse)
    compiler._parsed_ptx.cache_clear()
    for kernel in ("scale", "shift"):
        for block in ((64, 1, 1), (128, 1, 1)):
            spec = compiler.compile_specialized(compiled.ptx, kernel, block, compiled.passes)
            assert spec.object_code
    assert parses == [len(compiled.ptx)]


def test_parse_cache_keeps_modules_apart(no_cache: None) -> None:
    """Two modules specialized in turn: each kernel is found in its own module (the cache
    is keyed by the PTX text, not shared between programs)."""
    a = compiler.compile_cuda(TWO_KERNELS)
    b = compiler.compile_cuda(TWO_KERNELS.replace("scale", "twice").replace("*= a", "*= 2.0f"))
    for _ in range(2):
        compiler.compile_specialized(a.ptx, "scale", (32, 1, 1), a.passes)
        compiler.compile_specialized(b.ptx, "twice", (32, 1, 1), b.passes)
        with pytest.raises(KeyError):
            compiler.compile_specialized(b.ptx, "scale", (32, 1, 1), b.passes)


def test_rates_kernel_without_lsr_matches_numpy(no_cache: None,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """A reaction-rate kernel (100 rate arrays, each thread's elements at the grid's stride)
    specialized for its block shape tail-folded ~600 masked accesses while thread rows were
    aligned to cache lines (now its accesses are plain vector ones): no function of ≥
    LSR_MAX_MASKED_ACCESSES masked accesses is emitted with LSR, and its results are NumPy's,
    as the generic code's are."""
    seen: list[tuple[int, bool]] = []   # (most masked accesses in a function, LSR skipped)
    real_emit = jit._emit

    def spy(mod, emit, lsr=True):  # type: ignore[no-untyped-def]
        text = str(mod)
        most = max((len(jit._MASKED_CALL.findall(f)) for f in text.split("\ndefine ")[1:]),
                   default=0)
        seen.append((most, "@llvm.masked." in text and jit.lsr_too_costly(text)))
        return real_emit(mod, emit, lsr)

    monkeypatch.setattr(jit, "_emit", spy)
    stmts = rates_statements(100)
    species, block, grid = 24, 128, 3
    threads = block * grid
    rng = np.random.default_rng(5)
    c = rng.uniform(0.5, 1.5, (species, threads)).astype(np.float32)
    rf0 = rng.uniform(0.5, 1.5, (len(stmts), threads)).astype(np.float32)
    want = rates_reference(stmts, c, rf0)
    kernel = cpuify.RawModule(code=rates_source(stmts)).get_function(RATES)
    with warnings.catch_warnings():
        warnings.simplefilter("error", SpecializationWarning)
        for launch in range(3):         # the second launch of the shape specializes it
            rf = rf0.copy()
            kernel((grid,), (block,), (c, rf))
            np.testing.assert_array_equal(rf, want, err_msg=f"launch {launch}")
    assert len(seen) >= 2, "the generic and the specialized kernel were not both compiled"
    assert all(skipped or most < jit.LSR_MAX_MASKED_ACCESSES for most, skipped in seen), seen


def test_lsr_too_costly_counts_per_function() -> None:
    def function(name: str, n: int) -> str:
        calls = "\n".join(f"  %v{k} = call <4 x float> @llvm.masked.load.v4f32.p0(ptr %x, "
                          f"i32 4, <4 x i1> %m, <4 x float> zeroinitializer)" for k in range(n))
        return f"define void @{name}(ptr %x, <4 x i1> %m) {{\n{calls}\n  ret void\n}}\n"
    limit = jit.LSR_MAX_MASKED_ACCESSES
    assert not jit.lsr_too_costly(function("a", limit - 1) + function("b", limit - 1))
    assert jit.lsr_too_costly(function("a", 3) + function("b", limit))


def half_chain_source(n: int) -> tuple[str, list[tuple[float, float]]]:
    """A kernel of `n` dependent `__hfma`s per thread with constants (m, c) in [0.5, 1) x
    [0.25, 1): x stays in [0.25, 4], where each fma's exact value fits an f64."""
    rng = np.random.default_rng(11)
    consts = [(float(np.float16(rng.uniform(0.5, 1.0))), float(np.float16(rng.uniform(0.25, 1.0))))
              for _ in range(n)]
    lines = ['#include <cuda_fp16.h>',
             'extern "C" __global__ void hchain(const __half *in, __half *out) {',
             '    int i = blockIdx.x * blockDim.x + threadIdx.x;',
             '    __half x = in[i];']
    for m, c in consts:
        lines.append(f'    x = __hfma(x, __float2half({m!r}f), __float2half({c!r}f));')
    lines += ['    out[i] = x;', '}']
    return "\n".join(lines) + "\n", consts


@pytest.mark.parametrize("limit", [None, 10**9, "cpu"])
def test_many_half_fmas_match_numpy(no_cache: None, monkeypatch: pytest.MonkeyPatch,
                                    limit: int | str | None) -> None:
    """300 half fmas per thread, emulated (a CPU without AVX512-FP16): above
    FMA_HALF_INLINE_LIMIT each is a call of one shared function (limit None: the default),
    with the limit raised all are inline; "cpu": this machine's code (the CPU's own f16 fma
    where it has one, no call).  All round each fma once, as NumPy's f64 -> f16
    conversion of the exact value does."""
    from cpuify.codegen import half_float
    if limit == "cpu" and not jit.has_avx512fp16():
        pytest.skip("no AVX512-FP16 here: the emulated cases cover this machine")
    if limit != "cpu":
        monkeypatch.setattr(jit, "has_avx512fp16", lambda: False)
    if isinstance(limit, int):
        monkeypatch.setattr(half_float, "FMA_HALF_INLINE_LIMIT", limit)
    src, consts = half_chain_source(300)
    assert len(consts) > half_float.FMA_HALF_INLINE_LIMIT or limit is not None
    texts: list[str] = []
    real_optimize = jit.optimize

    def spy(text: str, **kw):  # type: ignore[no-untyped-def]
        texts.append(text)
        return real_optimize(text, **kw)

    monkeypatch.setattr(jit, "optimize", spy)
    compiler.compile_cuda(src)
    assert ("call i16 @\"cpuify_fma_f16\"" in texts[0]) == (limit is None)
    assert ("llvm.fma.f16" in texts[0]) == (limit == "cpu")
    x = np.random.default_rng(3).uniform(0.25, 4.0, 256).astype(np.float16)
    want = x.astype(np.float64)
    for m, c in consts:
        want = (want * m + c).astype(np.float16).astype(np.float64)
    out = np.zeros_like(x)
    cpuify.RawModule(code=src).get_function("hchain")((2,), (128,), (x, out))
    np.testing.assert_array_equal(out, want.astype(np.float16))


# --- a translation unit's device code compiled in worker processes (nvcc/device.py) ---

SHAPED_KERNELS = r"""
extern "C" __global__ void tile_sum(const float *x, float *out, int n) {
    __shared__ float s[256];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    s[threadIdx.x] = i < n ? x[i] : 0.0f;
    __syncthreads();
    if (threadIdx.x == 0) {
        float t = 0.0f;
        for (int k = 0; k < blockDim.x; k++) t += s[k];
        out[blockIdx.x] = t;
    }
}
extern "C" __global__ void axpy(float *y, const float *x, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] += a * x[i];
}
"""


def _shaped_ptx() -> str:
    return compiler.compile_cuda(SHAPED_KERNELS).ptx


def test_parallel_device_build_equals_serial(no_cache: None, small_modules_in_parallel: None) -> None:
    """The generic module and each (kernel, block shape) compiled in forked workers give
    the objects the serial build gives, byte for byte, in the same order."""
    from cpuify.nvcc import device
    ptx = _shaped_ptx()
    shapes = {"tile_sum": [(64, 1, 1), (256, 1, 1)], "axpy": [(128, 1, 1)]}
    serial = device.compile_device_parallel(ptx, "t.cu", shapes, jobs=1)
    parallel = device.compile_device_parallel(ptx, "t.cu", shapes, jobs=2)
    assert parallel[0] is not None and serial[0] is not None
    assert parallel[0].object_code == serial[0].object_code
    assert parallel[1] == serial[1] == {}
    assert list(parallel[2]) == list(serial[2]) == ["tile_sum", "axpy"]
    for name in serial[2]:
        assert [(b, s.object_code, s.scratch) for b, s in parallel[2][name]] == \
            [(b, s.object_code, s.scratch) for b, s in serial[2][name]]


def test_parallel_device_build_keeps_refusals_and_notes(no_cache: None,
                                                       small_modules_in_parallel: None) -> None:
    """A shape of a kernel that does not exist is noted and dropped, as in the serial
    build; a kernel refused by the generic build gets no specializations."""
    from cpuify.nvcc import device
    ptx = _shaped_ptx()
    notes: list[str] = []
    compiled, refused, variants = device.compile_device_parallel(
        ptx, "t.cu", {"axpy": [(32, 1, 1)], "tile_sum": [(32, 1, 1)], "no_such": [(32, 1, 1)]},
        warn=notes.append, jobs=3)
    assert compiled is not None and refused == {}
    assert sorted(variants) == ["axpy", "tile_sum"]
    assert notes == []          # a kernel the module does not have is not a failure


def test_build_jobs_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from cpuify.errors import CpuifyError
    from cpuify.nvcc import device
    monkeypatch.setenv("CPUIFY_JOBS", "3")
    assert device.build_jobs() == 3
    monkeypatch.setenv("CPUIFY_JOBS", "0")
    assert device.build_jobs() == 1
    monkeypatch.setenv("CPUIFY_JOBS", "many")
    with pytest.raises(CpuifyError, match="CPUIFY_JOBS"):
        device.build_jobs()
    monkeypatch.delenv("CPUIFY_JOBS")
    assert 1 <= device.build_jobs() <= device.MAX_BUILD_JOBS


def test_build_jobs_from_nvcc_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    """nvcc's -t N / --threads N sets the processes; -t 0 means one per CPU (no cap);
    CPUIFY_JOBS, when set, comes first."""
    import os

    from cpuify.nvcc import device
    from cpuify.nvcc.driver import UsageError, parse_args
    monkeypatch.delenv("CPUIFY_JOBS", raising=False)
    cpus = len(os.sched_getaffinity(0))
    assert [parse_args(args).threads for args in (["-t", "3"], ["--threads", "5"], ["--threads=2"],
                                                  ["-t=0"], ["-t4"], [])] == [3, 5, 2, 0, 4, None]
    for bad in (["-t", "many"], ["-tmany"]):     # nvcc: "'many': expected a number"
        with pytest.raises(UsageError, match="--threads"):
            parse_args(bad)
    assert device.build_jobs(3) == 3 and device.build_jobs(1) == 1
    assert device.build_jobs(0) == cpus
    assert device.build_jobs(64) == 64        # as asked: MAX_BUILD_JOBS caps the default only
    monkeypatch.setenv("CPUIFY_JOBS", "1")
    assert device.build_jobs(6) == 1 and device.build_jobs(0) == 1


HELPER_KERNELS = r"""
__device__ __noinline__ float helper(float v, int k) {
    for (int j = 0; j < k; j++) v = v * 0.5f + 1.0f;
    return v;
}
extern "C" __global__ void first(float *x, int k) {
    x[threadIdx.x] = helper(x[threadIdx.x], k);
}
extern "C" __global__ void second(float *x, int k) {
    __shared__ float s[64];
    s[threadIdx.x] = helper(x[threadIdx.x], k + 1);
    __syncthreads();
    x[threadIdx.x] = s[63 - threadIdx.x];
}
"""


def test_released_bodies_print_the_same_module(no_cache: None) -> None:
    """ModuleCodegen.release_bodies (compile_ptx calls it after each kernel) keeps the
    module's LLVM text byte for byte, a device function shared by two kernels included."""
    from cpuify.codegen.llvm_gen import ModuleCodegen
    from cpuify.lifting import lift_kernel
    ptx = compiler.compile_cuda(HELPER_KERNELS).ptx
    module = compiler._parsed_ptx(ptx)
    triple, layout = jit.triple_and_layout()
    texts = []
    for release in (False, True):
        gen = ModuleCodegen(module, triple, layout)
        for entry in module.entries:
            lifted, _ = compiler.optimize_kernel(lift_kernel(module, entry).op,
                                                 compiler.PipelineOptions())
            gen.add_kernel(lifted)
            if release:
                gen.release_bodies()
                assert not any(getattr(g, "blocks", None) for g in gen.module.globals.values())
        texts.append(gen.llvm_text())
    assert "define" in texts[0] and texts[1] == texts[0]


def test_module_with_released_bodies_runs(no_cache: None) -> None:
    """Both kernels of the module, compiled by compile_ptx (which releases each kernel's
    body after emitting it), give the hand-computed results."""
    mod = cpuify.RawModule(code=HELPER_KERNELS)
    x0 = np.arange(64, dtype=np.float32)

    def helper(v: np.ndarray, k: int) -> np.ndarray:
        for _ in range(k):
            v = v * np.float32(0.5) + np.float32(1.0)
        return v

    x = x0.copy()
    mod.get_function("first")((1,), (64,), (x, np.int32(3)))
    np.testing.assert_array_equal(x, helper(x0, 3))
    x = x0.copy()
    mod.get_function("second")((1,), (64,), (x, np.int32(2)))
    np.testing.assert_array_equal(x, helper(x0, 3)[::-1])


def _worker_dies(*args: object) -> None:
    import os
    os._exit(9)


def test_parallel_device_build_survives_a_dead_worker(no_cache: None, small_modules_in_parallel: None,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker that dies (killed, out of memory) costs its specializations, noted, and
    never the build: the generic module is then compiled in the parent."""
    from cpuify.nvcc import device
    ptx = _shaped_ptx()
    monkeypatch.setattr(device, "_specialize_task", _worker_dies)
    monkeypatch.setattr(device, "_generic_task", _worker_dies)
    notes: list[str] = []
    compiled, refused, variants = device.compile_device_parallel(
        ptx, "t.cu", {"axpy": [(32, 1, 1), (64, 1, 1)]}, warn=notes.append, jobs=2)
    assert compiled is not None and sorted(compiled.kernels) == ["axpy", "tile_sum"]
    assert refused == {} and variants == {}
    assert len(notes) == 2 and all("worker process died" in n for n in notes)


# ---------------------------------------------------------------------------------------
# the generic module at the fallback LLVM level when the launch shapes cover every launch

FALLBACK_PROGRAM = r"""
#include <cstdio>
#include <cmath>
template <int R>
__global__ void smooth(const float *x, float *y, int n) {
    extern __shared__ float tile[];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    tile[threadIdx.x + R] = i < n ? x[i] : 0.0f;
    if (threadIdx.x < R) {
        tile[threadIdx.x] = i >= R && i - R < n ? x[i - R] : 0.0f;
        int j = i + blockDim.x;
        tile[threadIdx.x + blockDim.x + R] = j < n ? x[j] : 0.0f;
    }
    __syncthreads();
    if (i < n) {
        float s = 0.0f;
        for (int k = -R; k <= R; k++) s += tile[threadIdx.x + R + k] * (float)(k + R + 1);
        y[i] = s;
    }
}
__global__ void axpb(float *y, float a, int n) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
        y[i] = a * y[i] + (float)(i % 3);
}
int main() {
    const int n = 1000, bs = 128;
    float x[n], y[n], *dx, *dy;
    for (int i = 0; i < n; i++) x[i] = 0.5f + 0.25f * sinf(0.1f * i);
    cudaMalloc(&dx, n * sizeof(float));
    cudaMalloc(&dy, n * sizeof(float));
    cudaMemcpy(dx, x, n * sizeof(float), cudaMemcpyHostToDevice);
    smooth<2><<<(n + bs - 1) / bs, bs, (bs + 4) * sizeof(float)>>>(dx, dy, n);
    axpb<<<3, dim3(64)>>>(dy, 0.5f, n);
    cudaMemcpy(y, dy, n * sizeof(float), cudaMemcpyDeviceToHost);
    for (int i = 0; i < n; i++) printf("%.6f\n", y[i]);
    return 0;
}
"""


def _need_nvcc_and_gxx() -> None:
    """Skip the test without NVIDIA's nvcc wheel or a host g++."""
    import shutil
    try:
        from cpuify.nvcc.toolkit import find_toolkit
        find_toolkit()
    except Exception:  # noqa: BLE001
        pytest.skip("nvcc wheel (nvidia-cuda-nvcc) missing")
    if shutil.which("g++") is None:
        pytest.skip("g++ missing")


def _fallback_reference() -> np.ndarray:
    n, r = 1000, 2
    x = (0.5 + 0.25 * np.sin(0.1 * np.arange(n, dtype=np.float32))).astype(np.float64)
    padded = np.concatenate([np.zeros(r), x, np.zeros(r)])
    y = sum(padded[r + k:r + k + n] * (k + r + 1) for k in range(-r, r + 1))
    return 0.5 * y + np.arange(n) % 3


def _build_and_run(tmp_path, monkeypatch, levels: list[str]):  # type: ignore[no-untyped-def]
    """Builds FALLBACK_PROGRAM with `cpuify nvcc` in this process (the generic module's LLVM
    level appended to `levels`) and runs it with CPUIFY_PROFILE=1."""
    import os
    import subprocess

    from cpuify.nvcc import device
    from cpuify.nvcc.driver import nvcc_main
    _need_nvcc_and_gxx()
    original = getattr(device.compile_device_parallel, "__wrapped__", device.compile_device_parallel)

    def recording(*args, **kw):  # type: ignore[no-untyped-def]
        got = original(*args, **kw)
        levels.append(got[0].llvm_level)
        return got
    recording.__wrapped__ = original  # type: ignore[attr-defined]
    monkeypatch.setattr(device, "compile_device_parallel", recording)
    monkeypatch.setenv("CPUIFY_NO_CACHE", "1")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "f.cu").write_text(FALLBACK_PROGRAM)
    assert nvcc_main(["f.cu", "-o", "f"]) == 0
    r = subprocess.run([str(tmp_path / "f")], check=False, capture_output=True, text=True, timeout=120,
                       env={**os.environ, "CPUIFY_PROFILE": "1"})
    assert r.returncode == 0, r.stderr
    return np.array([float(v) for v in r.stdout.split()]), r.stderr


def test_generic_module_is_a_fallback_when_every_launch_is_specialized(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Every launch of the program has a constant block shape: the generic module is built
    at the fallback level, the launches run the specialized code, results match NumPy."""
    levels: list[str] = []
    got, profile = _build_and_run(tmp_path, monkeypatch, levels)
    assert levels == ["fallback"]
    np.testing.assert_allclose(got, _fallback_reference(), rtol=1e-5, atol=1e-5)
    for kernel in ("smooth<2>", "axpb"):
        assert any(kernel in line and "(1 specialized" in line for line in profile.splitlines()), profile
    # CPUIFY_GENERIC_LEVEL=O3 keeps the full pipeline
    monkeypatch.setenv("CPUIFY_GENERIC_LEVEL", "O3")
    got, _ = _build_and_run(tmp_path, monkeypatch, levels)
    assert levels == ["fallback", "O3"]
    np.testing.assert_allclose(got, _fallback_reference(), rtol=1e-5, atol=1e-5)


def test_fallback_generic_runs_a_launch_the_build_did_not_foresee(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The launch-shape analysis claims every launch covered but names other shapes than
    the program uses (what a launch from another file would do): the launches run the
    fallback-level generic code, with a barrier and dynamic shared memory, and are right."""
    from cpuify.nvcc import launch_shapes
    monkeypatch.setattr(launch_shapes, "kernel_shapes",
                        lambda by_name, entries, **kw: {e: [(32, 1, 1)] for e in entries})
    monkeypatch.setattr(launch_shapes, "covered_entries",
                        lambda launches, entries, chosen: set(entries))
    levels: list[str] = []
    got, profile = _build_and_run(tmp_path, monkeypatch, levels)
    assert levels == ["fallback"]
    np.testing.assert_allclose(got, _fallback_reference(), rtol=1e-5, atol=1e-5)
    # (the profile counts the launches that ran code for their shape: none here)
    rows = [line for line in profile.splitlines() if "smooth<2>" in line or "axpb(" in line]
    assert len(rows) == 2 and not any("specialized" in line for line in rows), profile


def test_failed_specialization_rebuilds_the_generic_module_at_o3(no_cache: None, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A covered kernel whose specialization fails runs the generic code for a foreseen
    launch: the generic module is then built at O3 after all."""
    from cpuify.nvcc import device
    ptx = _shaped_ptx()
    entries = device.entry_names(ptx)
    shapes = {e: [(32, 1, 1)] for e in entries}
    compiled, _, variants = device.compile_device_parallel(ptx, "t.cu", shapes, warn=lambda s: None,
                                                           jobs=1, covered=set(entries))
    assert compiled is not None and compiled.llvm_level == "fallback"
    assert sorted(variants) == sorted(entries)

    def failing(*args, **kw):  # type: ignore[no-untyped-def]
        raise RuntimeError("specialization failed on purpose")
    monkeypatch.setattr(device, "compile_specialized", failing)
    notes: list[str] = []
    compiled, _, variants = device.compile_device_parallel(ptx, "t.cu", shapes, warn=notes.append,
                                                           jobs=1, covered=set(entries))
    assert compiled is not None and compiled.llvm_level == "O3" and variants == {}
    assert len(notes) == len(entries)
    # not every kernel covered: O3 from the start
    assert device.generic_level(ptx, shapes, set(entries[:1])) == "O3"
    assert device.generic_level(ptx, shapes, set(entries)) == "fallback"
    # a kernel launching kernels from device code (dynamic parallelism) runs their generic code
    assert device.generic_level(ptx + "\n// call.uni (retval0), cudaLaunchDevice, (p, q);\n",
                                shapes, set(entries)) == "O3"


def test_fallback_level_runs_only_the_clean_up_passes(no_cache: None) -> None:  # type: ignore[no-untyped-def]
    """The generic module of a program whose launches are all specialized runs only for an
    unforeseen launch: LLVM gives it only the clean-up of the code generator's form
    (jit.FALLBACK_PASSES), not O2's dozens of passes (it did: SHOC Scan.cu's generic module
    took 1.0 s to optimize, 0.07 s now).  A module over O3's CPU limit still gets O2 (the
    "bounded" pipeline: that code is the one that runs)."""
    ptx = _shaped_ptx()
    triple, layout = jit.triple_and_layout()
    from cpuify.codegen.llvm_gen import ModuleCodegen
    from cpuify.frontend.ptx_parser import parse_ptx
    module = parse_ptx(ptx)
    gen = ModuleCodegen(module, triple, layout)
    for entry in module.entries:
        lifted, _ = compiler.lift_and_optimize(module, entry, compiler.PipelineOptions(), None)
        gen.add_kernel(lifted, None)
    text = gen.llvm_text()

    def passes(level: str) -> set[str]:
        reports: list[str] = []
        jit._optimize_here(text, pass_timings=reports, level=level)
        names = set()
        for line in "".join(reports).splitlines():
            m = re.match(r"^\s*(?:[\d.]+ \(\s*[\d.]+%\)\s+)+(\w+Pass)\b", line)
            if m:
                names.add(m.group(1))
        return names
    light = passes("fallback")
    assert light and light <= {"SROAPass", "InstCombinePass", "SimplifyCFGPass", "DCEPass"}, light
    assert {"InlinerPass", "LICMPass", "GVNPass"} <= passes("bounded")
    optimized = str(jit.optimize(text, level="fallback"))
    # the code generator's allocas promoted (the block function's context, passed to the
    # segments it calls, stays)
    assert optimized.count(" = alloca ") * 4 < text.count(" = alloca ")
    # the objects still work: a launch of the fallback-level generic code
    compiled = compiler.compile_ptx(ptx, llvm_level="fallback")
    assert compiled.llvm_level == "fallback" and compiled.object_code


BLOCK_REDUCE = r"""
extern "C" __global__ void block_reduce(const float *x, float *out, int n) {
    __shared__ float part[32];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float v = i < n ? x[i] : 0.0f;
    for (int o = 16; o > 0; o /= 2) v += __shfl_down_sync(0xffffffffu, v, o);
    if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = v;
    __syncthreads();
    if (threadIdx.x < 32) {
        v = threadIdx.x < blockDim.x / 32 ? part[threadIdx.x] : 0.0f;
        for (int o = 16; o > 0; o /= 2) v += __shfl_down_sync(0xffffffffu, v, o);
        if (threadIdx.x == 0) out[blockIdx.x] = v;
    }
}
"""


def test_segments_are_not_inlined_into_the_dispatcher(no_cache: None) -> None:
    """The scheduler's dispatcher calls the kernel's segments instead of holding a second,
    separately optimized copy of each (compile time); the kernel, whose warp shuffles and
    one-warp tail go through the dispatcher, still matches NumPy, generic and specialized."""
    from cpuify.codegen.llvm_gen import ModuleCodegen
    from cpuify.frontend.ptx_parser import parse_ptx
    compiled = compiler.compile_cuda(BLOCK_REDUCE)
    module = parse_ptx(compiled.ptx)
    gen = ModuleCodegen(module, *jit.triple_and_layout())
    gen.add_kernel(compiler.lift_optimized(module, module.functions["block_reduce"]))
    text = str(jit.optimize(gen.llvm_text()))
    dispatcher = next(f.split("\n}\n", 1)[0] for f in text.split("\ndefine ")[1:]
                      if "@cpuify_dispatch_block_reduce(" in f.split("\n", 1)[0])
    assert "call" in dispatcher and "@cpuify_seg_block_reduce" in dispatcher
    assert len(dispatcher.splitlines()) < 200
    x = np.random.default_rng(5).standard_normal(5000).astype(np.float32)
    kernel = cpuify.RawModule(code=BLOCK_REDUCE).get_function("block_reduce")
    for threads in (256, 256, 128):         # the second launch of a shape is specialized
        blocks = (x.size + threads - 1) // threads
        out = np.zeros(blocks, np.float32)
        kernel((blocks,), (threads,), (x, out, np.int32(x.size)))
        want = np.add.reduceat(x.astype(np.float64), np.arange(0, x.size, threads))
        np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)


def test_nvcc_ratio_reports_each_file(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    """`benchmarks.compile_time --nvcc-ratio DIR`: a row per .cu file with both CPU times
    and their ratio; a file NVIDIA's nvcc cannot compile alone is listed as skipped."""
    import json

    from benchmarks import compile_time
    _need_nvcc_and_gxx()
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "ok.cu").write_text(
        "__global__ void twice(float *x) { x[threadIdx.x] *= 2.0f; }\n"
        "void run(float *d) { twice<<<1, 32>>>(d); }\n")
    (tmp_path / "src" / "part.cu").write_text("int f() { return undeclared_thing; }\n")
    out = tmp_path / "r.json"
    assert compile_time.main(["--nvcc-ratio", str(tmp_path / "src"), "--json", str(out)]) == 0
    rows = {Path(r["file"]).name: r for r in json.loads(out.read_text())["rows"]}
    assert rows["part.cu"]["skipped"].startswith("nvcc failed")
    ok = rows["ok.cu"]
    assert ok["nvcc"]["cpu"] > 0 and ok["cpuify"]["cpu"] > 0
    assert ok["ratio"] == pytest.approx(ok["cpuify"]["cpu"] / ok["nvcc"]["cpu"])
    printed = capsys.readouterr().out
    assert "ok.cu" in printed and "skipped" in printed and "1 files: geomean" in printed
