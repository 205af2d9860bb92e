/* cpuify: legacy CUDA texture references on top of texture objects.
 *
 * CUDA 12 removed texture references (`texture<T, dim, readMode>` variables, tex1Dfetch /
 * tex1D / tex2D / tex3D on them, cudaBindTexture / cudaBindTexture2D /
 * cudaBindTextureToArray / cudaUnbindTexture), so code written for them no longer compiles
 * with current nvcc.  `cpuify nvcc` pre-includes this header when a source file uses them
 * (CPUIFY_TEXTURE_COMPAT=1 forces it, =0 turns it off).
 *
 * A texture reference becomes a variable that lives on both sides (__host__ __device__:
 * the host copy holds the settings a program assigns, `tex.filterMode = ...`; the device
 * copy the handle of the texture object the bind functions create).  Binding creates a
 * texture object from the reference's settings and writes its handle to the device copy
 * through the symbol (cudaMemcpyToSymbol); the fetch functions forward to the texture
 * object functions of texture_indirect_functions.h.
 *
 * Differences from CUDA 11's texture references: none visible to programs that use the
 * functions above (also in their `textureReference *` pointer forms) and tex2Dgather;
 * cudaGetTextureReference and cube maps are not provided.  The macro `texture` is defined,
 * so the identifier cannot be used otherwise in a file that includes this header.
 *
 * Surface references (`surface<void, dim>`, cudaBindSurfaceToArray, surf1D/2D/3D/1DLayered/
 * 2DLayered read and write, removed with them) are modelled the same way on surface objects;
 * cudaGetSurfaceReference and cube-map surfaces are not provided, and `surface` is a macro
 * too.
 */
#ifndef CPUIFY_TEXTURE_COMPAT_H
#define CPUIFY_TEXTURE_COMPAT_H

#include <cuda_runtime.h>

#if defined(__cplusplus)

#include <limits.h>
#include <stddef.h>
#include <string.h>

/* `__host__` on a variable: EDG warns that the attribute does not apply to variables, and
 * the variable gets both a host and a device copy, which is what a texture reference is */
#pragma nv_diag_suppress 1835
/* and the program reads and writes the settings of the host copy (warning 20091: "a
 * __device__ variable cannot be directly read in a host function") */
#pragma nv_diag_suppress 20091

/* the channel format of an element type, at compile time (cudaCreateChannelDesc<T> is not
 * constexpr) */
template <class T> struct cpuify_channel { static constexpr int bits = 0, n = 0;
    static constexpr cudaChannelFormatKind kind = cudaChannelFormatKindNone; };
#define CPUIFY_CHANNEL(T, B, N, K) template <> struct cpuify_channel<T> { \
    static constexpr int bits = B, n = N; static constexpr cudaChannelFormatKind kind = K; };
