/* cpuify's cuRAND (curand.c): the MT19937 generator (Matsumoto and Nishimura's Mersenne Twister,
 * period 2^19937 - 1) in the layout of NVIDIA's host API.
 *
 * The layout, established value by value against NVIDIA's libcurand host generator (10.4.5),
 * with NumPy's RandomState (init_genrand seeding) as the plain MT19937:
 *   - 8192 sequences: sequence s is the MT19937 sequence seeded by init_genrand with the low 32
 *     bits of the seed, jumped ahead by s * 2^2048 values (Haramoto et al.'s polynomial jump:
 *     x^(2^2048) mod the characteristic polynomial, both computed by tools/mt19937_jump.py);
 *   - the results form rows of 65536; columns 8s .. 8s + 7 of a row belong to sequence s, and
 *     78 rows hold one generation of it (the 624 values of one twist of its state): row r of
 *     generation g, column 8s + c holds value mt19937_index[r][c] of that generation;
 *   - the index: row 0 of a generation holds its values 0, 113, 170, 283, 340, 397, 510 and 567;
 *     the other 616 values, in order, fill 11 blocks of 7 rows, column by column (a block's
 *     values 0..6 go down column 0, 7..13 down column 1, ...);
 *   - results are counted from the seed across calls (a new seed or a change of ordering
 *     starts again: curand.c); NVIDIA's generator refuses curandSetGeneratorOffset for MT19937
 *     (TYPE_ERROR) and accepts only the DEFAULT and LEGACY orderings, which give this same layout.
 * One 32-bit value x makes one result: uniform doubles are x 2^-32 + 2^-33 and uniform floats
 * that double rounded to float; normals invert the normal CDF as MTGP32's (curand_sobol.h).
 *
 * curand.c includes this file after its distributions (generation, one_draw_result). */
#ifndef CPUIFY_CURAND_MT19937_H
#define CPUIFY_CURAND_MT19937_H

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MT19937_N 624
#define MT19937_M 397
#define MT19937_DEGREE 19937
#define MT19937_POLY_WORDS 312      /* a polynomial of degree < 19937, 64 coefficients a word */
#define MT19937_STREAMS 8192u
#define MT19937_LANES 8u            /* columns of a row that one sequence fills */
#define MT19937_ROW (MT19937_STREAMS * MT19937_LANES)
#define MT19937_ROWS 78u            /* rows of a generation: 624 / 8 */
#define MT19937_POWERS 13           /* jumps by 2^k sequences, k < 13 */
#define MT19937_STREAMS_PER_JOB 32u

#include "curand_mt19937_jump.h"

/* word 624 of a sequence from its words 0, 1 and 397 */
static inline uint32_t mt19937_word(uint32_t w0, uint32_t w1, uint32_t w397) {
    uint32_t y = (w0 & 0x80000000u) | (w1 & 0x7fffffffu);
    return w397 ^ (y >> 1) ^ ((0u - (w1 & 1u)) & 0x9908b0dfu);
}

static inline uint32_t mt19937_temper(uint32_t y) {
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    return y ^ (y >> 18);
}

/* the state (its next 624 words) moved on by 624 words: the next generation's values, untempered */
static void mt19937_twist(uint32_t *w) {
    int i = 0;
    for (; i < MT19937_N - MT19937_M; i++) w[i] = mt19937_word(w[i], w[i + 1], w[i + MT19937_M]);
    for (; i < MT19937_N - 1; i++) w[i] = mt19937_word(w[i], w[i + 1], w[i + MT19937_M - MT19937_N]);
    w[MT19937_N - 1] = mt19937_word(w[MT19937_N - 1], w[0], w[MT19937_M - 1]);
}

static void mt19937_seed(uint32_t *w, uint32_t seed) {
    w[0] = seed;
    for (uint32_t i = 1; i < MT19937_N; i++) w[i] = 1812433253u * (w[i - 1] ^ (w[i - 1] >> 30)) + i;
}

/* ------------------------------------------------------------------------------------ */
/* Jumps: p(T) applied to a state, T the step of one value, p of degree < 19937          */

