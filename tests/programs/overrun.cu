// A kernel whose grid is rounded up to whole blocks and that has no bounds check writes a
// little past the end of its array (a scan's "add the block sums" step).  On a GPU the
// writes land in the allocation's page; the in-bounds results are right and the program
// goes on.  Each round allocates, overruns, checks and frees, with host malloc/free between.
#include <cstdio>
#include <cstdlib>
#include <vector>

__global__ void add_block_base(int *out, int base) {
    out[blockIdx.x * blockDim.x + threadIdx.x] += base * (int)blockIdx.x;   // no check vs n
}

int main() {
    int bad = 0;
    for (int round = 0; round < 50; round++) {
        int n = 384 + round * 8, threads = 256, blocks = (n + threads - 1) / threads;
        std::vector<int> h(n);
        for (int i = 0; i < n; i++) h[i] = i;
        int *d = nullptr;
        cudaMalloc(&d, n * sizeof(int));
        char *host_scratch = (char *)malloc(64 + round);
        cudaMemcpy(d, h.data(), n * sizeof(int), cudaMemcpyHostToDevice);
        add_block_base<<<blocks, threads>>>(d, 1000);
        cudaMemcpy(h.data(), d, n * sizeof(int), cudaMemcpyDeviceToHost);
        for (int i = 0; i < n; i++) bad += h[i] != i + 1000 * (i / threads);
        free(host_scratch);
        cudaFree(d);
    }
    printf("%s %d\n", cudaGetErrorString(cudaGetLastError()), bad);
    return 0;
}
