/* cpuify's CUDA runtime: streams.  Work issued to a stream runs asynchronously, in the
 * stream's issue order, on a runtime-owned thread of that stream; streams run independently
 * of each other except where CUDA orders them.
 *
 * Each stream (the legacy default stream, the calling thread's per-thread default stream,
 * every cudaStreamCreate'd one) has a queue of work items, run in order by the queue's own
 * thread (started with the queue's first item, parked while it is empty, reused by the next
 * stream created after the stream is destroyed): kernel launches (checked on the calling
 * thread first: every error CUDA reports at launch time stays synchronous), copies and
 * memsets (cudaMemcpy*Async between device, CUDA array and pinned memory, cudaMemset*Async),
 * host functions and stream callbacks, event records and event waits, and graph launches (a
 * batch: the graph's nodes as items, in dependency order, queued at once, the first waiting
 * for the exec's previous launch; cudart_graph.c).  An item may also wait for
 * an item of another queue (a dependency: a queue and the count of its items that must be
 * done), which gives CUDA's cross-stream order:
 *   - cudaStreamWaitEvent(s, e): an item on s that waits for e's last record;
 *   - the legacy default stream: an item on it waits for the work issued before it on every
 *     blocking stream (not created with cudaStreamNonBlocking), and an item on a blocking
 *     stream waits for the work issued before it on the legacy stream.
 * Kernels of different streams run one at a time (the worker pool runs one grid at once, on
 * all its workers: cpuify_rt.c), but a copy, memset or host function of one stream runs on
 * its stream's thread while a kernel of another stream runs, as a GPU's copy engines do.
 *
 * Synchronous calls wait for what they must: cudaMemcpy/cudaMemset (legacy stream) for the
 * legacy stream's order (its work and the blocking streams' work issued before), a
 * cudaMemcpyAsync with pageable host memory for its stream's order, then run at the call (as
 * CUDA's pageable copies are synchronous with the host); cudaStreamSynchronize/Query for the
 * stream's work (the legacy stream's: also the blocking streams'); cudaEventSynchronize/Query
 * for the event's last record; cuBLAS, cuFFT and cuRAND routines (mathlib_internal.h) for
 * the order of the stream set on their handle, then run at the call.  Every other API call
 * that touches device work or memory (frees, cudaDeviceSynchronize, graph instantiation and
 * changes, ...) waits for all the work issued before it (cpuify_cudart_wait_launches).
 * A stream holds at most QUEUE_DEPTH items not yet run; issuing one more waits for its
 * oldest, as a full launch queue of a GPU blocks the host.
 *
 * Errors: a kernel that fails makes the error sticky as before; its error also becomes the
 * last error (cudaGetLastError) of the first host thread that synchronizes or asks for the
 * last error after it failed.  cudaGetLastError and cudaPeekAtLastError do not wait.
 * Kernels, copies and memsets queued after a kernel failed do not run (the device is
 * unusable, as on a GPU); host functions and callbacks still run (a callback gets the error).
 *
 * Everything runs at the call (on the calling thread, after waiting for the work it is
 * ordered after) with CPUIFY_SYNC_LAUNCH=1 (debugging), in distributed execution (the MPI
 * hooks are called from the host thread: cudart.c queues nothing then), when called from a
 * stream's own thread (a host function or callback that calls the API: CUDA forbids it, we
 * neither wait nor queue there) and when the queue cannot be used (no memory, no thread).
 * Device-side launches run with their parent grid as before.
 *
 * Device printf of queued launches is kept (cpuify_printf_defer) and written to stdout when a
 * host thread next waits, as a GPU's printf buffer is flushed at synchronizing calls.
 *
 * The no-progress detector (CPUIFY_DEADLOCK_TIMEOUT) is told that the host may still write
 * what a kernel waits for while work is queued and no host thread waits, or while a stream's
 * copy, memset or host function runs (a kernel may spin on a flag that copy sets).
 *
 * Exit waits for the work in flight (atexit handler registered with the first queue thread:
 * kernels complete before the program's own atexit handlers and static destructors run, as
 * CUDA's teardown does); fork() waits for it too, and the child starts with empty queues and
 * no queue threads (started again by their next item).
 */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cudart_internal.h"

typedef enum {
    ITEM_KERNEL, ITEM_COPY, ITEM_MEMSET, ITEM_HOST, ITEM_CALLBACK, ITEM_RECORD, ITEM_WAIT
} item_kind;

