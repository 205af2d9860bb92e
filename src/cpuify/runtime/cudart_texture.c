/* cpuify's CUDA runtime: CUDA arrays (cudaMallocArray, cudaMalloc3DArray and their copies),
 * texture and surface objects, and the texture limits of the device properties.
 *
 * A texture or surface object handle is the address of the cpuify_texdesc (cpuify_tex.h)
 * that device code samples through; cpuify_tex.c samples.  Built into libcpuify_cudart.a
 * with cudart.c, whose error and copy helpers it uses (cudart_internal.h).
 */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cudart_internal.h"

#define CHECK_STICKY()                                   \
    do {                                                 \
        cudaError_t st_ = cpuify_cudart_sticky();        \
        if (st_ != cudaSuccess) return st_;              \
    } while (0)

/* The texture and surface sizes a compute capability 7.5 GPU reports (cpuify samples any
 * size; mipmaps and cube maps, which it does not implement, report 0). */
void cpuify_cudart_texture_limits(struct cudaDeviceProp *p) {
    p->maxTexture1D = 131072;
    p->maxTexture2D[0] = 131072; p->maxTexture2D[1] = 65536;
    p->maxTexture2DLinear[0] = 131072; p->maxTexture2DLinear[1] = 65000;
    p->maxTexture2DLinear[2] = 2097120;
    p->maxTexture2DGather[0] = 32768; p->maxTexture2DGather[1] = 32768;
    p->maxTexture3D[0] = p->maxTexture3D[1] = p->maxTexture3D[2] = 16384;
    p->maxTexture3DAlt[0] = 8192; p->maxTexture3DAlt[1] = 8192; p->maxTexture3DAlt[2] = 32768;
    p->maxTexture1DLayered[0] = 32768; p->maxTexture1DLayered[1] = 2048;
    p->maxTexture2DLayered[0] = 32768; p->maxTexture2DLayered[1] = 32768;
    p->maxTexture2DLayered[2] = 2048;
    p->maxSurface1D = 32768;
    p->maxSurface2D[0] = 131072; p->maxSurface2D[1] = 65536;
    p->maxSurface3D[0] = p->maxSurface3D[1] = p->maxSurface3D[2] = 16384;
    p->maxSurface1DLayered[0] = 32768; p->maxSurface1DLayered[1] = 2048;
    p->maxSurface2DLayered[0] = 32768; p->maxSurface2DLayered[1] = 32768;
    p->maxSurface2DLayered[2] = 2048;
}

