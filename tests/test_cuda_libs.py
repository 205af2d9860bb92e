"""cpuify's cuBLAS and cuFFT (runtime/cublas.c, runtime/cufft.c): whole programs built with
`cpuify nvcc -lcublas -lcufft` (tests/programs/cuda_libs_*.cu) call the v2 and legacy
cuBLAS routines and cuFFT plans and write their inputs and outputs to files; NumPy
(matmul, numpy.fft) is the reference.  Error paths are checked by the status codes the
programs print, and the libraries of `cpuify cuda-home` by a host-only program linked with
g++ and -lcublas -lcufft."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

PROGRAMS = Path(__file__).parent / "programs"
CPUIFY = [sys.executable, "-m", "cpuify.cli.main"]


def _have_toolchain() -> bool:
    try:
        from cpuify.nvcc.toolkit import find_toolkit
        find_toolkit()
    except Exception:  # noqa: BLE001 (no toolkit: skip)
        return False
    return all(shutil.which(t) for t in ("g++", "gcc", "ar", "nm"))


pytestmark = pytest.mark.skipif(not _have_toolchain(), reason="nvcc wheel (nvidia-cuda-nvcc) or g++ missing")

# cuBLAS status values (cublas_api.h), cuFFT result values (cufft.h)
NOT_INITIALIZED, INVALID_VALUE, EXECUTION_FAILED, BLAS_NOT_SUPPORTED = 1, 7, 13, 15
INVALID_PLAN, FFT_INVALID_VALUE, INVALID_SIZE, FFT_NOT_SUPPORTED = 1, 4, 8, 16


def build(tmp: Path, name: str, *flags: str) -> Path:
    exe = tmp / name
    r = subprocess.run([*CPUIFY, "nvcc", f"-I{PROGRAMS}", str(PROGRAMS / f"{name}.cu"), "-o", str(exe),
                        *flags], cwd=tmp, capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    return exe


def run(exe: Path, out: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    out.mkdir(exist_ok=True)
    r = subprocess.run([str(exe), str(out)], capture_output=True, text=True, timeout=300, check=False,
                       env={**os.environ, **(env or {})})
    assert r.returncode == 0, r.stdout + r.stderr
    return r


def statuses(stdout: str) -> dict[str, int]:
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"^status (\w+) (-?\d+)$", stdout, re.MULTILINE)}


class Dumps:
    def __init__(self, root: Path) -> None:
        self.root = root

    def __call__(self, name: str, dtype: type = np.float32) -> np.ndarray:
        return np.fromfile(self.root / f"{name}.bin", dtype=dtype)


def col_major(flat: np.ndarray, rows: int, cols: int, ld: int) -> np.ndarray:
    """The rows x cols matrix stored column-major with leading dimension ld."""
    return flat[: ld * cols].reshape(cols, ld).T[:rows, :]


# ------------------------------------------------------------------------------------------
# cuBLAS v2


@pytest.fixture(scope="module")
def v2_exe(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build(tmp_path_factory.mktemp("cublas_v2"), "cuda_libs_v2", "-lcublas")


# the GEMM micro-kernel the CPU supports best, and the lesser ones (CPUIFY_GEMM_KERNEL)
@pytest.fixture(scope="module", params=["best", "avx2", "generic"])
def v2(request: pytest.FixtureRequest, v2_exe: Path) -> tuple[Dumps, subprocess.CompletedProcess[str]]:
    out = v2_exe.parent / f"out-{request.param}"
    env = {} if request.param == "best" else {"CPUIFY_GEMM_KERNEL": request.param}
    r = run(v2_exe, out, env)
    return Dumps(out), r


def test_gemm_every_transpose_and_leading_dimension(v2) -> None:
    d, _ = v2
    cases = sorted({p.name.rsplit("_", 1)[0] for p in d.root.glob("?gemm*_C.bin")})
    assert len(cases) == 13      # 9 sgemm transpose pairs + 4 larger/double cases
    for case in cases:
        head, *dims = case.split("_")         # e.g. sgemmNT_37_29_53_40_54_39
        m, n, k, lda, ldb, ldc = map(int, dims)
        dtype = np.float32 if head.startswith("s") else np.float64
        ta, tb = head[-2], head[-1]
        arows, acols = (m, k) if ta == "N" else (k, m)
        brows, bcols = (k, n) if tb == "N" else (n, k)
        A = col_major(d(f"{case}_A", dtype), arows, acols, lda).astype(np.float64)
        B = col_major(d(f"{case}_B", dtype), brows, bcols, ldb).astype(np.float64)
        c0 = d(f"{case}_C0", dtype)
        c = d(f"{case}_C", dtype)
        opA = A if ta == "N" else A.T
        opB = B if tb == "N" else B.T
        expect = 1.5 * opA @ opB - 0.5 * col_major(c0, m, n, ldc)
        tol = 1e-4 if dtype == np.float32 else 1e-12
        np.testing.assert_allclose(col_major(c, m, n, ldc), expect, rtol=tol, atol=tol * np.sqrt(k), err_msg=case)
        # the padding rows between columns are untouched
        pad0 = c0.reshape(n, ldc)[:, m:]
        np.testing.assert_array_equal(c.reshape(n, ldc)[:, m:], pad0, err_msg=case)


def test_gemm_is_ordered_with_kernels_on_its_stream(v2) -> None:
    d, _ = v2
    A, B = d("ordered_A").reshape(64, 64).T, d("ordered_B").reshape(64, 64).T
    np.testing.assert_allclose(d("ordered_C").reshape(64, 64).T, A.astype(np.float64) @ B + 1, rtol=1e-5,
                               atol=1e-4)


def test_strided_batched_gemm_and_gemmex_half(v2) -> None:
    d, _ = v2
    m, n, k, batch = 20, 12, 9, 4
    sa, sb, sc = m * k + 5, k * n + 2, m * n + 7
    A, B, C0, C = d("batched_A"), d("batched_B"), d("batched_C0"), d("batched_C")
    for b in range(batch):
        a = col_major(A[b * sa:], m, k, m).astype(np.float64)
        bb = col_major(B[b * sb:], k, n, k)
        expect = 2 * a @ bb + col_major(C0[b * sc:], m, n, m)
        np.testing.assert_allclose(col_major(C[b * sc:], m, n, m), expect, rtol=1e-5, atol=1e-5)
        # the gaps between the batch's matrices are untouched
        np.testing.assert_array_equal(C[b * sc + m * n:(b + 1) * sc], C0[b * sc + m * n:(b + 1) * sc])
    Ah = col_major(d("gemmex_A", np.float16), m, k, m).astype(np.float64)
    Bh = col_major(d("gemmex_B", np.float16), k, n, k).astype(np.float64)
    np.testing.assert_allclose(col_major(d("gemmex_C"), m, n, m), Ah @ Bh, rtol=1e-5, atol=1e-5)
    # cublasHgemm: half in and out; the exact result rounded once to half
    C0 = col_major(d("half_gemm_C0", np.float16), m, n, m).astype(np.float64)
    want = (0.5 * (Ah @ Bh) + 2 * C0).astype(np.float16).astype(np.float64)
    np.testing.assert_allclose(col_major(d("half_gemm_C", np.float16), m, n, m), want, rtol=2e-3, atol=2e-3)


def test_level1_and_level2(v2) -> None:
    d, _ = v2
    x = d("l1_x")[::2].astype(np.float64)
    y = d("l1_y").astype(np.float64)
    dot, nrm, asum = d("l1_scalars")
    assert dot == pytest.approx(x @ y, rel=1e-5)
    assert nrm == pytest.approx(np.linalg.norm(x), rel=1e-6)
    assert asum == pytest.approx(np.abs(y).sum(), rel=1e-6)
    imax, imin = d("l1_indices", np.int32)
    assert imax == np.argmax(np.abs(x)) + 1 and imin == np.argmin(np.abs(y)) + 1    # 1-based
    axpy = 0.75 * x + y
    np.testing.assert_allclose(d("l1_axpy"), axpy, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(d("l1_scal"), 0.75 * axpy, rtol=1e-6, atol=1e-6)
    assert d("l1_ddot", np.float64)[0] == pytest.approx(d("l1_dx", np.float64) @ d("l1_dy", np.float64),
                                                        rel=1e-13)
    m, k, lda = 33, 21, 40
    A = col_major(d("gemv_A"), m, k, lda).astype(np.float64)
    np.testing.assert_allclose(d("gemv_yn"), 1.25 * A @ d("gemv_w") - 2 * d("gemv_yn0"), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(d("gemv_yt"), 1.25 * A.T @ d("gemv_v") - 2 * d("gemv_yt0"), rtol=1e-5, atol=1e-5)
    G = col_major(d("geam_A"), m, k, m).astype(np.float64)
    Gb = col_major(d("geam_B"), k, m, k)
    np.testing.assert_allclose(col_major(d("geam_C"), m, k, m), 1.25 * G - 2 * Gb.T, rtol=1e-6, atol=1e-6)


def test_blas_error_paths(v2) -> None:
    _, r = v2
    assert "device pointer mode ok" in r.stdout
    s = statuses(r.stdout)
    assert s == {"null_handle": NOT_INITIALIZED, "negative_m": INVALID_VALUE, "small_lda": INVALID_VALUE,
                 "bad_op": INVALID_VALUE, "bad_pointer": EXECUTION_FAILED, "trsm": BLAS_NOT_SUPPORTED,
                 "trsm_again": BLAS_NOT_SUPPORTED, "destroyed_handle": NOT_INITIALIZED,
                 "set_vector_bad_inc": INVALID_VALUE}
    # an unimplemented function says so once, by name; a bad pointer is named as such
    assert r.stderr.count("cublasStrsm_v2 is not supported by cpuify's cuBLAS") == 1
    assert "cublasSgemm failed: illegal address" in r.stderr


# ------------------------------------------------------------------------------------------
# cuFFT and the legacy cuBLAS API (one host-only program, built two ways)


def _cuda_home() -> Path:
    r = subprocess.run([*CPUIFY, "cuda-home"], capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stderr
    return Path(r.stdout.strip())


@pytest.fixture(scope="module", params=["cpuify-nvcc", "g++-cuda-home"])
def fft_legacy(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("cufft")
    src = PROGRAMS / "cuda_libs_fft_legacy.cpp"
    exe = tmp / "fft_legacy"
    if request.param == "cpuify-nvcc":
        cmd = [*CPUIFY, "nvcc", str(src), "-o", str(exe), "-lcufft", "-lcublas"]
    else:      # the usual Makefile split: the host compiler and the toolkit's shared libraries
        home = _cuda_home()
        cmd = ["g++", f"-I{home}/include", str(src), "-o", str(exe), f"-L{home}/lib64", "-lcufft", "-lcublas",
               "-lcudart"]
    r = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    return Dumps(tmp / "out"), run(exe, tmp / "out"), request.param


def _complex(a: np.ndarray) -> np.ndarray:
    return a[0::2] + 1j * a[1::2]


def _c2c_expect(x: np.ndarray, axes: tuple[int, ...], inverse: bool) -> np.ndarray:
    if inverse:     # cuFFT's inverse is unnormalized
        return np.fft.ifftn(x, axes=axes) * np.prod([x.shape[a] for a in axes])
    return np.fft.fftn(x, axes=axes)


def _close(got: np.ndarray, expect: np.ndarray, dtype: type, what: str) -> None:
    eps = 1e-5 if dtype == np.float32 else 1e-12
    scale = max(1.0, float(np.abs(expect).max()))
    np.testing.assert_allclose(got, expect, rtol=0, atol=eps * scale, err_msg=what)


FFT_1D = [("c2c_fwd_8_3", np.float32), ("c2c_fwd_1000_2", np.float32), ("c2c_inv_1024_2", np.float32),
          ("c2c_fwd_97_3", np.float32), ("z2z_inv_97_1", np.float64), ("z2z_fwd_1000_1", np.float64),
          ("z2z_fwd_4199_1", np.float64), ("made_fwd_30_1", np.float32)]


def test_fft_1d_complex_sizes_and_batches(fft_legacy) -> None:
    d, _, how = fft_legacy
    for name, dtype in FFT_1D:
        _, direction, n, batch = name.split("_")
        x = _complex(d(f"{name}_in", dtype)).reshape(int(batch), int(n))
        got = _complex(d(f"{name}_out", dtype)).reshape(int(batch), int(n))
        _close(got, _c2c_expect(x, (1,), direction == "inv"), dtype, f"{name} ({how})")


def test_fft_real_transforms(fft_legacy) -> None:
    d, _, how = fft_legacy
    for name, dtype, n, batch in (("r2c_1000_2", np.float32, 1000, 2), ("d2z_97_2", np.float64, 97, 2)):
        x = d(f"{name}_in", dtype).reshape(batch, n)
        _close(_complex(d(f"{name}_out", dtype)).reshape(batch, n // 2 + 1), np.fft.rfft(x), dtype, name)
    for name, dtype, n, batch in (("c2r_1000_2", np.float32, 1000, 2), ("z2d_97_2", np.float64, 97, 2)):
        X = _complex(d(f"{name}_in", dtype)).reshape(batch, n // 2 + 1)
        # the imaginary parts of the terms that must be real (0 and n/2) are ignored, as cuFFT does
        _close(d(f"{name}_out", dtype).reshape(batch, n), np.fft.irfft(X, n) * n, dtype, f"{name} ({how})")
    # in place: each row of 16 reals padded to 18, the 9 complex results over it
    x = d("r2cinplace_16_2_in").reshape(2, 18)[:, :16]
    _close(_complex(d("r2cinplace_16_2_out")).reshape(2, 9), np.fft.rfft(x), np.float32, "r2c in place")


def test_fft_2d_3d_and_advanced_layouts(fft_legacy) -> None:
    d, _, how = fft_legacy
    x = _complex(d("c2c2d_fwd_12x20_in")).reshape(12, 20)
    _close(_complex(d("c2c2d_fwd_12x20_out")).reshape(12, 20), np.fft.fft2(x), np.float32, "2d")
    x = _complex(d("c2c3d_inv_4x6x5_in")).reshape(4, 6, 5)
    _close(_complex(d("c2c3d_inv_4x6x5_out")).reshape(4, 6, 5), _c2c_expect(x, (0, 1, 2), True),
           np.float32, "3d")
    x = d("r2c2d_6x10_in").reshape(6, 10)
    _close(_complex(d("r2c2d_6x10_out")).reshape(6, 6), np.fft.rfft2(x), np.float32, "r2c 2d")
    X = _complex(d("c2r2d_6x10_in")).reshape(6, 6)
    # a 2-D half spectrum that is not Hermitian along the first axis at columns 0 and n/2 is
    # not a real signal's; cuFFT and irfft2 treat it the same way (the imaginary part dropped)
    _close(d("c2r2d_6x10_out").reshape(6, 10), np.fft.irfft2(X, (6, 10)) * 60, np.float32, f"c2r 2d ({how})")
    # every other element, batches 150 complex apart
    raw = _complex(d("many_strided_64_3_in"))
    x = np.stack([raw[b * 150: b * 150 + 128: 2] for b in range(3)])
    _close(_complex(d("many_strided_64_3_out")).reshape(3, 64), np.fft.fft(x), np.float32, "strided")
    raw = _complex(d("many_embed_8x12_2_in"))
    x = np.stack([raw[b * 160: b * 160 + 160].reshape(10, 16)[:8, :12] for b in range(2)])
    _close(_complex(d("many_embed_8x12_2_out")).reshape(2, 8, 12), np.fft.fft2(x), np.float32, "embedded")


def test_fft_error_paths(fft_legacy) -> None:
    _, r, _ = fft_legacy
    s = statuses(r.stdout)
    assert {k: s[k] for k in ("bad_handle", "zero_size", "bad_direction", "wrong_type", "xt_exec", "destroyed")} == {
        "bad_handle": INVALID_PLAN, "zero_size": INVALID_SIZE, "bad_direction": FFT_INVALID_VALUE,
        "wrong_type": FFT_INVALID_VALUE, "xt_exec": FFT_NOT_SUPPORTED, "destroyed": INVALID_PLAN}
    assert r.stderr.count("cufftXtExec is not supported by cpuify's cuFFT") == 1


def test_legacy_cublas(fft_legacy) -> None:
    d, r, how = fft_legacy
    m, n, k, lda = 31, 17, 23, 35
    A = col_major(d("legacy_A"), m, k, lda).astype(np.float64)
    B = col_major(d("legacy_B"), n, k, n)
    np.testing.assert_allclose(col_major(d("legacy_C"), m, n, m), 2 * A @ B.T, rtol=1e-5, atol=1e-5, err_msg=how)
    dA = col_major(d("legacy_dA", np.float64), 4, 3, 4)
    np.testing.assert_allclose(col_major(d("legacy_dC", np.float64), 3, 3, 3), dA.T @ dA, rtol=1e-13)
    x, y, res = d("legacy_x").astype(np.float64), d("legacy_y").astype(np.float64), d("legacy_l1")
    np.testing.assert_allclose(res[:8], 3 * x + y, rtol=1e-6)
    assert res[8] == pytest.approx(x @ y, rel=1e-5) and res[9] == np.argmax(np.abs(x)) + 1
    s = statuses(r.stdout)
    assert {k: s[k] for k in ("before_init", "bad_trans", "cleared", "alloc_after_shutdown")} == {
        "before_init": NOT_INITIALIZED, "bad_trans": INVALID_VALUE, "cleared": 0,
        "alloc_after_shutdown": NOT_INITIALIZED}


def test_nvcc_links_the_static_libraries() -> None:
    """-lcublas / -lcufft (and their _static names) link cpuify's static archives, as the
    runtime is linked statically; other CUDA libraries pass through with a warning."""
    from cpuify.nvcc.driver import parse_args
    o = parse_args(["a.cu", "-lcublas", "-lcufft_static", "-lcusparse", "-lcublasLt", "-o", "a"])
    # cuBLASLt is part of cpuify's cuBLAS: libcublasLt_static.a is libcublas_static.a
    assert o.link_opts == ["-lcublas_static", "-lcufft_static", "-lcusparse", "-lcublasLt_static"]
    assert any("-lcusparse" in w for w in o.warnings)
    assert not any("cublas" in w or "cufft" in w for w in o.warnings)
    lib = _cuda_home() / "lib64"
    assert (lib / "libcublasLt_static.a").resolve() == (lib / "libcublas_static.a").resolve()


def test_device_query_tool_prints_the_reported_compute_capability() -> None:
    """bin/__nvcc_device_query, which Makefiles such as llm.c's run to pick their target, says
    what cpuify's runtime reports for each device (as cudaGetDeviceProperties does)."""
    tool = str(_cuda_home() / "bin" / "__nvcc_device_query")
    env = {k: v for k, v in os.environ.items() if not k.startswith("CPUIFY_COMPUTE")}
    r = subprocess.run([tool], capture_output=True, text=True, env=env, check=True)
    assert r.stdout == "75\n"
    r = subprocess.run([tool], capture_output=True, text=True, check=True,
                       env={**env, "CPUIFY_COMPUTE_CAPABILITY": "8.6", "CPUIFY_DEVICE_COUNT": "2"})
    assert r.stdout == "86,86\n"


