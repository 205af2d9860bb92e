// Shared by the test programs: stop with a message when a CUDA call fails.
#pragma once
#include <cstdio>
#include <cstdlib>
#define CHECK(call)                                                                   \
    do {                                                                              \
        cudaError_t err_ = (call);                                                    \
        if (err_ != cudaSuccess) {                                                    \
            printf("CUDA error %s (%s) at %s:%d\n", cudaGetErrorName(err_),           \
                   cudaGetErrorString(err_), __FILE__, __LINE__);                     \
            exit(1);                                                                  \
        }                                                                             \
    } while (0)
