/* cpuify's cuBLAS: the v2 (handle) API and the legacy API on the CPU.  Device pointers are
 * host memory, so the routines read and write them directly; a routine runs at the call,
 * after the work before it on the handle's stream (cublasSetStream; mathlib_internal.h).
 *
 * GEMM is cache-blocked as in BLIS/GotoBLAS: C in tiles of GEMM_MC x GEMM_NC, one tile per
 * job spread over cpuify's workers; per tile, slices of GEMM_KC of the k dimension whose
 * op(A) block (MC x KC, panels of MR rows) and op(B) block (KC x NC, panels of NR columns)
 * are packed into the worker's scratch; a register-blocked micro-kernel (MR x NR
 * accumulators, one 64-byte vector of MR elements per column) computes each MR x NR
 * piece.  The micro-kernel is compiled for AVX-512, AVX2+FMA and baseline x86-64 (or the
 * host's baseline elsewhere) and chosen at the first call. */
#define _GNU_SOURCE
#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cublas.h"
#include "mathlib_internal.h"

#define HANDLE_MAGIC 0x63424c53u

struct cublasContext {
    uint32_t magic;
    cudaStream_t stream;
    cublasPointerMode_t pointer_mode;
    cublasAtomicsMode_t atomics_mode;
    cublasMath_t math_mode;
};

static int handle_ok(cublasHandle_t h) { return h && h->magic == HANDLE_MAGIC; }

#define CHECK_HANDLE(h) \
    do { if (!handle_ok(h)) return CUBLAS_STATUS_NOT_INITIALIZED; } while (0)

/* A routine: the handle checked, then the work before it on the handle's stream waited for
 * (the routine reads what that work wrote; it runs at the call, mathlib_internal.h). */
#define BEGIN_ROUTINE(h) \
    do { CHECK_HANDLE(h); cpuify_cudart_wait_stream_order((h)->stream); } while (0)

/* A scalar argument's value: a device-memory scalar (CUBLAS_POINTER_MODE_DEVICE) may be
 * written by the work before the routine on the handle's stream. */
static void scalars_ready(cublasHandle_t h) {
    if (handle_ok(h) && h->pointer_mode == CUBLAS_POINTER_MODE_DEVICE)
        cpuify_cudart_wait_stream_order(h->stream);
}
#define SCALAR(h, p) (scalars_ready(h), (p) ? *(p) : 0)

/* the generated stubs (cpuify/nvcc/mathlibs.py): one line per unimplemented function */
__attribute__((visibility("default"))) int cpuify_cublas_not_supported_once(const char *fn, int *said) {
    if (!__atomic_exchange_n(said, 1, __ATOMIC_RELAXED))
        fprintf(stderr, "cpuify: %s is not supported by cpuify's cuBLAS "
                        "(returning CUBLAS_STATUS_NOT_SUPPORTED)\n", fn);
    return CUBLAS_STATUS_NOT_SUPPORTED;
}

static cublasStatus_t not_supported(const char *what) {
    fprintf(stderr, "cpuify: %s is not supported by cpuify's cuBLAS "
                    "(returning CUBLAS_STATUS_NOT_SUPPORTED)\n", what);
    return CUBLAS_STATUS_NOT_SUPPORTED;
}

/* ------------------------------------------------------------------------------------ */
/* handle, stream, modes                                                                */

