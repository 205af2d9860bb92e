// The cuRAND host API's quasi-random generators (SOBOL32, SCRAMBLED_SOBOL32, SOBOL64 and
// SCRAMBLED_SOBOL64) and MTGP32, created as device and as host generators, fill buffers with
// each distribution (Sobol: after a number of dimensions and an offset; MTGP32: after a seed);
// the buffers go to files (argv[1]), the status of each call to stdout ("status NAME VALUE").  Also dumps the start of NVIDIA's
// direction vectors and scramble constants as curandGetDirectionVectors32/64 and
// curandGetScrambleConstants32/64 give them.  Host-only code: built by `cpuify nvcc -lcurand`
// or against NVIDIA's libcurand (argv[2] "host-only": no device generators), the same file.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <curand.h>
#include <cuda_runtime.h>

#include "curand_harness.h"

// each distribution from a new generator: 3 dimensions, offset 5; a first call of 3 x 20001
// points (more than a job's 16384 per dimension), then 5 dimensions and a second call of
// 5 x 7 points that goes on from where the first stopped
template <typename T, typename Fill>
static void distribution(const char *prefix, const char *what, curandRngType_t type, bool host, Fill fill) {
    curandGenerator_t g;
    CHECK(host ? curandCreateGeneratorHost(&g, type) : curandCreateGenerator(&g, type));
    CHECK(curandSetQuasiRandomGeneratorDimensions(g, 3));
    CHECK(curandSetGeneratorOffset(g, 5));
    const size_t n1 = 3 * 20001, n2 = 5 * 7;
    T *p = buffer<T>(host, n1 + n2);
    CHECK(fill(g, p, n1));
    CHECK(curandSetQuasiRandomGeneratorDimensions(g, 5));
    CHECK(fill(g, p + n1, n2));
    save(prefix, what, host, p, n1 + n2);
    CHECK(curandDestroyGenerator(g));
}

// MTGP32: seed 20240607, a first call of 2 rows of 192 x 256 results and 1001 more, a second
// call of 30003 that goes on from there, then a new seed (which starts the sequence again) and
// 1000 more
template <typename T, typename Fill>
static void mtgp32(const char *prefix, const char *what, bool host, Fill fill) {
    curandGenerator_t g;
    CHECK(host ? curandCreateGeneratorHost(&g, CURAND_RNG_PSEUDO_MTGP32)
               : curandCreateGenerator(&g, CURAND_RNG_PSEUDO_MTGP32));
    CHECK(curandSetPseudoRandomGeneratorSeed(g, 20240607ULL));
    const size_t n1 = 2 * 192 * 256 + 1001, n2 = 30003, n3 = 1000;
    T *p = buffer<T>(host, n1 + n2 + n3);
    CHECK(fill(g, p, n1));
    CHECK(fill(g, p + n1, n2));
    CHECK(curandSetPseudoRandomGeneratorSeed(g, 0x100000007ULL));
    CHECK(fill(g, p + n1 + n2, n3));
    save(prefix, what, host, p, n1 + n2 + n3);
    CHECK(curandDestroyGenerator(g));
}

static void mtgp32_script(const char *prefix, bool host) {
    mtgp32<unsigned>(prefix, "bits", host,
        [](curandGenerator_t g, unsigned *p, size_t n) { return curandGenerate(g, p, n); });
    mtgp32<float>(prefix, "uniform", host,
        [](curandGenerator_t g, float *p, size_t n) { return curandGenerateUniform(g, p, n); });
    mtgp32<double>(prefix, "udouble", host,
        [](curandGenerator_t g, double *p, size_t n) { return curandGenerateUniformDouble(g, p, n); });
    mtgp32<float>(prefix, "normal", host,
        [](curandGenerator_t g, float *p, size_t n) { return curandGenerateNormal(g, p, n, 1.5f, 2.0f); });
    mtgp32<double>(prefix, "ndouble", host,
        [](curandGenerator_t g, double *p, size_t n) { return curandGenerateNormalDouble(g, p, n, -0.5, 0.25); });
    mtgp32<float>(prefix, "lognormal", host,
        [](curandGenerator_t g, float *p, size_t n) { return curandGenerateLogNormal(g, p, n, 0.5f, 0.75f); });
}

