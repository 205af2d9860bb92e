// A kernel launching a kernel (dynamic parallelism): refused at build time.
#include <cstdio>

__global__ void child(int *p) { p[threadIdx.x] = threadIdx.x; }

__global__ void parent(int *p) {
    if (threadIdx.x == 0) child<<<1, 32>>>(p);
}

int main() {
    int *d;
    cudaMalloc(&d, 32 * sizeof(int));
    parent<<<1, 1>>>(d);
    printf("%s\n", cudaGetErrorName(cudaDeviceSynchronize()));
    return 0;
}