cublasStatus_t cublasCreate_v2(cublasHandle_t *handle) {
    if (!handle) return CUBLAS_STATUS_INVALID_VALUE;
    struct cublasContext *c = calloc(1, sizeof *c);
    if (!c) return CUBLAS_STATUS_ALLOC_FAILED;
    c->magic = HANDLE_MAGIC;
    *handle = c;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy_v2(cublasHandle_t handle) {
    CHECK_HANDLE(handle);
    cpuify_cudart_wait_launches();   /* (cuBLAS's implicitly synchronizes the device) */
    handle->magic = 0;
    free(handle);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetVersion_v2(cublasHandle_t handle, int *version) {
    CHECK_HANDLE(handle);
    if (!version) return CUBLAS_STATUS_INVALID_VALUE;
    *version = CUBLAS_VERSION;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetProperty(libraryPropertyType type, int *value) {
    if (!value) return CUBLAS_STATUS_INVALID_VALUE;
    switch (type) {
    case MAJOR_VERSION: *value = CUBLAS_VER_MAJOR; return CUBLAS_STATUS_SUCCESS;
    case MINOR_VERSION: *value = CUBLAS_VER_MINOR; return CUBLAS_STATUS_SUCCESS;
    case PATCH_LEVEL: *value = CUBLAS_VER_PATCH; return CUBLAS_STATUS_SUCCESS;
    default: return CUBLAS_STATUS_INVALID_VALUE;
    }
}

size_t cublasGetCudartVersion(void) {
    int v = 0;
    cudaRuntimeGetVersion(&v);
    return (size_t)v;
}

cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream) {
    CHECK_HANDLE(handle);
    if (cudaStreamQuery(stream) == cudaErrorInvalidResourceHandle) {
        cudaGetLastError();
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    handle->stream = stream;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetStream_v2(cublasHandle_t handle, cudaStream_t *stream) {
    CHECK_HANDLE(handle);
    if (!stream) return CUBLAS_STATUS_INVALID_VALUE;
    *stream = handle->stream;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t handle, void *workspace, size_t size) {
    (void)workspace; (void)size;     /* the CPU routines take their memory from the workers */
    CHECK_HANDLE(handle);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetPointerMode_v2(cublasHandle_t handle, cublasPointerMode_t *mode) {
    CHECK_HANDLE(handle);
    if (!mode) return CUBLAS_STATUS_INVALID_VALUE;
    *mode = handle->pointer_mode;
    return CUBLAS_STATUS_SUCCESS;
}

/* device and host scalars are both host memory here: the mode is kept, not needed */
cublasStatus_t cublasSetPointerMode_v2(cublasHandle_t handle, cublasPointerMode_t mode) {
    CHECK_HANDLE(handle);
    if (mode != CUBLAS_POINTER_MODE_HOST && mode != CUBLAS_POINTER_MODE_DEVICE)
        return CUBLAS_STATUS_INVALID_VALUE;
    handle->pointer_mode = mode;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetAtomicsMode(cublasHandle_t handle, cublasAtomicsMode_t *mode) {
    CHECK_HANDLE(handle);
    if (!mode) return CUBLAS_STATUS_INVALID_VALUE;
    *mode = handle->atomics_mode;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetAtomicsMode(cublasHandle_t handle, cublasAtomicsMode_t mode) {
    CHECK_HANDLE(handle);
    if (mode != CUBLAS_ATOMICS_NOT_ALLOWED && mode != CUBLAS_ATOMICS_ALLOWED)
        return CUBLAS_STATUS_INVALID_VALUE;
    handle->atomics_mode = mode;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetMathMode(cublasHandle_t handle, cublasMath_t *mode) {
    CHECK_HANDLE(handle);
    if (!mode) return CUBLAS_STATUS_INVALID_VALUE;
    *mode = handle->math_mode;
    return CUBLAS_STATUS_SUCCESS;
}

/* every mode computes in the full precision of the data type on the CPU */
cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
    CHECK_HANDLE(handle);
    handle->math_mode = mode;
    return CUBLAS_STATUS_SUCCESS;
}

const char *cublasGetStatusName(cublasStatus_t s) {
    switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
    }
    return "CUBLAS_STATUS_UNKNOWN";
}

const char *cublasGetStatusString(cublasStatus_t s) {
    switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "success";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "the library was not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED: return "the resource allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE: return "an invalid numeric value was used as an argument";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "an absent device architectural feature is required";
    case CUBLAS_STATUS_MAPPING_ERROR: return "an access to GPU memory space failed";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "the GPU program failed to execute";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "an internal operation failed";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "the functionality requested is not supported";
    case CUBLAS_STATUS_LICENSE_ERROR: return "there is an error with the license";
    }
    return "unknown error";
}

/* ------------------------------------------------------------------------------------ */
/* host <-> device copies                                                               */

/* cublasSet/GetVector and Matrix copy as cudaMemcpy2D (synchronous: done on return, as
 * cuBLAS's are); the Async ones as cudaMemcpy2DAsync on stream s. */
static cudaError_t copy_2d(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                           size_t height, int async, cudaStream_t s) {
    return async ? cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, height, cudaMemcpyDefault, s)
                 : cudaMemcpy2D(dst, dpitch, src, spitch, width, height, cudaMemcpyDefault);
}

static cublasStatus_t copy_strided(int n, int elem, const void *x, int incx, void *y, int incy,
                                   int async, cudaStream_t s) {
    if (n < 0 || elem <= 0 || incx <= 0 || incy <= 0) return CUBLAS_STATUS_INVALID_VALUE;
    if (n == 0) return CUBLAS_STATUS_SUCCESS;
    if (!x || !y) return CUBLAS_STATUS_INVALID_VALUE;
    cudaError_t e = copy_2d(y, (size_t)incy * elem, x, (size_t)incx * elem, (size_t)elem, (size_t)n,
                            async, s);
    if (e != cudaSuccess) { cudaGetLastError(); return CUBLAS_STATUS_MAPPING_ERROR; }
    return CUBLAS_STATUS_SUCCESS;
}

static cublasStatus_t copy_matrix(int rows, int cols, int elem, const void *a, int lda, void *b, int ldb,
                                  int async, cudaStream_t s) {
    if (rows < 0 || cols < 0 || elem <= 0 || lda <= 0 || ldb <= 0 || lda < rows || ldb < rows)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (rows == 0 || cols == 0) return CUBLAS_STATUS_SUCCESS;
    if (!a || !b) return CUBLAS_STATUS_INVALID_VALUE;
    cudaError_t e = copy_2d(b, (size_t)ldb * elem, a, (size_t)lda * elem, (size_t)rows * elem, (size_t)cols,
                            async, s);
    if (e != cudaSuccess) { cudaGetLastError(); return CUBLAS_STATUS_MAPPING_ERROR; }
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetVector(int n, int elemSize, const void *x, int incx, void *y, int incy) {
    return copy_strided(n, elemSize, x, incx, y, incy, 0, 0);
}
cublasStatus_t cublasGetVector(int n, int elemSize, const void *x, int incx, void *y, int incy) {
    return copy_strided(n, elemSize, x, incx, y, incy, 0, 0);
}
cublasStatus_t cublasSetVectorAsync(int n, int elemSize, const void *x, int incx, void *y, int incy,
                                    cudaStream_t s) {
    return copy_strided(n, elemSize, x, incx, y, incy, 1, s);
}
cublasStatus_t cublasGetVectorAsync(int n, int elemSize, const void *x, int incx, void *y, int incy,
                                    cudaStream_t s) {
    return copy_strided(n, elemSize, x, incx, y, incy, 1, s);
}
cublasStatus_t cublasSetMatrix(int rows, int cols, int elemSize, const void *A, int lda, void *B, int ldb) {
    return copy_matrix(rows, cols, elemSize, A, lda, B, ldb, 0, 0);
}
cublasStatus_t cublasGetMatrix(int rows, int cols, int elemSize, const void *A, int lda, void *B, int ldb) {
    return copy_matrix(rows, cols, elemSize, A, lda, B, ldb, 0, 0);
}
cublasStatus_t cublasSetMatrixAsync(int rows, int cols, int elemSize, const void *A, int lda, void *B,
                                    int ldb, cudaStream_t s) {
    return copy_matrix(rows, cols, elemSize, A, lda, B, ldb, 1, s);
}
cublasStatus_t cublasGetMatrixAsync(int rows, int cols, int elemSize, const void *A, int lda, void *B,
                                    int ldb, cudaStream_t s) {
    return copy_matrix(rows, cols, elemSize, A, lda, B, ldb, 1, s);
}

/* ------------------------------------------------------------------------------------ */
/* level 1: serial (memory-bound), run as one contained job                             */

/* element i of an n-vector with increment inc (BLAS: a negative one walks from the end) */
#define AT(x, i, n, inc) ((x)[(inc) >= 0 ? (ptrdiff_t)(i) * (inc) : (ptrdiff_t)((n) - 1 - (i)) * -(inc)])

typedef struct {
    int op, n, incx, incy;
    const void *x;
    void *y;
    double alpha;
    void *result;
    int dbl;
} level1_args;

enum { OP_AXPY, OP_SCAL, OP_COPY, OP_SWAP, OP_DOT, OP_NRM2, OP_ASUM, OP_AMAX, OP_AMIN };

#define LEVEL1(T, a, scratch)                                                                   \
    do {                                                                                        \
        const T *x = (const T *)a->x;                                                           \
        T *y = (T *)a->y;                                                                       \
        int n = a->n, ix = a->incx, iy = a->incy;                                               \
        switch (a->op) {                                                                        \
        case OP_AXPY: {                                                                         \
            T al = (T)a->alpha;                                                                 \
            for (int i = 0; i < n; i++) AT(y, i, n, iy) += al * AT(x, i, n, ix);                \
            break;                                                                              \
        }                                                                                       \
        case OP_SCAL: {                                                                         \
            T al = (T)a->alpha;                                                                 \
            for (int i = 0; i < n; i++) y[(ptrdiff_t)i * iy] *= al;                             \
            break;                                                                              \
        }                                                                                       \
        case OP_COPY:                                                                           \
            for (int i = 0; i < n; i++) AT(y, i, n, iy) = AT(x, i, n, ix);                      \
            break;                                                                              \
        case OP_SWAP:                                                                           \
            for (int i = 0; i < n; i++) {                                                       \
                T t = AT(y, i, n, iy);                                                          \
                AT(y, i, n, iy) = AT((T *)x, i, n, ix);                                         \
                AT((T *)x, i, n, ix) = t;                                                       \
            }                                                                                   \
            break;                                                                              \
        case OP_DOT: {                                                                          \
            double s = 0;                                                                       \
            for (int i = 0; i < n; i++) s += (double)AT(x, i, n, ix) * (double)AT(y, i, n, iy); \
            *(T *)a->result = (T)s;                                                             \
            break;                                                                              \
        }                                                                                       \
        case OP_NRM2: { /* scaled sum of squares: no overflow for large elements */             \
            double scale = 0, ssq = 1;                                                          \
            for (int i = 0; i < n; i++) {                                                       \
                double v = fabs((double)x[(ptrdiff_t)i * ix]);                                  \
                if (v == 0) continue;                                                           \
                if (scale < v) { ssq = 1 + ssq * (scale / v) * (scale / v); scale = v; }        \
                else ssq += (v / scale) * (v / scale);                                          \
            }                                                                                   \
            *(T *)a->result = (T)(scale * sqrt(ssq));                                           \
            break;                                                                              \
        }                                                                                       \
        case OP_ASUM: {                                                                         \
            double s = 0;                                                                       \
            for (int i = 0; i < n; i++) s += fabs((double)x[(ptrdiff_t)i * ix]);                \
            *(T *)a->result = (T)s;                                                             \
            break;                                                                              \
        }                                                                                       \
        case OP_AMAX: case OP_AMIN: {                                                           \
            int best = 0;                                                                       \
            T bv = 0;                                                                           \
            for (int i = 0; i < n; i++) {                                                       \
                T v = (T)fabs((double)x[(ptrdiff_t)i * ix]);                                    \
                if (i == 0 || (a->op == OP_AMAX ? v > bv : v < bv)) { best = i; bv = v; }       \
            }                                                                                   \
            *(int *)a->result = n > 0 ? best + 1 : 0;                                           \
            break;                                                                              \
        }                                                                                       \
        }                                                                                       \
        (void)scratch;                                                                          \
    } while (0)

static void level1_job(const void *arg, uint32_t index, void *scratch) {
    (void)index;
    const level1_args *a = (const level1_args *)arg;
    if (a->dbl) LEVEL1(double, a, scratch);
    else LEVEL1(float, a, scratch);
}

static cublasStatus_t level1(const char *api, cublasHandle_t h, level1_args a) {
    BEGIN_ROUTINE(h);
    int one_vector = a.op == OP_SCAL || a.op == OP_NRM2 || a.op == OP_ASUM || a.op == OP_AMAX ||
                     a.op == OP_AMIN;
    if (a.op >= OP_DOT && !a.result) return CUBLAS_STATUS_INVALID_VALUE;
    if (one_vector && a.incx <= 0) a.n = 0;       /* BLAS: nothing to do (result 0) */
    if (a.n <= 0) {
        if (a.op == OP_AMAX || a.op == OP_AMIN) *(int *)a.result = 0;
        else if (a.op >= OP_DOT) {
            if (a.dbl) *(double *)a.result = 0;
            else *(float *)a.result = 0;
        }
        return CUBLAS_STATUS_SUCCESS;
    }
    if (!a.x && a.op != OP_SCAL) return CUBLAS_STATUS_INVALID_VALUE;
    if (a.op == OP_SCAL) { a.y = (void *)a.x; a.incy = a.incx; }
    if (cpuify_run_job(api, h->stream, 1, 0, level1_job, &a)) return CUBLAS_STATUS_EXECUTION_FAILED;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSaxpy_v2(cublasHandle_t h, int n, const float *alpha, const float *x, int incx,
                              float *y, int incy) {
    if (handle_ok(h) && !alpha) return CUBLAS_STATUS_INVALID_VALUE;
    return level1("cublasSaxpy", h, (level1_args){OP_AXPY, n, incx, incy, x, y, SCALAR(h, alpha), 0, 0});
}
cublasStatus_t cublasDaxpy_v2(cublasHandle_t h, int n, const double *alpha, const double *x, int incx,
                              double *y, int incy) {
    if (handle_ok(h) && !alpha) return CUBLAS_STATUS_INVALID_VALUE;
    return level1("cublasDaxpy", h, (level1_args){OP_AXPY, n, incx, incy, x, y, SCALAR(h, alpha), 0, 1});
}
cublasStatus_t cublasSscal_v2(cublasHandle_t h, int n, const float *alpha, float *x, int incx) {
    if (handle_ok(h) && !alpha) return CUBLAS_STATUS_INVALID_VALUE;
    return level1("cublasSscal", h, (level1_args){OP_SCAL, n, incx, incx, x, x, SCALAR(h, alpha), 0, 0});
}
cublasStatus_t cublasDscal_v2(cublasHandle_t h, int n, const double *alpha, double *x, int incx) {
    if (handle_ok(h) && !alpha) return CUBLAS_STATUS_INVALID_VALUE;
    return level1("cublasDscal", h, (level1_args){OP_SCAL, n, incx, incx, x, x, SCALAR(h, alpha), 0, 1});
}
cublasStatus_t cublasScopy_v2(cublasHandle_t h, int n, const float *x, int incx, float *y, int incy) {
    return level1("cublasScopy", h, (level1_args){OP_COPY, n, incx, incy, x, y, 0, 0, 0});
}
cublasStatus_t cublasDcopy_v2(cublasHandle_t h, int n, const double *x, int incx, double *y, int incy) {
    return level1("cublasDcopy", h, (level1_args){OP_COPY, n, incx, incy, x, y, 0, 0, 1});
}
cublasStatus_t cublasSswap_v2(cublasHandle_t h, int n, float *x, int incx, float *y, int incy) {
    return level1("cublasSswap", h, (level1_args){OP_SWAP, n, incx, incy, x, y, 0, 0, 0});
}
cublasStatus_t cublasDswap_v2(cublasHandle_t h, int n, double *x, int incx, double *y, int incy) {
    return level1("cublasDswap", h, (level1_args){OP_SWAP, n, incx, incy, x, y, 0, 0, 1});
}
cublasStatus_t cublasSdot_v2(cublasHandle_t h, int n, const float *x, int incx, const float *y, int incy,
                             float *result) {
    return level1("cublasSdot", h, (level1_args){OP_DOT, n, incx, incy, x, (void *)y, 0, result, 0});
}
cublasStatus_t cublasDdot_v2(cublasHandle_t h, int n, const double *x, int incx, const double *y, int incy,
                             double *result) {
    return level1("cublasDdot", h, (level1_args){OP_DOT, n, incx, incy, x, (void *)y, 0, result, 1});
}
cublasStatus_t cublasSnrm2_v2(cublasHandle_t h, int n, const float *x, int incx, float *result) {
    return level1("cublasSnrm2", h, (level1_args){OP_NRM2, n, incx, incx, x, 0, 0, result, 0});
}
cublasStatus_t cublasDnrm2_v2(cublasHandle_t h, int n, const double *x, int incx, double *result) {
    return level1("cublasDnrm2", h, (level1_args){OP_NRM2, n, incx, incx, x, 0, 0, result, 1});
}
cublasStatus_t cublasSasum_v2(cublasHandle_t h, int n, const float *x, int incx, float *result) {
    return level1("cublasSasum", h, (level1_args){OP_ASUM, n, incx, incx, x, 0, 0, result, 0});
}
cublasStatus_t cublasDasum_v2(cublasHandle_t h, int n, const double *x, int incx, double *result) {
    return level1("cublasDasum", h, (level1_args){OP_ASUM, n, incx, incx, x, 0, 0, result, 1});
}
cublasStatus_t cublasIsamax_v2(cublasHandle_t h, int n, const float *x, int incx, int *result) {
    return level1("cublasIsamax", h, (level1_args){OP_AMAX, n, incx, incx, x, 0, 0, result, 0});
}
cublasStatus_t cublasIdamax_v2(cublasHandle_t h, int n, const double *x, int incx, int *result) {
    return level1("cublasIdamax", h, (level1_args){OP_AMAX, n, incx, incx, x, 0, 0, result, 1});
}
cublasStatus_t cublasIsamin_v2(cublasHandle_t h, int n, const float *x, int incx, int *result) {
    return level1("cublasIsamin", h, (level1_args){OP_AMIN, n, incx, incx, x, 0, 0, result, 0});
}
cublasStatus_t cublasIdamin_v2(cublasHandle_t h, int n, const double *x, int incx, int *result) {
    return level1("cublasIdamin", h, (level1_args){OP_AMIN, n, incx, incx, x, 0, 0, result, 1});
}

/* ------------------------------------------------------------------------------------ */
/* level 2                                                                              */

static int op_ok(cublasOperation_t op) {
    return op == CUBLAS_OP_N || op == CUBLAS_OP_T || op == CUBLAS_OP_C;
}

typedef struct {
    cublasOperation_t trans;
    int m, n, lda, incx, incy;
    double alpha, beta;
    const void *A, *x;
    void *y;
    int dbl, ger;
} level2_args;

#define GEMV(T, a)                                                                        \
    do {                                                                                  \
        const T *A = (const T *)a->A, *x = (const T *)a->x;                               \
        T *y = (T *)a->y;                                                                 \
        T alpha = (T)a->alpha, beta = (T)a->beta;                                         \
        int m = a->m, n = a->n, lda = a->lda;                                             \
        if (a->ger) { /* A += alpha x y^T */                                              \
            for (int j = 0; j < n; j++) {                                                 \
                T t = alpha * AT(y, j, n, a->incy);                                       \
                for (int i = 0; i < m; i++) ((T *)A)[i + (ptrdiff_t)j * lda] += AT(x, i, m, a->incx) * t; \
            }                                                                             \
            break;                                                                        \
        }                                                                                 \
        int ylen = a->trans == CUBLAS_OP_N ? m : n, xlen = a->trans == CUBLAS_OP_N ? n : m; \
        for (int i = 0; i < ylen; i++) {                                                  \
            T *yi = &AT(y, i, ylen, a->incy);                                             \
            *yi = beta == 0 ? 0 : beta * *yi;                                             \
        }                                                                                 \
        if (a->trans == CUBLAS_OP_N) {                                                    \
            for (int j = 0; j < n; j++) {                                                 \
                T t = alpha * AT(x, j, xlen, a->incx);                                    \
                const T *col = A + (ptrdiff_t)j * lda;                                    \
                if (a->incy == 1) for (int i = 0; i < m; i++) y[i] += col[i] * t;         \
                else for (int i = 0; i < m; i++) AT(y, i, ylen, a->incy) += col[i] * t;   \
            }                                                                             \
        } else {                                                                          \
            for (int j = 0; j < n; j++) {                                                 \
                const T *col = A + (ptrdiff_t)j * lda;                                    \
                T s = 0;                                                                  \
                for (int i = 0; i < m; i++) s += col[i] * AT(x, i, xlen, a->incx);        \
                AT(y, j, ylen, a->incy) += alpha * s;                                     \
            }                                                                             \
        }                                                                                 \
    } while (0)

static void level2_job(const void *arg, uint32_t index, void *scratch) {
    (void)index; (void)scratch;
    const level2_args *a = (const level2_args *)arg;
    if (a->dbl) GEMV(double, a);
    else GEMV(float, a);
}

static cublasStatus_t level2(const char *api, cublasHandle_t h, level2_args a, int have_scalars) {
    BEGIN_ROUTINE(h);
    if (!have_scalars || (!a.ger && !op_ok(a.trans)) || a.m < 0 || a.n < 0 || a.incx == 0 ||
        a.incy == 0 || a.lda < (a.m > 1 ? a.m : 1))
        return CUBLAS_STATUS_INVALID_VALUE;
    if (a.m == 0 || a.n == 0) {
        if (a.ger) return CUBLAS_STATUS_SUCCESS;
        a.alpha = 0;        /* y = beta y still applies when the other dimension is 0 */
        if ((a.trans == CUBLAS_OP_N ? a.m : a.n) == 0) return CUBLAS_STATUS_SUCCESS;
    }
    if (cpuify_run_job(api, h->stream, 1, 0, level2_job, &a)) return CUBLAS_STATUS_EXECUTION_FAILED;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSgemv_v2(cublasHandle_t h, cublasOperation_t trans, int m, int n, const float *alpha,
                              const float *A, int lda, const float *x, int incx, const float *beta,
                              float *y, int incy) {
    return level2("cublasSgemv", h, (level2_args){trans, m, n, lda, incx, incy, SCALAR(h, alpha),
                                                  SCALAR(h, beta), A, x, y, 0, 0}, alpha && beta);
}
cublasStatus_t cublasDgemv_v2(cublasHandle_t h, cublasOperation_t trans, int m, int n, const double *alpha,
                              const double *A, int lda, const double *x, int incx, const double *beta,
                              double *y, int incy) {
    return level2("cublasDgemv", h, (level2_args){trans, m, n, lda, incx, incy, SCALAR(h, alpha),
                                                  SCALAR(h, beta), A, x, y, 1, 0}, alpha && beta);
}
cublasStatus_t cublasSger_v2(cublasHandle_t h, int m, int n, const float *alpha, const float *x, int incx,
                             const float *y, int incy, float *A, int lda) {
    return level2("cublasSger", h, (level2_args){CUBLAS_OP_N, m, n, lda, incx, incy, SCALAR(h, alpha),
                                                 0, A, x, (void *)y, 0, 1}, alpha != 0);
}
cublasStatus_t cublasDger_v2(cublasHandle_t h, int m, int n, const double *alpha, const double *x, int incx,
                             const double *y, int incy, double *A, int lda) {
    return level2("cublasDger", h, (level2_args){CUBLAS_OP_N, m, n, lda, incx, incy, SCALAR(h, alpha),
                                                 0, A, x, (void *)y, 1, 1}, alpha != 0);
}

/* ------------------------------------------------------------------------------------ */
/* level 3: GEMM                                                                        */

#define GEMM_MC 128     /* a multiple of every micro-kernel's MR */
#define GEMM_KC 256
#define GEMM_NC 192     /* a multiple of every NR; 1024^2 makes 48 tiles (load balance) */

#define UKERNEL_ARGS(T) int kc, const T *restrict a, const T *restrict b, T *restrict c, size_t ldc, \
                        T alpha, T beta, int mr, int nr

/* C[0:mr, 0:nr] = alpha * (the MR x NR product of a packed op(A) panel and a packed op(B)
 * panel) + beta * C (beta == 0: C is not read) */
#define UKERNEL_STORE(T, MR, NR)                                                              \
    for (int j = 0; j < nr; j++) {                                                            \
        T *cj = c + (size_t)j * ldc;                                                          \
        if (beta == 0) for (int i = 0; i < mr; i++) cj[i] = alpha * out[j][i];                \
        else for (int i = 0; i < mr; i++) cj[i] = alpha * out[j][i] + beta * cj[i];           \
    }

/* the accumulators are NR x NV vectors of VLEN elements (MR = NV * VLEN), kept in registers */
#define SIMD_UKERNEL(NAME, TARGET, T, VT, VLEN, NV, NR, ZERO, LOAD, SET1, FMA, STORE)         \
    __attribute__((target(TARGET))) static void NAME(UKERNEL_ARGS(T)) {                       \
        VT acc[NR][NV];                                                                       \
        for (int j = 0; j < NR; j++)                                                          \
            for (int v = 0; v < NV; v++) acc[j][v] = ZERO();                                  \
        for (int p = 0; p < kc; p++) {                                                        \
            VT av[NV];                                                                        \
            for (int v = 0; v < NV; v++) av[v] = LOAD(a + (size_t)p * (NV * VLEN) + v * VLEN); \
            const T *bp = b + (size_t)p * NR;                                                 \
            for (int j = 0; j < NR; j++) {                                                    \
                VT bj = SET1(bp[j]);                                                          \
                for (int v = 0; v < NV; v++) acc[j][v] = FMA(av[v], bj, acc[j][v]);           \
            }                                                                                 \
        }                                                                                     \
        T out[NR][NV * VLEN];                                                                 \
        for (int j = 0; j < NR; j++)                                                          \
            for (int v = 0; v < NV; v++) STORE(&out[j][v * VLEN], acc[j][v]);                 \
        UKERNEL_STORE(T, NV * VLEN, NR)                                                       \
    }

/* portable: 8 x 4 (float) / 4 x 4 (double), vectorized by the compiler for the baseline ISA */
#define BASE_UKERNEL(NAME, T, MR, NR)                                                         \
    static void NAME(UKERNEL_ARGS(T)) {                                                       \
        T acc[NR][MR] = {{0}};                                                                \
        for (int p = 0; p < kc; p++)                                                          \
            for (int j = 0; j < NR; j++)                                                      \
                for (int i = 0; i < MR; i++) acc[j][i] += a[(size_t)p * MR + i] * b[(size_t)p * NR + j]; \
        T (*out)[MR] = acc;                                                                   \
        UKERNEL_STORE(T, MR, NR)                                                              \
    }

BASE_UKERNEL(ukernel_s_base, float, 8, 4)
BASE_UKERNEL(ukernel_d_base, double, 4, 4)

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
SIMD_UKERNEL(ukernel_s_avx2, "avx2,fma", float, __m256, 8, 2, 6, _mm256_setzero_ps, _mm256_loadu_ps,
             _mm256_set1_ps, _mm256_fmadd_ps, _mm256_storeu_ps)
SIMD_UKERNEL(ukernel_d_avx2, "avx2,fma", double, __m256d, 4, 2, 6, _mm256_setzero_pd, _mm256_loadu_pd,
             _mm256_set1_pd, _mm256_fmadd_pd, _mm256_storeu_pd)
SIMD_UKERNEL(ukernel_s_avx512, "avx512f,fma", float, __m512, 16, 2, 6, _mm512_setzero_ps, _mm512_loadu_ps,
             _mm512_set1_ps, _mm512_fmadd_ps, _mm512_storeu_ps)
SIMD_UKERNEL(ukernel_d_avx512, "avx512f,fma", double, __m512d, 8, 2, 6, _mm512_setzero_pd, _mm512_loadu_pd,
             _mm512_set1_pd, _mm512_fmadd_pd, _mm512_storeu_pd)
#define HAVE_X86_KERNELS 1
#endif

typedef struct {
    void *fn;
    int mr, nr;
} ukernel;

/* the micro-kernel for this CPU (double: dbl); CPUIFY_GEMM_KERNEL=avx2 or generic asks for a
 * lesser one (the tests run each) */
static ukernel pick_ukernel(int dbl) {
#ifdef HAVE_X86_KERNELS
    const char *want = getenv("CPUIFY_GEMM_KERNEL");
    int generic = want && !strcmp(want, "generic"), avx2_only = want && !strcmp(want, "avx2");
    __builtin_cpu_init();
    if (!generic && !avx2_only && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("fma"))
        return dbl ? (ukernel){(void *)ukernel_d_avx512, 16, 6} : (ukernel){(void *)ukernel_s_avx512, 32, 6};
    if (!generic && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        return dbl ? (ukernel){(void *)ukernel_d_avx2, 8, 6} : (ukernel){(void *)ukernel_s_avx2, 16, 6};
#endif
    return dbl ? (ukernel){(void *)ukernel_d_base, 4, 4} : (ukernel){(void *)ukernel_s_base, 8, 4};
}

typedef void (*ukernel_s_fn)(UKERNEL_ARGS(float));
typedef void (*ukernel_d_fn)(UKERNEL_ARGS(double));

/* one GEMM (or a batch of equal shapes); a job index is (batch, tile) */
typedef struct {
    int ta, tb;                  /* op(A), op(B) transposed */
    int m, n, k, lda, ldb, ldc;
    const void *const *Aarr, *const *Barr;   /* pointer arrays (batched), or NULL: */
    void *const *Carr;
    const void *A, *B;           /* base pointers with strides (strided batch; stride 0: one) */
    void *C;
    long long sa, sb, sc;
    double alpha, beta;
    int mtiles, ntiles;
    ukernel kernel;
} gemm_args;

#define GEMM_TILE(T, KFN)                                                                  \
    do {                                                                                       \
        uint32_t tiles = (uint32_t)g->mtiles * (uint32_t)g->ntiles;                            \
        uint32_t batch = index / tiles, tile = index % tiles;                                  \
        const T *A = g->Aarr ? (const T *)g->Aarr[batch] : (const T *)g->A + batch * g->sa;    \
        const T *B = g->Barr ? (const T *)g->Barr[batch] : (const T *)g->B + batch * g->sb;    \
        T *C = g->Carr ? (T *)g->Carr[batch] : (T *)g->C + batch * g->sc;                      \
        int i0 = (int)(tile % (uint32_t)g->mtiles) * GEMM_MC;                                  \
        int j0 = (int)(tile / (uint32_t)g->mtiles) * GEMM_NC;                                  \
        int mc = g->m - i0 < GEMM_MC ? g->m - i0 : GEMM_MC;                                    \
        int nc = g->n - j0 < GEMM_NC ? g->n - j0 : GEMM_NC;                                    \
        T alpha = (T)g->alpha, beta = (T)g->beta;                                              \
        size_t lda = (size_t)g->lda, ldb = (size_t)g->ldb, ldc = (size_t)g->ldc;               \
        T *ap = (T *)scratch;                                                                  \
        T *bp = ap + (size_t)GEMM_MC * GEMM_KC;                                                \
        KFN kernel = (KFN)g->kernel.fn;                                                        \
        const int MR = g->kernel.mr, NR = g->kernel.nr;                                                           \
        if (g->k == 0 || alpha == 0) { /* C = beta C */                                        \
            for (int j = j0; j < j0 + nc; j++)                                                 \
                for (int i = i0; i < i0 + mc; i++)                                             \
                    C[i + j * ldc] = beta == 0 ? 0 : beta * C[i + j * ldc];                     \
            break;                                                                             \
        }                                                                                      \
        for (int p0 = 0; p0 < g->k; p0 += GEMM_KC) {                                           \
            int kc = g->k - p0 < GEMM_KC ? g->k - p0 : GEMM_KC;                                \
            /* op(A)[i0:i0+mc, p0:p0+kc] in panels of MR rows, zero-padded (read along     \
               A's columns either way) */                                                  \
            for (int ir = 0; ir < mc; ir += MR) {                                              \
                T *dst = ap + (size_t)ir * kc;                                                 \
                int rows = mc - ir < MR ? mc - ir : MR;                                        \
                if (!g->ta) {                                                                  \
                    for (int p = 0; p < kc; p++) {                                             \
                        T *d = dst + (size_t)p * MR;                                           \
                        const T *s = A + (size_t)(i0 + ir) + (size_t)(p0 + p) * lda;           \
                        for (int i = 0; i < rows; i++) d[i] = s[i];                            \
                        for (int i = rows; i < MR; i++) d[i] = 0;                              \
                    }                                                                          \
                } else {                                                                       \
                    for (int i = 0; i < MR; i++) {                                             \
                        if (i >= rows) { for (int p = 0; p < kc; p++) dst[(size_t)p * MR + i] = 0; continue; } \
                        const T *s = A + (size_t)p0 + (size_t)(i0 + ir + i) * lda;             \
                        for (int p = 0; p < kc; p++) dst[(size_t)p * MR + i] = s[p];           \
                    }                                                                          \
                }                                                                              \
            }                                                                                  \
            /* op(B)[p0:p0+kc, j0:j0+nc] in panels of NR columns, zero-padded (read along   \
               B's columns either way) */                                                  \
            for (int jr = 0; jr < nc; jr += NR) {                                              \
                T *dst = bp + (size_t)jr * kc;                                                 \
                int cols = nc - jr < NR ? nc - jr : NR;                                        \
                if (!g->tb) {                                                                  \
                    for (int j = 0; j < NR; j++) {                                             \
                        if (j >= cols) { for (int p = 0; p < kc; p++) dst[(size_t)p * NR + j] = 0; continue; } \
                        const T *s = B + (size_t)p0 + (size_t)(j0 + jr + j) * ldb;             \
                        for (int p = 0; p < kc; p++) dst[(size_t)p * NR + j] = s[p];           \
                    }                                                                          \
                } else {                                                                       \
                    for (int p = 0; p < kc; p++) {                                             \
                        T *d = dst + (size_t)p * NR;                                           \
                        const T *s = B + (size_t)(j0 + jr) + (size_t)(p0 + p) * ldb;           \
                        for (int j = 0; j < cols; j++) d[j] = s[j];                            \
                        for (int j = cols; j < NR; j++) d[j] = 0;                              \
                    }                                                                          \
                }                                                                              \
            }                                                                                  \
            T b_eff = p0 == 0 ? beta : (T)1;                                                   \
            for (int jr = 0; jr < nc; jr += NR) {                                         \
                int cols = nc - jr < NR ? nc - jr : NR;                              \
                for (int ir = 0; ir < mc; ir += MR) {                                          \
                    int rows = mc - ir < MR ? mc - ir : MR;                                    \
                    kernel(kc, ap + (size_t)ir * kc, bp + (size_t)jr * kc,                     \
                           C + (size_t)(i0 + ir) + (size_t)(j0 + jr) * ldc, ldc, alpha, b_eff, \
                           rows, cols);                                                        \
                }                                                                              \
            }                                                                                  \
        }                                                                                      \
    } while (0)

static void sgemm_job(const void *arg, uint32_t index, void *scratch) {
    const gemm_args *g = (const gemm_args *)arg;
    GEMM_TILE(float, ukernel_s_fn);
}

static void dgemm_job(const void *arg, uint32_t index, void *scratch) {
    const gemm_args *g = (const gemm_args *)arg;
    GEMM_TILE(double, ukernel_d_fn);
}

/* checks the arguments as cuBLAS does and runs `batch` GEMMs */
static cublasStatus_t gemm(const char *api, cublasHandle_t h, int dbl, cublasOperation_t transa,
                           cublasOperation_t transb, gemm_args g, int batch, int have_scalars) {
    BEGIN_ROUTINE(h);
    if (!op_ok(transa) || !op_ok(transb) || g.m < 0 || g.n < 0 || g.k < 0 || batch < 0 ||
        !have_scalars)
        return CUBLAS_STATUS_INVALID_VALUE;
    g.ta = transa != CUBLAS_OP_N;
    g.tb = transb != CUBLAS_OP_N;
    int arows = g.ta ? g.k : g.m, brows = g.tb ? g.n : g.k;
    if (g.lda < (arows > 1 ? arows : 1) || g.ldb < (brows > 1 ? brows : 1) ||
        g.ldc < (g.m > 1 ? g.m : 1))
        return CUBLAS_STATUS_INVALID_VALUE;
    if (g.m == 0 || g.n == 0 || batch == 0) return CUBLAS_STATUS_SUCCESS;
    g.mtiles = (g.m + GEMM_MC - 1) / GEMM_MC;
    g.ntiles = (g.n + GEMM_NC - 1) / GEMM_NC;
    g.kernel = pick_ukernel(dbl);
    uint64_t jobs = (uint64_t)g.mtiles * (uint64_t)g.ntiles * (uint64_t)batch;
    if (jobs > INT32_MAX) return CUBLAS_STATUS_INVALID_VALUE;
    size_t elem = dbl ? sizeof(double) : sizeof(float);
    uint64_t scratch = (uint64_t)GEMM_KC * (GEMM_MC + GEMM_NC) * elem;
    if (cpuify_run_job(api, h->stream, (uint32_t)jobs, scratch, dbl ? dgemm_job : sgemm_job, &g))
        return CUBLAS_STATUS_EXECUTION_FAILED;
    return CUBLAS_STATUS_SUCCESS;
}

#define GEMM_ARGS(A_, B_, C_, sa_, sb_, sc_, Aarr_, Barr_, Carr_)                            \
    (gemm_args){.m = m, .n = n, .k = k, .lda = lda, .ldb = ldb, .ldc = ldc, .A = A_, .B = B_,  \
                .C = C_, .sa = sa_, .sb = sb_, .sc = sc_, .Aarr = (const void *const *)Aarr_,  \
                .Barr = (const void *const *)Barr_, .Carr = (void *const *)Carr_,             \
                .alpha = SCALAR(h, alpha), .beta = SCALAR(h, beta)}

cublasStatus_t cublasSgemm_v2(cublasHandle_t h, cublasOperation_t transa, cublasOperation_t transb, int m,
                              int n, int k, const float *alpha, const float *A, int lda, const float *B,
                              int ldb, const float *beta, float *C, int ldc) {
    return gemm("cublasSgemm", h, 0, transa, transb, GEMM_ARGS(A, B, C, 0, 0, 0, NULL, NULL, NULL), 1,
                alpha && beta);
}

cublasStatus_t cublasDgemm_v2(cublasHandle_t h, cublasOperation_t transa, cublasOperation_t transb, int m,
                              int n, int k, const double *alpha, const double *A, int lda, const double *B,
                              int ldb, const double *beta, double *C, int ldc) {
    return gemm("cublasDgemm", h, 1, transa, transb, GEMM_ARGS(A, B, C, 0, 0, 0, NULL, NULL, NULL), 1,
                alpha && beta);
}

cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t h, cublasOperation_t transa,
                                         cublasOperation_t transb, int m, int n, int k, const float *alpha,
                                         const float *A, int lda, long long strideA, const float *B,
                                         int ldb, long long strideB, const float *beta, float *C, int ldc,
                                         long long strideC, int batchCount) {
    return gemm("cublasSgemmStridedBatched", h, 0, transa, transb,
                GEMM_ARGS(A, B, C, strideA, strideB, strideC, NULL, NULL, NULL), batchCount, alpha && beta);
}

cublasStatus_t cublasDgemmStridedBatched(cublasHandle_t h, cublasOperation_t transa,
                                         cublasOperation_t transb, int m, int n, int k,
                                         const double *alpha, const double *A, int lda, long long strideA,
                                         const double *B, int ldb, long long strideB, const double *beta,
                                         double *C, int ldc, long long strideC, int batchCount) {
    return gemm("cublasDgemmStridedBatched", h, 1, transa, transb,
                GEMM_ARGS(A, B, C, strideA, strideB, strideC, NULL, NULL, NULL), batchCount, alpha && beta);
}

cublasStatus_t cublasSgemmBatched(cublasHandle_t h, cublasOperation_t transa, cublasOperation_t transb,
                                  int m, int n, int k, const float *alpha, const float *const Aarray[],
                                  int lda, const float *const Barray[], int ldb, const float *beta,
                                  float *const Carray[], int ldc, int batchCount) {
    if (handle_ok(h) && batchCount > 0 && (!Aarray || !Barray || !Carray)) return CUBLAS_STATUS_INVALID_VALUE;
    return gemm("cublasSgemmBatched", h, 0, transa, transb,
                GEMM_ARGS(NULL, NULL, NULL, 0, 0, 0, Aarray, Barray, Carray), batchCount, alpha && beta);
}

cublasStatus_t cublasDgemmBatched(cublasHandle_t h, cublasOperation_t transa, cublasOperation_t transb,
                                  int m, int n, int k, const double *alpha, const double *const Aarray[],
                                  int lda, const double *const Barray[], int ldb, const double *beta,
                                  double *const Carray[], int ldc, int batchCount) {
    if (handle_ok(h) && batchCount > 0 && (!Aarray || !Barray || !Carray)) return CUBLAS_STATUS_INVALID_VALUE;
    return gemm("cublasDgemmBatched", h, 1, transa, transb,
                GEMM_ARGS(NULL, NULL, NULL, 0, 0, 0, Aarray, Barray, Carray), batchCount, alpha && beta);
}

/* ------------------------------------------------------------------------------------ */
/* GemmEx: f32, f64, and f16/bf16 inputs (converted to f32, computed in f32)            */

static int is_f32_compute(cublasComputeType_t c) {
    return c == CUBLAS_COMPUTE_32F || c == CUBLAS_COMPUTE_32F_PEDANTIC || c == CUBLAS_COMPUTE_32F_FAST_16F ||
           c == CUBLAS_COMPUTE_32F_FAST_16BF || c == CUBLAS_COMPUTE_32F_FAST_TF32;
}

/* a matrix of 16-bit floats as f32 (lda x cols) */
static float *widen(const void *src, int ld, int cols, cudaDataType t) {
    size_t count = (size_t)ld * (size_t)(cols > 0 ? cols : 0);
    float *out = malloc((count ? count : 1) * sizeof(float));
    if (!out) return NULL;
    const uint16_t *s = (const uint16_t *)src;
    for (size_t i = 0; i < count; i++) out[i] = t == CUDA_R_16F ? half_to_float(s[i]) : bf16_to_float(s[i]);
    return out;
}

/* int8 inputs, int32 results and scalars (CUBLAS_COMPUTE_32I): exact sums, wrapping modulo
 * 2^32 as 32-bit integer arithmetic does (the CUDA Handbook's corrBankTC) */
static cublasStatus_t gemm_s8_s32(cublasHandle_t h, cublasOperation_t transa, cublasOperation_t transb,
                                  int m, int n, int k, int32_t alpha, const void *A, int lda,
                                  const void *B, int ldb, int32_t beta, void *C, int ldc) {
    if (m < 0 || n < 0 || k < 0 || !op_ok(transa) || !op_ok(transb) || ldc < (m > 1 ? m : 1))
        return CUBLAS_STATUS_INVALID_VALUE;
    (void)h;
    const int8_t *a = (const int8_t *)A, *b = (const int8_t *)B;
    int32_t *c = (int32_t *)C;
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            uint32_t sum = 0;
            for (int p = 0; p < k; p++) {
                int8_t x = transa == CUBLAS_OP_N ? a[i + (size_t)p * lda] : a[p + (size_t)i * lda];
                int8_t y = transb == CUBLAS_OP_N ? b[p + (size_t)j * ldb] : b[j + (size_t)p * ldb];
                sum += (uint32_t)((int32_t)x * y);
            }
            size_t at = (size_t)i + (size_t)j * ldc;
            uint32_t old = beta ? (uint32_t)c[at] * (uint32_t)beta : 0;
            c[at] = (int32_t)((uint32_t)alpha * sum + old);
        }
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t transa, cublasOperation_t transb, int m,
                            int n, int k, const void *alpha, const void *A, cudaDataType Atype, int lda,
                            const void *B, cudaDataType Btype, int ldb, const void *beta, void *C,
                            cudaDataType Ctype, int ldc, cublasComputeType_t computeType,
                            cublasGemmAlgo_t algo) {
    (void)algo;
    BEGIN_ROUTINE(h);
    if (!alpha || !beta) return CUBLAS_STATUS_INVALID_VALUE;
    if (Atype == CUDA_R_32F && Btype == CUDA_R_32F && Ctype == CUDA_R_32F && is_f32_compute(computeType))
        return cublasSgemm_v2(h, transa, transb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
    if (Atype == CUDA_R_64F && Btype == CUDA_R_64F && Ctype == CUDA_R_64F &&
        (computeType == CUBLAS_COMPUTE_64F || computeType == CUBLAS_COMPUTE_64F_PEDANTIC))
        return cublasDgemm_v2(h, transa, transb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
    if (Atype == CUDA_R_8I && Btype == CUDA_R_8I && Ctype == CUDA_R_32I &&
        (computeType == CUBLAS_COMPUTE_32I || computeType == CUBLAS_COMPUTE_32I_PEDANTIC))
        return gemm_s8_s32(h, transa, transb, m, n, k, *(const int32_t *)alpha, A, lda, B, ldb,
                           *(const int32_t *)beta, C, ldc);
    int half_in = (Atype == CUDA_R_16F || Atype == CUDA_R_16BF) && Btype == Atype;
    if (!half_in || (Ctype != Atype && Ctype != CUDA_R_32F) ||
        !(is_f32_compute(computeType) || (computeType == CUBLAS_COMPUTE_16F && Atype == CUDA_R_16F &&
                                          Ctype == CUDA_R_16F))) {
        char what[160];
        snprintf(what, sizeof what, "cublasGemmEx with A/B/C types %d/%d/%d and compute type %d",
                 (int)Atype, (int)Btype, (int)Ctype, (int)computeType);
        return not_supported(what);
    }
    float al, be;
    if (computeType == CUBLAS_COMPUTE_16F) {
        al = half_to_float(*(const uint16_t *)alpha);
        be = half_to_float(*(const uint16_t *)beta);
    } else {
        al = *(const float *)alpha;
        be = *(const float *)beta;
    }
    if (m < 0 || n < 0 || k < 0 || !op_ok(transa) || !op_ok(transb)) return CUBLAS_STATUS_INVALID_VALUE;
    int acols = transa == CUBLAS_OP_N ? k : m, bcols = transb == CUBLAS_OP_N ? n : k;
    float *a32 = widen(A, lda, acols, Atype), *b32 = widen(B, ldb, bcols, Btype);
    float *c32 = Ctype == CUDA_R_32F ? (float *)C : widen(C, ldc, n, Ctype);
    cublasStatus_t st = CUBLAS_STATUS_ALLOC_FAILED;
    if (a32 && b32 && c32)
        st = cublasSgemm_v2(h, transa, transb, m, n, k, &al, a32, lda, b32, ldb, &be, c32, ldc);
    if (st == CUBLAS_STATUS_SUCCESS && Ctype != CUDA_R_32F) {
        uint16_t *c16 = (uint16_t *)C;
        for (int j = 0; j < n; j++)
            for (int i = 0; i < m; i++) {
                size_t at = (size_t)i + (size_t)j * ldc;
                c16[at] = Ctype == CUDA_R_16F ? float_to_half(c32[at]) : float_to_bf16(c32[at]);
            }
    }
    free(a32);
    free(b32);
    if (Ctype != CUDA_R_32F) free(c32);
    return st;
}

/* cublasHgemm: declared for C++ only (__half); a __half is 16 bits of IEEE binary16 */
cublasStatus_t cublasHgemm(cublasHandle_t h, cublasOperation_t transa, cublasOperation_t transb, int m,
                           int n, int k, const uint16_t *alpha, const uint16_t *A, int lda,
                           const uint16_t *B, int ldb, const uint16_t *beta, uint16_t *C, int ldc) {
    return cublasGemmEx(h, transa, transb, m, n, k, alpha, A, CUDA_R_16F, lda, B, CUDA_R_16F, ldb, beta,
                        C, CUDA_R_16F, ldc, CUBLAS_COMPUTE_16F, CUBLAS_GEMM_DEFAULT);
}

/* ------------------------------------------------------------------------------------ */
/* geam: C = alpha op(A) + beta op(B)                                                   */

typedef struct {
    int ta, tb, m, n, lda, ldb, ldc, dbl;
    double alpha, beta;
    const void *A, *B;
    void *C;
} geam_args;

#define GEAM(T, g)                                                                           \
    do {                                                                                     \
        const T *A = (const T *)g->A, *B = (const T *)g->B;                                  \
        T *C = (T *)g->C;                                                                    \
        T alpha = (T)g->alpha, beta = (T)g->beta;                                            \
        for (int j = 0; j < g->n; j++)                                                       \
            for (int i = 0; i < g->m; i++) {                                                 \
                T a = alpha == 0 ? 0 : alpha * (g->ta ? A[j + (size_t)i * g->lda] : A[i + (size_t)j * g->lda]); \
                T b = beta == 0 ? 0 : beta * (g->tb ? B[j + (size_t)i * g->ldb] : B[i + (size_t)j * g->ldb]);   \
                C[i + (size_t)j * g->ldc] = a + b;                                           \
            }                                                                                \
    } while (0)

static void geam_job(const void *arg, uint32_t index, void *scratch) {
    (void)index; (void)scratch;
    const geam_args *g = (const geam_args *)arg;
    if (g->dbl) GEAM(double, g);
    else GEAM(float, g);
}

static cublasStatus_t geam(const char *api, cublasHandle_t h, cublasOperation_t transa,
                           cublasOperation_t transb, geam_args g, int have_scalars) {
    BEGIN_ROUTINE(h);
    if (!have_scalars || !op_ok(transa) || !op_ok(transb) || g.m < 0 || g.n < 0)
        return CUBLAS_STATUS_INVALID_VALUE;
    g.ta = transa != CUBLAS_OP_N;
    g.tb = transb != CUBLAS_OP_N;
    int arows = g.ta ? g.n : g.m, brows = g.tb ? g.n : g.m;
    if (g.lda < (arows > 1 ? arows : 1) || g.ldb < (brows > 1 ? brows : 1) || g.ldc < (g.m > 1 ? g.m : 1))
        return CUBLAS_STATUS_INVALID_VALUE;
    if ((g.C == g.A && (g.ta || g.lda != g.ldc)) || (g.C == g.B && (g.tb || g.ldb != g.ldc)))
        return CUBLAS_STATUS_INVALID_VALUE;   /* in place only without transpose, as cuBLAS */
    if (g.m == 0 || g.n == 0) return CUBLAS_STATUS_SUCCESS;
    if (cpuify_run_job(api, h->stream, 1, 0, geam_job, &g)) return CUBLAS_STATUS_EXECUTION_FAILED;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSgeam(cublasHandle_t h, cublasOperation_t transa, cublasOperation_t transb, int m,
                           int n, const float *alpha, const float *A, int lda, const float *beta,
                           const float *B, int ldb, float *C, int ldc) {
    return geam("cublasSgeam", h, transa, transb,
                (geam_args){0, 0, m, n, lda, ldb, ldc, 0, SCALAR(h, alpha), SCALAR(h, beta), A, B, C},
                alpha && beta);
}

cublasStatus_t cublasDgeam(cublasHandle_t h, cublasOperation_t transa, cublasOperation_t transb, int m,
                           int n, const double *alpha, const double *A, int lda, const double *beta,
                           const double *B, int ldb, double *C, int ldc) {
    return geam("cublasDgeam", h, transa, transb,
                (geam_args){0, 0, m, n, lda, ldb, ldc, 1, SCALAR(h, alpha), SCALAR(h, beta), A, B, C},
                alpha && beta);
}

/* ------------------------------------------------------------------------------------ */
/* the legacy API: one implicit handle, errors kept for cublasGetError                  */

static struct cublasContext legacy_handle;
static atomic_int legacy_error;

static void legacy_set(cublasStatus_t s) {
    if (s != CUBLAS_STATUS_SUCCESS) atomic_store(&legacy_error, (int)s);
}

/* the implicit handle, or NULL (then the call fails with NOT_INITIALIZED) */
static cublasHandle_t legacy(void) {
    return legacy_handle.magic == HANDLE_MAGIC ? &legacy_handle : NULL;
}

cublasStatus_t cublasInit(void) {
    if (legacy_handle.magic != HANDLE_MAGIC) {
        legacy_handle = (struct cublasContext){0};
        legacy_handle.magic = HANDLE_MAGIC;
    }
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasShutdown(void) {
    if (legacy_handle.magic != HANDLE_MAGIC) return CUBLAS_STATUS_NOT_INITIALIZED;
    legacy_handle.magic = 0;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetError(void) { return (cublasStatus_t)atomic_exchange(&legacy_error, 0); }

cublasStatus_t cublasGetVersion(int *version) {
    if (!version) return CUBLAS_STATUS_INVALID_VALUE;
    *version = CUBLAS_VERSION;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasAlloc(int n, int elemSize, void **devicePtr) {
    if (!legacy()) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (n <= 0 || elemSize <= 0 || !devicePtr) return CUBLAS_STATUS_INVALID_VALUE;
    if (cudaMalloc(devicePtr, (size_t)n * (size_t)elemSize) != cudaSuccess) {
        cudaGetLastError();
        return CUBLAS_STATUS_ALLOC_FAILED;
    }
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasFree(void *devicePtr) {
    if (!legacy()) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (cudaFree(devicePtr) != cudaSuccess) {
        cudaGetLastError();
        return CUBLAS_STATUS_INTERNAL_ERROR;
    }
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetKernelStream(cudaStream_t stream) {
    if (!legacy()) return CUBLAS_STATUS_NOT_INITIALIZED;
    return cublasSetStream_v2(legacy(), stream);
}

static cublasOperation_t legacy_op(char t) {
    switch (t) {
    case 'N': case 'n': return CUBLAS_OP_N;
    case 'T': case 't': return CUBLAS_OP_T;
    case 'C': case 'c': return CUBLAS_OP_C;
    default: return (cublasOperation_t)-1;      /* rejected as CUBLAS_STATUS_INVALID_VALUE */
    }
}

void cublasSaxpy(int n, float alpha, const float *x, int incx, float *y, int incy) {
    legacy_set(cublasSaxpy_v2(legacy(), n, &alpha, x, incx, y, incy));
}
void cublasDaxpy(int n, double alpha, const double *x, int incx, double *y, int incy) {
    legacy_set(cublasDaxpy_v2(legacy(), n, &alpha, x, incx, y, incy));
}
void cublasSscal(int n, float alpha, float *x, int incx) { legacy_set(cublasSscal_v2(legacy(), n, &alpha, x, incx)); }
void cublasDscal(int n, double alpha, double *x, int incx) { legacy_set(cublasDscal_v2(legacy(), n, &alpha, x, incx)); }
void cublasScopy(int n, const float *x, int incx, float *y, int incy) {
    legacy_set(cublasScopy_v2(legacy(), n, x, incx, y, incy));
}
void cublasDcopy(int n, const double *x, int incx, double *y, int incy) {
    legacy_set(cublasDcopy_v2(legacy(), n, x, incx, y, incy));
}
void cublasSswap(int n, float *x, int incx, float *y, int incy) {
    legacy_set(cublasSswap_v2(legacy(), n, x, incx, y, incy));
}
void cublasDswap(int n, double *x, int incx, double *y, int incy) {
    legacy_set(cublasDswap_v2(legacy(), n, x, incx, y, incy));
}

#define LEGACY_RESULT(T, call) \
    do { T r = 0; legacy_set(call); return r; } while (0)

float cublasSdot(int n, const float *x, int incx, const float *y, int incy) {
    LEGACY_RESULT(float, cublasSdot_v2(legacy(), n, x, incx, y, incy, &r));
}
double cublasDdot(int n, const double *x, int incx, const double *y, int incy) {
    LEGACY_RESULT(double, cublasDdot_v2(legacy(), n, x, incx, y, incy, &r));
}
float cublasSnrm2(int n, const float *x, int incx) { LEGACY_RESULT(float, cublasSnrm2_v2(legacy(), n, x, incx, &r)); }
double cublasDnrm2(int n, const double *x, int incx) { LEGACY_RESULT(double, cublasDnrm2_v2(legacy(), n, x, incx, &r)); }
float cublasSasum(int n, const float *x, int incx) { LEGACY_RESULT(float, cublasSasum_v2(legacy(), n, x, incx, &r)); }
double cublasDasum(int n, const double *x, int incx) { LEGACY_RESULT(double, cublasDasum_v2(legacy(), n, x, incx, &r)); }
int cublasIsamax(int n, const float *x, int incx) { LEGACY_RESULT(int, cublasIsamax_v2(legacy(), n, x, incx, &r)); }
int cublasIdamax(int n, const double *x, int incx) { LEGACY_RESULT(int, cublasIdamax_v2(legacy(), n, x, incx, &r)); }
int cublasIsamin(int n, const float *x, int incx) { LEGACY_RESULT(int, cublasIsamin_v2(legacy(), n, x, incx, &r)); }
int cublasIdamin(int n, const double *x, int incx) { LEGACY_RESULT(int, cublasIdamin_v2(legacy(), n, x, incx, &r)); }

void cublasSgemv(char trans, int m, int n, float alpha, const float *A, int lda, const float *x, int incx,
                 float beta, float *y, int incy) {
    legacy_set(cublasSgemv_v2(legacy(), legacy_op(trans), m, n, &alpha, A, lda, x, incx, &beta, y, incy));
}
void cublasDgemv(char trans, int m, int n, double alpha, const double *A, int lda, const double *x, int incx,
                 double beta, double *y, int incy) {
    legacy_set(cublasDgemv_v2(legacy(), legacy_op(trans), m, n, &alpha, A, lda, x, incx, &beta, y, incy));
}
void cublasSgemm(char transa, char transb, int m, int n, int k, float alpha, const float *A, int lda,
                 const float *B, int ldb, float beta, float *C, int ldc) {
    legacy_set(cublasSgemm_v2(legacy(), legacy_op(transa), legacy_op(transb), m, n, k, &alpha, A, lda, B,
                              ldb, &beta, C, ldc));
}
void cublasDgemm(char transa, char transb, int m, int n, int k, double alpha, const double *A, int lda,
                 const double *B, int ldb, double beta, double *C, int ldc) {
    legacy_set(cublasDgemm_v2(legacy(), legacy_op(transa), legacy_op(transb), m, n, k, &alpha, A, lda, B,
                              ldb, &beta, C, ldc));
}
