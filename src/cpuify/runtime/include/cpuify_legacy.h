/* cpuify: the CUDA runtime functions of CUDA <= 12 that CUDA 13 removed or changed, for the
 * many published programs written against older CUDA (cudaThreadSynchronize, ..., and
 * CUDA 12's spellings of the graph-edge functions).
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

#if defined(__CUDACC__) && !defined(__CUDACC_RTC__)
/* CUDA <= 12's cuda_runtime.h gave every .cu file printf, FILE and the rest of <stdio.h>, and
 * assert (crt/common_functions.h includes them, but nvcc 13's front end no longer sees them:
 * "identifier printf is undefined" in programs that never included <stdio.h>) */
#include <stdio.h>
#include <assert.h>
#endif

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

#if CUDART_VERSION >= 13000
/* CUDA 13 gave the graph-edge functions an edge-data argument (CUDA 12.3's _v2 forms became
 * the only ones): these C++ overloads take CUDA 12's arguments, edges without data, as
 * NVIDIA's cuda_runtime.h keeps CUDA 11's cudaGraphInstantiate.  Each has a different number
 * of parameters from the CUDA 13 function, so a call resolves to one of the two. */
static inline __host__ cudaError_t cudaGraphAddDependencies(cudaGraph_t graph,
        const cudaGraphNode_t *from, const cudaGraphNode_t *to, size_t numDependencies) {
    return cudaGraphAddDependencies(graph, from, to, (const cudaGraphEdgeData *)0, numDependencies);
}
static inline __host__ cudaError_t cudaGraphRemoveDependencies(cudaGraph_t graph,
        const cudaGraphNode_t *from, const cudaGraphNode_t *to, size_t numDependencies) {
    return cudaGraphRemoveDependencies(graph, from, to, (const cudaGraphEdgeData *)0,
                                       numDependencies);
}
static inline __host__ cudaError_t cudaGraphGetEdges(cudaGraph_t graph, cudaGraphNode_t *from,
                                                     cudaGraphNode_t *to, size_t *numEdges) {
    return cudaGraphGetEdges(graph, from, to, (cudaGraphEdgeData *)0, numEdges);
}
static inline __host__ cudaError_t cudaGraphNodeGetDependencies(cudaGraphNode_t node,
        cudaGraphNode_t *pDependencies, size_t *pNumDependencies) {
    return cudaGraphNodeGetDependencies(node, pDependencies, (cudaGraphEdgeData *)0,
                                        pNumDependencies);
}
static inline __host__ cudaError_t cudaGraphNodeGetDependentNodes(cudaGraphNode_t node,
        cudaGraphNode_t *pDependentNodes, size_t *pNumDependentNodes) {
    return cudaGraphNodeGetDependentNodes(node, pDependentNodes, (cudaGraphEdgeData *)0,
                                          pNumDependentNodes);
}
static inline __host__ cudaError_t cudaGraphAddNode(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
        const cudaGraphNode_t *pDependencies, size_t numDependencies,
        struct cudaGraphNodeParams *nodeParams) {
    return cudaGraphAddNode(pGraphNode, graph, pDependencies, (const cudaGraphEdgeData *)0,
                            numDependencies, nodeParams);
}
/* CUDA 12's six arguments (the count of dependencies last, no edge data); fewer arguments
 * mean the same in both */
static inline __host__ cudaError_t cudaStreamGetCaptureInfo(cudaStream_t stream,
        enum cudaStreamCaptureStatus *captureStatus_out, unsigned long long *id_out,
        cudaGraph_t *graph_out, const cudaGraphNode_t **dependencies_out,
        size_t *numDependencies_out) {
    return cudaStreamGetCaptureInfo(stream, captureStatus_out, id_out, graph_out,
                                    dependencies_out, (const cudaGraphEdgeData **)0,
                                    numDependencies_out);
}
static inline __host__ cudaError_t cudaStreamUpdateCaptureDependencies(cudaStream_t stream,
        cudaGraphNode_t *dependencies, size_t numDependencies, unsigned int flags = 0) {
    return cudaStreamUpdateCaptureDependencies(stream, dependencies, (const cudaGraphEdgeData *)0,
                                               numDependencies, flags);
}
#endif
#endif

#endif /* CPUIFY_LEGACY_H */

#if !defined(CPUIFY_LEGACY_SHUFFLES_H) && defined(__cplusplus) && defined(__CUDACC__) && \
    defined(__SM_30_INTRINSICS_H__) && (CUDART_VERSION >= 13000 || (defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 700))
#define CPUIFY_LEGACY_SHUFFLES_H
/* The shuffles of CUDA <= 8 (before the _sync ones): __shfl, __shfl_up, __shfl_down,
 * __shfl_xor.  NVIDIA's headers declare them only for GPUs before Volta (CUDA 13: not at
 * all; its __any, __all and __ballot are still there, deprecated, and cpuify runs the
 * non-sync votes they compile to).  They act on the lanes that are active at the call,
 * which is what __activemask() gives: each is its _sync function with that mask, as
 * NVIDIA's CUDA 9 migration advice has it.  Every type the _sync shuffles take works.
 * Outside the header's guard: the first inclusion can come from cuda-home's
 * cuda_runtime_api.h, before sm_30_intrinsics.h declared the _sync shuffles; the
 * pre-include after cuda_runtime.h then defines these. */
template <typename T>
static __device__ __forceinline__ T __shfl(T var, int srcLane, int width = 32) {   /* warpSize */
    return __shfl_sync(__activemask(), var, srcLane, width);
}
template <typename T>
static __device__ __forceinline__ T __shfl_up(T var, unsigned int delta, int width = 32) {   /* warpSize */
    return __shfl_up_sync(__activemask(), var, delta, width);
}
template <typename T>
static __device__ __forceinline__ T __shfl_down(T var, unsigned int delta, int width = 32) {   /* warpSize */
    return __shfl_down_sync(__activemask(), var, delta, width);
}
template <typename T>
static __device__ __forceinline__ T __shfl_xor(T var, int laneMask, int width = 32) {   /* warpSize */
    return __shfl_xor_sync(__activemask(), var, laneMask, width);
}
#endif
