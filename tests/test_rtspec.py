"""Run-time specialization of `cpuify nvcc` programs (nvcc/rtspec.py, runtime/cudart_rtspec.c):
a kernel launched with a block shape known only when the program runs is compiled for that
shape in the background, cached, and its later launches (and the next run's) use that code.

The program: `scale` (a shared-memory reversal within each block: the block size matters to
the result), `poly` (reads a `__constant__` array: a local symbol of the program, which the
runtime fills in the loaded code) and `last` (printf: a function of the statically linked
runtime), the block size from the command line; it checks its own results and prints
PASSED."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from test_programs import _have_nvcc

pytestmark = pytest.mark.skipif(not _have_nvcc(), reason="nvcc wheel (nvidia-cuda-nvcc) or g++ missing")

SOURCE = r"""
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>
__constant__ float coef[3];
__global__ void scale(float *a, const float *b, int n, float s) {
    __shared__ float t[1024];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    t[threadIdx.x] = i < n ? b[i] : 0.0f;
    __syncthreads();
    if (i < n) a[i] = s * t[blockDim.x - 1 - threadIdx.x] + 1.0f;
}
__global__ void poly(float *a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { float x = a[i]; a[i] = coef[0] + x * (coef[1] + x * coef[2]); }
}
__global__ void last(int r) {
    if (threadIdx.x == blockDim.x - 1) printf("round %d: thread %d of %d\n", r, threadIdx.x, blockDim.x);
}
int main(int argc, char **argv) {
    int bs = atoi(argv[1]), reps = atoi(argv[2]), n = 100000;
    float *a, *b, c[3] = {1.0f, 0.5f, 0.25f};
    cudaMallocManaged(&a, n * sizeof(float));
    cudaMallocManaged(&b, n * sizeof(float));
    cudaMemcpyToSymbol(coef, c, sizeof c);
    for (int i = 0; i < n; i++) b[i] = (float)(i % 1000);
    for (int r = 0; r < reps; r++) {
        scale<<<(n + bs - 1) / bs, bs>>>(a, b, n, 2.0f);
        poly<<<(n + bs - 1) / bs, bs>>>(a, n);
        last<<<1, bs>>>(r);
    }
    cudaDeviceSynchronize();
    int bad = 0;
    for (int i = 0; i < n; i++) {
        int src = i / bs * bs + bs - 1 - i % bs;
        float x = 2.0f * (src < n ? (float)(src % 1000) : 0.0f) + 1.0f;
        x = 1.0f + x * (0.5f + x * 0.25f);
        if (a[i] != x) bad++;
    }
    printf(bad ? "FAILED %d\n" : "PASSED\n", bad);
    return bad != 0;
}
"""


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    d = tmp_path_factory.mktemp("rtspec")
    env = dict(os.environ, CPUIFY_CACHE_DIR=str(d / "cache"))
    for k in ("CPUIFY_NO_CACHE", "CPUIFY_SPECIALIZE", "CPUIFY_RUNTIME_SPECIALIZE"):
        env.pop(k, None)
    (d / "prog.cu").write_text(SOURCE)
    r = subprocess.run([sys.executable, "-m", "cpuify.cli.main", "nvcc", "-O2", "prog.cu", "-o", "prog"],
                       cwd=d, env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return d, env


def _run(built: tuple[Path, dict[str, str]], bs: int, reps: int, exe: str = "prog", **extra: str
         ) -> subprocess.CompletedProcess[str]:
    d, env = built
    r = subprocess.run([str(d / exe), str(bs), str(reps)], cwd=d, capture_output=True, text=True,
                       env=dict(env, CPUIFY_PROFILE="1", **extra), timeout=600)
    assert r.returncode == 0 and "PASSED" in r.stdout, r.stdout + r.stderr
    return r


def _specialized(r: subprocess.CompletedProcess[str], kernel: str) -> int:
    """How many of the kernel's launches ran code specialized for their block shape (the
    profile's count; 0 when it names none)."""
    line = next(ln for ln in (r.stdout + r.stderr).splitlines() if f" {kernel}(" in ln)
    m = re.search(r"\((\d+) specialized for their block shape", line)
    return int(m.group(1)) if m else 0


def _files(built: tuple[Path, dict[str, str]], pattern: str) -> list[Path]:
    return sorted((built[0] / "cache" / "rtspec").glob(pattern))


def test_a_shape_from_the_command_line_is_compiled_at_run_time(built):
    """The first launch of block size 96 runs the generic code and starts the compile
    (after 0 ms; waited for); the other four run the code for 96 threads, `poly` and `last`
    too, with the __constant__ array and printf of the program."""
    r = _run(built, 96, 5, CPUIFY_RUNTIME_SPECIALIZE_AFTER_MS="0", CPUIFY_RUNTIME_SPECIALIZE_WAIT="1")
    assert (_specialized(r, "scale"), _specialized(r, "poly"), _specialized(r, "last")) == (4, 4, 4)
    assert [ln for ln in r.stdout.splitlines() if ln.startswith("round")] == \
        [f"round {i}: thread 95 of 96" for i in range(5)]
    assert sorted(p.name.split("_", 1)[1] for p in _files(built, "*_96x1x1.so")) == \
        ["k0_96x1x1.so", "k1_96x1x1.so", "k2_96x1x1.so"]
    assert "cpuify:" not in r.stderr


