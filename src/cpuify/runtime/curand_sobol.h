/* cpuify's cuRAND (curand_distributions.c): the Sobol quasi-random generators and where their tables come from.
 *
 * The direction vectors (S. Joe and F. Y. Kuo's, 20,000 dimensions, 32- and 64-bit, plain and
 * scrambled) and the scramble constants are NVIDIA's data, not derived from a documented
 * construction: cpuify does not carry them.  They are read at run time from NVIDIA's own
 * libcurand.so.10 (the nvidia-curand wheel, which a program including curand.h has installed):
 * it is loaded in a link-map namespace of its own (dlmopen), so that its CUDA runtime
 * (libcudart.so.13, which it needs to load) never mixes with cpuify's, and its
 * curandGetDirectionVectors32/64 and curandGetScrambleConstants32/64 give the tables.  Where it
 * is looked for: $CPUIFY_NVIDIA_LIBCURAND (only there, when set), else the wheel cpuify was set
 * up with (CPUIFY_NVIDIA_CURAND_DIRS, given at build time), then the loader's search path.
 *
 * A Sobol point is the gray-code XOR of direction vectors (curand_kernel.h's skipahead and
 * curand()); the transforms to uniforms are the device API's.  Normals are the inverse normal
 * CDF (sqrt(2) erfcinv(2p), mirrored at p = 1/2) as NVIDIA's host generator computes it
 * (its sign is the opposite of the device API's _curand_normal_icdf); erfcinv here is one
 * Halley step on the C library's erf/erfc from a cubic interpolation of a table this file
 * computes once, accurate to about an ulp of a double.
 *
 * curand_distributions.c includes this file after curand_internal.h (curand.h's types). */
#ifndef CPUIFY_CURAND_SOBOL_H
#define CPUIFY_CURAND_SOBOL_H

#define _GNU_SOURCE
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* NVIDIA's tables, from its libcurand: direction vectors [dimension][bit] and scramble constants */
typedef struct {
    const uint32_t *vectors32, *scrambled_vectors32, *constants32;
    const uint64_t *vectors64, *scrambled_vectors64, *constants64;
} sobol_tables;

static pthread_once_t sobol_once = PTHREAD_ONCE_INIT;
static sobol_tables sobol_nvidia;
static int sobol_ok;
static char sobol_why[1024];    /* why the tables are not there */

typedef int (*nvidia_vectors_fn)(void *vectors, int set);
typedef int (*nvidia_constants_fn)(void *constants);

/* NVIDIA's libcurand at `path` in a namespace of its own, or NULL (the cause appended to sobol_why) */
static void *sobol_open(const char *path) {
    void *h = dlmopen(LM_ID_NEWLM, path, RTLD_NOW | RTLD_LOCAL);
    size_t at = strlen(sobol_why);
    if (!h) {
        const char *e = dlerror();
        snprintf(sobol_why + at, sizeof sobol_why - at, "\n  %s", e ? e : path);
        return NULL;
    }
    if (dlsym(h, "cpuify_curand_not_supported_once")) {    /* cpuify's own libcurand: not NVIDIA's */
        snprintf(sobol_why + at, sizeof sobol_why - at, "\n  %s: cpuify's libcurand, not NVIDIA's", path);
        dlclose(h);
        return NULL;
    }
    return h;
}

static void sobol_load(void) {
    void *h = NULL;
    const char *env = getenv("CPUIFY_NVIDIA_LIBCURAND");
    if (env && *env) {
        h = sobol_open(env);
        goto loaded;
    }
#ifdef CPUIFY_NVIDIA_CURAND_DIRS
    static const char *const dirs[] = {CPUIFY_NVIDIA_CURAND_DIRS};
    for (size_t i = 0; !h && i < sizeof dirs / sizeof dirs[0]; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/libcurand.so.10", dirs[i]);
        h = sobol_open(path);
    }
#endif
    if (!h) h = sobol_open("libcurand.so.10");
loaded:
    if (!h) return;
    nvidia_vectors_fn v32 = (nvidia_vectors_fn)dlsym(h, "curandGetDirectionVectors32");
    nvidia_vectors_fn v64 = (nvidia_vectors_fn)dlsym(h, "curandGetDirectionVectors64");
    nvidia_constants_fn c32 = (nvidia_constants_fn)dlsym(h, "curandGetScrambleConstants32");
    nvidia_constants_fn c64 = (nvidia_constants_fn)dlsym(h, "curandGetScrambleConstants64");
    sobol_tables t;
    memset(&t, 0, sizeof t);
    /* curand.h: CURAND_(SCRAMBLED_)DIRECTION_VECTORS_32/64_JOEKUO6 = 101..104 */
    if (!v32 || !v64 || !c32 || !c64 || v32(&t.vectors32, 101) || v32(&t.scrambled_vectors32, 102) ||
        v64(&t.vectors64, 103) || v64(&t.scrambled_vectors64, 104) || c32(&t.constants32) ||
        c64(&t.constants64) || !t.vectors32 || !t.scrambled_vectors32 || !t.vectors64 ||
        !t.scrambled_vectors64 || !t.constants32 || !t.constants64) {
        size_t at = strlen(sobol_why);
        snprintf(sobol_why + at, sizeof sobol_why - at, "\n  the libcurand.so.10 loaded gave no Sobol tables");
        return;
    }
    sobol_nvidia = t;
    sobol_ok = 1;
}