static void script(const char *prefix, curandRngType_t type, bool host, bool wide) {
    if (wide)
        distribution<unsigned long long>(prefix, "bits", type, host,
            [](curandGenerator_t g, unsigned long long *p, size_t n) { return curandGenerateLongLong(g, p, n); });
    else
        distribution<unsigned>(prefix, "bits", type, host,
            [](curandGenerator_t g, unsigned *p, size_t n) { return curandGenerate(g, p, n); });
    distribution<float>(prefix, "uniform", type, host,
        [](curandGenerator_t g, float *p, size_t n) { return curandGenerateUniform(g, p, n); });
    distribution<double>(prefix, "udouble", type, host,
        [](curandGenerator_t g, double *p, size_t n) { return curandGenerateUniformDouble(g, p, n); });
    distribution<float>(prefix, "normal", type, host,
        [](curandGenerator_t g, float *p, size_t n) { return curandGenerateNormal(g, p, n, 1.5f, 2.0f); });
    distribution<double>(prefix, "ndouble", type, host,
        [](curandGenerator_t g, double *p, size_t n) { return curandGenerateNormalDouble(g, p, n, -0.5, 0.25); });
    distribution<float>(prefix, "lognormal", type, host,
        [](curandGenerator_t g, float *p, size_t n) { return curandGenerateLogNormal(g, p, n, 0.5f, 0.75f); });
    distribution<double>(prefix, "lndouble", type, host,
        [](curandGenerator_t g, double *p, size_t n) { return curandGenerateLogNormalDouble(g, p, n, 0.25, 0.5); });
}

