/* cpuify's cuBLASLt (include/cublasLt.h): cublasLtMatmul on the CPU.  The product goes
 * through cublasGemmEx of cpuify's cuBLAS (same library), so its types are GemmEx's: f32,
 * f64, f16/bf16 inputs with f32 or f16 output accumulated in f32; the epilogues (bias, ReLU,
 * GELU with its input kept in the auxiliary matrix, the GELU gradient, bias gradients) are
 * applied here in f32 before the result is stored in D's type.  Matrices in column order
 * (CUBLASLT_ORDER_COL, the default), strided batches.  What is not supported says so once
 * and returns CUBLAS_STATUS_NOT_SUPPORTED.  cuBLAS's cublasGemmStridedBatchedEx and
 * cublasGemmBatchedEx are here too (a cublasGemmEx per matrix). */

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cublasLt.h"
#include "mathlib_internal.h"

#define LT_MAGIC 0x4c74424cu

struct cublasLtContext {
    uint32_t magic;
    cublasHandle_t blas;
};

typedef struct {
    uint32_t type;          /* cudaDataType */
    int32_t order;
    uint64_t rows, cols;
    int64_t ld;
    int32_t batch;
    int64_t stride;         /* elements between batch matrices */
    int64_t plane;
} layout_t;

typedef struct {
    int32_t compute, scale, pointer_mode, transa, transb, transc, fill;
    uint32_t epilogue;
    const void *bias;
    int64_t bias_stride;
    void *aux;
    int64_t aux_ld, aux_stride, alpha_stride;
    int32_t sm_target, aux_type, bias_type;
    int8_t fast_accum;
} desc_t;

typedef struct {
    uint32_t search, reduction_mask, align[4];
    uint64_t workspace, impl_mask;
    float waves;
} pref_t;

_Static_assert(sizeof(layout_t) <= sizeof(cublasLtMatrixLayoutOpaque_t), "layout");
_Static_assert(sizeof(desc_t) <= sizeof(cublasLtMatmulDescOpaque_t), "matmul descriptor");
_Static_assert(sizeof(pref_t) <= sizeof(cublasLtMatmulPreferenceOpaque_t), "preference");

#define LAYOUT(p) ((layout_t *)(void *)(p))
#define DESC(p) ((desc_t *)(void *)(p))
#define PREF(p) ((pref_t *)(void *)(p))

static cublasStatus_t not_supported(const char *what) {
    fprintf(stderr, "cpuify: %s is not supported by cpuify's cuBLASLt "
                    "(returning CUBLAS_STATUS_NOT_SUPPORTED)\n", what);
    return CUBLAS_STATUS_NOT_SUPPORTED;
}

/* ---- the library ----------------------------------------------------------------- */

