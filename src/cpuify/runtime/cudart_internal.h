/* cpuify's CUDA runtime: what its source files share (not an interface of the library).
 * cudart.c holds the core (errors, memory, copies, launches); cudart_texture.c the CUDA
 * arrays and texture/surface objects; cudart_graph.c CUDA graphs and stream capture;
 * cudart_devices.c what concerns several devices (peer access, PCI bus ids). */
#ifndef CPUIFY_CUDART_INTERNAL_H
#define CPUIFY_CUDART_INTERNAL_H

#include <cuda_runtime_api.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "cpuify_cudart.h"
#include "cpuify_tex.h"

#define CPUIFY_INTERNAL __attribute__((visibility("hidden")))

/* cudart.c: record `e` as the thread's last error and return it; the sticky error (a kernel
 * failed) or cudaSuccess; 256-byte aligned memory; the bytes from p to the end of the
 * device/managed/pinned allocation it points into (SIZE_MAX for other memory); the checked
 * copies behind cudaMemcpy and cudaMemcpy2D: `how` 0 runs them at the call, after the work
 * stream s orders them after; CPUIFY_COPY_ASYNC as cudaMemcpyAsync (queued on s where CUDA's
 * copy is asynchronous), with CPUIFY_COPY_DST_ARRAY / _SRC_ARRAY where that side is a CUDA
 * array's memory (device memory the allocation table does not know). */
#define CPUIFY_COPY_ASYNC 1u
#define CPUIFY_COPY_DST_ARRAY 2u
#define CPUIFY_COPY_SRC_ARRAY 4u
CPUIFY_INTERNAL cudaError_t cpuify_cudart_fail(cudaError_t e);
CPUIFY_INTERNAL cudaError_t cpuify_cudart_sticky(void);
/* the sticky error without waiting for the work in flight (calls that queue work); whether
 * distributed execution runs (then nothing is queued: work runs at the call) */
CPUIFY_INTERNAL cudaError_t cpuify_cudart_sticky_now(void);
CPUIFY_INTERNAL int cpuify_cudart_distributed(void);
CPUIFY_INTERNAL void *cpuify_cudart_alloc(size_t size);
CPUIFY_INTERNAL size_t cpuify_cudart_bytes_left(const void *p);
CPUIFY_INTERNAL cudaError_t cpuify_cudart_copy1d(void *dst, const void *src, size_t count,
                                                 enum cudaMemcpyKind kind, cudaStream_t s, unsigned how);
CPUIFY_INTERNAL cudaError_t cpuify_cudart_copy2d(void *dst, size_t dpitch, const void *src,
                                                 size_t spitch, size_t width, size_t height,
                                                 enum cudaMemcpyKind kind, cudaStream_t s, unsigned how);
CPUIFY_API cudaError_t cpuify_cudart_not_supported(const char *fn);
/* cudart.c: the devices shown (CPUIFY_DEVICE_COUNT, 1 to 64); cudart_devices.c: forget the
 * peer access enabled from and to `device` (cudaDeviceReset) */
#define CPUIFY_MAX_DEVICES 64
CPUIFY_INTERNAL int cpuify_cudart_device_count(void);
CPUIFY_INTERNAL void cpuify_cudart_forget_peers(int device);

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

/* Streams and events (cudart.c).  `capture` is the stream's part in a stream capture
 * (cudart_graph.c; NULL when it captures nothing); `captured` is set while the event's last
 * record was captured (its dependencies in the capture). */
struct cpuify_stream_capture;
struct cpuify_captured_event;
struct cpuify_queue;

/* `queue`: the stream's work queue (cudart_async.c; NULL until first used) */
struct CUstream_st {
    uint32_t magic;
    unsigned flags;
    int priority;
    struct cpuify_stream_capture *capture;
    struct cpuify_queue *queue;
};

/* `recorded`: cudaEventRecord was called; the last record is reached when `queue` is NULL or
 * has finished `count` items (cudart_async.c), t_ns is the time it was reached.  Under
 * cudart_async.c's lock: generation (counts records), pending_records (queued record items:
 * a destroyed event is freed with its last one), queue, count, t_ns. */
struct CUevent_st {
    uint32_t magic;
    unsigned flags;
    int recorded;
    uint64_t t_ns;
    struct cpuify_captured_event *captured;
    struct cpuify_queue *queue;
    uint64_t count, generation;
    int pending_records;
};

#define CPUIFY_STREAM_MAGIC 0x5354524du
#define CPUIFY_EVENT_MAGIC 0x45564e54u

