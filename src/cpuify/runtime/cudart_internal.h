/* cpuify's CUDA runtime: what its source files share (not an interface of the library).
 * cudart.c holds the core (errors, memory, copies, launches); cudart_texture.c the CUDA
 * arrays and texture/surface objects. */
#ifndef CPUIFY_CUDART_INTERNAL_H
#define CPUIFY_CUDART_INTERNAL_H

#include <cuda_runtime_api.h>
#include <stddef.h>

#include "cpuify_cudart.h"
#include "cpuify_tex.h"

#define CPUIFY_INTERNAL __attribute__((visibility("hidden")))

/* cudart.c: record `e` as the thread's last error and return it; the sticky error (a kernel
 * failed) or cudaSuccess; 256-byte aligned memory; the bytes from p to the end of the
 * device/managed/pinned allocation it points into (SIZE_MAX for other memory); the checked
 * copies behind cudaMemcpy and cudaMemcpy2D. */
CPUIFY_INTERNAL cudaError_t cpuify_cudart_fail(cudaError_t e);
CPUIFY_INTERNAL cudaError_t cpuify_cudart_sticky(void);
CPUIFY_INTERNAL void *cpuify_cudart_alloc(size_t size);
CPUIFY_INTERNAL size_t cpuify_cudart_bytes_left(const void *p);
CPUIFY_INTERNAL cudaError_t cpuify_cudart_copy1d(void *dst, const void *src, size_t count,
                                                 enum cudaMemcpyKind kind, cudaStream_t s);
CPUIFY_INTERNAL cudaError_t cpuify_cudart_copy2d(void *dst, size_t dpitch, const void *src,
                                                 size_t spitch, size_t width, size_t height,
                                                 enum cudaMemcpyKind kind, cudaStream_t s);
CPUIFY_API cudaError_t cpuify_cudart_not_supported(const char *fn);

/* cudart_texture.c: a CUDA array as a pitched pointer (returns its element size; 1 for no
 * array, 0 for an invalid one); whether a box of `bytes` (width in bytes) at pos (x in
 * bytes) lies inside it; the texture limits of cudaGetDeviceProperties and the attributes
 * of cudaDeviceGetAttribute that name them (-1 for other attributes). */
CPUIFY_INTERNAL size_t cpuify_cudart_array_view(cudaArray_const_t a, struct cudaPitchedPtr *view);
CPUIFY_INTERNAL int cpuify_cudart_array_fits(cudaArray_const_t a, struct cudaPos pos,
                                             struct cudaExtent bytes);
CPUIFY_INTERNAL void cpuify_cudart_texture_limits(struct cudaDeviceProp *p);
CPUIFY_INTERNAL int cpuify_cudart_texture_attribute(enum cudaDeviceAttr attr,
                                                    const struct cudaDeviceProp *p);

#endif /* CPUIFY_CUDART_INTERNAL_H */