typedef struct dep {
    struct cpuify_queue *q;
    uint64_t count;            /* done when q has finished this many items */
} dep;

typedef struct cpuify_queue_item {
    struct cpuify_queue_item *next;
    item_kind kind;
    uint32_t ndeps;
    /* a batch's items share one block (in_block); its last one there frees it (`block`) */
    int in_block;
    void *block;
    dep *deps;                 /* inline_deps or malloc'd */
    dep inline_deps[2];
    union {
        cpuify_cudart_launch launch;
        cpuify_cudart_copy copy;
        struct { void *dst; size_t pitch, width, height; unsigned value, element_size; } set;
        struct { cudaHostFn_t fn; void *data; } host;
        struct { cudaStreamCallback_t fn; cudaStream_t stream; void *data; } callback;
        /* (a batch's record or wait names its event until it is queued) */
        struct { cudaEvent_t event; uint64_t generation; } record;
    } u;
    _Alignas(16) unsigned char params[];   /* a launch's own copy of its parameter buffer */
} item;

struct cpuify_queue {
    struct cpuify_queue *next_all;   /* every queue ever made (never freed: reused) */
    struct cpuify_queue *next_free;
    item *head, *tail;               /* the head stays queued while it runs */
    uint64_t issued;                 /* items queued so far (under g_lock) */
    _Atomic uint64_t done;           /* items finished (written under g_lock) */
    /* the fewest items done that wakes a waiter (UINT64_MAX: none waits): waking the
     * waiters at every item of a long queue would cost them a context switch each */
    uint64_t wake_at;
    pthread_cond_t work;             /* the queue's thread waits for items */
    pthread_cond_t idle;             /* waiters for this queue's items */
    int blocking;                    /* synchronizes with the legacy stream */
    int legacy;
    int started;                     /* its thread runs */
    int released;                    /* its stream is gone: reuse the queue once drained */
};
typedef struct cpuify_queue queue;

/* the most items a stream holds not yet run (see enqueue): enough to keep the worker pool,
 * which runs one grid at a time, busy while the host issues the next */
#define QUEUE_DEPTH 64

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static queue g_legacy = {.blocking = 1, .legacy = 1, .wake_at = UINT64_MAX,
                         .work = PTHREAD_COND_INITIALIZER, .idle = PTHREAD_COND_INITIALIZER};
static queue *g_queues = &g_legacy;  /* all queues (the list only grows, at its head) */
static queue *g_free;                /* released, drained queues (threads parked) */
static _Atomic uint64_t g_pending;   /* items queued, not finished, over all queues */
static int g_host_waiters;           /* host threads waiting for stream work */
static int g_other_running;          /* copies, memsets, host functions running now */
static _Atomic int g_async_error;    /* the error of failed queued work, not yet seen */
static _Thread_local int tls_stream_thread;
static _Thread_local queue *tls_per_thread;
static _Thread_local int tls_default_per_thread;   /* in a _ptds call: stream 0 is the thread's */
static pthread_key_t g_per_thread_key;
static pthread_once_t g_per_thread_once = PTHREAD_ONCE_INIT;

/* CPUIFY_SYNC_LAUNCH=1 (any value but "" and "0"): all work runs at the call */
static int async_wanted(void) {
    static _Atomic int mode = -1;
    int m = atomic_load_explicit(&mode, memory_order_relaxed);
    if (m < 0) {
        const char *env = getenv("CPUIFY_SYNC_LAUNCH");
        m = !(env && *env && strcmp(env, "0") != 0);
        atomic_store_explicit(&mode, m, memory_order_relaxed);
    }
    return m;
}

/* Told to the block scheduler, whose no-progress detector cannot tell a deadlock from a host
 * (or a stream's copy or host function) that has not yet written a flag a kernel spins on
 * (caller holds g_lock). */
static void tell_host_state_locked(void) {
    cpuify_host_running(atomic_load(&g_pending) != 0 && (g_host_waiters == 0 || g_other_running > 0));
}

/* A host thread waits for stream work (caller holds g_lock). */
static void host_wait_begin_locked(void) {
    g_host_waiters++;
    tell_host_state_locked();
}

static void host_wait_end_locked(void) {
    g_host_waiters--;
    tell_host_state_locked();
}

static int dep_done(dep d) { return atomic_load(&d.q->done) >= d.count; }

