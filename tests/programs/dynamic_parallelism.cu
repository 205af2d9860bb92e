// Kernels launching kernels (dynamic parallelism; build with -rdc=true -lcudadevrt): each
// thread of the parent launches a child grid, the children a grandchild, and a tail launch
// sums what they all wrote.  The host sees every grid's writes after cudaDeviceSynchronize.
#include <cstdio>

__global__ void grandchild(int *p, int i) { p[1024 + i * 4 + threadIdx.x] = i * 100 + threadIdx.x; }

__global__ void child(int *p, int base) {
    p[base + threadIdx.x] = p[base + threadIdx.x] * 2 + 1;   // the parent's write is visible
    if (threadIdx.x == 0) grandchild<<<1, 4>>>(p, base / 32);
}

__global__ void sum(const int *p, int n, int *out) {
    int s = 0;
    for (int i = 0; i < n; i++) s += p[i];
    *out = s;
}

__global__ void parent(int *p, int *out) {
    p[threadIdx.x * 32] = threadIdx.x;
    child<<<1, 32>>>(p, threadIdx.x * 32);
    if (threadIdx.x == 0) sum<<<1, 1, 0, cudaStreamTailLaunch>>>(p, 2048, out);
    if (cudaGetLastError() != cudaSuccess) *out = -1;
}

int main() {
    int *d, *out;
    cudaMalloc(&d, 2048 * sizeof(int));
    cudaMalloc(&out, sizeof(int));
    cudaMemset(d, 0, 2048 * sizeof(int));
    parent<<<1, 8>>>(d, out);
    printf("%s\n", cudaGetErrorName(cudaDeviceSynchronize()));
    int h[2048], total;
    cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
    cudaMemcpy(&total, out, sizeof total, cudaMemcpyDeviceToHost);
    printf("p[32] %d p[33] %d p[1024+4*3+2] %d total %d\n", h[32], h[33], h[1024 + 14], total);
    return 0;
}
