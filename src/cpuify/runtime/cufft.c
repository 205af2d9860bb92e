/* cpuify's cuFFT on the CPU: 1-, 2- and 3-dimensional C2C/Z2Z, R2C/D2Z and C2R/Z2D plans,
 * batched, with the advanced (strided, embedded) layouts of cufftPlanMany.
 *
 * Every transform is computed in double precision (single-precision data is widened on the
 * way in and rounded on the way out).  A 1-D transform of length n is a recursive mixed-
 * radix Cooley-Tukey FFT (radix 4 and 2 butterflies, a generic butterfly for other
 * factors); when n has a prime factor above FFT_MAX_RADIX it is Bluestein's algorithm over
 * a power-of-two FFT of length >= 2n - 1.  Multi-dimensional transforms apply the 1-D ones
 * along each axis.  Forward (CUFFT_FORWARD, exponent sign -1) and inverse (+1) transforms
 * are unnormalized, as cuFFT's.  The batch is spread over cpuify's workers
 * (mathlib_internal.h); a transform runs at the call, after the work before it on the plan's
 * stream (cufftSetStream). */
#define _GNU_SOURCE
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cufft.h"
#include "mathlib_internal.h"

#define FFT_MAX_RADIX 61
#define MAX_PLANS 4096

typedef struct { double re, im; } cpx;

static inline cpx cmul(cpx a, cpx b) { return (cpx){a.re * b.re - a.im * b.im, a.re * b.im + a.im * b.re}; }
static inline cpx cadd(cpx a, cpx b) { return (cpx){a.re + b.re, a.im + b.im}; }
static inline cpx csub(cpx a, cpx b) { return (cpx){a.re - b.re, a.im - b.im}; }
static inline cpx conj_if(cpx a, int sign) { return sign > 0 ? (cpx){a.re, -a.im} : a; }

/* ------------------------------------------------------------------------------------ */
/* 1-D complex transforms                                                               */

typedef struct fft1d {
    long long n;
    int nfac;
    int fac[64];
    cpx *tw[2];              /* tw[s][j] = exp(-+2 pi i j / n): forward [0] / inverse [1] */
    /* Bluestein */
    int bluestein;
    long long m;             /* power of two >= 2n - 1 */
    cpx *chirp;              /* exp(-i pi j^2 / n), j < n */
    cpx *bhat[2];            /* FFT_m of the conjugated chirp, forward [0] / inverse [1] */
    struct fft1d *sub;
} fft1d;

static void fft1d_free(fft1d *p) {
    if (!p) return;
    free(p->tw[0]);
    free(p->tw[1]);
    free(p->chirp);
    free(p->bhat[0]);
    free(p->bhat[1]);
    fft1d_free(p->sub);
    free(p);
}

/* complex elements of work memory fft1d_exec needs */
static long long fft1d_work(const fft1d *p) { return p->bluestein ? 2 * p->m + p->sub->n : p->n; }

/* out[0:n] = DFT of in[0], in[is], ... (length n = product of fac[]); tw: the plan's
 * twiddles of the transform's sign (of length P->n) */