/* Waits until d is done (caller holds g_lock). */
static void wait_dep_locked(dep d) {
    while (!dep_done(d)) {
        if (d.count < d.q->wake_at) d.q->wake_at = d.count;
        pthread_cond_wait(&d.q->idle, &g_lock);
    }
}

/* ---- queues of streams ---- */

static void free_per_thread(void *p);
static void make_per_thread_key(void) { pthread_key_create(&g_per_thread_key, free_per_thread); }

static queue *new_queue_locked(int blocking) {
    queue *q = g_free;
    if (q) {
        g_free = q->next_free;
    } else {
        q = calloc(1, sizeof *q);
        if (!q) return NULL;
        pthread_cond_init(&q->work, NULL);
        pthread_cond_init(&q->idle, NULL);
        q->wake_at = UINT64_MAX;
        q->next_all = g_queues;
        g_queues = q;
    }
    q->next_free = NULL;
    q->blocking = blocking;
    q->released = 0;
    return q;
}

/* A released queue goes to the free list once drained (caller holds g_lock). */
static void reuse_if_drained_locked(queue *q) {
    if (q->released && !q->head && q != &g_legacy) {
        q->released = 0;
        q->next_free = g_free;
        g_free = q;
    }
}

static void free_per_thread(void *p) {
    pthread_mutex_lock(&g_lock);
    queue *q = p;
    q->released = 1;
    reuse_if_drained_locked(q);
    pthread_mutex_unlock(&g_lock);
}

/* The queue of stream s, made on first use (NULL: no memory).  Caller holds g_lock. */
static queue *queue_of_locked(cudaStream_t s) {
    if (s == cudaStreamLegacy || (s == NULL && !tls_default_per_thread)) return &g_legacy;
    if (s == NULL || s == cudaStreamPerThread) {
        if (!tls_per_thread) {
            pthread_once(&g_per_thread_once, make_per_thread_key);
            tls_per_thread = new_queue_locked(1);
            if (tls_per_thread) pthread_setspecific(g_per_thread_key, tls_per_thread);
        }
        return tls_per_thread;
    }
    if (!s->queue) s->queue = new_queue_locked(!(s->flags & cudaStreamNonBlocking));
    return s->queue;
}

/* The items an item about to be queued on q waits for besides q's own earlier ones: the
 * legacy stream's order (see the top).  `sync`: only what synchronizing q waits for (a
 * blocking stream's sync does not wait for the legacy stream's later work).  Returns the
 * count written to out (at most max; more is reported as max + 1). */
static size_t implicit_deps_locked(const queue *q, int sync, dep *out, size_t max) {
    size_t n = 0;
    if (q->legacy) {
        for (queue *o = g_queues; o; o = o->next_all)
            if (o != q && o->blocking && o->issued > atomic_load(&o->done)) {
                if (n < max) out[n] = (dep){o, o->issued};
                n++;
            }
    } else if (q->blocking && !sync && g_legacy.issued > atomic_load(&g_legacy.done)) {
        if (n < max) out[n] = (dep){&g_legacy, g_legacy.issued};
        n++;
    }
    return n;
}

/* Waits (caller holds g_lock) for q's work issued so far and its implicit dependencies. */
static void wait_queue_order_locked(queue *q, int sync) {
    dep own = {q, q->issued};
    wait_dep_locked(own);
    for (;;) {
        dep d[8];
        size_t n = implicit_deps_locked(q, sync, d, 8);
        if (n == 0) break;
        /* (waiting releases the lock: count again until nothing is left) */
        for (size_t i = 0; i < n && i < 8; i++) wait_dep_locked(d[i]);
    }
}

/* Waits for all the work issued so far (caller holds g_lock). */
static void wait_all_locked(void) {
    for (queue *o = g_queues; o; o = o->next_all) wait_dep_locked((dep){o, o->issued});
}

/* ---- the queue threads ---- */