cublasStatus_t cublasLtCreate(cublasLtHandle_t *handle) {
    if (!handle) return CUBLAS_STATUS_INVALID_VALUE;
    struct cublasLtContext *h = calloc(1, sizeof *h);
    if (!h) return CUBLAS_STATUS_ALLOC_FAILED;
    cublasStatus_t st = cublasCreate_v2(&h->blas);
    if (st != CUBLAS_STATUS_SUCCESS) {
        free(h);
        return st;
    }
    h->magic = LT_MAGIC;
    *handle = h;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtDestroy(cublasLtHandle_t h) {
    if (!h || h->magic != LT_MAGIC) return CUBLAS_STATUS_NOT_INITIALIZED;
    cublasDestroy_v2(h->blas);
    h->magic = 0;
    free(h);
    return CUBLAS_STATUS_SUCCESS;
}

/* the same statuses as cuBLAS's, named the same */
const char *cublasLtGetStatusName(cublasStatus_t status) { return cublasGetStatusName(status); }

const char *cublasLtGetStatusString(cublasStatus_t status) { return cublasGetStatusString(status); }

size_t cublasLtGetVersion(void) { return CUBLAS_VERSION; }

size_t cublasLtGetCudartVersion(void) { return CUDART_VERSION; }

cublasStatus_t cublasLtGetProperty(libraryPropertyType type, int *value) {
    return cublasGetProperty(type, value);
}

/* ---- descriptors: attributes as (address, size) ----------------------------------- */

/* a descriptor's attribute: its address and size in the descriptor, NULL for none */
typedef void *(*field_fn)(void *descriptor, int attr, size_t *size);

static cublasStatus_t set_attr(field_fn fields, void *descriptor, int attr, const void *buf, size_t bytes) {
    size_t size;
    void *field = fields(descriptor, attr, &size);
    if (!field || !buf || bytes != size) return CUBLAS_STATUS_INVALID_VALUE;
    memcpy(field, buf, size);
    return CUBLAS_STATUS_SUCCESS;
}

static cublasStatus_t get_attr(field_fn fields, void *descriptor, int attr, void *buf, size_t bytes,
                               size_t *written) {
    size_t size;
    const void *field = fields(descriptor, attr, &size);
    if (!field) return CUBLAS_STATUS_INVALID_VALUE;
    if (bytes == 0) {
        if (!written) return CUBLAS_STATUS_INVALID_VALUE;
        *written = size;
        return CUBLAS_STATUS_SUCCESS;
    }
    if (!buf || bytes != size) return CUBLAS_STATUS_INVALID_VALUE;
    memcpy(buf, field, size);
    if (written) *written = size;
    return CUBLAS_STATUS_SUCCESS;
}

static void *layout_field(void *descriptor, int attr, size_t *size) {
    layout_t *l = descriptor;
    switch (attr) {
    case CUBLASLT_MATRIX_LAYOUT_TYPE: *size = 4; return &l->type;
    case CUBLASLT_MATRIX_LAYOUT_ORDER: *size = 4; return &l->order;
    case CUBLASLT_MATRIX_LAYOUT_ROWS: *size = 8; return &l->rows;
    case CUBLASLT_MATRIX_LAYOUT_COLS: *size = 8; return &l->cols;
    case CUBLASLT_MATRIX_LAYOUT_LD: *size = 8; return &l->ld;
    case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT: *size = 4; return &l->batch;
    case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET: *size = 8; return &l->stride;
    case CUBLASLT_MATRIX_LAYOUT_PLANE_OFFSET: *size = 8; return &l->plane;
    }
    *size = 0;
    return NULL;
}

cublasStatus_t cublasLtMatrixLayoutInit_internal(cublasLtMatrixLayout_t l, size_t size, cudaDataType type,
                                                 uint64_t rows, uint64_t cols, int64_t ld) {
    if (!l) return CUBLAS_STATUS_INVALID_VALUE;
    if (size < sizeof(layout_t)) return CUBLAS_STATUS_ALLOC_FAILED;
    *LAYOUT(l) = (layout_t){(uint32_t)type, CUBLASLT_ORDER_COL, rows, cols, ld, 1, 0, 0};
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *l, cudaDataType type, uint64_t rows,
                                          uint64_t cols, int64_t ld) {
    if (!l) return CUBLAS_STATUS_INVALID_VALUE;
    *l = calloc(1, sizeof **l);
    if (!*l) return CUBLAS_STATUS_ALLOC_FAILED;
    return cublasLtMatrixLayoutInit_internal(*l, sizeof **l, type, rows, cols, ld);
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) {
    free(l);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t l, cublasLtMatrixLayoutAttribute_t attr,
                                                const void *buf, size_t bytes) {
    return l ? set_attr(layout_field, l, attr, buf, bytes) : CUBLAS_STATUS_INVALID_VALUE;
}

cublasStatus_t cublasLtMatrixLayoutGetAttribute(cublasLtMatrixLayout_t l, cublasLtMatrixLayoutAttribute_t attr,
                                                void *buf, size_t bytes, size_t *written) {
    return l ? get_attr(layout_field, l, attr, buf, bytes, written) : CUBLAS_STATUS_INVALID_VALUE;
}

static void *desc_field(void *descriptor, int attr, size_t *size) {
    desc_t *d = descriptor;
    *size = 4;
    switch (attr) {
    case CUBLASLT_MATMUL_DESC_COMPUTE_TYPE: return &d->compute;
    case CUBLASLT_MATMUL_DESC_SCALE_TYPE: return &d->scale;
    case CUBLASLT_MATMUL_DESC_POINTER_MODE: return &d->pointer_mode;
    case CUBLASLT_MATMUL_DESC_TRANSA: return &d->transa;
    case CUBLASLT_MATMUL_DESC_TRANSB: return &d->transb;
    case CUBLASLT_MATMUL_DESC_TRANSC: return &d->transc;
    case CUBLASLT_MATMUL_DESC_FILL_MODE: return &d->fill;
    case CUBLASLT_MATMUL_DESC_EPILOGUE: return &d->epilogue;
    case CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET: return &d->sm_target;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE: return &d->aux_type;
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: return &d->bias_type;
    }
    *size = 8;
    switch (attr) {
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER: return &d->bias;
    case CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE: return &d->bias_stride;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER: return &d->aux;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD: return &d->aux_ld;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE: return &d->aux_stride;
    case CUBLASLT_MATMUL_DESC_ALPHA_VECTOR_BATCH_STRIDE: return &d->alpha_stride;
    }
    *size = 1;
    if (attr == CUBLASLT_MATMUL_DESC_FAST_ACCUM) return &d->fast_accum;
    *size = 0;
    return NULL;
}

cublasStatus_t cublasLtMatmulDescInit_internal(cublasLtMatmulDesc_t d, size_t size,
                                               cublasComputeType_t compute, cudaDataType_t scale) {
    if (!d) return CUBLAS_STATUS_INVALID_VALUE;
    if (size < sizeof(desc_t)) return CUBLAS_STATUS_ALLOC_FAILED;
    /* -1: the bias and auxiliary matrices have D's type unless set */
    *DESC(d) = (desc_t){.compute = compute, .scale = scale, .epilogue = CUBLASLT_EPILOGUE_DEFAULT,
                        .aux_type = -1, .bias_type = -1};
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *d, cublasComputeType_t compute,
                                        cudaDataType_t scale) {
    if (!d) return CUBLAS_STATUS_INVALID_VALUE;
    *d = calloc(1, sizeof **d);
    if (!*d) return CUBLAS_STATUS_ALLOC_FAILED;
    return cublasLtMatmulDescInit_internal(*d, sizeof **d, compute, scale);
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) {
    free(d);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr,
                                              const void *buf, size_t bytes) {
    return d ? set_attr(desc_field, d, attr, buf, bytes) : CUBLAS_STATUS_INVALID_VALUE;
}

cublasStatus_t cublasLtMatmulDescGetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr,
                                              void *buf, size_t bytes, size_t *written) {
    return d ? get_attr(desc_field, d, attr, buf, bytes, written) : CUBLAS_STATUS_INVALID_VALUE;
}