int main(int argc, char **argv) {
    if (argc < 2) { std::fprintf(stderr, "usage: %s OUTDIR [host-only]\n", argv[0]); return 2; }
    dir = argv[1];
    bool host_only = argc > 2 && std::strcmp(argv[2], "host-only") == 0;

    // NVIDIA's tables: the first 64 dimensions of each set, and their scramble constants
    curandDirectionVectors32_t *v32;
    curandDirectionVectors64_t *v64;
    unsigned *c32;
    unsigned long long *c64;
    CHECK(curandGetDirectionVectors32(&v32, CURAND_DIRECTION_VECTORS_32_JOEKUO6));
    dump("vectors32", v32, 64 * sizeof *v32);
    CHECK(curandGetDirectionVectors32(&v32, CURAND_SCRAMBLED_DIRECTION_VECTORS_32_JOEKUO6));
    dump("scrambled_vectors32", v32, 64 * sizeof *v32);
    CHECK(curandGetDirectionVectors64(&v64, CURAND_DIRECTION_VECTORS_64_JOEKUO6));
    dump("vectors64", v64, 64 * sizeof *v64);
    CHECK(curandGetDirectionVectors64(&v64, CURAND_SCRAMBLED_DIRECTION_VECTORS_64_JOEKUO6));
    dump("scrambled_vectors64", v64, 64 * sizeof *v64);
    CHECK(curandGetScrambleConstants32(&c32));
    dump("constants32", c32, 64 * sizeof *c32);
    CHECK(curandGetScrambleConstants64(&c64));
    dump("constants64", c64, 64 * sizeof *c64);
    // the last dimension of each set
    CHECK(curandGetDirectionVectors64(&v64, CURAND_SCRAMBLED_DIRECTION_VECTORS_64_JOEKUO6));
    dump("scrambled_vectors64_last", v64 + 19999, sizeof *v64);

    const struct { const char *name; curandRngType_t type; bool wide; } gens[] = {
        {"sobol32", CURAND_RNG_QUASI_SOBOL32, false}, {"scrambled32", CURAND_RNG_QUASI_SCRAMBLED_SOBOL32, false},
        {"sobol64", CURAND_RNG_QUASI_SOBOL64, true}, {"scrambled64", CURAND_RNG_QUASI_SCRAMBLED_SOBOL64, true}};
    for (const auto &gen : gens)
        for (int host = host_only ? 1 : 0; host < 2; host++) {
            char prefix[64];
            std::snprintf(prefix, sizeof prefix, "%s_%s", gen.name, host ? "host" : "device");
            script(prefix, gen.type, host, gen.wide);
        }

    for (int host = host_only ? 1 : 0; host < 2; host++) mtgp32_script(host ? "mtgp32_host" : "mtgp32_device", host);

    // Poisson values (lambda 5) of MTGP32 and of Sobol32 (1 dimension): the distribution only,
    // not NVIDIA's sequence
    {
        const size_t np = 200000;
        unsigned *pv = buffer<unsigned>(true, np);
        curandGenerator_t pg;
        CHECK(curandCreateGeneratorHost(&pg, CURAND_RNG_PSEUDO_MTGP32));
        CHECK(curandGeneratePoisson(pg, pv, np, 5.0));
        dump("poisson_mtgp32", pv, np * sizeof(unsigned));
        CHECK(curandDestroyGenerator(pg));
        CHECK(curandCreateGeneratorHost(&pg, CURAND_RNG_QUASI_SOBOL32));
        CHECK(curandGeneratePoisson(pg, pv, np, 5.0));
        dump("poisson_sobol32", pv, np * sizeof(unsigned));
        CHECK(curandDestroyGenerator(pg));
        std::free(pv);
    }

    // QUASI_DEFAULT is SOBOL32 with 1 dimension; the statuses of what quasi generators refuse
    curandGenerator_t g;
    unsigned u[8];
    unsigned long long ll[8];
    float f[8];
    CHECK(curandCreateGeneratorHost(&g, CURAND_RNG_QUASI_DEFAULT));
    CHECK(curandGenerate(g, u, 8));
    dump("quasi_default", u, sizeof u);
    status("dimensions_0", curandSetQuasiRandomGeneratorDimensions(g, 0));
    status("dimensions_20000", curandSetQuasiRandomGeneratorDimensions(g, 20000));
    status("dimensions_20001", curandSetQuasiRandomGeneratorDimensions(g, 20001));
    status("seed_on_quasi", curandSetPseudoRandomGeneratorSeed(g, 5));
    status("ordering_pseudo_on_quasi", curandSetGeneratorOrdering(g, CURAND_ORDERING_PSEUDO_DEFAULT));
    status("ordering_quasi", curandSetGeneratorOrdering(g, CURAND_ORDERING_QUASI_DEFAULT));
    CHECK(curandSetQuasiRandomGeneratorDimensions(g, 3));
    status("length_not_multiple", curandGenerateUniform(g, f, 5));
    status("long_long_on_sobol32", curandGenerateLongLong(g, ll, 6));
    status("seeds", curandGenerateSeeds(g));
    CHECK(curandDestroyGenerator(g));
    CHECK(curandCreateGeneratorHost(&g, CURAND_RNG_QUASI_SOBOL64));
    status("generate_on_sobol64", curandGenerate(g, u, 4));
    status("long_long_on_sobol64", curandGenerateLongLong(g, ll, 4));
    CHECK(curandDestroyGenerator(g));
    CHECK(curandCreateGeneratorHost(&g, CURAND_RNG_PSEUDO_MTGP32));
    status("mtgp32_offset", curandSetGeneratorOffset(g, 5));
    status("mtgp32_seeded", curandSetGeneratorOrdering(g, CURAND_ORDERING_PSEUDO_SEEDED));
    status("mtgp32_legacy", curandSetGeneratorOrdering(g, CURAND_ORDERING_PSEUDO_LEGACY));
    status("mtgp32_dimensions", curandSetQuasiRandomGeneratorDimensions(g, 2));
    status("mtgp32_normal_odd", curandGenerateNormal(g, f, 3, 0.f, 1.f));
    status("mtgp32_long_long", curandGenerateLongLong(g, ll, 4));
    CHECK(curandDestroyGenerator(g));
    status("vectors32_set_103", curandGetDirectionVectors32(&v32, (curandDirectionVectorSet_t)103));
    status("vectors64_set_101", curandGetDirectionVectors64(&v64, (curandDirectionVectorSet_t)101));
    std::printf("done\n");
    return 0;
}
