// A refused kernel (a barrier inside a recursion) launched three times in a build with
// --cpuify-defer-refused: every launch fails, the reason is printed once.
#include <cstdio>

__device__ int ways(int n) { __syncthreads(); return n <= 1 ? 1 : ways(n - 1) + ways(n - 2); }

__global__ void scale(int *p) { p[threadIdx.x] = ways(p[threadIdx.x]); }

__global__ void count(int *p) { p[threadIdx.x] += 1; }

int main() {
    int *d;
    cudaMalloc(&d, 16 * sizeof(int));
    cudaMemset(d, 0, 16 * sizeof(int));
    for (int i = 0; i < 3; ++i) {
        scale<<<1, 16>>>(d);
        printf("scale %s\n", cudaGetErrorName(cudaGetLastError()));
        count<<<1, 16>>>(d);
        printf("count %s\n", cudaGetErrorName(cudaGetLastError()));
    }
    int h[16];
    cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
    printf("h[7] %d\n", h[7]);
    return 0;
}