static void run_item(queue *q, item *it) {
    (void)q;
    switch (it->kind) {
    case ITEM_KERNEL:
        /* after a failed kernel (a sticky error) the device is unusable: later work does not
         * run */
        if (!cpuify_cudart_sticky()) {
            int rc = cpuify_cudart_run_launch(&it->u.launch, it->params);
            if (rc) {
                int zero = 0;
                atomic_compare_exchange_strong(&g_async_error, &zero, rc);
            }
        }
        break;
    case ITEM_COPY:
    case ITEM_MEMSET:
        if (!cpuify_cudart_sticky()) {
            cudaError_t e = it->kind == ITEM_COPY
                ? cpuify_cudart_run_copy(&it->u.copy)
                : cpuify_cudart_run_memset(it->u.set.dst, it->u.set.pitch, it->u.set.value,
                                           it->u.set.element_size, it->u.set.width, it->u.set.height);
            if (e) {
                int zero = 0;
                atomic_compare_exchange_strong(&g_async_error, &zero, (int)e);
            }
        }
        break;
    case ITEM_HOST:
        it->u.host.fn(it->u.host.data);
        break;
    case ITEM_CALLBACK:
        it->u.callback.fn(it->u.callback.stream, cpuify_cudart_sticky(), it->u.callback.data);
        break;
    case ITEM_RECORD:
    case ITEM_WAIT:
        break;
    }
}

/* An event's record reached: its time is now (unless a later record replaced it); a
 * destroyed event is freed with its last pending record.  Caller holds g_lock. */
static void record_reached_locked(item *it) {
    cudaEvent_t e = it->u.record.event;
    if (e->generation == it->u.record.generation) e->t_ns = cpuify_cudart_now_ns();
    if (--e->pending_records == 0 && e->magic != CPUIFY_EVENT_MAGIC) free(e);
}

static void *queue_thread_main(void *arg) {
    queue *q = arg;
    tls_stream_thread = 1;
    /* device printf reaches stdout at the next synchronizing call, as from a GPU's buffer */
    cpuify_printf_defer(1);
    pthread_mutex_lock(&g_lock);
    for (;;) {
        while (!q->head) pthread_cond_wait(&q->work, &g_lock);
        item *it = q->head;
        for (uint32_t i = 0; i < it->ndeps; i++) wait_dep_locked(it->deps[i]);
        int other = it->kind == ITEM_COPY || it->kind == ITEM_MEMSET || it->kind == ITEM_HOST ||
                    it->kind == ITEM_CALLBACK;
        if (it->kind == ITEM_RECORD) record_reached_locked(it);
        if (other) {
            g_other_running++;
            tell_host_state_locked();
        }
        if (it->kind != ITEM_RECORD && it->kind != ITEM_WAIT) {
            pthread_mutex_unlock(&g_lock);
            run_item(q, it);
            pthread_mutex_lock(&g_lock);
        }
        if (other) g_other_running--;
        q->head = it->next;
        if (!q->head) q->tail = NULL;
        uint64_t done = atomic_fetch_add(&q->done, 1) + 1;
        atomic_fetch_sub(&g_pending, 1);
        tell_host_state_locked();
        if (done >= q->wake_at) {
            q->wake_at = UINT64_MAX;   /* (a waiter still waiting sets it again) */
            pthread_cond_broadcast(&q->idle);
        }
        reuse_if_drained_locked(q);
        if (it->deps != it->inline_deps) free(it->deps);
        void *block = it->block;
        if (!it->in_block) free(it);
        free(block);
    }
    return NULL;
}

static void wait_at_exit(void) { cpuify_cudart_wait_launches(); }

/* fork: the child must not inherit work in flight (half a kernel's writes) nor queues their
 * missing threads would never run; the parent waits for every queue to drain and holds them
 * empty across the fork.  Registered after cudart.c's handlers, so this prepare handler runs
 * before theirs (work still running needs their locks). */
static void prepare_fork(void) {
    pthread_mutex_lock(&g_lock);
    while (atomic_load(&g_pending)) wait_all_locked();
    cpuify_printf_flush();   /* (else the child would print it too) */
}

static void parent_after_fork(void) { pthread_mutex_unlock(&g_lock); }

static void child_after_fork(void) {
    pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
    memcpy(&g_lock, &fresh, sizeof fresh);
    for (queue *q = g_queues; q; q = q->next_all) {
        pthread_cond_init(&q->work, NULL);
        pthread_cond_init(&q->idle, NULL);
        q->head = q->tail = NULL;
        atomic_store(&q->done, q->issued);
        q->wake_at = UINT64_MAX;
        q->started = 0;
    }
    atomic_store(&g_pending, 0);
    g_host_waiters = g_other_running = 0;
    cpuify_host_running(0);
}

/* Starts q's thread (caller holds g_lock); 0 when it runs.  It takes no asynchronous signal
 * (Ctrl-C and the program's own signals go to the program's threads), only the fault and
 * cancel signals of the kernels and copies it runs, as the pool's workers; its stack is a
 * worker's. */
