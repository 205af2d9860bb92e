// __constant__ and __device__ variables through the symbol API.
#include "check.h"

__constant__ float coeffs[4];
__device__ int counter;
__device__ int table[8] = {1, 2, 3, 4, 5, 6, 7, 8};

__global__ void poly(const float *x, float *y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float v = x[i];
        y[i] = coeffs[0] + v * (coeffs[1] + v * (coeffs[2] + v * coeffs[3]));
        atomicAdd(&counter, 1);
        table[i % 8] += 0;   // keep table used
    }
}

__global__ void double_table() { table[threadIdx.x] *= 2; }

int main() {
    float c[4] = {1, 2, 3, 4};
    CHECK(cudaMemcpyToSymbol(coeffs, c, sizeof(c)));
    float c3 = 0.5f;
    CHECK(cudaMemcpyToSymbol(coeffs, &c3, sizeof(float), 3 * sizeof(float)));  // with offset
    int zero = 0;
    CHECK(cudaMemcpyToSymbol(counter, &zero, sizeof(int)));
    const int n = 300;
    float hx[n], hy[n];
    for (int i = 0; i < n; i++) hx[i] = i * 0.01f;
    float *x, *y;
    CHECK(cudaMalloc(&x, sizeof(hx)));
    CHECK(cudaMalloc(&y, sizeof(hy)));
    CHECK(cudaMemcpy(x, hx, sizeof(hx), cudaMemcpyHostToDevice));
    poly<<<2, 256>>>(x, y, n);
    CHECK(cudaMemcpy(hy, y, sizeof(hy), cudaMemcpyDeviceToHost));
    int count = 0;
    CHECK(cudaMemcpyFromSymbol(&count, counter, sizeof(int)));
    printf("y[0] %.4f y[100] %.4f y[299] %.4f count %d\n", hy[0], hy[100], hy[299], count);

    double_table<<<1, 8>>>();
    int t[8];
    CHECK(cudaMemcpyFromSymbol(t, table, sizeof(t)));
    printf("table %d %d %d\n", t[0], t[3], t[7]);
    int *taddr;
    size_t tsize;
    CHECK(cudaGetSymbolAddress((void **)&taddr, table));
    CHECK(cudaGetSymbolSize(&tsize, table));
    int t5;
    CHECK(cudaMemcpy(&t5, taddr + 5, sizeof(int), cudaMemcpyDeviceToHost));
    printf("address read %d size %zu\n", t5, tsize);
    int from2[2];
    CHECK(cudaMemcpyFromSymbol(from2, table, 2 * sizeof(int), 6 * sizeof(int)));
    printf("offset read %d %d\n", from2[0], from2[1]);
    printf("too big %s\n", cudaGetErrorName(cudaMemcpyToSymbol(table, t, 9 * sizeof(int))));
    return 0;
}
