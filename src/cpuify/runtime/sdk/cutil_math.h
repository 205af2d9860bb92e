/* cutil_math.h (cpuify): arithmetic on CUDA's vector types (float2/3/4, int2/3/4, uint2/3/4)
 * as the GPU Computing SDK's samples use it: operators + - * / and their compound forms
 * (vector with vector, vector with scalar), unary minus, dot, cross, length, normalize,
 * lerp, clamp, smoothstep, reflect, floor, fracf, fmodf, fabs, fminf/fmaxf, min/max, and
 * make_* conversions between sizes.  Written for cpuify; host and device code. */
#ifndef CPUIFY_SDK_CUTIL_MATH_H
#define CPUIFY_SDK_CUTIL_MATH_H

#include <cuda_runtime.h>
#include <math.h>

typedef unsigned int uint;
typedef unsigned short ushort;

#define CPUIFY_HD inline __host__ __device__

#ifndef __CUDACC__
/* host code compiled by the host compiler: the CUDA functions' host equivalents (nvcc's
 * headers declare them for .cu files; fminf/fmaxf are the C library's) */
inline int max(int a, int b) { return a > b ? a : b; }
inline int min(int a, int b) { return a < b ? a : b; }
inline uint max(uint a, uint b) { return a > b ? a : b; }
inline uint min(uint a, uint b) { return a < b ? a : b; }
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
#endif

/* ---- scalars ---------------------------------------------------------------------------- */
CPUIFY_HD float lerp(float a, float b, float t) { return a + t * (b - a); }
CPUIFY_HD float clamp(float f, float a, float b) { return fmaxf(a, fminf(f, b)); }
CPUIFY_HD int clamp(int f, int a, int b) { return max(a, min(f, b)); }
CPUIFY_HD uint clamp(uint f, uint a, uint b) { return f < a ? a : f > b ? b : f; }
CPUIFY_HD float fracf(float v) { return v - floorf(v); }
CPUIFY_HD float smoothstep(float a, float b, float x) {
    float y = clamp((x - a) / (b - a), 0.0f, 1.0f);
    return y * y * (3.0f - 2.0f * y);
}