#define CPUIFY_CHANNELS(S, V, B, K) CPUIFY_CHANNEL(S, B, 1, K) CPUIFY_CHANNEL(V##1, B, 1, K) \
    CPUIFY_CHANNEL(V##2, B, 2, K) CPUIFY_CHANNEL(V##4, B, 4, K)
CPUIFY_CHANNEL(char, 8, 1, cudaChannelFormatKindSigned)
CPUIFY_CHANNELS(signed char, char, 8, cudaChannelFormatKindSigned)
CPUIFY_CHANNELS(unsigned char, uchar, 8, cudaChannelFormatKindUnsigned)
CPUIFY_CHANNELS(short, short, 16, cudaChannelFormatKindSigned)
CPUIFY_CHANNELS(unsigned short, ushort, 16, cudaChannelFormatKindUnsigned)
CPUIFY_CHANNELS(int, int, 32, cudaChannelFormatKindSigned)
CPUIFY_CHANNELS(unsigned int, uint, 32, cudaChannelFormatKindUnsigned)
CPUIFY_CHANNELS(float, float, 32, cudaChannelFormatKindFloat)
#undef CPUIFY_CHANNELS
#undef CPUIFY_CHANNEL

/* what a fetch returns: T, or floats of T's channel count for normalized-float reads */
template <class T, enum cudaTextureReadMode M> struct cpuify_texel { typedef T type; };
#define CPUIFY_NORMALIZED(S, V) \
    template <> struct cpuify_texel<S, cudaReadModeNormalizedFloat> { typedef float type; }; \
    template <> struct cpuify_texel<V##1, cudaReadModeNormalizedFloat> { typedef float1 type; }; \
    template <> struct cpuify_texel<V##2, cudaReadModeNormalizedFloat> { typedef float2 type; }; \
    template <> struct cpuify_texel<V##4, cudaReadModeNormalizedFloat> { typedef float4 type; };
template <> struct cpuify_texel<char, cudaReadModeNormalizedFloat> { typedef float type; };
CPUIFY_NORMALIZED(signed char, char)
CPUIFY_NORMALIZED(unsigned char, uchar)
CPUIFY_NORMALIZED(short, short)
CPUIFY_NORMALIZED(unsigned short, ushort)
#undef CPUIFY_NORMALIZED

template <class T, int dim = 1, enum cudaTextureReadMode mode = cudaReadModeElementType>
struct cpuify_texref {
    /* the fields of CUDA's textureReference a program sets before binding */
    int normalized;
    enum cudaTextureFilterMode filterMode;
    enum cudaTextureAddressMode addressMode[3];
    struct cudaChannelFormatDesc channelDesc;
    int sRGB;
    unsigned int maxAnisotropy;
    enum cudaTextureFilterMode mipmapFilterMode;
    float mipmapLevelBias, minMipmapLevelClamp, maxMipmapLevelClamp;
    int disableTrilinearOptimization;
    /* the bound texture object (0: not bound) */
    cudaTextureObject_t cpuify_object;

    typedef cpuify_texref self_type;
    static __host__ size_t object_offset() { return offsetof(self_type, cpuify_object); }

    __host__ __device__ explicit constexpr cpuify_texref(
        int norm = 0, enum cudaTextureFilterMode fMode = cudaFilterModePoint,
        enum cudaTextureAddressMode aMode = cudaAddressModeClamp)
        : normalized(norm), filterMode(fMode), addressMode{aMode, aMode, aMode},
          channelDesc{cpuify_channel<T>::bits, cpuify_channel<T>::n >= 2 ? cpuify_channel<T>::bits : 0,
                      cpuify_channel<T>::n >= 3 ? cpuify_channel<T>::bits : 0,
                      cpuify_channel<T>::n >= 4 ? cpuify_channel<T>::bits : 0, cpuify_channel<T>::kind},
          sRGB(0), maxAnisotropy(0), mipmapFilterMode(cudaFilterModePoint), mipmapLevelBias(0),
          minMipmapLevelClamp(0), maxMipmapLevelClamp(0), disableTrilinearOptimization(0),
          cpuify_object(0) {}

    __host__ __device__ constexpr cpuify_texref(int norm, enum cudaTextureFilterMode fMode,
                                                enum cudaTextureAddressMode aMode,
                                                struct cudaChannelFormatDesc desc)
        : normalized(norm), filterMode(fMode), addressMode{aMode, aMode, aMode}, channelDesc(desc),
          sRGB(0), maxAnisotropy(0), mipmapFilterMode(cudaFilterModePoint), mipmapLevelBias(0),
          minMipmapLevelClamp(0), maxMipmapLevelClamp(0), disableTrilinearOptimization(0),
          cpuify_object(0) {}
};

/* ---- host: binding ---------------------------------------------------------------------- */

/* nvcc gives the host copy of a device variable no initializer: a reference declared
 * `texture<float, 2> t(1, cudaFilterModeLinear)` starts with the default settings on the
 * host and the declared ones on the device.  A setting the host copy still has at its
 * default comes from the device copy; one the program assigned on the host wins. */
template <class T, int dim, enum cudaTextureReadMode M>
static __host__ void cpuify_declared_settings(cpuify_texref<T, dim, M> &t) {
    cpuify_texref<T, dim, M> declared, dflt;
    if (cudaMemcpyFromSymbol(&declared, t, sizeof declared) != cudaSuccess) {
        cudaGetLastError();
        return;
    }
    if (t.normalized == dflt.normalized) t.normalized = declared.normalized;
    if (t.filterMode == dflt.filterMode) t.filterMode = declared.filterMode;
    for (int i = 0; i < 3; i++)
        if (t.addressMode[i] == dflt.addressMode[i]) t.addressMode[i] = declared.addressMode[i];
    if (memcmp(&t.channelDesc, &dflt.channelDesc, sizeof t.channelDesc) == 0)
        t.channelDesc = declared.channelDesc;
}

template <class T, int dim, enum cudaTextureReadMode M>
static __host__ cudaError_t cpuify_bind_texture(const cpuify_texref<T, dim, M> &tex,
                                                const struct cudaResourceDesc &res) {
    cpuify_texref<T, dim, M> &t = const_cast<cpuify_texref<T, dim, M> &>(tex);
    cpuify_declared_settings(t);
    struct cudaTextureDesc td;
    memset(&td, 0, sizeof td);
    for (int i = 0; i < 3; i++) td.addressMode[i] = t.addressMode[i];
    td.filterMode = t.filterMode;
    td.readMode = M;
    td.normalizedCoords = t.normalized;
    td.sRGB = t.sRGB;
    if (t.cpuify_object) {
        cudaDestroyTextureObject(t.cpuify_object);
        t.cpuify_object = 0;
    }
    cudaTextureObject_t obj = 0;
    cudaError_t e = cudaCreateTextureObject(&obj, &res, &td, NULL);
    if (e != cudaSuccess) return e;
    t.cpuify_object = obj;
    return cudaMemcpyToSymbol(tex, &obj, sizeof obj, cpuify_texref<T, dim, M>::object_offset());
}

template <class T, int dim, enum cudaTextureReadMode M>
static __host__ cudaError_t cudaBindTexture(size_t *offset, const cpuify_texref<T, dim, M> &tex,
                                            const void *devPtr, const struct cudaChannelFormatDesc &desc,
                                            size_t size = UINT_MAX) {
    if (offset) *offset = 0;
    struct cudaResourceDesc res;
    memset(&res, 0, sizeof res);
    res.resType = cudaResourceTypeLinear;
    res.res.linear.devPtr = const_cast<void *>(devPtr);
    res.res.linear.desc = desc;
    res.res.linear.sizeInBytes = size;
    return cpuify_bind_texture(tex, res);
}

template <class T, int dim, enum cudaTextureReadMode M>
static __host__ cudaError_t cudaBindTexture(size_t *offset, const cpuify_texref<T, dim, M> &tex,
                                            const void *devPtr, size_t size = UINT_MAX) {
    cpuify_declared_settings(const_cast<cpuify_texref<T, dim, M> &>(tex));
    return cudaBindTexture(offset, tex, devPtr, tex.channelDesc, size);
}

template <class T, int dim, enum cudaTextureReadMode M>
static __host__ cudaError_t cudaBindTexture2D(size_t *offset, const cpuify_texref<T, dim, M> &tex,
                                              const void *devPtr, const struct cudaChannelFormatDesc &desc,
                                              size_t width, size_t height, size_t pitch) {
    if (offset) *offset = 0;
    struct cudaResourceDesc res;
    memset(&res, 0, sizeof res);
    res.resType = cudaResourceTypePitch2D;
    res.res.pitch2D.devPtr = const_cast<void *>(devPtr);
    res.res.pitch2D.desc = desc;
    res.res.pitch2D.width = width;
    res.res.pitch2D.height = height;
    res.res.pitch2D.pitchInBytes = pitch;
    return cpuify_bind_texture(tex, res);
}

template <class T, int dim, enum cudaTextureReadMode M>
static __host__ cudaError_t cudaBindTexture2D(size_t *offset, const cpuify_texref<T, dim, M> &tex,
                                              const void *devPtr, size_t width, size_t height,
                                              size_t pitch) {
    cpuify_declared_settings(const_cast<cpuify_texref<T, dim, M> &>(tex));
    return cudaBindTexture2D(offset, tex, devPtr, tex.channelDesc, width, height, pitch);
}

template <class T, int dim, enum cudaTextureReadMode M>
static __host__ cudaError_t cudaBindTextureToArray(const cpuify_texref<T, dim, M> &tex,
                                                   cudaArray_const_t array,
                                                   const struct cudaChannelFormatDesc &desc) {
    (void)desc; /* the array's own format, as CUDA reads it */
    struct cudaResourceDesc res;
    memset(&res, 0, sizeof res);
    res.resType = cudaResourceTypeArray;
    res.res.array.array = const_cast<cudaArray_t>(array);
    return cpuify_bind_texture(tex, res);
}

template <class T, int dim, enum cudaTextureReadMode M>
static __host__ cudaError_t cudaBindTextureToArray(const cpuify_texref<T, dim, M> &tex,
                                                   cudaArray_const_t array) {
    return cudaBindTextureToArray(tex, array, tex.channelDesc);
}

template <class T, int dim, enum cudaTextureReadMode M>
static __host__ cudaError_t cudaUnbindTexture(const cpuify_texref<T, dim, M> &tex) {
    cpuify_texref<T, dim, M> &t = const_cast<cpuify_texref<T, dim, M> &>(tex);
    if (!t.cpuify_object) return cudaSuccess;
    cudaError_t e = cudaDestroyTextureObject(t.cpuify_object);
    t.cpuify_object = 0;
    cudaTextureObject_t none = 0;
    cudaError_t e2 = cudaMemcpyToSymbol(tex, &none, sizeof none,
                                        cpuify_texref<T, dim, M>::object_offset());
    return e != cudaSuccess ? e : e2;
}

template <class T, int dim, enum cudaTextureReadMode M>
static __host__ cudaError_t cudaGetTextureAlignmentOffset(size_t *offset,
                                                          const cpuify_texref<T, dim, M> &tex) {
    (void)tex;
    if (offset) *offset = 0;
    return cudaSuccess;
}

/* the C-style forms, on pointers (CUDA's `const struct textureReference *`) */
template <class T, int dim, enum cudaTextureReadMode M>
static __host__ cudaError_t cudaBindTexture(size_t *offset, const cpuify_texref<T, dim, M> *tex,
                                            const void *devPtr, const struct cudaChannelFormatDesc *desc,
                                            size_t size = UINT_MAX) {
    if (!tex || !desc) return cudaErrorInvalidValue;
    return cudaBindTexture(offset, *tex, devPtr, *desc, size);
}

template <class T, int dim, enum cudaTextureReadMode M>
static __host__ cudaError_t cudaBindTexture2D(size_t *offset, const cpuify_texref<T, dim, M> *tex,
                                              const void *devPtr, const struct cudaChannelFormatDesc *desc,
                                              size_t width, size_t height, size_t pitch) {
    if (!tex || !desc) return cudaErrorInvalidValue;
    return cudaBindTexture2D(offset, *tex, devPtr, *desc, width, height, pitch);
}

template <class T, int dim, enum cudaTextureReadMode M>
static __host__ cudaError_t cudaBindTextureToArray(const cpuify_texref<T, dim, M> *tex,
                                                   cudaArray_const_t array,
                                                   const struct cudaChannelFormatDesc *desc) {
    if (!tex) return cudaErrorInvalidValue;
    return cudaBindTextureToArray(*tex, array);
}

template <class T, int dim, enum cudaTextureReadMode M>
static __host__ cudaError_t cudaUnbindTexture(const cpuify_texref<T, dim, M> *tex) {
    if (!tex) return cudaErrorInvalidValue;
    return cudaUnbindTexture(*tex);
}

/* ---- device: fetches ---------------------------------------------------------------------- */

#define CPUIFY_TEXEL typename cpuify_texel<T, M>::type

template <class T, int dim, enum cudaTextureReadMode M>
static __device__ __forceinline__ CPUIFY_TEXEL tex1Dfetch(const cpuify_texref<T, dim, M> &t, int x) {
    return tex1Dfetch<CPUIFY_TEXEL>(t.cpuify_object, x);
}

template <class T, int dim, enum cudaTextureReadMode M>
static __device__ __forceinline__ CPUIFY_TEXEL tex1D(const cpuify_texref<T, dim, M> &t, float x) {
    return tex1D<CPUIFY_TEXEL>(t.cpuify_object, x);
}

template <class T, int dim, enum cudaTextureReadMode M>
static __device__ __forceinline__ CPUIFY_TEXEL tex2D(const cpuify_texref<T, dim, M> &t, float x, float y) {
    return tex2D<CPUIFY_TEXEL>(t.cpuify_object, x, y);
}

template <class T, int dim, enum cudaTextureReadMode M>
static __device__ __forceinline__ CPUIFY_TEXEL tex3D(const cpuify_texref<T, dim, M> &t, float x, float y,
                                                     float z) {
    return tex3D<CPUIFY_TEXEL>(t.cpuify_object, x, y, z);
}

template <class T, int dim, enum cudaTextureReadMode M>
static __device__ __forceinline__ CPUIFY_TEXEL tex1DLayered(const cpuify_texref<T, dim, M> &t, float x,
                                                            int layer) {
    return tex1DLayered<CPUIFY_TEXEL>(t.cpuify_object, x, layer);
}

template <class T, int dim, enum cudaTextureReadMode M>
static __device__ __forceinline__ CPUIFY_TEXEL tex2DLayered(const cpuify_texref<T, dim, M> &t, float x,
                                                            float y, int layer) {
    return tex2DLayered<CPUIFY_TEXEL>(t.cpuify_object, x, y, layer);
}

/* tex2Dgather: four texels' component `comp`, as a 4-vector of T's channel type (floats for
 * normalized-float reads) */
template <class T, enum cudaTextureReadMode M> struct cpuify_gathered { typedef float4 type; };
#define CPUIFY_GATHERED(S, V) \
    template <> struct cpuify_gathered<S, cudaReadModeElementType> { typedef V##4 type; }; \
    template <> struct cpuify_gathered<V##1, cudaReadModeElementType> { typedef V##4 type; }; \
    template <> struct cpuify_gathered<V##2, cudaReadModeElementType> { typedef V##4 type; }; \
    template <> struct cpuify_gathered<V##4, cudaReadModeElementType> { typedef V##4 type; };
template <> struct cpuify_gathered<char, cudaReadModeElementType> { typedef char4 type; };
CPUIFY_GATHERED(signed char, char)
CPUIFY_GATHERED(unsigned char, uchar)
CPUIFY_GATHERED(short, short)
CPUIFY_GATHERED(unsigned short, ushort)
CPUIFY_GATHERED(int, int)
CPUIFY_GATHERED(unsigned int, uint)
#undef CPUIFY_GATHERED

template <class T, int dim, enum cudaTextureReadMode M>
static __device__ __forceinline__ typename cpuify_gathered<T, M>::type
tex2Dgather(const cpuify_texref<T, dim, M> &t, float x, float y, int comp = 0) {
    return tex2Dgather<typename cpuify_gathered<T, M>::type>(t.cpuify_object, x, y, comp);
}

#undef CPUIFY_TEXEL

/* ---- surface references ------------------------------------------------------------------ */

/* `surface<void, dim> s;` (dim: cudaSurfaceType1D, 2D, 3D, 1DLayered, 2DLayered), bound with
 * cudaBindSurfaceToArray and read and written with surf*Dread / surf*Dwrite: a variable on
 * both sides holding the handle of a surface object, as texture references above */
template <class T = void, int dim = 1>
struct cpuify_surfref {
    struct cudaChannelFormatDesc channelDesc;
    cudaSurfaceObject_t cpuify_object;

    typedef cpuify_surfref self_type;
    static __host__ size_t object_offset() { return offsetof(self_type, cpuify_object); }

    __host__ __device__ constexpr cpuify_surfref()
        : channelDesc{0, 0, 0, 0, cudaChannelFormatKindNone}, cpuify_object(0) {}
};

template <class T, int dim>
static __host__ cudaError_t cudaBindSurfaceToArray(const cpuify_surfref<T, dim> &surf,
                                                   cudaArray_const_t array,
                                                   const struct cudaChannelFormatDesc &desc) {
    cpuify_surfref<T, dim> &s = const_cast<cpuify_surfref<T, dim> &>(surf);
    struct cudaResourceDesc res;
    memset(&res, 0, sizeof res);
    res.resType = cudaResourceTypeArray;
    res.res.array.array = const_cast<cudaArray_t>(array);
    if (s.cpuify_object) {
        cudaDestroySurfaceObject(s.cpuify_object);
        s.cpuify_object = 0;
    }
    cudaSurfaceObject_t obj = 0;
    cudaError_t e = cudaCreateSurfaceObject(&obj, &res);
    if (e != cudaSuccess) return e;
    s.cpuify_object = obj;
    s.channelDesc = desc;
    return cudaMemcpyToSymbol(surf, &obj, sizeof obj, cpuify_surfref<T, dim>::object_offset());
}

template <class T, int dim>
static __host__ cudaError_t cudaBindSurfaceToArray(const cpuify_surfref<T, dim> &surf,
                                                   cudaArray_const_t array) {
    struct cudaChannelFormatDesc desc;
    cudaError_t e = cudaGetChannelDesc(&desc, array);
    if (e != cudaSuccess) return e;
    return cudaBindSurfaceToArray(surf, array, desc);
}

/* the C-style form, on a pointer (CUDA's `const struct surfaceReference *`) */
template <class T, int dim>
static __host__ cudaError_t cudaBindSurfaceToArray(const cpuify_surfref<T, dim> *surf,
                                                   cudaArray_const_t array,
                                                   const struct cudaChannelFormatDesc *desc) {
    if (!surf || !desc) return cudaErrorInvalidValue;
    return cudaBindSurfaceToArray(*surf, array, *desc);
}

/* reads into *res or returning T (surf2Dread<float>(s, x, y)), writes; x in bytes */
#define CPUIFY_SURF_FUNCTIONS(NAME, PARAMS, ARGS)                                                   \
    template <class T, class S, int dim>                                                            \
    static __device__ __forceinline__ void NAME##read(T *res, const cpuify_surfref<S, dim> &s,      \
            PARAMS, cudaSurfaceBoundaryMode mode = cudaBoundaryModeTrap) {                          \
        NAME##read(res, s.cpuify_object, ARGS, mode);                                               \
    }                                                                                               \
    template <class T, class S, int dim>                                                            \
    static __device__ __forceinline__ T NAME##read(const cpuify_surfref<S, dim> &s, PARAMS,         \
            cudaSurfaceBoundaryMode mode = cudaBoundaryModeTrap) {                                  \
        return NAME##read<T>(s.cpuify_object, ARGS, mode);                                          \
    }                                                                                               \
    template <class T, class S, int dim>                                                            \
    static __device__ __forceinline__ void NAME##write(T val, const cpuify_surfref<S, dim> &s,      \
            PARAMS, cudaSurfaceBoundaryMode mode = cudaBoundaryModeTrap) {                          \
        NAME##write(val, s.cpuify_object, ARGS, mode);                                              \
    }
