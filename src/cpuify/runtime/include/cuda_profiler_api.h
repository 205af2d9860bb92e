/* cpuify: the CUDA profiler control API (cudaProfilerStart/Stop).  The PyPI wheels do not
 * ship this header; cpuify's runtime implements both functions as no-ops that succeed
 * (there is no GPU profiler to start; CPUIFY_PROFILE=1 gives cpuify's own summary). */
#ifndef CPUIFY_CUDA_PROFILER_API_H
#define CPUIFY_CUDA_PROFILER_API_H
/* NVIDIA's include guard too: programs test it to know the header is in (`#ifdef __CUDA_PROFILER_API_H__`) */
#define __CUDA_PROFILER_API_H__

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

extern __host__ cudaError_t CUDARTAPI cudaProfilerStart(void);
extern __host__ cudaError_t CUDARTAPI cudaProfilerStop(void);

#ifdef __cplusplus
}
#endif

#endif /* CPUIFY_CUDA_PROFILER_API_H */
