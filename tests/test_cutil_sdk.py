"""The GPU Computing SDK's build environment (`cpuify cuda-sdk`): cutil.h's functions and
macros, cutil_math.h and the SDK's make rules (common.mk), through programs of our own built
with `cpuify nvcc` and with an SDK-style Makefile.  Each result is checked against what the
test computes itself (NumPy, Python's own parsing of the files the program writes, the
elapsed time measured around the program)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

CPUIFY = [sys.executable, "-m", "cpuify.cli.main"]
SRC = str(Path(__file__).resolve().parent.parent / "src")


def _have_toolchain() -> bool:
    try:
        from cpuify.nvcc.toolkit import find_toolkit
        find_toolkit()
    except Exception:  # noqa: BLE001 (any failure to find the toolkit skips these tests)
        return False
    return all(shutil.which(t) for t in ("g++", "gcc", "c++", "make", "ar"))


pytestmark = pytest.mark.skipif(not _have_toolchain(),
                                reason="nvcc wheel (nvidia-cuda-nvcc), g++ or make missing")


@pytest.fixture(scope="module")
def env() -> dict[str, str]:
    e = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}
    for var in ("CUDA_INSTALL_PATH", "NVIDIA_COMPUTE_SDK_LOCATION", "NVCC", "BINDIR", "ROOTDIR",
                "BINSUBDIR", "NVCC_PREPEND_FLAGS", "NVCC_APPEND_FLAGS"):
        e.pop(var, None)
    return e


def _run(cmd: list[str] | str, cwd: Path, env: dict[str, str], ok: bool = True,
         **kw) -> subprocess.CompletedProcess[str]:  # type: ignore[no-untyped-def]
    r = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600,
                       shell=isinstance(cmd, str), stdin=subprocess.DEVNULL, check=False, **kw)
    if ok:
        assert r.returncode == 0, f"{cmd}\n{r.stdout}\n{r.stderr}"
    return r


@pytest.fixture(scope="module")
def sdk(env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("sdk")
    home = Path(_run([*CPUIFY, "cuda-home"], d, env).stdout.strip())
    path = Path(_run([*CPUIFY, "cuda-sdk"], d, env).stdout.strip())
    assert path == home / "sdk"
    return path


def test_sdk_layout(sdk: Path) -> None:
    for rel in ("C/common/common.mk", "C/common/inc/cutil.h", "C/common/inc/cutil_inline.h",
                "C/common/inc/cutil_math.h", "C/lib/libcutil_x86_64.a", "C/lib/libcutil.a",
                "C/lib/libcutilD_x86_64.a", "C/src", "shared/inc/shrUtils.h",
                "shared/inc/shrQATest.h", "shared/lib/libshrutil_x86_64.a"):
        assert (sdk / rel).exists(), rel
    rules = (sdk / "C/common/common.mk").read_text()
    # the rules name this SDK and its cuda-home by absolute path: no placeholders left
    assert "@CPUIFY" not in rules
    # (the toolkit directory's own name: `sdk` is reached through its stable path)
    assert f"CUDA_INSTALL_PATH ?= {sdk.resolve().parent}" in rules
    symbols = subprocess.run(["nm", "--defined-only", str(sdk / "C/lib/libcutil_x86_64.a")],
                             capture_output=True, text=True, check=False).stdout
    for name in ("cutCreateTimer", "cutGetTimerValue", "cutComparef", "cutReadFilef",
                 "cutWriteFilef", "cutCheckCmdLineFlag", "cutGetCmdLineArgumenti",
                 "cutLoadPGMub", "cutFindFilePath"):
        assert f" T {name}\n" in symbols, name        # C linkage, as the SDK's


def test_cutil_header_compiles_as_c(sdk: Path, tmp_path: Path, env: dict[str, str]) -> None:
    (tmp_path / "t.c").write_text("#include <cutil.h>\n"
                                  "int main(void) { unsigned t; float *d = 0; unsigned n = 0;\n"
                                  "  return !(cutCreateTimer(&t) && !cutReadFilef(\"/nonexistent\", &d, &n, false)); }\n")
    _run(["gcc", "-Wall", "-Werror", f"-I{sdk}/C/common/inc", "t.c", f"-L{sdk}/C/lib",
          "-lcutil_x86_64", "-lstdc++", "-lm", "-o", "t"], tmp_path, env)
    r = _run(["./t"], tmp_path, env)
    assert "cannot open '/nonexistent'" in r.stderr


PROGRAM = r"""
#include <cutil_inline.h>
#include <cutil_math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

