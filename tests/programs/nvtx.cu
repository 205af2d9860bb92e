// NVTX annotations (header-only NVTX v3, also under the v2 name): without a profiler they
// do nothing, and the program runs as usual.
#include "check.h"
#include <nvToolsExt.h>
#include <nvtx3/nvToolsExt.h>

__global__ void scale(float *p, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] *= a;
}

int main() {
    const int n = 256;
    float h[n];
    for (int i = 0; i < n; i++) h[i] = (float)i;
    nvtxRangePushA("setup");
    float *d;
    CHECK(cudaMalloc(&d, sizeof h));
    CHECK(cudaMemcpy(d, h, sizeof h, cudaMemcpyHostToDevice));
    nvtxRangePop();
    nvtxMarkA("launch");
    nvtxRangeId_t r = nvtxRangeStartA("kernel");
    scale<<<2, 128>>>(d, 2.0f, n);
    CHECK(cudaDeviceSynchronize());
    nvtxRangeEnd(r);
    CHECK(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost));
    printf("h[255] %g\n", h[255]);
    return 0;
}
