/* cpuify's cuRAND (curand_distributions.c): the three generators of the host API, as the
 * device API (curand_kernel.h) defines them: XORWOW, MRG32k3a and Philox4x32-10 steps, and
 * skip-ahead by draws and by subsequences through matrix powers that build_tables computes
 * once (GF(2) 160x160 for XORWOW, 3x3 mod m1/m2 for MRG32k3a).  curand_distributions.c seeds
 * them as curand_init does. */
#ifndef CPUIFY_CURAND_GENERATORS_H
#define CPUIFY_CURAND_GENERATORS_H

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------------------ */
/* XORWOW: Marsaglia's xorshift with a Weyl counter (362437 per draw).                   */

typedef struct { uint32_t v[5]; uint32_t d; } xorwow_state;

/* the linear map of one step on the 160 state bits: column j is the image of bit j */
typedef uint32_t xorwow_matrix[160][5];

static void xorwow_shift(uint32_t *v) {
    uint32_t t = v[0] ^ (v[0] >> 2);
    v[0] = v[1];
    v[1] = v[2];
    v[2] = v[3];
    v[3] = v[4];
    v[4] = (v[4] ^ (v[4] << 4)) ^ (t ^ (t << 1));
}

static uint32_t xorwow_next(xorwow_state *s) {
    xorwow_shift(s->v);
    s->d += 362437u;
    return s->v[4] + s->d;
}

static void xorwow_apply(const xorwow_matrix m, uint32_t *v) {
    uint32_t r[5] = {0, 0, 0, 0, 0};
    for (int j = 0; j < 160; j++)
        if (v[j >> 5] >> (j & 31) & 1u)
            for (int w = 0; w < 5; w++) r[w] ^= m[j][w];
    memcpy(v, r, sizeof r);
}

static void xorwow_square(const xorwow_matrix a, xorwow_matrix out) {
    for (int j = 0; j < 160; j++) {
        uint32_t col[5];
        memcpy(col, a[j], sizeof col);
        xorwow_apply(a, col);
        memcpy(out[j], col, sizeof col);
    }
}

/* step^(2^b) and step^(2^(67+b)) (one subsequence is 2^67 draws), b < 64 */
static xorwow_matrix *xorwow_draw_pow, *xorwow_subsequence_pow;

/* ------------------------------------------------------------------------------------ */
/* MRG32k3a: L'Ecuyer's combined multiple recursive generator.                          */

#define MRG_M1 4294967087u
#define MRG_M2 4294944443u
#define MRG_NORM 2.3283065498378288e-10       /* 1 / (m1 + 1) */
#define MRG_BITS_NORM 1.000000048662          /* what curand() of MRG32k3a scales by */

typedef struct { uint32_t s1[3], s2[3]; } mrg_state;
typedef uint64_t mrg_matrix[3][3];

static void mrg_mul(const mrg_matrix a, const mrg_matrix b, mrg_matrix out, uint64_t m) {
    mrg_matrix r;
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++) {
            uint64_t acc = 0;
            for (int k = 0; k < 3; k++) acc = (acc + a[i][k] * b[k][j] % m) % m;
            r[i][j] = acc;
        }
    memcpy(out, r, sizeof r);
}

static void mrg_apply(const mrg_matrix a, uint32_t *v, uint64_t m) {
    uint64_t r[3];
    for (int i = 0; i < 3; i++) {
        uint64_t acc = 0;
        for (int k = 0; k < 3; k++) acc = (acc + a[i][k] * v[k] % m) % m;
        r[i] = acc;
    }
    for (int i = 0; i < 3; i++) v[i] = (uint32_t)r[i];
}

/* A1^(2^b), A2^(2^b) for b < 128: draws (b < 64) and subsequences (2^76 draws: b - 76) */
static mrg_matrix mrg_pow1[128], mrg_pow2[128];

static void mrg_skip(mrg_state *s, uint64_t n, int shift) {
    for (int b = 0; b < 64; b++)
        if (n >> b & 1u) {
            mrg_apply(mrg_pow1[b + shift], s->s1, MRG_M1);
            mrg_apply(mrg_pow2[b + shift], s->s2, MRG_M2);
        }
}

/* x mod m for m = 2^32 - c (x < 2^63): folds of the high word, then one subtraction */
static inline uint64_t mrg_reduce(uint64_t x, uint64_t c, uint64_t m) {
    while (x >> 32) x = (x >> 32) * c + (x & 0xffffffffu);
    return x >= m ? x - m : x;
}

