/* cpuify's cuRAND host API: the generators' states and the distributions (curand.c is the
 * API, curand_internal.h what both share).  How the values and their layout are NVIDIA's:
 * curand.c's header.  A generation runs through cpuify's workers (mathlib_internal.h), after
 * the work before it on the generator's stream. */
#define _GNU_SOURCE
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "curand_internal.h"
#include "curand_generators.h"
#include "curand_mtgp32.h"
#include "curand_sobol.h"
#include "mathlib_internal.h"

/* ------------------------------------------------------------------------------------ */
/* Tables and states                                                                     */

curandStatus_t cpuify_curand_tables(curandRngType_t type, const char *api) {
    if (type == CURAND_RNG_PSEUDO_MTGP32 && !MTGP32_AVAILABLE) {
        fprintf(stderr, "cpuify: %s: the CURAND_RNG_PSEUDO_MTGP32 generator needs NVIDIA's parameter sets "
                "(curand_mtgp32dc_p_11213.h of the nvidia-curand wheel) when cpuify's libcurand is built: "
                "pip install 'cpuify[curand]'; returning CURAND_STATUS_TYPE_ERROR\n", api);
        return CURAND_STATUS_TYPE_ERROR;
    }
    if (is_quasi(type) && !sobol_get(api)) return CURAND_STATUS_INITIALIZATION_FAILED;
    pthread_once(&tables_once, build_tables);
    return tables_ok ? CURAND_STATUS_SUCCESS : CURAND_STATUS_ALLOCATION_FAILED;
}

/* the number of subsequences whose draws a generator interleaves */
static uint32_t subsequences(const struct curandGenerator_st *g) {
    switch (g->type) {
    case CURAND_RNG_PSEUDO_XORWOW: return 4096;
    case CURAND_RNG_PSEUDO_MRG32K3A: return g->ordering == CURAND_ORDERING_PSEUDO_LEGACY ? 4096 : 81920;
    default: return 65536;
    }
}

/* XORWOW and MRG32k3a: where each subsequence's next group starts when the generator
 * stands at group G (the offset, or where a new seed finds it): past one draw for each of
 * its groups before G, whatever the distribution (as NVIDIA's generators skip the offset);
 * each group then takes its C draws */
void cpuify_curand_start_positions(curandGenerator_t g) {
    uint32_t T = g->threads;
    for (uint32_t t = 0; t < T; t++) g->next_pos[t] = g->counter / T + (t < g->counter % T ? 1 : 0);
}

