// Template kernels instantiated from host code, functors, and a kernel with a struct argument.
#include "check.h"

template <typename T, int N>
__global__ void axpy_n(T a, const T *x, T *y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        for (int k = 0; k < N; k++) y[i] += a * x[i];
}

struct Square { __device__ double operator()(double v) const { return v * v; } };
struct Negate { __device__ double operator()(double v) const { return -v; } };

template <typename F>
__global__ void apply(F f, double *v, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) v[i] = f(v[i]);
}

struct Params { int offset; float scale; double shift; };
__global__ void with_struct(Params p, float *out) {
    out[threadIdx.x] = (threadIdx.x + p.offset) * p.scale + (float)p.shift;
}

template <typename T>
void run(const char *name, T a) {
    const int n = 500;
    T hx[n], hy[n];
    for (int i = 0; i < n; i++) { hx[i] = (T)i; hy[i] = (T)1; }
    T *x, *y;
    CHECK(cudaMalloc(&x, sizeof(hx)));
    CHECK(cudaMalloc(&y, sizeof(hy)));
    CHECK(cudaMemcpy(x, hx, sizeof(hx), cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(y, hy, sizeof(hy), cudaMemcpyHostToDevice));
    axpy_n<T, 3><<<2, 256>>>(a, x, y, n);
    CHECK(cudaMemcpy(hy, y, sizeof(hy), cudaMemcpyDeviceToHost));
    printf("%s %g %g\n", name, (double)hy[10], (double)hy[499]);
    cudaFree(x);
    cudaFree(y);
}

int main() {
    run<float>("float", 0.5f);
    run<int>("int", 2);
    run<double>("double", 0.25);
    double hv[4] = {1.5, -2, 3, 4}, *v;
    CHECK(cudaMalloc(&v, sizeof(hv)));
    CHECK(cudaMemcpy(v, hv, sizeof(hv), cudaMemcpyHostToDevice));
    apply<<<1, 4>>>(Square(), v, 4);
    apply<<<1, 4>>>(Negate(), v, 4);
    CHECK(cudaMemcpy(hv, v, sizeof(hv), cudaMemcpyDeviceToHost));
    printf("functors %g %g %g %g\n", hv[0], hv[1], hv[2], hv[3]);
    float *out, ho[4];
    CHECK(cudaMalloc(&out, sizeof(ho)));
    with_struct<<<1, 4>>>(Params{10, 0.5f, 100.0}, out);
    CHECK(cudaMemcpy(ho, out, sizeof(ho), cudaMemcpyDeviceToHost));
    printf("struct %g %g\n", ho[0], ho[3]);
    return 0;
}
