/* cpuify's cuBLAS, cuFFT and cuRAND (cublas.c, cufft.c, curand*.c): what they share.  Their
 * work runs through the block scheduler (cpuify_launch) as a grid of "blocks" that are C
 * functions: spread over cpuify's workers, with per-worker scratch memory, and with the
 * runtime's fault containment (a routine given a pointer that is not memory fails with an
 * error, the program goes on).  A routine first waits for the work it is ordered after on
 * the stream of its handle, plan or generator, as work queued on that stream would
 * (cudart_async.c: the stream's earlier work; the legacy stream's rules), then runs at the
 * call, so it is finished when it returns.  Work on other streams runs on meanwhile. */
#ifndef CPUIFY_MATHLIB_INTERNAL_H
#define CPUIFY_MATHLIB_INTERNAL_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "cpuify_rt.h"

typedef void (*cpuify_job_fn)(const void *arg, uint32_t index, void *scratch);

typedef struct {
    cpuify_job_fn fn;
    const void *arg;
} cpuify_job;

static int32_t cpuify_job_block(const void *params, const cpuify_dims *dims, uint32_t bx, uint32_t by,
                                uint32_t bz, void *shared, void *scratch) {
    (void)dims; (void)by; (void)bz; (void)shared;
    const cpuify_job *j = (const cpuify_job *)params;
    j->fn(j->arg, bx, scratch);
    return 0;
}

/* cudart: wait for all work issued so far; wait as work queued now on a stream would (a
 * cudaStream_t; an invalid one waits for all work) */
void cpuify_cudart_wait_launches(void);
void cpuify_cudart_wait_stream_order(void *stream);

/* Runs fn(arg, i, scratch) for i < count over the workers, after the work it is ordered
 * after on `stream`.  Returns 0, or prints one line naming `api` and the cause and returns
 * -1. */
static int cpuify_run_job(const char *api, void *stream, uint32_t count, uint64_t scratch_bytes,
                          cpuify_job_fn fn, const void *arg) {
    cpuify_cudart_wait_stream_order(stream);
    if (count == 0) return 0;
    cpuify_job j = {fn, arg};
    cpuify_dims d = {{count, 1, 1}, {1, 1, 1}};
    uint32_t where[3];
    int32_t e = cpuify_launch(cpuify_job_block, &j, &d, 0, scratch_bytes, where);
    if (e == 0) return 0;
    const char *why = e == CPUIFY_ERR_ILLEGAL_ADDRESS ? "illegal address (a pointer that is not "
                                                        "device memory, or too small an allocation?)"
                      : e == CPUIFY_ERR_OUT_OF_MEMORY ? "out of memory"
                      : e == CPUIFY_ERR_INTERRUPTED   ? "interrupted"
                      : e == CPUIFY_ERR_TIMEOUT       ? "timeout"
                                                      : "execution failed";
    fprintf(stderr, "cpuify: %s failed: %s\n", api, why);
    return -1;
}

/* IEEE binary16 and bfloat16 (cuBLAS's 16-bit types) to and from f32, rounding to nearest even */
static inline float half_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
    if (exp == 0x1f) bits = sign | 0x7f800000u | (man << 13);
    else if (exp) bits = sign | ((exp + 112) << 23) | (man << 13);
    else if (!man) bits = sign;
    else { /* subnormal: normalize */
        int e = -1;
        do { man <<= 1; e++; } while (!(man & 0x400));
        bits = sign | ((uint32_t)(112 - e) << 23) | ((man & 0x3ff) << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static inline uint16_t float_to_half(float f) { /* round to nearest even */
    uint32_t x;
    memcpy(&x, &f, 4);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
    uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) return sign | 0x7c00 | (ax > 0x7f800000u ? 0x200 : 0);
    if (ax >= 0x477ff000u) return sign | 0x7c00;             /* rounds to >= 65520: inf */
    if (ax < 0x38800000u) {                                  /* subnormal or zero */
        float a;
        memcpy(&a, &ax, 4);
        return sign | (uint16_t)lrintf(a * 16777216.0f);     /* a / 2^-24, exact rounding */
    }
    uint32_t r = ax - 0x38000000u;                           /* rebias 127 -> 15 */
    uint32_t h = r >> 13, rest = r & 0x1fff;
    if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) h++;
    return sign | (uint16_t)h;
}

static inline float bf16_to_float(uint16_t b) {
    uint32_t bits = (uint32_t)b << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static inline uint16_t float_to_bf16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40);
    x += 0x7fff + ((x >> 16) & 1);
    return (uint16_t)(x >> 16);
}

#endif /* CPUIFY_MATHLIB_INTERNAL_H */