__global__ void wave(float *out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = sinf(0.01f * i) * 3.0f + 0.5f;
}

/* vector arithmetic of cutil_math.h on the device: per element, the reflection of
   (x, y, z) + 1 about the normalized (1, 2, 2), its length and a clamp */
__global__ void vectors(const float3 *in, float4 *out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float3 v = in[i] + 1.0f;
        float3 r = reflect(v, normalize(make_float3(1.0f, 2.0f, 2.0f)));
        out[i] = make_float4(r, length(clamp(v, -2.0f, 2.0f)));
    }
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "";
    if (!strcmp(mode, "timers")) {
        unsigned int t = 0, u = 0;
        CUT_SAFE_CALL(cutCreateTimer(&t));
        CUT_SAFE_CALL(cutCreateTimer(&u));
        printf("distinct %d\n", t != u);
        printf("fresh %g %g\n", cutGetTimerValue(t), cutGetAverageTimerValue(t));
        CUT_SAFE_CALL(cutStartTimer(t));
        usleep(30000);
        printf("running %g\n", cutGetTimerValue(t));
        CUT_SAFE_CALL(cutStopTimer(t));
        float one = cutGetTimerValue(t);
        usleep(20000);                                   /* stopped: not counted */
        printf("stopped %g %g\n", one, cutGetTimerValue(t));
        CUT_SAFE_CALL(cutStartTimer(t));
        usleep(10000);
        CUT_SAFE_CALL(cutStopTimer(t));
        printf("two %g %g\n", cutGetTimerValue(t), cutGetAverageTimerValue(t));
        CUT_SAFE_CALL(cutResetTimer(t));
        printf("reset %g %g\n", cutGetTimerValue(t), cutGetAverageTimerValue(t));
        CUT_SAFE_CALL(cutDeleteTimer(u));
        printf("deleted %d %d\n", (int)cutStartTimer(u), (int)cutDeleteTimer(u));
        printf("never %d\n", (int)cutStopTimer(0));
        return 0;
    }
    if (!strcmp(mode, "cmdline")) {
        const char **args = (const char **)argv;
        int n = -1; float f = -1; char *s = 0; char **list = 0; unsigned len = 0;
        printf("flag %d %d %d\n", cutCheckCmdLineFlag(argc, args, "verbose"),
               cutCheckCmdLineFlag(argc, args, "quiet"), cutCheckCmdLineFlag(argc, args, "ver"));
        int found = cutGetCmdLineArgumenti(argc, args, "n", &n);
        printf("int %d %d\n", found, n);
        found = cutGetCmdLineArgumentf(argc, args, "scale", &f);
        printf("float %d %g\n", found, f);
        found = cutGetCmdLineArgumentstr(argc, args, "name", &s);
        printf("str %d %s\n", found, s);
        found = cutGetCmdLineArgumentListstr(argc, args, "list", &list, &len);
        printf("list %d %u", found, len);
        for (unsigned i = 0; i < len; i++) printf(" %s", list[i]);
        printf("\n");
        n = 7;
        found = cutGetCmdLineArgumenti(argc, args, "m", &n);
        printf("missing %d %d\n", found, n);
        cutGetCmdLineArgumenti(argc, args, "bad", &n);     /* --bad=x: ends the program */
        printf("not reached\n");
        return 0;
    }
    if (!strcmp(mode, "files")) {          /* files DIR: a kernel's result through the files */
        const int n = 1000;
        float *d = 0, h[n];
        CUDA_SAFE_CALL(cudaMalloc((void **)&d, n * sizeof(float)));
        wave<<<(n + 127) / 128, 128>>>(d, n);
        CUT_CHECK_ERROR("wave failed");
        CUDA_SAFE_CALL(cudaMemcpy(h, d, n * sizeof(float), cudaMemcpyDeviceToHost));
        char path[1024];
        snprintf(path, sizeof path, "%s/wave.txt", argv[2]);
        CUT_SAFE_CALL(cutWriteFilef(path, h, n, 0.0f));
        snprintf(path, sizeof path, "%s/coarse.txt", argv[2]);
        CUT_SAFE_CALL(cutWriteFilef(path, h, n, 0.01f));
        float *back = 0; unsigned len = 0;
        CUT_SAFE_CALL(cutReadFilef(path, &back, &len));
        printf("coarse %u %d %d\n", len, (int)cutComparefe(h, back, n, 0.01f),
               (int)cutComparef(h, back, n));
        /* the test's file: numbers written by Python */
        snprintf(path, sizeof path, "%s/input.txt", argv[2]);
        float *in = 0; len = 0;
        CUT_SAFE_CALL(cutReadFilef(path, &in, &len));
        double sum = 0;
        for (unsigned i = 0; i < len; i++) sum += in[i];
        printf("input %u %.6f\n", len, sum);
        float fixed[3];
        float *fp = fixed; unsigned three = 3;
        printf("wrong_count %d\n", (int)cutReadFilef(path, &fp, &three));
        int *ints = 0;
        snprintf(path, sizeof path, "%s/ints.txt", argv[2]);
        CUT_SAFE_CALL(cutReadFilei(path, &ints, &len));
        printf("ints %u %d %d\n", len, ints[0], ints[len - 1]);
        snprintf(path, sizeof path, "%s/notnumbers.txt", argv[2]);
        printf("not_numbers %d\n", (int)cutReadFilei(path, &ints, &len));
        cutFree(back); cutFree(in); cutFree(ints);
        /* an image through PGM: the test reads it back */
        unsigned char img[6 * 4];
        for (int i = 0; i < 24; i++) img[i] = (unsigned char)(i * 10);
        snprintf(path, sizeof path, "%s/img.pgm", argv[2]);
        CUT_SAFE_CALL(cutSavePGMub(path, img, 6, 4));
        unsigned char *loaded = 0; unsigned w = 0, hh = 0;
        CUT_SAFE_CALL(cutLoadPGMub(path, &loaded, &w, &hh));
        printf("pgm %u %u %d\n", w, hh, (int)cutCompareub(img, loaded, 24));
        snprintf(path, sizeof path, "%s/rgb.ppm", argv[2]);
        unsigned char *rgba = 0;
        CUT_SAFE_CALL(cutLoadPPM4ub(path, &rgba, &w, &hh));
        printf("ppm4 %u %u %d %d %d %d %d\n", w, hh, rgba[4], rgba[5], rgba[6], rgba[7],
               rgba[4 * (w * hh) - 4]);
        char *found = cutFindFilePath("img.pgm", argv[0]);
        printf("find %s %s\n", found ? "yes" : "no", cutFindFilePath("absent.pgm", argv[0]) ? "yes" : "no");
        cutFree(found);
        CUDA_SAFE_CALL(cudaFree(d));
        return 0;
    }
    if (!strcmp(mode, "compare")) {
        float a[5] = {1, 2, 3, 4, 5}, b[5] = {1, 2, 3, 4, 5.05f};
        unsigned char u[4] = {1, 2, 3, 4}, v[4] = {1, 2, 3, 9};
        int i1[3] = {1, 2, 3}, i2[3] = {1, 2, 3};
        printf("f %d %d\n", (int)cutComparef(a, a, 5), (int)cutComparef(a, b, 5));
        printf("fe %d %d\n", (int)cutComparefe(a, b, 5, 0.1f), (int)cutComparefe(a, b, 5, 0.01f));
        printf("fet %d %d\n", (int)cutComparefet(a, b, 5, 0.01f, 0.25f),
               (int)cutComparefet(a, b, 5, 0.01f, 0.1f));
        printf("l2 %d %d\n", (int)cutCompareL2fe(a, b, 5, 0.01f), (int)cutCompareL2fe(a, b, 5, 0.005f));
        printf("ub %d %d %d\n", (int)cutCompareub(u, u, 4), (int)cutCompareub(u, v, 4),
               (int)cutCompareube(u, v, 4, 5));
        printf("i %d\n", (int)cutComparei(i1, i2, 3));
        float nan_[1] = {0.0f / 0.0f};
        printf("nan %d\n", (int)cutComparefe(a, nan_, 1, 1.0f));
        return 0;
    }
    if (!strcmp(mode, "vectors")) {
        const int n = 64;
        float3 h_in[n]; float4 h_out[n];
        for (int i = 0; i < n; i++) h_in[i] = make_float3(i * 0.25f - 8, 3 - i * 0.125f, i % 5 - 2.0f);
        float3 *d_in; float4 *d_out;
        cutilSafeCall(cudaMalloc((void **)&d_in, sizeof h_in));
        cutilSafeCall(cudaMalloc((void **)&d_out, sizeof h_out));
        cutilSafeCall(cudaMemcpy(d_in, h_in, sizeof h_in, cudaMemcpyHostToDevice));
        vectors<<<2, 32>>>(d_in, d_out, n);
        cutilCheckMsg("vectors failed");
        cutilSafeCall(cudaMemcpy(h_out, d_out, sizeof h_out, cudaMemcpyDeviceToHost));
        for (int i = 0; i < n; i++) printf("%.6f %.6f %.6f %.6f\n", h_out[i].x, h_out[i].y, h_out[i].z, h_out[i].w);
        return 0;
    }
    /* failures: each ends the program with a message naming this file and line */
    if (!strcmp(mode, "cuda_safe_call")) {
        int x;
        CUDA_SAFE_CALL(cudaMemcpy(&x, (void *)16, sizeof x, (cudaMemcpyKind)99));
    }
    if (!strcmp(mode, "cut_safe_call")) CUT_SAFE_CALL(cutStopTimer(12345));
    if (!strcmp(mode, "safe_malloc")) {
        void *p;
        CUT_SAFE_MALLOC(p = malloc((size_t)-1));
    }
    if (!strcmp(mode, "cutil_safe_call")) cutilSafeCall(cudaSetDevice(4096));
    if (!strcmp(mode, "check_error")) {
        wave<<<1, 4096>>>(0, 1);          /* more threads than a block may have */
        CUT_CHECK_ERROR("wave launch");
    }
    if (!strcmp(mode, "device_init")) {
        CUT_DEVICE_INIT(argc, argv);
        printf("initialized\n");
        CUT_EXIT(argc, argv);
    }
    printf("survived %s\n", mode);
    return 0;
}
"""


@pytest.fixture(scope="module")
def program(sdk: Path, env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("cutil")
    (d / "cutil_test.cu").write_text(PROGRAM)
    _run([*CPUIFY, "nvcc", "-O2", f"-I{sdk}/C/common/inc", "cutil_test.cu", "-o", "cutil_test",
          f"-L{sdk}/C/lib", "-lcutil_x86_64"], d, env)
    return d / "cutil_test"


def _lines(stdout: str) -> dict[str, list[str]]:
    return {line.split()[0]: line.split()[1:] for line in stdout.splitlines() if line.strip()}


def test_timers(program: Path, env: dict[str, str]) -> None:
    out = _lines(_run([str(program), "timers"], program.parent, env).stdout)
    assert out["distinct"] == ["1"]
    assert out["fresh"] == ["0", "0"]
    assert 30 <= float(out["running"][0]) < 3000            # milliseconds, while running
    one, still = map(float, out["stopped"])
    assert 30 <= one and still == one                        # a stopped timer does not move
    total, average = map(float, out["two"])
    assert total >= one + 10 and average == pytest.approx(total / 2, rel=1e-5)
    assert out["reset"] == ["0", "0"]
    assert out["deleted"] == ["0", "0"]                      # a deleted timer is no timer
    assert out["never"] == ["0"]


def test_command_line(program: Path, env: dict[str, str]) -> None:
    r = _run([str(program), "cmdline", "--verbose", "-n=42", "--scale=2.5", "--name=abc",
              "--list=x,yy,z", "--bad=x"], program.parent, env, ok=False)
    out = _lines(r.stdout)
    assert out["flag"] == ["1", "0", "0"]                    # "--ver" is not a prefix match
    assert out["int"] == ["1", "42"]
    assert out["float"] == ["1", "2.5"]
    assert out["str"] == ["1", "abc"]
    assert out["list"] == ["1", "3", "x", "yy", "z"]
    assert out["missing"] == ["0", "7"]                      # untouched when absent
    assert r.returncode == 1 and "not reached" not in r.stdout
    assert "--bad=x is not a whole number" in r.stderr


def test_files_and_images(program: Path, env: dict[str, str], tmp_path: Path) -> None:
    values = np.linspace(-3, 7, 37).astype(np.float32)
    (tmp_path / "input.txt").write_text("# written by the test\n" + "\n".join(
        " ".join(f"{v:.9g}" for v in row) for row in np.array_split(values, 5)) + "\n")
    (tmp_path / "ints.txt").write_text("5 -3 17\n 8\n")
    (tmp_path / "notnumbers.txt").write_text("1 2 three\n")
    rgb = bytes(range(2 * 3 * 3))
    (tmp_path / "rgb.ppm").write_bytes(b"P6\n# a comment\n2 3\n255\n" + rgb)
    r = _run([str(program), "files", str(tmp_path)], tmp_path, env)
    out = _lines(r.stdout)
    # the kernel's result, written with all digits, is NumPy's float32 computation
    written = np.loadtxt(tmp_path / "wave.txt", comments="#", dtype=np.float32)
    i = np.arange(1000, dtype=np.float32)
    expected = np.sin(np.float32(0.01) * i) * np.float32(3) + np.float32(0.5)
    np.testing.assert_allclose(written, expected, rtol=0, atol=2e-6)
    assert (tmp_path / "wave.txt").read_text().startswith("# 0\n")
    # with epsilon 0.01: fewer digits, still within it, and not exact
    coarse = np.loadtxt(tmp_path / "coarse.txt", comments="#", dtype=np.float64)
    assert np.abs(coarse - written).max() <= 0.01
    assert out["coarse"] == ["1000", "1", "0"]
    assert out["input"][0] == "37" and float(out["input"][1]) == pytest.approx(float(values.sum()), abs=1e-4)
    assert out["wrong_count"] == ["0"] and "holds 37 values, the array given has 3" in r.stderr
    assert out["ints"] == ["4", "5", "8"]
    assert out["not_numbers"] == ["0"] and "'three' is not a value" in r.stderr
    pgm = (tmp_path / "img.pgm").read_bytes()
    assert pgm.startswith(b"P5\n6 4\n255\n") and pgm[-24:] == bytes(i * 10 for i in range(24))
    assert out["pgm"] == ["6", "4", "1"]
    # PPM4: RGB plus a zero alpha byte per pixel
    assert out["ppm4"] == ["2", "3", "3", "4", "5", "0", str(rgb[-3])]
    assert out["find"] == ["yes", "no"]


def test_comparisons(program: Path, env: dict[str, str]) -> None:
    r = _run([str(program), "compare"], program.parent, env)
    out = _lines(r.stdout)
    assert out["f"] == ["1", "0"]
    assert out["fe"] == ["1", "0"]
    assert out["fet"] == ["1", "0"]          # one of five differs: within 25 %, not within 10 %
    # relative L2 error of (0,0,0,0,0.05) against (1..5): 0.05 / sqrt(55)
    rel = 0.05 / np.sqrt(55.0)
    assert 0.005 < rel < 0.01 and out["l2"] == ["1", "0"]
    assert out["ub"] == ["1", "0", "1"]
    assert out["i"] == ["1"]
    assert out["nan"] == ["0"]
    assert "the first at index 4: reference 5, data 5.05" in r.stderr


def test_vector_math_on_the_device(program: Path, env: dict[str, str]) -> None:
    got = np.loadtxt(_run([str(program), "vectors"], program.parent, env).stdout.splitlines())
    n = 64
    i = np.arange(n, dtype=np.float64)
    v = np.stack([i * 0.25 - 8, 3 - i * 0.125, i % 5 - 2.0], axis=1) + 1.0
    normal = np.array([1.0, 2.0, 2.0]) / 3.0
    reflected = v - 2.0 * normal * (v @ normal)[:, None]
    length = np.linalg.norm(np.clip(v, -2.0, 2.0), axis=1)
    np.testing.assert_allclose(got[:, :3], reflected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got[:, 3], length, rtol=1e-5)


@pytest.mark.parametrize("mode, message", [
    ("cuda_safe_call", "cutil_test.cu({line}) : invalid copy direction for memcpy: cudaMemcpy("),
    ("cut_safe_call", "cutil_test.cu({line}) : cutil call failed: cutStopTimer(12345)"),
    ("cutil_safe_call", "cutil_test.cu({line}) : cudaSafeCall() Runtime API error: invalid device ordinal"),
    ("safe_malloc", "cutil_test.cu({line}) : allocation failed: p = malloc((size_t)-1)"),
    ("check_error", "cutil_test.cu({line}) : wave launch: invalid"),
])
def test_failed_checks_exit_naming_file_and_line(program: Path, env: dict[str, str],
                                                 mode: str, message: str) -> None:
    r = _run([str(program), mode], program.parent, env, ok=False)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "survived" not in r.stdout
    needle = {"cuda_safe_call": "CUDA_SAFE_CALL(cudaMemcpy(&x", "cut_safe_call": "CUT_SAFE_CALL(cutStopTimer(12345)",
              "cutil_safe_call": "cutilSafeCall(cudaSetDevice", "safe_malloc": "CUT_SAFE_MALLOC(p", "check_error": 'CUT_CHECK_ERROR("wave launch")'}[mode]
    line = next(n for n, text in enumerate(PROGRAM.splitlines(), start=1) if needle in text)
    assert message.format(line=line) in r.stderr
    assert "cutStopTimer: 12345 is not a timer" in r.stderr or mode != "cut_safe_call"


def test_device_init_and_exit(program: Path, env: dict[str, str]) -> None:
    r = _run([str(program), "device_init"], program.parent, env)
    assert "Using device 0: " in r.stderr and "initialized" in r.stdout
    assert "Press ENTER" not in r.stdout          # standard input is not a terminal: no wait
    assert "survived" not in r.stdout             # CUT_EXIT ends the program
    r = _run([str(program), "device_init", "--device=3"], program.parent, env, ok=False)
    assert r.returncode == 1 and "--device= names no device" in r.stderr


# ------------------------------------------------------------------------------------------
# the SDK's make rules: a project laid out as in the SDK (<root>/src/<project>, including
# ../../common/common.mk, as the GPGPU-Sim benchmarks do through a link to the SDK's common/)

KERNEL_CU = r"""
#include <cutil_inline.h>
#include <scale_kernel.cu>          /* found through -I. as in the SDK */
extern "C" void cpu_reference(const float *in, float *out, int n);
int main(int argc, char **argv) {
    int n = 1000;
    cutGetCmdLineArgumenti(argc, (const char **)argv, "n", &n);
    float *h = (float *)malloc(n * sizeof(float)), *g = (float *)malloc(n * sizeof(float));
    float *ref = (float *)malloc(n * sizeof(float));
    for (int i = 0; i < n; i++) h[i] = (float)(i % 17) - 8.0f;
    float *d;
    CUDA_SAFE_CALL(cudaMalloc((void **)&d, n * sizeof(float)));
    CUDA_SAFE_CALL(cudaMemcpy(d, h, n * sizeof(float), cudaMemcpyHostToDevice));
    scale<<<(n + 255) / 256, 256>>>(d, n);
    CUT_CHECK_ERROR("scale");
    CUDA_SAFE_CALL(cudaMemcpy(g, d, n * sizeof(float), cudaMemcpyDeviceToHost));
    cpu_reference(h, ref, n);
    printf("n=%d sum=%.1f\n", n, [&] { double s = 0; for (int i = 0; i < n; i++) s += g[i]; return s; }());
    printf("Test %s\n", cutComparef(ref, g, n) ? "PASSED" : "FAILED");
#ifdef _DEBUG
    printf("debug build\n");
#endif
    return 0;
}
"""

SCALE_KERNEL = "__global__ void scale(float *x, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] = 3.0f * x[i] + 1.0f; }\n"
GOLD_CPP = 'extern "C" void cpu_reference(const float *in, float *out, int n) { for (int i = 0; i < n; i++) out[i] = 3.0f * in[i] + 1.0f; }\n'

MAKEFILE = textwrap.dedent("""\
    EXECUTABLE  := scaler
    CUFILES     := scaler.cu
    CU_DEPS     := scale_kernel.cu
    CCFILES     := scaler_gold.cpp
    include ../../common/common.mk
    """)


def _project(root: Path, sdk: Path, makefile: str = MAKEFILE) -> Path:
    proj = root / "src" / "scaler"
    proj.mkdir(parents=True)
    (root / "common").symlink_to(sdk / "C" / "common")
    (proj / "scaler.cu").write_text(KERNEL_CU)
    (proj / "scale_kernel.cu").write_text(SCALE_KERNEL)
    (proj / "scaler_gold.cpp").write_text(GOLD_CPP)
    (proj / "Makefile").write_text(makefile)
    return proj


def test_sdk_makefile_project(sdk: Path, env: dict[str, str], tmp_path: Path) -> None:
    proj = _project(tmp_path, sdk)
    # CUDA_INSTALL_PATH from the environment, as the SDK's users set it (it also defaults to
    # this SDK's cuda-home); make's own CC/CXX in the environment do not matter
    e = {**env, "CUDA_INSTALL_PATH": str(sdk.parent), "CC": "false", "CXX": "false"}
    r = _run(["make", "verbose=1"], proj, e)
    assert f"{sdk.parent}/bin/nvcc" in r.stdout and "-lcutil_x86_64" in r.stdout
    exe = tmp_path / "bin" / "linux" / "release" / "scaler"
    out = _run([str(exe), "--n=777"], proj, env).stdout
    # sum over i < 777 of 3 * ((i % 17) - 8) + 1
    expected = sum(3.0 * ((i % 17) - 8) + 1.0 for i in range(777))
    assert f"n=777 sum={expected:.1f}" in out and "Test PASSED" in out
    assert "debug build" not in out
    # nothing to do the second time; a changed CU_DEPS file rebuilds
    assert "nvcc" not in _run(["make", "verbose=1"], proj, e).stdout
    (proj / "scale_kernel.cu").write_text(SCALE_KERNEL.replace("3.0f * x[i] + 1.0f", "3.0f * x[i] + 2.0f"))
    _run(["make"], proj, e)
    assert "Test FAILED" in _run([str(exe)], proj, env).stdout
    # dbg=1: -D_DEBUG, the debug output directory; BINDIR/BINSUBDIR as the GPGPU-Sim suite sets them
    _run(["make", "dbg=1"], proj, e)
    assert "debug build" in _run([str(tmp_path / "bin/linux/debug/scaler")], proj, env).stdout
    _run(["make", f"BINDIR={tmp_path}/out/", "BINSUBDIR=release"], proj, e)
    assert (tmp_path / "out" / "release" / "scaler").exists()
    _run(["make", "clean"], proj, e)
    assert not exe.exists()


def test_sdk_makefile_refuses_what_cpuify_lacks(sdk: Path, env: dict[str, str], tmp_path: Path) -> None:
    proj = _project(tmp_path, sdk, "USEGLLIB := 1\n" + MAKEFILE)
    r = _run(["make"], proj, env, ok=False)
    assert r.returncode != 0 and "scaler: uses OpenGL" in r.stderr
    r = _run(["make", "CUDA_INSTALL_PATH=/nonexistent"], proj, env, ok=False)
    assert r.returncode != 0 and "has no bin/nvcc" in r.stderr and "cpuify cuda-home" in r.stderr


def test_sdk_makefile_links_curand(sdk: Path, env: dict[str, str], tmp_path: Path) -> None:
    """USECURAND=1 links cpuify's cuRAND host library (it used to stop make)."""
    proj = _project(tmp_path, sdk, "USECURAND := 1\n" + MAKEFILE)
    r = _run(["make", "verbose=1"], proj, env)
    assert "-lcurand" in r.stdout
    assert "Test PASSED" in _run([str(tmp_path / "bin" / "linux" / "release" / "scaler")], proj, env).stdout


