/* cpuify's cuRAND host API on the CPU: curandCreateGenerator(Host), seeds, offsets,
 * orderings, dimensions, and the 32/64-bit, uniform, normal, log-normal and Poisson generation
 * functions for the XORWOW, Philox4x32-10, MRG32k3a, MTGP32 (curand_mtgp32.h) and MT19937
 * (curand_mt19937.h) generators and the four Sobol quasi-random ones (curand_sobol.h, also
 * curandGetDirectionVectors32/64 and curandGetScrambleConstants32/64).  This file is the API;
 * the generators' states and the distributions are curand_distributions.c's (curand_internal.h:
 * what the two share).
 *
 * The values are NVIDIA's.  Each generator is the device API's (curand_kernel.h):
 * curand_init(seed, subsequence, offset) state, skip-ahead by subsequence (XORWOW 2^67,
 * Philox 2^66, MRG32k3a 2^76 draws), and the device API's transforms (_curand_uniform,
 * the hq double uniform, Box-Muller as in curand_normal.h).  The host API lays the draws
 * of T subsequences out in memory ("CURAND_ORDERING_PSEUDO_DEFAULT"); cpuify's layout is
 * the one NVIDIA's libcurand host generator has, established value by value against it:
 *
 *   - a generator keeps a counter G, the offset at first (curandSetGeneratorOffset sets it,
 *     a new seed keeps it);
 *   - a call fills its output with groups of K results from C draws: group g comes from
 *     subsequence g mod T, "row" g / T of it;
 *   - XORWOW (T = 4096) and MRG32k3a (T = 81920, 4096 with the legacy ordering): one
 *     result per group (C = 1; a uniform double of XORWOW takes C = 2 draws), normals in
 *     pairs (K = 2, C = 2; a double pair of XORWOW takes 4 draws); G counts groups; each
 *     subsequence goes on from the draw where its last group ended, and the rows before G
 *     at the offset (or at a new seed) skip one draw each;
 *   - Philox4x32-10 (T = 65536): always 4 results per group (C = 4, 8 for doubles) from
 *     draws row * C ..., and G counts results, so a call may start or end inside a group.
 *
 * Single-precision normals use logf/sinf/cosf of the C library as NVIDIA's host generator
 * does; a kernel's curand_normal (__sincosf on the GPU) may differ in the last bits.
 * Poisson values follow the Poisson distribution (inversion of its CDF, one draw per value,
 * lambda in (0, 400000] as NVIDIA's) but are not NVIDIA's sequence, whose method is not
 * documented.
 *
 * Generation runs at the call through cpuify's workers, after the work before it on the
 * generator's stream (curandSetStream; mathlib_internal.h), so the results are ready on
 * return. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "curand_internal.h"

/* the cuRAND release whose host generators cpuify's reproduce (curand.h 10.4.5) */
#define CPUIFY_CURAND_MAJOR 10
#define CPUIFY_CURAND_MINOR 4
#define CPUIFY_CURAND_PATCH 5

/* ------------------------------------------------------------------------------------ */
/* Generators                                                                            */

static pthread_mutex_t live_lock = PTHREAD_MUTEX_INITIALIZER;
static struct curandGenerator_st *live;

/* a generator made by curandCreateGenerator(Host) and not yet destroyed */
int cpuify_curand_is_live(curandGenerator_t g) {
    int found = 0;
    pthread_mutex_lock(&live_lock);
    for (struct curandGenerator_st *p = live; p && !found; p = p->next_live) found = p == g;
    pthread_mutex_unlock(&live_lock);
    return found && g->magic == GENERATOR_MAGIC;
}

static void say_once(int *said, const char *fmt, const char *what) {
    if (__atomic_exchange_n(said, 1, __ATOMIC_RELAXED)) return;
    fprintf(stderr, fmt, what);
}

static const char *type_name(curandRngType_t t) {
    switch (t) {
    case CURAND_RNG_PSEUDO_MTGP32: return "CURAND_RNG_PSEUDO_MTGP32";
    case CURAND_RNG_PSEUDO_MT19937: return "CURAND_RNG_PSEUDO_MT19937";
    case CURAND_RNG_QUASI_DEFAULT: return "CURAND_RNG_QUASI_DEFAULT";
    case CURAND_RNG_QUASI_SOBOL32: return "CURAND_RNG_QUASI_SOBOL32";
    case CURAND_RNG_QUASI_SCRAMBLED_SOBOL32: return "CURAND_RNG_QUASI_SCRAMBLED_SOBOL32";
    case CURAND_RNG_QUASI_SOBOL64: return "CURAND_RNG_QUASI_SOBOL64";
    case CURAND_RNG_QUASI_SCRAMBLED_SOBOL64: return "CURAND_RNG_QUASI_SCRAMBLED_SOBOL64";
    case CURAND_RNG_TEST: return "CURAND_RNG_TEST";
    default: return NULL;
    }
}