/* the value curand_MRG32k3a returns: in [1, m1] */
static double mrg_next(mrg_state *s) {
    /* a12 s1[1] - a13n s1[0] and a21 s2[2] - a23n s2[0], kept non-negative mod m */
    uint64_t p1 = mrg_reduce(1403580u * (uint64_t)s->s1[1] + 810728u * (uint64_t)(MRG_M1 - s->s1[0]), 209u, MRG_M1);
    s->s1[0] = s->s1[1];
    s->s1[1] = s->s1[2];
    s->s1[2] = (uint32_t)p1;
    uint64_t p2 = mrg_reduce(527612u * (uint64_t)s->s2[2] + 1370589u * (uint64_t)(MRG_M2 - s->s2[0]), 22853u,
                             MRG_M2);
    s->s2[0] = s->s2[1];
    s->s2[1] = s->s2[2];
    s->s2[2] = (uint32_t)p2;
    return p1 <= p2 ? (double)(p1 + MRG_M1 - p2) : (double)(p1 - p2);
}

static pthread_once_t tables_once = PTHREAD_ONCE_INIT;
static int tables_ok;

static void build_tables(void) {
    xorwow_draw_pow = malloc(64 * sizeof(xorwow_matrix));
    xorwow_subsequence_pow = malloc(64 * sizeof(xorwow_matrix));
    xorwow_matrix *t = malloc(2 * sizeof(xorwow_matrix));
    if (!xorwow_draw_pow || !xorwow_subsequence_pow || !t) return;
    for (int j = 0; j < 160; j++) {
        uint32_t v[5] = {0, 0, 0, 0, 0};
        v[j >> 5] = 1u << (j & 31);
        xorwow_shift(v);
        memcpy(xorwow_draw_pow[0][j], v, sizeof v);
    }
    for (int b = 1; b < 64; b++) xorwow_square(xorwow_draw_pow[b - 1], xorwow_draw_pow[b]);
    xorwow_square(xorwow_draw_pow[63], t[0]);      /* 2^64 */
    xorwow_square(t[0], t[1]);                      /* 2^65 */
    xorwow_square(t[1], t[0]);                      /* 2^66 */
    xorwow_square(t[0], xorwow_subsequence_pow[0]); /* 2^67 */
    for (int b = 1; b < 64; b++) xorwow_square(xorwow_subsequence_pow[b - 1], xorwow_subsequence_pow[b]);
    free(t);
    const mrg_matrix a1 = {{0, 1, 0}, {0, 0, 1}, {MRG_M1 - 810728u, 1403580u, 0}};
    const mrg_matrix a2 = {{0, 1, 0}, {0, 0, 1}, {MRG_M2 - 1370589u, 0, 527612u}};
    memcpy(mrg_pow1[0], a1, sizeof a1);
    memcpy(mrg_pow2[0], a2, sizeof a2);
    for (int b = 1; b < 128; b++) {
        mrg_mul(mrg_pow1[b - 1], mrg_pow1[b - 1], mrg_pow1[b], MRG_M1);
        mrg_mul(mrg_pow2[b - 1], mrg_pow2[b - 1], mrg_pow2[b], MRG_M2);
    }
    tables_ok = 1;
}

/* ------------------------------------------------------------------------------------ */
/* Philox4x32-10: Salmon et al.'s counter-based generator, as curand_kernel.h keys it.    */

static void philox_block(const uint32_t ctr[4], uint64_t seed, uint32_t out[4]) {
    uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3];
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    for (int round = 0; round < 10; round++) {
        uint64_t p0 = (uint64_t)0xD2511F53u * c0, p1 = (uint64_t)0xCD9E8D57u * c2;
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0, n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        c0 = n0;
        c1 = (uint32_t)p1;
        c2 = n2;
        c3 = (uint32_t)p0;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
}

/* draws [pos, pos + count) of subsequence `sub` (count a multiple of 4, pos too) */
static void philox_draws(uint64_t seed, uint64_t sub, uint64_t pos, int count, uint32_t *out) {
    for (int i = 0; i < count; i += 4) {
        uint64_t block = (pos + (uint64_t)i) / 4;
        uint32_t ctr[4] = {(uint32_t)block, (uint32_t)(block >> 32), (uint32_t)sub, (uint32_t)(sub >> 32)};
        philox_block(ctr, seed, out + i);
    }
}

#endif /* CPUIFY_CURAND_GENERATORS_H */
