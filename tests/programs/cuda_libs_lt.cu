// cuBLASLt on cpuify (tests/test_cublaslt.py): cublasLtMatmul with transposes, leading
// dimensions larger than the rows, C apart from D, strided batches, bf16 data and the
// epilogues a transformer's training step uses (bias, GELU keeping its input, the GELU
// gradient, the bias gradient); inputs and outputs go to DIR/<name>.bin for NumPy, status
// codes of the error paths are printed as "status <what> <code>".
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdlib>
#include <string>
#include "check.h"

static std::string dir;
static unsigned rng = 777u;
static float next() { rng = rng * 1664525u + 1013904223u; return (rng >> 8) / 16777216.0f * 2 - 1; }

template <class T> static T *fill(size_t n) {
    T *p;
    CHECK(cudaMallocManaged(&p, n * sizeof(T)));
    for (size_t i = 0; i < n; i++) p[i] = (T)next();
    return p;
}

static void dump(const char *name, const void *p, size_t bytes) {
    FILE *f = fopen((dir + "/" + name + ".bin").c_str(), "wb");
    if (!f || fwrite(p, 1, bytes, f) != bytes) { printf("cannot write %s\n", name); exit(1); }
    fclose(f);
}

#define OK(call)                                                                              \
    do {                                                                                      \
        cublasStatus_t s_ = (call);                                                           \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                                    \
            printf("%s failed: %s\n", #call, cublasLtGetStatusName(s_));                      \
            exit(1);                                                                          \
        }                                                                                     \
    } while (0)

