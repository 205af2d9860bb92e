/* cutil_inline.h: cpuify's version of the SDK's inline helpers (cutilSafeCall,
 * cutilCheckMsg, cutilSafeMalloc, cutilDeviceInit, cutGetMaxGflopsDeviceId, ...), written for
 * cpuify from the SDK's documented API.  Includes cutil.h and the CUDA runtime API. */
#ifndef CPUIFY_SDK_CUTIL_INLINE_H
#define CPUIFY_SDK_CUTIL_INLINE_H

#include <stdio.h>
#include <stdlib.h>
#include <cuda_runtime_api.h>
#include <cutil.h>
#include <cutil_inline_bankchecker.h>
#include <cutil_inline_runtime.h>
#include <cutil_inline_drvapi.h>

inline void print_NVCC_min_spec(const char *sSDKsample, const char *sNVCCReq, const char *sDriverReq) {
    printf("CUDA %d.%02d Toolkit built this project.\n", CUDART_VERSION / 1000,
           (CUDART_VERSION % 100));
    printf("  [ %s ] requirements:\n", sSDKsample);
    printf(" -> CUDA %s Toolkit\n", sNVCCReq);
    printf(" -> %s NVIDIA Display Driver.\n", sDriverReq);
}

#define ALIGN_OFFSET(offset, alignment) offset = (offset + (alignment - 1)) & ~((alignment - 1))

#endif