/* cudaDeviceGetAttribute's texture and surface sizes; -1 for another attribute */
int cpuify_cudart_texture_attribute(enum cudaDeviceAttr attr, const struct cudaDeviceProp *p) {
    switch (attr) {
    case cudaDevAttrMaxTexture1DWidth: return p->maxTexture1D;
    case cudaDevAttrMaxTexture1DLinearWidth: return 1 << 28;
    case cudaDevAttrMaxTexture2DWidth: return p->maxTexture2D[0];
    case cudaDevAttrMaxTexture2DHeight: return p->maxTexture2D[1];
    case cudaDevAttrMaxTexture2DLinearWidth: return p->maxTexture2DLinear[0];
    case cudaDevAttrMaxTexture2DLinearHeight: return p->maxTexture2DLinear[1];
    case cudaDevAttrMaxTexture2DLinearPitch: return p->maxTexture2DLinear[2];
    case cudaDevAttrMaxTexture2DGatherWidth: return p->maxTexture2DGather[0];
    case cudaDevAttrMaxTexture2DGatherHeight: return p->maxTexture2DGather[1];
    case cudaDevAttrMaxTexture3DWidth: return p->maxTexture3D[0];
    case cudaDevAttrMaxTexture3DHeight: return p->maxTexture3D[1];
    case cudaDevAttrMaxTexture3DDepth: return p->maxTexture3D[2];
    case cudaDevAttrMaxTexture3DWidthAlt: return p->maxTexture3DAlt[0];
    case cudaDevAttrMaxTexture3DHeightAlt: return p->maxTexture3DAlt[1];
    case cudaDevAttrMaxTexture3DDepthAlt: return p->maxTexture3DAlt[2];
    case cudaDevAttrMaxTexture1DLayeredWidth: return p->maxTexture1DLayered[0];
    case cudaDevAttrMaxTexture1DLayeredLayers: return p->maxTexture1DLayered[1];
    case cudaDevAttrMaxTexture2DLayeredWidth: return p->maxTexture2DLayered[0];
    case cudaDevAttrMaxTexture2DLayeredHeight: return p->maxTexture2DLayered[1];
    case cudaDevAttrMaxTexture2DLayeredLayers: return p->maxTexture2DLayered[2];
    case cudaDevAttrMaxSurface1DWidth: return p->maxSurface1D;
    case cudaDevAttrMaxSurface2DWidth: return p->maxSurface2D[0];
    case cudaDevAttrMaxSurface2DHeight: return p->maxSurface2D[1];
    case cudaDevAttrMaxSurface3DWidth: return p->maxSurface3D[0];
    case cudaDevAttrMaxSurface3DHeight: return p->maxSurface3D[1];
    case cudaDevAttrMaxSurface3DDepth: return p->maxSurface3D[2];
    case cudaDevAttrMaxSurface1DLayeredWidth: return p->maxSurface1DLayered[0];
    case cudaDevAttrMaxSurface1DLayeredLayers: return p->maxSurface1DLayered[1];
    case cudaDevAttrMaxSurface2DLayeredWidth: return p->maxSurface2DLayered[0];
    case cudaDevAttrMaxSurface2DLayeredHeight: return p->maxSurface2DLayered[1];
    case cudaDevAttrMaxSurface2DLayeredLayers: return p->maxSurface2DLayered[2];
    case cudaDevAttrSurfaceAlignment: return (int)p->surfaceAlignment;
    case cudaDevAttrTexturePitchAlignment: return (int)p->texturePitchAlignment;
    default: return -1;
    }
}

/* A CUDA array is rows of elements without padding: pitch = width * element size; layers
 * (and the slices of a 3D array) follow each other. */
#define ARRAY_MAGIC 0x59525241u /* "ARRY" */

struct cudaArray {
    uint32_t magic;
    struct cudaChannelFormatDesc desc;
    struct cudaExtent extent;    /* as allocated: height 0 for 1D, depth 0 for 2D */
    unsigned int flags;
    size_t esize, pitch, rows, slices, slice;
    char *data;
};

struct cudaChannelFormatDesc cudaCreateChannelDesc(int x, int y, int z, int w,
                                                   enum cudaChannelFormatKind f) {
    struct cudaChannelFormatDesc d = {x, y, z, w, f};
    return d;
}

/* Channels, bits per channel and kind of a format cpuify samples; 0 when it is not one
 * (channels of different widths, block-compressed or video formats). */
static int channel_format(const struct cudaChannelFormatDesc *d, uint32_t *bits, uint32_t *kind) {
    const int b[4] = {d->x, d->y, d->z, d->w};
    int n = 0;
    while (n < 4 && b[n] > 0) n++;
    for (int i = n; i < 4; i++)
        if (b[i] != 0) return 0;
    if (n == 0 || n == 3) return 0; /* no 3-channel formats, as on a GPU */
    for (int i = 1; i < n; i++)
        if (b[i] != b[0]) return 0;
    if (b[0] != 8 && b[0] != 16 && b[0] != 32) return 0;
    switch (d->f) {
    case cudaChannelFormatKindSigned: *kind = CPUIFY_FMT_SIGNED; break;
    case cudaChannelFormatKindUnsigned: *kind = CPUIFY_FMT_UNSIGNED; break;
    case cudaChannelFormatKindFloat:
        if (b[0] == 8) return 0;
        *kind = CPUIFY_FMT_FLOAT;
        break;
    default: return 0;
    }
    *bits = (uint32_t)b[0];
    return n;
}

static int array_ok(cudaArray_const_t a) { return a && a->magic == ARRAY_MAGIC; }

