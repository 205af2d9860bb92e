/* cpuify CUDA runtime: the interface between a program built by `cpuify nvcc` and the
 * library that replaces libcudart (cudart.c).
 *
 * For every translation unit (or, with -rdc, every device link) `cpuify nvcc` compiles the
 * device code (PTX) to a native object and generates a small C file holding one
 * cpuify_module_desc: the kernels (mangled name, block function, parameter layout, shared
 * and scratch sizes, launch bounds) and the __device__/__constant__ variables.  A
 * constructor registers it with cpuify_cudart_register_module().  nvcc's own host code
 * then registers its stubs (__cudaRegisterFatBinary/__cudaRegisterFunction/...); the
 * runtime ties the two together by the hash of the fat binary (whole-program mode) or by
 * the module given to __cudaRegisterLinkedBinary_* (separate compilation).
 *
 * C11, no dependencies besides cpuify_rt.h.
 */
#ifndef CPUIFY_CUDART_H
#define CPUIFY_CUDART_H

#include <stdint.h>

#include "cpuify_rt.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Bumped whenever the descriptors below change. */
#define CPUIFY_CUDART_ABI 4

enum {
    CPUIFY_KERNEL_PRINTF = 1, /* the kernel calls printf: flush stdout after a launch */
    CPUIFY_KERNEL_SPINS = 2,  /* spin-wait loops (yield points): blocks run as fibers */
    CPUIFY_KERNEL_ENVREG = 4, /* reads %envreg (grid.sync()): needs a cooperative launch */
};

/* The kernel compiled for one block shape (`cpuify nvcc` finds the shapes a program
 * launches with at build time): used instead of the generic block function when a launch's
 * block equals `block`.  It reads the same launch prologue values. */
typedef struct cpuify_kernel_variant {
    uint32_t block[3];
    cpuify_block_fn fn;
    uint32_t scratch_per_thread;
    uint32_t scratch_extra;
    /* a launch-time variant (n_noalias > 0): compiled for launches whose pointer parameters
     * at the byte offsets `noalias` point into allocations that no pointer at another of
     * the offsets `bases` reaches (checked per launch; otherwise the plain shape's code) */
    uint32_t n_noalias;
    const uint32_t *noalias;
    uint32_t n_bases;
    const uint32_t *bases;
} cpuify_kernel_variant;

typedef struct cpuify_kernel_desc {
    const char *name;             /* mangled device name, as __cudaRegisterFunction gives it */
    cpuify_block_fn fn;           /* NULL when the kernel cannot run on the CPU */
    const char *refused;          /* why it cannot run (fn == NULL), else NULL */
    uint32_t nparams;
    const uint32_t *param_offsets;
    const uint32_t *param_sizes;
    uint32_t param_size;          /* bytes of the packed parameters */
    uint32_t dyn_offset;          /* where the launch's dynamic shared size (u32) goes */
    uint32_t shared_static;       /* static __shared__ bytes */
    uint32_t scratch_per_thread;  /* scratch bytes = per_thread * threads + scratch_extra */
    uint32_t scratch_extra;
    uint32_t reqntid[3];          /* 0 when not given */
    uint32_t maxntid[3];
    uint32_t local_bytes;         /* per-thread local memory (cudaFuncAttributes) */
    uint32_t flags;               /* CPUIFY_KERNEL_* */
    cpuify_block_fn prologue;     /* launch prologue (hoisted invariant code), or NULL: run
                                     once per launch on one thread before the grid */
    uint32_t prologue_scratch;    /* its scratch bytes */
    uint32_t launch_bytes;        /* values it writes after the dynamic shared size word */
    uint32_t nvariants;           /* block functions specialized for one block shape */
    const cpuify_kernel_variant *variants;
} cpuify_kernel_desc;

typedef struct cpuify_var_desc {
    const char *name;             /* PTX name of the __device__/__constant__ variable */
    void *addr;
    uint64_t size;
    uint32_t constant;
} cpuify_var_desc;

typedef struct cpuify_module_desc {
    uint32_t abi;                 /* CPUIFY_CUDART_ABI */
    uint64_t fatbin_hash;         /* FNV-1a of the fat binary nvcc embedded; 0: linked module */
    const char *source;           /* for messages: the .cu file(s) */
    uint32_t nkernels;
    const cpuify_kernel_desc *kernels;
    uint32_t nvars;
    const cpuify_var_desc *vars;
} cpuify_module_desc;

/* Called by the generated constructors. */
CPUIFY_API void cpuify_cudart_register_module(const cpuify_module_desc *m);

/* Called by the generated constructors after the module's registration: what run-time
 * specialization needs (nvcc/rtspec.py; cudart_rtspec.c): the Python interpreter and the
 * directory cpuify is imported from, the module's PTX file, the path prefix of its
 * compiled shapes, the pass pipeline. */
CPUIFY_API void cpuify_cudart_note_rtspec(const cpuify_module_desc *m, const char *python,
                                          const char *pypath, const char *ptx, const char *prefix,
                                          const char *passes);

/* Called by the generated __cudaRegisterLinkedBinary_<id> functions (-rdc). */
CPUIFY_API void cpuify_cudart_register_linked(void (*callback)(void **),
                                              const cpuify_module_desc *m);

/* Called by the generated constructors with the module's PTX target (`.target sm_80` ->
 * 80): the device reports the newest as its compute capability (unless
 * CPUIFY_COMPUTE_CAPABILITY says otherwise). */
CPUIFY_API void cpuify_cudart_note_arch(uint32_t sm);

/* Distributed execution (`cpuify nvcc --distributed`): the table of runtime entry points
 * that cpuify/distributed/native.py calls (runtime/dist_main.c passes its address on). */
CPUIFY_API const void *cpuify_cudart_dist_api(void);

#ifdef __cplusplus
}
#endif

#endif /* CPUIFY_CUDART_H */