/* XORWOW and MRG32k3a: the states of the subsequences at draw 0 (curand_init(seed, t, 0)) */
curandStatus_t cpuify_curand_make_states(curandGenerator_t g) {
    if (g->base || g->type == CURAND_RNG_PSEUDO_PHILOX4_32_10 || g->type == CURAND_RNG_PSEUDO_MT19937 ||
        is_quasi(g->type))      /* MT19937's are made as a call needs them (curand_mt19937.h) */
        return CURAND_STATUS_SUCCESS;
#if MTGP32_AVAILABLE
    if (g->type == CURAND_RNG_PSEUDO_MTGP32) {      /* the sets' states at value 0 */
        mtgp32_state *m = malloc(MTGP32_SETS * sizeof *m);
        if (!m) return CURAND_STATUS_ALLOCATION_FAILED;
        for (int set = 0; set < MTGP32_SETS; set++) mtgp32_seed(m + set, set, g->seed);
        g->base = m;
        return CURAND_STATUS_SUCCESS;
    }
#endif
    uint32_t n = subsequences(g);
    size_t size = g->type == CURAND_RNG_PSEUDO_XORWOW ? sizeof(xorwow_state) : sizeof(mrg_state);
    g->base = malloc(n * size);
    g->now = malloc(n * size);
    g->now_pos = calloc(n, sizeof(uint64_t));
    g->next_pos = calloc(n, sizeof(uint64_t));
    if (!g->base || !g->now || !g->now_pos || !g->next_pos) {
        cpuify_curand_drop_states(g);
        return CURAND_STATUS_ALLOCATION_FAILED;
    }
    g->threads = n;
    if (g->type == CURAND_RNG_PSEUDO_XORWOW) {
        xorwow_state *b = g->base;
        uint32_t s0 = (uint32_t)g->seed ^ 0xaad26b49u, s1 = (uint32_t)(g->seed >> 32) ^ 0xf7dcefddu;
        uint32_t t0 = 1099087573u * s0, t1 = 2591861531u * s1;
        b[0].d = 6615241u + t1 + t0;
        b[0].v[0] = 123456789u + t0;
        b[0].v[1] = 362436069u ^ t0;
        b[0].v[2] = 521288629u + t1;
        b[0].v[3] = 88675123u ^ t1;
        b[0].v[4] = 5783321u + t0;
        for (uint32_t t = 1; t < n; t++) {   /* the Weyl counter moves by 362437 * 2^67 = 0 */
            b[t] = b[t - 1];
            xorwow_apply(xorwow_subsequence_pow[0], b[t].v);
        }
    } else {
        mrg_state *b = g->base;
        for (int i = 0; i < 3; i++) b[0].s1[i] = b[0].s2[i] = 12345u;
        if (g->seed) {
            uint64_t x1 = (uint32_t)g->seed ^ 0x55555555u, x2 = (uint32_t)((g->seed >> 32) ^ 0xAAAAAAAAu);
            b[0].s1[0] = (uint32_t)(x1 * 12345u % MRG_M1);
            b[0].s1[1] = (uint32_t)(x2 * 12345u % MRG_M1);
            b[0].s1[2] = (uint32_t)(x1 * 12345u % MRG_M1);
            b[0].s2[0] = (uint32_t)(x2 * 12345u % MRG_M2);
            b[0].s2[1] = (uint32_t)(x1 * 12345u % MRG_M2);
            b[0].s2[2] = (uint32_t)(x2 * 12345u % MRG_M2);
        }
        for (uint32_t t = 1; t < n; t++) {
            b[t] = b[t - 1];
            mrg_apply(mrg_pow1[76], b[t].s1, MRG_M1);
            mrg_apply(mrg_pow2[76], b[t].s2, MRG_M2);
        }
    }
    memcpy(g->now, g->base, n * size);
    cpuify_curand_start_positions(g);
    return CURAND_STATUS_SUCCESS;
}

/* ------------------------------------------------------------------------------------ */
/* Distributions: a group of K results from C draws, as the device API computes them     */


typedef struct {
    distribution dist;
    void *out;
    size_t n;
    uint64_t first_result;      /* the index of out[0] in results counted from group 0 */
    uint64_t first_group, last_group;
    int K, C;                   /* results per group, draws per group */
    double mean, stddev;
    /* Poisson: P(X <= poisson_lo + i) for i < poisson_count */
    const double *poisson_cdf;
    uint32_t poisson_lo, poisson_count;
    double lambda;
    curandGenerator_t g;
    uint32_t threads_per_job;
} generation;

static float uniform_float(uint32_t x) { return x * 2.3283064e-10f + (2.3283064e-10f / 2.0f); }

static double uniform_double_hq(uint32_t x, uint32_t y) {
    uint64_t z = (uint64_t)x ^ ((uint64_t)y << (53 - 32));
    return z * 1.1102230246251565e-16 + (1.1102230246251565e-16 / 2.0);
}

static void box_muller(uint32_t x, uint32_t y, float *r) {
    float u = x * 2.3283064e-10f + (2.3283064e-10f / 2);
    float v = y * (2.3283064e-10f * 6.2831855f) + ((2.3283064e-10f * 6.2831855f) / 2);
    float s = sqrtf(-2.0f * logf(u));
    r[0] = sinf(v) * s;
    r[1] = cosf(v) * s;
}

static void box_muller_double(uint32_t x0, uint32_t x1, uint32_t y0, uint32_t y1, double *r) {
    uint64_t zx = (uint64_t)x0 ^ ((uint64_t)x1 << (53 - 32));
    uint64_t zy = (uint64_t)y0 ^ ((uint64_t)y1 << (53 - 32));
    double u = zx * 1.1102230246251565e-16 + (1.1102230246251565e-16 / 2.0);
    double v = zy * (1.1102230246251565e-16 * 2.0) + 1.1102230246251565e-16;
    double s = sqrt(-2.0 * log(u));
    r[0] = sin(v * 3.1415926535897932) * s;
    r[1] = cos(v * 3.1415926535897932) * s;
}