def test_a_32_bit_build_is_built_64_bit() -> None:
    # old Makefiles (Parboil's of 2007: `-Xcompiler "-m32"`) ask for 32-bit host code, which
    # cannot link with cpuify's 64-bit kernels: the option goes, with a warning saying so
    from cpuify.nvcc.driver import parse_args
    o = parse_args(["-Xcompiler", "-m32,-O2", "-m32", "--machine=32", "-c", "a.cu"])
    assert o.host_opts == ["-Xcompiler", "-O2"] and o.link_opts == ["-O2"]
    assert [w.split("'")[1] for w in o.warnings] == ["-Xcompiler -m32", "-m32", "--machine=32"]
    assert all("64-bit programs only" in w for w in o.warnings)
    assert parse_args(["-Xcompiler", "-m32", "-c", "a.cu"]).host_opts == []


SHR_PROGRAM = r"""
#include <shrUtils.h>
#include <shrQATest.h>
#include <unistd.h>
__global__ void fill(int *x, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] = i * i; }
int main(int argc, char **argv) {
    shrQAStart(argc, argv);
    shrSetLogFileName("shr_log.txt");
    unsigned n = 0;
    if (!shrGetCmdLineArgumentu(argc, (const char **)argv, "n", &n)) n = 100;
    size_t global = shrRoundUp(64, (int)n);
    shrLog("n %u global %zu\n", n, global);
    shrDeltaT(0);
    usleep(20000);
    double dt = shrDeltaT(0);
    shrLog("delta %s\n", dt >= 0.02 && dt < 5 ? "ok" : "wrong");
    int *d, *h = (int *)malloc(n * sizeof(int));
    cudaMalloc((void **)&d, n * sizeof(int));
    fill<<<(unsigned)global / 64, 64>>>(d, (int)n);
    shrCheckError(cudaMemcpy(h, d, n * sizeof(int), cudaMemcpyDeviceToHost), cudaSuccess);
    long long sum = 0;
    for (unsigned i = 0; i < n; i++) sum += h[i];
    shrLogEx(LOGBOTH | CLOSELOG, 0, "sum %lld\n", sum);
    shrCheckError((int)n, 7);          /* --n=7 passes, anything else ends the program */
    shrQAFinishExit(argc, (const char **)argv, sum == 91 ? QA_PASSED : QA_FAILED);
}
"""