static curandStatus_t create(curandGenerator_t *generator, curandRngType_t rng_type, int host, const char *api) {
    if (!generator) return CURAND_STATUS_NOT_INITIALIZED;
    if (rng_type == CURAND_RNG_PSEUDO_DEFAULT) rng_type = CURAND_RNG_PSEUDO_XORWOW;
    if (rng_type == CURAND_RNG_QUASI_DEFAULT) rng_type = CURAND_RNG_QUASI_SOBOL32;
    if (rng_type != CURAND_RNG_PSEUDO_XORWOW && rng_type != CURAND_RNG_PSEUDO_PHILOX4_32_10 &&
        rng_type != CURAND_RNG_PSEUDO_MRG32K3A && rng_type != CURAND_RNG_PSEUDO_MTGP32 &&
        rng_type != CURAND_RNG_PSEUDO_MT19937 && !is_quasi(rng_type)) {
        const char *name = type_name(rng_type);
        if (name)
            fprintf(stderr, "cpuify: %s: the %s generator is not supported by cpuify's cuRAND (XORWOW, "
                    "PHILOX4_32_10, MRG32K3A, MTGP32, MT19937 and the SOBOL ones are); returning "
                    "CURAND_STATUS_TYPE_ERROR\n", api, name);
        return CURAND_STATUS_TYPE_ERROR;
    }
    curandStatus_t st = cpuify_curand_tables(rng_type, api);
    if (st != CURAND_STATUS_SUCCESS) return st;
    struct curandGenerator_st *g = calloc(1, sizeof *g);
    if (!g) return CURAND_STATUS_ALLOCATION_FAILED;
    g->magic = GENERATOR_MAGIC;
    g->type = rng_type;
    g->host = host;
    g->ordering = is_quasi(rng_type) ? CURAND_ORDERING_QUASI_DEFAULT : CURAND_ORDERING_PSEUDO_DEFAULT;
    g->dimensions = 1;
    pthread_mutex_lock(&live_lock);
    g->next_live = live;
    live = g;
    pthread_mutex_unlock(&live_lock);
    *generator = g;
    return CURAND_STATUS_SUCCESS;
}

curandStatus_t curandCreateGenerator(curandGenerator_t *generator, curandRngType_t rng_type) {
    return create(generator, rng_type, 0, "curandCreateGenerator");
}

curandStatus_t curandCreateGeneratorHost(curandGenerator_t *generator, curandRngType_t rng_type) {
    return create(generator, rng_type, 1, "curandCreateGeneratorHost");
}

void cpuify_curand_drop_states(curandGenerator_t g) {
    free(g->base);
    free(g->now);
    free(g->now_pos);
    free(g->next_pos);
    g->base = g->now = NULL;
    g->now_pos = g->next_pos = NULL;
    g->threads = 0;
}

curandStatus_t curandDestroyGenerator(curandGenerator_t generator) {
    int found = 0;
    pthread_mutex_lock(&live_lock);
    for (struct curandGenerator_st **p = &live; *p; p = &(*p)->next_live)
        if (*p == generator) {
            *p = generator->next_live;
            found = 1;
            break;
        }
    pthread_mutex_unlock(&live_lock);
    if (!found) return CURAND_STATUS_NOT_INITIALIZED;
    cpuify_curand_drop_states(generator);
    generator->magic = 0;
    free(generator);
    return CURAND_STATUS_SUCCESS;
}

curandStatus_t curandGetVersion(int *version) {
    if (!version) return CURAND_STATUS_OUT_OF_RANGE;
    *version = CPUIFY_CURAND_MAJOR * 1000 + CPUIFY_CURAND_MINOR * 100 + CPUIFY_CURAND_PATCH;
    return CURAND_STATUS_SUCCESS;
}

curandStatus_t curandGetProperty(libraryPropertyType type, int *value) {
    if (!value) return CURAND_STATUS_OUT_OF_RANGE;
    switch (type) {
    case MAJOR_VERSION: *value = CPUIFY_CURAND_MAJOR; return CURAND_STATUS_SUCCESS;
    case MINOR_VERSION: *value = CPUIFY_CURAND_MINOR; return CURAND_STATUS_SUCCESS;
    case PATCH_LEVEL: *value = CPUIFY_CURAND_PATCH; return CURAND_STATUS_SUCCESS;
    default: return CURAND_STATUS_OUT_OF_RANGE;
    }
}