/* p^2 mod phi */
static void mt19937_square(const uint64_t *p, uint64_t *out) {
    uint64_t r[2 * MT19937_POLY_WORDS + 2];
    memset(r, 0, sizeof r);
    for (int i = 0; i < MT19937_POLY_WORDS; i++)
        for (int half = 0; half < 2; half++) {     /* spread 32 coefficients over 64 bits */
            uint64_t v = (uint32_t)(p[i] >> (32 * half));
            v = (v | v << 16) & 0x0000ffff0000ffffull;
            v = (v | v << 8) & 0x00ff00ff00ff00ffull;
            v = (v | v << 4) & 0x0f0f0f0f0f0f0f0full;
            v = (v | v << 2) & 0x3333333333333333ull;
            v = (v | v << 1) & 0x5555555555555555ull;
            r[2 * i + half] = v;
        }
    for (long b = 2L * (MT19937_DEGREE - 1); b >= MT19937_DEGREE; b--) {
        if (!(r[b >> 6] >> (b & 63) & 1u)) continue;
        long shift = b - MT19937_DEGREE;
        int words = (int)(shift >> 6), bits = (int)(shift & 63);
        for (int k = 0; k <= MT19937_POLY_WORDS; k++) {
            r[k + words] ^= mt19937_phi[k] << bits;
            if (bits) r[k + words + 1] ^= mt19937_phi[k] >> (64 - bits);
        }
    }
    memcpy(out, r, MT19937_POLY_WORDS * sizeof(uint64_t));
}

/* x^(2^(2048 + k)) mod phi: jumps by 2^k sequences */
static uint64_t mt19937_powers[MT19937_POWERS][MT19937_POLY_WORDS];
static pthread_once_t mt19937_powers_once = PTHREAD_ONCE_INIT;

static void mt19937_make_powers(void) {
    memcpy(mt19937_powers[0], mt19937_jump, sizeof mt19937_powers[0]);
    for (int k = 1; k < MT19937_POWERS; k++) mt19937_square(mt19937_powers[k - 1], mt19937_powers[k]);
}

#define MT19937_BYTES ((MT19937_DEGREE + 7) / 8)
/* a jump's scratch: 256 windows, the state's first 632 words, the accumulator's words */
#define MT19937_SCRATCH_WORDS (256 * MT19937_N + MT19937_N + 8 + MT19937_N + 8 * MT19937_BYTES)

/* w (a state: its next 624 words) := p(T) w, by Horner's rule over the bytes of p: the
 * accumulator moves on 8 words, then takes the sum of T^b w over the bits b of the next byte
 * (a table of the 256 sums) */
static void mt19937_apply(const uint64_t *p, uint32_t *w, uint32_t *scratch) {
    uint32_t (*sums)[MT19937_N] = (uint32_t (*)[MT19937_N])scratch;
    uint32_t *words = scratch + 256 * MT19937_N, *acc = words + MT19937_N + 8;
    memcpy(words, w, MT19937_N * sizeof(uint32_t));
    for (int k = 0; k < 8; k++) words[MT19937_N + k] = mt19937_word(words[k], words[k + 1], words[k + MT19937_M]);
    memset(sums[0], 0, sizeof sums[0]);
    for (int c = 1; c < 256; c++) {
        const uint32_t *rest = sums[c & (c - 1)], *term = words + __builtin_ctz((unsigned)c);
        for (int m = 0; m < MT19937_N; m++) sums[c][m] = rest[m] ^ term[m];
    }
#define MT19937_BYTE(k) ((unsigned)(p[(k) >> 3] >> (8 * ((k) & 7))) & 0xffu)
    memcpy(acc, sums[MT19937_BYTE(MT19937_BYTES - 1)], MT19937_N * sizeof(uint32_t));
    uint32_t *a = acc;
    for (int k = MT19937_BYTES - 2; k >= 0; k--) {
        for (int j = 0; j < 8; j++) a[MT19937_N + j] = mt19937_word(a[j], a[j + 1], a[j + MT19937_M]);
        a += 8;
        const uint32_t *s = sums[MT19937_BYTE(k)];
        for (int m = 0; m < MT19937_N; m++) a[m] ^= s[m];
    }
#undef MT19937_BYTE
    memcpy(w, a, MT19937_N * sizeof(uint32_t));
}