def test_shrutils_through_the_sdk_rules(sdk: Path, env: dict[str, str], tmp_path: Path) -> None:
    proj = tmp_path / "src" / "shr"
    proj.mkdir(parents=True)
    (tmp_path / "common").symlink_to(sdk / "C" / "common")
    (proj / "shr.cu").write_text(SHR_PROGRAM)
    (proj / "Makefile").write_text("EXECUTABLE := shr\nCUFILES := shr.cu\ninclude ../../common/common.mk\n")
    _run(["make"], proj, env)
    exe = tmp_path / "bin" / "linux" / "release" / "shr"
    r = _run([str(exe), "--n=7"], proj, env)
    # sum of i * i for i < 7 = 91; 7 rounded up to a multiple of 64
    assert r.stdout.splitlines() == ["[shr] starting...", "n 7 global 64", "delta ok", "sum 91",
                                     "[shr] test results...", "PASSED"]
    assert (proj / "shr_log.txt").read_text() == "n 7 global 64\ndelta ok\nsum 91\n"
    r = _run([str(exe), "--n=100"], proj, env, ok=False)
    assert r.returncode == 1 and "shr.cu(" in r.stderr and "shrCheckError: 100, expected 7" in r.stderr
    assert "n 100 global 128" in r.stdout and "sum 328350" in r.stdout
    r = _run([str(exe), "--n=-3"], proj, env, ok=False)
    assert r.returncode == 1 and "--n=-3 is not a whole number >= 0" in r.stderr