static cudaError_t new_array(cudaArray_t *array, const struct cudaChannelFormatDesc *desc,
                             struct cudaExtent e, unsigned int flags) {
    CHECK_STICKY();
    uint32_t bits, kind;
    if (!array || !desc) return cpuify_cudart_fail(cudaErrorInvalidValue);
    int n = channel_format(desc, &bits, &kind);
    if (!n) return cpuify_cudart_fail(cudaErrorInvalidChannelDescriptor);
    if (flags & cudaArrayCubemap)
        return cpuify_cudart_not_supported("cube map CUDA arrays");
    if (flags & ~(unsigned)(cudaArrayLayered | cudaArraySurfaceLoadStore | cudaArrayTextureGather |
                            cudaArrayDefault))
        return cpuify_cudart_not_supported("CUDA arrays with these flags");
    if (e.width == 0 || (e.depth && !e.height && !(flags & cudaArrayLayered)))
        return cpuify_cudart_fail(cudaErrorInvalidValue);
    if ((flags & cudaArrayLayered) && e.depth == 0) return cpuify_cudart_fail(cudaErrorInvalidValue);
    struct cudaArray *a = calloc(1, sizeof *a);
    if (!a) return cpuify_cudart_fail(cudaErrorMemoryAllocation);
    a->magic = ARRAY_MAGIC;
    a->desc = *desc;
    a->extent = e;
    a->flags = flags;
    a->esize = (size_t)n * bits / 8;
    a->pitch = e.width * a->esize;
    a->rows = e.height ? e.height : 1;
    a->slices = e.depth ? e.depth : 1;
    a->slice = a->pitch * a->rows;
    size_t total = a->slice * a->slices;
    a->data = cpuify_cudart_alloc(total);
    if (!a->data) {
        free(a);
        return cpuify_cudart_fail(cudaErrorMemoryAllocation);
    }
    memset(a->data, 0, total);
    *array = a;
    return cudaSuccess;
}

cudaError_t cudaMallocArray(cudaArray_t *array, const struct cudaChannelFormatDesc *desc,
                            size_t width, size_t height, unsigned int flags) {
    if (flags & cudaArrayLayered) return cpuify_cudart_fail(cudaErrorInvalidValue);
    struct cudaExtent e = {width, height, 0};
    return new_array(array, desc, e, flags);
}

cudaError_t cudaMalloc3DArray(cudaArray_t *array, const struct cudaChannelFormatDesc *desc,
                              struct cudaExtent extent, unsigned int flags) {
    return new_array(array, desc, extent, flags);
}

cudaError_t cudaFreeArray(cudaArray_t array) {
    CHECK_STICKY();
    if (!array) return cudaSuccess;
    if (!array_ok(array)) return cpuify_cudart_fail(cudaErrorInvalidValue);
    array->magic = 0;
    free(array->data);
    free(array);
    return cudaSuccess;
}

cudaError_t cudaArrayGetInfo(struct cudaChannelFormatDesc *desc, struct cudaExtent *extent,
                             unsigned int *flags, cudaArray_t array) {
    if (!array_ok(array)) return cpuify_cudart_fail(cudaErrorInvalidValue);
    if (desc) *desc = array->desc;
    if (extent) *extent = array->extent;
    if (flags) *flags = array->flags;
    return cudaSuccess;
}

cudaError_t cudaGetChannelDesc(struct cudaChannelFormatDesc *desc, cudaArray_const_t array) {
    if (!array_ok(array) || !desc) return cpuify_cudart_fail(cudaErrorInvalidValue);
    *desc = array->desc;
    return cudaSuccess;
}

/* The pitched pointer over an array's memory and its element size (1 for no array, 0 for a
 * bad one). */
size_t cpuify_cudart_array_view(cudaArray_const_t a, struct cudaPitchedPtr *view) {
    if (!a) return 1;
    if (!array_ok(a)) return 0;
    view->ptr = a->data;
    view->pitch = a->pitch;
    view->xsize = a->pitch;
    view->ysize = a->rows;
    return a->esize;
}

