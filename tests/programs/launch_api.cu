// cudaLaunchKernel with argument arrays, cudaLaunchKernelEx, cooperative launch,
// function attributes, dynamic shared memory above 48 KiB, occupancy.
#include "check.h"

__global__ void saxpy(float a, const float *x, float *y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}

__global__ void big_shared(int *out) {
    extern __shared__ int s[];        // 64 KiB
    const int n = 16384;
    for (int i = threadIdx.x; i < n; i += blockDim.x) s[i] = i;
    __syncthreads();
    int acc = 0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) acc += s[n - 1 - i];
    atomicAdd(out, acc);
}

__global__ void __launch_bounds__(128) bounded(int *out) { out[threadIdx.x] = threadIdx.x; }

int main() {
    const int n = 1000;
    float hx[n], hy[n];
    for (int i = 0; i < n; i++) { hx[i] = i; hy[i] = 1; }
    float *x, *y;
    CHECK(cudaMalloc(&x, sizeof(hx)));
    CHECK(cudaMalloc(&y, sizeof(hy)));
    CHECK(cudaMemcpy(x, hx, sizeof(hx), cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(y, hy, sizeof(hy), cudaMemcpyHostToDevice));
    float a = 3;
    int nn = n;
    void *args[] = {&a, &x, &y, &nn};
    CHECK(cudaLaunchKernel((const void *)saxpy, dim3(4), dim3(256), args, 0, 0));
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(8);
    cfg.blockDim = dim3(128);
    CHECK(cudaLaunchKernelExC(&cfg, (const void *)saxpy, args));
    CHECK(cudaLaunchCooperativeKernel((const void *)saxpy, dim3(4), dim3(256), args, 0, 0));
    CHECK(cudaMemcpy(hy, y, sizeof(hy), cudaMemcpyDeviceToHost));
    printf("saxpy %g %g\n", hy[0], hy[999]);

    cudaFuncAttributes attr;
    CHECK(cudaFuncGetAttributes(&attr, big_shared));
    printf("default max dynamic shared %d\n", attr.maxDynamicSharedSizeBytes);
    int *out;
    CHECK(cudaMalloc(&out, 128 * sizeof(int)));
    CHECK(cudaMemset(out, 0, sizeof(int)));
    big_shared<<<1, 256, 65536>>>(out);
    printf("without opt-in %s\n", cudaGetErrorName(cudaGetLastError()));
    CHECK(cudaFuncSetAttribute(big_shared, cudaFuncAttributeMaxDynamicSharedMemorySize, 65536));
    big_shared<<<1, 256, 65536>>>(out);
    CHECK(cudaGetLastError());
    int sum;
    CHECK(cudaMemcpy(&sum, out, sizeof(int), cudaMemcpyDeviceToHost));
    printf("big shared sum %d\n", sum);

    CHECK(cudaFuncGetAttributes(&attr, bounded));
    printf("bounded max threads %d\n", attr.maxThreadsPerBlock);
    bounded<<<1, 256>>>(out);
    printf("over bounds %s\n", cudaGetErrorName(cudaGetLastError()));
    int blocks = 0;
    CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, saxpy, 256, 0));
    int min_grid = 0, block = 0;
    CHECK(cudaOccupancyMaxPotentialBlockSize(&min_grid, &block, saxpy, 0, 0));
    printf("occupancy %d block %d\n", blocks, block);
    return 0;
}
