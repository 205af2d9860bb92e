// The warp shuffles of CUDA <= 8 (no _sync, no mask), as Kepler/Maxwell-era code writes
// them: a shuffle-down reduction, a broadcast, butterflies of several types, width segments,
// a partial last warp and a divergent branch.  Output: one line per case, lanes 0..n-1.
#include <cstdio>

__global__ void shuffles(const int *in, int *out_int, float *out_float, double *out_double,
                         unsigned long long *out_u64) {
    const int lane = threadIdx.x & 31;
    int v = in[threadIdx.x];
    for (int o = 16; o > 0; o /= 2) v += __shfl_down(v, o);            // lane 0: the warp's sum
    out_int[threadIdx.x] = __shfl(v, 0);                                // broadcast it
    float f = in[threadIdx.x] * 0.5f;
    out_float[threadIdx.x] = __shfl_xor(f, 1) + __shfl_up(f, 1, 8);    // width-8 segments
    double d = in[threadIdx.x] * 0.25;
    out_double[threadIdx.x] = __shfl(d, lane ^ 3, 16);
    unsigned long long w = (unsigned long long)in[threadIdx.x] << 33;
    if (lane < 16)                                                      // half the warp
        w = __shfl_down(w, 2);
    out_u64[threadIdx.x] = w;
}

int main() {
    const int n = 40;                       // a full warp and a partial one of 8 lanes
    int h[n];
    for (int i = 0; i < n; i++) h[i] = (i * 7) % 11 + 1;
    int *in, *oi;
    float *of;
    double *od;
    unsigned long long *ou;
    cudaMalloc(&in, sizeof h);
    cudaMalloc(&oi, n * sizeof(int));
    cudaMalloc(&of, n * sizeof(float));
    cudaMalloc(&od, n * sizeof(double));
    cudaMalloc(&ou, n * sizeof(unsigned long long));
    cudaMemcpy(in, h, sizeof h, cudaMemcpyHostToDevice);
    shuffles<<<1, n>>>(in, oi, of, od, ou);
    int ri[n];
    float rf[n];
    double rd[n];
    unsigned long long ru[n];
    cudaMemcpy(ri, oi, sizeof ri, cudaMemcpyDeviceToHost);
    cudaMemcpy(rf, of, sizeof rf, cudaMemcpyDeviceToHost);
    cudaMemcpy(rd, od, sizeof rd, cudaMemcpyDeviceToHost);
    cudaMemcpy(ru, ou, sizeof ru, cudaMemcpyDeviceToHost);
    for (int i = 0; i < n; i++) printf("%d%c", ri[i], i + 1 < n ? ' ' : '\n');
    for (int i = 0; i < n; i++) printf("%g%c", rf[i], i + 1 < n ? ' ' : '\n');
    for (int i = 0; i < n; i++) printf("%g%c", rd[i], i + 1 < n ? ' ' : '\n');
    for (int i = 0; i < n; i++) printf("%llu%c", ru[i], i + 1 < n ? ' ' : '\n');
    return cudaGetLastError() != cudaSuccess;
}