/* cudart.c: kernel launches taken apart for graphs.  A kernel is looked up by its host stub
 * or by the cudaKernel_t __cudaGetKernel gave (NULL and *err set when it is neither);
 * cpuify_cudart_prepare_launch checks a launch configuration as a launch does and resolves
 * what cpuify_launch needs; cpuify_cudart_run_launch runs it on a parameter buffer of
 * param_bytes bytes whose parameters are in place (it writes the dynamic shared size and
 * the prologue's values), reporting a failure as a launch does (the sticky error); it
 * returns nonzero when the kernel failed. */
struct kentry;
typedef struct cpuify_cudart_launch {
    struct kentry *kernel;
    cpuify_block_fn fn, prologue;
    cpuify_dims dims;
    uint64_t shared_bytes, scratch_bytes, prologue_scratch;
    uint32_t dyn_shared, dyn_offset, param_bytes;
    int cooperative;
    uint32_t launch_flags;      /* cpuify_launch_ex: fibers (spin-waits), cooperative */
    uint64_t resident;          /* blocks resident at once (the co-resident limit) */
    /* the launch-time variant for non-overlapping pointers of the launch's block shape, run
     * instead of fn when the launch's pointer arguments allow it (NULL: none) */
    const cpuify_kernel_variant *noalias_variant;
    /* no block function of its own from the build: the run-time specialization of the
     * kernel for the launch's block shape (cudart_rtspec.c), or NULL */
    struct cpuify_rtspec *rtspec;
} cpuify_cudart_launch;

/* cudart_rtspec.c: run-time specialization of kernels for block shapes the build did not
 * foresee (nvcc/rtspec.py).  The entry of (kernel, block shape), NULL when there is none
 * (off, a module built without it, a refused or failed shape); whether its code is ready
 * (then its block function and scratch sizes); the wall time a launch spent in the
 * generic code (which starts the compile once there is enough of it). */
struct cpuify_rtspec;
CPUIFY_INTERNAL struct cpuify_rtspec *cpuify_rtspec_entry(const cpuify_kernel_desc *d,
                                                          const uint32_t block[3],
                                                          const char *pretty);
CPUIFY_INTERNAL int cpuify_rtspec_ready(struct cpuify_rtspec *e, cpuify_block_fn *fn,
                                        uint32_t *per_thread, uint64_t *extra);
CPUIFY_INTERNAL void cpuify_rtspec_ran_generic(struct cpuify_rtspec *e, uint64_t ns);

CPUIFY_INTERNAL struct kentry *cpuify_cudart_kernel(const void *func, cudaError_t *err);
CPUIFY_INTERNAL const cpuify_kernel_desc *cpuify_cudart_kernel_desc(struct kentry *k);
CPUIFY_INTERNAL const void *cpuify_cudart_kernel_host_fun(struct kentry *k);
CPUIFY_INTERNAL const char *cpuify_cudart_kernel_name(struct kentry *k);
CPUIFY_INTERNAL cudaError_t cpuify_cudart_prepare_launch(struct kentry *k, dim3 g, dim3 b, size_t smem,
                                                         int cooperative, cpuify_cudart_launch *out);
CPUIFY_INTERNAL int cpuify_cudart_run_launch(const cpuify_cudart_launch *l, unsigned char *params);

/* cudart.c: a copy or memset checked once and run many times (graph nodes).  A plan holds
 * plain pointers and pitches: arrays are resolved, positions applied. */
typedef struct cpuify_cudart_copy {
    char *dst;
    const char *src;
    size_t dpitch, spitch, dslice, sslice, width, height, depth;
    enum cudaMemcpyKind kind;
} cpuify_cudart_copy;
CPUIFY_INTERNAL cudaError_t cpuify_cudart_plan_copy3d(const struct cudaMemcpy3DParms *p,
                                                      cpuify_cudart_copy *out);
CPUIFY_INTERNAL cudaError_t cpuify_cudart_run_copy(const cpuify_cudart_copy *c);
/* `value` set in `height` rows of `width` elements of `element_size` (1, 2 or 4) bytes */
CPUIFY_INTERNAL cudaError_t cpuify_cudart_check_memset(void *dst, size_t pitch, unsigned element_size,
                                                       size_t width, size_t height);
CPUIFY_INTERNAL cudaError_t cpuify_cudart_run_memset(void *dst, size_t pitch, unsigned value,
                                                     unsigned element_size, size_t width, size_t height);
CPUIFY_INTERNAL cudaError_t cpuify_cudart_symbol_address(const void *symbol, size_t count, size_t offset,
                                                         char **addr);
CPUIFY_INTERNAL uint64_t cpuify_cudart_now_ns(void);

