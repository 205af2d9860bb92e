/* cpuify textures and surfaces: sampling for PTX tex/tld4/txq and surface loads/stores
 * (see cpuify_tex.h for the descriptor and the calling convention).
 *
 * Sampling follows the CUDA programming guide's texture fetching appendix:
 *  - normalized coordinates are scaled by the size; address modes apply to texel indices:
 *    wrap (i mod N), mirror (period 2N), clamp, border (the border color); with
 *    unnormalized coordinates wrap and mirror act as clamp, as on the GPU;
 *  - point filtering reads texel floor(x);
 *  - linear filtering reads texels floor(x - 0.5) and the next one and weighs them with the
 *    fraction of x - 0.5 in 9-bit fixed point with 8 fractional bits (rounded to the nearest
 *    1/256), then lerps in single precision: (1-a)*T0 + a*T1 (bilinear and trilinear nest
 *    it in x, then y, then z);
 *  - normalized float reads: unsigned 8/16-bit v / (2^n - 1), signed max(v / (2^(n-1) - 1), -1);
 *  - integer coordinates (tex1Dfetch) read one texel; on a linear-memory resource an index
 *    out of range reads zeros;
 *  - channels the format lacks read 0 (the border color's too).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "cpuify_tex.h"

#define FAULT_TRAP 2 /* CPUIFY_ERR_TRAP */