static void box_muller_mrg(double a, double b, float *r) {
    float x = (float)(a * MRG_NORM), y = (float)(b * MRG_NORM) * 6.2831855f;
    float s = sqrtf(-2.0f * logf(x));
    r[0] = sinf(y) * s;
    r[1] = cosf(y) * s;
}

static void box_muller_mrg_double(double a, double b, double *r) {
    double x = a * MRG_NORM, y = b * MRG_NORM * 2.0;
    double s = sqrt(-2.0 * log(x));
    r[0] = sin(y * 3.1415926535897932) * s;
    r[1] = cos(y * 3.1415926535897932) * s;
}

static uint32_t poisson_value(const generation *w, double u) {
    uint32_t lo = 0, hi = w->poisson_count - 1;    /* the first k with cdf[k] >= u */
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (w->poisson_cdf[mid] >= u) hi = mid;
        else lo = mid + 1;
    }
    return w->poisson_lo + lo;
}

/* the K results of one group from its C draws (draws: uint32 values, or MRG32k3a's doubles) */
static void group_results(const generation *w, int mrg, const uint32_t *d, const double *m, void *res) {
    float *f = res;
    double *x = res;
    uint32_t *u = res;
    switch (w->dist) {
    case DIST_BITS:
        for (int k = 0; k < w->K; k++) u[k] = mrg ? (uint32_t)(m[k] * MRG_BITS_NORM) : d[k];
        break;
    case DIST_BITS64:       /* Sobol64 only: one_draw_result */
        break;
    case DIST_UNIFORM:
        for (int k = 0; k < w->K; k++) f[k] = mrg ? (float)(m[k] * MRG_NORM) : uniform_float(d[k]);
        break;
    case DIST_UNIFORM_DOUBLE:
        for (int k = 0; k < w->K; k++) x[k] = mrg ? m[k] * MRG_NORM : uniform_double_hq(d[2 * k], d[2 * k + 1]);
        break;
    case DIST_NORMAL:
    case DIST_LOG_NORMAL:
        for (int k = 0; k < w->K; k += 2) {
            if (mrg) box_muller_mrg(m[k], m[k + 1], f + k);
            else box_muller(d[k], d[k + 1], f + k);
        }
        for (int k = 0; k < w->K; k++) {
            float v = (float)w->mean + (float)w->stddev * f[k];
            f[k] = w->dist == DIST_LOG_NORMAL ? expf(v) : v;
        }
        break;
    case DIST_NORMAL_DOUBLE:
    case DIST_LOG_NORMAL_DOUBLE:
        for (int k = 0; k < w->K; k += 2) {
            if (mrg) box_muller_mrg_double(m[k], m[k + 1], x + k);
            else box_muller_double(d[2 * k], d[2 * k + 1], d[2 * k + 2], d[2 * k + 3], x + k);
        }
        for (int k = 0; k < w->K; k++) {
            double v = w->mean + w->stddev * x[k];
            x[k] = w->dist == DIST_LOG_NORMAL_DOUBLE ? exp(v) : v;
        }
        break;
    case DIST_POISSON:
        for (int k = 0; k < w->K; k++)
            u[k] = poisson_value(w, mrg ? m[k] * MRG_NORM : ((double)d[k] + 0.5) * 2.3283064365386963e-10);
        break;
    }
}

static size_t result_size(distribution d) {
    switch (d) {
    case DIST_BITS64: case DIST_UNIFORM_DOUBLE: case DIST_NORMAL_DOUBLE: case DIST_LOG_NORMAL_DOUBLE: return 8;
    default: return 4;
    }
}

/* XORWOW / MRG32k3a: subsequence t's state moved to draw `pos` (from where it stands, or from
 * draw 0 when it stands past it) */
static void seek(curandGenerator_t g, uint32_t t, uint64_t pos) {
    uint64_t at = g->now_pos[t];
    if (g->type == CURAND_RNG_PSEUDO_XORWOW) {
        xorwow_state *s = (xorwow_state *)g->now + t;
        if (pos < at) {
            *s = ((xorwow_state *)g->base)[t];
            at = 0;
        }
        uint64_t n = pos - at;
        if (n <= 256) {
            for (uint64_t i = 0; i < n; i++) xorwow_shift(s->v);
        } else {
            for (int b = 0; b < 64; b++)
                if (n >> b & 1u) xorwow_apply(xorwow_draw_pow[b], s->v);
        }
        s->d += 362437u * (uint32_t)n;
    } else {
        mrg_state *s = (mrg_state *)g->now + t;
        if (pos < at) {
            *s = ((mrg_state *)g->base)[t];
            at = 0;
        }
        uint64_t n = pos - at;
        if (n <= 64) {
            for (uint64_t i = 0; i < n; i++) mrg_next(s);
        } else {
            mrg_skip(s, n, 0);
        }
    }
    g->now_pos[t] = pos;
}

