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

/* Bumped whenever the ABI below (or cpuify_tex.h, which compiled kernels call: version 4;
 * fault containment, cancellation and the guarded copy: version 5; yield points, fibers and
 * cooperative launches: version 6; launching a box of blocks
 * of a grid, cpuify_launch_range: version 8) changes; the Python loader checks it. */
#define CPUIFY_RT_ABI_VERSION 9

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
    CPUIFY_ERR_OUT_OF_MEMORY = 5,      /* runtime only: shared/scratch buffers could not be
                                          allocated (err_block is then 0xffffffff x3)         */
    /* runtime only: a launch stopped from outside its blocks' code */
    CPUIFY_ERR_ILLEGAL_ADDRESS = 6,    /* a block faulted (SIGSEGV/SIGBUS): cpuify_last_fault  */
    CPUIFY_ERR_HARDWARE = 7,           /* a block raised SIGILL or SIGFPE: cpuify_last_fault   */
    CPUIFY_ERR_TIMEOUT = 8,            /* ran longer than CPUIFY_KERNEL_TIMEOUT seconds        */
    CPUIFY_ERR_INTERRUPTED = 9,        /* cpuify_cancel(), e.g. from SIGINT (see below)        */
    CPUIFY_ERR_STACK_OVERFLOW = 10,    /* a recursion outgrew the call stack (stack size limit) */
    CPUIFY_ERR_DEADLOCK = 11,          /* every thread of the launch waits in a spin-wait loop
                                          for memory no running thread writes, for
                                          CPUIFY_DEADLOCK_TIMEOUT seconds: cpuify_last_message */
    CPUIFY_ERR_INVALID_BOX = 12        /* runtime only: cpuify_launch_range's box is not a box
                                          of the grid (lo > hi or hi > gridDim), or is part of
                                          a cooperative launch's grid (err_block 0xffffffff x3;
                                          nothing ran) */
};

/* cpuify_launch_ex flags */
enum cpuify_launch_flags {
    /* the kernel has yield points (spin-wait loops): its blocks run as resumable fibers, up
     * to max_resident at a time, and a block whose threads all wait lets the others run */
    CPUIFY_LAUNCH_FIBERS = 1,
    /* a cooperative launch: every block of the grid is resident at once (implies FIBERS),
     * and %envreg1:%envreg2 point to a zeroed grid workspace (grid.sync()) */
    CPUIFY_LAUNCH_COOPERATIVE = 2
};

