// The cuRAND device API (curand_kernel.h): XORWOW and Philox4x32-10 states per thread,
// raw 32-bit draws, uniform and normal floats.  argv[1]: the seed.
#include "check.h"
#include <cstdlib>
#include <curand_kernel.h>

constexpr int kThreads = 4, kDraws = 6;

template <typename State>
__global__ void draw(unsigned *raw, float *uni, float *nrm, unsigned long long seed,
                     unsigned long long offset) {
    int t = threadIdx.x;
    State s;
    curand_init(seed, t, offset, &s);
    for (int i = 0; i < kDraws; i++) raw[t * kDraws + i] = curand(&s);
    uni[t] = curand_uniform(&s);
    nrm[2 * t] = curand_normal(&s);
    nrm[2 * t + 1] = curand_normal(&s);
}

template <typename State>
void run(const char *name, unsigned long long seed, unsigned long long offset) {
    unsigned *raw;
    float *uni, *nrm;
    CHECK(cudaMallocManaged(&raw, kThreads * kDraws * sizeof(unsigned)));
    CHECK(cudaMallocManaged(&uni, kThreads * sizeof(float)));
    CHECK(cudaMallocManaged(&nrm, 2 * kThreads * sizeof(float)));
    draw<State><<<1, kThreads>>>(raw, uni, nrm, seed, offset);
    CHECK(cudaDeviceSynchronize());
    for (int t = 0; t < kThreads; t++) {
        printf("%s %d", name, t);
        for (int i = 0; i < kDraws; i++) printf(" %u", raw[t * kDraws + i]);
        printf(" %.9g %.9g %.9g\n", uni[t], nrm[2 * t], nrm[2 * t + 1]);
    }
}

int main(int argc, char **argv) {
    unsigned long long seed = argc > 1 ? strtoull(argv[1], nullptr, 10) : 1234;
    run<curandStateXORWOW_t>("xorwow", seed, 0);
    run<curandStatePhilox4_32_10_t>("philox", seed, 5);
    return 0;
}