def test_the_next_run_uses_the_cached_code_from_the_first_launch(built):
    _run(built, 96, 1, CPUIFY_RUNTIME_SPECIALIZE_AFTER_MS="0", CPUIFY_RUNTIME_SPECIALIZE_WAIT="1")
    r = _run(built, 96, 3)
    assert _specialized(r, "scale") == 3


def test_switched_off(built):
    r = _run(built, 96, 3, CPUIFY_RUNTIME_SPECIALIZE="0")
    assert _specialized(r, "scale") == 0
    r = _run(built, 72, 3, CPUIFY_RUNTIME_SPECIALIZE_WAIT="1")    # below the 250 ms default
    assert _specialized(r, "scale") == 0 and not _files(built, "*_72x1x1.*")


def test_a_failed_compile_is_reported_once_and_the_generic_code_runs(built):
    """The module's PTX gone from the cache: the compile fails, the runtime says so once
    per kernel (naming it, the shape and the log), every launch stays generic and correct."""
    ptx = _files(built, "*.ptx")
    assert len(ptx) == 1
    hidden = ptx[0].with_name("hidden")
    ptx[0].rename(hidden)
    try:
        r = _run(built, 80, 4, CPUIFY_RUNTIME_SPECIALIZE_AFTER_MS="0", CPUIFY_RUNTIME_SPECIALIZE_WAIT="1")
    finally:
        hidden.rename(ptx[0])
    said = [ln for ln in r.stderr.splitlines() if "at run time failed" in ln]
    scale = [ln for ln in said if "kernel 'scale(float*, float const*, int, float)'" in ln]
    assert len(said) == 3 and len(scale) == 1      # (and poly's and last's)
    assert "blocks of (80, 1, 1) at run time failed (" in scale[0] and "k0_80x1x1.log" in scale[0]
    assert scale[0].endswith("; the generic code runs")
    assert _specialized(r, "scale") == 0


def test_code_of_another_toolchain_is_refused(tmp_path):
    """A program built by another cpuify (its module hash differs from this one's) never
    gets code compiled by this one."""
    from cpuify.nvcc import rtspec
    (tmp_path / "m.ptx").write_text(".version 8.0\n.target sm_75\n.address_size 64\n")
    out = rtspec.specialize(str(tmp_path / "m.ptx"), str(tmp_path / ("0" * 32)), "k", 0, (32, 1, 1), ())
    assert Path(out).name == f"{'0' * 32}_k0_32x1x1.failed"
    assert Path(out).read_text().startswith("refused: the program was built by another version")


def test_no_descriptor_when_off_or_without_a_cache(monkeypatch, tmp_path):
    from cpuify.nvcc import rtspec
    monkeypatch.setenv("CPUIFY_CACHE_DIR", str(tmp_path / "c"))
    got = rtspec.descriptor("// ptx\n", ("a", "b{x=1,y=2}"))
    assert got is not None
    python, where, ptx, prefix, passes = got
    assert Path(ptx).read_text() == "// ptx\n" and passes == "a;b{x=1,y=2}"
    assert (Path(where) / "cpuify" / "nvcc" / "rtspec.py").is_file() and python == sys.executable
    for var in ("CPUIFY_RUNTIME_SPECIALIZE", "CPUIFY_SPECIALIZE", "CPUIFY_NO_CACHE"):
        monkeypatch.setenv(var, "0" if var != "CPUIFY_NO_CACHE" else "1")
        assert rtspec.descriptor("// ptx\n", ()) is None
        monkeypatch.delenv(var)


def test_separate_compilation(tmp_path):
    """-rdc: the kernel calls a device function of another file and reads a __constant__
    of its own; the device link's module is specialized at run time."""
    (tmp_path / "a.cu").write_text(r"""
#include <cstdio>
#include <cstdlib>
__device__ float twice(float x);
__constant__ float off[1];
__global__ void k(float *a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) a[i] = twice(a[i]) + off[0];
}
int main(int argc, char **argv) {
    int bs = atoi(argv[1]), n = 10000, bad = 0;
    float *a, o = 0.5f;
    cudaMallocManaged(&a, n * sizeof(float));
    cudaMemcpyToSymbol(off, &o, sizeof o);
    for (int i = 0; i < n; i++) a[i] = (float)i;
    for (int r = 0; r < 3; r++) k<<<(n + bs - 1) / bs, bs>>>(a, n);
    cudaDeviceSynchronize();
    for (int i = 0; i < n; i++) bad += a[i] != 8.0f * i + 3.5f;
    printf(bad ? "FAILED\n" : "PASSED\n");
    return bad;
}
""")
    (tmp_path / "b.cu").write_text("__device__ float twice(float x) { return 2.0f * x; }\n")
    env = dict(os.environ, CPUIFY_CACHE_DIR=str(tmp_path / "cache"))
    for k in ("CPUIFY_NO_CACHE", "CPUIFY_SPECIALIZE", "CPUIFY_RUNTIME_SPECIALIZE"):
        env.pop(k, None)
    cli = [sys.executable, "-m", "cpuify.cli.main", "nvcc"]
    for cmd in (["-rdc=true", "-c", "a.cu", "-o", "a.o"], ["-rdc=true", "-c", "b.cu", "-o", "b.o"],
                ["a.o", "b.o", "-o", "ab"]):
        r = subprocess.run(cli + cmd, cwd=tmp_path, env=env, capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
    r = _run((tmp_path, env), 96, 0, CPUIFY_RUNTIME_SPECIALIZE_AFTER_MS="0",
             CPUIFY_RUNTIME_SPECIALIZE_WAIT="1", exe="ab")
    assert _specialized(r, "k") == 2