def test_stub_generation_covers_every_declared_function() -> None:
    """Each function our headers declare links: defined in the C source or stubbed."""
    from cpuify.nvcc.headers import RUNTIME_INCLUDE
    from cpuify.nvcc.mathlibs import LIBRARIES, declared_functions, stub_source
    blas = next(lib for lib in LIBRARIES if lib.name == "cublas")
    names = declared_functions((RUNTIME_INCLUDE / "cublas_api.h").read_text(), blas.status_type)
    assert {"cublasSgemm_v2", "cublasStrsm_v2", "cublasCreate_v2", "cublasGemmEx"} <= names
    text = stub_source(blas, {"cublasStrsm_v2"})
    assert 'cpuify_cublas_not_supported_once("cublasStrsm_v2", &said)' in text


@pytest.mark.parametrize("headers,guards", [
    (("cublas_v2.h", "cufft.h", "cuda_profiler_api.h"),
     ("CUBLAS_V2_H_", "CUBLAS_API_H_", "_CUFFT_H_", "__CUDA_PROFILER_API_H__")),
    (("cublas.h",), ("CUBLAS_H_", "CUBLAS_API_H_"))])
def test_headers_define_nvidia_include_guards(tmp_path: Path, headers, guards) -> None:
    """Programs test NVIDIA's include guards to know a library's header is in (the CUDA
    Handbook's chError.h defines its cublas() check macro under `#ifdef CUBLAS_V2_H_`):
    cpuify's headers define them too."""
    src = tmp_path / "guards.cu"
    src.write_text("".join(f"#include <{h}>\n" for h in headers) +
                   "".join(f"#ifndef {g}\n#error {g} is not defined\n#endif\n" for g in guards) +
                   "int main() { return 0; }\n")
    r = subprocess.run([*CPUIFY, "nvcc", "-E", str(src), "-o", str(tmp_path / "guards.i")],
                       cwd=tmp_path, capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stdout + r.stderr


def test_gemm_ex_int8_to_int32(tmp_path: Path) -> None:
    """cublasGemmEx with int8 A/B, int32 C and CUBLAS_COMPUTE_32I (the CUDA Handbook's
    corrBankTC; it returned CUBLAS_STATUS_NOT_SUPPORTED), op(A) = A and A^T, against NumPy."""
    exe = build(tmp_path, "cuda_libs_gemm_int8", "-lcublas")
    r = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120, check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    m, n, k, lda, ldb, ldc = 5, 4, 300, 7, 301, 6
    a = ((np.arange(lda * k) * 37 + 11) % 255 - 127).reshape(k, lda).T[:m].astype(np.int64)
    b = ((np.arange(ldb * n) * 53 + 5) % 255 - 127).reshape(n, ldb).T[:k].astype(np.int64)
    c = (np.arange(ldc * n) - 10).reshape(n, ldc).T[:m].astype(np.int64)
    want = (3 * (a @ b) - 2 * c).T.reshape(-1)
    lines = r.stdout.split()
    for t in range(2):
        block = lines[t * (2 + m * n):(t + 1) * (2 + m * n)]
        assert block[:2] == ["status", "0"] and [int(v) for v in block[2:]] == list(want)