static void *pref_field(void *descriptor, int attr, size_t *size) {
    pref_t *p = descriptor;
    *size = 4;
    switch (attr) {
    case CUBLASLT_MATMUL_PREF_SEARCH_MODE: return &p->search;
    case CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK: return &p->reduction_mask;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES: return &p->align[0];
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES: return &p->align[1];
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES: return &p->align[2];
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES: return &p->align[3];
    case CUBLASLT_MATMUL_PREF_MAX_WAVES_COUNT: return &p->waves;
    }
    *size = 8;
    if (attr == CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES) return &p->workspace;
    if (attr == CUBLASLT_MATMUL_PREF_IMPL_MASK) return &p->impl_mask;
    *size = 0;
    return NULL;
}

cublasStatus_t cublasLtMatmulPreferenceInit_internal(cublasLtMatmulPreference_t p, size_t size) {
    if (!p) return CUBLAS_STATUS_INVALID_VALUE;
    if (size < sizeof(pref_t)) return CUBLAS_STATUS_ALLOC_FAILED;
    *PREF(p) = (pref_t){.reduction_mask = 7, .align = {256, 256, 256, 256}, .impl_mask = UINT64_MAX};
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *p) {
    if (!p) return CUBLAS_STATUS_INVALID_VALUE;
    *p = calloc(1, sizeof **p);
    if (!*p) return CUBLAS_STATUS_ALLOC_FAILED;
    return cublasLtMatmulPreferenceInit_internal(*p, sizeof **p);
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) {
    free(p);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p,
                                                    cublasLtMatmulPreferenceAttributes_t attr,
                                                    const void *buf, size_t bytes) {
    return p ? set_attr(pref_field, p, attr, buf, bytes) : CUBLAS_STATUS_INVALID_VALUE;
}