/* whether a box of `bytes` (width in bytes) at pos (x in bytes) lies inside the array */
int cpuify_cudart_array_fits(cudaArray_const_t a, struct cudaPos pos, struct cudaExtent bytes) {
    if (!a) return 1;
    return pos.x + bytes.width <= a->pitch && pos.y + bytes.height <= a->rows &&
           pos.z + bytes.depth <= a->slices;
}

/* the address of byte column w, row h of layer 0 (checking that `width` x `height` bytes
 * from there lie inside the array), or NULL */
static char *array_at(cudaArray_const_t a, size_t w, size_t h, size_t width, size_t height) {
    if (!array_ok(a) || w + width > a->pitch || h + height > a->rows * a->slices) return NULL;
    return a->data + h * a->pitch + w;
}

cudaError_t cudaMemcpy2DToArray(cudaArray_t dst, size_t wOffset, size_t hOffset, const void *src,
                                size_t spitch, size_t width, size_t height,
                                enum cudaMemcpyKind kind) {
    char *d = array_at(dst, wOffset, hOffset, width, height);
    if (!d) return cpuify_cudart_fail(cudaErrorInvalidValue);
    return cpuify_cudart_copy2d(d, dst->pitch, src, spitch, width, height, kind, NULL,
                                CPUIFY_COPY_DST_ARRAY);
}

cudaError_t cudaMemcpy2DToArrayAsync(cudaArray_t dst, size_t wOffset, size_t hOffset,
                                     const void *src, size_t spitch, size_t width, size_t height,
                                     enum cudaMemcpyKind kind, cudaStream_t stream) {
    char *d = array_at(dst, wOffset, hOffset, width, height);
    if (!d) return cpuify_cudart_fail(cudaErrorInvalidValue);
    return cpuify_cudart_copy2d(d, dst->pitch, src, spitch, width, height, kind, stream,
                                CPUIFY_COPY_ASYNC | CPUIFY_COPY_DST_ARRAY);
}

cudaError_t cudaMemcpy2DFromArray(void *dst, size_t dpitch, cudaArray_const_t src, size_t wOffset,
                                  size_t hOffset, size_t width, size_t height,
                                  enum cudaMemcpyKind kind) {
    char *s = array_at(src, wOffset, hOffset, width, height);
    if (!s) return cpuify_cudart_fail(cudaErrorInvalidValue);
    return cpuify_cudart_copy2d(dst, dpitch, s, src->pitch, width, height, kind, NULL,
                                CPUIFY_COPY_SRC_ARRAY);
}

cudaError_t cudaMemcpy2DFromArrayAsync(void *dst, size_t dpitch, cudaArray_const_t src,
                                       size_t wOffset, size_t hOffset, size_t width,
                                       size_t height, enum cudaMemcpyKind kind,
                                       cudaStream_t stream) {
    char *s = array_at(src, wOffset, hOffset, width, height);
    if (!s) return cpuify_cudart_fail(cudaErrorInvalidValue);
    return cpuify_cudart_copy2d(dst, dpitch, s, src->pitch, width, height, kind, stream,
                                CPUIFY_COPY_ASYNC | CPUIFY_COPY_SRC_ARRAY);
}

cudaError_t cudaMemcpy2DArrayToArray(cudaArray_t dst, size_t wOffsetDst, size_t hOffsetDst,
                                     cudaArray_const_t src, size_t wOffsetSrc, size_t hOffsetSrc,
                                     size_t width, size_t height, enum cudaMemcpyKind kind) {
    char *d = array_at(dst, wOffsetDst, hOffsetDst, width, height);
    char *s = array_at(src, wOffsetSrc, hOffsetSrc, width, height);
    if (!d || !s) return cpuify_cudart_fail(cudaErrorInvalidValue);
    return cpuify_cudart_copy2d(d, dst->pitch, s, src->pitch, width, height, kind, NULL,
                                CPUIFY_COPY_DST_ARRAY | CPUIFY_COPY_SRC_ARRAY);
}

