/* cpuify's CUDA runtime: asynchronous kernel launches.
 *
 * A kernel launch from host code is checked on the calling thread (every error CUDA reports
 * at launch time stays synchronous: configuration, invalid function, a capture's refusal)
 * and then queued: the call returns and the host goes on while a runtime-owned launch
 * thread runs the queued launches in issue order, each on the whole worker pool (the launch
 * thread is the pool's launching thread).  Every other API call that touches device work or
 * memory (copies, memsets, synchronization, event records, frees, graph launches, ...) first
 * waits until the launches issued before it are done (cpuify_cudart_wait_launches): one of
 * the schedules CUDA allows, which keeps the observable order of everything else.  So host
 * threads started after a launch can feed the running kernel through system-scope atomics
 * and flags in managed or pinned memory, and host work between a launch and the next
 * synchronizing call overlaps the kernel, as on a GPU.
 *
 * Errors: a kernel that fails makes the error sticky as before; its error also becomes the
 * last error (cudaGetLastError) of the first host thread that synchronizes or asks for the
 * last error after it failed.  cudaGetLastError and cudaPeekAtLastError do not wait (on a
 * GPU they do not either: Chai's programs call cudaGetLastError right after a launch whose
 * kernel waits for host threads started after that call).  A launch queued after a kernel
 * failed does not run (the device is unusable, as on a GPU).
 *
 * Launches run inline (synchronously, on the calling thread) with CPUIFY_SYNC_LAUNCH=1
 * (debugging), in distributed execution (the MPI hooks are called from the host thread),
 * and when the queue cannot be used (no memory, no thread).  Device-side launches run with
 * their parent grid as before; graph launches and stream capture are unchanged (a graph
 * launch waits for the queue, then runs its nodes on the calling thread).
 *
 * Device printf of queued launches is kept (cpuify_printf_defer) and written to stdout when a
 * host thread next waits for the queue, as a GPU's printf buffer is flushed at synchronizing
 * calls: host output printed between a launch and that call comes first.
 *
 * Exit waits for the launches in flight (an atexit handler registered when the launch
 * thread starts: the kernels complete before the program's own atexit handlers and static
 * destructors run, as CUDA's teardown does); fork() waits for them too, and the child starts
 * with an empty queue and no launch thread (started again by its first launch).
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

typedef struct queued_launch {
    struct queued_launch *next;
    cpuify_cudart_launch launch;
    cudaStream_t stream;
    unsigned char params[];   /* the launch's own copy of the parameter buffer */
} queued_launch;

static pthread_mutex_t q_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t q_work = PTHREAD_COND_INITIALIZER;  /* the launch thread waits for work */
static pthread_cond_t q_idle = PTHREAD_COND_INITIALIZER;  /* host threads wait for launches */
static queued_launch *q_head, *q_tail;  /* under q_lock; the head stays queued while it runs */
static _Atomic uint64_t q_issued, q_done; /* launches queued / finished (written under q_lock) */
static int q_waiters;                   /* host threads waiting in cpuify_cudart_wait_launches */
/* the fewest launches done that wakes a waiter (UINT64_MAX: none waits): waking the waiters
 * at every launch of a long queue would cost them a context switch each */
static uint64_t q_wake_at = UINT64_MAX;
static int q_started;                   /* the launch thread runs */
static _Atomic int g_async_error;       /* the error of a failed queued launch, not yet seen */
static _Thread_local int tls_launch_thread;

/* CPUIFY_SYNC_LAUNCH=1 (any value but "" and "0"): every launch runs at the call */
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

/* Whether a host thread may still write memory a running kernel waits for: none waits for
 * the queue while launches are queued.  Told to the block scheduler, whose no-progress
 * detector (CPUIFY_DEADLOCK_TIMEOUT) cannot tell a deadlock from a host that has not yet
 * written a flag the kernel spins on (caller holds q_lock). */
static void tell_host_state_locked(void) {
    cpuify_host_running(q_head != NULL && q_waiters == 0);
}

static void *launch_thread_main(void *arg) {
    (void)arg;
    tls_launch_thread = 1;
    /* device printf reaches stdout at the next synchronizing call, as from a GPU's buffer:
     * after host output printed between the launch and that call */
    cpuify_printf_defer(1);
    pthread_mutex_lock(&q_lock);
    for (;;) {
        while (!q_head) pthread_cond_wait(&q_work, &q_lock);
        queued_launch *q = q_head;
        tell_host_state_locked();
        pthread_mutex_unlock(&q_lock);
        /* after a failed kernel (a sticky error) the device is unusable: later launches do
         * not run */
        if (!cpuify_cudart_sticky()) {
            int rc = cpuify_cudart_run_launch(&q->launch, q->params);
            if (rc) {
                int zero = 0;
                atomic_compare_exchange_strong(&g_async_error, &zero, rc);
            }
        }
        pthread_mutex_lock(&q_lock);
        q_head = q->next;
        if (!q_head) q_tail = NULL;
        uint64_t done = atomic_fetch_add(&q_done, 1) + 1;
        tell_host_state_locked();
        if (done >= q_wake_at) {
            q_wake_at = UINT64_MAX;   /* (a waiter still waiting sets it again) */
            pthread_cond_broadcast(&q_idle);
        }
        pthread_mutex_unlock(&q_lock);
        free(q);
        pthread_mutex_lock(&q_lock);
    }
    return NULL;
}