/* NVIDIA's tables, or NULL after one line on stderr naming `api` and what to do */
static const sobol_tables *sobol_get(const char *api) {
    static int said;
    pthread_once(&sobol_once, sobol_load);
    if (sobol_ok) return &sobol_nvidia;
    if (!__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED))
        fprintf(stderr, "cpuify: %s: the Sobol direction vectors and scramble constants are NVIDIA's data, "
                "read at run time from NVIDIA's libcurand.so.10 (pip install 'cpuify[curand]', the "
                "nvidia-curand wheel, with nvidia-cuda-runtime for its libcudart.so.13), which did not "
                "load:%s\n  set CPUIFY_NVIDIA_LIBCURAND to its path; returning "
                "CURAND_STATUS_INITIALIZATION_FAILED\n", api, sobol_why);
    return NULL;
}

/* point i of a dimension (gray code, as curand_kernel.h's skipahead) */
static uint32_t sobol32_point(const uint32_t *v, uint32_t scramble, uint64_t i) {
    uint32_t gray = (uint32_t)(i ^ (i >> 1)), x = scramble;
    for (int k = 0; gray; k++, gray >>= 1)
        if (gray & 1u) x ^= v[k];
    return x;
}

static uint64_t sobol64_point(const uint64_t *v, uint64_t scramble, uint64_t i) {
    uint64_t gray = i ^ (i >> 1), x = scramble;
    for (int k = 0; gray; k++, gray >>= 1)
        if (gray & 1u) x ^= v[k];
    return x;
}

/* Halley steps (at most `steps`) towards erfcinv(a) from y: on erfc for a < 1/2, else on erf,
 * where erfc(y) - a would cancel */
static double erfcinv_refine(double a, double y, int steps) {
    const double two_over_sqrt_pi = 1.1283791670955126;
    double t = 1.0 - a;                         /* exact for a in [1/2, 2] */
    int tail = t > 0.5;
    for (int i = 0; i < steps; i++) {
        double f = tail ? erfc(y) - a : erf(y) - t;
        double fp = (tail ? -1.0 : 1.0) * two_over_sqrt_pi * exp(-y * y);
        if (f == 0.0 || fp == 0.0) break;
        double dy = f / fp;
        y -= dy / (1.0 + y * dy);
        if (fabs(dy) < 1e-6 * fabs(y)) break;      /* cubic convergence: now ~1e-18 off */
    }
    return y;
}

/* erfcinv(a) for a in (0, 3/2] from Winitzki's approximation (2e-3 off: two or three steps) */
static double erfcinv_slow(double a) {
    const double k = 0.147;
    double l = log(a * (2.0 - a));              /* log(1 - t^2), t = 1 - a */
    double b = 2.0 / (3.141592653589793 * k) + l / 2.0;
    double y = sqrt(sqrt(b * b - l / k) - b);
    return erfcinv_refine(a, a > 1.0 ? -y : y, 4);
}

/* Tables of erfcinv and its derivative for cubic Hermite interpolation (~1e-12 off, so that
 * one Halley step is exact): in t = 1 - a on [-1/2, 1/2] (step 1/1024), and in the tail
 * a < 1/2 in u = sqrt(-log a) from 0.8 (step 1/512, a down to ~1e-16) */
#define ERFCINV_CENTRAL 1024
#define ERFCINV_TAIL 2800
#define ERFCINV_TAIL_U0 0.8
static double erfcinv_central[ERFCINV_CENTRAL + 1][2], erfcinv_tail[ERFCINV_TAIL + 1][2];
static pthread_once_t erfcinv_once = PTHREAD_ONCE_INIT;

static void erfcinv_build(void) {
    const double half_sqrt_pi = 0.88622692545275801;
    for (int i = 0; i <= ERFCINV_CENTRAL; i++) {       /* dy/dt = sqrt(pi)/2 exp(y^2) */
        double t = -0.5 + (double)i / ERFCINV_CENTRAL, y = erfcinv_slow(1.0 - t);
        erfcinv_central[i][0] = y;
        erfcinv_central[i][1] = half_sqrt_pi * exp(y * y) / ERFCINV_CENTRAL;
    }
    for (int i = 0; i <= ERFCINV_TAIL; i++) {          /* dy/du = sqrt(pi) u exp(y^2 - u^2) */
        double u = ERFCINV_TAIL_U0 + i / 512.0, y = erfcinv_slow(exp(-u * u));
        erfcinv_tail[i][0] = y;
        erfcinv_tail[i][1] = 2.0 * half_sqrt_pi * u * exp(y * y - u * u) / 512.0;
    }
}

