// An out-of-bounds write: the program must stop with a message naming kernel and block.
#include <cstdio>

__global__ void scatter(int *p, int stride) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (blockIdx.x == 3) p[(size_t)i * stride] = i;   // far outside the allocation
    else p[i] = i;
}

int main() {
    int *d;
    cudaMalloc(&d, 1024 * sizeof(int));
    printf("before the launch\n");
    scatter<<<4, 256>>>(d, 1 << 24);
    cudaError_t e = cudaDeviceSynchronize();
    // a GPU gets here with cudaErrorIllegalAddress; cpuify stops the program inside the kernel
    printf("after the kernel: %s\n", cudaGetErrorName(e));
    return e == cudaSuccess ? 0 : 1;
}
