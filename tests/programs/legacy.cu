// Legacy CUDA: runtime functions and cudaDeviceProp fields CUDA 13 removed (cpuify nvcc's
// compatibility layer), the profiler API, a function cpuify does not implement, and the
// device properties cpuify reports; CUDA 12's device-number prefetch and advice.
#include "check.h"
#include <cuda_profiler_api.h>

__global__ void add_one(int *p, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] += i + 1;
}

int main() {
    cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, 0));
    printf("sizeof %zu\n", sizeof(cudaDeviceProp));
    printf("cc %d.%d\n", prop.major, prop.minor);
    int clock = 0;
    CHECK(cudaDeviceGetAttribute(&clock, cudaDevAttrClockRate, 0));
    printf("legacy fields clock %d overlap %d timeout %d mode %d memclock %d\n",
           prop.clockRate > 0 && prop.clockRate == clock, prop.deviceOverlap,
           prop.kernelExecTimeoutEnabled, prop.computeMode, prop.memoryClockRate > 0);
    int pools = -1, coop = -1;
    CHECK(cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, 0));
    CHECK(cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, 0));
    printf("concurrent %d cooperative %d %d pools %d %d async engines %d\n", prop.concurrentKernels,
           prop.cooperativeLaunch, coop, prop.memoryPoolsSupported, pools, prop.asyncEngineCount);
    printf("per SM threads %d blocks %d shared %zu optin %zu regs %d\n",
           prop.maxThreadsPerMultiProcessor, prop.maxBlocksPerMultiProcessor,
           prop.sharedMemPerMultiprocessor, prop.sharedMemPerBlockOptin, prop.regsPerMultiprocessor);

    const int n = 1000;
    int *d;
    CHECK(cudaMalloc(&d, n * sizeof(int)));
    CHECK(cudaMemset(d, 0, n * sizeof(int)));
    CHECK(cudaProfilerStart());
    add_one<<<(n + 127) / 128, 128>>>(d, n);
    CHECK(cudaThreadSynchronize());
    CHECK(cudaProfilerStop());
    size_t heap = 0;
    CHECK(cudaThreadSetLimit(cudaLimitMallocHeapSize, 1 << 20));
    CHECK(cudaThreadGetLimit(&heap, cudaLimitMallocHeapSize));
    cudaFuncCache cache;
    CHECK(cudaThreadSetCacheConfig(cudaFuncCachePreferShared));
    CHECK(cudaThreadGetCacheConfig(&cache));
    double x = 2.5;
    CHECK(cudaSetDoubleForDevice(&x));
    CHECK(cudaSetDoubleForHost(&x));
    cudaSharedMemConfig banks;
    CHECK(cudaDeviceSetSharedMemConfig(cudaSharedMemBankSizeEightByte));
    CHECK(cudaDeviceGetSharedMemConfig(&banks));
    printf("heap %zu cache %d double %g banks %d\n", heap, cache == cudaFuncCachePreferShared, x,
           banks == cudaSharedMemBankSizeFourByte);

    // not implemented by cpuify: an error code, and its name once on stderr
    cudaIpcMemHandle_t handle;
    printf("ipc %s\n", cudaGetErrorName(cudaIpcGetMemHandle(&handle, d)));
    printf("ipc again %s\n", cudaGetErrorName(cudaIpcGetMemHandle(&handle, d)));
    printf("last %s\n", cudaGetErrorName(cudaGetLastError()));

    int *h = (int *)malloc(n * sizeof(int));
    CHECK(cudaMemcpy(h, d, n * sizeof(int), cudaMemcpyDeviceToHost));
    long long sum = 0;
    for (int i = 0; i < n; i++) sum += h[i];
    printf("sum %lld\n", sum);

    // CUDA <= 12's prefetch and advice by device number (CUDA 13 takes a cudaMemLocation)
    int *m;
    cudaStream_t s;
    CHECK(cudaMallocManaged(&m, n * sizeof(int)));
    CHECK(cudaStreamCreate(&s));
    for (int i = 0; i < n; i++) m[i] = 2 * i;
    CHECK(cudaMemAdvise(m, n * sizeof(int), cudaMemAdviseSetReadMostly, 0));
    CHECK(cudaMemAdvise(m, n * sizeof(int), cudaMemAdviseSetPreferredLocation, cudaCpuDeviceId));
    CHECK(cudaMemPrefetchAsync(m, n * sizeof(int), 0));
    CHECK(cudaMemPrefetchAsync(m, n * sizeof(int), 0, s));
    add_one<<<(n + 127) / 128, 128, 0, s>>>(m, n);
    CHECK(cudaMemPrefetchAsync(m, n * sizeof(int), cudaCpuDeviceId, s));
    CHECK(cudaStreamSynchronize(s));
    sum = 0;
    for (int i = 0; i < n; i++) sum += m[i];
    printf("managed %lld\n", sum);
    CHECK(cudaThreadExit());
    return 0;
}