static int start_locked(queue *q) {
    static int registered;
    if (q->started) return 0;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, (size_t)8 << 20);
    sigset_t all, old;
    sigfillset(&all);
    sigdelset(&all, SIGSEGV);
    sigdelset(&all, SIGBUS);
    sigdelset(&all, SIGFPE);
    sigdelset(&all, SIGILL);
#ifdef __linux__
    sigdelset(&all, SIGRTMAX - 3);   /* the runtime's cancel signal (cpuify_rt.c) */
#endif
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_t th;
    int rc = pthread_create(&th, &attr, queue_thread_main, q);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&attr);
    if (rc != 0) return -1;
    q->started = 1;
    if (!registered) {
        registered = 1;
        atexit(wait_at_exit);
        pthread_atfork(prepare_fork, parent_after_fork, child_after_fork);
    }
    return 0;
}

/* ---- issuing work ---- */

/* A new item with `extra` bytes of parameters: from batch b's block while it has room (b not
 * NULL), else its own memory. */
static item *new_item(item_kind kind, size_t extra, cpuify_cudart_batch *b) {
    size_t size = (sizeof(item) + extra + 15) & ~(size_t)15;
    item *it;
    if (b && b->block && b->block_used + size <= b->block_size) {
        it = (item *)(b->block + b->block_used);
        b->block_used += size;
        memset(it, 0, sizeof *it);
        it->in_block = 1;
        b->last_in_block = it;
    } else {
        it = calloc(1, sizeof *it + extra);
    }
    if (it) it->kind = kind;
    return it;
}

/* Waits for the order of stream s as an item queued now would (the fallback of a queue that
 * cannot be used: the work then runs at the call). */
static void wait_stream_order(cudaStream_t s, int sync);

/* Gives `it` its dependencies (caller holds g_lock): q's implicit ones (the legacy stream's
 * order) and `extra` (NULL or one more).  0: no memory. */
static int set_deps_locked(item *it, const queue *q, const dep *extra) {
    size_t n = implicit_deps_locked(q, 0, it->inline_deps, 0);
    size_t total = n + (extra != NULL);
    it->deps = total <= 2 ? it->inline_deps : malloc(total * sizeof *it->deps);
    if (!it->deps) return 0;
    if (n) implicit_deps_locked(q, 0, it->deps, n);
    if (extra) it->deps[n] = *extra;
    it->ndeps = (uint32_t)total;
    return 1;
}

/* Appends `it`, its dependencies set, to q (caller holds g_lock; q's thread is told by the
 * caller).  A record item's event is reached when it is. */
static void append_locked(queue *q, item *it) {
    if (it->kind == ITEM_RECORD) {
        cudaEvent_t e = it->u.record.event;
        e->pending_records++;
        e->queue = q;
        e->count = q->issued + 1;
    }
    if (q->tail) q->tail->next = it;
    else q->head = it;
    q->tail = it;
    q->issued++;
    atomic_fetch_add(&g_pending, 1);
}

/* Queues `it` on stream s after its dependencies (`extra`: one more, or NULL) and returns 1,
 * or frees it and returns 0: run the work now (CPUIFY_SYNC_LAUNCH=1, a queue thread calling,
 * no memory or thread: then after waiting for what it is ordered after). */
static int enqueue(item *it, cudaStream_t s, const dep *extra) {
    if (!it) {
        if (async_wanted() && !tls_stream_thread) {
            wait_stream_order(s, 0);
            if (extra) {
                pthread_mutex_lock(&g_lock);
                wait_dep_locked(*extra);
                pthread_mutex_unlock(&g_lock);
            }
        }
        return 0;
    }
    if (tls_stream_thread || !async_wanted()) {
        free(it);
        return 0;
    }
    pthread_mutex_lock(&g_lock);
    queue *q = queue_of_locked(s);
    if (!q || start_locked(q) != 0 || !set_deps_locked(it, q, extra)) {
        if (q) wait_queue_order_locked(q, 0);
        else wait_all_locked();   /* (no queue for s: no memory) */
        if (extra) wait_dep_locked(*extra);
        pthread_mutex_unlock(&g_lock);
        free(it);
        return 0;
    }
    /* a stream holds at most QUEUE_DEPTH items not yet run: issuing more waits for the
     * oldest, as a GPU's launch queue blocks the host when it is full (else a thread that
     * launches in a loop grows the queue without end, and every synchronizing call of
     * another thread waits for all of it) */
    if (q->issued - atomic_load(&q->done) >= QUEUE_DEPTH) {
        host_wait_begin_locked();
        wait_dep_locked((dep){q, q->issued - QUEUE_DEPTH + 1});
        host_wait_end_locked();
    }
    append_locked(q, it);
    pthread_cond_signal(&q->work);
    tell_host_state_locked();
    pthread_mutex_unlock(&g_lock);
    return 1;
}

