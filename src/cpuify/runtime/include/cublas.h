/* cpuify: the legacy cuBLAS API (cublasInit, cublasSgemm with char transpose arguments,
 * errors from cublasGetError), written for cpuify; the types are cublas_api.h's. */
#ifndef CPUIFY_CUBLAS_LEGACY_H
#define CPUIFY_CUBLAS_LEGACY_H
/* NVIDIA's include guard too: programs test it to know the header is in (`#ifdef CUBLAS_H_`) */
#define CUBLAS_H_

#if defined(CPUIFY_CUBLAS_V2_H)
#error "cublas.h (the legacy API) and cublas_v2.h cannot be used in the same translation unit"
#endif

#include "cublas_api.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef cublasStatus_t cublasStatus;

cublasStatus_t cublasInit(void);
cublasStatus_t cublasShutdown(void);
cublasStatus_t cublasGetError(void);
cublasStatus_t cublasGetVersion(int *version);
cublasStatus_t cublasAlloc(int n, int elemSize, void **devicePtr);
cublasStatus_t cublasFree(void *devicePtr);
cublasStatus_t cublasSetKernelStream(cudaStream_t stream);

void cublasSaxpy(int n, float alpha, const float *x, int incx, float *y, int incy);
void cublasDaxpy(int n, double alpha, const double *x, int incx, double *y, int incy);
void cublasSscal(int n, float alpha, float *x, int incx);
void cublasDscal(int n, double alpha, double *x, int incx);
void cublasScopy(int n, const float *x, int incx, float *y, int incy);
void cublasDcopy(int n, const double *x, int incx, double *y, int incy);
void cublasSswap(int n, float *x, int incx, float *y, int incy);
void cublasDswap(int n, double *x, int incx, double *y, int incy);
float cublasSdot(int n, const float *x, int incx, const float *y, int incy);
double cublasDdot(int n, const double *x, int incx, const double *y, int incy);
float cublasSnrm2(int n, const float *x, int incx);
double cublasDnrm2(int n, const double *x, int incx);
float cublasSasum(int n, const float *x, int incx);
double cublasDasum(int n, const double *x, int incx);
int cublasIsamax(int n, const float *x, int incx);
int cublasIdamax(int n, const double *x, int incx);
int cublasIsamin(int n, const float *x, int incx);
int cublasIdamin(int n, const double *x, int incx);
void cublasSgemv(char trans, int m, int n, float alpha, const float *A, int lda, const float *x, int incx,
                 float beta, float *y, int incy);
void cublasDgemv(char trans, int m, int n, double alpha, const double *A, int lda, const double *x,
                 int incx, double beta, double *y, int incy);
void cublasSgemm(char transa, char transb, int m, int n, int k, float alpha, const float *A, int lda,
                 const float *B, int ldb, float beta, float *C, int ldc);
void cublasDgemm(char transa, char transb, int m, int n, int k, double alpha, const double *A, int lda,
                 const double *B, int ldb, double beta, double *C, int ldc);

#ifdef __cplusplus
}
#endif

#endif /* CPUIFY_CUBLAS_LEGACY_H */