cublasStatus_t cublasLtMatmulPreferenceGetAttribute(cublasLtMatmulPreference_t p,
                                                    cublasLtMatmulPreferenceAttributes_t attr, void *buf,
                                                    size_t bytes, size_t *written) {
    return p ? get_attr(pref_field, p, attr, buf, bytes, written) : CUBLAS_STATUS_INVALID_VALUE;
}

/* ---- the operation ---------------------------------------------------------------- */

static size_t type_bytes(uint32_t t) {
    switch (t) {
    case CUDA_R_16F: case CUDA_R_16BF: return 2;
    case CUDA_R_32F: case CUDA_R_32I: return 4;
    case CUDA_R_64F: return 8;
    case CUDA_R_8I: return 1;
    }
    return 0;
}

/* element i of an array of floating type t, as f32 (f64 as well, for the epilogue) */
static double load(const void *p, uint32_t t, size_t i) {
    switch (t) {
    case CUDA_R_16F: return half_to_float(((const uint16_t *)p)[i]);
    case CUDA_R_16BF: return bf16_to_float(((const uint16_t *)p)[i]);
    case CUDA_R_64F: return ((const double *)p)[i];
    default: return ((const float *)p)[i];
    }
}

static void store(void *p, uint32_t t, size_t i, double v) {
    switch (t) {
    case CUDA_R_16F: ((uint16_t *)p)[i] = float_to_half((float)v); break;
    case CUDA_R_16BF: ((uint16_t *)p)[i] = float_to_bf16((float)v); break;
    case CUDA_R_64F: ((double *)p)[i] = v; break;
    default: ((float *)p)[i] = (float)v; break;
    }
}

/* cuBLAS's batched GemmEx (beside cuBLASLt, which shares the element sizes): one cublasGemmEx
 * per matrix of the batch */
cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t h, cublasOperation_t transa, cublasOperation_t transb,
                                          int m, int n, int k, const void *alpha, const void *A,
                                          cudaDataType Atype, int lda, long long strideA, const void *B,
                                          cudaDataType Btype, int ldb, long long strideB, const void *beta,
                                          void *C, cudaDataType Ctype, int ldc, long long strideC,
                                          int batchCount, cublasComputeType_t computeType,
                                          cublasGemmAlgo_t algo) {
    if (batchCount < 0) return CUBLAS_STATUS_INVALID_VALUE;
    cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
    for (int i = 0; i < batchCount && st == CUBLAS_STATUS_SUCCESS; i++)
        st = cublasGemmEx(h, transa, transb, m, n, k, alpha,
                          (const char *)A + (size_t)i * (size_t)strideA * type_bytes(Atype), Atype, lda,
                          (const char *)B + (size_t)i * (size_t)strideB * type_bytes(Btype), Btype, ldb, beta,
                          (char *)C + (size_t)i * (size_t)strideC * type_bytes(Ctype), Ctype, ldc,
                          computeType, algo);
    return st;
}

cublasStatus_t cublasGemmBatchedEx(cublasHandle_t h, cublasOperation_t transa, cublasOperation_t transb, int m,
                                   int n, int k, const void *alpha, const void *const A[], cudaDataType Atype,
                                   int lda, const void *const B[], cudaDataType Btype, int ldb, const void *beta,
                                   void *const C[], cudaDataType Ctype, int ldc, int batchCount,
                                   cublasComputeType_t computeType, cublasGemmAlgo_t algo) {
    if (batchCount < 0 || (batchCount > 0 && (!A || !B || !C))) return CUBLAS_STATUS_INVALID_VALUE;
    cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
    for (int i = 0; i < batchCount && st == CUBLAS_STATUS_SUCCESS; i++)
        st = cublasGemmEx(h, transa, transb, m, n, k, alpha, A[i], Atype, lda, B[i], Btype, ldb, beta, C[i],
                          Ctype, ldc, computeType, algo);
    return st;
}

/* GELU as cuBLASLt computes it (the tanh approximation) and its derivative */
static double gelu(double x) {
    double u = 0.7978845608028654 * (x + 0.044715 * x * x * x);
    return 0.5 * x * (1.0 + tanh(u));
}

static double gelu_grad(double x) {
    double u = 0.7978845608028654 * (x + 0.044715 * x * x * x), t = tanh(u);
    return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * 0.7978845608028654 * (1.0 + 3 * 0.044715 * x * x);
}

