// cuBLAS v2 API on cpuify (tests/test_cuda_libs.py): every routine's inputs and outputs are
// written to DIR/<name>.bin (raw little-endian arrays) for the test to check with NumPy;
// status codes of the error paths are printed as "status <what> <code>".
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include "check.h"

static std::string dir;
static unsigned rng = 12345u;
static double next() { rng = rng * 1664525u + 1013904223u; return (rng >> 8) / 16777216.0 * 2 - 1; }

template <class T> static T *fill(size_t n) {
    T *p;
    CHECK(cudaMallocManaged(&p, n * sizeof(T)));
    for (size_t i = 0; i < n; i++) p[i] = (T)next();
    return p;
}

static void dump(const std::string &name, const void *p, size_t bytes) {
    FILE *f = fopen((dir + "/" + name + ".bin").c_str(), "wb");
    if (!f || fwrite(p, 1, bytes, f) != bytes) { printf("cannot write %s\n", name.c_str()); exit(1); }
    fclose(f);
}

#define OK(call)                                                              \
    do {                                                                      \
        cublasStatus_t s_ = (call);                                           \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                    \
            printf("%s failed: %s (%d)\n", #call, cublasGetStatusName(s_), (int)s_); \
            exit(1);                                                          \
        }                                                                     \
    } while (0)

__global__ void add_one(float *c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] += 1.0f;
}

static const char *opname(cublasOperation_t op) { return op == CUBLAS_OP_N ? "N" : op == CUBLAS_OP_T ? "T" : "C"; }

template <class T>
static void gemm_case(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                      const char *prefix) {
    int arows = ta == CUBLAS_OP_N ? m : k, acols = ta == CUBLAS_OP_N ? k : m;
    int brows = tb == CUBLAS_OP_N ? k : n, bcols = tb == CUBLAS_OP_N ? n : k;
    int lda = arows + 3, ldb = brows + 1, ldc = m + 2;
    T *A = fill<T>((size_t)lda * acols), *B = fill<T>((size_t)ldb * bcols), *C = fill<T>((size_t)ldc * n);
    T alpha = (T)1.5, beta = (T)-0.5;
    std::string name = std::string(prefix) + opname(ta) + opname(tb);
    char shape[64];
    snprintf(shape, sizeof shape, "_%d_%d_%d_%d_%d_%d", m, n, k, lda, ldb, ldc);
    name += shape;
    dump(name + "_A", A, sizeof(T) * lda * acols);
    dump(name + "_B", B, sizeof(T) * ldb * bcols);
    dump(name + "_C0", C, sizeof(T) * ldc * n);
    if constexpr (sizeof(T) == 4) OK(cublasSgemm(h, ta, tb, m, n, k, &alpha, A, lda, B, ldb, &beta, C, ldc));
    else OK(cublasDgemm(h, ta, tb, m, n, k, &alpha, A, lda, B, ldb, &beta, C, ldc));
    CHECK(cudaDeviceSynchronize());
    dump(name + "_C", C, sizeof(T) * ldc * n);
    cudaFree(A); cudaFree(B); cudaFree(C);
}