#define CPUIFY_COMMA ,
CPUIFY_SURF_FUNCTIONS(surf1D, int x, x)
CPUIFY_SURF_FUNCTIONS(surf2D, int x CPUIFY_COMMA int y, x CPUIFY_COMMA y)
CPUIFY_SURF_FUNCTIONS(surf3D, int x CPUIFY_COMMA int y CPUIFY_COMMA int z, x CPUIFY_COMMA y CPUIFY_COMMA z)
CPUIFY_SURF_FUNCTIONS(surf1DLayered, int x CPUIFY_COMMA int layer, x CPUIFY_COMMA layer)
CPUIFY_SURF_FUNCTIONS(surf2DLayered, int x CPUIFY_COMMA int y CPUIFY_COMMA int layer,
                      x CPUIFY_COMMA y CPUIFY_COMMA layer)
#undef CPUIFY_COMMA
#undef CPUIFY_SURF_FUNCTIONS

/* `surface<void, 2> s;` declares a surface reference */
#define surface __host__ __device__ cpuify_surfref

/* `texture<float, 1, cudaReadModeElementType> tex;` declares a texture reference */
#define texture __host__ __device__ cpuify_texref

#endif /* __cplusplus */
#endif /* CPUIFY_TEXTURE_COMPAT_H */