curandStatus_t curandSetStream(curandGenerator_t generator, cudaStream_t stream) {
    if (!cpuify_curand_is_live(generator)) return CURAND_STATUS_NOT_INITIALIZED;
    generator->stream = stream;     /* (generation waits for the stream's work before it) */
    return CURAND_STATUS_SUCCESS;
}

curandStatus_t curandSetPseudoRandomGeneratorSeed(curandGenerator_t generator, unsigned long long seed) {
    if (!cpuify_curand_is_live(generator)) return CURAND_STATUS_NOT_INITIALIZED;
    if (is_quasi(generator->type)) return CURAND_STATUS_TYPE_ERROR;
    generator->seed = seed;         /* the position (counter) stays, as with NVIDIA's, */
    if (generator->type == CURAND_RNG_PSEUDO_MTGP32 || generator->type == CURAND_RNG_PSEUDO_MT19937)
        generator->counter = 0;     /* but MTGP32's and MT19937's */
    cpuify_curand_drop_states(generator);
    return CURAND_STATUS_SUCCESS;
}

curandStatus_t curandSetGeneratorOffset(curandGenerator_t generator, unsigned long long offset) {
    if (!cpuify_curand_is_live(generator)) return CURAND_STATUS_NOT_INITIALIZED;
    if (generator->type == CURAND_RNG_PSEUDO_MTGP32 || generator->type == CURAND_RNG_PSEUDO_MT19937)
        return CURAND_STATUS_TYPE_ERROR;        /* as NVIDIA's */
    generator->counter = offset;
    if (generator->next_pos) cpuify_curand_start_positions(generator);
    return CURAND_STATUS_SUCCESS;
}

curandStatus_t curandSetGeneratorOrdering(curandGenerator_t generator, curandOrdering_t order) {
    static int said_seeded;
    if (!cpuify_curand_is_live(generator)) return CURAND_STATUS_NOT_INITIALIZED;
    if (is_quasi(generator->type))
        return order == CURAND_ORDERING_QUASI_DEFAULT ? CURAND_STATUS_SUCCESS : CURAND_STATUS_OUT_OF_RANGE;
    /* NVIDIA's MT19937 takes the default and legacy orderings only (the same layout) */
    if (generator->type == CURAND_RNG_PSEUDO_MT19937) {
        if (order != CURAND_ORDERING_PSEUDO_DEFAULT && order != CURAND_ORDERING_PSEUDO_LEGACY)
            return CURAND_STATUS_OUT_OF_RANGE;
        if (order != generator->ordering) {     /* a change starts the sequence again, as NVIDIA's */
            generator->ordering = order;
            generator->counter = 0;
            cpuify_curand_drop_states(generator);
        }
        return CURAND_STATUS_SUCCESS;
    }
    switch (order) {
    case CURAND_ORDERING_PSEUDO_BEST:
    case CURAND_ORDERING_PSEUDO_DEFAULT:
    case CURAND_ORDERING_PSEUDO_LEGACY:
        break;
    case CURAND_ORDERING_PSEUDO_DYNAMIC:
        /* NVIDIA's host generators refuse it; a device generator may lay results out as suits
         * the device: cpuify's layout is the default one */
        if (generator->host) return CURAND_STATUS_OUT_OF_RANGE;
        order = CURAND_ORDERING_PSEUDO_DEFAULT;
        break;
    case CURAND_ORDERING_PSEUDO_SEEDED:
        if (generator->type != CURAND_RNG_PSEUDO_XORWOW) return CURAND_STATUS_OUT_OF_RANGE;
        say_once(&said_seeded, "cpuify: %s: cpuify's cuRAND gives XORWOW's default ordering in place of "
                 "the seeded one (the values differ from NVIDIA's seeded ones)\n", "curandSetGeneratorOrdering");
        order = CURAND_ORDERING_PSEUDO_DEFAULT;
        break;
    default:
        return CURAND_STATUS_OUT_OF_RANGE;
    }
    if (order != generator->ordering) {
        generator->ordering = order;
        cpuify_curand_drop_states(generator);
    }
    return CURAND_STATUS_SUCCESS;
}

curandStatus_t curandSetQuasiRandomGeneratorDimensions(curandGenerator_t generator, unsigned int num_dimensions) {
    if (!cpuify_curand_is_live(generator)) return CURAND_STATUS_NOT_INITIALIZED;
    if (!is_quasi(generator->type)) return CURAND_STATUS_TYPE_ERROR;
    if (num_dimensions < 1 || num_dimensions > SOBOL_DIMENSIONS) return CURAND_STATUS_OUT_OF_RANGE;
    generator->dimensions = num_dimensions;     /* the position (points so far) stays, as NVIDIA's */
    return CURAND_STATUS_SUCCESS;
}