static item *launch_item(const cpuify_cudart_launch *l, const unsigned char *params, cpuify_cudart_batch *b) {
    item *it = new_item(ITEM_KERNEL, l->param_bytes, b);
    if (it) {
        it->u.launch = *l;
        memcpy(it->params, params, l->param_bytes);
    }
    return it;
}

static item *copy_item(const cpuify_cudart_copy *c, cpuify_cudart_batch *b) {
    item *it = new_item(ITEM_COPY, 0, b);
    if (it) it->u.copy = *c;
    return it;
}

static item *memset_item(void *dst, size_t pitch, unsigned value, unsigned element_size, size_t width,
                         size_t height, cpuify_cudart_batch *b) {
    item *it = new_item(ITEM_MEMSET, 0, b);
    if (it) {
        it->u.set.dst = dst;
        it->u.set.pitch = pitch;
        it->u.set.value = value;
        it->u.set.element_size = element_size;
        it->u.set.width = width;
        it->u.set.height = height;
    }
    return it;
}

static item *host_item(cudaHostFn_t fn, void *data, cpuify_cudart_batch *b) {
    item *it = new_item(ITEM_HOST, 0, b);
    if (it) {
        it->u.host.fn = fn;
        it->u.host.data = data;
    }
    return it;
}

int cpuify_cudart_enqueue_launch(const cpuify_cudart_launch *l, const unsigned char *params,
                                 cudaStream_t s) {
    if (tls_stream_thread || !async_wanted()) return 0;
    return enqueue(launch_item(l, params, NULL), s, NULL);
}

int cpuify_cudart_enqueue_copy(const cpuify_cudart_copy *c, cudaStream_t s) {
    if (tls_stream_thread || !async_wanted()) return 0;
    return enqueue(copy_item(c, NULL), s, NULL);
}

int cpuify_cudart_enqueue_memset(void *dst, size_t pitch, unsigned value, size_t width, size_t height,
                                 cudaStream_t s) {
    if (tls_stream_thread || !async_wanted()) return 0;
    return enqueue(memset_item(dst, pitch, value, 1, width, height, NULL), s, NULL);
}

int cpuify_cudart_enqueue_host(cudaHostFn_t fn, void *data, cudaStream_t s) {
    if (tls_stream_thread || !async_wanted()) return 0;
    return enqueue(host_item(fn, data, NULL), s, NULL);
}

int cpuify_cudart_enqueue_callback(cudaStreamCallback_t fn, void *data, cudaStream_t s) {
    if (tls_stream_thread || !async_wanted()) return 0;
    item *it = new_item(ITEM_CALLBACK, 0, NULL);
    if (it) {
        it->u.callback.fn = fn;
        it->u.callback.stream = s;
        it->u.callback.data = data;
    }
    return enqueue(it, s, NULL);
}

/* ---- batches (graph launches) ---- */

static void batch_push(cpuify_cudart_batch *b, item *it) {
    if (!it) {
        b->failed = 1;
        return;
    }
    if (b->tail) b->tail->next = it;
    else b->head = it;
    b->tail = it;
    b->n++;
}

void cpuify_cudart_batch_launch(cpuify_cudart_batch *b, const cpuify_cudart_launch *l,
                                const unsigned char *params) {
    batch_push(b, launch_item(l, params, b));
}

void cpuify_cudart_batch_copy(cpuify_cudart_batch *b, const cpuify_cudart_copy *c) {
    batch_push(b, copy_item(c, b));
}

void cpuify_cudart_batch_memset(cpuify_cudart_batch *b, void *dst, size_t pitch, unsigned value,
                                unsigned element_size, size_t width, size_t height) {
    batch_push(b, memset_item(dst, pitch, value, element_size, width, height, b));
}

void cpuify_cudart_batch_host(cpuify_cudart_batch *b, cudaHostFn_t fn, void *data) {
    batch_push(b, host_item(fn, data, b));
}

