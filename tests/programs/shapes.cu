// Kernels launched with block shapes known at build time (cpuify nvcc compiles a block
// function for each) and with one known only at run time (argv): the results must not
// depend on which block function ran.
#include <cstdio>
#include <cstdlib>
#include "check.h"

#define TILE 16
namespace stencil {
// a tile in shared memory, one barrier, neighbours read from the tile
template <typename T>
__global__ void blur(const T *in, T *out, int nx, int ny) {
    __shared__ T tile[TILE][TILE];
    int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
    tile[threadIdx.y][threadIdx.x] = (x < nx && y < ny) ? in[y * nx + x] : T(0);
    __syncthreads();
    if (x < nx && y < ny) {
        T s = tile[threadIdx.y][threadIdx.x];
        if (threadIdx.x > 0) s += tile[threadIdx.y][threadIdx.x - 1];
        if (threadIdx.x + 1 < blockDim.x) s += tile[threadIdx.y][threadIdx.x + 1];
        out[y * nx + x] = s;
    }
}
}  // namespace stencil

// a block-wide tree sum (the loop bound is blockDim.x)
__global__ void block_sum(const int *in, int *out, int n) {
    extern __shared__ int buf[];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    buf[threadIdx.x] = i < n ? in[i] : 0;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) buf[threadIdx.x] += buf[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) out[blockIdx.x] = buf[0];
}

static long run_sum(const int *d_in, int n, int threads) {
    int blocks = (n + threads - 1) / threads;
    int *d_out;
    CHECK(cudaMalloc(&d_out, blocks * sizeof(int)));
    block_sum<<<blocks, threads, threads * sizeof(int)>>>(d_in, d_out, n);
    CHECK(cudaGetLastError());
    int *h = (int *)malloc(blocks * sizeof(int));
    CHECK(cudaMemcpy(h, d_out, blocks * sizeof(int), cudaMemcpyDeviceToHost));
    long s = 0;
    for (int b = 0; b < blocks; b++) s += h[b];
    free(h);
    cudaFree(d_out);
    return s;
}

int main(int argc, char **argv) {
    const int n = 10000;
    int runtime_threads = argc > 1 ? atoi(argv[1]) : 64;      // a power of two (the tree)
    int *h_in = (int *)malloc(n * sizeof(int)), *d_in;
    long expect = 0;
    for (int i = 0; i < n; i++) { h_in[i] = i % 7; expect += i % 7; }
    CHECK(cudaMalloc(&d_in, n * sizeof(int)));
    CHECK(cudaMemcpy(d_in, h_in, n * sizeof(int), cudaMemcpyHostToDevice));
    const int threads = 256;
    long a = run_sum(d_in, n, threads);             // a constant: specialized
    long b = run_sum(d_in, n, runtime_threads);     // from argv: the generic code
    block_sum<<<(n + 127) / 128, 128, 128 * sizeof(int)>>>(d_in, d_in, 0);   // literal
    printf("sums %ld %ld expect %ld\n", a, b, expect);

    const int nx = 37, ny = 21;
    float *h = (float *)malloc(nx * ny * sizeof(float)), *d_a, *d_b;
    for (int i = 0; i < nx * ny; i++) h[i] = (float)(i % 13);
    CHECK(cudaMalloc(&d_a, nx * ny * sizeof(float)));
    CHECK(cudaMalloc(&d_b, nx * ny * sizeof(float)));
    CHECK(cudaMemcpy(d_a, h, nx * ny * sizeof(float), cudaMemcpyHostToDevice));
    dim3 block(TILE, TILE);
    dim3 grid((nx + TILE - 1) / TILE, (ny + TILE - 1) / TILE);
    stencil::blur<float><<<grid, block>>>(d_a, d_b, nx, ny);
    CHECK(cudaGetLastError());
    float *r = (float *)malloc(nx * ny * sizeof(float));
    CHECK(cudaMemcpy(r, d_b, nx * ny * sizeof(float), cudaMemcpyDeviceToHost));
    int bad = 0;
    for (int y = 0; y < ny; y++)
        for (int x = 0; x < nx; x++) {
            int tx = x % TILE;
            float s = h[y * nx + x];
            if (tx > 0) s += h[y * nx + x - 1];
            if (tx + 1 < TILE && x + 1 < nx) s += h[y * nx + x + 1];
            bad += r[y * nx + x] != s;
        }
    printf("blur mismatches %d\n", bad);
    return 0;
}