/* job j: the groups of subsequences [j * threads_per_job, ...), row by row (so that a row's
 * results, next to each other in memory, are written together) */
static void generate_job(const void *arg, uint32_t index, void *scratch) {
    (void)scratch;
    const generation *w = arg;
    curandGenerator_t g = w->g;
    uint32_t T = subsequences(g);
    uint32_t t_begin = index * w->threads_per_job;
    uint32_t t_end = t_begin + w->threads_per_job < T ? t_begin + w->threads_per_job : T;
    size_t rsize = result_size(w->dist);
    int mrg = g->type == CURAND_RNG_PSEUDO_MRG32K3A;
    for (uint64_t row = w->first_group / T; row <= w->last_group / T; row++) {
        for (uint32_t t = t_begin; t < t_end; t++) {
            uint64_t b = row * T + t;
            if (b < w->first_group || b > w->last_group) continue;
            uint32_t d[8];
            double m[8];
            if (g->type == CURAND_RNG_PSEUDO_PHILOX4_32_10) {
                /* a group (4 results) of row b / T: draws row * C ... */
                philox_draws(g->seed, t, row * (uint64_t)w->C, w->C, d);
            } else {
                uint64_t pos = g->next_pos[t];
                g->next_pos[t] = pos + (uint64_t)w->C;
                seek(g, t, pos);
                for (int c = 0; c < w->C; c++) {
                    if (mrg) m[c] = mrg_next((mrg_state *)g->now + t);
                    else d[c] = xorwow_next((xorwow_state *)g->now + t);
                }
                g->now_pos[t] = pos + (uint64_t)w->C;
            }
            unsigned char res[8 * sizeof(double)];
            group_results(w, mrg, d, m, res);
            uint64_t r0 = b * (uint64_t)w->K;
            if (r0 >= w->first_result && r0 + (uint64_t)w->K <= w->first_result + w->n) {
                memcpy((char *)w->out + (r0 - w->first_result) * rsize, res, (size_t)w->K * rsize);
                continue;
            }
            for (int k = 0; k < w->K; k++) {
                uint64_t r = r0 + (uint64_t)k;
                if (r < w->first_result || r - w->first_result >= w->n) continue;
                memcpy((char *)w->out + (r - w->first_result) * rsize, res + (size_t)k * rsize, rsize);
            }
        }
    }
}

/* Sobol and MTGP32: one draw x (32 bits, or 64 when `wide`: Sobol64) as one result of w->dist,
 * normals by inversion (curand_sobol.h), as NVIDIA's host generators make them */
static void one_draw_result(const generation *w, uint64_t x, int wide, void *res) {
    uint32_t x32 = wide ? (uint32_t)(x >> 32) : (uint32_t)x;
    double u = wide ? (double)(x >> 11) * 1.1102230246251565e-16 + 1.1102230246251565e-16 / 2.0
                    : x32 * 2.3283064365386963e-10 + 2.3283064365386963e-10;
    switch (w->dist) {
    case DIST_BITS: *(uint32_t *)res = x32; break;
    case DIST_BITS64: *(uint64_t *)res = x; break;
    case DIST_UNIFORM: *(float *)res = uniform_float(x32); break;
    case DIST_UNIFORM_DOUBLE: *(double *)res = u; break;
    case DIST_NORMAL:
    case DIST_LOG_NORMAL: {
        float v = (float)w->mean + (float)w->stddev * sobol_normal_float(x32);
        *(float *)res = w->dist == DIST_LOG_NORMAL ? expf(v) : v;
        break;
    }
    case DIST_NORMAL_DOUBLE:
    case DIST_LOG_NORMAL_DOUBLE: {
        double v = w->mean + w->stddev * (wide ? sobol_normal_double64(x) : sobol_normal_double32(x32));
        *(double *)res = w->dist == DIST_LOG_NORMAL_DOUBLE ? exp(v) : v;
        break;
    }
    case DIST_POISSON: *(uint32_t *)res = poisson_value(w, u); break;
    }
}

