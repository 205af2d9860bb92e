// Error paths: bad launch configuration (non-sticky), double free, invalid symbol, invalid
// direction, unsupported API, then a device assert: sticky (cudaGetLastError still clears it from
// the last-error slot), and after cudaDeviceReset the device stays unusable, as on a GPU.
#include <cstdio>
#include <cassert>

__device__ int dev_var;
int not_a_symbol;

__global__ void k(int *p) { p[threadIdx.x] = threadIdx.x; }
__global__ void check_positive(const int *p) { assert(p[threadIdx.x] > 0); }

#define SHOW(expr) printf("%s -> %s\n", #expr, cudaGetErrorName(expr))

int main() {
    int *d;
    cudaMalloc(&d, 2048 * sizeof(int));
    k<<<1, 2048>>>(d);
    printf("launch 2048 threads: %s\n", cudaGetErrorName(cudaGetLastError()));
    printf("after reading: %s\n", cudaGetErrorName(cudaGetLastError()));
    k<<<dim3(1, 70000), 32>>>(d);
    cudaError_t peeked = cudaPeekAtLastError();   // separate statements: the order in which
    cudaError_t got = cudaGetLastError();         // printf's arguments are evaluated is unspecified
    printf("grid y 70000: peek %s, get %s, then %s\n", cudaGetErrorName(peeked),
           cudaGetErrorName(got), cudaGetErrorName(cudaGetLastError()));
    k<<<1, 32>>>(d);
    printf("good launch: %s\n", cudaGetErrorName(cudaGetLastError()));
    int *e;
    cudaMalloc(&e, 16);
    SHOW(cudaFree(e));
    SHOW(cudaFree(e));
    cudaGetLastError();
    int v = 1;
    SHOW(cudaMemcpyToSymbol(not_a_symbol, &v, sizeof(int)));
    SHOW(cudaMemcpyToSymbol(dev_var, &v, sizeof(int)));
    SHOW(cudaMemcpy(d, &v, 4, (cudaMemcpyKind)42));
    SHOW(cudaSetDevice(3));
    cudaIpcEventHandle_t ipc;
    SHOW(cudaIpcGetEventHandle(&ipc, nullptr));
    printf("string: %s\n", cudaGetErrorString(cudaErrorInvalidConfiguration));
    cudaGetLastError();

    int h[4] = {1, 2, 0, 4};
    cudaMemcpy(d, h, sizeof(h), cudaMemcpyHostToDevice);
    check_positive<<<1, 4>>>(d);
    SHOW(cudaDeviceSynchronize());
    SHOW(cudaMalloc(&e, 16));
    SHOW(cudaGetLastError());
    SHOW(cudaGetLastError());
    SHOW(cudaDeviceReset());
    SHOW(cudaMalloc(&e, 16));
    return 0;
}
