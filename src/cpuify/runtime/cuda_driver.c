/* cpuify's libcuda.so (the CUDA driver API) for `cpuify cuda-home`: the functions that mean
 * something on the CPU.  Device queries describe the devices cpuify's CUDA runtime reports
 * (one, or CPUIFY_DEVICE_COUNT of them, all the one CPU); each device has one context, its
 * primary context (cuCtxCreate gives it too: the devices share one memory, so there is
 * nothing for a second context of a device to keep apart); the current context is the
 * runtime's current device's, as in CUDA (cuCtxSetCurrent/Push/Pop set the runtime's
 * current device, cudaSetDevice changes the current context); memory goes through the
 * runtime.  Every other driver API function is generated from cuda.h
 * (cpuify/nvcc/cuda_home.py): it prints one line naming itself, once, and returns
 * CUDA_ERROR_NOT_SUPPORTED.
 *
 * The runtime is referenced weakly: a program that links cpuify's libcudart (static or
 * shared) gets it; one that links only libcuda sees one device and gets
 * CUDA_ERROR_NOT_SUPPORTED with a line saying what to link. */

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
#pragma weak cudaGetDeviceCount
#pragma weak cudaGetDevice
#pragma weak cudaSetDevice
#pragma weak cudaDeviceEnablePeerAccess
#pragma weak cudaDeviceDisablePeerAccess
#pragma weak cudaDeviceGetPCIBusId
#pragma weak cudaDeviceGetByPCIBusId
#pragma weak cpuify_cudart_initialized
#pragma weak cpuify_allocation_range
#pragma weak cudaMemcpyAsync
#pragma weak cudaStreamWaitEvent
#pragma weak cudaEventRecord
extern int cpuify_cudart_initialized(void);
extern int cpuify_allocation_range(const void *p, void **base, size_t *size);

/* generated with the stubs: the name of a CUresult value, NULL when there is none */
extern const char *cpuify_cu_error_name(int value);

/* cudaDeviceAttr mirrors CUdevice_attribute value for value; cuDeviceGetAttribute relies on it */
_Static_assert((int)CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK == (int)cudaDevAttrMaxThreadsPerBlock, "");
_Static_assert((int)CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT == (int)cudaDevAttrMultiProcessorCount, "");
_Static_assert((int)CU_DEVICE_ATTRIBUTE_WARP_SIZE == (int)cudaDevAttrWarpSize, "");
_Static_assert((int)CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR == (int)cudaDevAttrComputeCapabilityMajor, "");
_Static_assert((int)CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR == (int)cudaDevAttrComputeCapabilityMinor, "");
_Static_assert((int)CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK == (int)cudaDevAttrMaxSharedMemoryPerBlock, "");
_Static_assert((int)CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD_GROUP_ID == (int)cudaDevAttrMultiGpuBoardGroupID, "");
/* and the peer errors mirror the runtime's (cuCtxEnablePeerAccess returns the runtime's) */
_Static_assert((int)CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED == (int)cudaErrorPeerAccessAlreadyEnabled, "");
_Static_assert((int)CUDA_ERROR_PEER_ACCESS_NOT_ENABLED == (int)cudaErrorPeerAccessNotEnabled, "");
_Static_assert((int)CUDA_ERROR_PEER_ACCESS_UNSUPPORTED == (int)cudaErrorPeerAccessUnsupported, "");
_Static_assert((int)CU_DEVICE_P2P_ATTRIBUTE_CUDA_ARRAY_ACCESS_SUPPORTED == (int)cudaDevP2PAttrCudaArrayAccessSupported, "");

#define MAX_DEVICES 64                     /* as CPUIFY_DEVICE_COUNT's bound */
#define MAX_STACK 64                       /* contexts pushed on one thread */

static atomic_int g_initialized;
static char g_primary_context[MAX_DEVICES];        /* &[d] is device d's context's handle */
static atomic_int g_primary_retained[MAX_DEVICES]; /* cuDevicePrimaryCtxRetain - Release */
static atomic_uint g_primary_flags[MAX_DEVICES];
/* the thread's context stack, as devices (-1: the thread has not used one yet); with the
 * runtime, the top is the runtime's current device */