void cpuify_cudart_batch_event(cpuify_cudart_batch *b, cudaEvent_t e, int record) {
    item *it = new_item(record ? ITEM_RECORD : ITEM_WAIT, 0, b);
    if (it) it->u.record.event = e;
    batch_push(b, it);
}

void cpuify_cudart_batch_reserve(cpuify_cudart_batch *b, size_t items, size_t param_bytes) {
    size_t size = items * ((sizeof(item) + 15) & ~(size_t)15) + param_bytes + items * 15;
    b->block = malloc(size);
    b->block_size = b->block ? size : 0;
}

static void batch_free(cpuify_cudart_batch *b) {
    for (item *it = b->head, *next; it; it = next) {
        next = it->next;
        if (!it->in_block) free(it);
    }
    free(b->block);
    memset(b, 0, sizeof *b);
}

static int mark_pending(const cpuify_cudart_mark *m) {
    return m && m->queue && atomic_load(&m->queue->done) < m->count;
}

int cpuify_cudart_enqueue_batch(cpuify_cudart_batch *b, cudaStream_t s, const cpuify_cudart_mark *after,
                                cpuify_cudart_mark *last) {
    dep prev = {after ? after->queue : NULL, after ? after->count : 0};
    /* the batch opens with an item that carries its dependencies on other queues */
    item *open = b->failed || tls_stream_thread || !async_wanted() ? NULL : new_item(ITEM_WAIT, 0, NULL);
    if (!open) {
        batch_free(b);
        return enqueue(NULL, s, mark_pending(after) ? &prev : NULL);
    }
    pthread_mutex_lock(&g_lock);
    queue *q = queue_of_locked(s);
    int after_other = prev.q && prev.q != q && !dep_done(prev);
    if (!q || start_locked(q) != 0 || !set_deps_locked(open, q, after_other ? &prev : NULL)) {
        if (q) wait_queue_order_locked(q, 0);
        else wait_all_locked();
        if (prev.q) wait_dep_locked(prev);
        pthread_mutex_unlock(&g_lock);
        free(open);
        batch_free(b);
        return 0;
    }
    append_locked(q, open);
    for (item *it = b->head, *next; it; it = next) {
        next = it->next;
        it->next = NULL;
        it->deps = it->inline_deps;
        if (it->kind == ITEM_WAIT) {
            /* the event's last record as of the launch (one made earlier in this batch
             * included), unless q reaches it in order anyway */
            cudaEvent_t e = it->u.record.event;
            dep d = {e->queue, e->count};
            if (d.q && d.q != q && !dep_done(d)) {
                it->inline_deps[0] = d;
                it->ndeps = 1;
            }
        } else if (it->kind == ITEM_RECORD) {
            it->u.record.generation = ++it->u.record.event->generation;
        }
        append_locked(q, it);
    }
    /* the block goes with the last item in it (queued items run in order), or now if unused */
    if (b->last_in_block) b->last_in_block->block = b->block;
    else free(b->block);
    memset(b, 0, sizeof *b);
    if (last) *last = (cpuify_cudart_mark){q, q->issued};
    pthread_cond_signal(&q->work);
    tell_host_state_locked();
    pthread_mutex_unlock(&g_lock);
    return 1;
}

void cpuify_cudart_wait_mark(const cpuify_cudart_mark *m) {
    if (tls_stream_thread || !mark_pending(m)) return;
    pthread_mutex_lock(&g_lock);
    host_wait_begin_locked();
    wait_dep_locked((dep){m->queue, m->count});
    host_wait_end_locked();
    pthread_mutex_unlock(&g_lock);
}

/* Whether stream s has nothing queued and nothing its next item would wait for (caller
 * holds g_lock): work on it may run at the call. */
static int stream_idle_locked(queue *q) {
    dep d[1];
    return !q->head && implicit_deps_locked(q, 0, d, 0) == 0;
}

void cpuify_cudart_record_event(cudaEvent_t e, cudaStream_t s) {
    pthread_mutex_lock(&g_lock);
    e->generation++;
    queue *q = tls_stream_thread ? NULL : queue_of_locked(s);
    if (!q || stream_idle_locked(q)) {
        /* nothing before it: the record is reached now */
        e->queue = NULL;
        e->t_ns = cpuify_cudart_now_ns();
        pthread_mutex_unlock(&g_lock);
        return;
    }
    uint64_t generation = e->generation;
    pthread_mutex_unlock(&g_lock);
    item *it = new_item(ITEM_RECORD, 0, NULL);
    if (it) {
        it->u.record.event = e;
        it->u.record.generation = generation;
    }
    if (!enqueue(it, s, NULL)) {
        /* (enqueue waited for the stream's order) */
        pthread_mutex_lock(&g_lock);
        e->queue = NULL;
        e->t_ns = cpuify_cudart_now_ns();
        pthread_mutex_unlock(&g_lock);
    }
}