int main(int argc, char **argv) {
    if (argc < 2) { printf("usage: %s DIR\n", argv[0]); return 2; }
    dir = argv[1];
    cublasHandle_t h;
    OK(cublasCreate(&h));
    cudaStream_t stream;
    CHECK(cudaStreamCreate(&stream));
    OK(cublasSetStream(h, stream));

    cublasOperation_t ops[3] = {CUBLAS_OP_N, CUBLAS_OP_T, CUBLAS_OP_C};
    for (int a = 0; a < 3; a++)
        for (int b = 0; b < 3; b++) gemm_case<float>(h, ops[a], ops[b], 37, 29, 53, "sgemm");
    gemm_case<double>(h, CUBLAS_OP_T, CUBLAS_OP_N, 19, 41, 23, "dgemm");
    gemm_case<double>(h, CUBLAS_OP_N, CUBLAS_OP_T, 19, 41, 23, "dgemm");
    // larger than one tile in every dimension (tiles of 128 x 192, k slices of 256)
    gemm_case<float>(h, CUBLAS_OP_N, CUBLAS_OP_N, 300, 410, 270, "sgemm");
    gemm_case<double>(h, CUBLAS_OP_T, CUBLAS_OP_T, 140, 200, 260, "dgemm");

    // GEMM then a kernel on the same stream, then the host reads after synchronizing
    {
        int n = 64;
        float *A = fill<float>(n * n), *B = fill<float>(n * n), *C = fill<float>(n * n);
        float one = 1, zero = 0;
        dump("ordered_A", A, 4 * n * n);
        dump("ordered_B", B, 4 * n * n);
        OK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, A, n, B, n, &zero, C, n));
        add_one<<<(n * n + 127) / 128, 128, 0, stream>>>(C, n * n);
        CHECK(cudaStreamSynchronize(stream));
        dump("ordered_C", C, 4 * n * n);
    }

    // strided batched GEMM and GemmEx (f16 inputs, f32 output)
    {
        int m = 20, n = 12, k = 9, batch = 4;
        long long sa = m * k + 5, sb = k * n + 2, sc = m * n + 7;
        float *A = fill<float>(sa * batch), *B = fill<float>(sb * batch), *C = fill<float>(sc * batch);
        float alpha = 2, beta = 1;
        dump("batched_A", A, 4 * sa * batch);
        dump("batched_B", B, 4 * sb * batch);
        dump("batched_C0", C, 4 * sc * batch);
        OK(cublasSgemmStridedBatched(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &alpha, A, m, sa, B, k, sb, &beta,
                                     C, m, sc, batch));
        CHECK(cudaDeviceSynchronize());
        dump("batched_C", C, 4 * sc * batch);

        __half *Ah, *Bh;
        CHECK(cudaMallocManaged(&Ah, sizeof(__half) * m * k));
        CHECK(cudaMallocManaged(&Bh, sizeof(__half) * k * n));
        for (int i = 0; i < m * k; i++) Ah[i] = __float2half((float)next());
        for (int i = 0; i < k * n; i++) Bh[i] = __float2half((float)next());
        float *Cf = fill<float>(m * n);
        float one = 1, zero = 0;
        dump("gemmex_A", Ah, 2 * m * k);
        dump("gemmex_B", Bh, 2 * k * n);
        OK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, Ah, CUDA_R_16F, m, Bh, CUDA_R_16F, k,
                        &zero, Cf, CUDA_R_32F, m, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
        CHECK(cudaDeviceSynchronize());
        dump("gemmex_C", Cf, 4 * m * n);
        // Hgemm: half in and out, C = 0.5 A B + 2 C
        __half *Ch;
        CHECK(cudaMallocManaged(&Ch, sizeof(__half) * m * n));
        for (int i = 0; i < m * n; i++) Ch[i] = __float2half((float)next());
        dump("half_gemm_C0", Ch, 2 * m * n);
        __half halpha = __float2half(0.5f), hbeta = __float2half(2.0f);
        OK(cublasHgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &halpha, Ah, m, Bh, k, &hbeta, Ch, m));
        CHECK(cudaDeviceSynchronize());
        dump("half_gemm_C", Ch, 2 * m * n);
    }

    // level 1 and 2 (x with increment 2, y with increment 1)
    {
        int n = 1000;
        float *x = fill<float>(2 * n), *y = fill<float>(n), *y2 = fill<float>(n);
        dump("l1_x", x, 8 * n);
        dump("l1_y", y, 4 * n);
        float alpha = 0.75f, dot = 0, nrm = 0, asum = 0;
        int imax = 0, imin = 0;
        OK(cublasSdot(h, n, x, 2, y, 1, &dot));
        OK(cublasSnrm2(h, n, x, 2, &nrm));
        OK(cublasSasum(h, n, y, 1, &asum));
        OK(cublasIsamax(h, n, x, 2, &imax));
        OK(cublasIsamin(h, n, y, 1, &imin));
        OK(cublasSaxpy(h, n, &alpha, x, 2, y, 1));
        OK(cublasScopy(h, n, y, 1, y2, 1));
        OK(cublasSscal(h, n, &alpha, y2, 1));
        CHECK(cudaDeviceSynchronize());
        dump("l1_axpy", y, 4 * n);
        dump("l1_scal", y2, 4 * n);
        float scalars[3] = {dot, nrm, asum};
        int indices[2] = {imax, imin};
        dump("l1_scalars", scalars, sizeof scalars);
        dump("l1_indices", indices, sizeof indices);
        double *dx = fill<double>(n), *dy = fill<double>(n);
        double ddot = 0;
        OK(cublasDdot(h, n, dx, 1, dy, 1, &ddot));
        dump("l1_dx", dx, 8 * n);
        dump("l1_dy", dy, 8 * n);
        dump("l1_ddot", &ddot, 8);

        int m = 33, k = 21, lda = 40;
        float *A = fill<float>(lda * k), *v = fill<float>(m), *w = fill<float>(k);
        float *yn = fill<float>(m), *yt = fill<float>(k);
        dump("gemv_A", A, 4 * lda * k);
        dump("gemv_v", v, 4 * m);
        dump("gemv_w", w, 4 * k);
        dump("gemv_yn0", yn, 4 * m);
        dump("gemv_yt0", yt, 4 * k);
        float a2 = 1.25f, b2 = -2.0f;
        OK(cublasSgemv(h, CUBLAS_OP_N, m, k, &a2, A, lda, w, 1, &b2, yn, 1));
        OK(cublasSgemv(h, CUBLAS_OP_T, m, k, &a2, A, lda, v, 1, &b2, yt, 1));
        CHECK(cudaDeviceSynchronize());
        dump("gemv_yn", yn, 4 * m);
        dump("gemv_yt", yt, 4 * k);

        float *G = fill<float>(m * k), *Gb = fill<float>(k * m);
        dump("geam_A", G, 4 * m * k);
        dump("geam_B", Gb, 4 * k * m);
        OK(cublasSgeam(h, CUBLAS_OP_N, CUBLAS_OP_T, m, k, &a2, G, m, &b2, Gb, k, G, m));
        CHECK(cudaDeviceSynchronize());
        dump("geam_C", G, 4 * m * k);
    }

    // pointer mode device: the scalars and the result live in device memory
    {
        float *x = fill<float>(10), *res, *al;
        CHECK(cudaMalloc(&res, 4));
        CHECK(cudaMalloc(&al, 4));
        float two = 2;
        CHECK(cudaMemcpy(al, &two, 4, cudaMemcpyHostToDevice));
        OK(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_DEVICE));
        OK(cublasSscal(h, 10, al, x, 1));
        OK(cublasSasum(h, 10, x, 1, res));
        float hres = 0;
        CHECK(cudaMemcpy(&hres, res, 4, cudaMemcpyDeviceToHost));
        float expect = 0;
        for (int i = 0; i < 10; i++) expect += fabsf(x[i]);
        printf("device pointer mode %s\n", fabsf(hres - expect) < 1e-4f ? "ok" : "WRONG");
        OK(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_HOST));
    }

    // error paths
    {
        float one = 1, *A = fill<float>(64);
        printf("status null_handle %d\n", (int)cublasSgemm(nullptr, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &one, A, 4, A, 4, &one, A, 4));
        printf("status negative_m %d\n", (int)cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, -1, 4, 4, &one, A, 4, A, 4, &one, A, 4));
        printf("status small_lda %d\n", (int)cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 8, 4, 4, &one, A, 4, A, 4, &one, A, 8));
        printf("status bad_op %d\n", (int)cublasSgemm(h, (cublasOperation_t)7, CUBLAS_OP_N, 4, 4, 4, &one, A, 4, A, 4, &one, A, 4));
        printf("status bad_pointer %d\n", (int)cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &one, (float *)16, 4, A, 4, &one, A, 4));
        printf("status trsm %d\n", (int)cublasStrsm(h, CUBLAS_SIDE_LEFT, CUBLAS_FILL_MODE_LOWER, CUBLAS_OP_N, CUBLAS_DIAG_UNIT, 4, 4, &one, A, 4, A, 4));
        printf("status trsm_again %d\n", (int)cublasStrsm(h, CUBLAS_SIDE_LEFT, CUBLAS_FILL_MODE_LOWER, CUBLAS_OP_N, CUBLAS_DIAG_UNIT, 4, 4, &one, A, 4, A, 4));
        cublasHandle_t dead;
        OK(cublasCreate(&dead));
        OK(cublasDestroy(dead));
        printf("status destroyed_handle %d\n", (int)cublasSdot(dead, 4, A, 1, A, 1, &one));
        printf("status set_vector_bad_inc %d\n", (int)cublasSetVector(4, 4, A, 0, A, 1));
    }
    OK(cublasDestroy(h));
    printf("done\n");
    return 0;
}