static void fft_rec(const fft1d *P, const cpx *tw, const cpx *in, size_t is, cpx *out, long long n,
                    const int *fac, int sign) {
    int p = fac[0];
    long long m = n / p;
    if (m == 1)
        for (int q = 0; q < p; q++) out[q] = in[(size_t)q * is];
    else
        for (int q = 0; q < p; q++) fft_rec(P, tw, in + (size_t)q * is, is * p, out + q * m, m, fac + 1, sign);
    size_t tstride = (size_t)(P->n / n);
    if (p == 2) {
        for (long long k = 0; k < m; k++) {
            cpx t = cmul(out[m + k], tw[k * tstride]);
            out[m + k] = csub(out[k], t);
            out[k] = cadd(out[k], t);
        }
    } else if (p == 4) {
        for (long long k = 0; k < m; k++) {
            cpx a0 = out[k];
            cpx a1 = cmul(out[m + k], tw[k * tstride]);
            cpx a2 = cmul(out[2 * m + k], tw[2 * k * tstride]);
            cpx a3 = cmul(out[3 * m + k], tw[3 * k * tstride]);
            cpx t0 = cadd(a0, a2), t1 = csub(a0, a2), t2 = cadd(a1, a3), d = csub(a1, a3);
            /* (a1 - a3) * sign * i */
            cpx t3 = sign < 0 ? (cpx){d.im, -d.re} : (cpx){-d.im, d.re};
            out[k] = cadd(t0, t2);
            out[2 * m + k] = csub(t0, t2);
            out[m + k] = cadd(t1, t3);
            out[3 * m + k] = csub(t1, t3);
        }
    } else if (p == 3) {
        const double h = 0.86602540378443864676;     /* sin(2 pi / 3) */
        for (long long k = 0; k < m; k++) {
            cpx a0 = out[k];
            cpx a1 = cmul(out[m + k], tw[k * tstride]);
            cpx a2 = cmul(out[2 * m + k], tw[2 * k * tstride]);
            cpx t1 = cadd(a1, a2);
            cpx t2 = {a0.re - 0.5 * t1.re, a0.im - 0.5 * t1.im};
            cpx d = {(a1.re - a2.re) * h, (a1.im - a2.im) * h};
            cpx rot = sign < 0 ? (cpx){d.im, -d.re} : (cpx){-d.im, d.re};   /* d * sign * i */
            out[k] = cadd(a0, t1);
            out[m + k] = cadd(t2, rot);
            out[2 * m + k] = csub(t2, rot);
        }
    } else {
        cpx y[FFT_MAX_RADIX + 1];
        size_t pstride = (size_t)(P->n / p);
        for (long long k = 0; k < m; k++) {
            for (int q = 0; q < p; q++) y[q] = cmul(out[q * m + k], tw[(size_t)(q * k) * tstride]);
            for (int r = 0; r < p; r++) {
                cpx s = y[0];
                int at = 0;             /* (q r) mod p, stepped */
                for (int q = 1; q < p; q++) {
                    at += r;
                    if (at >= p) at -= p;
                    s = cadd(s, cmul(y[q], tw[(size_t)at * pstride]));
                }
                out[r * m + k] = s;
            }
        }
    }
}

static void fft1d_exec(const fft1d *P, cpx *data, int sign, cpx *work) {
    if (!P->bluestein) {
        fft_rec(P, P->tw[sign > 0], data, 1, work, P->n, P->fac, sign);
        memcpy(data, work, (size_t)P->n * sizeof(cpx));
        return;
    }
    long long n = P->n, m = P->m;
    cpx *a = work, *rest = work + m;
    for (long long j = 0; j < n; j++) a[j] = cmul(data[j], conj_if(P->chirp[j], sign));
    for (long long j = n; j < m; j++) a[j] = (cpx){0, 0};
    fft1d_exec(P->sub, a, -1, rest);
    const cpx *bh = P->bhat[sign > 0];
    for (long long j = 0; j < m; j++) a[j] = cmul(a[j], bh[j]);
    fft1d_exec(P->sub, a, 1, rest);
    double scale = 1.0 / (double)m;
    for (long long k = 0; k < n; k++) {
        cpx v = cmul(a[k], conj_if(P->chirp[k], sign));
        data[k] = (cpx){v.re * scale, v.im * scale};
    }
}

