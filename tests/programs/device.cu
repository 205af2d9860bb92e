// Device management and properties; takes a vector length on the command line.
#include "check.h"
#include <cstdlib>

__global__ void iota(int *p, int n) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) p[i] = i;
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 10;
    int count = 0, dev = -1;
    CHECK(cudaGetDeviceCount(&count));
    CHECK(cudaSetDevice(0));
    CHECK(cudaGetDevice(&dev));
    cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, 0));
    int sms = 0, warp = 0;
    CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    CHECK(cudaDeviceGetAttribute(&warp, cudaDevAttrWarpSize, 0));
    printf("devices %d current %d warp %d maxThreads %d maxGridY %d sms_match %d managed %d\n",
           count, dev, warp, prop.maxThreadsPerBlock, prop.maxGridSize[1],
           sms == prop.multiProcessorCount && sms >= 1, prop.managedMemory);
    int rt = 0;
    CHECK(cudaRuntimeGetVersion(&rt));
    printf("runtime version >= 12000: %d\n", rt >= 12000);
    int *d;
    CHECK(cudaMalloc(&d, n * sizeof(int)));
    iota<<<2, 64>>>(d, n);
    long long sum = 0;
    int *h = (int *)malloc(n * sizeof(int));
    CHECK(cudaMemcpy(h, d, n * sizeof(int), cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i++) sum += h[i];
    printf("n %d sum %lld\n", n, sum);
    return 0;
}