static void wait_at_exit(void) { cpuify_cudart_wait_launches(); }

/* fork: the child must not inherit a launch in flight (half a kernel's writes) nor a queue
 * its missing launch thread would never run; the parent waits for the queue to empty and
 * holds it empty across the fork.  Registered after cudart.c's handlers, so this prepare
 * handler runs before theirs (a launch still running needs their locks). */
static void prepare_fork(void) {
    pthread_mutex_lock(&q_lock);
    while (q_head) {
        uint64_t target = atomic_load(&q_issued);
        if (target < q_wake_at) q_wake_at = target;
        pthread_cond_wait(&q_idle, &q_lock);
    }
    cpuify_printf_flush();   /* (else the child would print it too) */
}

static void parent_after_fork(void) { pthread_mutex_unlock(&q_lock); }

static void child_after_fork(void) {
    pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
    pthread_cond_t fresh_cond = PTHREAD_COND_INITIALIZER;
    memcpy(&q_lock, &fresh, sizeof fresh);
    memcpy(&q_work, &fresh_cond, sizeof fresh_cond);
    memcpy(&q_idle, &fresh_cond, sizeof fresh_cond);
    q_head = q_tail = NULL;
    atomic_store(&q_done, atomic_load(&q_issued));
    q_waiters = 0;
    q_wake_at = UINT64_MAX;
    q_started = 0;
    cpuify_host_running(0);
}

/* Starts the launch thread (caller holds q_lock); 0 when it runs.  It takes no asynchronous
 * signal (Ctrl-C and the program's own signals go to the program's threads), only the fault
 * and cancel signals of the kernels it runs, as the pool's workers; its stack is a worker's. */
static int start_locked(void) {
    static int registered;
    if (q_started) return 0;
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
    int rc = pthread_create(&th, &attr, launch_thread_main, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&attr);
    if (rc != 0) return -1;
    q_started = 1;
    if (!registered) {
        registered = 1;
        atexit(wait_at_exit);
        pthread_atfork(prepare_fork, parent_after_fork, child_after_fork);
    }
    return 0;
}

int cpuify_cudart_enqueue_launch(const cpuify_cudart_launch *l, const unsigned char *params,
                                 cudaStream_t s) {
    if (tls_launch_thread || !async_wanted()) return 0;
    queued_launch *q = malloc(sizeof *q + l->param_bytes);
    if (!q) return 0;
    q->next = NULL;
    q->launch = *l;
    q->stream = s;
    memcpy(q->params, params, l->param_bytes);
    pthread_mutex_lock(&q_lock);
    if (start_locked() != 0) {
        pthread_mutex_unlock(&q_lock);
        free(q);
        return 0;
    }
    if (q_tail) q_tail->next = q;
    else q_head = q;
    q_tail = q;
    atomic_fetch_add(&q_issued, 1);
    pthread_cond_signal(&q_work);
    pthread_mutex_unlock(&q_lock);
    return 1;
}

void cpuify_cudart_collect_launch_error(void) {
    if (!atomic_load_explicit(&g_async_error, memory_order_relaxed)) return;
    int e = atomic_exchange(&g_async_error, 0);
    if (e) cpuify_cudart_fail((cudaError_t)e);
}

void cpuify_cudart_wait_launches(void) {
    if (tls_launch_thread) return;
    uint64_t target = atomic_load(&q_issued);
    if (atomic_load(&q_done) != target) {
        pthread_mutex_lock(&q_lock);
        target = atomic_load(&q_issued);
        if (atomic_load(&q_done) < target) {
            q_waiters++;
            tell_host_state_locked();
            while (atomic_load(&q_done) < target) {
                if (target < q_wake_at) q_wake_at = target;
                pthread_cond_wait(&q_idle, &q_lock);
            }
            q_waiters--;
            tell_host_state_locked();
        }
        pthread_mutex_unlock(&q_lock);
    }
    cpuify_printf_flush();
    cpuify_cudart_collect_launch_error();
}

/* a stream the legacy default stream waits for, and that waits for it */
static int blocking(cudaStream_t s) {
    return s == NULL || s == cudaStreamLegacy || s == cudaStreamPerThread ||
           !(s->flags & cudaStreamNonBlocking);
}

int cpuify_cudart_stream_busy(cudaStream_t s) {
    if (atomic_load(&q_done) == atomic_load(&q_issued)) return 0;
    int legacy = s == NULL || s == cudaStreamLegacy;
    int busy = 0;
    pthread_mutex_lock(&q_lock);
    for (queued_launch *q = q_head; q && !busy; q = q->next)
        busy = q->stream == s || (legacy && blocking(q->stream)) ||
               (blocking(s) && (q->stream == NULL || q->stream == cudaStreamLegacy));
    pthread_mutex_unlock(&q_lock);
    return busy;
}
