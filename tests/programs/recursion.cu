// Recursive device functions in a whole program: results, the stack size limit
// (cudaDeviceSetLimit(cudaLimitStackSize)), and a too deep recursion as a launch error.
#include <cstdio>
#include <cstdlib>

__device__ int depth(int n) { if (n == 0) return 0; return depth(n - 1) * 3 + n; }
__device__ long long fact(int n) { return n <= 1 ? 1 : n * fact(n - 1); }

__global__ void run(int *out, long long *f, int n) {
    out[threadIdx.x] = depth(n);
    f[threadIdx.x] = fact(threadIdx.x);
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 20;
    if (argc > 2) cudaDeviceSetLimit(cudaLimitStackSize, (size_t)atol(argv[2]));
    size_t stack;
    cudaDeviceGetLimit(&stack, cudaLimitStackSize);
    printf("stack %zu\n", stack);
    int *d;
    long long *fd;
    cudaMalloc(&d, 32 * sizeof(int));
    cudaMalloc(&fd, 32 * sizeof(long long));
    run<<<1, 32>>>(d, fd, n);
    printf("launch %s\n", cudaGetErrorName(cudaDeviceSynchronize()));
    int h[32];
    long long hf[32];
    cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
    cudaMemcpy(hf, fd, sizeof hf, cudaMemcpyDeviceToHost);
    printf("depth %d fact(20) %lld\n", h[31], hf[20]);
    return 0;
}