#if MTGP32_AVAILABLE
/* MTGP32 job j: the results of parameter set j (curand_mtgp32.h), each its next 32-bit value;
 * the set steps over the values of its sequence that lie before the generator's position */
static void mtgp32_job(const void *arg, uint32_t index, void *scratch) {
    (void)scratch;
    const generation *w = arg;
    mtgp32_state *s = (mtgp32_state *)w->g->base + index;
    const uint64_t row_size = (uint64_t)MTGP32_SETS * MTGP32_CHUNK;
    uint64_t begin = w->g->counter, end = begin + w->n;
    size_t rsize = result_size(w->dist);
    for (uint64_t row = begin / row_size; row * row_size < end; row++) {
        uint64_t r0 = row * row_size + (uint64_t)index * MTGP32_CHUNK;
        uint64_t lo = r0 > begin ? r0 : begin, hi = r0 + MTGP32_CHUNK < end ? r0 + MTGP32_CHUNK : end;
        for (uint64_t r = lo; r < hi; r++) {
            uint64_t j = row * MTGP32_CHUNK + (r - r0);
            if (j < s->j) mtgp32_seed(s, (int)index, w->g->seed);
            while (s->j < j) mtgp32_next(s, (int)index);
            one_draw_result(w, mtgp32_next(s, (int)index), 0, (char *)w->out + (r - begin) * rsize);
        }
    }
}
#endif

#define SOBOL_CHUNK 16384u      /* points of one dimension per job */

/* Sobol job j: points [c * SOBOL_CHUNK, ...) of one dimension (dimension-major output, as
 * NVIDIA's: the n / dimensions results of dimension 0 first), from the generator's position on;
 * the next point flips the direction vector of the lowest zero bit of the index (curand()) */
static void quasi_job(const void *arg, uint32_t index, void *scratch) {
    (void)scratch;
    const generation *w = arg;
    curandGenerator_t g = w->g;
    uint64_t per_dim = w->n / g->dimensions, chunks = (per_dim + SOBOL_CHUNK - 1) / SOBOL_CHUNK;
    uint32_t dim = (uint32_t)(index / chunks);
    uint64_t first = index % chunks * SOBOL_CHUNK;
    uint64_t count = per_dim - first < SOBOL_CHUNK ? per_dim - first : SOBOL_CHUNK;
    int scrambled = g->type == CURAND_RNG_QUASI_SCRAMBLED_SOBOL32 || g->type == CURAND_RNG_QUASI_SCRAMBLED_SOBOL64;
    size_t rsize = result_size(w->dist);
    char *out = (char *)w->out + (dim * per_dim + first) * rsize;
    if (is_sobol64(g->type)) {
        const uint64_t *v = (scrambled ? sobol_nvidia.scrambled_vectors64 : sobol_nvidia.vectors64) + 64u * dim;
        uint64_t i = g->counter + first, x = sobol64_point(v, scrambled ? sobol_nvidia.constants64[dim] : 0, i);
        for (uint64_t j = 0; j < count; j++, i++) {
            one_draw_result(w, x, 1, out + j * rsize);
            int k = ~i ? __builtin_ctzll(~i) : 63;
            x ^= v[k];
        }
    } else {        /* the index is 32 bits, as the device API's */
        const uint32_t *v = (scrambled ? sobol_nvidia.scrambled_vectors32 : sobol_nvidia.vectors32) + 32u * dim;
        uint32_t i = (uint32_t)(g->counter + first), x = sobol32_point(v, scrambled ? sobol_nvidia.constants32[dim] : 0, i);
        for (uint64_t j = 0; j < count; j++, i++) {
            one_draw_result(w, x, 0, out + j * rsize);
            int k = ~i ? __builtin_ctz(~i) : 31;
            x ^= v[k];
        }
    }
}

#include "curand_mt19937.h"

