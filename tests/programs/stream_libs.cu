// cuBLAS, cuFFT (and cuRAND with -DWITH_CURAND) on the stream set on their handle: a routine
// runs after the work before it on that stream, without cudaDeviceSynchronize, and does not
// wait for other streams.  argv[1] picks the case (see tests/test_stream_queues.py).
// Kernels wait for a flag in mapped host memory that another host thread sets 100 ms later;
// another stream is held by a host function until the host sets its flag after the routine
// returned (a routine that waited for all work would wait 3 s for it: the old behaviour).
#include "check.h"
#include <atomic>
#include <cublas_v2.h>
#include <cufft.h>
#include <cstring>
#include <thread>
#include <unistd.h>
#ifdef WITH_CURAND
#include <curand.h>
#endif

static const int n = 256;

// a[i] = *flag + i once *flag is set (thread 0 spins, the block waits for it)
__global__ void fill_after_flag(int *flag, float *a, int count) {
    __shared__ int v;
    if (threadIdx.x == 0) {
        int f;
        while ((f = atomicAdd_system(flag, 0)) == 0) {
        }
        v = f;
    }
    __syncthreads();
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < count) a[i] = (float)(v + i);
}

// *out = value once *flag is set
__global__ void set_after_flag(int *flag, float *out, float value) {
    while (atomicAdd_system(flag, 0) == 0) {
    }
    *out = value;
}

struct hold_t {
    std::atomic<int> flag{0};
    int released = -1;
};
static void CUDART_CB hold(void *p) {
    hold_t *h = (hold_t *)p;
    int i = 0;
    while (!h->flag.load() && i++ < 3000) usleep(1000);
    h->released = h->flag.load();
}

// sets *flags[k] = k + 2 at 100 ms, 200 ms, ...
static std::thread release_later(int *a, int *b = nullptr) {
    return std::thread([a, b] {
        usleep(100000);
        reinterpret_cast<std::atomic<int> *>(a)->store(2);
        if (b) {
            usleep(100000);
            reinterpret_cast<std::atomic<int> *>(b)->store(3);
        }
    });
}

static int *mapped_flag() {
    int *f;
    CHECK(cudaHostAlloc(&f, sizeof(int), cudaHostAllocMapped));
    *f = 0;
    return f;
}

static int cublas_case() {
    cudaStream_t s, busy;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CHECK(cudaStreamCreateWithFlags(&busy, cudaStreamNonBlocking));
    cublasHandle_t h;
    if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) return 1;
    cublasSetStream(h, s);
    int *flag = mapped_flag(), *flag2 = mapped_flag();
    float *x, *y, *alpha_dev, *hy;
    CHECK(cudaMalloc(&x, n * sizeof(float)));
    CHECK(cudaMalloc(&y, n * sizeof(float)));
    CHECK(cudaMalloc(&alpha_dev, sizeof(float)));
    CHECK(cudaMallocHost(&hy, n * sizeof(float)));
    float ones[n];
    for (int i = 0; i < n; i++) ones[i] = 1.0f;
    CHECK(cudaMemcpy(y, ones, sizeof ones, cudaMemcpyHostToDevice));
    CHECK(cudaMemset(alpha_dev, 0, sizeof(float)));
    static hold_t other;
    CHECK(cudaLaunchHostFunc(busy, hold, &other));

    // y += 3 x after the kernel writing x; then y *= alpha (device memory) after the kernel
    // writing alpha
    std::thread releaser = release_later(flag, flag2);
    fill_after_flag<<<1, n, 0, s>>>(flag, x, n);
    float three = 3.0f;
    int st1 = cublasSaxpy(h, n, &three, x, 1, y, 1);
    set_after_flag<<<1, 1, 0, s>>>(flag2, alpha_dev, 0.5f);
    cublasSetPointerMode(h, CUBLAS_POINTER_MODE_DEVICE);
    int st2 = cublasSscal(h, n, alpha_dev, y, 1);
    int busy_held = other.released == -1;
    CHECK(cudaMemcpyAsync(hy, y, n * sizeof(float), cudaMemcpyDeviceToHost, s));
    CHECK(cudaStreamSynchronize(s));
    releaser.join();
    int bad = 0;
    for (int i = 0; i < n; i++) bad += hy[i] != 0.5f * (1.0f + 3.0f * (2 + i));
    printf("saxpy %d sscal %d wrong %d; busy stream still held when they returned %d\n", st1, st2,
           bad, busy_held);
    other.flag.store(1);
    CHECK(cudaStreamSynchronize(busy));

    // cublasGetVector is synchronous (legacy stream): it returns the values the kernel before
    // it wrote, into pinned memory too
    int *flag3 = mapped_flag();
    std::thread r3 = release_later(flag3);
    fill_after_flag<<<1, n, 0>>>(flag3, x, n);
    for (int i = 0; i < n; i++) hy[i] = -1.0f;
    int st3 = cublasGetVector(n, sizeof(float), x, 1, hy, 1);
    bad = 0;
    for (int i = 0; i < n; i++) bad += hy[i] != (float)(2 + i);
    r3.join();
    printf("getvector %d wrong %d\n", st3, bad);
    cublasDestroy(h);
    return 0;
}

