/* cpuify: the CUDA runtime functions of CUDA <= 12 that CUDA 13 removed, for the many
 * published programs written against older CUDA (cudaThreadSynchronize, ...).
 *
 * `cpuify nvcc` pre-includes this header (after cuda_runtime.h, as nvcc does with -include);
 * `--cpuify-no-legacy` or CPUIFY_LEGACY=0 turns it off.  cpuify's runtime (runtime/cudart.c)
 * implements the functions.  The cudaDeviceProp fields CUDA 13 removed (clockRate,
 * deviceOverlap, ...) come from the generated driver_types.h (cpuify/nvcc/headers.py).
 * Redeclaring a function a CUDA 12 header still declares is harmless: the prototypes match.
 */
#ifndef CPUIFY_LEGACY_H
#define CPUIFY_LEGACY_H

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* the pre-CUDA-4 names of cudaDeviceSynchronize, cudaDeviceReset, cudaDevice{Set,Get}Limit
 * and cudaDevice{Set,Get}CacheConfig */
extern __host__ cudaError_t CUDARTAPI cudaThreadSynchronize(void);
extern __host__ cudaError_t CUDARTAPI cudaThreadExit(void);
extern __host__ cudaError_t CUDARTAPI cudaThreadSetLimit(enum cudaLimit limit, size_t value);
extern __host__ cudaError_t CUDARTAPI cudaThreadGetLimit(size_t *pValue, enum cudaLimit limit);
extern __host__ cudaError_t CUDARTAPI cudaThreadSetCacheConfig(enum cudaFuncCache cacheConfig);
extern __host__ cudaError_t CUDARTAPI cudaThreadGetCacheConfig(enum cudaFuncCache *pCacheConfig);

/* doubles needed no conversion since compute capability 1.3: these do nothing */
extern __host__ cudaError_t CUDARTAPI cudaSetDoubleForDevice(double *d);
extern __host__ cudaError_t CUDARTAPI cudaSetDoubleForHost(double *d);

#ifdef __cplusplus
}

/* CUDA <= 12 named the target of a prefetch or an advice by device number (cudaCpuDeviceId
 * for the host); CUDA 13 takes a cudaMemLocation (and a flags word for the prefetch).  These
 * C++ overloads take the old arguments: an int is no cudaMemLocation, so a call resolves to
 * exactly one of the two. */
static inline cudaMemLocation cpuify_legacy_location(int device) {
    cudaMemLocation location;
    location.type = device == cudaCpuDeviceId ? cudaMemLocationTypeHost : cudaMemLocationTypeDevice;
    location.id = device == cudaCpuDeviceId ? 0 : device;
    return location;
}
static inline __host__ cudaError_t cudaMemPrefetchAsync(const void *devPtr, size_t count,
                                                        int dstDevice, cudaStream_t stream = 0) {
    return cudaMemPrefetchAsync(devPtr, count, cpuify_legacy_location(dstDevice), 0u, stream);
}
static inline __host__ cudaError_t cudaMemAdvise(const void *devPtr, size_t count,
                                                 enum cudaMemoryAdvise advice, int device) {
    return cudaMemAdvise(devPtr, count, advice, cpuify_legacy_location(device));
}
#endif

#endif /* CPUIFY_LEGACY_H */