/* the generation functions: the generator checked, the work in curand_distributions.c */
static curandStatus_t generate(curandGenerator_t g, distribution dist, void *out, size_t n, const char *api,
                               double mean, double stddev, double lambda) {
    if (!cpuify_curand_is_live(g)) return CURAND_STATUS_NOT_INITIALIZED;
    return cpuify_curand_generate(g, dist, out, n, api, mean, stddev, lambda);
}

curandStatus_t curandGenerate(curandGenerator_t generator, unsigned int *outputPtr, size_t num) {
    return generate(generator, DIST_BITS, outputPtr, num, "curandGenerate", 0, 0, 0);
}

curandStatus_t curandGenerateLongLong(curandGenerator_t generator, unsigned long long *outputPtr, size_t num) {
    return generate(generator, DIST_BITS64, outputPtr, num, "curandGenerateLongLong", 0, 0, 0);
}

curandStatus_t curandGenerateUniform(curandGenerator_t generator, float *outputPtr, size_t num) {
    return generate(generator, DIST_UNIFORM, outputPtr, num, "curandGenerateUniform", 0, 0, 0);
}

curandStatus_t curandGenerateUniformDouble(curandGenerator_t generator, double *outputPtr, size_t num) {
    return generate(generator, DIST_UNIFORM_DOUBLE, outputPtr, num, "curandGenerateUniformDouble", 0, 0, 0);
}

curandStatus_t curandGenerateNormal(curandGenerator_t generator, float *outputPtr, size_t n, float mean,
                                    float stddev) {
    return generate(generator, DIST_NORMAL, outputPtr, n, "curandGenerateNormal", mean, stddev, 0);
}

curandStatus_t curandGenerateNormalDouble(curandGenerator_t generator, double *outputPtr, size_t n, double mean,
                                          double stddev) {
    return generate(generator, DIST_NORMAL_DOUBLE, outputPtr, n, "curandGenerateNormalDouble", mean, stddev, 0);
}

curandStatus_t curandGenerateLogNormal(curandGenerator_t generator, float *outputPtr, size_t n, float mean,
                                       float stddev) {
    return generate(generator, DIST_LOG_NORMAL, outputPtr, n, "curandGenerateLogNormal", mean, stddev, 0);
}

curandStatus_t curandGenerateLogNormalDouble(curandGenerator_t generator, double *outputPtr, size_t n,
                                             double mean, double stddev) {
    return generate(generator, DIST_LOG_NORMAL_DOUBLE, outputPtr, n, "curandGenerateLogNormalDouble", mean,
                    stddev, 0);
}

curandStatus_t curandGeneratePoisson(curandGenerator_t generator, unsigned int *outputPtr, size_t n,
                                     double lambda) {
    if (!cpuify_curand_is_live(generator)) return CURAND_STATUS_NOT_INITIALIZED;
    if (!(lambda > 0.0 && lambda <= 400000.0)) return CURAND_STATUS_OUT_OF_RANGE;    /* NVIDIA's range */
    return generate(generator, DIST_POISSON, outputPtr, n, "curandGeneratePoisson", 0, 0, lambda);
}

curandStatus_t curandGenerateSeeds(curandGenerator_t generator) {
    if (!cpuify_curand_is_live(generator)) return CURAND_STATUS_NOT_INITIALIZED;
    return cpuify_curand_make_states(generator);
}

/* what cpuify's cuRAND does not provide: one line naming the function, once */
static curandStatus_t not_supported(const char *fn, int *said) {
    say_once(said, "cpuify: %s is not supported by cpuify's cuRAND (the host API's XORWOW, PHILOX4_32_10 "
             "and MRG32K3A generators are); returning CURAND_STATUS_ARCH_MISMATCH\n", fn);
    return CURAND_STATUS_ARCH_MISMATCH;
}

#define NOT_SUPPORTED(name, ...)                                       \
    curandStatus_t name(__VA_ARGS__) {                                 \
        static int said;                                               \
        return not_supported(#name, &said);                            \
    }

NOT_SUPPORTED(curandCreatePoissonDistribution, double lambda, void **discrete_distribution)
NOT_SUPPORTED(curandDestroyDistribution, void *discrete_distribution)
NOT_SUPPORTED(curandGeneratePoissonMethod, curandGenerator_t generator, unsigned int *outputPtr, size_t n,
              double lambda, int method)
NOT_SUPPORTED(curandGenerateBinomial, curandGenerator_t generator, unsigned int *outputPtr, size_t num,
              unsigned int n, double p)
NOT_SUPPORTED(curandGenerateBinomialMethod, curandGenerator_t generator, unsigned int *outputPtr, size_t num,
              unsigned int n, double p, int method)