/* The legacy 1D copies: `count` bytes from (wOffset, hOffset) on, row after row. */
static char *array_run(cudaArray_const_t a, size_t w, size_t h, size_t count) {
    if (!array_ok(a) || w >= a->pitch || h >= a->rows * a->slices) return NULL;
    size_t start = h * a->pitch + w;
    if (count > a->pitch * a->rows * a->slices - start) return NULL;
    return a->data + start;
}

cudaError_t cudaMemcpyToArray(cudaArray_t dst, size_t wOffset, size_t hOffset, const void *src,
                              size_t count, enum cudaMemcpyKind kind) {
    char *d = array_run(dst, wOffset, hOffset, count);
    if (!d) return cpuify_cudart_fail(cudaErrorInvalidValue);
    return cpuify_cudart_copy1d(d, src, count, kind, NULL, CPUIFY_COPY_DST_ARRAY);
}

cudaError_t cudaMemcpyToArrayAsync(cudaArray_t dst, size_t wOffset, size_t hOffset,
                                   const void *src, size_t count, enum cudaMemcpyKind kind,
                                   cudaStream_t stream) {
    char *d = array_run(dst, wOffset, hOffset, count);
    if (!d) return cpuify_cudart_fail(cudaErrorInvalidValue);
    return cpuify_cudart_copy1d(d, src, count, kind, stream,
                                CPUIFY_COPY_ASYNC | CPUIFY_COPY_DST_ARRAY);
}

cudaError_t cudaMemcpyFromArray(void *dst, cudaArray_const_t src, size_t wOffset, size_t hOffset,
                                size_t count, enum cudaMemcpyKind kind) {
    char *s = array_run(src, wOffset, hOffset, count);
    if (!s) return cpuify_cudart_fail(cudaErrorInvalidValue);
    return cpuify_cudart_copy1d(dst, s, count, kind, NULL, CPUIFY_COPY_SRC_ARRAY);
}

cudaError_t cudaMemcpyFromArrayAsync(void *dst, cudaArray_const_t src, size_t wOffset,
                                     size_t hOffset, size_t count, enum cudaMemcpyKind kind,
                                     cudaStream_t stream) {
    char *s = array_run(src, wOffset, hOffset, count);
    if (!s) return cpuify_cudart_fail(cudaErrorInvalidValue);
    return cpuify_cudart_copy1d(dst, s, count, kind, stream,
                                CPUIFY_COPY_ASYNC | CPUIFY_COPY_SRC_ARRAY);
}

cudaError_t cudaMemcpyArrayToArray(cudaArray_t dst, size_t wOffsetDst, size_t hOffsetDst,
                                   cudaArray_const_t src, size_t wOffsetSrc, size_t hOffsetSrc,
                                   size_t count, enum cudaMemcpyKind kind) {
    char *d = array_run(dst, wOffsetDst, hOffsetDst, count);
    char *s = array_run(src, wOffsetSrc, hOffsetSrc, count);
    if (!d || !s) return cpuify_cudart_fail(cudaErrorInvalidValue);
    return cpuify_cudart_copy1d(d, s, count, kind, NULL,
                                CPUIFY_COPY_DST_ARRAY | CPUIFY_COPY_SRC_ARRAY);
}

/* A texture or surface object: the descriptor device code samples through (first, so the
 * handle is its address) and the descriptions it was created from. */
typedef struct {
    cpuify_texdesc d;
    struct cudaResourceDesc res;
    struct cudaTextureDesc tex;
} texture_object;

/* Fills the resource part of a descriptor; returns the error for a resource cpuify cannot
 * sample. */