static _Thread_local int tls_depth = -1;
static _Thread_local int tls_stack[MAX_STACK];

#define CONTEXT(d) ((CUcontext)(void *)&g_primary_context[(d)])

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

/* the devices the runtime shows (CPUIFY_DEVICE_COUNT); one without the runtime */
static int device_count(void) {
    int n = 1;
    if (cudaGetDeviceCount && cudaGetDeviceCount(&n) != cudaSuccess) n = 1;
    return n;
}

/* the device a context handle is the context of, -1 for none */
static int context_device(CUcontext ctx) {
    const char *c = (const char *)(void *)ctx;
    if (c < g_primary_context || c >= g_primary_context + device_count()) return -1;
    return (int)(c - g_primary_context);
}

/* cuInit was called, or the program has called the CUDA runtime, which initializes the driver
 * API on its first call as CUDA's does (`cudaFree(0); cuCtxGetDevice(&dev);`) */
static int initialized(void) {
    return atomic_load(&g_initialized) || (cpuify_cudart_initialized && cpuify_cudart_initialized());
}

#define NEED_INIT() do { if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED; } while (0)
#define CHECK_DEVICE(d) do { if ((d) < 0 || (d) >= device_count()) return CUDA_ERROR_INVALID_DEVICE; } while (0)

/* The thread's context stack; a thread starts with the runtime's current device's primary
 * context current (CUDA's runtime makes it current when it initializes). */
static void stack_begin(void) {
    if (tls_depth >= 0) return;
    tls_depth = 0;
    if (cudaGetDevice) {
        int d = 0;
        cudaGetDevice(&d);
        tls_stack[tls_depth++] = d;
    }
}

/* the device of the current context, -1 when none is current */
static int current_device(void) {
    stack_begin();
    if (tls_depth == 0) return -1;
    if (cudaGetDevice) cudaGetDevice(&tls_stack[tls_depth - 1]);   /* cudaSetDevice moves it */
    return tls_stack[tls_depth - 1];
}

/* the top of the stack changed: the runtime's current device follows */
static void top_changed(void) {
    if (tls_depth > 0 && cudaSetDevice) cudaSetDevice(tls_stack[tls_depth - 1]);
}

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
    *count = device_count();
    return CUDA_SUCCESS;
}

