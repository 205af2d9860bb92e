/* cpuify's cuRAND host API: what its two files share.  curand.c is the API (generators made,
 * destroyed and set up, the generation functions' checks); curand_distributions.c makes the
 * generators' states and computes the distributions (with curand_generators.h, curand_sobol.h
 * and curand_mtgp32.h, included there only: they hold the tables, made once).  Programs
 * include NVIDIA's curand.h; the types here are its types and values (libcurand's ABI). */
#ifndef CPUIFY_CURAND_INTERNAL_H
#define CPUIFY_CURAND_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

/* curand.h's types and values (the ABI of libcurand; programs include NVIDIA's header) */
typedef enum {
    CURAND_STATUS_SUCCESS = 0,
    CURAND_STATUS_VERSION_MISMATCH = 100,
    CURAND_STATUS_NOT_INITIALIZED = 101,
    CURAND_STATUS_ALLOCATION_FAILED = 102,
    CURAND_STATUS_TYPE_ERROR = 103,
    CURAND_STATUS_OUT_OF_RANGE = 104,
    CURAND_STATUS_LENGTH_NOT_MULTIPLE = 105,
    CURAND_STATUS_DOUBLE_PRECISION_REQUIRED = 106,
    CURAND_STATUS_LAUNCH_FAILURE = 201,
    CURAND_STATUS_PREEXISTING_FAILURE = 202,
    CURAND_STATUS_INITIALIZATION_FAILED = 203,
    CURAND_STATUS_ARCH_MISMATCH = 204,
    CURAND_STATUS_INTERNAL_ERROR = 999
} curandStatus_t;

typedef enum {
    CURAND_RNG_TEST = 0,
    CURAND_RNG_PSEUDO_DEFAULT = 100,
    CURAND_RNG_PSEUDO_XORWOW = 101,
    CURAND_RNG_PSEUDO_MRG32K3A = 121,
    CURAND_RNG_PSEUDO_MTGP32 = 141,
    CURAND_RNG_PSEUDO_MT19937 = 142,
    CURAND_RNG_PSEUDO_PHILOX4_32_10 = 161,
    CURAND_RNG_QUASI_DEFAULT = 200,
    CURAND_RNG_QUASI_SOBOL32 = 201,
    CURAND_RNG_QUASI_SCRAMBLED_SOBOL32 = 202,
    CURAND_RNG_QUASI_SOBOL64 = 203,
    CURAND_RNG_QUASI_SCRAMBLED_SOBOL64 = 204
} curandRngType_t;

typedef enum {
    CURAND_ORDERING_PSEUDO_BEST = 100,
    CURAND_ORDERING_PSEUDO_DEFAULT = 101,
    CURAND_ORDERING_PSEUDO_SEEDED = 102,
    CURAND_ORDERING_PSEUDO_LEGACY = 103,
    CURAND_ORDERING_PSEUDO_DYNAMIC = 104,
    CURAND_ORDERING_QUASI_DEFAULT = 201
} curandOrdering_t;

typedef enum { MAJOR_VERSION, MINOR_VERSION, PATCH_LEVEL } libraryPropertyType;

#define SOBOL_DIMENSIONS 20000  /* of the Sobol generators (NVIDIA's tables) */

#define GENERATOR_MAGIC 0x63755244u     /* "cuRD" */

struct curandGenerator_st {
    uint32_t magic;
    curandRngType_t type;   /* XORWOW, PHILOX4_32_10, MRG32K3A or one of the four SOBOLs */
    int host;               /* curandCreateGeneratorHost */
    uint64_t seed;
    uint64_t counter;       /* G: groups (XORWOW, MRG32k3a), results (Philox) or points (Sobol) so far */
    uint32_t dimensions;    /* Sobol: curandSetQuasiRandomGeneratorDimensions (1 at first) */
    curandOrdering_t ordering;
    void *stream;
    /* the subsequences' states (XORWOW, MRG32k3a), made at the first generation after a
     * seed or ordering change: base[t] at draw 0, now[t] at draw now_pos[t]; subsequence
     * t's next group starts at draw next_pos[t] */
    uint32_t threads;
    void *base, *now;
    uint64_t *now_pos, *next_pos;
    struct curandGenerator_st *next_live;
};
typedef struct curandGenerator_st *curandGenerator_t;
typedef void *cudaStream_t;

static inline int is_quasi(curandRngType_t t) {
    return t >= CURAND_RNG_QUASI_SOBOL32 && t <= CURAND_RNG_QUASI_SCRAMBLED_SOBOL64;
}

static inline int is_sobol64(curandRngType_t t) {
    return t == CURAND_RNG_QUASI_SOBOL64 || t == CURAND_RNG_QUASI_SCRAMBLED_SOBOL64;
}

/* what a generation function asks for */
typedef enum { DIST_BITS, DIST_BITS64, DIST_UNIFORM, DIST_UNIFORM_DOUBLE, DIST_NORMAL, DIST_NORMAL_DOUBLE,
               DIST_LOG_NORMAL, DIST_LOG_NORMAL_DOUBLE, DIST_POISSON } distribution;

#define CPUIFY_CURAND_INTERNAL __attribute__((visibility("hidden")))

/* curand.c: whether g was made and not destroyed; g's subsequence states dropped (made again
 * at the next generation: a new seed or ordering) */
CPUIFY_CURAND_INTERNAL int cpuify_curand_is_live(curandGenerator_t g);
CPUIFY_CURAND_INTERNAL void cpuify_curand_drop_states(curandGenerator_t g);

/* curand_distributions.c: the tables a generator of `type` needs, made once (the status;
 * a message naming `api` says why not); g's states made (curandGenerateSeeds, or at the first
 * generation); the subsequences' next positions after the counter changed (an offset); `n`
 * results of `dist` generated into `out` (g is live: the caller checked; the type and length
 * are checked here), after the work before them on g's stream. */
CPUIFY_CURAND_INTERNAL curandStatus_t cpuify_curand_tables(curandRngType_t type, const char *api);
CPUIFY_CURAND_INTERNAL curandStatus_t cpuify_curand_make_states(curandGenerator_t g);
CPUIFY_CURAND_INTERNAL void cpuify_curand_start_positions(curandGenerator_t g);
CPUIFY_CURAND_INTERNAL curandStatus_t cpuify_curand_generate(curandGenerator_t g, distribution dist, void *out,
                                                             size_t n, const char *api, double mean,
                                                             double stddev, double lambda);

#endif /* CPUIFY_CURAND_INTERNAL_H */