static fft1d *fft1d_make(long long n) {
    fft1d *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->n = n;
    long long r = n;
    int big = 0;
    while (r % 4 == 0 && p->nfac < 63) { p->fac[p->nfac++] = 4; r /= 4; }
    while (r % 2 == 0 && p->nfac < 63) { p->fac[p->nfac++] = 2; r /= 2; }
    while (r % 3 == 0 && p->nfac < 63) { p->fac[p->nfac++] = 3; r /= 3; }
    for (long long f = 3; r > 1 && p->nfac < 63;) {
        if (f * f > r) f = r;                         /* r is prime */
        if (r % f == 0) {
            if (f > FFT_MAX_RADIX) { big = 1; break; }
            p->fac[p->nfac++] = (int)f;
            r /= f;
        } else {
            f += 2;
        }
    }
    if (n == 1) p->fac[p->nfac++] = 1;
    if (!big) {
        p->tw[0] = malloc((size_t)n * sizeof(cpx));
        p->tw[1] = malloc((size_t)n * sizeof(cpx));
        if (!p->tw[0] || !p->tw[1]) { fft1d_free(p); return NULL; }
        for (long long j = 0; j < n; j++) {
            double a = -2.0 * M_PI * (double)j / (double)n;
            p->tw[0][j] = (cpx){cos(a), sin(a)};
            p->tw[1][j] = (cpx){cos(a), -sin(a)};
        }
        return p;
    }
    p->bluestein = 1;
    long long m = 1;
    while (m < 2 * n - 1) m <<= 1;
    p->m = m;
    p->sub = fft1d_make(m);
    p->chirp = malloc((size_t)n * sizeof(cpx));
    p->bhat[0] = calloc((size_t)m, sizeof(cpx));
    p->bhat[1] = calloc((size_t)m, sizeof(cpx));
    cpx *work = malloc((size_t)fft1d_work(p) * sizeof(cpx));
    if (!p->sub || !p->chirp || !p->bhat[0] || !p->bhat[1] || !work) {
        free(work);
        fft1d_free(p);
        return NULL;
    }
    for (long long j = 0; j < n; j++) {
        /* j^2 mod 2n keeps the angle small and exact */
        double a = -M_PI * (double)((unsigned long long)j * (unsigned long long)j % (unsigned long long)(2 * n)) /
                   (double)n;
        p->chirp[j] = (cpx){cos(a), sin(a)};
    }
    for (int s = 0; s < 2; s++) {
        /* b_l = conj(chirp_l) of the transform's sign, at l and m - l */
        cpx *b = p->bhat[s];
        for (long long j = 0; j < n; j++) {
            cpx c = s ? p->chirp[j] : (cpx){p->chirp[j].re, -p->chirp[j].im};
            b[j] = c;
            if (j) b[m - j] = c;
        }
        fft1d_exec(p->sub, b, -1, work);
    }
    free(work);
    return p;
}

/* ------------------------------------------------------------------------------------ */
/* plans                                                                                */

typedef struct {
    int made;
    cufftType type;
    int rank;
    long long n[3];
    long long inembed[3], onembed[3];   /* storage dims ([0] unused) of the advanced layout */
    int iadvanced, oadvanced;           /* inembed/onembed given (else the basic layout) */
    long long istride, idist, ostride, odist, batch;
    fft1d *dims[3];
    long long total, line_work;
    cudaStream_t stream;
} plan_t;

static plan_t *plans[MAX_PLANS];
static pthread_mutex_t plans_lock = PTHREAD_MUTEX_INITIALIZER;

__attribute__((visibility("default"))) int cpuify_cufft_not_supported_once(const char *fn, int *said) {
    if (!__atomic_exchange_n(said, 1, __ATOMIC_RELAXED))
        fprintf(stderr, "cpuify: %s is not supported by cpuify's cuFFT (returning CUFFT_NOT_SUPPORTED)\n", fn);
    return CUFFT_NOT_SUPPORTED;
}

static plan_t *plan_of(cufftHandle h) {
    if (h <= 0 || h >= MAX_PLANS) return NULL;
    pthread_mutex_lock(&plans_lock);
    plan_t *p = plans[h];
    pthread_mutex_unlock(&plans_lock);
    return p;
}

static void plan_clear(plan_t *p) {
    for (int d = 0; d < 3; d++) fft1d_free(p->dims[d]);
    cudaStream_t s = p->stream;
    memset(p, 0, sizeof *p);
    p->stream = s;
}

cufftResult cufftCreate(cufftHandle *handle) {
    if (!handle) return CUFFT_INVALID_VALUE;
    plan_t *p = calloc(1, sizeof *p);
    if (!p) return CUFFT_ALLOC_FAILED;
    pthread_mutex_lock(&plans_lock);
    int h = 1;
    while (h < MAX_PLANS && plans[h]) h++;
    if (h < MAX_PLANS) plans[h] = p;
    pthread_mutex_unlock(&plans_lock);
    if (h == MAX_PLANS) {
        free(p);
        return CUFFT_ALLOC_FAILED;
    }
    *handle = h;
    return CUFFT_SUCCESS;
}

