/* cutil_inline_drvapi.h (cpuify): the SDK's checks of CUDA driver API calls (cuda.h; link
 * -lcuda: cpuify's driver API library implements part of it, see docs/usage.md). */
#ifndef CPUIFY_SDK_CUTIL_INLINE_DRVAPI_H
#define CPUIFY_SDK_CUTIL_INLINE_DRVAPI_H

#include <cuda.h>
#include <cutil.h>

#define cutilDrvSafeCallNoSync(err) __cuSafeCallNoSync(err, __FILE__, __LINE__)
#define cutilDrvSafeCall(err) __cuSafeCall(err, __FILE__, __LINE__)
#define cutilDrvCtxSync() __cuCtxSync(__FILE__, __LINE__)
#define cutilDrvCheckMsg(msg) __cuCheckMsg(msg, __FILE__, __LINE__)

inline void __cuSafeCallNoSync(CUresult err, const char *file, const int line) {
    if (CUDA_SUCCESS != err) {
        char what[64];
        snprintf(what, sizeof what, "CUDA driver API error %d", (int)err);
        cpuify_cutil_fail(file, line, "cuSafeCallNoSync()", what);
    }
}
inline void __cuSafeCall(CUresult err, const char *file, const int line) {
    __cuSafeCallNoSync(err, file, line);
}
inline void __cuCtxSync(const char *file, const int line) {
    __cuSafeCallNoSync(cuCtxSynchronize(), file, line);
}
inline void __cuCheckMsg(const char *msg, const char *file, const int line) {
    CUresult err = cuCtxSynchronize();
    if (CUDA_SUCCESS != err) {
        char what[64];
        snprintf(what, sizeof what, "CUDA driver API error %d", (int)err);
        cpuify_cutil_fail(file, line, msg, what);
    }
}

#endif
