/* cutil_inline_runtime.h (cpuify): the SDK's inline helpers for the CUDA runtime API, written
 * for cpuify from their documented behaviour.  A failed check prints "<file>(<line>) : ..."
 * with the CUDA error's text and exits with EXIT_FAILURE. */
#ifndef CPUIFY_SDK_CUTIL_INLINE_RUNTIME_H
#define CPUIFY_SDK_CUTIL_INLINE_RUNTIME_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cuda_runtime_api.h>
#include <cutil.h>

#define cutilSafeCallNoSync(err) __cudaSafeCallNoSync(err, __FILE__, __LINE__)
#define cutilSafeCall(err) __cudaSafeCall(err, __FILE__, __LINE__)
#define cutilSafeThreadSync() __cudaSafeThreadSync(__FILE__, __LINE__)
#define cutilCheckError(err) __cutilCheckError(err, __FILE__, __LINE__)
#define cutilCheckMsg(msg) __cutilGetLastError(msg, __FILE__, __LINE__)
#define cutilCheckMsgAndSync(msg) __cutilGetLastErrorAndSync(msg, __FILE__, __LINE__)
#define cutilSafeMalloc(mallocCall) __cutilSafeMalloc((mallocCall), __FILE__, __LINE__)
#define cutilCondition(val) __cutilCondition(val, __FILE__, __LINE__)
#define cutilExit(argc, argv) __cutilExit(argc, argv)

inline void __cudaSafeCallNoSync(cudaError_t err, const char *file, const int line) {
    if (cudaSuccess != err)
        cpuify_cutil_fail(file, line, "cudaSafeCallNoSync() Runtime API error", cudaGetErrorString(err));
}

inline void __cudaSafeCall(cudaError_t err, const char *file, const int line) {
    if (cudaSuccess != err)
        cpuify_cutil_fail(file, line, "cudaSafeCall() Runtime API error", cudaGetErrorString(err));
}

inline void __cudaSafeThreadSync(const char *file, const int line) {
    cudaError_t err = cudaDeviceSynchronize();
    if (cudaSuccess != err)
        cpuify_cutil_fail(file, line, "cudaDeviceSynchronize() Runtime API error", cudaGetErrorString(err));
}

inline void __cutilCheckError(CUTBoolean err, const char *file, const int line) {
    if (CUTTrue != err)
        cpuify_cutil_fail(file, line, "CUTIL CUDA error", "a cutil call returned CUTFalse");
}

inline void __cutilGetLastError(const char *errorMessage, const char *file, const int line) {
    cudaError_t err = cudaGetLastError();
#ifdef _DEBUG
    if (cudaSuccess == err)
        err = cudaDeviceSynchronize();
#endif
    if (cudaSuccess != err)
        cpuify_cutil_fail(file, line, errorMessage, cudaGetErrorString(err));
}

inline void __cutilGetLastErrorAndSync(const char *errorMessage, const char *file, const int line) {
    cudaError_t err = cudaGetLastError();
    if (cudaSuccess == err)
        err = cudaDeviceSynchronize();
    if (cudaSuccess != err)
        cpuify_cutil_fail(file, line, errorMessage, cudaGetErrorString(err));
}

inline void __cutilSafeMalloc(void *pointer, const char *file, const int line) {
    if (!pointer)
        cpuify_cutil_fail(file, line, "cutilSafeMalloc", "the allocation returned NULL");
}

inline void __cutilCondition(int val, const char *file, const int line) {
    if (CUTFalse == cutCheckCondition(val, file, line))
        exit(EXIT_FAILURE);
}

inline void __cutilExit(int argc, char **argv) {
    if (!cutCheckCmdLineFlag(argc, (const char **)argv, "noprompt") &&
        cpuify_cutil_stdin_is_terminal()) {
        printf("\nPress ENTER to exit...\n");
        fflush(stdout);
        fflush(stderr);
        getchar();
    }
}

/* the device with the most compute: cores x clock (cpuify reports one device) */
inline int cutGetMaxGflopsDeviceId() {
    int count = 0, best = 0;
    double best_rate = -1;
    cudaGetDeviceCount(&count);
    for (int dev = 0; dev < count; dev++) {
        cudaDeviceProp prop;
        if (cudaGetDeviceProperties(&prop, dev) != cudaSuccess)
            continue;
        double rate = (double)prop.multiProcessorCount * prop.clockRate;
        if (rate > best_rate) {
            best_rate = rate;
            best = dev;
        }
    }
    return best;
}

/* `--device=N` picks device N (checked); returns it */
inline int cutilDeviceInit(int ARGC, char **ARGV) {
    int count = 0;
    cutilSafeCallNoSync(cudaGetDeviceCount(&count));
    if (count == 0)
        cpuify_cutil_fail(__FILE__, __LINE__, "cutilDeviceInit", "no CUDA device");
    int dev = 0;
    cutGetCmdLineArgumenti(ARGC, (const char **)ARGV, "device", &dev);
    if (dev < 0 || dev >= count)
        cpuify_cutil_fail(__FILE__, __LINE__, "cutilDeviceInit", "--device= names no device");
    cudaDeviceProp prop;
    cutilSafeCallNoSync(cudaGetDeviceProperties(&prop, dev));
    printf("> Using CUDA device [%d]: %s\n", dev, prop.name);
    cutilSafeCall(cudaSetDevice(dev));
    return dev;
}

/* `--device=N` if given, else the fastest device; returns it */
inline int cutilChooseCudaDevice(int argc, char **argv) {
    if (cutCheckCmdLineFlag(argc, (const char **)argv, "device"))
        return cutilDeviceInit(argc, argv);
    int dev = cutGetMaxGflopsDeviceId();
    cutilSafeCallNoSync(cudaSetDevice(dev));
    return dev;
}

/* CUDA_VERSION-independent: whether the device's compute capability is at least major.minor */
inline bool cutilCudaCapabilities(int major_version, int minor_version) {
    cudaDeviceProp prop;
    int dev = 0;
    cutilSafeCall(cudaGetDevice(&dev));
    cutilSafeCall(cudaGetDeviceProperties(&prop, dev));
    if (prop.major > major_version || (prop.major == major_version && prop.minor >= minor_version))
        return true;
    printf("There is no device supporting CUDA compute capability %d.%d.\n", major_version,
           minor_version);
    return false;
}

#endif