cufftResult cufftDestroy(cufftHandle h) {
    pthread_mutex_lock(&plans_lock);
    plan_t *p = h > 0 && h < MAX_PLANS ? plans[h] : NULL;
    if (p) plans[h] = NULL;
    pthread_mutex_unlock(&plans_lock);
    if (!p) return CUFFT_INVALID_PLAN;
    plan_clear(p);
    free(p);
    return CUFFT_SUCCESS;
}

static int type_ok(cufftType t) {
    return t == CUFFT_R2C || t == CUFFT_C2R || t == CUFFT_C2C || t == CUFFT_D2Z || t == CUFFT_Z2D ||
           t == CUFFT_Z2Z;
}
static int is_r2c(cufftType t) { return t == CUFFT_R2C || t == CUFFT_D2Z; }
static int is_c2r(cufftType t) { return t == CUFFT_C2R || t == CUFFT_Z2D; }
static int is_double(cufftType t) { return t == CUFFT_D2Z || t == CUFFT_Z2D || t == CUFFT_Z2Z; }

cufftResult cufftMakePlanMany64(cufftHandle h, int rank, long long *n, long long *inembed, long long istride,
                                long long idist, long long *onembed, long long ostride, long long odist,
                                cufftType type, long long batch, size_t *workSize) {
    plan_t *p = plan_of(h);
    if (!p) return CUFFT_INVALID_PLAN;
    if (!type_ok(type)) return CUFFT_INVALID_TYPE;
    if (rank < 1 || rank > 3 || !n) return CUFFT_INVALID_SIZE;
    if (batch < 1) return CUFFT_INVALID_SIZE;
    long long total = 1, work = 0;
    for (int d = 0; d < rank; d++) {
        if (n[d] < 1 || n[d] > (1LL << 31)) return CUFFT_INVALID_SIZE;
        total *= n[d];
        if (total > (1LL << 40)) return CUFFT_INVALID_SIZE;
    }
    if (inembed && (istride < 1 || idist < 1)) return CUFFT_INVALID_VALUE;
    if (onembed && (ostride < 1 || odist < 1)) return CUFFT_INVALID_VALUE;
    plan_clear(p);
    for (int d = 0; d < rank; d++) {
        p->n[d] = n[d];
        p->inembed[d] = inembed ? inembed[d] : 0;
        p->onembed[d] = onembed ? onembed[d] : 0;
        p->dims[d] = fft1d_make(n[d]);
        if (!p->dims[d]) {
            plan_clear(p);
            return CUFFT_ALLOC_FAILED;
        }
        long long w = n[d] + fft1d_work(p->dims[d]);     /* a line + its transform's work */
        if (w > work) work = w;
    }
    if (inembed) for (int d = 1; d < rank; d++) if (inembed[d] < 1) { plan_clear(p); return CUFFT_INVALID_VALUE; }
    if (onembed) for (int d = 1; d < rank; d++) if (onembed[d] < 1) { plan_clear(p); return CUFFT_INVALID_VALUE; }
    p->type = type;
    p->rank = rank;
    p->iadvanced = inembed != NULL;
    p->oadvanced = onembed != NULL;
    p->istride = inembed ? istride : 1;
    p->idist = inembed ? idist : 0;
    p->ostride = onembed ? ostride : 1;
    p->odist = onembed ? odist : 0;
    p->batch = batch;
    p->total = total;
    p->line_work = work;
    p->made = 1;
    if (workSize) *workSize = 0;       /* the CPU transform works in cpuify's worker memory */
    return CUFFT_SUCCESS;
}

cufftResult cufftMakePlanMany(cufftHandle h, int rank, int *n, int *inembed, int istride, int idist,
                              int *onembed, int ostride, int odist, cufftType type, int batch,
                              size_t *workSize) {
    long long n64[3] = {0}, in64[3] = {0}, on64[3] = {0};
    if (rank < 1 || rank > 3 || !n) return plan_of(h) ? CUFFT_INVALID_SIZE : CUFFT_INVALID_PLAN;
    for (int d = 0; d < rank; d++) {
        n64[d] = n[d];
        if (inembed) in64[d] = inembed[d];
        if (onembed) on64[d] = onembed[d];
    }
    return cufftMakePlanMany64(h, rank, n64, inembed ? in64 : NULL, istride, idist, onembed ? on64 : NULL,
                               ostride, odist, type, batch, workSize);
}