/* ------------------------------------------------------------------------------------ */
/* The generator: g->base holds the 8192 states (624 words each), g->now_pos the generation  */
/* each stands at, g->threads how many exist (sequences 0 .. threads - 1)                  */

static uint16_t mt19937_index[MT19937_ROWS][MT19937_LANES];
static pthread_once_t mt19937_index_once = PTHREAD_ONCE_INIT;

static void mt19937_make_index(void) {
    static const uint16_t first_row[MT19937_LANES] = {0, 113, 170, 283, 340, 397, 510, 567};
    uint32_t k = 0;
    for (uint32_t c = 0; c < MT19937_LANES; c++) mt19937_index[0][c] = first_row[c];
    for (uint32_t v = 0, f = 0; v < MT19937_N; v++) {
        if (f < MT19937_LANES && v == first_row[f]) {
            f++;
            continue;
        }
        uint32_t block = k / 56, in_block = k % 56;
        mt19937_index[1 + 7 * block + in_block % 7][in_block / 7] = (uint16_t)v;
        k++;
    }
}

typedef struct {
    curandGenerator_t g;
    uint32_t first;         /* the first sequence to make */
} mt19937_making;

/* job j: the states of sequences first + j * MT19937_STREAMS_PER_JOB ...: sequence s is the
 * seed's state jumped by the 2^k-sequence jumps of s's bits, the next ones one jump on each */
static void mt19937_make_job(const void *arg, uint32_t index, void *scratch) {
    const mt19937_making *m = arg;
    curandGenerator_t g = m->g;
    uint32_t begin = m->first + index * MT19937_STREAMS_PER_JOB;
    uint32_t end = begin + MT19937_STREAMS_PER_JOB < MT19937_STREAMS ? begin + MT19937_STREAMS_PER_JOB : MT19937_STREAMS;
    uint32_t *states = g->base;
    uint32_t *w = states + (size_t)begin * MT19937_N;
    mt19937_seed(w, (uint32_t)g->seed);
    for (int k = 0; k < MT19937_POWERS; k++)
        if (begin >> k & 1u) mt19937_apply(mt19937_powers[k], w, scratch);
    g->now_pos[begin] = 0;
    for (uint32_t s = begin + 1; s < end; s++) {
        uint32_t *next = states + (size_t)s * MT19937_N;
        memcpy(next, next - MT19937_N, MT19937_N * sizeof(uint32_t));
        mt19937_apply(mt19937_powers[0], next, scratch);
        g->now_pos[s] = 0;
    }
}

/* the states of sequences up to `count` (they are made at generation 0 when first needed) */
static curandStatus_t mt19937_make_states(curandGenerator_t g, uint32_t count, const char *api) {
    if (!g->base) {
        g->base = malloc((size_t)MT19937_STREAMS * MT19937_N * sizeof(uint32_t));
        g->now_pos = calloc(MT19937_STREAMS, sizeof(uint64_t));
        if (!g->base || !g->now_pos) {
            cpuify_curand_drop_states(g);
            return CURAND_STATUS_ALLOCATION_FAILED;
        }
        g->threads = 0;
    }
    if (count <= g->threads) return CURAND_STATUS_SUCCESS;
    pthread_once(&mt19937_powers_once, mt19937_make_powers);
    mt19937_making m = {g, g->threads};
    uint32_t jobs = (count - g->threads + MT19937_STREAMS_PER_JOB - 1) / MT19937_STREAMS_PER_JOB;
    if (cpuify_run_job(api, g->stream, jobs, MT19937_SCRATCH_WORDS * sizeof(uint32_t), mt19937_make_job, &m) != 0)
        return CURAND_STATUS_LAUNCH_FAILURE;
    uint32_t made = g->threads + jobs * MT19937_STREAMS_PER_JOB;
    g->threads = made < MT19937_STREAMS ? made : MT19937_STREAMS;
    return CURAND_STATUS_SUCCESS;
}