static cudaError_t describe_resource(cpuify_texdesc *d, const struct cudaResourceDesc *r) {
    const struct cudaChannelFormatDesc *fmt;
    d->width = d->height = d->depth = d->layers = 1;
    switch (r->resType) {
    case cudaResourceTypeArray: {
        cudaArray_const_t a = r->res.array.array;
        if (!array_ok(a)) return cpuify_cudart_fail(cudaErrorInvalidResourceHandle);
        fmt = &a->desc;
        d->width = a->extent.width;
        d->pitch = a->pitch;
        d->slice = a->slice;
        d->data = (uint64_t)(uintptr_t)a->data;
        if (a->flags & cudaArrayLayered) {
            d->layered = 1;
            d->layers = a->extent.depth;
            d->dims = a->extent.height ? 2 : 1;
            d->height = a->rows;
        } else {
            d->dims = a->extent.depth ? 3 : a->extent.height ? 2 : 1;
            d->height = a->rows;
            d->depth = a->slices;
        }
        break;
    }
    case cudaResourceTypeLinear:
        fmt = &r->res.linear.desc;
        if (!r->res.linear.devPtr) return cpuify_cudart_fail(cudaErrorInvalidValue);
        d->dims = 1;
        d->linear = 1;
        d->data = (uint64_t)(uintptr_t)r->res.linear.devPtr;
        break;
    case cudaResourceTypePitch2D:
        fmt = &r->res.pitch2D.desc;
        if (!r->res.pitch2D.devPtr) return cpuify_cudart_fail(cudaErrorInvalidValue);
        d->dims = 2;
        d->width = r->res.pitch2D.width;
        d->height = r->res.pitch2D.height;
        d->pitch = r->res.pitch2D.pitchInBytes;
        d->data = (uint64_t)(uintptr_t)r->res.pitch2D.devPtr;
        break;
    case cudaResourceTypeMipmappedArray:
        return cpuify_cudart_not_supported("textures over mipmapped arrays");
    default:
        return cpuify_cudart_fail(cudaErrorInvalidValue);
    }
    uint32_t bits = 0, kind = 0;
    int n = channel_format(fmt, &bits, &kind);
    if (!n) return cpuify_cudart_fail(cudaErrorInvalidChannelDescriptor);
    d->channels = (uint32_t)n;
    d->bits = bits;
    d->kind = kind;
    size_t esize = (size_t)n * bits / 8;
    if (r->resType == cudaResourceTypeLinear) {
        /* a size past the end of the allocation (legacy cudaBindTexture's default is
         * UINT_MAX) ends at the allocation's end: fetches beyond it read zeros */
        size_t bytes = r->res.linear.sizeInBytes;
        size_t left = cpuify_cudart_bytes_left(r->res.linear.devPtr);
        if (bytes > left) bytes = left;
        d->width = bytes / esize;
        d->pitch = d->width * esize;
    }
    if (r->resType == cudaResourceTypePitch2D && d->pitch < d->width * esize)
        return cpuify_cudart_fail(cudaErrorInvalidValue);
    if (d->width == 0) return cpuify_cudart_fail(cudaErrorInvalidValue);
    return cudaSuccess;
}

cudaError_t cudaCreateTextureObject(cudaTextureObject_t *pTexObject,
                                    const struct cudaResourceDesc *pResDesc,
                                    const struct cudaTextureDesc *pTexDesc,
                                    const struct cudaResourceViewDesc *pResViewDesc) {
    CHECK_STICKY();
    if (!pTexObject || !pResDesc || !pTexDesc) return cpuify_cudart_fail(cudaErrorInvalidValue);
    if (pResViewDesc) return cpuify_cudart_not_supported("cudaCreateTextureObject with a resource view");
    if (pTexDesc->sRGB) return cpuify_cudart_not_supported("cudaCreateTextureObject with sRGB");
    texture_object *o = calloc(1, sizeof *o);
    if (!o) return cpuify_cudart_fail(cudaErrorMemoryAllocation);
    cudaError_t e = describe_resource(&o->d, pResDesc);
    if (e) {
        free(o);
        return e;
    }
    cpuify_texdesc *d = &o->d;
    d->magic = CPUIFY_TEX_MAGIC;
    d->filter = pTexDesc->filterMode == cudaFilterModeLinear;
    d->normalized = pTexDesc->normalizedCoords != 0;
    d->read_mode = pTexDesc->readMode == cudaReadModeNormalizedFloat;
    for (int i = 0; i < 3; i++) {
        if ((unsigned)pTexDesc->addressMode[i] > cudaAddressModeBorder) {
            free(o);
            return cpuify_cudart_fail(cudaErrorInvalidValue);
        }
        d->address[i] = (uint32_t)pTexDesc->addressMode[i];
    }
    for (int i = 0; i < 4; i++) d->border[i] = pTexDesc->borderColor[i];
    /* linear filtering interpolates floats: a float format or normalized integer reads */
    int float_result = d->kind == CPUIFY_FMT_FLOAT || (d->read_mode && d->bits < 32);
    if (d->filter && !float_result) {
        free(o);
        return cpuify_cudart_fail(cudaErrorInvalidValue);
    }
    o->res = *pResDesc;
    o->tex = *pTexDesc;
    *pTexObject = (cudaTextureObject_t)(uintptr_t)o;
    return cudaSuccess;
}