cufftResult cufftMakePlan1d(cufftHandle h, int nx, cufftType type, int batch, size_t *workSize) {
    int n[1] = {nx};
    return cufftMakePlanMany(h, 1, n, NULL, 1, 0, NULL, 1, 0, type, batch, workSize);
}
cufftResult cufftMakePlan2d(cufftHandle h, int nx, int ny, cufftType type, size_t *workSize) {
    int n[2] = {nx, ny};
    return cufftMakePlanMany(h, 2, n, NULL, 1, 0, NULL, 1, 0, type, 1, workSize);
}
cufftResult cufftMakePlan3d(cufftHandle h, int nx, int ny, int nz, cufftType type, size_t *workSize) {
    int n[3] = {nx, ny, nz};
    return cufftMakePlanMany(h, 3, n, NULL, 1, 0, NULL, 1, 0, type, 1, workSize);
}

/* a plan made in one call: the handle is set only when the plan is good */
static cufftResult plan_now(cufftHandle *plan, cufftResult (*make)(cufftHandle, void *), void *args) {
    if (!plan) return CUFFT_INVALID_VALUE;
    cufftHandle h;
    cufftResult r = cufftCreate(&h);
    if (r != CUFFT_SUCCESS) return r;
    r = make(h, args);
    if (r != CUFFT_SUCCESS) {
        cufftDestroy(h);
        return r;
    }
    *plan = h;
    return CUFFT_SUCCESS;
}

typedef struct {
    int rank, *n, *inembed, istride, idist, *onembed, ostride, odist, batch;
    cufftType type;
} many_args;

static cufftResult make_many(cufftHandle h, void *a_) {
    many_args *a = (many_args *)a_;
    return cufftMakePlanMany(h, a->rank, a->n, a->inembed, a->istride, a->idist, a->onembed, a->ostride,
                             a->odist, a->type, a->batch, NULL);
}

cufftResult cufftPlanMany(cufftHandle *plan, int rank, int *n, int *inembed, int istride, int idist,
                          int *onembed, int ostride, int odist, cufftType type, int batch) {
    many_args a = {rank, n, inembed, istride, idist, onembed, ostride, odist, batch, type};
    return plan_now(plan, make_many, &a);
}
cufftResult cufftPlan1d(cufftHandle *plan, int nx, cufftType type, int batch) {
    int n[1] = {nx};
    return cufftPlanMany(plan, 1, n, NULL, 1, 0, NULL, 1, 0, type, batch);
}
cufftResult cufftPlan2d(cufftHandle *plan, int nx, int ny, cufftType type) {
    int n[2] = {nx, ny};
    return cufftPlanMany(plan, 2, n, NULL, 1, 0, NULL, 1, 0, type, 1);
}
cufftResult cufftPlan3d(cufftHandle *plan, int nx, int ny, int nz, cufftType type) {
    int n[3] = {nx, ny, nz};
    return cufftPlanMany(plan, 3, n, NULL, 1, 0, NULL, 1, 0, type, 1);
}