/* ---- conversions between sizes ---------------------------------------------------------- */
CPUIFY_HD float2 make_float2(float s) { return make_float2(s, s); }
CPUIFY_HD float2 make_float2(float3 a) { return make_float2(a.x, a.y); }
CPUIFY_HD float2 make_float2(float4 a) { return make_float2(a.x, a.y); }
CPUIFY_HD float2 make_float2(int2 a) { return make_float2(float(a.x), float(a.y)); }
CPUIFY_HD float2 make_float2(uint2 a) { return make_float2(float(a.x), float(a.y)); }
CPUIFY_HD float3 make_float3(float s) { return make_float3(s, s, s); }
CPUIFY_HD float3 make_float3(float2 a) { return make_float3(a.x, a.y, 0.0f); }
CPUIFY_HD float3 make_float3(float2 a, float s) { return make_float3(a.x, a.y, s); }
CPUIFY_HD float3 make_float3(float4 a) { return make_float3(a.x, a.y, a.z); }
CPUIFY_HD float3 make_float3(int3 a) { return make_float3(float(a.x), float(a.y), float(a.z)); }
CPUIFY_HD float3 make_float3(uint3 a) { return make_float3(float(a.x), float(a.y), float(a.z)); }
CPUIFY_HD float4 make_float4(float s) { return make_float4(s, s, s, s); }
CPUIFY_HD float4 make_float4(float3 a) { return make_float4(a.x, a.y, a.z, 0.0f); }
CPUIFY_HD float4 make_float4(float3 a, float w) { return make_float4(a.x, a.y, a.z, w); }
CPUIFY_HD float4 make_float4(int4 a) { return make_float4(float(a.x), float(a.y), float(a.z), float(a.w)); }
CPUIFY_HD float4 make_float4(uint4 a) { return make_float4(float(a.x), float(a.y), float(a.z), float(a.w)); }
CPUIFY_HD int2 make_int2(int s) { return make_int2(s, s); }
CPUIFY_HD int2 make_int2(int3 a) { return make_int2(a.x, a.y); }
CPUIFY_HD int2 make_int2(uint2 a) { return make_int2(int(a.x), int(a.y)); }
CPUIFY_HD int2 make_int2(float2 a) { return make_int2(int(a.x), int(a.y)); }
CPUIFY_HD int3 make_int3(int s) { return make_int3(s, s, s); }
CPUIFY_HD int3 make_int3(int2 a) { return make_int3(a.x, a.y, 0); }
CPUIFY_HD int3 make_int3(int2 a, int s) { return make_int3(a.x, a.y, s); }
CPUIFY_HD int3 make_int3(uint3 a) { return make_int3(int(a.x), int(a.y), int(a.z)); }
CPUIFY_HD int3 make_int3(float3 a) { return make_int3(int(a.x), int(a.y), int(a.z)); }
CPUIFY_HD int4 make_int4(int s) { return make_int4(s, s, s, s); }
CPUIFY_HD int4 make_int4(int3 a) { return make_int4(a.x, a.y, a.z, 0); }
CPUIFY_HD int4 make_int4(int3 a, int w) { return make_int4(a.x, a.y, a.z, w); }
CPUIFY_HD int4 make_int4(uint4 a) { return make_int4(int(a.x), int(a.y), int(a.z), int(a.w)); }
CPUIFY_HD int4 make_int4(float4 a) { return make_int4(int(a.x), int(a.y), int(a.z), int(a.w)); }
CPUIFY_HD uint2 make_uint2(uint s) { return make_uint2(s, s); }
CPUIFY_HD uint2 make_uint2(uint3 a) { return make_uint2(a.x, a.y); }
CPUIFY_HD uint2 make_uint2(int2 a) { return make_uint2(uint(a.x), uint(a.y)); }
CPUIFY_HD uint3 make_uint3(uint s) { return make_uint3(s, s, s); }
CPUIFY_HD uint3 make_uint3(uint2 a) { return make_uint3(a.x, a.y, 0); }
CPUIFY_HD uint3 make_uint3(uint2 a, uint s) { return make_uint3(a.x, a.y, s); }
CPUIFY_HD uint3 make_uint3(uint4 a) { return make_uint3(a.x, a.y, a.z); }
CPUIFY_HD uint3 make_uint3(int3 a) { return make_uint3(uint(a.x), uint(a.y), uint(a.z)); }
CPUIFY_HD uint4 make_uint4(uint s) { return make_uint4(s, s, s, s); }
CPUIFY_HD uint4 make_uint4(uint3 a) { return make_uint4(a.x, a.y, a.z, 0); }
CPUIFY_HD uint4 make_uint4(uint3 a, uint w) { return make_uint4(a.x, a.y, a.z, w); }
CPUIFY_HD uint4 make_uint4(int4 a) { return make_uint4(uint(a.x), uint(a.y), uint(a.z), uint(a.w)); }

/* ---- operators, per vector type: V is the type, S its scalar, M its make_ function, and the
 *      component-wise expression E(op) over a and b ------------------------------------------ */
#define CPUIFY_V2(M, a, op, b) M((a).x op (b).x, (a).y op (b).y)
#define CPUIFY_V3(M, a, op, b) M((a).x op (b).x, (a).y op (b).y, (a).z op (b).z)
#define CPUIFY_V4(M, a, op, b) M((a).x op (b).x, (a).y op (b).y, (a).z op (b).z, (a).w op (b).w)
#define CPUIFY_S2(M, a, op, s) M((a).x op (s), (a).y op (s))
#define CPUIFY_S3(M, a, op, s) M((a).x op (s), (a).y op (s), (a).z op (s))
#define CPUIFY_S4(M, a, op, s) M((a).x op (s), (a).y op (s), (a).z op (s), (a).w op (s))
#define CPUIFY_R2(M, s, op, a) M((s) op (a).x, (s) op (a).y)
#define CPUIFY_R3(M, s, op, a) M((s) op (a).x, (s) op (a).y, (s) op (a).z)
#define CPUIFY_R4(M, s, op, a) M((s) op (a).x, (s) op (a).y, (s) op (a).z, (s) op (a).w)

