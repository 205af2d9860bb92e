"""Legacy CUDA spellings nvcc 13 rejects, rewritten in copies (nvcc/legacy_source.py):
`__global__` with `__device__`/`__host__`, in the source and in headers reached by quoted
includes (next to the includer, in a subdirectory) and angle-bracket ones (through -I)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from cpuify.nvcc import legacy_source

CPUIFY = [sys.executable, "-m", "cpuify.cli.main"]


def test_rewrite_drops_the_extra_qualifier_in_every_order():
    assert legacy_source.rewrite("__global__ __device__ void f();") == "__global__ void f();"
    assert legacy_source.rewrite("__device__  __global__ void f();") == "__global__ void f();"
    # line breaks stay (diagnostics keep the original line numbers)
    assert legacy_source.rewrite("__global__\n__host__ void f();") == "__global__\n void f();"
    assert legacy_source.rewrite("__device__\n\n__global__ void f();") == "\n\n__global__ void f();"
    assert legacy_source.rewrite("__host__ __device__ __global__ void f();") == "__global__ void f();"
    assert legacy_source.rewrite("__global__ __host__ __device__ void f();") == "__global__ void f();"
    # nothing to do: None (the file is compiled as it is)
    assert legacy_source.rewrite("__host__ __device__ int g(); __global__ void f();") is None
    assert legacy_source.rewrite("__global__ __device_builtin__ x;") is None
    assert legacy_source.rewrite("my__global__ __device__ x;") is None


def test_prepare_copies_only_what_changes_and_mirrors_include_dirs(tmp_path):
    (tmp_path / "app" / "kern").mkdir(parents=True)
    (tmp_path / "inc").mkdir()
    main = tmp_path / "app" / "main.cu"
    main.write_text('#include "kern/a.cuh"\n#include <b.cuh>\n#include "plain.h"\n')
    (tmp_path / "app" / "kern" / "a.cuh").write_text("__global__ __device__ void a() {}\n")
    (tmp_path / "inc" / "b.cuh").write_text("__host__ __global__ void b() {}\n")
    (tmp_path / "app" / "plain.h").write_text("int plain;\n")
    work = tmp_path / "work"
    work.mkdir()
    inc = f"-I{tmp_path / 'inc'}"
    assert legacy_source.prepare(str(tmp_path / "app" / "plain.h"), [inc], str(work)) is None
    r = legacy_source.prepare(str(main), ["-DX", inc], str(work))
    assert r is not None
    originals = set(r.originals.values())
    assert originals == {str(main), str(tmp_path / "app" / "kern" / "a.cuh"), str(tmp_path / "inc" / "b.cuh")}
    copy_a = Path(r.source).parent / "kern" / "a.cuh"
    assert copy_a.read_text() == f'#line 1 "{tmp_path / "app" / "kern" / "a.cuh"}"\n__global__ void a() {{}}\n'
    # the -I directory's mirror comes right before it; other options stay as they are
    opts = r.include_options(["-DX", inc])
    assert opts[0] == "-DX" and opts[2] == inc and opts[1].startswith("-I")
    assert (Path(opts[1][2:]) / "b.cuh").read_text().endswith("__global__ void b() {}\n")
    assert legacy_source.restore_names(f"x: {copy_a}", r) == f"x: {tmp_path / 'app' / 'kern' / 'a.cuh'}"


MAIN = r'''#include <cstdio>
#include "kern/scale.cuh"
#include <offset.cuh>
#include "plain.h"

__device__ __global__ void square(int *p) { p[threadIdx.x] *= p[threadIdx.x]; }

int main() {
    int h[4] = {1, 2, 3, 4}, *d;
    cudaMalloc(&d, sizeof h);
    cudaMemcpy(d, h, sizeof h, cudaMemcpyHostToDevice);
    scale<<<1, 4>>>(d, FACTOR);
    offset<<<1, 4>>>(d);
    square<<<1, 4>>>(d);
    cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
    printf("%d %d %d %d\n%s\n", h[0], h[1], h[2], h[3], __FILE__);
    return cudaGetLastError() != cudaSuccess;
}
'''


@pytest.fixture
def legacy_program(tmp_path):  # type: ignore[no-untyped-def]
    app = tmp_path / "app"
    (app / "kern").mkdir(parents=True)
    (tmp_path / "inc").mkdir()
    (app / "main.cu").write_text(MAIN)
    (app / "plain.h").write_text("#define FACTOR 3\n")
    # a quoted include next to the copied header, which is not copied (-iquote finds it)
    (app / "kern" / "scale.cuh").write_text(
        '#include "helper.h"\n__global__ __device__ void scale(int *p, int k) { p[threadIdx.x] = times(p[threadIdx.x], k); }\n'
        "#ifdef BREAK\nint broken = ;\n#endif\n")
    (app / "kern" / "helper.h").write_text("__device__ int times(int a, int b) { return a * b; }\n")
    (tmp_path / "inc" / "offset.cuh").write_text("__global__\n__host__ void offset(int *p) { p[threadIdx.x] += 1; }\n")
    return app


def _nvcc(app: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CPUIFY, "nvcc", f"-I{app.parent / 'inc'}", *args], cwd=app,
                          capture_output=True, text=True, env={**os.environ, **(env or {})})


def test_legacy_qualifiers_build_and_run(legacy_program):
    app = legacy_program
    r = _nvcc(app, "main.cu", "-o", "main", "-MD")
    assert r.returncode == 0, r.stderr
    out = subprocess.run([str(app / "main")], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    # (x * 3 + 1)^2 for x = 1..4
    assert out.stdout.splitlines() == ["16 49 100 169", str(app / "main.cu")]
    deps = (app / "main.d").read_text()
    assert str(app / "kern" / "scale.cuh") in deps and str(app.parent / "inc" / "offset.cuh") in deps
    assert "legacy-src" not in deps


def test_an_error_in_a_rewritten_header_names_the_original(legacy_program):
    r = _nvcc(legacy_program, "main.cu", "-o", "main", "-DBREAK")
    assert r.returncode != 0
    assert f"{legacy_program / 'kern' / 'scale.cuh'}(4): error" in r.stderr, r.stderr
    assert "legacy-src" not in r.stderr, r.stderr


def test_ptx_of_legacy_code_and_the_layer_switched_off(legacy_program):
    app = legacy_program
    r = _nvcc(app, "-ptx", "main.cu")
    assert r.returncode == 0, r.stderr
    ptx = (app / "main.ptx").read_text()
    assert all(f".entry _Z{len(n)}{n}" in ptx for n in ("square", "scale", "offset"))
    off = _nvcc(app, "main.cu", "-o", "main", env={"CPUIFY_LEGACY": "0"})
    assert off.returncode != 0 and "illegal combination of memory qualifiers" in off.stderr


def test_host_functions_called_from_device_are_read_from_nvccs_errors():
    errors = ('fft.cu(79): error: calling a __host__ function("operator +(    ::float2,     ::float2)") '
              'from a __device__ function("GPU_FFT2") is not allowed\n'
              'x.cu(3): error: calling a __host__ function("ns::lerp<float> (float, float)") from a '
              '__global__ function("k") is not allowed\n'
              'y.cu(9): warning: calling a __host__ function("h") from a __host__ __device__ '
              'function("hd") is not allowed\n')
    assert legacy_source.host_functions_called_from_device(errors) == {"operator +", "lerp"}


def test_mark_device_marks_definitions_not_calls():
    text = ("inline float2 operator+( float2 a, float2 b ) { return a; }\n"
            "template <typename T>\ninline T lerp(T a, T b) { return a + b; }\n"
            "int f() { return lerp(1, 2); }\n"
            "  x = lerp(a, b);\n"
            "static __device__ float lerp(float a, float b);\n"
            "float2 operator-(float2 a, float2 b);\n")
    got = legacy_source.mark_device(text, {"operator +", "lerp"})
    assert got.splitlines() == [
        "__host__ __device__ inline float2 operator+( float2 a, float2 b ) { return a; }",
        "template <typename T>", "__host__ __device__ inline T lerp(T a, T b) { return a + b; }",
        "int f() { return lerp(1, 2); }",
        "  x = lerp(a, b);",
        "static __device__ float lerp(float a, float b);",
        "float2 operator-(float2 a, float2 b);"]


HOST_CALLS = r'''#include <cstdio>
#include "vec.h"
__device__ float2 twice(float2 a) { return a + a; }
__global__ void k(const float2 *in, float2 *out, float s) {
    out[threadIdx.x] = twice(in[threadIdx.x]) * s + scale(in[0], 0.5f);
}
int main() {
    float2 h[4] = {{1, 2}, {3, 4}, {5, 6}, {7, 8}}, *in, *out;
    float2 host = h[1] + h[2];                 // still a host function too
    cudaMalloc(&in, sizeof h);
    cudaMalloc(&out, sizeof h);
    cudaMemcpy(in, h, sizeof h, cudaMemcpyHostToDevice);
    k<<<1, 4>>>(in, out, 3.0f);
    cudaMemcpy(h, out, sizeof h, cudaMemcpyDeviceToHost);
    for (int i = 0; i < 4; i++) printf("%g %g\n", h[i].x, h[i].y);
    printf("%g %g\n", host.x, host.y);
    return 0;
}
'''
VEC = r'''inline float2 operator+(float2 a, float2 b) { return make_float2(a.x + b.x, a.y + b.y); }
inline float2 operator*(float2 a, float s) { return make_float2(a.x * s, a.y * s); }
static inline float2 scale(float2 a, float s) { return make_float2(a.x * s, a.y * s); }
'''


def test_functions_without_device_called_from_kernels_build(tmp_path):
    (tmp_path / "main.cu").write_text(HOST_CALLS)
    (tmp_path / "vec.h").write_text(VEC)
    r = subprocess.run([*CPUIFY, "nvcc", "main.cu", "-o", "main"], cwd=tmp_path, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "calling a __host__ function" not in r.stderr
    out = subprocess.run([str(tmp_path / "main")], capture_output=True, text=True, timeout=60)
    # out[i] = (in[i] + in[i]) * 3 + in[0] * 0.5; the host sum (3, 4) + (5, 6)
    rows = [tuple(map(float, line.split())) for line in out.stdout.splitlines()]
    assert rows == [(6.5, 13.0), (18.5, 25.0), (30.5, 37.0), (42.5, 49.0), (8.0, 10.0)]
    # without the legacy layer nvcc's error stands
    off = subprocess.run([*CPUIFY, "nvcc", "main.cu", "-o", "main2"], cwd=tmp_path, capture_output=True,
                         text=True, env={**os.environ, "CPUIFY_LEGACY": "0"})
    assert off.returncode != 0 and "calling a __host__ function" in off.stderr


DEVICE_SYNC = r'''
__global__ void child(int *v) { v[threadIdx.x] += 1; }
__global__ void parent(int *v) {
    if (threadIdx.x == 0) { child<<<1, 32>>>(v); cudaDeviceSynchronize(); }
}
int main() { return 0; }
'''


def test_device_side_cudaDeviceSynchronize_is_explained(tmp_path):
    """A parent kernel waiting for its children (CUDA <= 11; Professional CUDA C Programming's
    nestedReduce): nvcc 13 refuses it; cpuify adds why it cannot provide it and what to do."""
    assert legacy_source.removed_api_note('calling a __host__ function("lerp") from a '
                                          '__global__ function("k") is not allowed') == ""
    (tmp_path / "nested.cu").write_text(DEVICE_SYNC)
    r = subprocess.run([*CPUIFY, "nvcc", "-rdc=true", "nested.cu", "-o", "nested", "-lcudadevrt"],
                       cwd=tmp_path, capture_output=True, text=True)
    assert r.returncode != 0
    assert "'parent' calls cudaDeviceSynchronize() in device code" in r.stderr
    assert "cudaStreamTailLaunch" in r.stderr and "Traceback" not in r.stderr