enum { EP_RELU = 2, EP_BIAS = 4, EP_DRELU = 8, EP_BGRAD = 16, EP_GELU = 32, EP_DGELU = 64, EP_AUX = 128,
       EP_BGRADA = 256, EP_BGRADB = 512 };

typedef struct {
    int m, n, k, batch;
    uint32_t ab_type, d_type, bias_type, aux_type;
} shape_t;

/* What cublasLtMatmul will compute, or why not (CUBLAS_STATUS_INVALID_VALUE for
 * inconsistent shapes, NOT_SUPPORTED for what cpuify does not do, said once per call). */
static cublasStatus_t check(const desc_t *d, const layout_t *a, const layout_t *b, const layout_t *c,
                            const layout_t *dl, shape_t *s) {
    char what[200];
    if (!d || !a || !b || !c || !dl) return CUBLAS_STATUS_INVALID_VALUE;
    const layout_t *all[4] = {a, b, c, dl};
    for (int i = 0; i < 4; i++) {
        if (all[i]->order != CUBLASLT_ORDER_COL || all[i]->plane) {
            snprintf(what, sizeof what, "cublasLtMatmul with a matrix layout of order %d (only "
                     "CUBLASLT_ORDER_COL, not planar)", (int)all[i]->order);
            return not_supported(what);
        }
        if (all[i]->rows > INT32_MAX || all[i]->cols > INT32_MAX || all[i]->ld < (int64_t)all[i]->rows ||
            all[i]->batch < 1)
            return CUBLAS_STATUS_INVALID_VALUE;
    }
    s->m = (int)dl->rows;
    s->n = (int)dl->cols;
    s->k = (int)(d->transa == CUBLAS_OP_N ? a->cols : a->rows);
    int a_m = (int)(d->transa == CUBLAS_OP_N ? a->rows : a->cols);
    int b_k = (int)(d->transb == CUBLAS_OP_N ? b->rows : b->cols);
    int b_n = (int)(d->transb == CUBLAS_OP_N ? b->cols : b->rows);
    if (a_m != s->m || b_k != s->k || b_n != s->n || c->rows != dl->rows || c->cols != dl->cols ||
        c->type != dl->type || d->transc != CUBLAS_OP_N)
        return CUBLAS_STATUS_INVALID_VALUE;
    s->batch = dl->batch;
    for (int i = 0; i < 3; i++)
        if (all[i]->batch != s->batch && all[i]->batch != 1) return CUBLAS_STATUS_INVALID_VALUE;
    s->ab_type = a->type;
    s->d_type = dl->type;
    s->bias_type = d->bias_type >= 0 ? (uint32_t)d->bias_type : dl->type;
    s->aux_type = d->aux_type >= 0 ? (uint32_t)d->aux_type : dl->type;
    int ep = (int)d->epilogue;
    int known = ep == 1 || ep == 2 || ep == 4 || ep == 6 || ep == 32 || ep == 36 || ep == 160 ||
                ep == 164 || ep == 192 || ep == 208 || ep == 256 || ep == 512;
    int f16_out = dl->type == CUDA_R_16F && a->type == CUDA_R_16F && d->compute == CUBLAS_COMPUTE_16F;
    if (!known || a->type != b->type || !type_bytes(a->type) || !type_bytes(dl->type) ||
        !type_bytes(s->bias_type) || !type_bytes(s->aux_type) ||
        (d->pointer_mode != CUBLASLT_POINTER_MODE_HOST && d->pointer_mode != CUBLASLT_POINTER_MODE_DEVICE) ||
        ((ep & (EP_GELU | EP_DGELU | EP_RELU | EP_BIAS | EP_BGRADA | EP_BGRADB)) && f16_out)) {
        snprintf(what, sizeof what, "cublasLtMatmul with epilogue %d, A/B/D types %d/%d/%d, compute type "
                 "%d, pointer mode %d", ep, (int)a->type, (int)b->type, (int)dl->type, (int)d->compute,
                 (int)d->pointer_mode);
        return not_supported(what);
    }
    if ((ep & (EP_BIAS | EP_BGRAD | EP_BGRADA | EP_BGRADB)) && !d->bias) return CUBLAS_STATUS_INVALID_VALUE;
    if ((ep & EP_AUX) && (!d->aux || d->aux_ld < s->m)) return CUBLAS_STATUS_INVALID_VALUE;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t desc,
                                              cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                              cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                                              cublasLtMatmulPreference_t pref, int requested,
                                              cublasLtMatmulHeuristicResult_t results[], int *count) {
    if (!h || h->magic != LT_MAGIC) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (requested <= 0 || !results || !count || !pref) return CUBLAS_STATUS_INVALID_VALUE;
    shape_t s;
    *count = 0;
    cublasStatus_t st = check(DESC(desc), LAYOUT(a), LAYOUT(b), LAYOUT(c), LAYOUT(d), &s);
    if (st != CUBLAS_STATUS_SUCCESS) return st;
    /* one algorithm, needing no workspace */
    memset(&results[0], 0, sizeof results[0]);
    results[0].state = CUBLAS_STATUS_SUCCESS;
    results[0].wavesCount = 1.0f;
    *count = 1;
    return CUBLAS_STATUS_SUCCESS;
}

