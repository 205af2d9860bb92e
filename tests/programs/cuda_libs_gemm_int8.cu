// cublasGemmEx with int8 inputs and int32 results (CUBLAS_COMPUTE_32I), both transposes and a
// leading dimension larger than the rows; prints C column by column.
#include <cstdio>
#include <cstdint>
#include <cublas_v2.h>

int main() {
    const int m = 5, n = 4, k = 300, lda = 7, ldb = 301, ldc = 6;
    static int8_t a[lda * k], at[k * m], b[ldb * n];
    static int32_t c[ldc * n];
    for (int i = 0; i < lda * k; i++) a[i] = (int8_t)((i * 37 + 11) % 255 - 127);
    for (int p = 0; p < k; p++)
        for (int i = 0; i < m; i++) at[p + i * k] = a[i + p * lda];   // A^T, k x m, ld k
    for (int i = 0; i < ldb * n; i++) b[i] = (int8_t)((i * 53 + 5) % 255 - 127);
    for (int i = 0; i < ldc * n; i++) c[i] = i - 10;
    int8_t *da, *dat, *db;
    int32_t *dc;
    cudaMalloc(&da, sizeof a); cudaMalloc(&dat, sizeof at); cudaMalloc(&db, sizeof b);
    cudaMalloc(&dc, sizeof c);
    cudaMemcpy(da, a, sizeof a, cudaMemcpyHostToDevice);
    cudaMemcpy(dat, at, sizeof at, cudaMemcpyHostToDevice);
    cudaMemcpy(db, b, sizeof b, cudaMemcpyHostToDevice);
    cublasHandle_t h;
    cublasCreate(&h);
    int32_t alpha = 3, beta = -2;
    for (int t = 0; t < 2; t++) {
        cudaMemcpy(dc, c, sizeof c, cudaMemcpyHostToDevice);
        cublasStatus_t s = cublasGemmEx(h, t ? CUBLAS_OP_T : CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &alpha,
                                        t ? (const void *)dat : (const void *)da, CUDA_R_8I, t ? k : lda,
                                        db, CUDA_R_8I, ldb, &beta, dc, CUDA_R_32I, ldc,
                                        CUBLAS_COMPUTE_32I, CUBLAS_GEMM_DEFAULT);
        int32_t out[ldc * n];
        cudaMemcpy(out, dc, sizeof out, cudaMemcpyDeviceToHost);
        printf("status %d\n", (int)s);
        for (int j = 0; j < n; j++)
            for (int i = 0; i < m; i++) printf("%d\n", out[i + j * ldc]);
    }
    cublasDestroy(h);
    return 0;
}
