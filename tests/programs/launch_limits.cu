// Launch configurations over CUDA's limits, one per limit: more than 1024 threads, each block
// dimension over 1024/1024/64, a grid y/z over 65535, a zero dimension; through <<<>>> and
// cudaLaunchKernel. Each gives the launch-configuration error (not sticky) and runs nothing;
// a good launch afterwards works.
#include <cstdio>
#include "check.h"

__global__ void mark(int *p) { atomicAdd(p, 1); }

int main() {
    int *d;
    CHECK(cudaMalloc(&d, sizeof(int)));
    CHECK(cudaMemset(d, 0, sizeof(int)));
    struct { dim3 grid, block; const char *what; } bad[] = {
        {dim3(1), dim3(4096), "block 4096"},
        {dim3(1), dim3(1025), "block x 1025"},
        {dim3(1), dim3(1, 1025), "block y 1025"},
        {dim3(1), dim3(1, 1, 65), "block z 65"},
        {dim3(1), dim3(32, 32, 2), "block 32x32x2"},
        {dim3(1), dim3(0), "block x 0"},
        {dim3(1, 65536), dim3(32), "grid y 65536"},
        {dim3(1, 1, 65536), dim3(32), "grid z 65536"},
        {dim3(0), dim3(32), "grid x 0"},
        {dim3(2147483648u), dim3(32), "grid x 2^31"},
    };
    for (const auto &c : bad) {
        mark<<<c.grid, c.block>>>(d);
        cudaError_t peeked = cudaPeekAtLastError();
        cudaError_t got = cudaGetLastError();
        printf("%s: %s %s then %s\n", c.what, cudaGetErrorName(peeked), cudaGetErrorName(got),
               cudaGetErrorName(cudaGetLastError()));
    }
    void *args[] = {&d};
    cudaError_t direct = cudaLaunchKernel((const void *)mark, dim3(1), dim3(1, 1, 65), args, 0, 0);
    printf("cudaLaunchKernel block z 65: %s, last %s\n", cudaGetErrorName(direct),
           cudaGetErrorName(cudaGetLastError()));
    mark<<<dim3(2, 65535), dim3(1, 1, 64)>>>(d);                  // at the limits: runs
    CHECK(cudaGetLastError());
    int h = 0;
    CHECK(cudaMemcpy(&h, d, sizeof h, cudaMemcpyDeviceToHost));
    printf("good launch counted %d\n", h);
    return 0;
}
