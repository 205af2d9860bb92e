// The library of a CMake project with CUDA_SEPARABLE_COMPILATION: compiled with
// `-rdc=true -dlink -c` (as Altis's mandelbrot library is), archived with ar.
#include "weights.h"

extern __device__ int weight(int i);      // main.cu: resolved by the device link

__global__ void weights(int *out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = 2 * weight(i);
}

void fill_weights(int *d, int n) { weights<<<(n + 63) / 64, 64>>>(d, n); }
