// Block shapes declared several to a declaration (`dim3 grid(2, 1), block(16, 16);`, mixed
// with `=` and brace initializers and a default-constructed dim3; integer constants declared
// together): cpuify nvcc finds them at build time and compiles a block function for each.
// The program checks its results itself.
#include <cstdio>
#include "check.h"

__global__ void tile(int *out, int width) {
    int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
    out[y * width + x] = x + 1000 * y;
}

// any block shape: the block's threads cover blockDim.x * blockDim.y consecutive elements
__global__ void scale(int *out, int k) {
    int per_block = blockDim.x * blockDim.y;
    int i = blockIdx.x * per_block + threadIdx.y * blockDim.x + threadIdx.x;
    out[i] *= k;
}

int main() {
    dim3 grid(2, 1), block(16, 16);                  // 32 x 16 elements
    dim3 one, flat = dim3(64), pair{8, 4};
    const int width = 32, n = width * 16, quarter = n / 4;
    int *d;
    CHECK(cudaMalloc(&d, n * sizeof(int)));
    tile<<<grid, block>>>(d, width);
    scale<<<n / 64, flat>>>(d, 2);
    scale<<<n / 32, pair>>>(d, 3);
    scale<<<n / quarter, quarter>>>(d, 5);
    scale<<<n, one>>>(d, 7);
    CHECK(cudaGetLastError());
    int h[n];
    CHECK(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost));
    int bad = 0;
    for (int y = 0; y < 16; y++)
        for (int x = 0; x < width; x++)
            bad += h[y * width + x] != (x + 1000 * y) * 2 * 3 * 5 * 7;
    printf("mismatches %d h[33] %d\n", bad, h[33]);
    return 0;
}
