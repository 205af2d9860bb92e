/* cpuify textures and surfaces: the descriptor a texture or surface object handle points to,
 * and the functions compiled kernels call for PTX `tex`/`tld4`/`txq`/`suld`/`sust`.
 *
 * A cudaTextureObject_t / cudaSurfaceObject_t is the address of a cpuify_texdesc.  The CUDA
 * runtime (cudart.c) builds them from cudaResourceDesc/cudaTextureDesc; the Python API
 * (cpuify.TextureObject) builds the same bytes in NumPy memory.  The layout is a fixed ABI
 * (128 bytes, little endian, documented in docs/usage.md): the reference interpreter reads
 * it with its own code.
 *
 * C11, no dependencies besides cpuify_rt.h.
 */
#ifndef CPUIFY_TEX_H
#define CPUIFY_TEX_H

#include <stdint.h>

#include "cpuify_rt.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CPUIFY_TEX_MAGIC 0x31584554u  /* "TEX1" */
#define CPUIFY_SURF_MAGIC 0x31525553u /* "SUR1" */

enum { CPUIFY_FMT_SIGNED = 0, CPUIFY_FMT_UNSIGNED = 1, CPUIFY_FMT_FLOAT = 2 };
enum { CPUIFY_ADDR_WRAP = 0, CPUIFY_ADDR_CLAMP = 1, CPUIFY_ADDR_MIRROR = 2, CPUIFY_ADDR_BORDER = 3 };

typedef struct cpuify_texdesc {
    uint32_t magic;        /* CPUIFY_TEX_MAGIC or CPUIFY_SURF_MAGIC */
    uint32_t channels;     /* 1..4 */
    uint32_t bits;         /* bits per channel: 8, 16 or 32 (all channels alike) */
    uint32_t kind;         /* CPUIFY_FMT_*: 16-bit float is half */
    uint32_t dims;         /* 1, 2 or 3 */
    uint32_t layered;      /* 1D layered: one row per layer; 2D layered: one slice per layer */
    uint32_t linear;       /* a linear-memory resource: integer fetches out of range read 0 */
    uint32_t filter;       /* 0 point, 1 linear */
    uint32_t address[3];   /* CPUIFY_ADDR_* per dimension */
    uint32_t normalized;   /* coordinates in [0, 1) */
    uint32_t read_mode;    /* 0 element type, 1 normalized float (8/16-bit integers) */
    uint32_t reserved;
    uint64_t width, height, depth, layers; /* in elements; 1 where unused */
    uint64_t pitch;        /* bytes between rows */
    uint64_t slice;        /* bytes between 2D slices (3D) or layers */
    uint64_t data;         /* address of element (0, 0, 0) of layer 0 */
    float border[4];       /* border color (address mode border) */
} cpuify_texdesc;

/* Two 64-bit words: four 32-bit results of a fetch, or up to 16 bytes of a surface load
 * (returned in two registers on x86-64 and AArch64; the code generator declares the
 * functions with the LLVM type {i64, i64}). */
typedef struct cpuify_tex_result {
    uint64_t lo, hi;
} cpuify_tex_result;

/* `info` of cpuify_tex: geometry (bits 0-3: 1 1d, 2 2d, 3 3d, 4 a1d, 5 a2d), integer
 * coordinates (bit 4), result type (bits 5-6: 0 f32, 1 s32, 2 u32), gather (bits 8-10:
 * 0 a fetch, 1-4 tld4 of component r/g/b/a).  c0..c3 are the coordinates' bits in PTX
 * order (layered: the layer first). */
#define CPUIFY_TEX_INT_COORDS 0x10u
#define CPUIFY_TEX_RESULT_SHIFT 5
#define CPUIFY_TEX_GATHER_SHIFT 8
CPUIFY_API cpuify_tex_result cpuify_tex(uint64_t handle, uint32_t info, uint32_t c0, uint32_t c1,
                                        uint32_t c2, uint32_t c3);

/* txq: query 0 width, 1 height, 2 depth, 3 channel data type, 4 channel order,
 * 5 normalized coords, 6 filter mode, 7 addr mode 0, 8 addr mode 1, 9 addr mode 2,
 * 10 array size (layers), 11 number of mipmap levels, 12 number of samples. */
CPUIFY_API uint32_t cpuify_txq(uint64_t handle, uint32_t query);

/* `info` of the surface functions: geometry (bits 0-3 as above), access bytes (bits 4-8:
 * 1, 2, 4, 8 or 16), boundary mode (bits 12-13: 0 trap, 1 clamp, 2 zero).  The coordinates
 * in PTX's order: {x, y, z}, or {layer, x, y} for a1d/a2d (c3 unused); x is in bytes. */
CPUIFY_API cpuify_tex_result cpuify_suld(uint64_t handle, uint32_t info, int32_t c0, int32_t c1,
                                         int32_t c2, int32_t c3);
CPUIFY_API void cpuify_sust(uint64_t handle, uint32_t info, int32_t c0, int32_t c1, int32_t c2,
                            int32_t c3, uint64_t lo, uint64_t hi);

/* A device-side failure inside a block (an invalid handle, a surface access out of range in
 * trap mode): prints `message` once per block and makes the block return `code`. */
void cpuify_device_fault(int32_t code, const char *message);

#ifdef __cplusplus
}
#endif

#endif /* CPUIFY_TEX_H */
