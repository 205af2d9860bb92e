// cuFFT and the legacy cuBLAS API on cpuify (tests/test_cuda_libs.py), host code only: built
// with `cpuify nvcc ... -lcufft -lcublas` and with g++ against `cpuify cuda-home`.  Inputs
// and outputs are written to DIR/<name>.bin for the test to check with numpy.fft / matmul;
// status codes are printed as "status <what> <code>".
#include <cublas.h>
#include <cufft.h>
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdlib>
#include <string>

static std::string dir;
static unsigned rng = 777u;
static float next() { rng = rng * 1664525u + 1013904223u; return (rng >> 8) / 16777216.0f * 2 - 1; }

static void dump(const std::string &name, const void *p, size_t bytes) {
    FILE *f = fopen((dir + "/" + name + ".bin").c_str(), "wb");
    if (!f || fwrite(p, 1, bytes, f) != bytes) { printf("cannot write %s\n", name.c_str()); exit(1); }
    fclose(f);
}

#define OK(call)                                                                 \
    do {                                                                         \
        int r_ = (int)(call);                                                    \
        if (r_ != 0) { printf("%s failed: %d (line %d)\n", #call, r_, __LINE__); exit(1); } \
    } while (0)

template <class T> static T *device_random(size_t count) {
    T *p;
    OK(cudaMalloc(&p, count * sizeof(T)));
    T *h = (T *)malloc(count * sizeof(T));
    for (size_t i = 0; i < count; i++) h[i] = (T)next();
    OK(cudaMemcpy(p, h, count * sizeof(T), cudaMemcpyHostToDevice));
    free(h);
    return p;
}

static void dump_device(const std::string &name, const void *p, size_t bytes) {
    void *h = malloc(bytes);
    OK(cudaMemcpy(h, p, bytes, cudaMemcpyDeviceToHost));
    dump(name, h, bytes);
    free(h);
}

// one transform: random input of in_count scalars (float or double), written before and after
template <class T>
static void transform(const char *name, cufftHandle plan, size_t in_count, size_t out_count, bool inplace,
                      int direction, cufftType type) {
    T *in = device_random<T>(in_count);
    T *out = in;
    if (!inplace) out = device_random<T>(out_count);
    dump_device(std::string(name) + "_in", in, in_count * sizeof(T));
    switch (type) {
    case CUFFT_C2C: OK(cufftExecC2C(plan, (cufftComplex *)in, (cufftComplex *)out, direction)); break;
    case CUFFT_Z2Z: OK(cufftExecZ2Z(plan, (cufftDoubleComplex *)in, (cufftDoubleComplex *)out, direction)); break;
    case CUFFT_R2C: OK(cufftExecR2C(plan, (cufftReal *)in, (cufftComplex *)out)); break;
    case CUFFT_D2Z: OK(cufftExecD2Z(plan, (cufftDoubleReal *)in, (cufftDoubleComplex *)out)); break;
    case CUFFT_C2R: OK(cufftExecC2R(plan, (cufftComplex *)in, (cufftReal *)out)); break;
    case CUFFT_Z2D: OK(cufftExecZ2D(plan, (cufftDoubleComplex *)in, (cufftDoubleReal *)out)); break;
    }
    OK(cudaDeviceSynchronize());
    dump_device(std::string(name) + "_out", out, out_count * sizeof(T));
    OK(cufftDestroy(plan));
    cudaFree(in);
    if (!inplace) cudaFree(out);
}

static cufftHandle plan1d(int n, cufftType type, int batch) {
    cufftHandle p;
    OK(cufftPlan1d(&p, n, type, batch));
    return p;
}

static void fft_cases() {
    cudaStream_t s;
    OK(cudaStreamCreate(&s));
    // 1-D complex: powers of two, mixed radix (1000 = 2^3 5^3), a prime (Bluestein), batched
    cufftHandle p = plan1d(8, CUFFT_C2C, 3);
    OK(cufftSetStream(p, s));
    transform<float>("c2c_fwd_8_3", p, 2 * 8 * 3, 2 * 8 * 3, false, CUFFT_FORWARD, CUFFT_C2C);
    transform<float>("c2c_fwd_1000_2", plan1d(1000, CUFFT_C2C, 2), 4000, 4000, false, CUFFT_FORWARD, CUFFT_C2C);
    transform<float>("c2c_inv_1024_2", plan1d(1024, CUFFT_C2C, 2), 4096, 4096, true, CUFFT_INVERSE, CUFFT_C2C);
    transform<float>("c2c_fwd_97_3", plan1d(97, CUFFT_C2C, 3), 2 * 97 * 3, 2 * 97 * 3, false, CUFFT_FORWARD, CUFFT_C2C);
    transform<double>("z2z_inv_97_1", plan1d(97, CUFFT_Z2Z, 1), 194, 194, false, CUFFT_INVERSE, CUFFT_Z2Z);
    transform<double>("z2z_fwd_1000_1", plan1d(1000, CUFFT_Z2Z, 1), 2000, 2000, true, CUFFT_FORWARD, CUFFT_Z2Z);
    transform<double>("z2z_fwd_4199_1", plan1d(4199, CUFFT_Z2Z, 1), 2 * 4199, 2 * 4199, false, CUFFT_FORWARD, CUFFT_Z2Z);
    // real transforms (out of place: unpadded; in place: rows padded to 2 (n/2 + 1))
    transform<float>("r2c_1000_2", plan1d(1000, CUFFT_R2C, 2), 2000, 2 * 501 * 2, false, CUFFT_FORWARD, CUFFT_R2C);
    transform<float>("c2r_1000_2", plan1d(1000, CUFFT_C2R, 2), 2 * 501 * 2, 2000, false, CUFFT_INVERSE, CUFFT_C2R);
    transform<double>("d2z_97_2", plan1d(97, CUFFT_D2Z, 2), 194, 2 * 49 * 2, false, CUFFT_FORWARD, CUFFT_D2Z);
    transform<double>("z2d_97_2", plan1d(97, CUFFT_Z2D, 2), 2 * 49 * 2, 194, false, CUFFT_INVERSE, CUFFT_Z2D);
    transform<float>("r2cinplace_16_2", plan1d(16, CUFFT_R2C, 2), 36, 36, true, CUFFT_FORWARD, CUFFT_R2C);
    // 2-D and 3-D
    OK(cufftPlan2d(&p, 12, 20, CUFFT_C2C));
    transform<float>("c2c2d_fwd_12x20", p, 2 * 240, 2 * 240, false, CUFFT_FORWARD, CUFFT_C2C);
    OK(cufftPlan3d(&p, 4, 6, 5, CUFFT_C2C));
    transform<float>("c2c3d_inv_4x6x5", p, 2 * 120, 2 * 120, false, CUFFT_INVERSE, CUFFT_C2C);
    OK(cufftPlan2d(&p, 6, 10, CUFFT_R2C));
    transform<float>("r2c2d_6x10", p, 60, 2 * 6 * 6, false, CUFFT_FORWARD, CUFFT_R2C);
    OK(cufftPlan2d(&p, 6, 10, CUFFT_C2R));
    transform<float>("c2r2d_6x10", p, 2 * 6 * 6, 60, false, CUFFT_INVERSE, CUFFT_C2R);
    // advanced layouts: every other complex element, batches 150 apart
    int n1[1] = {64}, in1[1] = {64}, on1[1] = {64};
    OK(cufftPlanMany(&p, 1, n1, in1, 2, 150, on1, 1, 64, CUFFT_C2C, 3));
    transform<float>("many_strided_64_3", p, 2 * 150 * 3, 2 * 64 * 3, false, CUFFT_FORWARD, CUFFT_C2C);
    // 2-D inside a larger 10 x 16 array, batches 160 apart, into a dense output
    int n2[2] = {8, 12}, in2[2] = {10, 16}, on2[2] = {8, 12};
    OK(cufftPlanMany(&p, 2, n2, in2, 1, 160, on2, 1, 96, CUFFT_C2C, 2));
    transform<float>("many_embed_8x12_2", p, 2 * 160 * 2, 2 * 96 * 2, false, CUFFT_FORWARD, CUFFT_C2C);
    // a plan made in steps
    cufftHandle q;
    size_t work = 1;
    OK(cufftCreate(&q));
    OK(cufftMakePlan1d(q, 30, CUFFT_C2C, 1, &work));
    transform<float>("made_fwd_30_1", q, 60, 60, false, CUFFT_FORWARD, CUFFT_C2C);

    // errors
    cufftComplex *d;
    OK(cudaMalloc(&d, 64 * sizeof(cufftComplex)));
    printf("status bad_handle %d\n", (int)cufftExecC2C(12345, d, d, CUFFT_FORWARD));
    printf("status zero_size %d\n", (int)cufftPlan1d(&q, 0, CUFFT_C2C, 1));
    OK(cufftPlan1d(&q, 16, CUFFT_C2C, 1));
    printf("status bad_direction %d\n", (int)cufftExecC2C(q, d, d, 0));
    printf("status wrong_type %d\n", (int)cufftExecR2C(q, (cufftReal *)d, d));
    printf("status xt_exec %d\n", (int)cufftXtExec(q, d, d, CUFFT_FORWARD));
    OK(cufftDestroy(q));
    printf("status destroyed %d\n", (int)cufftExecC2C(q, d, d, CUFFT_FORWARD));
    cudaFree(d);
}

static void legacy_blas() {
    float dummy = 0;
    cublasSgemm('N', 'N', 2, 2, 2, 1.0f, &dummy, 2, &dummy, 2, 0.0f, &dummy, 2);
    printf("status before_init %d\n", (int)cublasGetError());
    OK(cublasInit());
    int m = 31, n = 17, k = 23, lda = 35;
    float *hA = (float *)malloc(sizeof(float) * lda * k), *hB = (float *)malloc(sizeof(float) * n * k);
    float *hC = (float *)malloc(sizeof(float) * m * n);
    for (int i = 0; i < lda * k; i++) hA[i] = next();
    for (int i = 0; i < n * k; i++) hB[i] = next();
    float *A, *B, *C;
    OK(cublasAlloc(m * k, sizeof(float), (void **)&A));
    OK(cublasAlloc(n * k, sizeof(float), (void **)&B));
    OK(cublasAlloc(m * n, sizeof(float), (void **)&C));
    OK(cublasSetMatrix(m, k, sizeof(float), hA, lda, A, m));   // packs lda 35 into 31
    OK(cublasSetMatrix(n, k, sizeof(float), hB, n, B, n));
    cublasSgemm('n', 't', m, n, k, 2.0f, A, m, B, n, 0.0f, C, m);    // C = 2 A B^T
    OK(cublasGetError());
    OK(cublasGetMatrix(m, n, sizeof(float), C, m, hC, m));
    dump("legacy_A", hA, sizeof(float) * lda * k);
    dump("legacy_B", hB, sizeof(float) * n * k);
    dump("legacy_C", hC, sizeof(float) * m * n);

    double *dA, *dC, hd[12], hdc[9];
    for (int i = 0; i < 12; i++) hd[i] = next();
    OK(cublasAlloc(12, sizeof(double), (void **)&dA));
    OK(cublasAlloc(9, sizeof(double), (void **)&dC));
    OK(cublasSetVector(12, sizeof(double), hd, 1, dA, 1));
    cublasDgemm('T', 'N', 3, 3, 4, 1.0, dA, 4, dA, 4, 0.0, dC, 3);     // C = A^T A, A 4 x 3
    OK(cublasGetVector(9, sizeof(double), dC, 1, hdc, 1));
    dump("legacy_dA", hd, sizeof hd);
    dump("legacy_dC", hdc, sizeof hdc);

    float x[8], y[8];
    for (int i = 0; i < 8; i++) { x[i] = next(); y[i] = next(); }
    float *dx, *dy;
    OK(cublasAlloc(8, sizeof(float), (void **)&dx));
    OK(cublasAlloc(8, sizeof(float), (void **)&dy));
    OK(cublasSetVector(8, sizeof(float), x, 1, dx, 1));
    OK(cublasSetVector(8, sizeof(float), y, 1, dy, 1));
    float dot = cublasSdot(8, dx, 1, dy, 1);
    int imax = cublasIsamax(8, dx, 1);
    cublasSaxpy(8, 3.0f, dx, 1, dy, 1);
    float res[10];
    OK(cublasGetVector(8, sizeof(float), dy, 1, res, 1));
    res[8] = dot;
    res[9] = (float)imax;
    dump("legacy_x", x, sizeof x);
    dump("legacy_y", y, sizeof y);
    dump("legacy_l1", res, sizeof res);

    cublasSgemm('x', 'n', 2, 2, 2, 1.0f, A, 2, A, 2, 0.0f, C, 2);
    printf("status bad_trans %d\n", (int)cublasGetError());
    printf("status cleared %d\n", (int)cublasGetError());
    OK(cublasFree(A));
    OK(cublasFree(B));
    OK(cublasFree(C));
    OK(cublasShutdown());
    printf("status alloc_after_shutdown %d\n", (int)cublasAlloc(4, 4, (void **)&A));
}

int main(int argc, char **argv) {
    if (argc < 2) { printf("usage: %s DIR\n", argv[0]); return 2; }
    dir = argv[1];
    fft_cases();
    legacy_blas();
    printf("done\n");
    return 0;
}