/* one value x as one result of w->dist, as NVIDIA's MT19937 host generator converts it */
static void mt19937_result(const generation *w, uint32_t x, void *res) {
    double u = x * 2.3283064365386963e-10 + 2.3283064365386963e-10 / 2.0;
    switch (w->dist) {
    case DIST_UNIFORM: *(float *)res = (float)u; break;
    case DIST_UNIFORM_DOUBLE: *(double *)res = u; break;
    case DIST_POISSON: *(uint32_t *)res = poisson_value(w, u); break;
    default: one_draw_result(w, x, 0, res); break;
    }
}

/* job j: sequences [j * MT19937_STREAMS_PER_JOB, ...): each generation of theirs that holds
 * results of this call, then its state moves past the generations the call used up */
static void mt19937_job(const void *arg, uint32_t index, void *scratch) {
    (void)scratch;
    const generation *w = arg;
    curandGenerator_t g = w->g;
    uint64_t begin = g->counter, end = begin + w->n;
    uint64_t first_generation = begin / MT19937_ROW / MT19937_ROWS, last_generation = (end - 1) / MT19937_ROW / MT19937_ROWS;
    size_t rsize = result_size(w->dist);
    uint32_t s_end = (index + 1) * MT19937_STREAMS_PER_JOB;
    for (uint32_t s = index * MT19937_STREAMS_PER_JOB; s < s_end && s < g->threads; s++) {
        uint32_t *state = (uint32_t *)g->base + (size_t)s * MT19937_N;
        for (uint64_t gen = first_generation; gen <= last_generation; gen++) {
            uint64_t row0 = gen * MT19937_ROWS, column = (uint64_t)s * MT19937_LANES;
            uint64_t first = row0 * MT19937_ROW + column;
            uint64_t last = (row0 + MT19937_ROWS - 1) * MT19937_ROW + column + MT19937_LANES - 1;
            if (last < begin) continue;
            if (first >= end) break;
            while (g->now_pos[s] < gen) {
                mt19937_twist(state);
                g->now_pos[s]++;
            }
            uint32_t values[MT19937_N];
            memcpy(values, state, sizeof values);
            mt19937_twist(values);
            if (last < end) {           /* used up: the state moves on */
                memcpy(state, values, sizeof values);
                g->now_pos[s] = gen + 1;
            }
            for (uint32_t r = 0; r < MT19937_ROWS; r++) {
                uint64_t p = (row0 + r) * MT19937_ROW + column;
                if (p + MT19937_LANES <= begin) continue;
                if (p >= end) break;
                for (uint32_t c = 0; c < MT19937_LANES; c++, p++)
                    if (p >= begin && p < end)
                        mt19937_result(w, mt19937_temper(values[mt19937_index[r][c]]),
                                       (char *)w->out + (p - begin) * rsize);
            }
        }
    }
}

/* a call's results: the states it needs first (all 8192 once a call reaches a second row) */
static int mt19937_generate(curandGenerator_t g, generation *w, const char *api, curandStatus_t *status) {
    pthread_once(&mt19937_index_once, mt19937_make_index);
    uint64_t begin = g->counter, end = begin + w->n;
    uint32_t needed = MT19937_STREAMS;
    if (begin / MT19937_ROW == (end - 1) / MT19937_ROW) needed = (uint32_t)((end - 1) % MT19937_ROW / MT19937_LANES + 1);
    *status = mt19937_make_states(g, needed, api);
    if (*status != CURAND_STATUS_SUCCESS) return 0;
    return cpuify_run_job(api, g->stream, (needed + MT19937_STREAMS_PER_JOB - 1) / MT19937_STREAMS_PER_JOB, 0, mt19937_job, w);
}

#endif /* CPUIFY_CURAND_MT19937_H */