static cufftResult estimate(size_t *workSize) {
    if (!workSize) return CUFFT_INVALID_VALUE;
    *workSize = 0;
    return CUFFT_SUCCESS;
}
cufftResult cufftEstimate1d(int nx, cufftType type, int batch, size_t *workSize) {
    (void)nx; (void)type; (void)batch;
    return estimate(workSize);
}
cufftResult cufftEstimate2d(int nx, int ny, cufftType type, size_t *workSize) {
    (void)nx; (void)ny; (void)type;
    return estimate(workSize);
}
cufftResult cufftEstimate3d(int nx, int ny, int nz, cufftType type, size_t *workSize) {
    (void)nx; (void)ny; (void)nz; (void)type;
    return estimate(workSize);
}
cufftResult cufftEstimateMany(int rank, int *n, int *inembed, int istride, int idist, int *onembed,
                              int ostride, int odist, cufftType type, int batch, size_t *workSize) {
    (void)rank; (void)n; (void)inembed; (void)istride; (void)idist; (void)onembed; (void)ostride;
    (void)odist; (void)type; (void)batch;
    return estimate(workSize);
}
cufftResult cufftGetSize1d(cufftHandle h, int nx, cufftType type, int batch, size_t *workSize) {
    (void)nx; (void)type; (void)batch;
    return plan_of(h) ? estimate(workSize) : CUFFT_INVALID_PLAN;
}
cufftResult cufftGetSize2d(cufftHandle h, int nx, int ny, cufftType type, size_t *workSize) {
    (void)nx; (void)ny; (void)type;
    return plan_of(h) ? estimate(workSize) : CUFFT_INVALID_PLAN;
}
cufftResult cufftGetSize3d(cufftHandle h, int nx, int ny, int nz, cufftType type, size_t *workSize) {
    (void)nx; (void)ny; (void)nz; (void)type;
    return plan_of(h) ? estimate(workSize) : CUFFT_INVALID_PLAN;
}
cufftResult cufftGetSizeMany(cufftHandle h, int rank, int *n, int *inembed, int istride, int idist,
                             int *onembed, int ostride, int odist, cufftType type, int batch, size_t *workArea) {
    (void)rank; (void)n; (void)inembed; (void)istride; (void)idist; (void)onembed; (void)ostride;
    (void)odist; (void)type; (void)batch;
    return plan_of(h) ? estimate(workArea) : CUFFT_INVALID_PLAN;
}
cufftResult cufftGetSize(cufftHandle h, size_t *workSize) {
    return plan_of(h) ? estimate(workSize) : CUFFT_INVALID_PLAN;
}
cufftResult cufftSetWorkArea(cufftHandle h, void *workArea) {
    (void)workArea;
    return plan_of(h) ? CUFFT_SUCCESS : CUFFT_INVALID_PLAN;
}
cufftResult cufftSetAutoAllocation(cufftHandle h, int autoAllocate) {
    (void)autoAllocate;
    return plan_of(h) ? CUFFT_SUCCESS : CUFFT_INVALID_PLAN;
}
cufftResult cufftSetCompatibilityMode(cufftHandle h, cufftCompatibility mode) {
    (void)mode;
    return plan_of(h) ? CUFFT_SUCCESS : CUFFT_INVALID_PLAN;
}

cufftResult cufftSetStream(cufftHandle h, cudaStream_t stream) {
    plan_t *p = plan_of(h);
    if (!p) return CUFFT_INVALID_PLAN;
    if (cudaStreamQuery(stream) == cudaErrorInvalidResourceHandle) {
        cudaGetLastError();
        return CUFFT_INVALID_VALUE;
    }
    p->stream = stream;
    return CUFFT_SUCCESS;
}

cufftResult cufftGetVersion(int *version) {
    if (!version) return CUFFT_INVALID_VALUE;
    *version = CUFFT_VERSION;
    return CUFFT_SUCCESS;
}

cufftResult cufftGetProperty(libraryPropertyType type, int *value) {
    if (!value) return CUFFT_INVALID_VALUE;
    switch (type) {
    case MAJOR_VERSION: *value = CUFFT_VER_MAJOR; return CUFFT_SUCCESS;
    case MINOR_VERSION: *value = CUFFT_VER_MINOR; return CUFFT_SUCCESS;
    case PATCH_LEVEL: *value = CUFFT_VER_PATCH; return CUFFT_SUCCESS;
    default: return CUFFT_INVALID_TYPE;
    }
}

/* ------------------------------------------------------------------------------------ */
/* execution                                                                            */

/* where the elements of one side (input or output) of a transform are: logical dims,
 * storage dims (row-major), element stride and batch distance; dims padded to 3 */
typedef struct {
    long long logical[3], storage[3], stride, dist;
    int real, dbl;
    void *base;
} side_t;