CUresult cuDeviceGet(CUdevice *device, int ordinal) {
    NEED_INIT();
    if (!device) return CUDA_ERROR_INVALID_VALUE;
    CHECK_DEVICE(ordinal);
    *device = ordinal;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetAttribute(int *value, CUdevice_attribute attrib, CUdevice dev) {
    NEED_INIT();
    if (!value) return CUDA_ERROR_INVALID_VALUE;
    CHECK_DEVICE(dev);
    CUresult r = need_runtime("cuDeviceGetAttribute", cudaDeviceGetAttribute != 0);
    if (r != CUDA_SUCCESS) return r;
    return from_runtime(cudaDeviceGetAttribute(value, (enum cudaDeviceAttr)attrib, dev));
}

CUresult cuDeviceComputeCapability(int *major, int *minor, CUdevice dev) {
    if (!major || !minor) return CUDA_ERROR_INVALID_VALUE;
    CUresult r = cuDeviceGetAttribute(major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
    return r != CUDA_SUCCESS ? r : cuDeviceGetAttribute(minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
}

static CUresult properties(const char *fn, CUdevice dev, struct cudaDeviceProp *p) {
    NEED_INIT();
    CHECK_DEVICE(dev);
    CUresult r = need_runtime(fn, cudaGetDeviceProperties != 0);
    return r != CUDA_SUCCESS ? r : from_runtime(cudaGetDeviceProperties(p, dev));
}

CUresult cuDeviceGetName(char *name, int len, CUdevice dev) {
    if (!name || len <= 0) return initialized() ? CUDA_ERROR_INVALID_VALUE
                                                              : CUDA_ERROR_NOT_INITIALIZED;
    struct cudaDeviceProp p;
    CUresult r = properties("cuDeviceGetName", dev, &p);
    if (r != CUDA_SUCCESS) return r;
    strncpy(name, p.name, (size_t)len - 1);
    name[len - 1] = '\0';
    return CUDA_SUCCESS;
}

CUresult cuDeviceTotalMem(size_t *bytes, CUdevice dev) {
    if (!bytes) return initialized() ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_NOT_INITIALIZED;
    struct cudaDeviceProp p;
    CUresult r = properties("cuDeviceTotalMem", dev, &p);
    if (r == CUDA_SUCCESS) *bytes = p.totalGlobalMem;
    return r;
}

CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev) {
    if (!uuid) return initialized() ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_NOT_INITIALIZED;
    struct cudaDeviceProp p;
    CUresult r = properties("cuDeviceGetUuid", dev, &p);
    if (r == CUDA_SUCCESS) memcpy(uuid->bytes, p.uuid.bytes, sizeof uuid->bytes);
    return r;
}

CUresult cuDeviceGetPCIBusId(char *pciBusId, int len, CUdevice dev) {
    NEED_INIT();
    CUresult r = need_runtime("cuDeviceGetPCIBusId", cudaDeviceGetPCIBusId != 0);
    return r != CUDA_SUCCESS ? r : from_runtime(cudaDeviceGetPCIBusId(pciBusId, len, dev));
}

CUresult cuDeviceGetByPCIBusId(CUdevice *dev, const char *pciBusId) {
    NEED_INIT();
    CUresult r = need_runtime("cuDeviceGetByPCIBusId", cudaDeviceGetByPCIBusId != 0);
    return r != CUDA_SUCCESS ? r : from_runtime(cudaDeviceGetByPCIBusId(dev, pciBusId));
}

/* peers: any two distinct devices (the same memory), as cudaDeviceCanAccessPeer says */
CUresult cuDeviceCanAccessPeer(int *canAccessPeer, CUdevice dev, CUdevice peerDev) {
    NEED_INIT();
    if (!canAccessPeer) return CUDA_ERROR_INVALID_VALUE;
    CHECK_DEVICE(dev);
    CHECK_DEVICE(peerDev);
    *canAccessPeer = dev != peerDev;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetP2PAttribute(int *value, CUdevice_P2PAttribute attrib, CUdevice srcDevice,
                                 CUdevice dstDevice) {
    NEED_INIT();
    if (!value) return CUDA_ERROR_INVALID_VALUE;
    CHECK_DEVICE(srcDevice);
    CHECK_DEVICE(dstDevice);
    if (srcDevice == dstDevice) return CUDA_ERROR_INVALID_DEVICE;
    switch (attrib) {
    case CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK: *value = 0; break;
    case CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED:
    case CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED:
    case CU_DEVICE_P2P_ATTRIBUTE_CUDA_ARRAY_ACCESS_SUPPORTED: *value = 1; break;
    case CU_DEVICE_P2P_ATTRIBUTE_ONLY_PARTIAL_NATIVE_ATOMIC_SUPPORTED: *value = 0; break;
    default: return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

/* the runtime keeps which device enabled access to which (cudart_devices.c): the current
 * context's device is the runtime's current device */
CUresult cuCtxEnablePeerAccess(CUcontext peerContext, unsigned int flags) {
    NEED_INIT();
    if (current_device() < 0) return CUDA_ERROR_INVALID_CONTEXT;
    int peer = context_device(peerContext);
    if (peer < 0) return CUDA_ERROR_INVALID_CONTEXT;
    CUresult r = need_runtime("cuCtxEnablePeerAccess", cudaDeviceEnablePeerAccess != 0);
    return r != CUDA_SUCCESS ? r : from_runtime(cudaDeviceEnablePeerAccess(peer, flags));
}

CUresult cuCtxDisablePeerAccess(CUcontext peerContext) {
    NEED_INIT();
    if (current_device() < 0) return CUDA_ERROR_INVALID_CONTEXT;
    int peer = context_device(peerContext);
    if (peer < 0) return CUDA_ERROR_INVALID_CONTEXT;
    CUresult r = need_runtime("cuCtxDisablePeerAccess", cudaDeviceDisablePeerAccess != 0);
    return r != CUDA_SUCCESS ? r : from_runtime(cudaDeviceDisablePeerAccess(peer));
}

/* contexts: each device's primary context is its only one */
CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev) {
    NEED_INIT();
    if (!pctx) return CUDA_ERROR_INVALID_VALUE;
    CHECK_DEVICE(dev);
    atomic_fetch_add(&g_primary_retained[dev], 1);
    *pctx = CONTEXT(dev);
    return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRelease(CUdevice dev) {
    NEED_INIT();
    CHECK_DEVICE(dev);
    int n = atomic_load(&g_primary_retained[dev]);
    do {
        if (n <= 0) return CUDA_ERROR_INVALID_CONTEXT;     /* released more than retained */
    } while (!atomic_compare_exchange_weak(&g_primary_retained[dev], &n, n - 1));
    return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active) {
    NEED_INIT();
    if (!flags || !active) return CUDA_ERROR_INVALID_VALUE;
    CHECK_DEVICE(dev);
    *flags = atomic_load(&g_primary_flags[dev]);
    *active = atomic_load(&g_primary_retained[dev]) > 0;
    return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxSetFlags(CUdevice dev, unsigned int flags) {
    NEED_INIT();
    CHECK_DEVICE(dev);
    atomic_store(&g_primary_flags[dev], flags);
    return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxReset(CUdevice dev) {
    NEED_INIT();
    CHECK_DEVICE(dev);
    atomic_store(&g_primary_retained[dev], 0);
    atomic_store(&g_primary_flags[dev], 0);
    return CUDA_SUCCESS;
}

/* cuCtxCreate: the device's primary context, pushed on the thread's stack (affinity and
 * graphics-interop parameters are not supported) */
CUresult cuCtxCreate(CUcontext *pctx, CUctxCreateParams *params, unsigned int flags, CUdevice dev) {
    NEED_INIT();
    (void)flags;
    if (!pctx) return CUDA_ERROR_INVALID_VALUE;
    CHECK_DEVICE(dev);
    if (params && (params->execAffinityParams || params->numExecAffinityParams || params->cigParams))
        return CUDA_ERROR_NOT_SUPPORTED;
    stack_begin();
    if (tls_depth == MAX_STACK) return CUDA_ERROR_OUT_OF_MEMORY;
    tls_stack[tls_depth++] = dev;
    top_changed();
    *pctx = CONTEXT(dev);
    return CUDA_SUCCESS;
}

/* the context stays usable (it is the primary context); it leaves the top of this thread's
 * stack where it is current */
CUresult cuCtxDestroy(CUcontext ctx) {
    NEED_INIT();
    int d = context_device(ctx);
    if (d < 0) return CUDA_ERROR_INVALID_CONTEXT;
    if (current_device() == d) {
        tls_depth--;
        top_changed();
    }
    return CUDA_SUCCESS;
}

CUresult cuCtxGetCurrent(CUcontext *pctx) {
    NEED_INIT();
    if (!pctx) return CUDA_ERROR_INVALID_VALUE;
    int d = current_device();
    *pctx = d < 0 ? NULL : CONTEXT(d);
    return CUDA_SUCCESS;
}

/* replaces the top of the stack (NULL: pops it) */
CUresult cuCtxSetCurrent(CUcontext ctx) {
    NEED_INIT();
    stack_begin();
    if (!ctx) {
        if (tls_depth > 0) tls_depth--;
        top_changed();
        return CUDA_SUCCESS;
    }
    int d = context_device(ctx);
    if (d < 0) return CUDA_ERROR_INVALID_CONTEXT;
    if (tls_depth == 0) tls_depth = 1;
    tls_stack[tls_depth - 1] = d;
    top_changed();
    return CUDA_SUCCESS;
}

CUresult cuCtxPushCurrent(CUcontext ctx) {
    NEED_INIT();
    int d = context_device(ctx);
    if (d < 0) return CUDA_ERROR_INVALID_CONTEXT;
    stack_begin();
    if (tls_depth == MAX_STACK) return CUDA_ERROR_OUT_OF_MEMORY;
    tls_stack[tls_depth++] = d;
    top_changed();
    return CUDA_SUCCESS;
}

CUresult cuCtxPopCurrent(CUcontext *pctx) {
    NEED_INIT();
    int d = current_device();
    if (d < 0) return CUDA_ERROR_INVALID_CONTEXT;
    if (pctx) *pctx = CONTEXT(d);
    tls_depth--;
    top_changed();
    return CUDA_SUCCESS;
}

CUresult cuCtxGetDevice(CUdevice *device) {
    NEED_INIT();
    if (!device) return CUDA_ERROR_INVALID_VALUE;
    int d = current_device();
    if (d < 0) return CUDA_ERROR_INVALID_CONTEXT;
    *device = d;
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

/* the allocation that holds dptr (cuMemAlloc/cudaMalloc, pitched, managed or page-locked
 * memory of the runtime's): its base and the bytes asked for; either output may be NULL */
CUresult cuMemGetAddressRange(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr) {
    NEED_INIT();
    CUresult r = need_runtime("cuMemGetAddressRange", cpuify_allocation_range != 0);
    if (r != CUDA_SUCCESS) return r;
    void *base = NULL;
    size_t size = 0;
    if (!cpuify_allocation_range((const void *)(uintptr_t)dptr, &base, &size))
        return CUDA_ERROR_NOT_FOUND;
    if (pbase) *pbase = (CUdeviceptr)(uintptr_t)base;
    if (psize) *psize = size;
    return CUDA_SUCCESS;
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

/* the asynchronous copies, event records and waits (The CUDA Handbook's peer2peerMemcpyDrv
 * stages a peer copy through them): a CUstream is a cudaStream_t and a CUevent a cudaEvent_t,
 * as in CUDA, so the runtime's streams order them */
static CUresult copy_async(const char *fn, void *dst, const void *src, size_t bytes,
                           enum cudaMemcpyKind kind, CUstream stream) {
    NEED_INIT();
    CUresult r = need_runtime(fn, cudaMemcpyAsync != 0);
    return r != CUDA_SUCCESS ? r : from_runtime(cudaMemcpyAsync(dst, src, bytes, kind, (cudaStream_t)stream));
}

CUresult cuMemcpyHtoDAsync(CUdeviceptr dst, const void *src, size_t bytes, CUstream stream) {
    return copy_async("cuMemcpyHtoDAsync", (void *)(uintptr_t)dst, src, bytes, cudaMemcpyHostToDevice, stream);
}

CUresult cuMemcpyDtoHAsync(void *dst, CUdeviceptr src, size_t bytes, CUstream stream) {
    return copy_async("cuMemcpyDtoHAsync", dst, (const void *)(uintptr_t)src, bytes, cudaMemcpyDeviceToHost, stream);
}

CUresult cuMemcpyDtoDAsync(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream) {
    return copy_async("cuMemcpyDtoDAsync", (void *)(uintptr_t)dst, (const void *)(uintptr_t)src, bytes,
                      cudaMemcpyDeviceToDevice, stream);
}

CUresult cuEventRecord(CUevent event, CUstream stream) {
    NEED_INIT();
    CUresult r = need_runtime("cuEventRecord", cudaEventRecord != 0);
    return r != CUDA_SUCCESS ? r : from_runtime(cudaEventRecord((cudaEvent_t)event, (cudaStream_t)stream));
}

CUresult cuStreamWaitEvent(CUstream stream, CUevent event, unsigned int flags) {
    NEED_INIT();
    CUresult r = need_runtime("cuStreamWaitEvent", cudaStreamWaitEvent != 0);
    return r != CUDA_SUCCESS ? r
        : from_runtime(cudaStreamWaitEvent((cudaStream_t)stream, (cudaEvent_t)event, flags));
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
