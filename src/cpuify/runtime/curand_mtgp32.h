/* cpuify's cuRAND (curand_distributions.c): the MTGP32 generator (Saito and Matsumoto's Mersenne Twister for
 * Graphic Processors, period 2^11213 - 1) as NVIDIA's host API runs it.
 *
 * The parameter sets are the 200 of NVIDIA's curand_mtgp32dc_p_11213.h (the dynamic creator's
 * output), compiled in from the nvidia-curand wheel's header when cpuify's libcurand is built
 * (CPUIFY_MTGP32_PARAMS: its path); cpuify does not carry them, and without the wheel at build
 * time the MTGP32 generator is refused.  A state is seeded as curandMakeMTGP32KernelState
 * seeds the device API's (mtgp32_init_state with seed ^ seed >> 32, + set + 1), and steps as
 * curand_mtgp32_kernel.h's curand(): x[j + N] = para_rec(x[j], x[j + 1], x[j + pos]), output
 * temper(x[j + N], x[j + pos - 1]), N = 351.
 *
 * NVIDIA's host layout, established value by value against its libcurand: sets 0..191 each make
 * one sequence; result r of the generator (counted from the seed, across calls) is value
 * (r / (192 * 256)) * 256 + r % 256 of set (r / 256) mod 192: rows of 192 chunks of 256. */
#ifndef CPUIFY_CURAND_MTGP32_H
#define CPUIFY_CURAND_MTGP32_H

#include <stdint.h>
#include <string.h>

#ifdef CPUIFY_MTGP32_PARAMS
#include CPUIFY_MTGP32_PARAMS
#define MTGP32_AVAILABLE 1
#else
#define MTGP32_AVAILABLE 0
#endif

#define MTGP32_SETS 192         /* parameter sets the host generator uses */
#define MTGP32_CHUNK 256        /* consecutive results of one set */
#define MTGP32_N 351            /* state words: 11213 / 32 + 1 */
#define MTGP32_RING 1024

typedef struct {
    uint32_t x[MTGP32_RING];    /* x[j & 1023]: words j .. j + N of the sequence */
    uint64_t j;                 /* the next value's index */
} mtgp32_state;

#if MTGP32_AVAILABLE
static void mtgp32_seed(mtgp32_state *s, int set, uint64_t seed) {
    const mtgp32_params_fast_t *p = &mtgp32dc_params_fast_11213[set];
    uint32_t hidden = p->tbl[4] ^ (p->tbl[8] << 16), fill = hidden;
    fill += fill >> 16;
    fill += fill >> 8;
    memset(s->x, (int)(fill & 0xff), sizeof s->x);
    s->x[0] = (uint32_t)(seed ^ (seed >> 32)) + (uint32_t)set + 1u;
    s->x[1] = hidden;
    for (uint32_t i = 1; i < MTGP32_N; i++)
        s->x[i] ^= 1812433253u * (s->x[i - 1] ^ (s->x[i - 1] >> 30)) + i;
    s->j = 0;
}

/* the next value of set `set`'s sequence */
static uint32_t mtgp32_next(mtgp32_state *s, int set) {
    const mtgp32_params_fast_t *p = &mtgp32dc_params_fast_11213[set];
    uint64_t j = s->j++;
    uint32_t *x = s->x;
    uint32_t v = (x[j & 1023] & p->mask) ^ x[(j + 1) & 1023];
    v ^= v << p->sh1;
    uint32_t y = v ^ (x[(j + (uint64_t)p->pos) & 1023] >> p->sh2);
    uint32_t r = y ^ p->tbl[y & 0x0f];
    x[(j + MTGP32_N) & 1023] = r;
    uint32_t t = x[(j + (uint64_t)p->pos - 1) & 1023];
    t ^= t >> 16;
    t ^= t >> 8;
    return r ^ p->tmp_tbl[t & 0x0f];
}
#endif

#endif /* CPUIFY_CURAND_MTGP32_H */
