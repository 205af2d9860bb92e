// A kernel cpuify cannot run (a barrier inside a recursion) next to one it can: the build
// fails naming the kernel and the line, unless deferred to the launch.
#include <cstdio>

__device__ int depth(int n) { __syncthreads(); return n <= 1 ? n : depth(n - 1) + depth(n - 2); }

__global__ void fill(int *p) { p[threadIdx.x] = threadIdx.x; }

__global__ void apply(int *p) {
    p[threadIdx.x] = depth(p[threadIdx.x]);
}

int main() {
    int *d;
    cudaMalloc(&d, 32 * sizeof(int));
    fill<<<1, 32>>>(d);
    printf("fill %s\n", cudaGetErrorName(cudaGetLastError()));
    apply<<<1, 32>>>(d);
    printf("apply %s\n", cudaGetErrorName(cudaGetLastError()));
    int h[32];
    cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
    printf("h[5] %d\n", h[5]);
    return 0;
}
