"""cpuify's cuBLASLt (runtime/cublaslt.c, include/cublasLt.h): a program of our own
(tests/programs/cuda_libs_lt.cu, built with `cpuify nvcc -lcublasLt` as llm.c's are) runs
cublasLtMatmul with each epilogue a transformer's training step uses and writes its inputs
and outputs; NumPy in float64 is the reference (GELU: the tanh approximation cuBLASLt
documents)."""

from __future__ import annotations


import numpy as np
import pytest
from test_cuda_libs import (BLAS_NOT_SUPPORTED, INVALID_VALUE, Dumps, _have_toolchain, build,
                            col_major, run, statuses)

pytestmark = pytest.mark.skipif(not _have_toolchain(), reason="nvcc wheel (nvidia-cuda-nvcc) or g++ missing")


def gelu(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))


def gelu_grad(x: np.ndarray) -> np.ndarray:
    s = np.sqrt(2 / np.pi)
    t = np.tanh(s * (x + 0.044715 * x ** 3))
    return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * s * (1 + 3 * 0.044715 * x * x)


def bf16(raw: np.ndarray) -> np.ndarray:
    """bfloat16 bits (uint16) as float64."""
    return (raw.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


@pytest.fixture(scope="module")
def lt(tmp_path_factory: pytest.TempPathFactory) -> tuple[Dumps, dict[str, int]]:
    tmp = tmp_path_factory.mktemp("cublaslt")
    exe = build(tmp, "cuda_libs_lt", "-lcublasLt")
    r = run(exe, tmp / "out")
    return Dumps(tmp / "out"), statuses(r.stdout)


def test_matmul_gelu_aux_bias_and_its_gradients(lt) -> None:
    d, _ = lt
    m, n, k = 5, 4, 3
    a = col_major(d("gelu_A").astype(np.float64), k, m, k + 1)     # stored k x m: op(A) = A^T
    b = col_major(d("gelu_B").astype(np.float64), k, n, k + 2)
    c = col_major(d("gelu_C").astype(np.float64), m, n, m + 1)
    bias = d("gelu_bias").astype(np.float64)
    pre = 1.5 * a.T @ b + 0.5 * c + bias[:, None]
    np.testing.assert_allclose(col_major(d("gelu_D"), m, n, m), gelu(pre), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(col_major(d("gelu_aux"), m, n, m + 3), pre, rtol=1e-5, atol=1e-6)
    # DGELU_BGRAD: the product times GELU'(the kept input); the bias gradient is its row sums
    grad = (a.T @ b) * gelu_grad(col_major(d("gelu_aux").astype(np.float64), m, n, m + 3))
    np.testing.assert_allclose(col_major(d("dgelu_D"), m, n, m), grad, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(d("dgelu_bias"), grad.sum(axis=1), rtol=1e-5, atol=1e-6)
    # BGRADB: the plain product, and op(B)'s column sums over k
    np.testing.assert_allclose(col_major(d("bgradb_D"), m, n, m), a.T @ b, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(d("bgradb_bias"), b.sum(axis=0), rtol=1e-5, atol=1e-6)


def test_matmul_bf16_strided_batch_relu_bias(lt) -> None:
    d, _ = lt
    m, n, k, batch = 6, 5, 4, 3
    sa, sb, sd = m * k + 2, n * k + 1, m * n
    a, b = bf16(d("bf16_A", np.uint16)), bf16(d("bf16_B", np.uint16))
    bias, out = bf16(d("bf16_bias", np.uint16)), bf16(d("bf16_D", np.uint16))
    for i in range(batch):
        ai = col_major(a[i * sa:], m, k, m)
        bi = col_major(b[i * sb:], n, k, n)                           # op(B) = B^T
        expect = np.maximum(ai @ bi.T + bias[:, None], 0)
        # computed in f32, rounded once to bf16 (8 significant bits)
        np.testing.assert_allclose(col_major(out[i * sd:], m, n, m), expect, rtol=2 ** -8, atol=1e-6)


def test_cublas_batched_gemm_ex(lt) -> None:
    """cuBLAS's cublasGemmStridedBatchedEx (bf16 in, f32 out; llm.c's attention) and
    cublasGemmBatchedEx (pointer arrays)."""
    d, _ = lt
    m, n, k, batch = 6, 5, 4, 3
    sa, sb, sd = m * k + 2, n * k + 1, m * n
    a, b, out = bf16(d("bf16_A", np.uint16)), bf16(d("bf16_B", np.uint16)), d("sbex_D").astype(np.float64)
    for i in range(batch):
        expect = col_major(a[i * sa:], m, k, m) @ col_major(b[i * sb:], n, k, n).T
        np.testing.assert_allclose(col_major(out[i * sd:], m, n, m), expect, rtol=1e-5, atol=1e-6)
    m, n, k = 5, 4, 3
    a = col_major(d("gelu_A").astype(np.float64), k, m, k + 1)
    b = col_major(d("gelu_B").astype(np.float64), k, n, k + 2)
    np.testing.assert_allclose(col_major(d("bex_D"), m, n, m), 1.5 * a.T @ b, rtol=1e-5, atol=1e-6)


def test_heuristic_and_error_paths(lt) -> None:
    _, status = lt
    assert status["heuristic_count"] == 1
    assert status["row_order"] == BLAS_NOT_SUPPORTED           # CUBLASLT_ORDER_ROW: said, refused
    assert status["mismatch"] == INVALID_VALUE                 # op(A) is 4 x 3 for a 5 x 4 D
    assert status["layout_ld"] == 6 * 10 + 8                   # ldc 6, 8 bytes written
