// The cuRAND host API: every generator cpuify provides, created as a device and as a host
// generator, fills buffers with each distribution after a seed and an offset; the buffers go
// to files (argv[1]) and the status of each call to stdout ("status NAME VALUE").  Host-only
// code: built by `cpuify nvcc -lcurand`, by g++ against `cpuify cuda-home`, or against
// NVIDIA's libcurand, the same file; with -DCURAND_HOST_OWN_DECLARATIONS it needs no curand.h.
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

static bool host_only;     // no device generators (NVIDIA's libcurand without a GPU has none)

static curandStatus_t create(curandGenerator_t *g, curandRngType_t type) {
    return host_only ? curandCreateGeneratorHost(g, type) : curandCreateGenerator(g, type);
}

static curandGenerator_t make(curandRngType_t type, bool host, curandOrdering_t order) {
    curandGenerator_t g;
    CHECK(host ? curandCreateGeneratorHost(&g, type) : curandCreateGenerator(&g, type));
    CHECK(curandSetGeneratorOrdering(g, order));
    CHECK(curandSetPseudoRandomGeneratorSeed(g, 20240607ULL));
    CHECK(curandSetGeneratorOffset(g, 7));
    return g;
}

// each distribution from a new generator (seed, offset 7) in two calls whose sizes cross the
// subsequence counts (4096, 65536, 81920), then 16 raw draws: where the counter stands
template <typename T, typename Fill>
static void distribution(const char *prefix, const char *what, curandRngType_t type, bool host,
                         curandOrdering_t order, size_t n1, size_t n2, Fill fill) {
    curandGenerator_t g = make(type, host, order);
    T *p = buffer<T>(host, n1 + n2);
    CHECK(fill(g, p, n1));
    CHECK(fill(g, p + n1, n2));
    save(prefix, what, host, p, n1 + n2);
    unsigned *after = buffer<unsigned>(host, 16);
    CHECK(curandGenerate(g, after, 16));
    char name[64];
    std::snprintf(name, sizeof name, "%s_after", what);
    save(prefix, name, host, after, 16);
    CHECK(curandDestroyGenerator(g));
}

static void script(const char *prefix, curandRngType_t type, bool host, curandOrdering_t order) {
    distribution<unsigned>(prefix, "bits", type, host, order, 200001, 100003,
        [](curandGenerator_t g, unsigned *p, size_t n) { return curandGenerate(g, p, n); });
    distribution<float>(prefix, "uniform", type, host, order, 100003, 100001,
        [](curandGenerator_t g, float *p, size_t n) { return curandGenerateUniform(g, p, n); });
    distribution<double>(prefix, "udouble", type, host, order, 50001, 40003,
        [](curandGenerator_t g, double *p, size_t n) { return curandGenerateUniformDouble(g, p, n); });
    distribution<float>(prefix, "normal", type, host, order, 100002, 60002,
        [](curandGenerator_t g, float *p, size_t n) { return curandGenerateNormal(g, p, n, 1.5f, 2.0f); });
    distribution<double>(prefix, "ndouble", type, host, order, 50002, 40002,
        [](curandGenerator_t g, double *p, size_t n) { return curandGenerateNormalDouble(g, p, n, -0.5, 0.25); });
    distribution<float>(prefix, "lognormal", type, host, order, 1002, 1002,
        [](curandGenerator_t g, float *p, size_t n) { return curandGenerateLogNormal(g, p, n, 0.5f, 0.75f); });
    distribution<double>(prefix, "lndouble", type, host, order, 1002, 1002,
        [](curandGenerator_t g, double *p, size_t n) { return curandGenerateLogNormalDouble(g, p, n, 0.25, 0.5); });
}

