// The cuRAND host API's MT19937 generator, created as a device and as a host generator, fills
// buffers with each distribution (seed 20240607, two calls, the second going on from the
// first); the buffers go to files (argv[1]), the status of each call to stdout ("status NAME
// VALUE").  Host-only code: built by `cpuify nvcc -lcurand` or against NVIDIA's libcurand
// (argv[2] "host-only": no device generators), the same file; with
// -DCURAND_HOST_OWN_DECLARATIONS it needs no curand.h.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#ifdef CURAND_HOST_OWN_DECLARATIONS
#include "curand_api.h"        // no NVIDIA cuRAND headers installed
#else
#include <curand.h>
#endif
#include <cuda_runtime.h>

#include "curand_harness.h"

static curandGenerator_t create(bool host) {
    curandGenerator_t g;
    CHECK(host ? curandCreateGeneratorHost(&g, CURAND_RNG_PSEUDO_MT19937)
               : curandCreateGenerator(&g, CURAND_RNG_PSEUDO_MT19937));
    CHECK(curandSetPseudoRandomGeneratorSeed(g, 20240607ULL));
    return g;
}

// two calls: n1 results, then n2 more
template <typename T, typename Fill>
static void two_calls(const char *prefix, const char *what, bool host, size_t n1, size_t n2, Fill fill) {
    curandGenerator_t g = create(host);
    T *p = buffer<T>(host, n1 + n2);
    CHECK(fill(g, p, n1));
    CHECK(fill(g, p + n1, n2));
    save(prefix, what, host, p, n1 + n2);
    CHECK(curandDestroyGenerator(g));
}

static void script(const char *prefix, bool host) {
    // 32-bit values: past the first generation of every sequence (78 rows of 65536) and more
    two_calls<unsigned>(prefix, "bits", host, 78 * 65536 + 1001, 70001,
        [](curandGenerator_t g, unsigned *p, size_t n) { return curandGenerate(g, p, n); });
    // the distributions: past the first row, odd counts
    const size_t n1 = 65536 + 3, n2 = 1001;
    two_calls<float>(prefix, "uniform", host, n1, n2,
        [](curandGenerator_t g, float *p, size_t n) { return curandGenerateUniform(g, p, n); });
    two_calls<double>(prefix, "udouble", host, n1, n2,
        [](curandGenerator_t g, double *p, size_t n) { return curandGenerateUniformDouble(g, p, n); });
    two_calls<float>(prefix, "normal", host, n1, n2,
        [](curandGenerator_t g, float *p, size_t n) { return curandGenerateNormal(g, p, n, 1.5f, 2.0f); });
    two_calls<double>(prefix, "ndouble", host, n1, n2,
        [](curandGenerator_t g, double *p, size_t n) { return curandGenerateNormalDouble(g, p, n, -0.5, 0.25); });
    two_calls<float>(prefix, "lognormal", host, n1, n2,
        [](curandGenerator_t g, float *p, size_t n) { return curandGenerateLogNormal(g, p, n, 0.5f, 0.75f); });
    two_calls<double>(prefix, "lndouble", host, n1, n2,
        [](curandGenerator_t g, double *p, size_t n) { return curandGenerateLogNormalDouble(g, p, n, 0.25, 0.5); });
}

int main(int argc, char **argv) {
    if (argc < 2) { std::fprintf(stderr, "usage: %s OUTDIR [host-only]\n", argv[0]); return 2; }
    dir = argv[1];
    bool host_only = argc > 2 && std::strcmp(argv[2], "host-only") == 0;
    for (int host = host_only ? 1 : 0; host < 2; host++) script(host ? "host" : "device", host);

    // a new seed after 100 values, the legacy ordering after 1000 more, the legacy ordering
    // again after 1000 more, then 1000 more
    curandGenerator_t g = create(true);
    unsigned *u = buffer<unsigned>(true, 3100);
    CHECK(curandGenerate(g, u, 100));
    status("reseed", curandSetPseudoRandomGeneratorSeed(g, 0x100000007ULL));
    CHECK(curandGenerate(g, u + 100, 1000));
    status("ordering_legacy", curandSetGeneratorOrdering(g, CURAND_ORDERING_PSEUDO_LEGACY));
    CHECK(curandGenerate(g, u + 1100, 1000));
    status("ordering_legacy_again", curandSetGeneratorOrdering(g, CURAND_ORDERING_PSEUDO_LEGACY));
    CHECK(curandGenerate(g, u + 2100, 1000));
    dump("reseed_legacy", u, 3100 * sizeof(unsigned));
    // what NVIDIA's generator refuses, and what it takes
    status("offset", curandSetGeneratorOffset(g, 10));
    status("ordering_best", curandSetGeneratorOrdering(g, CURAND_ORDERING_PSEUDO_BEST));
    status("ordering_seeded", curandSetGeneratorOrdering(g, CURAND_ORDERING_PSEUDO_SEEDED));
    status("ordering_dynamic", curandSetGeneratorOrdering(g, CURAND_ORDERING_PSEUDO_DYNAMIC));
    status("ordering_default", curandSetGeneratorOrdering(g, CURAND_ORDERING_PSEUDO_DEFAULT));
    status("dimensions", curandSetQuasiRandomGeneratorDimensions(g, 2));
    float f[3];
    status("normal_odd", curandGenerateNormal(g, f, 3, 0.f, 1.f));
    unsigned long long ll[4];
    status("long_long", curandGenerateLongLong(g, ll, 4));
    status("poisson_lambda_0", curandGeneratePoisson(g, u, 4, 0.0));
    CHECK(curandDestroyGenerator(g));

    // Poisson values (lambda 5): the distribution only, not NVIDIA's sequence
    const size_t np = 200000;
    g = create(true);
    unsigned *pv = buffer<unsigned>(true, np);
    CHECK(curandGeneratePoisson(g, pv, np, 5.0));
    dump("poisson", pv, np * sizeof(unsigned));
    CHECK(curandDestroyGenerator(g));
    std::free(pv);
    std::free(u);
    std::printf("done\n");
    return 0;
}