static double hermite(const double (*table)[2], int i, double s) {
    double s2 = s * s, s3 = s2 * s;
    return (2 * s3 - 3 * s2 + 1) * table[i][0] + (s3 - 2 * s2 + s) * table[i][1] +
           (3 * s2 - 2 * s3) * table[i + 1][0] + (s3 - s2) * table[i + 1][1];
}

/* erfcinv(a) for a in (0, 3/2], accurate to about an ulp */
static double sobol_erfcinv(double a) {
    pthread_once(&erfcinv_once, erfcinv_build);
    double t = 1.0 - a, x;
    if (t <= 0.5) {
        x = (t + 0.5) * ERFCINV_CENTRAL;
        int i = x < ERFCINV_CENTRAL ? (int)x : ERFCINV_CENTRAL - 1;
        if (i < 0) return erfcinv_slow(a);
        return erfcinv_refine(a, hermite(erfcinv_central, i, x - i), 1);
    }
    x = (sqrt(-log(a)) - ERFCINV_TAIL_U0) * 512.0;
    if (!(x >= 0 && x < ERFCINV_TAIL)) return erfcinv_slow(a);
    int i = (int)x;
    return erfcinv_refine(a, hermite(erfcinv_tail, i, x - i), 1);
}

/* the inverse normal CDF of NVIDIA's host generators, from 32 bits (float and double) */
static float sobol_normal_float(uint32_t x) {
    float s = -1.0f;
    if (x > 0x80000000u) {
        x = 0xffffffffu - x;
        s = 1.0f;
    }
    float p = x * 2.3283064e-10f + (2.3283064e-10f / 2.0f);
    float e = (float)sobol_erfcinv((double)(2.0f * p));
    return s * 1.4142135f * e;
}

static double sobol_normal_double32(uint32_t x) {
    double s = -1.0;
    if (x > 0x80000000u) {
        x = 0xffffffffu - x;
        s = 1.0;
    }
    double p = x * 2.3283064365386963e-10 + 2.3283064365386963e-10 / 2.0;
    return s * 1.4142135623730951 * sobol_erfcinv(2.0 * p);
}

/* from 64 bits: the top 53 */
static double sobol_normal_double64(uint64_t x) {
    double s = -1.0;
    x >>= 11;
    if (x > 0x10000000000000ull) {
        x = 0x1fffffffffffffull - x;
        s = 1.0;
    }
    double p = x * 1.1102230246251565e-16 + 1.1102230246251565e-16 / 2.0;
    return s * 1.4142135623730951 * sobol_erfcinv(2.0 * p);
}

/* curand.h's functions giving NVIDIA's tables, for the device API's curand_init of Sobol states */
curandStatus_t curandGetDirectionVectors32(const uint32_t (**vectors)[32], int set) {
    if (!vectors || (set != 101 && set != 102)) return CURAND_STATUS_OUT_OF_RANGE;
    const sobol_tables *t = sobol_get("curandGetDirectionVectors32");
    if (!t) return CURAND_STATUS_INITIALIZATION_FAILED;
    *vectors = (const uint32_t(*)[32])(set == 101 ? t->vectors32 : t->scrambled_vectors32);
    return CURAND_STATUS_SUCCESS;
}

curandStatus_t curandGetDirectionVectors64(const uint64_t (**vectors)[64], int set) {
    if (!vectors || (set != 103 && set != 104)) return CURAND_STATUS_OUT_OF_RANGE;
    const sobol_tables *t = sobol_get("curandGetDirectionVectors64");
    if (!t) return CURAND_STATUS_INITIALIZATION_FAILED;
    *vectors = (const uint64_t(*)[64])(set == 103 ? t->vectors64 : t->scrambled_vectors64);
    return CURAND_STATUS_SUCCESS;
}

curandStatus_t curandGetScrambleConstants32(const uint32_t **constants) {
    if (!constants) return CURAND_STATUS_OUT_OF_RANGE;
    const sobol_tables *t = sobol_get("curandGetScrambleConstants32");
    if (!t) return CURAND_STATUS_INITIALIZATION_FAILED;
    *constants = t->constants32;
    return CURAND_STATUS_SUCCESS;
}

curandStatus_t curandGetScrambleConstants64(const uint64_t **constants) {
    if (!constants) return CURAND_STATUS_OUT_OF_RANGE;
    const sobol_tables *t = sobol_get("curandGetScrambleConstants64");
    if (!t) return CURAND_STATUS_INITIALIZATION_FAILED;
    *constants = t->constants64;
    return CURAND_STATUS_SUCCESS;
}

#endif /* CPUIFY_CURAND_SOBOL_H */

