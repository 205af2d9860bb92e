// The device API's values at given places of given subsequences: what the host API's results
// must be.  stdin: lines "GEN KIND SUBSEQUENCE DRAW" (GEN 0 XORWOW, 1 Philox4x32-10,
// 2 MRG32k3a; KIND 0 curand, 1 curand_uniform, 2 curand_normal2 / curand_normal4 (Philox),
// 3 curand_uniform_double / curand_uniform2_double (Philox)); stdout: one line of values per
// line, from curand_init(seed, SUBSEQUENCE, DRAW, &state).  argv[1]: the seed.
#include "check.h"
#include <cstdio>
#include <cstdlib>
#include <curand_kernel.h>
#include <vector>

struct Query { int gen, kind; unsigned long long sub, draw; };

template <typename State>
__device__ void values(const Query &q, unsigned long long seed, double *out) {
    State s;
    curand_init(seed, q.sub, q.draw, &s);
    out[0] = out[1] = out[2] = out[3] = 0;
    if (q.kind == 0) out[0] = curand(&s);
    else if (q.kind == 1) out[0] = curand_uniform(&s);
    else if (q.kind == 2) { float2 v = curand_normal2(&s); out[0] = v.x; out[1] = v.y; }
    else out[0] = curand_uniform_double(&s);
}

__global__ void evaluate(const Query *qs, int n, unsigned long long seed, double *out) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const Query q = qs[i];
    double *o = out + 4 * i;
    if (q.gen == 0) values<curandStateXORWOW_t>(q, seed, o);
    else if (q.gen == 2) values<curandStateMRG32k3a_t>(q, seed, o);
    else {
        curandStatePhilox4_32_10_t s;
        curand_init(seed, q.sub, q.draw, &s);
        if (q.kind == 0) o[0] = curand(&s);
        else if (q.kind == 1) o[0] = curand_uniform(&s);
        else if (q.kind == 2) { float4 v = curand_normal4(&s); o[0] = v.x; o[1] = v.y; o[2] = v.z; o[3] = v.w; }
        else { double2 v = curand_uniform2_double(&s); o[0] = v.x; o[1] = v.y; }
    }
}

int main(int argc, char **argv) {
    unsigned long long seed = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 0;
    std::vector<Query> qs;
    Query q;
    while (std::scanf("%d %d %llu %llu", &q.gen, &q.kind, &q.sub, &q.draw) == 4) qs.push_back(q);
    int n = (int)qs.size();
    Query *dq;
    double *dout;
    CHECK(cudaMalloc(&dq, n * sizeof(Query)));
    CHECK(cudaMalloc(&dout, 4 * n * sizeof(double)));
    CHECK(cudaMemcpy(dq, qs.data(), n * sizeof(Query), cudaMemcpyHostToDevice));
    evaluate<<<(n + 127) / 128, 128>>>(dq, n, seed, dout);
    CHECK(cudaGetLastError());
    std::vector<double> out(4 * n);
    CHECK(cudaMemcpy(out.data(), dout, out.size() * sizeof(double), cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i++)
        std::printf("%.17g %.17g %.17g %.17g\n", out[4 * i], out[4 * i + 1], out[4 * i + 2], out[4 * i + 3]);
    return 0;
}
