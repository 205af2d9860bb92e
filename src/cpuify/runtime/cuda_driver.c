/* cpuify's libcuda.so (the CUDA driver API) for `cpuify cuda-home`: the functions that mean
 * something on the CPU.  Device queries describe the device cpuify's CUDA runtime reports;
 * contexts are the one primary context of that device; memory goes through the runtime.
 * Every other driver API function is generated from cuda.h (cpuify/nvcc/cuda_home.py): it
 * prints one line naming itself, once, and returns CUDA_ERROR_NOT_SUPPORTED.
 *
 * The runtime is referenced weakly: a program that links cpuify's libcudart (static or
 * shared) gets it; one that links only libcuda gets CUDA_ERROR_NOT_SUPPORTED with a line
 * saying what to link. */

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#pragma weak cudaMalloc
#pragma weak cudaFree
#pragma weak cudaMemcpy
#pragma weak cudaMemset
#pragma weak cudaMemGetInfo
#pragma weak cudaDeviceSynchronize
#pragma weak cudaDeviceGetAttribute
#pragma weak cudaGetDeviceProperties

/* generated with the stubs: the name of a CUresult value, NULL when there is none */
extern const char *cpuify_cu_error_name(int value);

/* cudaDeviceAttr mirrors CUdevice_attribute value for value; cuDeviceGetAttribute relies on it */
_Static_assert((int)CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK == (int)cudaDevAttrMaxThreadsPerBlock, "");
_Static_assert((int)CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT == (int)cudaDevAttrMultiProcessorCount, "");
_Static_assert((int)CU_DEVICE_ATTRIBUTE_WARP_SIZE == (int)cudaDevAttrWarpSize, "");
_Static_assert((int)CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR == (int)cudaDevAttrComputeCapabilityMajor, "");
_Static_assert((int)CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR == (int)cudaDevAttrComputeCapabilityMinor, "");
_Static_assert((int)CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK == (int)cudaDevAttrMaxSharedMemoryPerBlock, "");

static atomic_int g_initialized;
static char g_primary_context;             /* the address is the context's handle */
static _Thread_local CUcontext tls_current;

#define CONTEXT ((CUcontext)(void *)&g_primary_context)

static CUresult need_runtime(const char *fn, int present) {
    if (present) return CUDA_SUCCESS;
    static atomic_int said;
    if (!atomic_exchange(&said, 1))
        fprintf(stderr, "cpuify: %s needs cpuify's CUDA runtime: link the program with -lcudart "
                        "(returning CUDA_ERROR_NOT_SUPPORTED)\n", fn);
    return CUDA_ERROR_NOT_SUPPORTED;
}

/* a cudaError_t as the CUresult of the same number (CUDA keeps the two enums aligned for the
 * errors the runtime calls here return), CUDA_ERROR_UNKNOWN when there is none */
static CUresult from_runtime(cudaError_t e) {
    if (e == cudaSuccess) return CUDA_SUCCESS;
    return cpuify_cu_error_name((int)e) ? (CUresult)e : CUDA_ERROR_UNKNOWN;
}

#define NEED_INIT() do { if (!atomic_load(&g_initialized)) return CUDA_ERROR_NOT_INITIALIZED; } while (0)
#define CHECK_DEVICE(d) do { if ((d) != 0) return CUDA_ERROR_INVALID_DEVICE; } while (0)

CUresult cuInit(unsigned int flags) {
    if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
    atomic_store(&g_initialized, 1);
    return CUDA_SUCCESS;
}