template <class T> static void set(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a, T v) {
    OK(cublasLtMatmulDescSetAttribute(d, a, &v, sizeof v));
}

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    dir = argv[1];
    cublasLtHandle_t lt;
    OK(cublasLtCreate(&lt));
    cudaStream_t stream;
    CHECK(cudaStreamCreate(&stream));
    cublasLtMatmulPreference_t pref;
    OK(cublasLtMatmulPreferenceCreate(&pref));
    size_t ws = 1 << 20;
    OK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));

    // 1. f32: D = GELU(1.5 * A^T B + 0.5 * C + bias), the GELU input kept in aux
    const int m = 5, n = 4, k = 3, lda = k + 1, ldb = k + 2, ldc = m + 1, ldd = m, ldaux = m + 3;
    float *A = fill<float>(lda * m), *B = fill<float>(ldb * n), *C = fill<float>(ldc * n);
    float *D = fill<float>(ldd * n), *bias = fill<float>(m), *aux = fill<float>(ldaux * n);
    cublasLtMatmulDesc_t op;
    OK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    set(op, CUBLASLT_MATMUL_DESC_TRANSA, CUBLAS_OP_T);
    set(op, CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_GELU_AUX_BIAS);
    set(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, (const void *)bias);
    set(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, (void *)aux);
    set(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, (int64_t)ldaux);
    cublasLtMatrixLayout_t la, lb, lc, ld;
    OK(cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, k, m, lda));
    OK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, k, n, ldb));
    OK(cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, m, n, ldc));
    OK(cublasLtMatrixLayoutCreate(&ld, CUDA_R_32F, m, n, ldd));
    cublasLtMatmulHeuristicResult_t heur;
    int found = 0;
    OK(cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, lc, ld, pref, 1, &heur, &found));
    printf("status heuristic_count %d\n", found);
    float alpha = 1.5f, beta = 0.5f;
    dump("gelu_A", A, 4 * lda * m); dump("gelu_B", B, 4 * ldb * n); dump("gelu_C", C, 4 * ldc * n);
    dump("gelu_bias", bias, 4 * m);
    OK(cublasLtMatmul(lt, op, &alpha, A, la, B, lb, &beta, C, lc, D, ld, &heur.algo, nullptr, 0, stream));
    CHECK(cudaStreamSynchronize(stream));
    dump("gelu_D", D, 4 * ldd * n); dump("gelu_aux", aux, 4 * ldaux * n);

    // 2. the GELU gradient of that step: D2 = (A^T B) * GELU'(aux), and its row sums (bias gradient)
    float *D2 = fill<float>(ldd * n), *dbias = fill<float>(m), zero = 0, one = 1;
    set(op, CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_DGELU_BGRAD);
    set(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, (const void *)dbias);
    OK(cublasLtMatmul(lt, op, &one, A, la, B, lb, &zero, D2, ld, D2, ld, nullptr, nullptr, 0, stream));
    CHECK(cudaStreamSynchronize(stream));
    dump("dgelu_D", D2, 4 * ldd * n); dump("dgelu_bias", dbias, 4 * m);

    // 3. the bias gradient from B (its columns' sums over k) with a plain product
    float *gb = fill<float>(n);
    set(op, CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_BGRADB);
    set(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, (const void *)gb);
    OK(cublasLtMatmul(lt, op, &one, A, la, B, lb, &zero, D2, ld, D2, ld, nullptr, nullptr, 0, stream));
    CHECK(cudaStreamSynchronize(stream));
    dump("bgradb_D", D2, 4 * ldd * n); dump("bgradb_bias", gb, 4 * n);

    // 4. bf16 data, f32 compute, bias and ReLU, B transposed, a strided batch of 3
    const int bm = 6, bn = 5, bk = 4, batch = 3, sa = bm * bk + 2, sb = bn * bk + 1, sd = bm * bn;
    __nv_bfloat16 *hA = fill<__nv_bfloat16>(sa * batch), *hB = fill<__nv_bfloat16>(sb * batch);
    __nv_bfloat16 *hD = fill<__nv_bfloat16>(sd * batch), *hbias = fill<__nv_bfloat16>(bm);
    cublasLtMatmulDesc_t op16;
    OK(cublasLtMatmulDescCreate(&op16, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    set(op16, CUBLASLT_MATMUL_DESC_TRANSB, CUBLAS_OP_T);
    set(op16, CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_RELU_BIAS);
    set(op16, CUBLASLT_MATMUL_DESC_BIAS_POINTER, (const void *)hbias);
    cublasLtMatrixLayout_t ha, hb, hd;
    OK(cublasLtMatrixLayoutCreate(&ha, CUDA_R_16BF, bm, bk, bm));
    OK(cublasLtMatrixLayoutCreate(&hb, CUDA_R_16BF, bn, bk, bn));
    OK(cublasLtMatrixLayoutCreate(&hd, CUDA_R_16BF, bm, bn, bm));
    cublasLtMatrixLayout_t layouts[3] = {ha, hb, hd};
    int64_t strides[3] = {sa, sb, sd};
    for (int i = 0; i < 3; i++) {
        OK(cublasLtMatrixLayoutSetAttribute(layouts[i], CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof batch));
        OK(cublasLtMatrixLayoutSetAttribute(layouts[i], CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &strides[i],
                                            sizeof strides[i]));
    }
    dump("bf16_A", hA, 2 * sa * batch); dump("bf16_B", hB, 2 * sb * batch); dump("bf16_bias", hbias, 2 * bm);
    OK(cublasLtMatmul(lt, op16, &one, hA, ha, hB, hb, &zero, hD, hd, hD, hd, nullptr, nullptr, 0, stream));
    CHECK(cudaStreamSynchronize(stream));
    dump("bf16_D", hD, 2 * sd * batch);

    // 5. cuBLAS's batched GemmEx on the same bf16 batch (f32 out), and with pointer arrays (f32)
    cublasHandle_t blas;
    if (cublasCreate(&blas) != CUBLAS_STATUS_SUCCESS) return 3;
    float *fD = fill<float>(sd * batch);
    OK(cublasGemmStridedBatchedEx(blas, CUBLAS_OP_N, CUBLAS_OP_T, bm, bn, bk, &one, hA, CUDA_R_16BF, bm, sa, hB,
                                  CUDA_R_16BF, bn, sb, &zero, fD, CUDA_R_32F, bm, sd, batch, CUBLAS_COMPUTE_32F,
                                  CUBLAS_GEMM_DEFAULT));
    dump("sbex_D", fD, 4 * sd * batch);
    const void *as[2] = {A, B}, *bs[2] = {B, A};     // (k x m)^T (k x n) and (k x n)^T (k x m)
    float *ds[2] = {fill<float>(m * n), fill<float>(n * m)};
    OK(cublasGemmBatchedEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &alpha, as, CUDA_R_32F, lda, bs, CUDA_R_32F,
                           ldb, &zero, (void *const *)ds, CUDA_R_32F, m, 1, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    dump("bex_D", ds[0], 4 * m * n);
    cublasDestroy(blas);

    // 6. errors: a row-major layout is not supported; inner dimensions that differ are invalid
    int32_t row = CUBLASLT_ORDER_ROW;
    OK(cublasLtMatrixLayoutSetAttribute(lc, CUBLASLT_MATRIX_LAYOUT_ORDER, &row, sizeof row));
    printf("status row_order %d\n", (int)cublasLtMatmul(lt, op, &one, A, la, B, lb, &zero, C, lc, D, ld,
                                                          nullptr, nullptr, 0, stream));
    printf("status mismatch %d\n", (int)cublasLtMatmul(lt, op, &one, A, lb, B, la, &zero, D, ld, D, ld,
                                                         nullptr, nullptr, 0, stream));
    size_t wrote = 0;
    int64_t got_ld = 0;
    OK(cublasLtMatrixLayoutGetAttribute(lc, CUBLASLT_MATRIX_LAYOUT_LD, &got_ld, sizeof got_ld, &wrote));
    printf("status layout_ld %d\n", (int)(got_ld * 10 + (int64_t)wrote));
    OK(cublasLtMatmulPreferenceDestroy(pref));
    OK(cublasLtMatmulDescDestroy(op));
    OK(cublasLtMatmulDescDestroy(op16));
    for (cublasLtMatrixLayout_t l : {la, lb, lc, ld, ha, hb, hd}) OK(cublasLtMatrixLayoutDestroy(l));
    OK(cublasLtDestroy(lt));
    return 0;
}