static int cufft_case() {
    const int len = 64;
    cudaStream_t s, busy;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CHECK(cudaStreamCreateWithFlags(&busy, cudaStreamNonBlocking));
    cufftHandle plan;
    if (cufftPlan1d(&plan, len, CUFFT_C2C, 1) != CUFFT_SUCCESS) return 1;
    cufftSetStream(plan, s);
    int *flag = mapped_flag();
    float *in, *out, *hout;
    CHECK(cudaMalloc(&in, 2 * len * sizeof(float)));
    CHECK(cudaMalloc(&out, 2 * len * sizeof(float)));
    CHECK(cudaMallocHost(&hout, 2 * len * sizeof(float)));
    CHECK(cudaMemset(in, 0, 2 * len * sizeof(float)));
    static hold_t other;
    CHECK(cudaLaunchHostFunc(busy, hold, &other));
    // in[k] = flag + k as interleaved complex values: re = 2 + 2j, im = 3 + 2j (j < len)
    std::thread releaser = release_later(flag);
    fill_after_flag<<<1, 2 * len, 0, s>>>(flag, in, 2 * len);
    int st = cufftExecC2C(plan, (cufftComplex *)in, (cufftComplex *)out, CUFFT_FORWARD);
    int busy_held = other.released == -1;
    CHECK(cudaMemcpyAsync(hout, out, 2 * len * sizeof(float), cudaMemcpyDeviceToHost, s));
    CHECK(cudaStreamSynchronize(s));
    releaser.join();
    // bin 0 = sum of the inputs: re = sum(2 + 2j) = 2 len + len (len - 1), im = re + len
    double re0 = 2.0 * len + (double)len * (len - 1), im0 = re0 + len;
    printf("exec %d bin0 %s; busy stream still held when it returned %d\n", st,
           hout[0] == re0 && hout[1] == im0 ? "right" : "wrong", busy_held);
    other.flag.store(1);
    CHECK(cudaStreamSynchronize(busy));
    cufftDestroy(plan);
    return 0;
}

#ifdef WITH_CURAND
static int curand_case() {
    cudaStream_t s, busy;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CHECK(cudaStreamCreateWithFlags(&busy, cudaStreamNonBlocking));
    curandGenerator_t g, ref;
    curandCreateGenerator(&g, CURAND_RNG_PSEUDO_PHILOX4_32_10);
    curandCreateGenerator(&ref, CURAND_RNG_PSEUDO_PHILOX4_32_10);
    curandSetPseudoRandomGeneratorSeed(g, 42);
    curandSetPseudoRandomGeneratorSeed(ref, 42);
    curandSetStream(g, s);
    int *flag = mapped_flag();
    float *out, *out_ref, *hout, *href;
    CHECK(cudaMalloc(&out, n * sizeof(float)));
    CHECK(cudaMalloc(&out_ref, n * sizeof(float)));
    CHECK(cudaMallocHost(&hout, n * sizeof(float)));
    CHECK(cudaMallocHost(&href, n * sizeof(float)));
    static hold_t other;
    CHECK(cudaLaunchHostFunc(busy, hold, &other));
    // the kernel writes out (values >= 2) after the flag; the generation overwrites it
    std::thread releaser = release_later(flag);
    fill_after_flag<<<1, n, 0, s>>>(flag, out, n);
    int st = curandGenerateUniform(g, out, n);
    int busy_held = other.released == -1;
    CHECK(cudaMemcpyAsync(hout, out, n * sizeof(float), cudaMemcpyDeviceToHost, s));
    CHECK(cudaStreamSynchronize(s));
    releaser.join();
    other.flag.store(1);
    CHECK(cudaStreamSynchronize(busy));
    curandGenerateUniform(ref, out_ref, n);
    CHECK(cudaMemcpy(href, out_ref, n * sizeof(float), cudaMemcpyDeviceToHost));
    printf("generate %d same as on the legacy stream %d; busy stream still held when it returned %d\n",
           st, memcmp(hout, href, n * sizeof(float)) == 0, busy_held);
    return 0;
}
#endif

int main(int argc, char **argv) {
    const char *what = argc > 1 ? argv[1] : "cublas";
    if (!strcmp(what, "cublas")) return cublas_case();
    if (!strcmp(what, "cufft")) return cufft_case();
#ifdef WITH_CURAND
    if (!strcmp(what, "curand")) return curand_case();
#endif
    printf("unknown case %s\n", what);
    return 2;
}