curandStatus_t cpuify_curand_generate(curandGenerator_t g, distribution dist, void *out, size_t n, const char *api,
                                      double mean, double stddev, double lambda) {
    int philox = g->type == CURAND_RNG_PSEUDO_PHILOX4_32_10, mrg = g->type == CURAND_RNG_PSEUDO_MRG32K3A;
    int quasi = is_quasi(g->type);
    /* 32-bit results from all but Sobol64, 64-bit ones from Sobol64 only */
    if ((dist == DIST_BITS64 && !is_sobol64(g->type)) || (dist == DIST_BITS && is_sobol64(g->type)))
        return CURAND_STATUS_TYPE_ERROR;
    int normal = dist == DIST_NORMAL || dist == DIST_NORMAL_DOUBLE || dist == DIST_LOG_NORMAL ||
                 dist == DIST_LOG_NORMAL_DOUBLE;
    generation w;
    memset(&w, 0, sizeof w);
    w.dist = dist;
    w.out = out;
    w.n = n;
    w.g = g;
    w.mean = mean;
    w.stddev = stddev;
    w.lambda = lambda;
    if (philox) {
        w.K = 4;
        w.C = result_size(dist) == 8 ? 8 : 4;
    } else {
        w.K = normal ? 2 : 1;
        w.C = (normal ? 2 : 1) * (!mrg && result_size(dist) == 8 ? 2 : 1);
    }
    /* MTGP32 and MT19937: one draw a result, normals by inversion */
    int mt19937 = g->type == CURAND_RNG_PSEUDO_MT19937, mtgp = g->type == CURAND_RNG_PSEUDO_MTGP32 || mt19937;
    if (quasi ? n % g->dimensions != 0 : normal && !philox && !mtgp && n % 2) return CURAND_STATUS_LENGTH_NOT_MULTIPLE;
    if (n == 0) return CURAND_STATUS_SUCCESS;
    if (!out) return CURAND_STATUS_LAUNCH_FAILURE;
    curandStatus_t st = cpuify_curand_make_states(g);
    if (st != CURAND_STATUS_SUCCESS) return st;
    /* results are numbered from group 0: Philox's counter counts results, the others' groups */
    w.first_result = philox ? g->counter : g->counter * (uint64_t)w.K;
    w.first_group = w.first_result / (uint64_t)w.K;
    w.last_group = (w.first_result + n - 1) / (uint64_t)w.K;

    double *cdf = NULL;
    if (dist == DIST_POISSON) {     /* lambda <= 400000: at most ~15000 values of the CDF */
        double spread = 12.0 * sqrt(lambda) + 20.0;
        double lo = floor(lambda - spread);
        w.poisson_lo = lo < 0 ? 0u : (uint32_t)lo;
        w.poisson_count = (uint32_t)(lambda + spread) - w.poisson_lo + 1;
        cdf = malloc(w.poisson_count * sizeof(double));
        if (!cdf) return CURAND_STATUS_ALLOCATION_FAILED;
        double sum = 0.0;
        for (uint32_t i = 0; i < w.poisson_count; i++) {
            double k = (double)(w.poisson_lo + i);
            sum += exp(k * log(lambda) - lambda - lgamma(k + 1.0));
            cdf[i] = sum;
        }
        for (uint32_t i = 0; i < w.poisson_count; i++) cdf[i] /= sum;
        cdf[w.poisson_count - 1] = 1.0;
        w.poisson_cdf = cdf;
    }

    int e;
    if (quasi) {
        uint64_t per_dim = n / g->dimensions;
        e = cpuify_run_job(api, g->stream, (uint32_t)(g->dimensions * ((per_dim + SOBOL_CHUNK - 1) / SOBOL_CHUNK)), 0,
                           quasi_job, &w);
    } else if (mt19937) {
        curandStatus_t made = CURAND_STATUS_SUCCESS;
        e = mt19937_generate(g, &w, api, &made);
        if (made != CURAND_STATUS_SUCCESS) {
            free(cdf);
            return made;
        }
#if MTGP32_AVAILABLE
    } else if (mtgp) {
        e = cpuify_run_job(api, g->stream, MTGP32_SETS, 0, mtgp32_job, &w);
#endif
    } else {
        uint32_t T = subsequences(g);
        w.threads_per_job = philox ? 1024 : 256;
        e = cpuify_run_job(api, g->stream, (T + w.threads_per_job - 1) / w.threads_per_job, 0, generate_job, &w);
    }
    free(cdf);
    if (e != 0) return CURAND_STATUS_LAUNCH_FAILURE;
    g->counter += quasi ? (uint64_t)(n / g->dimensions) : philox || mtgp ? (uint64_t)n : (uint64_t)(n / (size_t)w.K);
    return CURAND_STATUS_SUCCESS;
}