static void side_of(const plan_t *p, int output, int inplace, void *base, side_t *s) {
    int r2c = is_r2c(p->type), c2r = is_c2r(p->type);
    int real = output ? c2r : r2c;
    int half = output ? r2c : c2r;                 /* complex side of a real transform */
    const long long *embed = output ? p->onembed : p->inembed;
    int pad = 3 - p->rank;
    for (int a = 0; a < 3; a++) {
        long long n = a < pad ? 1 : p->n[a - pad];
        if (a == 2 && half) n = n / 2 + 1;
        s->logical[a] = n;
        s->storage[a] = n;
    }
    if (output ? p->oadvanced : p->iadvanced) {
        for (int d = 1; d < p->rank; d++) s->storage[d + pad] = embed[d];
        s->stride = output ? p->ostride : p->istride;
        s->dist = output ? p->odist : p->idist;
    } else {
        /* in-place real data is padded to the complex row's length (2 (n/2 + 1)), as in cuFFT */
        if (real && inplace) s->storage[2] = 2 * (s->logical[2] / 2 + 1);
        s->stride = 1;
        s->dist = s->storage[0] * s->storage[1] * s->storage[2];
    }
    s->real = real;
    s->dbl = is_double(p->type);
    s->base = base;
}

typedef struct {
    const plan_t *p;
    side_t in, out;
    int sign;
} exec_args;

static cpx load(const side_t *s, long long at) {
    if (s->real) return (cpx){s->dbl ? ((const double *)s->base)[at] : ((const float *)s->base)[at], 0};
    if (s->dbl) return ((const cpx *)s->base)[at];
    const float *f = (const float *)s->base + 2 * at;
    return (cpx){f[0], f[1]};
}

static void store(const side_t *s, long long at, cpx v) {
    if (s->real) {
        if (s->dbl) ((double *)s->base)[at] = v.re;
        else ((float *)s->base)[at] = (float)v.re;
    } else if (s->dbl) {
        ((cpx *)s->base)[at] = v;
    } else {
        float *f = (float *)s->base + 2 * at;
        f[0] = (float)v.re;
        f[1] = (float)v.im;
    }
}

/* transforms buf (dims N, row-major) along axis a; only lines whose last index < last_limit */
static void along_axis(const plan_t *p, cpx *buf, const long long N[3], int a, int sign, long long last_limit,
                       cpx *line, cpx *work) {
    const fft1d *f = p->dims[a - (3 - p->rank)];
    long long stride = 1;
    for (int b = a + 1; b < 3; b++) stride *= N[b];
    if (a == 2) {
        for (long long r = 0; r < N[0] * N[1]; r++) fft1d_exec(f, buf + r * N[2], sign, work);
        return;
    }
    for (long long i0 = 0; i0 < (a == 0 ? 1 : N[0]); i0++)
        for (long long i1 = 0; i1 < (a == 1 ? 1 : N[1]); i1++)
            for (long long i2 = 0; i2 < last_limit; i2++) {
                long long base = (i0 * N[1] + i1) * N[2] + i2;
                for (long long k = 0; k < N[a]; k++) line[k] = buf[base + k * stride];
                fft1d_exec(f, line, sign, work);
                for (long long k = 0; k < N[a]; k++) buf[base + k * stride] = line[k];
            }
}

