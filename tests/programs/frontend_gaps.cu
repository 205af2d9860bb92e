// Frontend constructs seen in real CUDA programs (issue 16): warpSize, by-value struct
// parameters indexed at run time (up to CUDA 12.1's 32 KB), double sin/cos/tan of huge
// arguments (libdevice's nested register scopes). The test checks the output with NumPy.
#include "check.h"
#include <cmath>

struct Big { int v[8100]; };                 // 32,400 bytes of kernel parameters
struct Mid { double s; int v[300]; };

__device__ __noinline__ int pick(Mid m, int i) { return m.v[i] + (int)m.s; }

__global__ void lanes(int *o) {
    int t = threadIdx.x;
    o[t] = (t & (warpSize - 1)) + 100 * (t / warpSize) + (t < warpSize ? 10000 : 0);
}

__global__ void big(Big p, const int *idx, int *o, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) o[i] = p.v[idx[i]];
}

__global__ void mid(Mid m, const int *idx, int *o, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) o[i] = pick(m, idx[i] % 300);
}

__global__ void trig(const double *x, double *r, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { r[3 * i] = sin(x[i]); r[3 * i + 1] = cos(x[i]); r[3 * i + 2] = tan(x[i]); }
}

// block 0 publishes, the others spin on the volatile flag until they see it
__global__ void publish_and_wait(volatile int *flag, int *data) {
    if (blockIdx.x == 0) {
        if (threadIdx.x == 0) { data[0] = 42; __threadfence(); *flag = 1; }
    } else if (threadIdx.x == 0) {
        long long k = 0;
        while (*flag == 0 && k < (1LL << 60)) k++;
        data[blockIdx.x] = k < (1LL << 60) ? data[0] + (int)blockIdx.x : -1;
    }
}

// a flag an earlier kernel set, read in a spin
__global__ void wait_for_earlier(volatile int *flag, int *out) {
    long long k = 0;
    while (*flag != 2 && k < (1LL << 60)) k++;
    out[threadIdx.x] = k < (1LL << 60) ? *flag * 10 + threadIdx.x : -1;
}
__global__ void set_flag(int *flag) { *flag = 2; }

// virtual functions on objects built in device code, and a table of function pointers
struct Op { __device__ virtual int apply(int v) const = 0; __device__ virtual ~Op() {} };
struct AddK : Op { int k; __device__ AddK(int k) : k(k) {} __device__ int apply(int v) const override { return v + k; } };
struct MulK : Op { int k; __device__ MulK(int k) : k(k) {} __device__ int apply(int v) const override { return v * k; } };
__device__ int neg(int v) { return -v; }
__device__ int sq(int v) { return v * v; }
__device__ int (*unary[2])(int) = {neg, sq};

__global__ void dispatch(int *o, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    AddK a(i);
    MulK m(3);
    const Op *op = (i % 2) ? (const Op *)&a : (const Op *)&m;
    o[i] = op->apply(i) + unary[i % 3 == 0](i);
}

int main() {
    int *d, h[96];
    CHECK(cudaMalloc(&d, sizeof h));
    lanes<<<1, 96>>>(d);
    CHECK(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost));
    long lane_sum = 0;
    for (int k = 0; k < 96; k++) lane_sum += (long)h[k] * (k + 1);
    printf("lanes %ld\n", lane_sum);

    static Big b;
    Mid m;
    m.s = 7;
    for (int k = 0; k < 8100; k++) b.v[k] = 3 * k + 1;
    for (int k = 0; k < 300; k++) m.v[k] = -k;
    const int n = 1000;
    int hidx[n], ho[n];
    for (int k = 0; k < n; k++) hidx[k] = (k * 7919) % 8100;
    int *didx, *dout;
    CHECK(cudaMalloc(&didx, sizeof hidx));
    CHECK(cudaMalloc(&dout, sizeof ho));
    CHECK(cudaMemcpy(didx, hidx, sizeof hidx, cudaMemcpyHostToDevice));
    big<<<(n + 127) / 128, 128>>>(b, didx, dout, n);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(ho, dout, sizeof ho, cudaMemcpyDeviceToHost));
    long big_sum = 0;
    for (int k = 0; k < n; k++) big_sum += (long)ho[k] * (k + 1);
    mid<<<(n + 127) / 128, 128>>>(m, didx, dout, n);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(ho, dout, sizeof ho, cudaMemcpyDeviceToHost));
    long mid_sum = 0;
    for (int k = 0; k < n; k++) mid_sum += (long)ho[k] * (k + 1);
    printf("struct %ld %ld\n", big_sum, mid_sum);

    const int nt = 8;
    double hx[nt] = {2147483648.0, -3e9, 1e10, 123456789012.5, -5e15, 1e22, 1e300, 0.5};
    double hr[3 * nt], *dx, *dr;
    CHECK(cudaMalloc(&dx, sizeof hx));
    CHECK(cudaMalloc(&dr, sizeof hr));
    CHECK(cudaMemcpy(dx, hx, sizeof hx, cudaMemcpyHostToDevice));
    trig<<<1, 32>>>(dx, dr, nt);
    CHECK(cudaMemcpy(hr, dr, sizeof hr, cudaMemcpyDeviceToHost));
    for (int k = 0; k < nt; k++) printf("trig %.17g %.17g %.17g %.17g\n", hx[k], hr[3 * k], hr[3 * k + 1], hr[3 * k + 2]);

    int *dflag, *ddata, hdata[64];
    CHECK(cudaMalloc(&dflag, sizeof(int)));
    CHECK(cudaMalloc(&ddata, sizeof hdata));
    long flag_sum = 0;
    for (int rep = 0; rep < 3; rep++) {
        CHECK(cudaMemset(dflag, 0, sizeof(int)));
        publish_and_wait<<<64, 32>>>(dflag, ddata);
        CHECK(cudaMemcpy(hdata, ddata, sizeof hdata, cudaMemcpyDeviceToHost));
        for (int k = 0; k < 64; k++) flag_sum += hdata[k];
    }
    set_flag<<<1, 1>>>(dflag);
    wait_for_earlier<<<1, 64>>>(dflag, ddata);
    CHECK(cudaMemcpy(hdata, ddata, sizeof hdata, cudaMemcpyDeviceToHost));
    long earlier_sum = 0;
    for (int k = 0; k < 64; k++) earlier_sum += hdata[k];
    printf("flags %ld %ld\n", flag_sum, earlier_sum);

    dispatch<<<4, 64>>>(ddata, 64);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(hdata, ddata, sizeof hdata, cudaMemcpyDeviceToHost));
    long dispatch_sum = 0;
    for (int k = 0; k < 64; k++) dispatch_sum += (long)hdata[k] * (k + 1);
    printf("dispatch %ld\n", dispatch_sum);
    return 0;
}