/* cudart_async.c: streams.  Each cpuify_cudart_enqueue_* queues work on stream s (after the
 * work CUDA orders it after) and returns 1, or returns 0: run it now on this thread
 * (CPUIFY_SYNC_LAUNCH=1, called on a stream's own thread, no memory: then after waiting for
 * what it is ordered after).  A launch's parameters and a copy's plan are copied.
 * cpuify_cudart_record_event / _stream_wait_event: cudaEventRecord / cudaStreamWaitEvent's
 * work (the checks done).  cpuify_cudart_wait_stream waits for stream s's order: `sync` 1 as
 * cudaStreamSynchronize (its work; the legacy stream's also the blocking streams'), 0 as work
 * queued now on s would (a synchronous copy).  cpuify_cudart_stream_busy: whether that (sync
 * 1) is not all done.  cpuify_cudart_event_done: whether the event's last record is reached
 * (wait: wait for it).  cpuify_cudart_event_reached: the event recorded now (a graph's event
 * record node).  cpuify_cudart_event_release: the event destroyed (1: free it now; else its
 * last queued record frees it).  cpuify_cudart_stream_release: the stream destroyed (its
 * queued work still runs).  cpuify_cudart_wait_launches waits until all work issued before
 * it is done and makes a queued launch's failure the calling thread's last error (once; as
 * does cpuify_cudart_collect_launch_error, without waiting). */
CPUIFY_INTERNAL int cpuify_cudart_enqueue_launch(const cpuify_cudart_launch *l,
                                                 const unsigned char *params, cudaStream_t s);
CPUIFY_INTERNAL int cpuify_cudart_enqueue_copy(const cpuify_cudart_copy *c, cudaStream_t s);
CPUIFY_INTERNAL int cpuify_cudart_enqueue_memset(void *dst, size_t pitch, unsigned value, size_t width,
                                                 size_t height, cudaStream_t s);
CPUIFY_INTERNAL int cpuify_cudart_enqueue_host(cudaHostFn_t fn, void *data, cudaStream_t s);
CPUIFY_INTERNAL int cpuify_cudart_enqueue_callback(cudaStreamCallback_t fn, void *data, cudaStream_t s);
CPUIFY_INTERNAL void cpuify_cudart_record_event(cudaEvent_t e, cudaStream_t s);
CPUIFY_INTERNAL void cpuify_cudart_stream_wait_event(cudaStream_t s, cudaEvent_t e);
CPUIFY_INTERNAL void cpuify_cudart_wait_stream(cudaStream_t s, int sync);
CPUIFY_INTERNAL int cpuify_cudart_stream_busy(cudaStream_t s);
CPUIFY_INTERNAL int cpuify_cudart_event_done(cudaEvent_t e, int wait);
CPUIFY_INTERNAL void cpuify_cudart_event_reached(cudaEvent_t e);
CPUIFY_INTERNAL int cpuify_cudart_event_release(cudaEvent_t e);
CPUIFY_INTERNAL void cpuify_cudart_stream_release(cudaStream_t s);
CPUIFY_API void cpuify_cudart_wait_launches(void);
CPUIFY_INTERNAL void cpuify_cudart_collect_launch_error(void);

/* cudart_async.c: a batch of work queued on one stream at once, nothing of another call
 * between its items (a graph launch: its nodes in dependency order).  The batch_* functions
 * add to it (a copy of the launch's parameters, of the copy's plan; an event record, or an
 * event wait (record 0) that waits for the event's last record as of the enqueue, one made
 * earlier in the batch included); an item without memory fails the batch.
 * cpuify_cudart_enqueue_batch queues it on s after `after` (a mark: the work of a queue up to
 * an item; NULL or zeroed for none), sets *last to the mark of its last item and returns 1,
 * or returns 0: run the work now (as the enqueue functions; it waited for s's order and
 * `after`).  Either way the batch is emptied.  cpuify_cudart_wait_mark waits for a mark. */
typedef struct cpuify_cudart_mark {
    struct cpuify_queue *queue;
    uint64_t count;
} cpuify_cudart_mark;
typedef struct cpuify_cudart_batch {
    struct cpuify_queue_item *head, *tail, *last_in_block;
    size_t n;
    int failed;
    unsigned char *block;       /* cpuify_cudart_batch_reserve's memory for the items */
    size_t block_size, block_used;
} cpuify_cudart_batch;
/* one block of memory for `items` items with `param_bytes` bytes of kernel parameters in all
 * (fewer allocations; items past it get their own) */
CPUIFY_INTERNAL void cpuify_cudart_batch_reserve(cpuify_cudart_batch *b, size_t items, size_t param_bytes);
CPUIFY_INTERNAL void cpuify_cudart_batch_launch(cpuify_cudart_batch *b, const cpuify_cudart_launch *l,
                                                const unsigned char *params);
