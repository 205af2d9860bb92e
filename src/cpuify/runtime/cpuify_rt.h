/* cpuify native runtime: runs compiled CUDA thread blocks over a pool of CPU workers.
 *
 * The compiler emits, per kernel, one "block function" (cpuify_block_fn) that runs a whole
 * thread block; cpuify_launch() spreads the blocks of a grid over a persistent pthread pool
 * (the calling thread works too).  cpuify_vprintf() implements CUDA's device-side printf ABI.
 *
 * C11 + pthreads, no other dependencies.  All functions are thread-safe.
 */
#ifndef CPUIFY_RT_H
#define CPUIFY_RT_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define CPUIFY_API __declspec(dllexport)
#else
#define CPUIFY_API __attribute__((visibility("default")))
#endif

/* Bumped whenever the ABI below (or cpuify_tex.h, which compiled kernels call: version 4)
 * changes; the Python loader checks it. */
#define CPUIFY_RT_ABI_VERSION 4

typedef struct cpuify_dims {
    uint32_t grid[3];  /* gridDim.x/y/z  */
    uint32_t block[3]; /* blockDim.x/y/z */
} cpuify_dims;

/* Error codes returned by block functions (and by cpuify_launch). */
enum cpuify_error {
    CPUIFY_OK = 0,
    CPUIFY_ERR_BARRIER_DIVERGENCE = 1, /* threads of a block reached different barriers        */
    CPUIFY_ERR_TRAP = 2,               /* PTX trap                                             */
    CPUIFY_ERR_WARP_DIVERGENCE = 3,    /* threads of a warp disagree at a warp collective     */
    CPUIFY_ERR_ASSERT = 4,             /* device-side assert failed                           */
    CPUIFY_ERR_OUT_OF_MEMORY = 5       /* runtime only: shared/scratch buffers could not be
                                          allocated (err_block is then 0xffffffff x3)         */
};

/* Runs one whole thread block.  Returns 0, or a nonzero error code (enum cpuify_error).
 *   params:  packed kernel parameters
 *   shared:  per-block shared memory, >= shared_bytes, 64-byte aligned, NOT zero-filled
 *   scratch: per-worker scratch, >= scratch_bytes, 64-byte aligned                      */
typedef int32_t (*cpuify_block_fn)(const void *params, const cpuify_dims *dims,
                                   uint32_t bx, uint32_t by, uint32_t bz,
                                   void *shared, void *scratch);

/* Launch fn over the whole grid.  Returns 0, or the first error code any block returned;
 * then err_block[0..2] (may be NULL) holds that block's index.  Returns only after every
 * started block has finished.  Launches are serialized (one at a time in the pool).
 * A launch from inside a block function runs its grid serially on that thread. */
CPUIFY_API int32_t cpuify_launch(cpuify_block_fn fn, const void *params, const cpuify_dims *dims,
                                 uint64_t shared_bytes, uint64_t scratch_bytes,
                                 uint32_t *err_block);

/* Number of workers (calling thread included) a launch uses: the value given to
 * cpuify_set_num_workers, else CPUIFY_NUM_THREADS (>= 1), else the CPUs this process may
 * run on (sched_getaffinity). */
CPUIFY_API int32_t cpuify_num_workers(void);

/* Resize the pool; n <= 0 restores the default.  Waits for a running launch to finish. */
CPUIFY_API void cpuify_set_num_workers(int32_t n);

/* CUDA device printf: fmt is the format string, args the packed argument buffer (each
 * argument at its natural alignment; float promoted to double; %s/%p are 8-byte pointers).
 * args may be NULL when there are no arguments.  The whole formatted text is written with
 * one fwrite to stdout under stdout's lock.  Returns the number of characters written. */
CPUIFY_API int32_t cpuify_vprintf(const char *fmt, const void *args);

/* fflush(stdout). */
CPUIFY_API void cpuify_flush(void);

/* Returns CPUIFY_RT_ABI_VERSION of the compiled library. */
CPUIFY_API int32_t cpuify_runtime_abi_version(void);

#ifdef __cplusplus
}
#endif

#endif /* CPUIFY_RT_H */
