// The executable's source: a device function the library's kernel calls.
#include <cstdio>
#include "weights.h"
#include "../check.h"

__device__ int weight(int i) { return 3 * i + 1; }

int main() {
    const int n = 100;
    int *d, h[n];
    CHECK(cudaMalloc(&d, n * sizeof(int)));
    fill_weights(d, n);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost));
    long sum = 0;
    for (int i = 0; i < n; i++) sum += h[i];
    printf("sum %ld h[7] %d\n", sum, h[7]);
    return 0;
}