static void exec_job(const void *arg, uint32_t b, void *scratch) {
    const exec_args *e = (const exec_args *)arg;
    const plan_t *p = e->p;
    const side_t *in = &e->in, *out = &e->out;
    int pad = 3 - p->rank;
    long long N[3];
    for (int a = 0; a < 3; a++) N[a] = a < pad ? 1 : p->n[a - pad];
    cpx *buf = (cpx *)scratch, *line = buf + p->total, *work = line + N[0] + N[1] + N[2];
    int c2r = is_c2r(p->type);

    /* gather this batch's input */
    long long ib = (long long)b * in->dist;
    for (long long i0 = 0; i0 < in->logical[0]; i0++)
        for (long long i1 = 0; i1 < in->logical[1]; i1++)
            for (long long i2 = 0; i2 < in->logical[2]; i2++) {
                long long off = (i0 * in->storage[1] + i1) * in->storage[2] + i2;
                buf[(i0 * N[1] + i1) * N[2] + i2] = load(in, ib + off * in->stride);
            }

    if (!c2r) {
        for (int a = pad; a < 3; a++) along_axis(p, buf, N, a, e->sign, N[2], line, work);
    } else {
        long long half = N[2] / 2 + 1;
        for (int a = pad; a < 2; a++) along_axis(p, buf, N, a, 1, half, line, work);
        for (long long r = 0; r < N[0] * N[1]; r++) {
            cpx *row = buf + r * N[2];
            for (long long k = half; k < N[2]; k++) row[k] = (cpx){row[N[2] - k].re, -row[N[2] - k].im};
            fft1d_exec(p->dims[p->rank - 1], row, 1, work);
        }
    }

    /* scatter the output (R2C: the non-redundant half) */
    long long ob = (long long)b * out->dist;
    for (long long i0 = 0; i0 < out->logical[0]; i0++)
        for (long long i1 = 0; i1 < out->logical[1]; i1++)
            for (long long i2 = 0; i2 < out->logical[2]; i2++) {
                long long off = (i0 * out->storage[1] + i1) * out->storage[2] + i2;
                store(out, ob + off * out->stride, buf[(i0 * N[1] + i1) * N[2] + i2]);
            }
}

static cufftResult exec(const char *api, cufftHandle h, void *idata, void *odata, int sign, cufftType want,
                        int check_direction) {
    plan_t *p = plan_of(h);
    if (!p || !p->made) return CUFFT_INVALID_PLAN;
    if (p->type != want) {
        fprintf(stderr, "cpuify: %s on a plan made for another transform type; cuFFT returns "
                        "CUFFT_INVALID_VALUE\n", api);
        return CUFFT_INVALID_VALUE;
    }
    if (check_direction && sign != CUFFT_FORWARD && sign != CUFFT_INVERSE) return CUFFT_INVALID_VALUE;
    if (!idata || !odata) return CUFFT_INVALID_VALUE;
    exec_args e;
    e.p = p;
    e.sign = sign;
    int inplace = idata == odata;
    side_of(p, 0, inplace, idata, &e.in);
    side_of(p, 1, inplace, odata, &e.out);
    uint64_t scratch = (uint64_t)(p->total + p->n[0] + (p->rank > 1 ? p->n[1] : 0) +
                                  (p->rank > 2 ? p->n[2] : 0) + p->line_work) * sizeof(cpx);
    if (p->batch > UINT32_MAX) return CUFFT_INVALID_SIZE;
    /* (a transform reads what the work before it on the plan's stream wrote) */
    if (cpuify_run_job(api, p->stream, (uint32_t)p->batch, scratch, exec_job, &e))
        return CUFFT_EXEC_FAILED;
    return CUFFT_SUCCESS;
}

cufftResult cufftExecC2C(cufftHandle plan, cufftComplex *idata, cufftComplex *odata, int direction) {
    return exec("cufftExecC2C", plan, idata, odata, direction, CUFFT_C2C, 1);
}
cufftResult cufftExecZ2Z(cufftHandle plan, cufftDoubleComplex *idata, cufftDoubleComplex *odata, int direction) {
    return exec("cufftExecZ2Z", plan, idata, odata, direction, CUFFT_Z2Z, 1);
}
cufftResult cufftExecR2C(cufftHandle plan, cufftReal *idata, cufftComplex *odata) {
    return exec("cufftExecR2C", plan, idata, odata, CUFFT_FORWARD, CUFFT_R2C, 0);
}
cufftResult cufftExecD2Z(cufftHandle plan, cufftDoubleReal *idata, cufftDoubleComplex *odata) {
    return exec("cufftExecD2Z", plan, idata, odata, CUFFT_FORWARD, CUFFT_D2Z, 0);
}
cufftResult cufftExecC2R(cufftHandle plan, cufftComplex *idata, cufftReal *odata) {
    return exec("cufftExecC2R", plan, idata, odata, CUFFT_INVERSE, CUFFT_C2R, 0);
}
cufftResult cufftExecZ2D(cufftHandle plan, cufftDoubleComplex *idata, cufftDoubleReal *odata) {
    return exec("cufftExecZ2D", plan, idata, odata, CUFFT_INVERSE, CUFFT_Z2D, 0);
}