static float half_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 31, man = h & 1023u, bits;
    if (exp == 31) {
        bits = sign | 0x7f800000u | (man << 13);
    } else if (exp == 0) {
        if (man == 0) {
            bits = sign;
        } else { /* subnormal: value man * 2^-24 */
            float f = (float)man * 5.9604644775390625e-8f;
            memcpy(&bits, &f, 4);
            bits |= sign;
        }
    } else {
        bits = sign | ((exp + 112u) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static const cpuify_texdesc *texture_of(uint64_t handle, uint32_t magic, const char *what) {
    const cpuify_texdesc *t = (const cpuify_texdesc *)(uintptr_t)handle;
    if (!t || t->magic != magic) {
        char msg[160];
        snprintf(msg, sizeof msg, "%s on an invalid %s object handle 0x%llx", what,
                 magic == CPUIFY_TEX_MAGIC ? "texture" : "surface", (unsigned long long)handle);
        cpuify_device_fault(FAULT_TRAP, msg);
        return NULL;
    }
    return t;
}

static const unsigned char *element(const cpuify_texdesc *t, int64_t x, int64_t y, int64_t z,
                                    int64_t layer) {
    return (const unsigned char *)(uintptr_t)t->data + (uint64_t)(z + layer) * t->slice +
           (uint64_t)y * t->pitch + (uint64_t)x * (t->channels * t->bits / 8);
}

/* channel c of the element at p as an integer (sign or zero extended) */
static int64_t channel_int(const cpuify_texdesc *t, const unsigned char *p, uint32_t c) {
    switch (t->bits) {
    case 8: {
        uint8_t v = p[c];
        return t->kind == CPUIFY_FMT_SIGNED ? (int64_t)(int8_t)v : (int64_t)v;
    }
    case 16: {
        uint16_t v;
        memcpy(&v, p + 2 * c, 2);
        return t->kind == CPUIFY_FMT_SIGNED ? (int64_t)(int16_t)v : (int64_t)v;
    }
    default: {
        uint32_t v;
        memcpy(&v, p + 4 * c, 4);
        return t->kind == CPUIFY_FMT_SIGNED ? (int64_t)(int32_t)v : (int64_t)v;
    }
    }
}

/* channel c as the float a float-returning fetch sees */
static float channel_float(const cpuify_texdesc *t, const unsigned char *p, uint32_t c) {
    if (t->kind == CPUIFY_FMT_FLOAT) {
        if (t->bits == 16) {
            uint16_t h;
            memcpy(&h, p + 2 * c, 2);
            return half_to_float(h);
        }
        float f;
        memcpy(&f, p + 4 * c, 4);
        return f;
    }
    int64_t v = channel_int(t, p, c);
    if (t->read_mode == 1 && t->bits < 32) {
        if (t->kind == CPUIFY_FMT_UNSIGNED) return (float)v / (float)((1u << t->bits) - 1u);
        float r = (float)v / (float)((1u << (t->bits - 1)) - 1u);
        return r < -1.0f ? -1.0f : r;
    }
    return (float)v;
}

/* Applies the address mode to texel index *i of a dimension of size n; returns 0 when the
 * texel is the border color. */
static int address(const cpuify_texdesc *t, int dim, int64_t *i, int64_t n) {
    uint32_t mode = t->address[dim];
    if (!t->normalized && (mode == CPUIFY_ADDR_WRAP || mode == CPUIFY_ADDR_MIRROR))
        mode = CPUIFY_ADDR_CLAMP;
    int64_t v = *i;
    switch (mode) {
    case CPUIFY_ADDR_WRAP:
        v %= n;
        if (v < 0) v += n;
        break;
    case CPUIFY_ADDR_MIRROR:
        v %= 2 * n;
        if (v < 0) v += 2 * n;
        if (v >= n) v = 2 * n - 1 - v;
        break;
    case CPUIFY_ADDR_BORDER:
        if (v < 0 || v >= n) return 0;
        break;
    default:
        v = v < 0 ? 0 : v >= n ? n - 1 : v;
    }
    *i = v;
    return 1;
}

typedef struct {
    float f[4];
    int64_t i[4];
} texel_t;

/* the texel at integer coordinates (address modes applied per dimension); as floats when
 * `as_float`, else as integers */
static void texel(const cpuify_texdesc *t, int64_t x, int64_t y, int64_t z, int64_t layer,
                  texel_t *out, int as_float) {
    int inside = address(t, 0, &x, (int64_t)t->width);
    if (t->dims >= 2) inside &= address(t, 1, &y, (int64_t)t->height);
    else y = 0;
    if (t->dims >= 3) inside &= address(t, 2, &z, (int64_t)t->depth);
    else z = 0;
    if (!inside) {
        for (uint32_t c = 0; c < 4; c++) { /* channels the format lacks read 0 */
            out->f[c] = c < t->channels ? t->border[c] : 0.0f;
            out->i[c] = c < t->channels ? (int64_t)t->border[c] : 0;
        }
        return;
    }
    const unsigned char *p = element(t, x, y, z, layer);
    if (as_float && t->kind == CPUIFY_FMT_FLOAT && t->bits == 32) {
        memset(out->f, 0, sizeof out->f);
        switch (t->channels) { /* fixed sizes: no library call */
        case 1: memcpy(out->f, p, 4); break;
        case 2: memcpy(out->f, p, 8); break;
        default: memcpy(out->f, p, 16); break;
        }
        return;
    }
    for (uint32_t c = 0; c < 4; c++) {
        if (c >= t->channels) {
            out->f[c] = 0.0f;
            out->i[c] = 0;
        } else if (as_float) {
            out->f[c] = channel_float(t, p, c);
        } else {
            out->i[c] = channel_int(t, p, c);
        }
    }
}

static float float_of_bits(uint32_t bits) {
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* floorf without a libm call (the runtime is built for the baseline ISA, where floorf is
 * one); NaN and values of 2^23 and more in magnitude are returned as they are */
static inline float floor_float(float v) {
    if (!(v > -8388608.0f && v < 8388608.0f)) return v;
    float t = (float)(int32_t)v;
    return t > v ? t - 1.0f : t;
}

/* floor of a coordinate as an index (NaN reads index 0; huge values stay far outside) */
static int64_t index_of(float v) {
    if (!(v == v)) return 0;
    if (v > 1e12f) return (int64_t)1e12;
    if (v < -1e12f) return -(int64_t)1e12;
    return (int64_t)floor_float(v);
}

/* the linear filter's weight: frac in 9-bit fixed point (8 fractional bits) */
static float weight(float frac) {
    return (float)(int32_t)(frac * 256.0f + 0.5f) * (1.0f / 256.0f);
}

static float lerp(float a, float lo, float hi) { return (1.0f - a) * lo + a * hi; }

cpuify_tex_result cpuify_tex(uint64_t handle, uint32_t info, uint32_t c0, uint32_t c1,
                             uint32_t c2, uint32_t c3) {
    cpuify_tex_result res = {0, 0};
    const cpuify_texdesc *t = texture_of(handle, CPUIFY_TEX_MAGIC, "texture fetch");
    if (!t) return res;
    uint32_t geom = info & 15u, result = (info >> CPUIFY_TEX_RESULT_SHIFT) & 3u;
    uint32_t gather = (info >> CPUIFY_TEX_GATHER_SHIFT) & 7u;
    int int_coords = (info & CPUIFY_TEX_INT_COORDS) != 0;
    int as_float = result == 0;
    if (int_coords && geom == 1 && t->linear && t->bits == 32 && (t->kind == CPUIFY_FMT_FLOAT) == as_float) {
        /* tex1Dfetch of 32-bit channels: the common case, read straight */
        uint32_t out[4] = {0, 0, 0, 0};
        int32_t i = (int32_t)c0;
        if (i >= 0 && (uint64_t)i < t->width)
            memcpy(out, (const unsigned char *)(uintptr_t)t->data + (uint64_t)i * t->channels * 4,
                   t->channels * 4);
        res.lo = (uint64_t)out[0] | (uint64_t)out[1] << 32;
        res.hi = (uint64_t)out[2] | (uint64_t)out[3] << 32;
        return res;
    }
    int64_t layer = 0;
    uint32_t coord[3] = {c0, c1, c2};
    if (geom == 4 || geom == 5) { /* a1d/a2d: the layer first */
        layer = (int32_t)c0;
        if (layer < 0) layer = 0;
        if (t->layers && layer >= (int64_t)t->layers) layer = (int64_t)t->layers - 1;
        coord[0] = c1;
        coord[1] = c2;
        coord[2] = c3;
    }
    uint32_t ndim = geom == 4 ? 1 : geom == 5 ? 2 : geom;
    if (ndim > t->dims) ndim = t->dims;
    texel_t v[8];
    float w[3] = {0, 0, 0};
    int linear = 0;
    if (int_coords) {
        int64_t i[3] = {0, 0, 0};
        for (uint32_t d = 0; d < ndim; d++) i[d] = (int32_t)coord[d];
        if (t->linear && (i[0] < 0 || i[0] >= (int64_t)t->width)) {
            memset(&v[0], 0, sizeof v[0]);
        } else {
            texel(t, i[0], i[1], i[2], layer, &v[0], as_float);
        }
    } else {
        static const uint64_t one = 1;
        const uint64_t *size[3] = {&t->width, t->dims >= 2 ? &t->height : &one,
                                   t->dims >= 3 ? &t->depth : &one};
        float x[3] = {0, 0, 0};
        for (uint32_t d = 0; d < ndim; d++) {
            x[d] = float_of_bits(coord[d]);
            if (t->normalized) x[d] *= (float)*size[d];
        }
        linear = t->filter == 1 || gather;
        if (linear) {
            int64_t i[3] = {0, 0, 0};
            for (uint32_t d = 0; d < ndim; d++) {
                float xb = x[d] - 0.5f;
                i[d] = index_of(xb);
                float fl = floor_float(xb);
                w[d] = weight(xb == xb ? xb - fl : 0.0f);
            }
            for (int k = 0; k < (1 << ndim); k++)
                texel(t, i[0] + (k & 1), i[1] + ((k >> 1) & 1), i[2] + ((k >> 2) & 1), layer, &v[k],
                      as_float);
        } else {
            texel(t, index_of(x[0]), index_of(x[1]), index_of(x[2]), layer, &v[0], as_float);
        }
    }
    uint32_t out[4];
    if (gather) {
        /* tld4: component (gather - 1) of the four texels of the 2x2 footprint, in the order
         * (i, j+1), (i+1, j+1), (i+1, j), (i, j) */
        static const int order[4] = {2, 3, 1, 0};
        uint32_t c = gather - 1;
        for (int k = 0; k < 4; k++) {
            const texel_t *tv = &v[order[k]];
            if (result == 0) memcpy(&out[k], &tv->f[c], 4);
            else out[k] = (uint32_t)tv->i[c];
        }
    } else if (result == 0) {
        for (uint32_t c = 0; c < 4; c++) {
            if (c >= t->channels) { /* a missing channel reads 0 */
                out[c] = 0;
                continue;
            }
            float r = v[0].f[c];
            if (linear) {
                if (ndim == 1) {
                    r = lerp(w[0], v[0].f[c], v[1].f[c]);
                } else if (ndim == 2) {
                    r = lerp(w[1], lerp(w[0], v[0].f[c], v[1].f[c]), lerp(w[0], v[2].f[c], v[3].f[c]));
                } else {
                    float lo = lerp(w[1], lerp(w[0], v[0].f[c], v[1].f[c]), lerp(w[0], v[2].f[c], v[3].f[c]));
                    float hi = lerp(w[1], lerp(w[0], v[4].f[c], v[5].f[c]), lerp(w[0], v[6].f[c], v[7].f[c]));
                    r = lerp(w[2], lo, hi);
                }
            }
            memcpy(&out[c], &r, 4);
        }
    } else {
        for (int c = 0; c < 4; c++) out[c] = (uint32_t)v[0].i[c];
    }
    res.lo = (uint64_t)out[0] | (uint64_t)out[1] << 32;
    res.hi = (uint64_t)out[2] | (uint64_t)out[3] << 32;
    return res;
}

uint32_t cpuify_txq(uint64_t handle, uint32_t query) {
    const cpuify_texdesc *t = (const cpuify_texdesc *)(uintptr_t)handle;
    if (!t || (t->magic != CPUIFY_TEX_MAGIC && t->magic != CPUIFY_SURF_MAGIC)) {
        texture_of(handle, CPUIFY_TEX_MAGIC, "txq");
        return 0;
    }
    switch (query) {
    case 0: return (uint32_t)t->width;
    case 1: return (uint32_t)t->height;
    case 2: return (uint32_t)t->depth;
    case 5: return t->normalized;
    case 6: return t->filter;
    case 7: case 8: case 9: return t->address[query - 7];
    case 10: return (uint32_t)t->layers;
    case 11: case 12: return 1;
    default: return 0;
    }
}

/* The byte address of a surface access, or NULL (zero mode out of range, or a trap).  The
 * coordinates come in PTX's order: {x, y, z} or, for a1d/a2d, {layer, x, y}. */
static unsigned char *surface_address(const cpuify_texdesc *t, uint32_t info, int32_t c0,
                                      int32_t c1, int32_t c2, const char *what) {
    uint32_t geom = info & 15u, bytes = (info >> 4) & 31u, mode = (info >> 12) & 3u;
    const int layered = geom == 4 || geom == 5;
    const int32_t x = layered ? c1 : c0, y = layered ? c2 : c1, z = layered ? 0 : c2;
    const int32_t layer = layered ? c0 : 0;
    uint32_t ndim = geom == 4 ? 1 : geom == 5 ? 2 : geom;
    int64_t esize = t->channels * t->bits / 8;
    int64_t c[4] = {x, ndim >= 2 ? y : 0, ndim >= 3 ? z : 0, geom >= 4 ? layer : 0};
    int64_t hi[4] = {(int64_t)t->width * esize - bytes, (int64_t)t->height - 1,
                     (int64_t)t->depth - 1, t->layers ? (int64_t)t->layers - 1 : 0};
    if (hi[0] < 0) hi[0] = 0;
    for (int d = 0; d < 4; d++) {
        if (c[d] >= 0 && c[d] <= hi[d]) continue;
        if (mode == 1) {
            c[d] = c[d] < 0 ? 0 : hi[d];
            continue;
        }
        if (mode == 0) {
            char msg[200];
            snprintf(msg, sizeof msg, "%s out of range in trap mode (x %d bytes, y %d, z %d, "
                     "layer %d; the surface is %llu bytes x %llu x %llu)", what, x, y, z, layer,
                     (unsigned long long)(t->width * esize), (unsigned long long)t->height,
                     (unsigned long long)t->depth);
            cpuify_device_fault(FAULT_TRAP, msg);
        }
        return NULL;
    }
    return (unsigned char *)(uintptr_t)t->data + (uint64_t)(c[2] + c[3]) * t->slice +
           (uint64_t)c[1] * t->pitch + (uint64_t)c[0];
}

cpuify_tex_result cpuify_suld(uint64_t handle, uint32_t info, int32_t c0, int32_t c1, int32_t c2,
                              int32_t c3) {
    cpuify_tex_result res = {0, 0};
    (void)c3;
    const cpuify_texdesc *t = texture_of(handle, CPUIFY_SURF_MAGIC, "surface load");
    if (!t) return res;
    unsigned char *p = surface_address(t, info, c0, c1, c2, "surface load");
    uint32_t bytes = (info >> 4) & 31u;
    if (p) memcpy(&res, p, bytes <= 16 ? bytes : 16);
    return res;
}

void cpuify_sust(uint64_t handle, uint32_t info, int32_t c0, int32_t c1, int32_t c2, int32_t c3,
                 uint64_t lo, uint64_t hi) {
    (void)c3;
    const cpuify_texdesc *t = texture_of(handle, CPUIFY_SURF_MAGIC, "surface store");
    if (!t) return;
    unsigned char *p = surface_address(t, info, c0, c1, c2, "surface store");
    uint32_t bytes = (info >> 4) & 31u;
    cpuify_tex_result v = {lo, hi};
    if (p) memcpy(p, &v, bytes <= 16 ? bytes : 16);
}