CUresult cuDriverGetVersion(int *version) {
    if (!version) return CUDA_ERROR_INVALID_VALUE;
    *version = CUDA_VERSION;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetCount(int *count) {
    NEED_INIT();
    if (!count) return CUDA_ERROR_INVALID_VALUE;
    *count = 1;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGet(CUdevice *device, int ordinal) {
    NEED_INIT();
    if (!device) return CUDA_ERROR_INVALID_VALUE;
    CHECK_DEVICE(ordinal);
    *device = 0;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetAttribute(int *value, CUdevice_attribute attrib, CUdevice dev) {
    NEED_INIT();
    if (!value) return CUDA_ERROR_INVALID_VALUE;
    CHECK_DEVICE(dev);
    CUresult r = need_runtime("cuDeviceGetAttribute", cudaDeviceGetAttribute != 0);
    if (r != CUDA_SUCCESS) return r;
    return from_runtime(cudaDeviceGetAttribute(value, (enum cudaDeviceAttr)attrib, 0));
}

CUresult cuDeviceComputeCapability(int *major, int *minor, CUdevice dev) {
    if (!major || !minor) return CUDA_ERROR_INVALID_VALUE;
    CUresult r = cuDeviceGetAttribute(major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
    return r != CUDA_SUCCESS ? r : cuDeviceGetAttribute(minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
}

CUresult cuDeviceGetName(char *name, int len, CUdevice dev) {
    NEED_INIT();
    if (!name || len <= 0) return CUDA_ERROR_INVALID_VALUE;
    CHECK_DEVICE(dev);
    CUresult r = need_runtime("cuDeviceGetName", cudaGetDeviceProperties != 0);
    if (r != CUDA_SUCCESS) return r;
    struct cudaDeviceProp p;
    r = from_runtime(cudaGetDeviceProperties(&p, 0));
    if (r != CUDA_SUCCESS) return r;
    strncpy(name, p.name, (size_t)len - 1);
    name[len - 1] = '\0';
    return CUDA_SUCCESS;
}

CUresult cuDeviceTotalMem(size_t *bytes, CUdevice dev) {
    NEED_INIT();
    if (!bytes) return CUDA_ERROR_INVALID_VALUE;
    CHECK_DEVICE(dev);
    CUresult r = need_runtime("cuDeviceTotalMem", cudaGetDeviceProperties != 0);
    if (r != CUDA_SUCCESS) return r;
    struct cudaDeviceProp p;
    r = from_runtime(cudaGetDeviceProperties(&p, 0));
    if (r == CUDA_SUCCESS) *bytes = p.totalGlobalMem;
    return r;
}

/* contexts: the device's primary context is the only one */
CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev) {
    NEED_INIT();
    if (!pctx) return CUDA_ERROR_INVALID_VALUE;
    CHECK_DEVICE(dev);
    *pctx = CONTEXT;
    return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRelease(CUdevice dev) {
    NEED_INIT();
    CHECK_DEVICE(dev);
    return CUDA_SUCCESS;
}

CUresult cuCtxGetCurrent(CUcontext *pctx) {
    NEED_INIT();
    if (!pctx) return CUDA_ERROR_INVALID_VALUE;
    *pctx = tls_current;
    return CUDA_SUCCESS;
}

CUresult cuCtxSetCurrent(CUcontext ctx) {
    NEED_INIT();
    if (ctx && ctx != CONTEXT) return CUDA_ERROR_INVALID_CONTEXT;
    tls_current = ctx;
    return CUDA_SUCCESS;
}

CUresult cuCtxPushCurrent(CUcontext ctx) {
    return ctx ? cuCtxSetCurrent(ctx) : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuCtxPopCurrent(CUcontext *pctx) {
    NEED_INIT();
    if (!tls_current) return CUDA_ERROR_INVALID_CONTEXT;
    if (pctx) *pctx = tls_current;
    tls_current = NULL;
    return CUDA_SUCCESS;
}

CUresult cuCtxGetDevice(CUdevice *device) {
    NEED_INIT();
    if (!device) return CUDA_ERROR_INVALID_VALUE;
    *device = 0;
    return CUDA_SUCCESS;
}

CUresult cuCtxSynchronize(void) {
    NEED_INIT();
    CUresult r = need_runtime("cuCtxSynchronize", cudaDeviceSynchronize != 0);
    return r != CUDA_SUCCESS ? r : from_runtime(cudaDeviceSynchronize());
}

/* memory: device memory is the runtime's */
CUresult cuMemAlloc(CUdeviceptr *dptr, size_t bytes) {
    NEED_INIT();
    if (!dptr) return CUDA_ERROR_INVALID_VALUE;
    CUresult r = need_runtime("cuMemAlloc", cudaMalloc != 0);
    if (r != CUDA_SUCCESS) return r;
    void *p = NULL;
    r = from_runtime(cudaMalloc(&p, bytes));
    if (r == CUDA_SUCCESS) *dptr = (CUdeviceptr)(uintptr_t)p;
    return r;
}

CUresult cuMemFree(CUdeviceptr dptr) {
    NEED_INIT();
    CUresult r = need_runtime("cuMemFree", cudaFree != 0);
    return r != CUDA_SUCCESS ? r : from_runtime(cudaFree((void *)(uintptr_t)dptr));
}

CUresult cuMemGetInfo(size_t *free_bytes, size_t *total_bytes) {
    NEED_INIT();
    CUresult r = need_runtime("cuMemGetInfo", cudaMemGetInfo != 0);
    return r != CUDA_SUCCESS ? r : from_runtime(cudaMemGetInfo(free_bytes, total_bytes));
}

CUresult cuMemcpyHtoD(CUdeviceptr dst, const void *src, size_t bytes) {
    NEED_INIT();
    CUresult r = need_runtime("cuMemcpyHtoD", cudaMemcpy != 0);
    return r != CUDA_SUCCESS ? r
        : from_runtime(cudaMemcpy((void *)(uintptr_t)dst, src, bytes, cudaMemcpyHostToDevice));
}

CUresult cuMemcpyDtoH(void *dst, CUdeviceptr src, size_t bytes) {
    NEED_INIT();
    CUresult r = need_runtime("cuMemcpyDtoH", cudaMemcpy != 0);
    return r != CUDA_SUCCESS ? r
        : from_runtime(cudaMemcpy(dst, (const void *)(uintptr_t)src, bytes, cudaMemcpyDeviceToHost));
}

CUresult cuMemcpyDtoD(CUdeviceptr dst, CUdeviceptr src, size_t bytes) {
    NEED_INIT();
    CUresult r = need_runtime("cuMemcpyDtoD", cudaMemcpy != 0);
    return r != CUDA_SUCCESS ? r
        : from_runtime(cudaMemcpy((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, bytes,
                                  cudaMemcpyDeviceToDevice));
}

CUresult cuMemsetD8(CUdeviceptr dst, unsigned char value, size_t count) {
    NEED_INIT();
    CUresult r = need_runtime("cuMemsetD8", cudaMemset != 0);
    return r != CUDA_SUCCESS ? r : from_runtime(cudaMemset((void *)(uintptr_t)dst, value, count));
}

/* errors */
CUresult cuGetErrorName(CUresult error, const char **str) {
    if (!str) return CUDA_ERROR_INVALID_VALUE;
    *str = cpuify_cu_error_name((int)error);
    return *str ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuGetErrorString(CUresult error, const char **str) {
    /* the driver's own descriptions are NVIDIA's text; the name says the same */
    return cuGetErrorName(error, str);
}
