// A kernel that reads shared memory before any thread of the program wrote it (as Chai's
// CUDA-U TQH reads its queue index): at a program's first launch that memory reads 0, as a
// GPU's usually does, not whatever the host heap held.  The heap is dirtied first with
// blocks of the sizes a shared-memory buffer takes.  (A shared scalar cpuify keeps in a
// register is not covered: reading it unwritten gives what the register held.)
#include <cstdio>
#include <cstdlib>
#include <cstring>

__global__ void read_before_write(int *out) {
    extern __shared__ int dyn[];
    __shared__ int table[256];
    int v = dyn[threadIdx.x] | table[threadIdx.x];
    __syncthreads();
    out[blockIdx.x * blockDim.x + threadIdx.x] = v;
}

int main() {
    const int threads = 256, blocks = 8;
    for (size_t n = 1024; n <= (1u << 20); n *= 2) {     // freed heap blocks full of 0xAB
        void *p = malloc(n);
        memset(p, 0xAB, n);
        free(p);
    }
    int *out;
    cudaMalloc(&out, blocks * threads * sizeof(int));
    cudaMemset(out, 0xFF, blocks * threads * sizeof(int));
    read_before_write<<<blocks, threads, threads * sizeof(int)>>>(out);
    int h[blocks * threads];
    cudaMemcpy(h, out, sizeof h, cudaMemcpyDeviceToHost);
    int nonzero = 0;
    for (int i = 0; i < blocks * threads; i++) nonzero += h[i] != 0;
    printf("nonzero %d of %d\n", nonzero, blocks * threads);
    return 0;
}
