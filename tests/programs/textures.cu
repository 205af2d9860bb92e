// Texture and surface objects over CUDA arrays, linear and pitched memory: every filter,
// address mode, coordinate mode and read mode; tests/test_textures.py checks each printed
// value against a NumPy model of CUDA's sampling.
#include <cstdio>
#include <cstring>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include "check.h"

// the coordinates every sampling kernel reads: in range, between texels, out of range
#define NC 10
__constant__ float xs[NC] = {-1.3f, -0.2f, 0.1f, 0.37f, 1.5f, 2.71f, 4.0f, 4.9f, 5.6f, 7.2f};
__constant__ float ys[NC] = {0.5f, -0.7f, 1.25f, 3.9f, 2.0f, 0.3f, 4.6f, 1.8f, -2.2f, 3.1f};
__constant__ float zs[NC] = {0.5f, 1.2f, -0.4f, 2.6f, 1.9f, 0.0f, 3.3f, 1.05f, 0.75f, 2.2f};

__global__ void sample2d(cudaTextureObject_t t, float scale_x, float scale_y, float *out) {
    int i = threadIdx.x;
    out[i] = tex2D<float>(t, xs[i] * scale_x, ys[i] * scale_y);
}

__global__ void sample1d4(cudaTextureObject_t t, float4 *out) {
    int i = threadIdx.x;
    out[i] = tex1D<float4>(t, xs[i]);
}

__global__ void fetch_short2(cudaTextureObject_t t, int2 *out) {
    int i = threadIdx.x;
    short2 v = tex1Dfetch<short2>(t, i - 2);  // -2 .. 7 over 6 elements: zeros outside
    out[i] = make_int2(v.x, v.y);
}

__global__ void fetch_float(cudaTextureObject_t t, float *out) {
    int i = threadIdx.x;
    out[i] = tex1Dfetch<float>(t, i);
}

__global__ void sample3d(cudaTextureObject_t t, float *out) {
    int i = threadIdx.x;
    out[i] = tex3D<float>(t, xs[i], ys[i], zs[i]);
}

__global__ void sample_layered(cudaTextureObject_t t2, cudaTextureObject_t t1, float *out2, float *out1) {
    int i = threadIdx.x;
    out2[i] = tex2DLayered<float>(t2, xs[i], ys[i], i % 3);
    out1[i] = tex1DLayered<float>(t1, xs[i], i % 3);
}

__global__ void gather(cudaTextureObject_t t, float4 *out) {
    int i = threadIdx.x;
    out[i] = tex2Dgather<float4>(t, xs[i], ys[i], 0);
}

__global__ void sample_int(cudaTextureObject_t t, int *out) {
    int i = threadIdx.x;
    out[i] = tex2D<int>(t, xs[i], ys[i]);
}

__global__ void surface_ops(cudaSurfaceObject_t s) {
    int x = threadIdx.x, y = threadIdx.y;
    float v = surf2Dread<float>(s, x * 4, y);
    surf2Dwrite(v * 10.0f + 1.0f, s, x * 4, y);
}

// past the edges: zero mode reads 0 and drops the store, clamp mode reads the edge
__global__ void surface_bounds(cudaSurfaceObject_t s, float *out) {
    out[0] = surf2Dread<float>(s, 40 * 4, 1, cudaBoundaryModeZero);
    surf2Dwrite(-5.0f, s, 40 * 4, 1, cudaBoundaryModeZero);
    out[1] = surf2Dread<float>(s, 40 * 4, 1, cudaBoundaryModeClamp);
    out[2] = surf2Dread<float>(s, -8, 2, cudaBoundaryModeClamp);
    out[3] = surf2Dread<float>(s, 4, 9, cudaBoundaryModeClamp);
}

__global__ void surface_trap(cudaSurfaceObject_t s) {
    surf1Dwrite(1.0f, s, (threadIdx.x + 100) * 4);
}

static void print_floats(const char *name, const float *v, int n) {
    printf("%s", name);
    for (int i = 0; i < n; i++) printf(" %.9g", v[i]);
    printf("\n");
}

static cudaTextureDesc tex_desc(cudaTextureFilterMode filter, cudaTextureAddressMode mode,
                                int normalized, cudaTextureReadMode read) {
    cudaTextureDesc d;
    memset(&d, 0, sizeof d);
    d.filterMode = filter;
    d.addressMode[0] = d.addressMode[1] = d.addressMode[2] = mode;
    d.normalizedCoords = normalized;
    d.readMode = read;
    d.borderColor[0] = 0.25f;  // seen where address mode border meets a float texture
    return d;
}