void cpuify_cudart_stream_wait_event(cudaStream_t s, cudaEvent_t e) {
    pthread_mutex_lock(&g_lock);
    dep d = {e->queue, e->count};
    int pending = d.q && !dep_done(d);
    pthread_mutex_unlock(&g_lock);
    if (!pending) return;
    if (tls_stream_thread) return;   /* (no waiting on a queue thread) */
    item *it = new_item(ITEM_WAIT, 0, NULL);
    if (!enqueue(it, s, &d)) {
        pthread_mutex_lock(&g_lock);
        wait_dep_locked(d);
        pthread_mutex_unlock(&g_lock);
    }
}

/* ---- waiting ---- */

static void wait_stream_order(cudaStream_t s, int sync) {
    if (tls_stream_thread) return;
    pthread_mutex_lock(&g_lock);
    queue *q = queue_of_locked(s);
    host_wait_begin_locked();
    if (q) wait_queue_order_locked(q, sync);
    else wait_all_locked();
    host_wait_end_locked();
    pthread_mutex_unlock(&g_lock);
}

void cpuify_cudart_wait_stream(cudaStream_t s, int sync) {
    if (atomic_load(&g_pending)) wait_stream_order(s, sync);
    cpuify_printf_flush();
    cpuify_cudart_collect_launch_error();
}

int cpuify_cudart_stream_busy(cudaStream_t s) {
    if (atomic_load(&g_pending) == 0) return 0;
    pthread_mutex_lock(&g_lock);
    queue *q = queue_of_locked(s);
    dep d[1];
    int busy = q && (q->issued > atomic_load(&q->done) || implicit_deps_locked(q, 1, d, 0) > 0);
    pthread_mutex_unlock(&g_lock);
    return busy;
}

int cpuify_cudart_event_done(cudaEvent_t e, int wait) {
    pthread_mutex_lock(&g_lock);
    dep d = {e->queue, e->count};
    int done = !d.q || dep_done(d);
    if (!done && wait && !tls_stream_thread) {
        host_wait_begin_locked();
        wait_dep_locked(d);
        host_wait_end_locked();
        done = 1;
    }
    pthread_mutex_unlock(&g_lock);
    if (wait) {
        cpuify_printf_flush();
        cpuify_cudart_collect_launch_error();
    }
    return done;
}

void cpuify_cudart_event_reached(cudaEvent_t e) {
    pthread_mutex_lock(&g_lock);
    e->generation++;
    e->queue = NULL;
    e->t_ns = cpuify_cudart_now_ns();
    pthread_mutex_unlock(&g_lock);
}

int cpuify_cudart_event_release(cudaEvent_t e) {
    pthread_mutex_lock(&g_lock);
    e->magic = 0;
    int free_now = e->pending_records == 0;
    pthread_mutex_unlock(&g_lock);
    return free_now;
}

void cpuify_cudart_stream_release(cudaStream_t s) {
    pthread_mutex_lock(&g_lock);
    if (s->queue) {
        s->queue->released = 1;
        reuse_if_drained_locked(s->queue);
        s->queue = NULL;
    }
    pthread_mutex_unlock(&g_lock);
}

int cpuify_cudart_default_stream_per_thread(int on) {
    int old = tls_default_per_thread;
    tls_default_per_thread = on;
    return old;
}

void cpuify_cudart_collect_launch_error(void) {
    if (!atomic_load_explicit(&g_async_error, memory_order_relaxed)) return;
    int e = atomic_exchange(&g_async_error, 0);
    if (e) cpuify_cudart_fail((cudaError_t)e);
}

void cpuify_cudart_wait_launches(void) {
    if (tls_stream_thread) return;
    if (atomic_load(&g_pending)) {
        pthread_mutex_lock(&g_lock);
        host_wait_begin_locked();
        wait_all_locked();
        host_wait_end_locked();
        pthread_mutex_unlock(&g_lock);
    }
    cpuify_printf_flush();
    cpuify_cudart_collect_launch_error();
}