static texture_object *object_of(unsigned long long handle, uint32_t magic) {
    texture_object *o = (texture_object *)(uintptr_t)handle;
    return o && o->d.magic == magic ? o : NULL;
}

/* destroys the texture or surface object `handle` (0: nothing to do) */
static cudaError_t destroy_object(unsigned long long handle, uint32_t magic) {
    if (!handle) return cudaSuccess;
    texture_object *o = object_of(handle, magic);
    if (!o) return cpuify_cudart_fail(cudaErrorInvalidValue);
    o->d.magic = 0;
    free(o);
    return cudaSuccess;
}

cudaError_t cudaDestroyTextureObject(cudaTextureObject_t texObject) {
    CHECK_STICKY();
    return destroy_object(texObject, CPUIFY_TEX_MAGIC);
}

/* the resource description of the texture or surface object `handle` */
static cudaError_t resource_desc_of(unsigned long long handle, uint32_t magic,
                                    struct cudaResourceDesc *pResDesc) {
    texture_object *o = object_of(handle, magic);
    if (!o || !pResDesc) return cpuify_cudart_fail(cudaErrorInvalidValue);
    *pResDesc = o->res;
    return cudaSuccess;
}

cudaError_t cudaGetTextureObjectResourceDesc(struct cudaResourceDesc *pResDesc,
                                             cudaTextureObject_t texObject) {
    return resource_desc_of(texObject, CPUIFY_TEX_MAGIC, pResDesc);
}

cudaError_t cudaGetTextureObjectTextureDesc(struct cudaTextureDesc *pTexDesc,
                                            cudaTextureObject_t texObject) {
    texture_object *o = object_of(texObject, CPUIFY_TEX_MAGIC);
    if (!o || !pTexDesc) return cpuify_cudart_fail(cudaErrorInvalidValue);
    *pTexDesc = o->tex;
    return cudaSuccess;
}

cudaError_t cudaCreateSurfaceObject(cudaSurfaceObject_t *pSurfObject,
                                    const struct cudaResourceDesc *pResDesc) {
    CHECK_STICKY();
    if (!pSurfObject || !pResDesc) return cpuify_cudart_fail(cudaErrorInvalidValue);
    if (pResDesc->resType != cudaResourceTypeArray) return cpuify_cudart_fail(cudaErrorInvalidValue);
    texture_object *o = calloc(1, sizeof *o);
    if (!o) return cpuify_cudart_fail(cudaErrorMemoryAllocation);
    cudaError_t e = describe_resource(&o->d, pResDesc);
    if (e) {
        free(o);
        return e;
    }
    o->d.magic = CPUIFY_SURF_MAGIC;
    o->res = *pResDesc;
    *pSurfObject = (cudaSurfaceObject_t)(uintptr_t)o;
    return cudaSuccess;
}

cudaError_t cudaDestroySurfaceObject(cudaSurfaceObject_t surfObject) {
    CHECK_STICKY();
    return destroy_object(surfObject, CPUIFY_SURF_MAGIC);
}

cudaError_t cudaGetSurfaceObjectResourceDesc(struct cudaResourceDesc *pResDesc,
                                             cudaSurfaceObject_t surfObject) {
    return resource_desc_of(surfObject, CPUIFY_SURF_MAGIC, pResDesc);
}