/* The fault that failed a launch (CPUIFY_ERR_ILLEGAL_ADDRESS / CPUIFY_ERR_HARDWARE). */
typedef struct cpuify_fault {
    uint64_t address; /* the faulting address (si_addr); UINT64_MAX: not known */
    int32_t signal;   /* SIGSEGV, SIGBUS, SIGILL or SIGFPE; 0: the launch did not fault */
    int32_t access;   /* 1: a write, 0: a read, -1: not known */
} cpuify_fault;

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
 * A launch from inside a block function runs its grid serially on that thread.
 *
 * Faults are contained: a block that faults is abandoned, the other blocks stop and the
 * launch returns CPUIFY_ERR_ILLEGAL_ADDRESS (CPUIFY_ERR_HARDWARE), err_block naming the
 * block; the process goes on.  (Faults of code that is not a kernel reach the handler
 * installed before the runtime's, as usual.)  With CPUIFY_KERNEL_TIMEOUT=<seconds> a
 * launch that runs longer is stopped with CPUIFY_ERR_TIMEOUT.  Running blocks are stopped
 * with the real-time signal SIGRTMAX-3 when nothing else handles it (else between blocks
 * only). */
CPUIFY_API int32_t cpuify_launch(cpuify_block_fn fn, const void *params, const cpuify_dims *dims,
                                 uint64_t shared_bytes, uint64_t scratch_bytes,
                                 uint32_t *err_block);

/* cpuify_launch with flags (enum cpuify_launch_flags).  max_resident: with FIBERS, the most
 * blocks resident at once over all workers (0: no limit); a launch whose resident blocks
 * all wait while blocks are left to start fails with CPUIFY_ERR_DEADLOCK and says so. */
CPUIFY_API int32_t cpuify_launch_ex(cpuify_block_fn fn, const void *params, const cpuify_dims *dims,
                                    uint64_t shared_bytes, uint64_t scratch_bytes,
                                    uint32_t *err_block, uint32_t flags, uint64_t max_resident);

/* cpuify_launch_ex that runs only the blocks of a box of the grid: those with
 * lo[w] <= blockIdx.w < hi[w] for w = x, y, z.  The block function still sees the whole grid
 * (dims->grid is gridDim, blockIdx is absolute): the blocks outside the box simply do not
 * run, so launches of boxes that tile the grid together do what one launch of the grid does
 * (for kernels whose blocks do not wait for each other).  lo/hi NULL: 0 / dims->grid (the
 * whole grid).  An empty box (lo[w] == hi[w]) runs nothing and returns 0.  With FIBERS,
 * max_resident counts the box's blocks; a COOPERATIVE launch must cover the whole grid.
 * Blocks are handed out in the box's own order (x fastest), so a block that waits only for
 * blocks before it in the box finds them started. */
CPUIFY_API int32_t cpuify_launch_range(cpuify_block_fn fn, const void *params,
                                       const cpuify_dims *dims, uint64_t shared_bytes,
                                       uint64_t scratch_bytes, uint32_t *err_block,
                                       uint32_t flags, uint64_t max_resident,
                                       const uint32_t lo[3], const uint32_t hi[3]);

/* The message of the last launch of the calling thread that failed with
 * CPUIFY_ERR_DEADLOCK (which kernel, block, thread and loop waits, and why); "" if none. */
CPUIFY_API const char *cpuify_last_message(void);

/* Called by the block scheduler (block_sched.c): threads at yield points went round their
 * loop and none got anywhere (returns 0 to go on, or the error that ends the block), or
 * some did (progress). */
CPUIFY_API int32_t cpuify_block_wait(const char *where, uint32_t bx, uint32_t by, uint32_t bz,
                                     uint32_t thread);
CPUIFY_API void cpuify_block_progress(void);

/* %envreg<index> of the running launch: 1 and 2 are the high and low halves of the grid
 * workspace of a cooperative launch (0 otherwise). */
CPUIFY_API uint32_t cpuify_envreg(int32_t index);

/* The fault of the last launch of the calling thread that failed with one. */
CPUIFY_API void cpuify_last_fault(cpuify_fault *out);

/* Stops the running launch (if any) with `reason` (0: CPUIFY_ERR_INTERRUPTED); returns
 * whether one was running.  Async-signal-safe. */
CPUIFY_API int32_t cpuify_cancel(int32_t reason);

/* Chains a SIGINT handler in front of the current one (when that is a function, as
 * Python's is): Ctrl-C then also stops the running launch with CPUIFY_ERR_INTERRUPTED.
 * The runtime puts it back in front during long launches if it was replaced. */
CPUIFY_API void cpuify_catch_interrupts(void);

/* Says that the SIGINT the handler above saw while no launch was running has reached the
 * program (Python raised KeyboardInterrupt): the next launch need not stop for it. */
CPUIFY_API void cpuify_interrupt_seen(void);

/* Copies `height` rows of `width` bytes (row y from src + y * spitch to dst + y * dpitch,
 * as memmove; when src is NULL, sets them to `fill` as memset) and returns 0, or -1 instead
 * of crashing when an address is not mapped (or not writable): host API calls check the
 * pointers they are given this way. */
CPUIFY_API int32_t cpuify_guarded_copy(void *dst, uint64_t dpitch, const void *src,
                                       uint64_t spitch, uint64_t width, uint64_t height,
                                       int32_t fill);

/* Device-side malloc/free, and no-cancel sections (begin = 1 / 0) for runtime code that
 * kernels call while it holds a lock: a cancel waits until the section ends. */
CPUIFY_API void *cpuify_device_malloc(uint64_t size);
CPUIFY_API void cpuify_device_free(void *p);
/* The call stack of recursive device functions: the calling worker's buffer (the threads a
 * worker runs share it: a recursion never spans a barrier), of cpuify_call_stack_size()
 * bytes: the stack size limit (cudaLimitStackSize, default 1024 bytes per thread), or 0
 * when it could not be allocated. */
CPUIFY_API void *cpuify_call_stack(void);
/* Dynamic parallelism: a kernel launched from device code.  The compiled module describes
 * each kernel its code launches (layout fixed by codegen/llvm_gen.py: CHILD_KERNEL_TYPE). */
typedef struct cpuify_child_kernel {
    cpuify_block_fn fn;          /* NULL: the kernel cannot run on the CPU (refused)       */
    cpuify_block_fn prologue;    /* the launch prologue (parallel-licm) or NULL            */
    uint64_t prologue_scratch;
    uint32_t buffer_bytes;       /* parameter buffer: parameters, dynamic shared size word, */
    uint32_t dyn_offset;         /* ... at dyn_offset, the prologue's values               */
    uint32_t shared_static;
    uint32_t scratch_per_thread;
    uint32_t scratch_extra;
    uint32_t max_threads;        /* threads per block it accepts (1024, or .maxntid)       */
    const char *name;
} cpuify_child_kernel;
/* The parameter buffer of a launch of `k` (cudaGetParameterBufferV2), or NULL with
 * cpuify_device_launch_status() saying why (a cudaError_t); the launch itself
 * (cudaLaunchDeviceV2).  A grid's child launches run when the grid's blocks are done, before
 * cpuify_launch returns: in launch order, each with its own children, then the tail
 * launches (stream cudaStreamTailLaunch). */
CPUIFY_API void *cpuify_device_launch_buffer(const cpuify_child_kernel *k, uint32_t gx, uint32_t gy,
                                             uint32_t gz, uint32_t bx, uint32_t by, uint32_t bz,
                                             uint32_t shared_bytes);
CPUIFY_API int32_t cpuify_device_launch_status(void);
CPUIFY_API int32_t cpuify_device_launch(void *buffer, uint64_t stream);
/* The kernel of the last child grid that failed a launch (NULL if none did). */
CPUIFY_API const char *cpuify_failed_child(void);
CPUIFY_API uint64_t cpuify_call_stack_size(void);
CPUIFY_API void cpuify_set_stack_limit(uint64_t bytes);
CPUIFY_API uint64_t cpuify_stack_limit(void);
CPUIFY_API void cpuify_nocancel(int32_t begin);

/* Whether a host thread may still write memory that a running launch waits for (the CUDA
 * runtime's asynchronous launches: 1 while launches are queued and no host thread waits for
 * them).  While it is 1 the no-progress detector (CPUIFY_DEADLOCK_TIMEOUT) does not fail a
 * launch whose blocks all wait; its clock starts again when it becomes 0. */
CPUIFY_API void cpuify_host_running(int32_t running);

/* Number of workers (calling thread included) a launch uses: the value given to
 * cpuify_set_num_workers, else CPUIFY_NUM_THREADS (>= 1), else the CPUs this process may
 * run on (sched_getaffinity). */
CPUIFY_API int32_t cpuify_num_workers(void);

/* Resize the pool; n <= 0 restores the default.  Waits for a running launch to finish. */
CPUIFY_API void cpuify_set_num_workers(int32_t n);

/* CUDA device printf: fmt is the format string, args the packed argument buffer (each
 * argument at its natural alignment; float promoted to double; %s/%p are 8-byte pointers).
 * args may be NULL when there are no arguments.  The whole formatted text is written with
 * one fwrite to stdout under stdout's lock (or kept: cpuify_printf_defer).  Returns the
 * number of characters written. */
CPUIFY_API int32_t cpuify_vprintf(const char *fmt, const void *args);

/* Device printf deferred (on = 1) as a GPU's printf buffer is: the text of each call is kept,
 * in order, until cpuify_printf_flush() writes it to stdout (the CUDA runtime's
 * asynchronous launches: at the next synchronizing call).  Off (the default): written at
 * the call. */
CPUIFY_API void cpuify_printf_defer(int32_t on);
CPUIFY_API void cpuify_printf_flush(void);

/* fflush(stdout). */
CPUIFY_API void cpuify_flush(void);

/* Returns CPUIFY_RT_ABI_VERSION of the compiled library. */
CPUIFY_API int32_t cpuify_runtime_abi_version(void);

#ifdef __cplusplus
}
#endif

#endif /* CPUIFY_RT_H */