static cudaResourceDesc array_res(cudaArray_t a) {
    cudaResourceDesc r;
    memset(&r, 0, sizeof r);
    r.resType = cudaResourceTypeArray;
    r.res.array.array = a;
    return r;
}

int main(int argc, char **argv) {
    const int W = 5, H = 4;
    float *d_out;
    CHECK(cudaMalloc(&d_out, 64 * sizeof(float)));
    float h_out[64 * 4];

    // 2D float array, values (i * 37 % 101) / 7
    float img[H][W];
    for (int i = 0; i < W * H; i++) img[i / W][i % W] = (float)(i * 37 % 101) / 7.0f;
    cudaChannelFormatDesc fdesc = cudaCreateChannelDesc<float>();
    cudaArray_t arr;
    CHECK(cudaMallocArray(&arr, &fdesc, W, H));
    CHECK(cudaMemcpy2DToArray(arr, 0, 0, img, W * sizeof(float), W * sizeof(float), H,
                              cudaMemcpyHostToDevice));
    cudaChannelFormatDesc got;
    cudaExtent ext;
    unsigned flags;
    CHECK(cudaArrayGetInfo(&got, &ext, &flags, arr));
    CHECK(cudaGetChannelDesc(&got, arr));
    printf("info %d %d %d %d %d %zu %zu %zu %u\n", got.x, got.y, got.z, got.w, (int)got.f,
           ext.width, ext.height, ext.depth, flags);
    float back[H][W];
    CHECK(cudaMemcpy2DFromArray(back, W * sizeof(float), arr, 0, 0, W * sizeof(float), H,
                                cudaMemcpyDeviceToHost));
    printf("roundtrip %d\n", memcmp(back, img, sizeof img) == 0);

    cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, 0));
    int attr;
    CHECK(cudaDeviceGetAttribute(&attr, cudaDevAttrMaxTexture2DHeight, 0));
    printf("limits %d %d %d %d\n", prop.maxTexture1D, prop.maxTexture2D[0], attr, prop.maxSurface2DLayered[2]);

    const char *filters[] = {"point", "linear"};
    const char *modes[] = {"wrap", "clamp", "mirror", "border"};
    for (int f = 0; f < 2; f++)
        for (int m = 0; m < 4; m++)
            for (int norm = 0; norm < 2; norm++) {
                cudaResourceDesc r = array_res(arr);
                cudaTextureDesc td = tex_desc((cudaTextureFilterMode)f, (cudaTextureAddressMode)m,
                                              norm, cudaReadModeElementType);
                cudaTextureObject_t t;
                CHECK(cudaCreateTextureObject(&t, &r, &td, NULL));
                sample2d<<<1, NC>>>(t, norm ? 1.0f / W : 1.0f, norm ? 1.0f / H : 1.0f, d_out);
                CHECK(cudaMemcpy(h_out, d_out, NC * sizeof(float), cudaMemcpyDeviceToHost));
                char name[64];
                snprintf(name, sizeof name, "a2d_%s_%s_%d", filters[f], modes[m], norm);
                print_floats(name, h_out, NC);
                CHECK(cudaDestroyTextureObject(t));
            }

    // 1D uchar4 array read as normalized floats, linear filter, clamp (legacy copy to array)
    unsigned char px[6][4];
    for (int i = 0; i < 24; i++) px[i / 4][i % 4] = (unsigned char)(i * 53 % 256);
    cudaChannelFormatDesc u4 = cudaCreateChannelDesc<uchar4>();
    cudaArray_t arr1;
    CHECK(cudaMallocArray(&arr1, &u4, 6));
    CHECK(cudaMemcpyToArray(arr1, 0, 0, px, sizeof px, cudaMemcpyHostToDevice));
    unsigned char pxback[6][4];
    CHECK(cudaMemcpyFromArray(pxback, arr1, 0, 0, sizeof px, cudaMemcpyDeviceToHost));
    printf("legacy_roundtrip %d\n", memcmp(px, pxback, sizeof px) == 0);
    {
        cudaResourceDesc r = array_res(arr1);
        cudaTextureDesc td = tex_desc(cudaFilterModeLinear, cudaAddressModeClamp, 0,
                                      cudaReadModeNormalizedFloat);
        cudaTextureObject_t t;
        CHECK(cudaCreateTextureObject(&t, &r, &td, NULL));
        sample1d4<<<1, NC>>>(t, (float4 *)d_out);
        CHECK(cudaMemcpy(h_out, d_out, NC * sizeof(float4), cudaMemcpyDeviceToHost));
        print_floats("u8x4_norm_linear", h_out, 4 * NC);
        cudaTextureDesc back_td;
        CHECK(cudaGetTextureObjectTextureDesc(&back_td, t));
        cudaResourceDesc back_r;
        CHECK(cudaGetTextureObjectResourceDesc(&back_r, t));
        printf("descs %d %d %d\n", (int)back_td.filterMode, (int)back_td.readMode,
               back_r.res.array.array == arr1);
        CHECK(cudaDestroyTextureObject(t));
    }

    // tex1Dfetch on linear memory: short2 elements, out of range reads zeros
    {
        short hs[12];
        for (int i = 0; i < 12; i++) hs[i] = (short)(i * 1111 - 7000);
        short *ds;
        CHECK(cudaMalloc(&ds, sizeof hs));
        CHECK(cudaMemcpy(ds, hs, sizeof hs, cudaMemcpyHostToDevice));
        cudaResourceDesc r;
        memset(&r, 0, sizeof r);
        r.resType = cudaResourceTypeLinear;
        r.res.linear.devPtr = ds;
        r.res.linear.desc = cudaCreateChannelDesc<short2>();
        r.res.linear.sizeInBytes = sizeof hs;
        cudaTextureDesc td = tex_desc(cudaFilterModePoint, cudaAddressModeClamp, 0,
                                      cudaReadModeElementType);
        cudaTextureObject_t t;
        CHECK(cudaCreateTextureObject(&t, &r, &td, NULL));
        fetch_short2<<<1, NC>>>(t, (int2 *)d_out);
        int hi[2 * NC];
        CHECK(cudaMemcpy(hi, d_out, sizeof hi, cudaMemcpyDeviceToHost));
        printf("s16x2_fetch");
        for (int i = 0; i < 2 * NC; i++) printf(" %d", hi[i]);
        printf("\n");
        CHECK(cudaDestroyTextureObject(t));
        // the same memory as signed 16-bit normalized floats
        r.res.linear.desc = cudaCreateChannelDesc<short>();
        td.readMode = cudaReadModeNormalizedFloat;
        CHECK(cudaCreateTextureObject(&t, &r, &td, NULL));
        fetch_float<<<1, 12>>>(t, d_out);
        CHECK(cudaMemcpy(h_out, d_out, 12 * sizeof(float), cudaMemcpyDeviceToHost));
        print_floats("s16_norm_fetch", h_out, 12);
        CHECK(cudaDestroyTextureObject(t));
        CHECK(cudaFree(ds));
    }

    // pitch2D over cudaMallocPitch memory: signed chars as normalized floats, linear, wrap
    {
        signed char hc[H][W];
        for (int i = 0; i < W * H; i++) hc[i / W][i % W] = (signed char)(i * 29 % 256 - 128);
        void *dp;
        size_t pitch;
        CHECK(cudaMallocPitch(&dp, &pitch, W, H));
        CHECK(cudaMemcpy2D(dp, pitch, hc, W, W, H, cudaMemcpyHostToDevice));
        cudaResourceDesc r;
        memset(&r, 0, sizeof r);
        r.resType = cudaResourceTypePitch2D;
        r.res.pitch2D.devPtr = dp;
        r.res.pitch2D.desc = cudaCreateChannelDesc<signed char>();
        r.res.pitch2D.width = W;
        r.res.pitch2D.height = H;
        r.res.pitch2D.pitchInBytes = pitch;
        cudaTextureDesc td = tex_desc(cudaFilterModeLinear, cudaAddressModeWrap, 1,
                                      cudaReadModeNormalizedFloat);
        cudaTextureObject_t t;
        CHECK(cudaCreateTextureObject(&t, &r, &td, NULL));
        sample2d<<<1, NC>>>(t, 1.0f / W, 1.0f / H, d_out);
        CHECK(cudaMemcpy(h_out, d_out, NC * sizeof(float), cudaMemcpyDeviceToHost));
        print_floats("s8_pitch_norm_linear_wrap", h_out, NC);
        CHECK(cudaDestroyTextureObject(t));
        CHECK(cudaFree(dp));
    }

    // half floats, linear filter, mirror with normalized coordinates
    {
        __half hh[H][W];
        for (int i = 0; i < W * H; i++) hh[i / W][i % W] = __float2half((float)(i * 13 % 17) * 0.375f - 2.0f);
        cudaChannelFormatDesc hd = cudaCreateChannelDescHalf();
        cudaArray_t ah;
        CHECK(cudaMallocArray(&ah, &hd, W, H));
        CHECK(cudaMemcpy2DToArray(ah, 0, 0, hh, W * 2, W * 2, H, cudaMemcpyHostToDevice));
        cudaResourceDesc r = array_res(ah);
        cudaTextureDesc td = tex_desc(cudaFilterModeLinear, cudaAddressModeMirror, 1,
                                      cudaReadModeElementType);
        cudaTextureObject_t t;
        CHECK(cudaCreateTextureObject(&t, &r, &td, NULL));
        sample2d<<<1, NC>>>(t, 1.0f / W, 1.0f / H, d_out);
        CHECK(cudaMemcpy(h_out, d_out, NC * sizeof(float), cudaMemcpyDeviceToHost));
        print_floats("f16_linear_mirror", h_out, NC);
        CHECK(cudaDestroyTextureObject(t));
        CHECK(cudaFreeArray(ah));
    }

    // 3D float array through cudaMemcpy3D, trilinear, clamp
    const int D = 3;
    {
        float vol[D][H][W];
        for (int i = 0; i < W * H * D; i++) (&vol[0][0][0])[i] = (float)(i * 41 % 97) * 0.5f;
        cudaArray_t a3;
        CHECK(cudaMalloc3DArray(&a3, &fdesc, make_cudaExtent(W, H, D)));
        cudaMemcpy3DParms p;
        memset(&p, 0, sizeof p);
        p.srcPtr = make_cudaPitchedPtr(vol, W * sizeof(float), W, H);
        p.dstArray = a3;
        p.extent = make_cudaExtent(W, H, D);
        p.kind = cudaMemcpyHostToDevice;
        CHECK(cudaMemcpy3D(&p));
        float volback[D][H][W];
        memset(&p, 0, sizeof p);
        p.srcArray = a3;
        p.dstPtr = make_cudaPitchedPtr(volback, W * sizeof(float), W, H);
        p.extent = make_cudaExtent(W, H, D);
        p.kind = cudaMemcpyDeviceToHost;
        CHECK(cudaMemcpy3D(&p));
        printf("roundtrip3d %d\n", memcmp(vol, volback, sizeof vol) == 0);
        cudaResourceDesc r = array_res(a3);
        cudaTextureDesc td = tex_desc(cudaFilterModeLinear, cudaAddressModeClamp, 0,
                                      cudaReadModeElementType);
        cudaTextureObject_t t;
        CHECK(cudaCreateTextureObject(&t, &r, &td, NULL));
        sample3d<<<1, NC>>>(t, d_out);
        CHECK(cudaMemcpy(h_out, d_out, NC * sizeof(float), cudaMemcpyDeviceToHost));
        print_floats("f32_3d_linear_clamp", h_out, NC);
        CHECK(cudaDestroyTextureObject(t));
        CHECK(cudaFreeArray(a3));
    }

    // layered arrays: 3 layers of W x H (2D) and of W (1D), linear, border
    {
        float lay[3][H][W];
        for (int i = 0; i < W * H * 3; i++) (&lay[0][0][0])[i] = (float)(i * 19 % 53);
        cudaArray_t a2, a1;
        CHECK(cudaMalloc3DArray(&a2, &fdesc, make_cudaExtent(W, H, 3), cudaArrayLayered));
        CHECK(cudaMalloc3DArray(&a1, &fdesc, make_cudaExtent(W, 0, 3), cudaArrayLayered));
        cudaMemcpy3DParms p;
        memset(&p, 0, sizeof p);
        p.srcPtr = make_cudaPitchedPtr(lay, W * sizeof(float), W, H);
        p.dstArray = a2;
        p.extent = make_cudaExtent(W, H, 3);
        p.kind = cudaMemcpyHostToDevice;
        CHECK(cudaMemcpy3D(&p));
        // the 1D layers: the first row of each 2D layer
        memset(&p, 0, sizeof p);
        p.srcPtr = make_cudaPitchedPtr(lay, W * sizeof(float), W, H);
        p.dstArray = a1;
        p.extent = make_cudaExtent(W, 1, 3);
        p.kind = cudaMemcpyHostToDevice;
        CHECK(cudaMemcpy3D(&p));
        cudaResourceDesc r2 = array_res(a2), r1 = array_res(a1);
        cudaTextureDesc td = tex_desc(cudaFilterModeLinear, cudaAddressModeBorder, 0,
                                      cudaReadModeElementType);
        cudaTextureObject_t t2, t1;
        CHECK(cudaCreateTextureObject(&t2, &r2, &td, NULL));
        CHECK(cudaCreateTextureObject(&t1, &r1, &td, NULL));
        sample_layered<<<1, NC>>>(t2, t1, d_out, d_out + NC);
        CHECK(cudaMemcpy(h_out, d_out, 2 * NC * sizeof(float), cudaMemcpyDeviceToHost));
        print_floats("layered2d_linear_border", h_out, NC);
        print_floats("layered1d_linear_border", h_out + NC, NC);
        CHECK(cudaDestroyTextureObject(t2));
        CHECK(cudaDestroyTextureObject(t1));
        CHECK(cudaFreeArray(a2));
        CHECK(cudaFreeArray(a1));
    }

    // tex2Dgather of the float image (clamp) and an int texture read with point sampling
    {
        cudaResourceDesc r = array_res(arr);
        cudaTextureDesc td = tex_desc(cudaFilterModePoint, cudaAddressModeClamp, 0,
                                      cudaReadModeElementType);
        cudaTextureObject_t t;
        CHECK(cudaCreateTextureObject(&t, &r, &td, NULL));
        gather<<<1, NC>>>(t, (float4 *)d_out);
        CHECK(cudaMemcpy(h_out, d_out, NC * sizeof(float4), cudaMemcpyDeviceToHost));
        print_floats("gather_clamp", h_out, 4 * NC);
        CHECK(cudaDestroyTextureObject(t));

        int hi[H][W];
        for (int i = 0; i < W * H; i++) hi[i / W][i % W] = i * 100003 - 900000;
        cudaChannelFormatDesc idesc = cudaCreateChannelDesc(32, 0, 0, 0, cudaChannelFormatKindSigned);
        cudaArray_t ai;
        CHECK(cudaMallocArray(&ai, &idesc, W, H));
        CHECK(cudaMemcpy2DToArray(ai, 0, 0, hi, W * 4, W * 4, H, cudaMemcpyHostToDevice));
        r = array_res(ai);
        CHECK(cudaCreateTextureObject(&t, &r, &td, NULL));
        sample_int<<<1, NC>>>(t, (int *)d_out);
        int ho[NC];
        CHECK(cudaMemcpy(ho, d_out, sizeof ho, cudaMemcpyDeviceToHost));
        printf("s32_point_clamp");
        for (int i = 0; i < NC; i++) printf(" %d", ho[i]);
        printf("\n");
        // linear filtering of integers read as integers is refused, as by CUDA
        td.filterMode = cudaFilterModeLinear;
        cudaTextureObject_t bad;
        printf("int_linear %s\n", cudaGetErrorName(cudaCreateTextureObject(&bad, &r, &td, NULL)));
        cudaChannelFormatDesc three = cudaCreateChannelDesc(32, 32, 32, 0, cudaChannelFormatKindFloat);
        cudaArray_t a3c;
        printf("three_channels %s\n", cudaGetErrorName(cudaMallocArray(&a3c, &three, 4, 4)));
        cudaGetLastError();
        cudaGetLastError();
        CHECK(cudaDestroyTextureObject(t));
        CHECK(cudaFreeArray(ai));
    }

    // a surface over a 2D float array: read, write, boundary modes
    {
        cudaArray_t as;
        CHECK(cudaMallocArray(&as, &fdesc, W, H, cudaArraySurfaceLoadStore));
        CHECK(cudaMemcpy2DToArray(as, 0, 0, img, W * 4, W * 4, H, cudaMemcpyHostToDevice));
        cudaResourceDesc r = array_res(as);
        cudaSurfaceObject_t s;
        CHECK(cudaCreateSurfaceObject(&s, &r));
        surface_bounds<<<1, 1>>>(s, d_out);
        surface_ops<<<1, dim3(W, H)>>>(s);
        CHECK(cudaDeviceSynchronize());
        float res[H][W];
        CHECK(cudaMemcpy2DFromArray(res, W * 4, as, 0, 0, W * 4, H, cudaMemcpyDeviceToHost));
        print_floats("surface_written", &res[0][0], W * H);
        CHECK(cudaMemcpy(h_out, d_out, 4 * sizeof(float), cudaMemcpyDeviceToHost));
        print_floats("surface_bounds", h_out, 4);
        if (argc > 1) {  // a store out of range in trap mode fails the kernel
            surface_trap<<<1, 2>>>(s);
            printf("trap %s\n", cudaGetErrorName(cudaDeviceSynchronize()));
            return 0;
        }
        CHECK(cudaDestroySurfaceObject(s));
        CHECK(cudaFreeArray(as));
    }
    CHECK(cudaFreeArray(arr));
    CHECK(cudaFreeArray(arr1));
    CHECK(cudaFree(d_out));
    printf("done\n");
    return 0;
}