int main(int argc, char **argv) {
    if (argc < 2) { std::fprintf(stderr, "usage: %s OUTDIR\n", argv[0]); return 2; }
    dir = argv[1];
    host_only = argc > 2 && std::strcmp(argv[2], "host-only") == 0;
    const struct { const char *name; curandRngType_t type; } gens[] = {
        {"xorwow", CURAND_RNG_PSEUDO_XORWOW}, {"philox", CURAND_RNG_PSEUDO_PHILOX4_32_10},
        {"mrg", CURAND_RNG_PSEUDO_MRG32K3A}};
    for (const auto &gen : gens)
        for (int host = host_only ? 1 : 0; host < 2; host++) {
            char prefix[64];
            std::snprintf(prefix, sizeof prefix, "%s_%s", gen.name, host ? "host" : "device");
            script(prefix, gen.type, host, CURAND_ORDERING_PSEUDO_DEFAULT);
        }
    script("mrg_legacy", CURAND_RNG_PSEUDO_MRG32K3A, true, CURAND_ORDERING_PSEUDO_LEGACY);

    // the default generator and seed (0), and a seed change that keeps the position
    curandGenerator_t g;
    unsigned v[8];
    CHECK(curandCreateGeneratorHost(&g, CURAND_RNG_PSEUDO_DEFAULT));
    CHECK(curandGenerate(g, v, 4));
    CHECK(curandSetPseudoRandomGeneratorSeed(g, 99));
    CHECK(curandGenerate(g, v + 4, 4));
    dump("default", v, sizeof v);

    // statuses
    float f[4];
    double dd[4];
    unsigned long long ll[4];
    status("normal_odd", curandGenerateNormal(g, f, 3, 0.f, 1.f));
    status("normal_double_odd", curandGenerateNormalDouble(g, dd, 3, 0., 1.));
    status("lognormal_odd", curandGenerateLogNormal(g, f, 3, 0.f, 1.f));
    status("long_long", curandGenerateLongLong(g, ll, 4));
    status("dimensions_on_pseudo", curandSetQuasiRandomGeneratorDimensions(g, 2));
    status("ordering_quasi", curandSetGeneratorOrdering(g, CURAND_ORDERING_QUASI_DEFAULT));
    status("ordering_dynamic_host", curandSetGeneratorOrdering(g, CURAND_ORDERING_PSEUDO_DYNAMIC));
    status("poisson_lambda_0", curandGeneratePoisson(g, v, 4, 0.0));
    status("poisson_lambda_400001", curandGeneratePoisson(g, v, 4, 400001.0));
    status("generate_none", curandGenerate(g, nullptr, 0));
    status("set_stream", curandSetStream(g, 0));
    if (!host_only) {     // a buffer that is not memory: the call fails, the program goes on
        curandGenerator_t d;
        CHECK(curandCreateGenerator(&d, CURAND_RNG_PSEUDO_XORWOW));
        status("bad_pointer", curandGenerateUniform(d, reinterpret_cast<float *>(16), 100000));
        CHECK(curandDestroyGenerator(d));
    }
    CHECK(curandDestroyGenerator(g));
    status("destroy_null", curandDestroyGenerator(nullptr));
    status("create_null", curandCreateGenerator(nullptr, CURAND_RNG_PSEUDO_XORWOW));
    status("create_bad_type", create(&g, (curandRngType_t)7));
    int version = 0, major = 0, minor = -1;
    status("version", curandGetVersion(&version));
    std::printf("version %d\n", version);
    status("property_major", curandGetProperty(MAJOR_VERSION, &major));
    status("property_minor", curandGetProperty(MINOR_VERSION, &minor));
    std::printf("property %d %d\n", major, minor);
    CHECK(create(&g, CURAND_RNG_PSEUDO_PHILOX4_32_10));
    status("philox_normal_odd", curandGenerateNormal(g, f, 3, 0.f, 1.f));
    status("philox_seeded", curandSetGeneratorOrdering(g, CURAND_ORDERING_PSEUDO_SEEDED));
    CHECK(curandDestroyGenerator(g));

    // Poisson: statistics only (not NVIDIA's sequence)
    const size_t np = 200000;
    unsigned *p = buffer<unsigned>(true, np);
    const double lambdas[] = {0.5, 7.0, 300.0, 400000.0};
    for (int i = 0; i < 4; i++) {
        CHECK(curandCreateGeneratorHost(&g, CURAND_RNG_PSEUDO_XORWOW));
        CHECK(curandGeneratePoisson(g, p, np, lambdas[i]));
        char name[64];
        std::snprintf(name, sizeof name, "poisson_%d", i);
        dump(name, p, np * sizeof(unsigned));
        CHECK(curandDestroyGenerator(g));
    }
    std::free(p);

    // statistics: a million uniforms and a million normals of the default generator
    const size_t ns = 1000000;
    float *sf = buffer<float>(true, ns);
    CHECK(create(&g, CURAND_RNG_PSEUDO_DEFAULT));
    CHECK(curandSetPseudoRandomGeneratorSeed(g, 42));
    CHECK(curandGenerateUniform(g, sf, ns));
    dump("stats_uniform", sf, ns * sizeof(float));
    CHECK(curandGenerateNormal(g, sf, ns, 0.f, 1.f));
    dump("stats_normal", sf, ns * sizeof(float));
    CHECK(curandDestroyGenerator(g));
    std::free(sf);
    std::printf("done\n");
    return 0;
}