#define CPUIFY_OP(V, S, M, N, op)                                                             \
    CPUIFY_HD V operator op(V a, V b) { return CPUIFY_V##N(M, a, op, b); }                    \
    CPUIFY_HD V operator op(V a, S s) { return CPUIFY_S##N(M, a, op, s); }                    \
    CPUIFY_HD V operator op(S s, V a) { return CPUIFY_R##N(M, s, op, a); }                    \
    CPUIFY_HD void operator op##=(V &a, V b) { a = a op b; }                                  \
    CPUIFY_HD void operator op##=(V &a, S s) { a = a op s; }

#define CPUIFY_VECTOR(V, S, M, N)                                                             \
    CPUIFY_OP(V, S, M, N, +)                                                                  \
    CPUIFY_OP(V, S, M, N, -)                                                                  \
    CPUIFY_OP(V, S, M, N, *)                                                                  \
    CPUIFY_OP(V, S, M, N, /)

CPUIFY_VECTOR(float2, float, make_float2, 2)
CPUIFY_VECTOR(float3, float, make_float3, 3)
CPUIFY_VECTOR(float4, float, make_float4, 4)
CPUIFY_VECTOR(int2, int, make_int2, 2)
CPUIFY_VECTOR(int3, int, make_int3, 3)
CPUIFY_VECTOR(int4, int, make_int4, 4)
CPUIFY_VECTOR(uint2, uint, make_uint2, 2)
CPUIFY_VECTOR(uint3, uint, make_uint3, 3)
CPUIFY_VECTOR(uint4, uint, make_uint4, 4)

CPUIFY_HD float2 operator-(float2 a) { return make_float2(-a.x, -a.y); }
CPUIFY_HD float3 operator-(float3 a) { return make_float3(-a.x, -a.y, -a.z); }
CPUIFY_HD float4 operator-(float4 a) { return make_float4(-a.x, -a.y, -a.z, -a.w); }
CPUIFY_HD int2 operator-(int2 a) { return make_int2(-a.x, -a.y); }
CPUIFY_HD int3 operator-(int3 a) { return make_int3(-a.x, -a.y, -a.z); }
CPUIFY_HD int4 operator-(int4 a) { return make_int4(-a.x, -a.y, -a.z, -a.w); }

/* ---- functions -------------------------------------------------------------------------- */
#define CPUIFY_FUNCTIONS(V, S, M, N)                                                          \
    CPUIFY_HD V min(V a, V b) { return CPUIFY_MINMAX##N(M, min, a, b); }                      \
    CPUIFY_HD V max(V a, V b) { return CPUIFY_MINMAX##N(M, max, a, b); }                      \
    CPUIFY_HD V clamp(V v, S a, S b) { return CPUIFY_CLAMPS##N(M, v, a, b); }                 \
    CPUIFY_HD V clamp(V v, V a, V b) { return CPUIFY_CLAMPV##N(M, v, a, b); }
#define CPUIFY_MINMAX2(M, f, a, b) M(f(a.x, b.x), f(a.y, b.y))
#define CPUIFY_MINMAX3(M, f, a, b) M(f(a.x, b.x), f(a.y, b.y), f(a.z, b.z))
#define CPUIFY_MINMAX4(M, f, a, b) M(f(a.x, b.x), f(a.y, b.y), f(a.z, b.z), f(a.w, b.w))
#define CPUIFY_CLAMPS2(M, v, a, b) M(clamp(v.x, a, b), clamp(v.y, a, b))
#define CPUIFY_CLAMPS3(M, v, a, b) M(clamp(v.x, a, b), clamp(v.y, a, b), clamp(v.z, a, b))
#define CPUIFY_CLAMPS4(M, v, a, b) M(clamp(v.x, a, b), clamp(v.y, a, b), clamp(v.z, a, b), clamp(v.w, a, b))
#define CPUIFY_CLAMPV2(M, v, a, b) M(clamp(v.x, a.x, b.x), clamp(v.y, a.y, b.y))
#define CPUIFY_CLAMPV3(M, v, a, b) M(clamp(v.x, a.x, b.x), clamp(v.y, a.y, b.y), clamp(v.z, a.z, b.z))
#define CPUIFY_CLAMPV4(M, v, a, b) M(clamp(v.x, a.x, b.x), clamp(v.y, a.y, b.y), clamp(v.z, a.z, b.z), clamp(v.w, a.w, b.w))

CPUIFY_FUNCTIONS(int2, int, make_int2, 2)
CPUIFY_FUNCTIONS(int3, int, make_int3, 3)
CPUIFY_FUNCTIONS(int4, int, make_int4, 4)
CPUIFY_FUNCTIONS(uint2, uint, make_uint2, 2)
CPUIFY_FUNCTIONS(uint3, uint, make_uint3, 3)
CPUIFY_FUNCTIONS(uint4, uint, make_uint4, 4)
CPUIFY_HD float2 clamp(float2 v, float a, float b) { return make_float2(clamp(v.x, a, b), clamp(v.y, a, b)); }
CPUIFY_HD float3 clamp(float3 v, float a, float b) { return make_float3(clamp(v.x, a, b), clamp(v.y, a, b), clamp(v.z, a, b)); }
CPUIFY_HD float4 clamp(float4 v, float a, float b) { return make_float4(clamp(v.x, a, b), clamp(v.y, a, b), clamp(v.z, a, b), clamp(v.w, a, b)); }
CPUIFY_HD float2 clamp(float2 v, float2 a, float2 b) { return make_float2(clamp(v.x, a.x, b.x), clamp(v.y, a.y, b.y)); }
CPUIFY_HD float3 clamp(float3 v, float3 a, float3 b) { return make_float3(clamp(v.x, a.x, b.x), clamp(v.y, a.y, b.y), clamp(v.z, a.z, b.z)); }
CPUIFY_HD float4 clamp(float4 v, float4 a, float4 b) { return make_float4(clamp(v.x, a.x, b.x), clamp(v.y, a.y, b.y), clamp(v.z, a.z, b.z), clamp(v.w, a.w, b.w)); }

CPUIFY_HD float2 fminf(float2 a, float2 b) { return make_float2(fminf(a.x, b.x), fminf(a.y, b.y)); }
CPUIFY_HD float3 fminf(float3 a, float3 b) { return make_float3(fminf(a.x, b.x), fminf(a.y, b.y), fminf(a.z, b.z)); }
CPUIFY_HD float4 fminf(float4 a, float4 b) { return make_float4(fminf(a.x, b.x), fminf(a.y, b.y), fminf(a.z, b.z), fminf(a.w, b.w)); }
CPUIFY_HD float2 fmaxf(float2 a, float2 b) { return make_float2(fmaxf(a.x, b.x), fmaxf(a.y, b.y)); }
CPUIFY_HD float3 fmaxf(float3 a, float3 b) { return make_float3(fmaxf(a.x, b.x), fmaxf(a.y, b.y), fmaxf(a.z, b.z)); }
CPUIFY_HD float4 fmaxf(float4 a, float4 b) { return make_float4(fmaxf(a.x, b.x), fmaxf(a.y, b.y), fmaxf(a.z, b.z), fmaxf(a.w, b.w)); }

CPUIFY_HD float dot(float2 a, float2 b) { return a.x * b.x + a.y * b.y; }
CPUIFY_HD float dot(float3 a, float3 b) { return a.x * b.x + a.y * b.y + a.z * b.z; }
CPUIFY_HD float dot(float4 a, float4 b) { return a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w; }
CPUIFY_HD int dot(int2 a, int2 b) { return a.x * b.x + a.y * b.y; }
CPUIFY_HD int dot(int3 a, int3 b) { return a.x * b.x + a.y * b.y + a.z * b.z; }
CPUIFY_HD int dot(int4 a, int4 b) { return a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w; }
CPUIFY_HD uint dot(uint2 a, uint2 b) { return a.x * b.x + a.y * b.y; }
CPUIFY_HD uint dot(uint3 a, uint3 b) { return a.x * b.x + a.y * b.y + a.z * b.z; }
CPUIFY_HD uint dot(uint4 a, uint4 b) { return a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w; }

CPUIFY_HD float length(float2 v) { return sqrtf(dot(v, v)); }
CPUIFY_HD float length(float3 v) { return sqrtf(dot(v, v)); }
CPUIFY_HD float length(float4 v) { return sqrtf(dot(v, v)); }
CPUIFY_HD float2 normalize(float2 v) { return v * rsqrtf(dot(v, v)); }
CPUIFY_HD float3 normalize(float3 v) { return v * rsqrtf(dot(v, v)); }
CPUIFY_HD float4 normalize(float4 v) { return v * rsqrtf(dot(v, v)); }
CPUIFY_HD float3 cross(float3 a, float3 b) {
    return make_float3(a.y * b.z - a.z * b.y, a.z * b.x - a.x * b.z, a.x * b.y - a.y * b.x);
}
/* the reflection of the incident vector i about the normal n (n normalized) */
CPUIFY_HD float3 reflect(float3 i, float3 n) { return i - 2.0f * n * dot(n, i); }

CPUIFY_HD float2 lerp(float2 a, float2 b, float t) { return a + t * (b - a); }
CPUIFY_HD float3 lerp(float3 a, float3 b, float t) { return a + t * (b - a); }
CPUIFY_HD float4 lerp(float4 a, float4 b, float t) { return a + t * (b - a); }
CPUIFY_HD float2 smoothstep(float2 a, float2 b, float2 x) {
    return make_float2(smoothstep(a.x, b.x, x.x), smoothstep(a.y, b.y, x.y));
}
CPUIFY_HD float3 smoothstep(float3 a, float3 b, float3 x) {
    return make_float3(smoothstep(a.x, b.x, x.x), smoothstep(a.y, b.y, x.y), smoothstep(a.z, b.z, x.z));
}
CPUIFY_HD float4 smoothstep(float4 a, float4 b, float4 x) {
    return make_float4(smoothstep(a.x, b.x, x.x), smoothstep(a.y, b.y, x.y), smoothstep(a.z, b.z, x.z),
                       smoothstep(a.w, b.w, x.w));
}

CPUIFY_HD float2 floor(float2 v) { return make_float2(floorf(v.x), floorf(v.y)); }
CPUIFY_HD float3 floor(float3 v) { return make_float3(floorf(v.x), floorf(v.y), floorf(v.z)); }
CPUIFY_HD float4 floor(float4 v) { return make_float4(floorf(v.x), floorf(v.y), floorf(v.z), floorf(v.w)); }
CPUIFY_HD float2 fracf(float2 v) { return make_float2(fracf(v.x), fracf(v.y)); }
CPUIFY_HD float3 fracf(float3 v) { return make_float3(fracf(v.x), fracf(v.y), fracf(v.z)); }
CPUIFY_HD float4 fracf(float4 v) { return make_float4(fracf(v.x), fracf(v.y), fracf(v.z), fracf(v.w)); }
CPUIFY_HD float2 fmodf(float2 a, float2 b) { return make_float2(fmodf(a.x, b.x), fmodf(a.y, b.y)); }
CPUIFY_HD float3 fmodf(float3 a, float3 b) { return make_float3(fmodf(a.x, b.x), fmodf(a.y, b.y), fmodf(a.z, b.z)); }
CPUIFY_HD float4 fmodf(float4 a, float4 b) {
    return make_float4(fmodf(a.x, b.x), fmodf(a.y, b.y), fmodf(a.z, b.z), fmodf(a.w, b.w));
}
CPUIFY_HD float2 fabs(float2 v) { return make_float2(fabsf(v.x), fabsf(v.y)); }
CPUIFY_HD float3 fabs(float3 v) { return make_float3(fabsf(v.x), fabsf(v.y), fabsf(v.z)); }
CPUIFY_HD float4 fabs(float4 v) { return make_float4(fabsf(v.x), fabsf(v.y), fabsf(v.z), fabsf(v.w)); }
CPUIFY_HD int2 abs(int2 v) { return make_int2(abs(v.x), abs(v.y)); }
CPUIFY_HD int3 abs(int3 v) { return make_int3(abs(v.x), abs(v.y), abs(v.z)); }
CPUIFY_HD int4 abs(int4 v) { return make_int4(abs(v.x), abs(v.y), abs(v.z), abs(v.w)); }

#undef CPUIFY_OP
#undef CPUIFY_VECTOR
#undef CPUIFY_FUNCTIONS

#endif /* CPUIFY_SDK_CUTIL_MATH_H */