/* alpha or beta in the scale type, as a double */
static double scalar(const void *p, int32_t scale) {
    return scale == CUDA_R_16F ? half_to_float(*(const uint16_t *)p)
         : scale == CUDA_R_64F ? *(const double *)p : *(const float *)p;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t desc, const void *alpha,
                              const void *A, cublasLtMatrixLayout_t Adesc, const void *B,
                              cublasLtMatrixLayout_t Bdesc, const void *beta, const void *C,
                              cublasLtMatrixLayout_t Cdesc, void *D, cublasLtMatrixLayout_t Ddesc,
                              const cublasLtMatmulAlgo_t *algo, void *workspace, size_t workspace_bytes,
                              cudaStream_t stream) {
    (void)algo; (void)workspace; (void)workspace_bytes;
    if (!h || h->magic != LT_MAGIC) return CUBLAS_STATUS_NOT_INITIALIZED;
    const desc_t *d = DESC(desc);
    const layout_t *al = LAYOUT(Adesc), *bl = LAYOUT(Bdesc), *cl = LAYOUT(Cdesc), *dl = LAYOUT(Ddesc);
    shape_t s;
    cublasStatus_t st = check(d, al, bl, cl, dl, &s);
    if (st != CUBLAS_STATUS_SUCCESS) return st;
    if (!alpha || !beta || !A || !B || !D) return CUBLAS_STATUS_INVALID_VALUE;
    cublasSetStream_v2(h->blas, stream);
    cpuify_cudart_wait_stream_order(stream);      /* device scalars, C, the bias are written */
    double alpha_v = scalar(alpha, d->scale), beta_v = scalar(beta, d->scale);
    if (beta_v != 0 && !C) return CUBLAS_STATUS_INVALID_VALUE;
    int ep = (int)d->epilogue, m = s.m, n = s.n, k = s.k;
    size_t ab = type_bytes(s.ab_type), db = type_bytes(s.d_type);
    /* the product in f32 (f64 for f64 data) in a scratch matrix, then the epilogue, then D */
    uint32_t acc_type = s.d_type == CUDA_R_64F ? CUDA_R_64F : CUDA_R_32F;
    int direct = s.d_type == acc_type || (d->compute == CUBLAS_COMPUTE_16F && ep == 1);
    uint32_t work_type = direct ? s.d_type : acc_type;
    size_t wb = type_bytes(work_type), mn = (size_t)m * (size_t)n;
    void *work = direct ? NULL : malloc((mn ? mn : 1) * wb);
    if (!direct && !work) return CUBLAS_STATUS_ALLOC_FAILED;
    float al32 = (float)alpha_v, be32 = (float)beta_v;
    uint16_t al16 = float_to_half(al32), be16 = float_to_half(be32);
    const void *pa = d->compute == CUBLAS_COMPUTE_16F ? (const void *)&al16
                   : acc_type == CUDA_R_64F ? (const void *)&alpha_v : (const void *)&al32;
    const void *pb = d->compute == CUBLAS_COMPUTE_16F ? (const void *)&be16
                   : acc_type == CUDA_R_64F ? (const void *)&beta_v : (const void *)&be32;
    for (int i = 0; i < s.batch && st == CUBLAS_STATUS_SUCCESS; i++) {
        const char *a = (const char *)A + (al->batch > 1 ? (size_t)i * (size_t)al->stride * ab : 0);
        const char *b = (const char *)B + (bl->batch > 1 ? (size_t)i * (size_t)bl->stride * ab : 0);
        const char *c = C ? (const char *)C + (cl->batch > 1 ? (size_t)i * (size_t)cl->stride * db : 0) : NULL;
        char *dd = (char *)D + (size_t)i * (size_t)dl->stride * db;
        char *out = direct ? dd : (char *)work;
        int64_t ld_out = direct ? dl->ld : m;
        /* beta * C into the output first (C and D may differ, cuBLAS's GEMM has one matrix) */
        if (beta_v != 0 && (c != out || cl->ld != ld_out))
            for (int j = 0; j < n; j++)
                for (int r = 0; r < m; r++)
                    store(out, work_type, (size_t)r + (size_t)j * ld_out,
                          load(c, s.d_type, (size_t)r + (size_t)j * cl->ld));
        st = cublasGemmEx(h->blas, d->transa, d->transb, m, n, k, pa, a, s.ab_type, (int)al->ld, b,
                          s.ab_type, (int)bl->ld, pb, out, work_type, (int)ld_out, d->compute,
                          CUBLAS_GEMM_DEFAULT);
        if (st != CUBLAS_STATUS_SUCCESS) break;
        const char *bias = d->bias ? (const char *)d->bias + (size_t)i * (size_t)d->bias_stride *
                                                             type_bytes(s.bias_type) : NULL;
        char *aux = d->aux ? (char *)d->aux + (size_t)i * (size_t)d->aux_stride * type_bytes(s.aux_type)
                           : NULL;
        if (ep & (EP_BIAS | EP_RELU | EP_GELU | EP_DGELU)) {
            for (int j = 0; j < n; j++)
                for (int r = 0; r < m; r++) {
                    size_t at = (size_t)r + (size_t)j * ld_out;
                    double v = load(out, work_type, at);
                    if (ep & EP_BIAS) v += load(bias, s.bias_type, (size_t)r);
                    if (ep & EP_DGELU) {
                        v *= gelu_grad(load(aux, s.aux_type, (size_t)r + (size_t)j * d->aux_ld));
                    } else {
                        if (ep & EP_AUX) store(aux, s.aux_type, (size_t)r + (size_t)j * d->aux_ld, v);
                        if (ep & EP_GELU) v = gelu(v);
                        if ((ep & EP_RELU) && !(v > 0)) v = 0;
                    }
                    store(out, work_type, at, v);
                }
        }
        if (ep & EP_BGRAD)              /* DGELU_BGRAD: the rows' sums of the gradient */
            for (int r = 0; r < m; r++) {
                double sum = 0;
                for (int j = 0; j < n; j++) sum += load(out, work_type, (size_t)r + (size_t)j * ld_out);
                store((void *)bias, s.bias_type, (size_t)r, sum);
            }
        if (ep & (EP_BGRADA | EP_BGRADB)) {   /* sums of op(A)'s rows or op(B)'s columns over k */
            int a_side = ep & EP_BGRADA, len = a_side ? m : n;
            const char *src = a_side ? a : b;
            int64_t ld = a_side ? al->ld : bl->ld;
            int trans = a_side ? d->transa != CUBLAS_OP_N : d->transb != CUBLAS_OP_N;
            for (int r = 0; r < len; r++) {
                double sum = 0;
                for (int q = 0; q < k; q++) {
                    /* op(A)[r][q] or op(B)[q][r] */
                    size_t at = a_side ? (trans ? (size_t)q + (size_t)r * ld : (size_t)r + (size_t)q * ld)
                                       : (trans ? (size_t)r + (size_t)q * ld : (size_t)q + (size_t)r * ld);
                    sum += load(src, s.ab_type, at);
                }
                store((void *)bias, s.bias_type, (size_t)r, sum);
            }
        }
        if (!direct)
            for (int j = 0; j < n; j++)
                for (int r = 0; r < m; r++)
                    store(dd, s.d_type, (size_t)r + (size_t)j * dl->ld, load(out, work_type, (size_t)r + (size_t)j * m));
    }
    free(work);
    return st;
}