CPUIFY_INTERNAL void cpuify_cudart_batch_copy(cpuify_cudart_batch *b, const cpuify_cudart_copy *c);
CPUIFY_INTERNAL void cpuify_cudart_batch_memset(cpuify_cudart_batch *b, void *dst, size_t pitch,
                                                unsigned value, unsigned element_size, size_t width,
                                                size_t height);
CPUIFY_INTERNAL void cpuify_cudart_batch_host(cpuify_cudart_batch *b, cudaHostFn_t fn, void *data);
CPUIFY_INTERNAL void cpuify_cudart_batch_event(cpuify_cudart_batch *b, cudaEvent_t e, int record);
CPUIFY_INTERNAL int cpuify_cudart_enqueue_batch(cpuify_cudart_batch *b, cudaStream_t s,
                                                const cpuify_cudart_mark *after, cpuify_cudart_mark *last);
CPUIFY_INTERNAL void cpuify_cudart_wait_mark(const cpuify_cudart_mark *m);
/* the calling thread's stream 0 is its per-thread default stream while `on` (the _ptds
 * functions: cpuify/nvcc/rtlib.py); returns the setting before */
CPUIFY_INTERNAL int cpuify_cudart_default_stream_per_thread(int on);

/* cudart_graph.c: stream capture.  cpuify_graph_open counts the capture sequences not yet
 * ended: while it is 0 no stream captures and every hook below is skipped. */
extern _Atomic int cpuify_graph_open;
#define CPUIFY_CAPTURE_OPEN() (atomic_load_explicit(&cpuify_graph_open, memory_order_relaxed) != 0)
#define CPUIFY_CAPTURE (-1)

/* Work about to be enqueued on stream s: 0 (run it now), CPUIFY_CAPTURE (s captures: add it
 * with a cpuify_graph_capture_* function), or the error to return (a capture was invalidated,
 * e.g. the legacy stream used while a blocking stream captures). */
CPUIFY_INTERNAL int cpuify_graph_enqueue(cudaStream_t s);
CPUIFY_INTERNAL cudaError_t cpuify_graph_capture_kernel(cudaStream_t s, const cpuify_cudart_launch *l,
                                                        const unsigned char *params);
CPUIFY_INTERNAL cudaError_t cpuify_graph_capture_memcpy(cudaStream_t s, const struct cudaMemcpy3DParms *p);
CPUIFY_INTERNAL cudaError_t cpuify_graph_capture_memset(cudaStream_t s, void *dst, size_t pitch,
                                                        int value, size_t width, size_t height);
CPUIFY_INTERNAL cudaError_t cpuify_graph_capture_host(cudaStream_t s, cudaHostFn_t fn, void *data);
/* cudaEventRecordExternal / cudaEventWaitExternal: an event-record (record = 1) or wait node */
CPUIFY_INTERNAL cudaError_t cpuify_graph_capture_event(cudaStream_t s, cudaEvent_t e, int record);
/* Work on capturing stream s that cannot be captured: cpuify_graph_invalidate invalidates the
 * capture and returns e (what CUDA refuses, e.g. a stream callback); cpuify_graph_refuse also
 * says once on stderr that cpuify does not support it (cudaMallocAsync: a memory node). */
CPUIFY_INTERNAL cudaError_t cpuify_graph_invalidate(cudaStream_t s, cudaError_t e);
CPUIFY_INTERNAL cudaError_t cpuify_graph_refuse(cudaStream_t s, const char *call);
/* cudaEventRecord / cudaStreamWaitEvent: 0 (not a capture matter: do it now) or the
 * result of doing it in the capture */
CPUIFY_INTERNAL int cpuify_graph_event_record(cudaEvent_t e, cudaStream_t s);
CPUIFY_INTERNAL int cpuify_graph_stream_wait(cudaStream_t s, cudaEvent_t e);
/* Calls CUDA restricts during capture: an unsafe one (allocation, freeing, synchronizing
 * another stream or an event: refused by the capture modes), synchronizing or querying a
 * stream, an event, the device.  cudaSuccess or the error (the captures invalidated). */
CPUIFY_INTERNAL cudaError_t cpuify_graph_unsafe_call(void);
CPUIFY_INTERNAL cudaError_t cpuify_graph_sync_stream(cudaStream_t s, int query);
enum { CPUIFY_EVENT_SYNC, CPUIFY_EVENT_QUERY, CPUIFY_EVENT_TIMING };
CPUIFY_INTERNAL cudaError_t cpuify_graph_sync_event(cudaEvent_t e, int how);
CPUIFY_INTERNAL cudaError_t cpuify_graph_sync_device(void);
/* the stream or event is going away */
CPUIFY_INTERNAL void cpuify_graph_forget_stream(cudaStream_t s);
CPUIFY_INTERNAL void cpuify_graph_forget_event(cudaEvent_t e);

#endif /* CPUIFY_CUDART_INTERNAL_H */
