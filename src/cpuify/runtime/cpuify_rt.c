/* cpuify native runtime: a persistent worker pool that runs the thread blocks of a grid,
 * plus CUDA device-side printf.  See cpuify_rt.h for the API.
 *
 * Launch protocol (pool path)
 * ---------------------------
 * The launching thread (holding P.lock) writes the job description, publishes a new
 * generation number in P.entry (generation in the high 32 bits, a join count and a
 * CLOSED bit in the low 32 bits) and then in P.gen, the futex word pool workers wait on.
 * A worker that sees a new generation joins the job by incrementing the join count with a
 * CAS that also checks the generation and the CLOSED bit; only joined workers touch the
 * job.  Joined workers (and the caller) grab chunks of block ids from the atomic P.next,
 * guided: each grab takes 1/(2 * threads) of the blocks left, at least 1/(32 * threads)
 * of the grid.  The first chunks are long runs of consecutive blocks; the last ones are
 * short, so the threads run out of blocks at about the same time.  (Fixed chunks of 1/(8 *
 * threads) left a thread idle for half a chunk on average at the end of each launch: in
 * paired runs of the benchmark suite, guided chunks were 1.2-1.8% faster in geometric mean,
 * backprop, bfs and pathfinder 2-4.5%.)
 * When the caller runs out of blocks it sets CLOSED, which tells it how many workers
 * joined, and waits until that many have incremented P.finished.  A worker that wakes up
 * late therefore never delays a launch: it finds the job closed (or a newer generation)
 * and goes back to waiting.
 *
 * Idle workers spin after a job (so back-to-back launches find them awake), then sleep on
 * a futex; the launcher only issues FUTEX_WAKE when someone sleeps.  Each worker adapts its
 * spin to the gaps between the launches it sees (adapt_spin): a worker that slept and was
 * woken soon after spins long enough next time to cover such a gap (up to 2 ms, about what
 * libgomp spins), one that sleeps long spins less again (down to 20 us).  Waking a sleeping
 * worker takes tens of microseconds on a VM, so a program that launches kernels every few
 * hundred microseconds ran them on the launching thread alone for most of that time.
 * CPUIFY_SPIN_US fixes the spin instead.
 */
#define _GNU_SOURCE
/* a fault or cancel in a block that runs as a fiber jumps (siglongjmp) from the fiber's
 * stack to the worker's: fortified longjmp would take that for a corrupted stack */
#undef _FORTIFY_SOURCE
#include "cpuify_rt.h"

#include "cpuify_tex.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdalign.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <ucontext.h>
#include <wchar.h>
#include <sys/mman.h>

#ifdef __linux__
#include <linux/futex.h>
#include <sys/syscall.h>

#endif

/* the floating-point control word that holds the subnormal switches (x86: MXCSR) */
#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
static uint32_t fp_mode_get(void) { return _mm_getcsr(); }
static void fp_mode_set(uint32_t m) { _mm_setcsr(m); }
#else
static uint32_t fp_mode_get(void) { return 0; }
static void fp_mode_set(uint32_t m) { (void)m; }
#endif

#define CPUIFY_MAX_WORKERS 4096
#define NO_BLOCK UINT64_MAX  /* runner_t.block of a runner not in a block (none started yet,
                              * or a fiber worker between its fibers) */
#define CPUIFY_ALIGN 64
/* readable bytes around shared and scratch buffers (codegen/kernel_abi.py BUFFER_GUARD) */
#define CPUIFY_BUFFER_GUARD 256
#define CPUIFY_STACK_SIZE ((size_t)8 << 20)
#define CPUIFY_MIN_SPIN_NS 20000u     /* idle spin before sleeping: the adaptive range */
#define CPUIFY_MAX_SPIN_NS 2000000u

#define ENTRY_CLOSED 0x80000000u
#define ENTRY_COUNT_MASK 0x7fffffffu

/* The blocks a launch runs: lo[w] <= blockIdx.w < lo[w] + ext[w] (the whole grid, or the box
 * of cpuify_launch_range).  Its blocks are numbered 0 .. ext[0]*ext[1]*ext[2]-1, x fastest. */
typedef struct launch_box {
    uint32_t lo[3];
    uint32_t ext[3];
} launch_box;

/* The block of linear number l of box b. */
static inline void box_block(const launch_box *b, uint64_t l, uint32_t *bx, uint32_t *by,
                             uint32_t *bz) {
    *bx = b->lo[0] + (uint32_t)(l % b->ext[0]);
    uint64_t t = l / b->ext[0];
    *by = b->lo[1] + (uint32_t)(t % b->ext[1]);
    *bz = b->lo[2] + (uint32_t)(t / b->ext[1]);
}

/* ------------------------------------------------------------------------------------ */
/* small platform helpers                                                               */

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield" ::: "memory");
#else
    atomic_signal_fence(memory_order_seq_cst);
#endif
}

static inline uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void futex_wait(_Atomic uint32_t *addr, uint32_t expected) {
#ifdef __linux__
    syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAIT_PRIVATE, expected, NULL, NULL, 0);
#else
    (void)addr;
    (void)expected;
    struct timespec ts = {0, 50000};
    nanosleep(&ts, NULL);
#endif
}

static void futex_wake_all(_Atomic uint32_t *addr) {
#ifdef __linux__
    syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
#else
    (void)addr;
#endif
}

/* Spins until *addr != val or spin_ns elapsed; returns the last value seen. */
static uint32_t spin_while_equal(_Atomic uint32_t *addr, uint32_t val, uint64_t spin_ns) {
    uint32_t cur = atomic_load_explicit(addr, memory_order_acquire);
    if (cur != val || spin_ns == 0) return cur;
    uint64_t deadline = now_ns() + spin_ns;
    for (;;) {
        for (int i = 0; i < 32; i++) {
            cpu_relax();
            cur = atomic_load_explicit(addr, memory_order_acquire);
            if (cur != val) return cur;
        }
        if (now_ns() >= deadline) return cur;
    }
}

static uint64_t round_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

static void free_buffer(void *buf) {
    if (buf) free((char *)buf - CPUIFY_BUFFER_GUARD);
}

/* Grows *buf (64-byte aligned) to hold at least need bytes, with CPUIFY_BUFFER_GUARD
 * readable bytes before and after it: generated code may load a neighbour of a shared-
 * memory element that a thread then does not use (`c ? s[i - 1] : s[i]` as two plain
 * vector loads and a select), and such a load must not fault at the buffer's ends.
 * Returns 0 or -1.  Release with free_buffer. */
static int ensure_buffer(void **buf, uint64_t *cap, uint64_t need) {
    if (need < CPUIFY_ALIGN) need = CPUIFY_ALIGN;
    if (*buf && *cap >= need) return 0;
    if (need > (uint64_t)SIZE_MAX - 4096 - 2 * CPUIFY_BUFFER_GUARD) return -1;
    uint64_t size = round_up(need, CPUIFY_ALIGN);
    char *p = aligned_alloc(CPUIFY_ALIGN, (size_t)(size + 2 * CPUIFY_BUFFER_GUARD));
    if (!p) return -1;
    /* zeroed, as a GPU's shared memory usually reads at a program's first launch: code that
       reads a shared variable before any thread wrote it (Chai's CUDA-U TQH takes its queue
       index from one) sees 0 rather than what the heap held; later blocks see what earlier
       ones left, as on a GPU */
    memset(p, 0, (size_t)(size + 2 * CPUIFY_BUFFER_GUARD));
    free_buffer(*buf);
    *buf = p + CPUIFY_BUFFER_GUARD;
    *cap = size;
    return 0;
}

/* ------------------------------------------------------------------------------------ */
/* pool state                                                                           */

typedef struct slot {
    void *shared;
    uint64_t shared_cap;
    void *scratch;
    uint64_t scratch_cap;
    char pad[CPUIFY_ALIGN - 2 * sizeof(void *) - 2 * sizeof(uint64_t)];
} slot_t;

static struct pool {
    /* --- configuration, guarded by lock --- */
    pthread_mutex_t lock;    /* serializes launches and pool resizing */
    _Atomic int32_t requested; /* cpuify_set_num_workers value, 0 = default */
    slot_t *slots;           /* slot 0: the launching thread; slot i: pool thread i */
    int32_t nslots;
    int32_t nthreads;        /* pool threads alive (ids 1..nthreads) */
    uint64_t spin_ns;        /* CPUIFY_SPIN_US, or 0 when unset (adaptive spin) */

    /* --- wake-up --- */
    alignas(64) _Atomic uint32_t gen;      /* futex word: bumped once per launch */
    _Atomic int32_t sleepers;              /* pool threads in futex_wait on gen */
    _Atomic int32_t target_threads;        /* pool threads with id > this exit */
    _Atomic int32_t alive;                 /* pool threads running */
    _Atomic uint64_t worker_spin_ns;       /* 0: never spin (more workers than CPUs) */

    /* --- job admission / completion --- */
    alignas(64) _Atomic uint64_t entry;    /* gen << 32 | CLOSED | joined count */
    alignas(64) _Atomic uint32_t finished; /* futex word: joined workers done */
    _Atomic uint32_t caller_waiting;

    /* --- work distribution --- */
    alignas(64) _Atomic uint64_t next;     /* next linear block id to hand out */
    /* the launch's id << 8 | its first error code (0: none so far); one word, so that a
     * cancellation (watchdog, SIGINT) can only ever fail the launch it was meant for */
    alignas(64) _Atomic uint64_t state;
    _Atomic int32_t blamed;                /* err_block written */
    uint32_t err_block[3];
    uint64_t fault_addr;                   /* the fault that failed the launch, if one did */
    int32_t fault_sig;
    int32_t fault_access;

    /* --- the running launch (read by signal handlers and the monitor thread) --- */
    alignas(64) _Atomic uint64_t running_id;    /* id of the launch running now, 0: none */
    _Atomic uint64_t running_start;             /* its start (now_ns), with a watchdog */
    _Atomic uint64_t cancel_id;                 /* the launch whose runners must stop */
    _Atomic uint32_t monitor_asleep;            /* futex word of the monitor thread */
    uint64_t launch_seq;                        /* last id given out, under lock */

    /* --- job description: written by the launcher before publication, then read-only --- */
    alignas(64) cpuify_block_fn fn;
    uint64_t launch_id;
    const void *params;
    cpuify_dims dims;
    launch_box box;                        /* the blocks it runs (P.nblocks of them) */
    uint64_t nblocks;
    uint64_t chunk;                        /* the fewest blocks a grab takes */
    uint64_t share;                        /* a grab takes 1/share of the blocks left */
    uint64_t shared_bytes;
    uint64_t scratch_bytes;
    /* --- launches with yield points (fibers, see below) --- */
    int fibers;                            /* this job runs its blocks as fibers */
    uint64_t max_resident;                 /* the most blocks resident at once */
    alignas(64) _Atomic uint64_t resident; /* blocks started and not finished */
    _Atomic int32_t fiber_workers;         /* runners in the fiber job */
    _Atomic int32_t stalled;               /* of those, runners whose blocks all wait */
    _Atomic uint64_t progress_ns;          /* the last time a runner stalled or went on */
    _Atomic int32_t resident_full;         /* a runner found no room for another block */
    char message[768];                     /* why a launch failed with CPUIFY_ERR_DEADLOCK */
} P = {
    .lock = PTHREAD_MUTEX_INITIALIZER,
};

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static int32_t g_ncpus = 1;
static int32_t g_default_workers = 1;
static int g_fixed_spin;     /* CPUIFY_SPIN_US given: no adaptation */
static _Thread_local uint64_t tls_spin = CPUIFY_MIN_SPIN_NS; /* this worker's idle spin */
static _Thread_local int tls_in_block = 0;
/* a failure that device-side runtime calls (textures, surfaces) report for the running
 * block: cpuify_device_fault() sets it, the block loops return it as the block's error */
static _Thread_local int32_t tls_device_fault = 0;

static void nocancel_begin(void);
static void nocancel_end(void);

void cpuify_device_fault(int32_t code, const char *message) {
    if (tls_device_fault) return;
    tls_device_fault = code;
    nocancel_begin(); /* stderr's lock */
    fprintf(stderr, "cpuify: %s\n", message);
    fflush(stderr);
    nocancel_end();
}

/* the block's error code: what its function returned, else a device-side fault (`fault`:
 * this thread's tls_device_fault, its address taken once per run of blocks) */
static inline int32_t block_result(int32_t rc, int32_t *fault) {
    if (__builtin_expect(*fault != 0, 0)) {
        if (!rc) rc = *fault;
        *fault = 0;
    }
    return rc;
}

/* The longest idle spin of a worker: CPUIFY_SPIN_US when given, else the top of the
 * adaptive range (each worker adapts below it, wait_for_job). */
static uint64_t spin_cap(void) {
    return g_fixed_spin ? P.spin_ns : CPUIFY_MAX_SPIN_NS;
}

static int32_t count_cpus(void) {
#ifdef __linux__
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof(set), &set) == 0) {
        int n = CPU_COUNT(&set);
        if (n >= 1) return n;
    }
#endif
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n >= 1 ? (int32_t)(n > CPUIFY_MAX_WORKERS ? CPUIFY_MAX_WORKERS : n) : 1;
}

/* ------------------------------------------------------------------------------------ */
/* fault containment and cancellation                                                   */
/*
 * A thread that runs blocks of a launch (the launching thread as slot 0, pool thread i as
 * slot i) is a "runner": before its first block it saves a jump buffer (sigsetjmp, without
 * the signal mask: no system call) and marks itself armed.  Then
 *   - a memory fault (SIGSEGV, SIGBUS) or SIGILL/SIGFPE raised while it is armed is caught by
 *     fault_handler, which records the signal and address and siglongjmps back to the
 *     runner's loop: the block is abandoned, the launch fails with CPUIFY_ERR_ILLEGAL_ADDRESS
 *     (or CPUIFY_ERR_HARDWARE) and the other runners stop (below).  Faults of threads that
 *     are not armed go to the handler that was installed before ours (or the default one:
 *     a crash, as without cpuify).
 *   - cancel_launch (the watchdog, SIGINT from Python, a fault in another runner) marks the
 *     launch failed -- runners stop taking blocks -- and sends CANCEL_SIGNAL to each runner
 *     armed for it; cancel_handler jumps out of the block it is running, however long it
 *     spins.  Kernel code holds no locks, but the runtime functions kernels call may
 *     (printf's stdout lock, malloc's arena lock): those run as "no-cancel" sections, and a
 *     cancel that arrives inside one takes effect when it ends.
 * Blocks run inside one thread each, so an abandoned block leaves no other thread waiting
 * at one of its barriers; the pool's own state is only touched outside blocks.
 * Nothing of this costs a system call per launch or any work per block beyond storing the
 * block's index; hot loops are untouched (no polling at loop back-edges).
 */

typedef struct runner {
    sigjmp_buf jmp;
    volatile sig_atomic_t armed;       /* 1: running blocks, 2: a guarded host copy */
    volatile sig_atomic_t nocancel;    /* depth of no-cancel sections */
    volatile sig_atomic_t cancel_pending;
    volatile int32_t why;              /* after a jump: the CPUIFY_ERR_* code */
    volatile uint64_t launch_id;       /* the launch it runs blocks of */
    volatile uint64_t block;           /* linear index of the block it runs */
    void *volatile fault_addr;
    volatile int32_t fault_sig;
    volatile int32_t fault_access;     /* 1 write, 0 read, -1 unknown */
    pid_t tid;
    void *altstack;                    /* ours, or NULL when the thread had one */
} runner_t;

/* initial-exec: signal handlers read it, and the first access to a dynamic TLS variable
 * of a dlopen'ed library may allocate (not async-signal-safe) */
static __thread runner_t *tls_runner __attribute__((tls_model("initial-exec")));

#define ALTSTACK_SIZE ((size_t)64 << 10)

/* Which thread is armed for which launch (index: slot), read by cancel_launch. */
static struct armed_slot {
    _Atomic uint64_t launch;
    _Atomic int32_t tid;
    char pad[64 - sizeof(uint64_t) - sizeof(int32_t)];
} g_armed[CPUIFY_MAX_WORKERS];
static _Atomic int32_t g_armed_hi; /* slots below this were ever used */

static int g_cancel_signal;        /* 0: cancellation only between blocks */
static uint64_t g_timeout_ns;      /* CPUIFY_KERNEL_TIMEOUT, 0: no watchdog */
static uint64_t g_deadlock_ns = 2000000000u; /* CPUIFY_DEADLOCK_TIMEOUT (fibers, below) */
static uint64_t parse_deadlock_timeout(void);
static _Atomic int g_catch_sigint; /* cpuify_catch_interrupts(1) was called */
/* A SIGINT that came while no launch was running (now_ns | 1; 0: none), for the launch that
 * was on its way: Python's handler only raises KeyboardInterrupt between bytecodes, so a
 * Ctrl-C just before a launch starts would otherwise let it run to its end (or spin for
 * ever).  The next launch consumes it and stops at once if it came less than
 * SIGINT_CARRY_NS ago; cpuify_interrupt_seen() (Python's KeyboardInterrupt raised) drops it. */
static _Atomic uint64_t g_sigint_unseen;
#define SIGINT_CARRY_NS 200000000u
static _Atomic int g_monitor_started;
static struct sigaction g_old_segv, g_old_bus, g_old_ill, g_old_fpe;
static struct sigaction g_old_int[2]; /* the SIGINT handler ours chains to (double buffer) */
static _Atomic int g_old_int_idx;
static pthread_mutex_t g_sigint_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_key_t g_runner_key;

static pid_t current_tid(void) {
#ifdef __linux__
    return (pid_t)syscall(SYS_gettid);
#else
    return 0;
#endif
}

static void free_runner(void *p) {
    runner_t *r = p;
    if (!r) return;
    tls_runner = NULL;
    if (r->altstack) {
        stack_t ss;
        memset(&ss, 0, sizeof ss);
        ss.ss_flags = SS_DISABLE;
        sigaltstack(&ss, NULL);
        free(r->altstack);
    }
    free(r);
}

/* This thread's runner (created on first use, with a signal stack when the thread has
 * none, so that a stack overflow in a kernel is caught too); NULL when out of memory. */
__attribute__((noinline)) static runner_t *get_runner(void) {
    runner_t *r = tls_runner;
    if (r) return r;
    r = calloc(1, sizeof *r);
    if (!r) return NULL;
    r->tid = current_tid();
    r->fault_access = -1;
    stack_t old;
    if (sigaltstack(NULL, &old) == 0 && (old.ss_flags & SS_DISABLE)) {
        stack_t ss;
        ss.ss_sp = malloc(ALTSTACK_SIZE);
        ss.ss_size = ALTSTACK_SIZE;
        ss.ss_flags = 0;
        if (ss.ss_sp && sigaltstack(&ss, NULL) == 0) r->altstack = ss.ss_sp;
        else free(ss.ss_sp);
    }
    tls_runner = r;
    pthread_setspecific(g_runner_key, r);
    return r;
}

static void nocancel_begin(void) {
    runner_t *r = tls_runner;
    if (r) r->nocancel++;
}

static void nocancel_end(void) {
    runner_t *r = tls_runner;
    if (!r) return;
    if (--r->nocancel == 0 && r->cancel_pending && r->armed == 1) {
        r->cancel_pending = 0;
        r->why = 0;
        siglongjmp(r->jmp, 1);
    }
}

/* Sends the cancel signal to every thread armed for launch `id` (async-signal-safe). */
static void signal_runners(uint64_t id) {
    if (!g_cancel_signal) return;
#ifdef __linux__
    pid_t pid = getpid();
    int32_t hi = atomic_load(&g_armed_hi);
    for (int32_t i = 0; i < hi; i++)
        if (atomic_load(&g_armed[i].launch) == id)
            syscall(SYS_tgkill, pid, atomic_load(&g_armed[i].tid), g_cancel_signal);
#endif
}

/* Async-signal-safe: stops launch `id` with `reason` unless it already failed or ended. */
static void cancel_launch(uint64_t id, int32_t reason) {
    if (!id) return;
    uint64_t expect = id << 8;
    if (!atomic_compare_exchange_strong(&P.state, &expect, expect | (uint64_t)reason)) return;
    atomic_store(&P.cancel_id, id);
    signal_runners(id);
}

/* Leaves the signal handler for the runner's loop with the interrupted context's mask
 * (the jump buffer does not hold one). */
static void jump_out(runner_t *r, void *ucv) {
    ucontext_t *uc = ucv;
    if (uc) pthread_sigmask(SIG_SETMASK, &uc->uc_sigmask, NULL);
    siglongjmp(r->jmp, 1);
}

static void chain(const struct sigaction *old, int sig, siginfo_t *si, void *uc) {
    if (old->sa_flags & SA_SIGINFO) {
        if (old->sa_sigaction) old->sa_sigaction(sig, si, uc);
    } else if (old->sa_handler != SIG_IGN && old->sa_handler != SIG_DFL) {
        old->sa_handler(sig);
    } else {
        /* default action: put it back; the faulting instruction runs again and gets it */
        sigaction(sig, old, NULL);
    }
}

static void fault_handler(int sig, siginfo_t *si, void *ucv) {
    runner_t *r = tls_runner;
    if (r && r->armed) {
        r->fault_sig = sig;
        /* a fault re-raised by a handler in front of ours (faulthandler) comes with
         * no address: si_code <= 0 (SI_USER, SI_TKILL) */
        r->fault_addr = si && si->si_code > 0 ? si->si_addr : (void *)UINTPTR_MAX;
        r->fault_access = -1;
#if defined(__linux__) && defined(__x86_64__)
        if (ucv && sig == SIGSEGV && si && si->si_code > 0) /* page-fault error code: bit 1 set for a write */
            r->fault_access = (((ucontext_t *)ucv)->uc_mcontext.gregs[REG_ERR] & 2) ? 1 : 0;
#endif
        r->why = sig == SIGSEGV || sig == SIGBUS ? CPUIFY_ERR_ILLEGAL_ADDRESS : CPUIFY_ERR_HARDWARE;
        jump_out(r, ucv);
    }
    chain(sig == SIGSEGV ? &g_old_segv : sig == SIGBUS ? &g_old_bus
          : sig == SIGILL ? &g_old_ill : &g_old_fpe, sig, si, ucv);
}

static void cancel_handler(int sig, siginfo_t *si, void *ucv) {
    (void)sig;
    (void)si;
    runner_t *r = tls_runner;
    if (!r || r->armed != 1 || r->launch_id != atomic_load(&P.cancel_id)) return;
    if (r->nocancel) {
        r->cancel_pending = 1;
        return;
    }
    r->why = 0;
    jump_out(r, ucv);
}

static void sigint_handler(int sig, siginfo_t *si, void *uc) {
    int saved = errno;
    /* Python's handler first: it marks KeyboardInterrupt pending for when the launch returns */
    chain(&g_old_int[atomic_load(&g_old_int_idx)], sig, si, uc);
    /* marked before running_id is read (begin_launch_locked stores running_id before it
     * reads the mark; both seq_cst): a launch starting now sees one or the other */
    uint64_t mark = now_ns() | 1;
    atomic_store(&g_sigint_unseen, mark);
    uint64_t id = atomic_load(&P.running_id);
    if (id) {
        cancel_launch(id, CPUIFY_ERR_INTERRUPTED);
        atomic_compare_exchange_strong(&g_sigint_unseen, &mark, 0);
    }
    errno = saved;
}

/* Puts sigint_handler in front of the SIGINT handler installed now, when that is a
 * function (Python's): not over SIG_DFL (Ctrl-C ends the process anyway) or SIG_IGN. */
static void ensure_sigint_handler(void) {
    pthread_mutex_lock(&g_sigint_lock);
    struct sigaction cur;
    if (sigaction(SIGINT, NULL, &cur) == 0 && (cur.sa_flags & SA_SIGINFO
            ? cur.sa_sigaction != sigint_handler
            : cur.sa_handler != SIG_DFL && cur.sa_handler != SIG_IGN)) {
        int idx = !atomic_load(&g_old_int_idx);
        g_old_int[idx] = cur;
        atomic_store(&g_old_int_idx, idx);
        struct sigaction sa = cur;
        sa.sa_sigaction = sigint_handler;
        sa.sa_flags = cur.sa_flags | SA_SIGINFO;
        /* a cancel signal sent to this thread by our own handler waits until it returns */
        if (g_cancel_signal) sigaddset(&sa.sa_mask, g_cancel_signal);
        sigaction(SIGINT, &sa, NULL);
    }
    pthread_mutex_unlock(&g_sigint_lock);
}

static void install_handlers(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = fault_handler;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, &g_old_segv);
    sigaction(SIGBUS, &sa, &g_old_bus);
    sigaction(SIGILL, &sa, &g_old_ill);
    sigaction(SIGFPE, &sa, &g_old_fpe);
#ifdef __linux__
    /* a real-time signal nobody handles: SIGRTMAX - 3 (glibc keeps the lowest ones) */
    int cs = SIGRTMAX - 3;
    struct sigaction cur;
    if (cs > SIGRTMIN && sigaction(cs, NULL, &cur) == 0 && !(cur.sa_flags & SA_SIGINFO) &&
        cur.sa_handler == SIG_DFL) {
        sa.sa_sigaction = cancel_handler;
        sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESTART;
        if (sigaction(cs, &sa, NULL) == 0) g_cancel_signal = cs;
    }
#endif
}

/* Marks the calling thread as running blocks of launch `id` in `slot`. */
static void arm_slot(int32_t slot, uint64_t id, pid_t tid) {
    atomic_store_explicit(&g_armed[slot].tid, tid, memory_order_relaxed);
    atomic_store_explicit(&g_armed[slot].launch, id, memory_order_release);
    if (slot >= atomic_load_explicit(&g_armed_hi, memory_order_relaxed)) {
        int32_t hi = atomic_load(&g_armed_hi);
        while (hi <= slot && !atomic_compare_exchange_weak(&g_armed_hi, &hi, slot + 1)) {}
    }
}

/* ------------------------------------------------------------------------------------ */
/* the monitor thread: watchdog (CPUIFY_KERNEL_TIMEOUT) and keeping our SIGINT handler in
 * front of Python's (ipykernel, for one, installs its own around every cell)             */

#define MONITOR_IDLE_NS 1000000000u /* asleep after this long without a launch */

static uint64_t monitor_tick_ns(void) {
    uint64_t t = g_timeout_ns ? g_timeout_ns / 10 : 50000000u;
    if (t < 1000000u) t = 1000000u;
    if (t > 50000000u) t = 50000000u;
    return t;
}

static void *monitor_main(void *arg) {
    (void)arg;
    const uint64_t tick = monitor_tick_ns();
    uint64_t last_busy = now_ns();
    for (;;) {
        uint64_t id = atomic_load(&P.running_id);
        uint64_t t = now_ns();
        if (id) {
            last_busy = t;
            if (g_timeout_ns) {
                uint64_t start = atomic_load(&P.running_start);
                if (atomic_load(&P.running_id) == id && t > start && t - start >= g_timeout_ns)
                    cancel_launch(id, CPUIFY_ERR_TIMEOUT);
            }
            if (atomic_load(&g_catch_sigint)) ensure_sigint_handler();
        } else if (t - last_busy >= MONITOR_IDLE_NS) {
            atomic_store(&P.monitor_asleep, 1);
            if (atomic_load(&P.running_id) == 0) futex_wait(&P.monitor_asleep, 1);
            atomic_store(&P.monitor_asleep, 0);
            last_busy = now_ns();
            continue;
        }
        struct timespec ts = {(time_t)(tick / 1000000000u), (long)(tick % 1000000000u)};
        nanosleep(&ts, NULL);
    }
    return NULL;
}

/* Starts the monitor when something needs it (caller holds P.lock). */
static void start_monitor_locked(void) {
    if (atomic_load_explicit(&g_monitor_started, memory_order_relaxed)) return;
    if (!g_timeout_ns && !atomic_load(&g_catch_sigint)) return;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, (size_t)256 << 10);
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_t th;
    if (pthread_create(&th, &attr, monitor_main, NULL) == 0)
        atomic_store(&g_monitor_started, 1);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&attr);
}

static uint64_t parse_timeout(void) {
    const char *env = getenv("CPUIFY_KERNEL_TIMEOUT");
    if (!env || !*env) return 0;
    char *end = NULL;
    double v = strtod(env, &end);
    while (end && (*end == ' ' || *end == '\t' || *end == '\n')) end++;
    if (!end || *end != '\0' || !(v >= 0) || v > 1e9) {
        fprintf(stderr, "cpuify: CPUIFY_KERNEL_TIMEOUT=%s is not a number of seconds; "
                        "no kernel watchdog\n", env);
        return 0;
    }
    return (uint64_t)(v * 1e9);
}

static void reset_deferred_printf(void);

static void atfork_child(void) {
    /* Pool threads do not exist in the child: start over with a fresh, empty pool. */
    pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
    memcpy(&P.lock, &fresh, sizeof(fresh));
    P.nthreads = 0;
    atomic_store(&P.alive, 0);
    atomic_store(&P.target_threads, 0);
    atomic_store(&P.sleepers, 0);
    atomic_store(&P.caller_waiting, 0);
    tls_in_block = 0;
    /* neither are the monitor thread and any launch another thread was running */
    atomic_store(&g_monitor_started, 0);
    atomic_store(&P.monitor_asleep, 0);
    atomic_store(&P.running_id, 0);
    atomic_store(&g_sigint_unseen, 0);
    for (int32_t i = 0; i < atomic_load(&g_armed_hi); i++) atomic_store(&g_armed[i].launch, 0);
    pthread_mutex_t fresh_sigint = PTHREAD_MUTEX_INITIALIZER;
    memcpy(&g_sigint_lock, &fresh_sigint, sizeof(fresh_sigint));
    reset_deferred_printf();
    runner_t *r = tls_runner;
    if (r) {
        r->armed = 0;
        r->nocancel = 0;
        r->cancel_pending = 0;
        r->tid = current_tid();
    }
}

static void global_init(void) {
    g_ncpus = count_cpus();
    int32_t n = g_ncpus;
    const char *env = getenv("CPUIFY_NUM_THREADS");
    if (env && *env) {
        char *end = NULL;
        long v = strtol(env, &end, 10);
        while (end && (*end == ' ' || *end == '\t' || *end == '\n')) end++;
        if (end && *end == '\0' && v >= 1) n = (int32_t)(v > CPUIFY_MAX_WORKERS ? CPUIFY_MAX_WORKERS : v);
    }
    g_default_workers = n;
    uint64_t spin = 0;
    const char *senv = getenv("CPUIFY_SPIN_US");
    if (senv && *senv) {
        char *end = NULL;
        long v = strtol(senv, &end, 10);
        if (end && *end == '\0' && v >= 0) {
            spin = (uint64_t)v * 1000u;
            g_fixed_spin = 1;
        }
    }
    P.spin_ns = spin;
    atomic_store(&P.worker_spin_ns, spin_cap());
    g_timeout_ns = parse_timeout();
    g_deadlock_ns = parse_deadlock_timeout();
    pthread_key_create(&g_runner_key, free_runner);
    install_handlers();
    pthread_atfork(NULL, NULL, atfork_child);
}

static int32_t workers_locked(void) {
    int32_t r = atomic_load_explicit(&P.requested, memory_order_relaxed);
    return r > 0 ? r : g_default_workers;
}

/* ------------------------------------------------------------------------------------ */
/* running blocks                                                                       */

static inline int32_t launch_error(void) {
    return (int32_t)(atomic_load_explicit(&P.state, memory_order_relaxed) & 0xff);
}

static void blame(uint32_t bx, uint32_t by, uint32_t bz) {
    int32_t zero = 0;
    if (atomic_compare_exchange_strong(&P.blamed, &zero, 1)) {
        P.err_block[0] = bx;
        P.err_block[1] = by;
        P.err_block[2] = bz;
    }
}

/* Fails launch `id` with rc (the first error wins); returns whether this one did. */
static int record_error(uint64_t id, int32_t rc, uint32_t bx, uint32_t by, uint32_t bz) {
    uint64_t expect = id << 8;
    if (!atomic_compare_exchange_strong_explicit(&P.state, &expect, expect | (uint32_t)rc,
                                                 memory_order_acq_rel, memory_order_relaxed))
        return 0;
    blame(bx, by, bz);
    return 1;
}

/* Runs chunks of the current pool job on this thread with the given buffers. */
static void job_blocks(runner_t *r, void *shared, void *scratch) {
    const cpuify_block_fn fn = P.fn;
    const void *params = P.params;
    const cpuify_dims *dims = &P.dims;
    const launch_box *box = &P.box;
    const uint64_t nblocks = P.nblocks, chunk = P.chunk, share = P.share, id = P.launch_id;
    const uint32_t x0 = box->lo[0], x1 = x0 + box->ext[0], y0 = box->lo[1], y1 = y0 + box->ext[1];
    int32_t *const fault = &tls_device_fault;
    uint64_t start = atomic_load_explicit(&P.next, memory_order_relaxed);
    for (;;) {
        if (launch_error()) return;
        if (start >= nblocks) return;
        /* guided: a share of what is left, at least `chunk` blocks */
        uint64_t take = (nblocks - start) / share;
        if (take < chunk) take = chunk;
        if (!atomic_compare_exchange_weak_explicit(&P.next, &start, start + take,
                                                   memory_order_relaxed, memory_order_relaxed))
            continue;
        uint64_t end = start + take < nblocks ? start + take : nblocks;
        uint32_t bx, by, bz;
        box_block(box, start, &bx, &by, &bz);
        for (uint64_t l = start;;) {
            r->block = l;
            int32_t rc = block_result(fn(params, dims, bx, by, bz, shared, scratch), fault);
            if (rc) {
                record_error(id, rc, bx, by, bz);
                return;
            }
            if (++l >= end) break;
            if (++bx == x1) {
                bx = x0;
                if (++by == y1) {
                    by = y0;
                    ++bz;
                }
            }
            if (launch_error()) return;
        }
        start = atomic_load_explicit(&P.next, memory_order_relaxed);
    }
}

/* Runs every block of the box on this thread, stopping at the first error (the launch's
 * own, or one another thread recorded: a cancel). */
static void serial_blocks(runner_t *r, uint64_t id, cpuify_block_fn fn, const void *params,
                          const cpuify_dims *dims, const launch_box *box, void *shared,
                          void *scratch) {
    const uint32_t x0 = box->lo[0], y0 = box->lo[1], z0 = box->lo[2];
    const uint32_t x1 = x0 + box->ext[0], y1 = y0 + box->ext[1], z1 = z0 + box->ext[2];
    int32_t *const fault = &tls_device_fault;
    uint64_t l = 0;
    for (uint32_t bz = z0; bz < z1; bz++)
        for (uint32_t by = y0; by < y1; by++)
            for (uint32_t bx = x0; bx < x1; bx++, l++) {
                r->block = l;
                int32_t rc = block_result(fn(params, dims, bx, by, bz, shared, scratch), fault);
                if (rc) {
                    record_error(id, rc, bx, by, bz);
                    return;
                }
                if (launch_error()) return;
            }
}

/* ------------------------------------------------------------------------------------ */
/* blocks as fibers: forward progress for kernels with yield points                    */
/*
 * A kernel whose threads may wait for other threads by spinning on memory (a lock, a flag
 * another block sets, grid.sync()) has yield points on the back edges of those loops
 * (transforms/progress.py).  The block scheduler runs the other threads of the block while
 * some spin; when a round of the spinning threads moves none of them, cpuify_block_wait
 * hands the worker to other blocks.  For that, each block of such a launch runs on a fiber
 * (ucontext, its own stack, shared memory and scratch): a runner keeps several resident
 * blocks and goes round them; it starts another block (up to P.max_resident over all
 * runners) when every block it holds waits.  Blocks are started in grid order, so a block
 * that waits only for blocks before it (a chained scan) always finds them started.
 *
 * Never hang: a runner whose blocks all wait and that can start none is "stalled"; when
 * every runner of the launch is stalled and none went on for CPUIFY_DEADLOCK_TIMEOUT
 * seconds (default 2), nothing can change the memory they wait for: the launch fails with
 * CPUIFY_ERR_DEADLOCK and a message naming the block, thread and loop (and whether blocks
 * were left that the co-resident limit kept from starting).
 *
 * Faults and cancellation jump from the fiber's stack to the runner's (sigsetjmp in
 * run_guarded, on the runner's own stack): the fibers are abandoned (fibers_leave), their
 * stacks and buffers kept for the next launch.
 */

#define FIBER_STACK_SIZE ((size_t)1 << 20)

/* Switching fibers: on x86-64 a few instructions that keep the callee-saved registers, the
 * SSE and x87 control words (swapcontext also sets the signal mask: a system call per
 * switch: 17.9 -> 8.1 us of CPU per grid.sync of 32 blocks x 32 threads on one worker);
 * elsewhere ucontext. */
#if defined(__x86_64__) && defined(__ELF__)
#define FAST_SWITCH 1
/* saves the caller's registers on its stack and the stack pointer in *save, continues on
 * the stack `load` (saved by an earlier switch, or made by fiber_start_at_entry) */
__attribute__((visibility("hidden"))) void cpuify_fiber_switch(void **save, void *load);
__asm__(".text\n"
        ".p2align 4\n"
        ".globl cpuify_fiber_switch\n"
        ".hidden cpuify_fiber_switch\n"
        ".type cpuify_fiber_switch,@function\n"
        "cpuify_fiber_switch:\n"
        "    pushq %rbp\n"
        "    pushq %rbx\n"
        "    pushq %r12\n"
        "    pushq %r13\n"
        "    pushq %r14\n"
        "    pushq %r15\n"
        "    subq $8, %rsp\n"
        "    stmxcsr (%rsp)\n"
        "    fnstcw 4(%rsp)\n"
        "    movq %rsp, (%rdi)\n"
        "    movq %rsi, %rsp\n"
        "    ldmxcsr (%rsp)\n"
        "    fldcw 4(%rsp)\n"
        "    addq $8, %rsp\n"
        "    popq %r15\n"
        "    popq %r14\n"
        "    popq %r13\n"
        "    popq %r12\n"
        "    popq %rbx\n"
        "    popq %rbp\n"
        "    ret\n"
        ".size cpuify_fiber_switch, .-cpuify_fiber_switch\n");
#else
#define FAST_SWITCH 0
#endif

typedef struct fiber {
#if FAST_SWITCH
    void *sp;                    /* its stack pointer while it does not run */
#else
    ucontext_t ctx;
#endif
    char *stack;                 /* mmap'ed, a guard page below */
    void *shared;
    uint64_t shared_cap;
    void *scratch;
    uint64_t scratch_cap;
    uint64_t block;              /* linear block index */
    uint32_t bx, by, bz;
    int active;                  /* holds a block */
    int done;                    /* the block returned rc */
    int32_t rc;
    int waiting;                 /* stopped in cpuify_block_wait */
    const char *where;           /* ... at this loop */
    uint32_t thread;             /* ... with this thread back at it */
} fiber_t;

typedef struct fiber_set {
    fiber_t **f;
    int32_t n, cap;
#if FAST_SWITCH
    void *home_sp;               /* the runner's stack pointer while a fiber runs */
#else
    ucontext_t home;             /* the runner's own context */
#endif
    fiber_t *cur;                /* the fiber running now, NULL: the runner */
    int joined;                  /* counted in P.fiber_workers */
    int stalled;                 /* counted in P.stalled */
    uint64_t stalled_since;
} fiber_set;

/* (pointers: the library's TLS must stay small, it goes in the static TLS block) */
static __thread fiber_set *tls_fibers;
/* the grid workspace of the running cooperative launch (%envreg1:%envreg2), else NULL */
static uint64_t g_workspace_mem[16] __attribute__((aligned(64)));
static _Atomic(uint64_t *) g_workspace;
/* a block waiting outside a fiber (a grid launched from a block): since when */
static __thread uint64_t tls_wait_since;
static _Thread_local char *tls_last_message;

static uint64_t parse_deadlock_timeout(void) {
    const char *env = getenv("CPUIFY_DEADLOCK_TIMEOUT");
    if (!env || !*env) return 2000000000u;
    char *end = NULL;
    double v = strtod(env, &end);
    if (!end || *end != '\0' || !(v > 0) || v > 1e6) {
        fprintf(stderr, "cpuify: CPUIFY_DEADLOCK_TIMEOUT=%s is not a number of seconds; "
                        "using 2\n", env);
        return 2000000000u;
    }
    return (uint64_t)(v * 1e9);
}

uint32_t cpuify_envreg(int32_t index) {
    uint64_t w = (uint64_t)(uintptr_t)atomic_load_explicit(&g_workspace, memory_order_relaxed);
    if (index == 1) return (uint32_t)(w >> 32);
    if (index == 2) return (uint32_t)w;
    return 0;
}

static void fiber_entry(void) {
    fiber_t *f = tls_fibers->cur;
    f->rc = block_result(P.fn(P.params, &P.dims, f->bx, f->by, f->bz, f->shared, f->scratch),
                         &tls_device_fault);
    f->done = 1;
#if FAST_SWITCH
    cpuify_fiber_switch(&f->sp, tls_fibers->home_sp); /* never resumed */
    __builtin_unreachable();
#endif
    /* (ucontext) returns to uc_link: the runner */
}

/* Runs the fiber `f` of `fs` until its block waits or ends. */
static inline void fiber_resume(fiber_set *fs, fiber_t *f) {
#if FAST_SWITCH
    cpuify_fiber_switch(&fs->home_sp, f->sp);
#else
    swapcontext(&fs->home, &f->ctx);
#endif
}

/* Prepares `f` to run fiber_entry from the top of its stack. */
static void fiber_start_at_entry(fiber_set *fs, fiber_t *f) {
#if FAST_SWITCH
    (void)fs;
    uint64_t *top = (uint64_t *)(void *)(f->stack + FIBER_STACK_SIZE); /* 16-byte aligned */
    uint32_t mxcsr = __builtin_ia32_stmxcsr();
    uint16_t fcw;
    __asm__ volatile("fnstcw %0" : "=m"(fcw));
    top[-1] = 0;                                      /* fiber_entry's return address */
    top[-2] = (uint64_t)(uintptr_t)fiber_entry;       /* where the switch returns to */
    for (int i = 3; i <= 8; i++) top[-i] = 0;         /* rbp rbx r12 r13 r14 r15 */
    top[-9] = (uint64_t)mxcsr | (uint64_t)fcw << 32;
    f->sp = &top[-9];
#else
    getcontext(&f->ctx);
    f->ctx.uc_stack.ss_sp = f->stack;
    f->ctx.uc_stack.ss_size = FIBER_STACK_SIZE;
    f->ctx.uc_link = &fs->home;
    makecontext(&f->ctx, fiber_entry, 0);
#endif
}

/* Whether time `t` is more than `span` after `last`.  `last` may be later than `t`: another
 * runner notes progress between our reading the clock and reading its note (t - last would
 * wrap around to centuries and fail a launch that is going on: seen under load). */
static inline int later_by(uint64_t t, uint64_t last, uint64_t span) {
    return t > last && t - last > span;
}

/* cpuify_host_running: a host thread may write what the blocks wait for (no deadlock can be
 * told), and since when none may (the no-progress clock starts no earlier) */
static _Atomic int g_host_runs;
static _Atomic uint64_t g_host_quiet_ns;

void cpuify_host_running(int32_t running) {
    if (running) {
        atomic_store(&g_host_runs, 1);
    } else if (atomic_load(&g_host_runs)) {
        atomic_store(&g_host_quiet_ns, now_ns());
        atomic_store(&g_host_runs, 0);
    }
}

/* Whether the blocks of a launch that all wait, the last of them having got anywhere at
 * `progress`, have waited long enough at t to be a deadlock. */
static int no_progress_for_long(uint64_t t, uint64_t progress) {
    if (atomic_load_explicit(&g_host_runs, memory_order_relaxed)) return 0;
    uint64_t quiet = atomic_load_explicit(&g_host_quiet_ns, memory_order_relaxed);
    return later_by(t, progress > quiet ? progress : quiet, g_deadlock_ns);
}

static void note_progress(void) {
    atomic_store_explicit(&P.progress_ns, now_ns(), memory_order_relaxed);
}

static void unstall(fiber_set *fs) {
    if (fs->stalled) {
        fs->stalled = 0;
        atomic_fetch_sub(&P.stalled, 1);
        note_progress();
    }
}

void cpuify_block_progress(void) {
    tls_wait_since = 0;
    fiber_set *fs = tls_fibers;
    if (fs && fs->stalled) unstall(fs);
}

/* Leaves the fiber job (also after a jump out of a fiber): the blocks held are abandoned. */
static void fibers_leave(fiber_set *fs) {
    if (!fs) return;
    fs->cur = NULL;
    for (int32_t i = 0; i < fs->n; i++) {
        fiber_t *f = fs->f[i];
        if (f->active) {
            f->active = 0;
            atomic_fetch_sub(&P.resident, 1);
        }
    }
    if (fs->stalled) {
        fs->stalled = 0;
        atomic_fetch_sub(&P.stalled, 1);
    }
    if (fs->joined) {
        fs->joined = 0;
        atomic_fetch_sub(&P.fiber_workers, 1);
    }
}

/* A free fiber of this runner (grown as needed); NULL when out of memory. */
static fiber_t *free_fiber(fiber_set *fs) {
    for (int32_t i = 0; i < fs->n; i++)
        if (!fs->f[i]->active) return fs->f[i];
    if (fs->n == fs->cap) {
        int32_t cap = fs->cap ? 2 * fs->cap : 8;
        fiber_t **nf = realloc(fs->f, (size_t)cap * sizeof *nf);
        if (!nf) return NULL;
        fs->f = nf;
        fs->cap = cap;
    }
    fiber_t *f = calloc(1, sizeof *f);
    if (!f) return NULL;
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    void *mem = mmap(NULL, FIBER_STACK_SIZE + page, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
    if (mem == MAP_FAILED) {
        free(f);
        return NULL;
    }
    mprotect(mem, page, PROT_NONE); /* a stack overflow faults (and is contained) */
    f->stack = (char *)mem + page;
    fs->f[fs->n++] = f;
    return f;
}

/* Starts the next block of the grid on a fiber of this runner; 0 when none is left or
 * P.max_resident blocks are resident (P.resident_full), 1 when started, -1 on an error
 * (recorded). */
static int start_block(fiber_set *fs, uint64_t id) {
    uint64_t res = atomic_fetch_add(&P.resident, 1);
    if (P.max_resident && res >= P.max_resident) {
        atomic_fetch_sub(&P.resident, 1);
        if (atomic_load_explicit(&P.next, memory_order_relaxed) < P.nblocks)
            atomic_store(&P.resident_full, 1);
        return 0;
    }
    uint64_t l = atomic_fetch_add(&P.next, 1);
    if (l >= P.nblocks) {
        atomic_fetch_sub(&P.resident, 1);
        return 0;
    }
    uint32_t bx, by, bz;
    box_block(&P.box, l, &bx, &by, &bz);
    /* malloc's locks: a cancel (another runner's fault, Ctrl-C, the watchdog) jumping out of
     * the allocator would leave its arena locked, and the next launch's runner would wait
     * on it for ever (seen in CI: a worker stuck in memalign under start_block) */
    nocancel_begin();
    fiber_t *f = free_fiber(fs);
    int bad = !f || ensure_buffer(&f->shared, &f->shared_cap, P.shared_bytes) ||
              ensure_buffer(&f->scratch, &f->scratch_cap, P.scratch_bytes);
    if (bad) {
        atomic_fetch_sub(&P.resident, 1);
        record_error(id, CPUIFY_ERR_OUT_OF_MEMORY, bx, by, bz);
    }
    nocancel_end();
    if (bad) return -1;
    fiber_start_at_entry(fs, f);
    f->block = l;
    f->bx = bx;
    f->by = by;
    f->bz = bz;
    f->active = 1;
    f->done = 0;
    f->waiting = 0;
    f->rc = 0;
    unstall(fs);
    note_progress();
    return 1;
}

/* Fails the launch: every runner's blocks wait, for longer than the timeout. */
static void fail_deadlock(fiber_set *fs, uint64_t id) {
    fiber_t *w = NULL;
    int32_t held = 0;
    for (int32_t i = 0; i < fs->n; i++)
        if (fs->f[i]->active) {
            held++;
            if (!w) w = fs->f[i];
        }
    char msg[sizeof P.message];
    uint64_t next = atomic_load(&P.next);
    uint64_t left = next < P.nblocks ? P.nblocks - next : 0;
    int n = snprintf(msg, sizeof msg,
                     "every thread of the launch waits in a spin-wait loop and none got "
                     "anywhere for %.1f s: block (%u, %u, %u), thread %u waits in %s: it "
                     "waits for memory that no running thread writes",
                     (double)g_deadlock_ns / 1e9, w ? w->bx : 0, w ? w->by : 0, w ? w->bz : 0,
                     w ? w->thread : 0, w && w->where ? w->where : "a spin-wait loop");
    if (left && atomic_load(&P.resident_full) && n > 0 && (size_t)n < sizeof msg)
        snprintf(msg + n, sizeof msg - (size_t)n,
                 "; %llu of the launch's %llu blocks could not start: the launch needs more "
                 "blocks running at the same time than cpuify runs (%llu: "
                 "cudaOccupancyMaxActiveBlocksPerMultiprocessor x multiProcessorCount)",
                 (unsigned long long)left, (unsigned long long)P.nblocks,
                 (unsigned long long)P.max_resident);
    (void)held;
    if (record_error(id, CPUIFY_ERR_DEADLOCK, w ? w->bx : 0, w ? w->by : 0, w ? w->bz : 0))
        memcpy(P.message, msg, sizeof msg);
}

/* Names (blame) the first block `fs` still holds, unfinished (only one that waits, with
 * `waiting_only`): a launch stopped between fibers then names a block that was running. */
static void blame_held_fiber(const fiber_set *fs, int waiting_only) {
    if (!fs) return;
    for (int32_t i = 0; i < fs->n; i++) {
        const fiber_t *f = fs->f[i];
        if (f->active && !f->done && (!waiting_only || f->waiting)) {
            blame(f->bx, f->by, f->bz);
            return;
        }
    }
}

/* Runs blocks of the current pool job as fibers on this runner (see above). */
static void fiber_blocks(runner_t *r) {
    fiber_set *fs = tls_fibers;
    const uint64_t id = P.launch_id;
    if (!fs) {
        nocancel_begin(); /* (malloc's locks, as in start_block) */
        fs = tls_fibers = calloc(1, sizeof *fs);
        nocancel_end();
    }
    if (!fs) {
        record_error(id, CPUIFY_ERR_OUT_OF_MEMORY, 0, 0, 0);
        return;
    }
    fibers_leave(fs); /* (a launch abandoned by a jump left nothing behind that runs) */
    fs->joined = 1;
    atomic_fetch_add(&P.fiber_workers, 1);
    for (;;) {
        if (launch_error()) break;
        int any = 0, all_waiting = 1;
        for (int32_t i = 0; i < fs->n; i++) {
            fiber_t *f = fs->f[i];
            if (!f->active) continue;
            any = 1;
            f->waiting = 0;
            fs->cur = f;
            r->block = f->block;
            fiber_resume(fs, f);
            /* between fibers a cancel names the last block that waits here, or none */
            if (f->done) r->block = NO_BLOCK;
            fs->cur = NULL;
            if (f->done) {
                f->active = 0;
                atomic_fetch_sub(&P.resident, 1);
                all_waiting = 0;
                unstall(fs);
                note_progress();
                if (f->rc) {
                    record_error(id, f->rc, f->bx, f->by, f->bz);
                    goto out;
                }
            } else if (!f->waiting) {
                all_waiting = 0;
            }
            if (launch_error()) goto out;
        }
        if (any && !all_waiting) continue;
        /* nothing runs here, or every block here waits: start another one */
        int started = start_block(fs, id);
        if (started < 0) goto out;
        if (started) continue;
        if (!any) break; /* no block left for this runner */
        uint64_t t = now_ns();
        if (!fs->stalled) {
            fs->stalled = 1;
            fs->stalled_since = t;
            atomic_fetch_add(&P.stalled, 1);
            note_progress();
        } else if (atomic_load(&P.stalled) >= atomic_load(&P.fiber_workers) &&
                   no_progress_for_long(t, atomic_load_explicit(&P.progress_ns,
                                                                memory_order_relaxed))) {
            fail_deadlock(fs, id);
            goto out;
        }
        /* the blocks waited for run on other workers (a grid sync: for a few microseconds)
         * or on a thread waiting for a CPU: spin a little while, then give the CPU away */
        if (t - fs->stalled_since < 200000u && atomic_load_explicit(&P.worker_spin_ns,
                                                                    memory_order_relaxed))
            for (int i = 0; i < 64; i++) cpu_relax();
        else if (t - fs->stalled_since < 2000000u)
            sched_yield();
        else      /* long stalls (a host thread feeding the kernel): leave it the CPU */
            nanosleep(&(struct timespec){0, 50000}, NULL);
    }
out:
    if (launch_error())     /* stopped (a timeout, Ctrl-C): name a block still held here */
        blame_held_fiber(fs, 0);
    fibers_leave(fs);
}

int32_t cpuify_block_wait(const char *where, uint32_t bx, uint32_t by, uint32_t bz,
                          uint32_t thread) {
    fiber_set *fs = tls_fibers;
    fiber_t *f = fs ? fs->cur : NULL;
    if (f) {
        f->waiting = 1;
        f->where = where;
        f->thread = thread;
#if FAST_SWITCH
        cpuify_fiber_switch(&f->sp, fs->home_sp);
#else
        swapcontext(&f->ctx, &fs->home);
#endif
        return 0;
    }
    /* not a fiber (a grid launched from a block runs its blocks one after another): only
     * threads of this block can end the wait */
    uint64_t t = now_ns();
    if (!tls_wait_since) {
        tls_wait_since = t;
    } else if (no_progress_for_long(t, tls_wait_since)) {
        tls_wait_since = 0;
        nocancel_begin();
        fprintf(stderr, "cpuify: block (%u, %u, %u), thread %u waits in %s for memory no "
                        "running thread writes (blocks of a grid launched from a kernel run "
                        "one after another)\n", bx, by, bz, thread,
                where ? where : "a spin-wait loop");
        fflush(stderr);
        nocancel_end();
        return CPUIFY_ERR_DEADLOCK;
    }
    sched_yield();
    return 0;
}

const char *cpuify_last_message(void) { return tls_last_message ? tls_last_message : ""; }

/* Runs blocks of launch `id` on this thread as runner `slot`: the pool job (fn == NULL) or
 * the blocks of `box` serially, containing faults and cancellation (see above). */
static void run_guarded(int32_t slot, uint64_t id, cpuify_block_fn fn, const void *params,
                        const cpuify_dims *dims, const launch_box *box, void *shared,
                        void *scratch) {
    runner_t *const r0 = get_runner();
    if (!r0) { /* no memory for the guard: run unguarded */
        static runner_t spare;
        tls_in_block = 1;
        if (fn) serial_blocks(&spare, id, fn, params, dims, box, shared, scratch);
        else if (P.fibers) fiber_blocks(&spare);
        else job_blocks(&spare, shared, scratch);
        tls_in_block = 0;
        return;
    }
    /* what the code after a jump back reads: in memory, not in registers sigsetjmp saved */
    runner_t *volatile r = r0;
    const launch_box *volatile blocks = fn ? box : &P.box;
    volatile int32_t vslot = slot;
    volatile uint64_t vid = id;
    r0->launch_id = id;
    r0->cancel_pending = 0;
    r0->nocancel = 0;
    r0->block = NO_BLOCK;
    arm_slot(slot, id, r0->tid);
    tls_in_block = 1;
    /* kernels compiled with .ftz run with MXCSR's FTZ and DAZ set (codegen/denormals.py) and
     * restore it on return: a jump back out of one must restore it here */
    volatile uint32_t fp_mode = fp_mode_get();
    if (sigsetjmp(r0->jmp, 0) == 0) {
        r0->armed = 1;
        /* (armed first: a cancel from now on jumps out; one from before is seen here) */
        if (!launch_error()) {
            if (fn) serial_blocks(r0, id, fn, params, dims, box, shared, scratch);
            else if (P.fibers) fiber_blocks(r0);
            else job_blocks(r0, shared, scratch);
        }
        r0->armed = 0;
    } else {
        /* back from fault_handler or cancel_handler: the block was abandoned */
        r->armed = 0;
        if (!r->why)   /* cancelled: a block still waiting here is the one */
            blame_held_fiber(tls_fibers, 1);
        fibers_leave(tls_fibers); /* (no-op unless it ran fibers) */
        fp_mode_set(fp_mode);
        tls_device_fault = 0;
        slot = vslot;
        id = vid;
        uint64_t l = r->block;
        uint32_t bx = 0, by = 0, bz = 0;
        if (l != NO_BLOCK) box_block(blocks, l, &bx, &by, &bz);
        int32_t why = r->why;
        if (why && record_error(id, why, bx, by, bz)) {
            P.fault_addr = (uint64_t)(uintptr_t)r->fault_addr;
            P.fault_sig = r->fault_sig;
            P.fault_access = r->fault_access;
            /* the other runners stop too, wherever they are (as a GPU context dies) */
            atomic_store_explicit(&g_armed[slot].launch, 0, memory_order_release);
            atomic_store(&P.cancel_id, id);
            signal_runners(id);
        } else if (l != NO_BLOCK) {
            blame(bx, by, bz); /* cancelled: name a block that was running */
        }
    }
    tls_in_block = 0;
    atomic_store_explicit(&g_armed[slot].launch, 0, memory_order_release);
}

/* Runs every block of the box of a grid launched from inside a block (tls_in_block), on this
 * thread: faults and cancellation go to the enclosing launch's guard. */
static int32_t run_nested(cpuify_block_fn fn, const void *params, const cpuify_dims *dims,
                          const launch_box *box, void *shared, void *scratch,
                          uint32_t *err_block) {
    const uint32_t x0 = box->lo[0], y0 = box->lo[1], z0 = box->lo[2];
    const uint32_t x1 = x0 + box->ext[0], y1 = y0 + box->ext[1], z1 = z0 + box->ext[2];
    int32_t *const fault = &tls_device_fault;
    for (uint32_t bz = z0; bz < z1; bz++)
        for (uint32_t by = y0; by < y1; by++)
            for (uint32_t bx = x0; bx < x1; bx++) {
                int32_t rc = block_result(fn(params, dims, bx, by, bz, shared, scratch), fault);
                if (rc) {
                    if (err_block) {
                        err_block[0] = bx;
                        err_block[1] = by;
                        err_block[2] = bz;
                    }
                    return rc;
                }
            }
    return 0;
}

/* ------------------------------------------------------------------------------------ */
/* pool threads                                                                         */

typedef struct worker_arg {
    int32_t id;
    uint32_t seen;
} worker_arg;

/* The next idle spin of a worker that spun `spin` and then waited `waited` ns in all for a
 * job: when it had to sleep but the job came within the adaptive range, long enough to
 * cover twice that gap; when it slept longer, half as long as before. */
static uint64_t adapt_spin(uint64_t spin, uint64_t waited) {
    if (waited <= spin) return spin;
    if (waited < CPUIFY_MAX_SPIN_NS) {
        uint64_t s = 2 * waited;
        return s > CPUIFY_MAX_SPIN_NS ? CPUIFY_MAX_SPIN_NS : s;
    }
    return spin / 2 < CPUIFY_MIN_SPIN_NS ? CPUIFY_MIN_SPIN_NS : spin / 2;
}

/* Waits until P.gen differs from seen; returns the new generation. */
static uint32_t wait_for_job(uint32_t seen) {
    uint64_t cap = atomic_load_explicit(&P.worker_spin_ns, memory_order_relaxed);
    uint64_t spin = g_fixed_spin || cap == 0 ? cap : tls_spin;
    uint64_t t0 = spin ? now_ns() : 0;
    uint32_t g = spin_while_equal(&P.gen, seen, spin);
    while (g == seen) {
        atomic_fetch_add(&P.sleepers, 1); /* seq_cst: pairs with the launcher's gen store */
        g = atomic_load(&P.gen);
        if (g == seen) futex_wait(&P.gen, seen);
        atomic_fetch_sub(&P.sleepers, 1);
        g = atomic_load_explicit(&P.gen, memory_order_acquire);
    }
    if (spin && !g_fixed_spin) tls_spin = adapt_spin(spin, now_ns() - t0);
    return g;
}

static void *worker_main(void *argp) {
    worker_arg arg = *(worker_arg *)argp;
    free(argp);
    const int32_t id = arg.id;
    uint32_t seen = arg.seen;
    get_runner(); /* its signal stack, before any kernel runs here */
    for (;;) {
        uint32_t g = wait_for_job(seen);
        seen = g;
        if (id > atomic_load(&P.target_threads)) {
            atomic_fetch_sub(&P.alive, 1);
            return NULL;
        }
        /* join the job of generation g, unless it is closed or already replaced */
        uint64_t w = atomic_load_explicit(&P.entry, memory_order_acquire);
        int joined = 0;
        while ((uint32_t)(w >> 32) == g && !((uint32_t)w & ENTRY_CLOSED)) {
            if (atomic_compare_exchange_weak_explicit(&P.entry, &w, w + 1, memory_order_acq_rel,
                                                      memory_order_acquire)) {
                joined = 1;
                break;
            }
        }
        if (!joined) continue;
        slot_t *s = &P.slots[id];
        if (ensure_buffer(&s->shared, &s->shared_cap, P.shared_bytes) == 0 &&
            ensure_buffer(&s->scratch, &s->scratch_cap, P.scratch_bytes) == 0)
            run_guarded(id, P.launch_id, NULL, NULL, NULL, NULL, s->shared, s->scratch);
        /* (on allocation failure this worker simply runs no blocks; the others do) */
        atomic_fetch_add(&P.finished, 1); /* seq_cst: pairs with caller_waiting */
        if (atomic_load(&P.caller_waiting)) futex_wake_all(&P.finished);
    }
}

static int grow_slots_locked(int32_t n) {
    if (n <= P.nslots) return 0;
    int32_t newn = P.nslots ? P.nslots : 4;
    while (newn < n) newn *= 2;
    slot_t *ns = aligned_alloc(CPUIFY_ALIGN, (size_t)newn * sizeof(slot_t));
    if (!ns) return -1;
    memset(ns, 0, (size_t)newn * sizeof(slot_t));
    if (P.slots) memcpy(ns, P.slots, (size_t)P.nslots * sizeof(slot_t));
    free(P.slots);
    P.slots = ns;
    P.nslots = newn;
    return 0;
}

/* Makes the pool have `want` threads (best effort).  Caller holds P.lock, no job runs. */
static void resize_pool_locked(int32_t want) {
    if (want < 0) want = 0;
    if (want > P.nthreads) {
        if (grow_slots_locked(want + 1) != 0) want = P.nslots - 1;
        atomic_store(&P.target_threads, want);
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        pthread_attr_setstacksize(&attr, CPUIFY_STACK_SIZE);
        sigset_t all, old;
        sigfillset(&all);
        /* workers never take asynchronous signals; faults raised by the code a worker runs
         * (an out-of-bounds access in a kernel) must reach the process's handler */
        sigdelset(&all, SIGSEGV);
        sigdelset(&all, SIGBUS);
        sigdelset(&all, SIGFPE);
        sigdelset(&all, SIGILL);
        if (g_cancel_signal) sigdelset(&all, g_cancel_signal);
        pthread_sigmask(SIG_SETMASK, &all, &old);
        while (P.nthreads < want) {
            worker_arg *a = malloc(sizeof *a);
            if (!a) break;
            a->id = P.nthreads + 1;
            a->seen = atomic_load(&P.gen);
            pthread_t th;
            atomic_fetch_add(&P.alive, 1);
            if (pthread_create(&th, &attr, worker_main, a) != 0) {
                atomic_fetch_sub(&P.alive, 1);
                free(a);
                break;
            }
            P.nthreads++;
        }
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        pthread_attr_destroy(&attr);
        atomic_store(&P.target_threads, P.nthreads);
    } else if (want < P.nthreads) {
        /* Wake everyone with a closed generation; threads with id > want exit. */
        atomic_store(&P.target_threads, want);
        uint32_t g = atomic_load(&P.gen) + 1;
        atomic_store(&P.entry, ((uint64_t)g << 32) | ENTRY_CLOSED);
        atomic_store(&P.gen, g);
        futex_wake_all(&P.gen);
        while (atomic_load(&P.alive) > want) sched_yield();
        P.nthreads = want;
    }
    /* Spinning only pays when every worker has a core of its own. */
    atomic_store(&P.worker_spin_ns, P.nthreads + 1 > g_ncpus ? 0 : spin_cap());
}

/* ------------------------------------------------------------------------------------ */
/* public API                                                                           */

static _Thread_local cpuify_fault tls_last_fault;

/* Starts launch bookkeeping (caller holds P.lock): a new id, no error, running. */
static uint64_t begin_launch_locked(void) {
    uint64_t id = ++P.launch_seq;
    if (id >> 56) id = P.launch_seq = 1; /* (never in practice: 2^56 launches) */
    atomic_store_explicit(&P.state, id << 8, memory_order_relaxed);
    atomic_store_explicit(&P.blamed, 0, memory_order_relaxed);
    P.fault_sig = 0;
    if (g_timeout_ns) atomic_store_explicit(&P.running_start, now_ns(), memory_order_relaxed);
    atomic_store(&P.running_id, id); /* seq_cst: pairs with the monitor's monitor_asleep */
    if (atomic_load(&P.monitor_asleep)) {
        atomic_store(&P.monitor_asleep, 0);
        futex_wake_all(&P.monitor_asleep);
    }
    if (atomic_load(&g_sigint_unseen)) { /* a Ctrl-C on its way in (see sigint_handler) */
        uint64_t mark = atomic_exchange(&g_sigint_unseen, 0);
        if (mark && now_ns() - mark < SIGINT_CARRY_NS) cancel_launch(id, CPUIFY_ERR_INTERRUPTED);
    }
    return id;
}

/* Ends the launch: its error code, the failing block and fault for the caller. */
static int32_t end_launch_locked(uint32_t *err_block) {
    atomic_store_explicit(&P.running_id, 0, memory_order_release);
    int32_t rc = (int32_t)(atomic_load_explicit(&P.state, memory_order_acquire) & 0xff);
    if (rc) {
        if (err_block) {
            if (atomic_load(&P.blamed)) {
                err_block[0] = P.err_block[0];
                err_block[1] = P.err_block[1];
                err_block[2] = P.err_block[2];
            } else {
                err_block[0] = err_block[1] = err_block[2] = 0;
            }
        }
        if (!tls_last_message) tls_last_message = calloc(1, sizeof P.message);
        if (tls_last_message) {
            if (rc == CPUIFY_ERR_DEADLOCK) memcpy(tls_last_message, P.message, sizeof P.message);
            else tls_last_message[0] = '\0';
        }
        tls_last_fault.signal = P.fault_sig;
        tls_last_fault.access = P.fault_sig ? P.fault_access : -1;
        tls_last_fault.address = P.fault_sig ? P.fault_addr : 0;
    }
    return rc;
}

/* ---- dynamic parallelism: grids launched from device code ---- */
typedef struct child_launch {
    struct child_launch *next;
    const cpuify_child_kernel *k;
    cpuify_dims dims;
    uint32_t shared_bytes;
    int32_t launched;
    uint64_t stream;
    _Alignas(16) unsigned char params[];
} child_launch;

/* the parameter buffers the running grid asked for, newest first (grids run one at a time,
 * under P.lock; a grid launched from inside a block adds to its launcher's) */
static _Atomic(child_launch *) g_children;
static _Thread_local int32_t t_launch_status;
static _Thread_local int t_in_children;
static _Thread_local const char *t_failed_child;
#define STREAM_TAIL_LAUNCH 0x3u       /* CUDA 12's cudaStreamTailLaunch */

void *cpuify_device_launch_buffer(const cpuify_child_kernel *k, uint32_t gx, uint32_t gy,
                                  uint32_t gz, uint32_t bx, uint32_t by, uint32_t bz,
                                  uint32_t shared_bytes) {
    t_launch_status = 0;
    if (!k) {
        t_launch_status = 98;    /* cudaErrorInvalidDeviceFunction */
        return NULL;
    }
    if (!k->fn) {
        t_launch_status = 801;   /* cudaErrorNotSupported */
        return NULL;
    }
    uint64_t nthreads = (uint64_t)bx * by * bz;
    if (!gx || !gy || !gz || !bx || !by || !bz || bx > 1024 || by > 1024 || bz > 64 ||
        nthreads > k->max_threads || gx > INT32_MAX || gy > 65535 || gz > 65535 ||
        shared_bytes > 227u * 1024) {
        t_launch_status = 9;     /* cudaErrorInvalidConfiguration */
        return NULL;
    }
    nocancel_begin();
    child_launch *c = calloc(1, sizeof *c + k->buffer_bytes + 16);
    nocancel_end();
    if (!c) {
        t_launch_status = 2;     /* cudaErrorMemoryAllocation */
        return NULL;
    }
    c->k = k;
    c->dims = (cpuify_dims){{gx, gy, gz}, {bx, by, bz}};
    c->shared_bytes = shared_bytes;
    memcpy(c->params + k->dyn_offset, &shared_bytes, 4);
    child_launch *head = atomic_load_explicit(&g_children, memory_order_relaxed);
    do c->next = head;
    while (!atomic_compare_exchange_weak_explicit(&g_children, &head, c, memory_order_release,
                                                  memory_order_relaxed));
    return c->params;
}

int32_t cpuify_device_launch_status(void) { return t_launch_status; }

int32_t cpuify_device_launch(void *buffer, uint64_t stream) {
    if (!buffer) return 1;       /* cudaErrorInvalidValue */
    child_launch *c = (child_launch *)((unsigned char *)buffer - offsetof(child_launch, params));
    c->stream = stream;
    c->launched = 1;
    return 0;
}

const char *cpuify_failed_child(void) { return t_failed_child; }

static int32_t launch_grid(cpuify_block_fn fn, const void *params, const cpuify_dims *dims,
                           const launch_box *box, uint64_t shared_bytes, uint64_t scratch_bytes,
                           uint32_t *err_block, child_launch **children, uint32_t flags,
                           uint64_t max_resident);

/* Runs the grids a grid launched (`list`, newest first) after it: in launch order (which
 * keeps the order of each block's launches into one stream), each with its own children
 * before the next; tail launches after all of them.  A failure stops the rest. */
static int32_t run_children(int32_t rc, child_launch *list, uint32_t *err_block) {
    child_launch *ordered = NULL;
    while (list) {
        child_launch *next = list->next;
        list->next = ordered;
        ordered = list;
        list = next;
    }
    for (int tail = 0; tail < 2; tail++) {
        for (child_launch *c = ordered; c && !rc; c = c->next) {
            if (!c->launched || (c->stream == STREAM_TAIL_LAUNCH) != tail) continue;
            const cpuify_child_kernel *k = c->k;
            uint64_t nthreads = (uint64_t)c->dims.block[0] * c->dims.block[1] * c->dims.block[2];
            if (k->prologue) {
                cpuify_dims one = {{1, 1, 1}, {1, 1, 1}};
                rc = cpuify_launch(k->prologue, c->params, &one, 0, k->prologue_scratch, err_block);
            }
            if (!rc)
                rc = cpuify_launch(k->fn, c->params, &c->dims, (uint64_t)k->shared_static + c->shared_bytes,
                                   (uint64_t)k->scratch_per_thread * nthreads + k->scratch_extra, err_block);
            if (rc && !t_failed_child) t_failed_child = k->name;
        }
    }
    nocancel_begin();
    while (ordered) {
        child_launch *next = ordered->next;
        free(ordered);
        ordered = next;
    }
    nocancel_end();
    return rc;
}

int32_t cpuify_launch(cpuify_block_fn fn, const void *params, const cpuify_dims *dims,
                      uint64_t shared_bytes, uint64_t scratch_bytes, uint32_t *err_block) {
    return cpuify_launch_ex(fn, params, dims, shared_bytes, scratch_bytes, err_block, 0, 0);
}

int32_t cpuify_launch_ex(cpuify_block_fn fn, const void *params, const cpuify_dims *dims,
                         uint64_t shared_bytes, uint64_t scratch_bytes, uint32_t *err_block,
                         uint32_t flags, uint64_t max_resident) {
    return cpuify_launch_range(fn, params, dims, shared_bytes, scratch_bytes, err_block, flags,
                               max_resident, NULL, NULL);
}

int32_t cpuify_launch_range(cpuify_block_fn fn, const void *params, const cpuify_dims *dims,
                            uint64_t shared_bytes, uint64_t scratch_bytes, uint32_t *err_block,
                            uint32_t flags, uint64_t max_resident, const uint32_t lo[3],
                            const uint32_t hi[3]) {
    pthread_once(&g_once, global_init);
    if (!fn || !dims) return 0;
    launch_box box;
    int whole = 1;
    for (int w = 0; w < 3; w++) {
        uint32_t a = lo ? lo[w] : 0, b = hi ? hi[w] : dims->grid[w];
        if (a > b || b > dims->grid[w]) {   /* not a box of this grid */
            if (err_block) err_block[0] = err_block[1] = err_block[2] = 0xffffffffu;
            return CPUIFY_ERR_INVALID_BOX;
        }
        box.lo[w] = a;
        box.ext[w] = b - a;
        whole &= a == 0 && b == dims->grid[w];
    }
    if (!whole && (flags & CPUIFY_LAUNCH_COOPERATIVE)) { /* grid.sync() needs every block */
        if (err_block) err_block[0] = err_block[1] = err_block[2] = 0xffffffffu;
        return CPUIFY_ERR_INVALID_BOX;
    }
    if (tls_in_block)            /* (its children join those of the grid it runs in) */
        return launch_grid(fn, params, dims, &box, shared_bytes, scratch_bytes, err_block, NULL,
                           flags, max_resident);
    child_launch *children = NULL;
    int depth_top = !t_in_children;
    if (depth_top) t_failed_child = NULL;
    int32_t rc = launch_grid(fn, params, dims, &box, shared_bytes, scratch_bytes, err_block,
                             &children, flags, max_resident);
    if (!children) return rc;
    t_in_children++;
    rc = run_children(rc, children, err_block);
    t_in_children--;
    return rc;
}

/* Runs the blocks of `box` (a box of dims->grid); cpuify_launch_range without the children. */
static int32_t launch_grid(cpuify_block_fn fn, const void *params, const cpuify_dims *dims,
                           const launch_box *box, uint64_t shared_bytes, uint64_t scratch_bytes,
                           uint32_t *err_block, child_launch **children, uint32_t flags,
                           uint64_t max_resident) {
    const uint64_t nblocks = (uint64_t)box->ext[0] * box->ext[1] * box->ext[2];
    if (nblocks == 0) return 0;
    const int fibers = (flags & (CPUIFY_LAUNCH_FIBERS | CPUIFY_LAUNCH_COOPERATIVE)) != 0;
    if (flags & CPUIFY_LAUNCH_COOPERATIVE) max_resident = nblocks;

    if (tls_in_block) {
        /* Launch from inside a block (e.g. dynamic parallelism): the pool is busy running
         * our own grid, so run this grid serially here with private buffers. */
        void *sh = NULL, *sc = NULL;
        uint64_t shc = 0, scc = 0;
        int32_t rc;
        nocancel_begin();
        int bad = ensure_buffer(&sh, &shc, shared_bytes) || ensure_buffer(&sc, &scc, scratch_bytes);
        nocancel_end();
        if (bad) {
            rc = CPUIFY_ERR_OUT_OF_MEMORY;
            if (err_block) err_block[0] = err_block[1] = err_block[2] = 0xffffffffu;
        } else {
            rc = run_nested(fn, params, dims, box, sh, sc, err_block);
        }
        nocancel_begin();
        free_buffer(sh);
        free_buffer(sc);
        nocancel_end();
        return rc;
    }

    pthread_mutex_lock(&P.lock);
    start_monitor_locked();
    if (grow_slots_locked(1) != 0) goto oom;
    slot_t *s0 = &P.slots[0];
    if (ensure_buffer(&s0->shared, &s0->shared_cap, shared_bytes) ||
        ensure_buffer(&s0->scratch, &s0->scratch_cap, scratch_bytes))
        goto oom;

    int32_t workers = workers_locked();
    if (nblocks > 1 && workers > 1 && P.nthreads != workers - 1) resize_pool_locked(workers - 1);
    atomic_store(&g_workspace, NULL);
    if (flags & CPUIFY_LAUNCH_COOPERATIVE) {
        memset(g_workspace_mem, 0, sizeof g_workspace_mem);
        atomic_store(&g_workspace, g_workspace_mem);
    }
    const int alone = nblocks == 1 || workers <= 1 || P.nthreads == 0;
    if (alone && !fibers) { /* (also when no thread could be created) */
        s0 = &P.slots[0];
        uint64_t id = begin_launch_locked();
        run_guarded(0, id, fn, params, dims, box, s0->shared, s0->scratch);
        int32_t rc = end_launch_locked(err_block);
        if (children) *children = atomic_exchange(&g_children, NULL);
        atomic_store(&g_workspace, NULL);
        pthread_mutex_unlock(&P.lock);
        return rc;
    }
    s0 = &P.slots[0]; /* slots may have moved */

    /* describe the job */
    uint64_t id = begin_launch_locked();
    P.fibers = fibers;
    P.max_resident = fibers ? max_resident : 0;
    atomic_store(&P.resident, 0);
    atomic_store(&P.fiber_workers, 0);
    atomic_store(&P.stalled, 0);
    atomic_store(&P.resident_full, 0);
    atomic_store(&P.progress_ns, now_ns());
    P.message[0] = '\0';
    P.fn = fn;
    P.launch_id = id;
    P.params = params;
    P.dims = *dims;
    P.box = *box;
    P.nblocks = nblocks;
    uint64_t chunk = nblocks / ((uint64_t)(P.nthreads + 1) * 32);
    P.chunk = chunk ? chunk : 1;
    P.share = (uint64_t)(P.nthreads + 1) * 2;
    P.shared_bytes = shared_bytes;
    P.scratch_bytes = scratch_bytes;
    atomic_store_explicit(&P.next, 0, memory_order_relaxed);
    atomic_store_explicit(&P.finished, 0, memory_order_relaxed);
    atomic_store_explicit(&P.caller_waiting, 0, memory_order_relaxed);
    if (alone) { /* a fiber job on this thread only */
        run_guarded(0, id, NULL, NULL, NULL, NULL, s0->shared, s0->scratch);
        int32_t rc = end_launch_locked(err_block);
        atomic_store(&g_workspace, NULL);
        P.fibers = 0;
        pthread_mutex_unlock(&P.lock);
        return rc;
    }

    /* publish and wake */
    uint32_t g = atomic_load_explicit(&P.gen, memory_order_relaxed) + 1;
    atomic_store_explicit(&P.entry, (uint64_t)g << 32, memory_order_release);
    atomic_store(&P.gen, g); /* seq_cst: pairs with the sleepers count */
    if (atomic_load(&P.sleepers) > 0) futex_wake_all(&P.gen);

    /* work */
    run_guarded(0, id, NULL, NULL, NULL, NULL, s0->shared, s0->scratch);

    /* close admission and wait for the workers that joined */
    uint64_t old = atomic_fetch_or_explicit(&P.entry, ENTRY_CLOSED, memory_order_acq_rel);
    uint32_t joined = (uint32_t)old & ENTRY_COUNT_MASK;
    if (joined) {
        uint64_t spin = atomic_load_explicit(&P.worker_spin_ns, memory_order_relaxed);
        uint32_t f = spin_while_equal(&P.finished, 0, spin);
        if (f != joined) f = spin_while_equal(&P.finished, f, spin);
        while (f != joined) {
            atomic_store(&P.caller_waiting, 1); /* seq_cst: pairs with finished increment */
            f = atomic_load(&P.finished);
            if (f == joined) break;
            futex_wait(&P.finished, f);
            f = atomic_load_explicit(&P.finished, memory_order_acquire);
        }
        atomic_store_explicit(&P.caller_waiting, 0, memory_order_relaxed);
        atomic_thread_fence(memory_order_acquire);
    }

    int32_t rc = end_launch_locked(err_block);
    if (children) *children = atomic_exchange(&g_children, NULL);
    atomic_store(&g_workspace, NULL);
    P.fibers = 0;
    pthread_mutex_unlock(&P.lock);
    return rc;

oom:
    pthread_mutex_unlock(&P.lock);
    if (err_block) err_block[0] = err_block[1] = err_block[2] = 0xffffffffu;
    return CPUIFY_ERR_OUT_OF_MEMORY;
}

void cpuify_last_fault(cpuify_fault *out) {
    if (out) *out = tls_last_fault;
}

int32_t cpuify_cancel(int32_t reason) {
    pthread_once(&g_once, global_init);
    uint64_t id = atomic_load(&P.running_id);
    if (!id) return 0;
    cancel_launch(id, reason ? reason : CPUIFY_ERR_INTERRUPTED);
    return 1;
}

void cpuify_interrupt_seen(void) { atomic_store(&g_sigint_unseen, 0); }

void cpuify_catch_interrupts(void) {
    pthread_once(&g_once, global_init);
    atomic_store(&g_catch_sigint, 1);
    ensure_sigint_handler();
}

static void copy_rows(char *dst, uint64_t dpitch, const char *src, uint64_t spitch,
                      uint64_t width, uint64_t height, int32_t fill) {
    for (uint64_t y = 0; y < height; y++) {
        if (src) memmove(dst + y * dpitch, src + y * spitch, (size_t)width);
        else memset(dst + y * dpitch, fill, (size_t)width);
    }
}

int32_t cpuify_guarded_copy(void *dst, uint64_t dpitch, const void *src, uint64_t spitch,
                            uint64_t width, uint64_t height, int32_t fill) {
    pthread_once(&g_once, global_init);
    runner_t *r = tls_runner ? tls_runner : get_runner();
    if (!r || r->armed) { /* no memory for the guard, or called from a kernel (guarded) */
        copy_rows(dst, dpitch, src, spitch, width, height, fill);
        return 0;
    }
    if (sigsetjmp(r->jmp, 0)) {
        r->armed = 0;
        return -1;
    }
    r->armed = 2;
    copy_rows(dst, dpitch, src, spitch, width, height, fill);
    r->armed = 0;
    return 0;
}

int32_t cpuify_num_workers(void) {
    pthread_once(&g_once, global_init);
    return workers_locked();
}

void cpuify_set_num_workers(int32_t n) {
    pthread_once(&g_once, global_init);
    if (tls_in_block) return; /* would deadlock: the launch lock is held by our launch */
    if (n > CPUIFY_MAX_WORKERS) n = CPUIFY_MAX_WORKERS;
    pthread_mutex_lock(&P.lock);
    atomic_store(&P.requested, n > 0 ? n : 0);
    /* Resize an already running pool now (idle surplus threads exit); otherwise the pool
     * is created lazily by the first multi-block launch. */
    if (P.nthreads > 0) {
        int32_t w = workers_locked();
        resize_pool_locked(w - 1);
    }
    pthread_mutex_unlock(&P.lock);
}

void cpuify_flush(void) { fflush(stdout); }

int32_t cpuify_runtime_abi_version(void) { return CPUIFY_RT_ABI_VERSION; }

/* ------------------------------------------------------------------------------------ */
/* device printf                                                                        */

typedef struct outbuf {
    char *buf;
    size_t len, cap;
    int failed;
    char local[1024];
} outbuf;

static int ob_reserve(outbuf *ob, size_t extra) {
    if (ob->failed) return -1;
    if (ob->cap - ob->len >= extra) return 0;
    size_t ncap = ob->cap * 2;
    while (ncap - ob->len < extra) {
        if (ncap > SIZE_MAX / 2) {
            ob->failed = 1;
            return -1;
        }
        ncap *= 2;
    }
    char *nb = ob->buf == ob->local ? malloc(ncap) : realloc(ob->buf, ncap);
    if (!nb) {
        ob->failed = 1;
        return -1;
    }
    if (ob->buf == ob->local) memcpy(nb, ob->local, ob->len);
    ob->buf = nb;
    ob->cap = ncap;
    return 0;
}

static void ob_append(outbuf *ob, const char *s, size_t n) {
    if (n == 0 || ob_reserve(ob, n + 1)) return;
    memcpy(ob->buf + ob->len, s, n);
    ob->len += n;
}

/* snprintf one conversion into the buffer, growing it as needed */
#define OB_FORMAT(ob, spec, value)                                                     \
    do {                                                                               \
        for (;;) {                                                                     \
            if ((ob)->failed) break;                                                   \
            size_t room_ = (ob)->cap - (ob)->len;                                      \
            int n_ = snprintf((ob)->buf + (ob)->len, room_, (spec), (value));          \
            if (n_ < 0) break;                                                         \
            if ((size_t)n_ < room_) {                                                  \
                (ob)->len += (size_t)n_;                                               \
                break;                                                                 \
            }                                                                          \
            if (ob_reserve((ob), (size_t)n_ + 1)) break;                               \
        }                                                                              \
    } while (0)

enum { LEN_NONE, LEN_HH, LEN_H, LEN_L, LEN_LL, LEN_J, LEN_Z, LEN_T, LEN_BIGL };

/* Reads the next size-byte argument (aligned to size).  Returns 0, or -1 without args. */
static int next_arg(const unsigned char *args, size_t *off, size_t size, void *out) {
    if (!args) return -1;
    *off = (*off + size - 1) & ~(size - 1);
    memcpy(out, args + *off, size);
    *off += size;
    return 0;
}

static int32_t vprintf_impl(const char *fmt, const void *argsp);

/* Deferred device printf (cpuify_printf_defer): the text of every call, in order, until
 * cpuify_printf_flush writes it; over DEFERRED_MAX bytes it is written at once (CUDA's
 * printf FIFO drops what does not fit; cpuify writes it out early instead). */
#define DEFERRED_MAX ((size_t)8 << 20)
static _Atomic int g_printf_defer;
static pthread_mutex_t g_deferred_lock = PTHREAD_MUTEX_INITIALIZER;
static char *g_deferred;
static size_t g_deferred_cap;
static _Atomic size_t g_deferred_len;

static void write_stdout(const char *s, size_t n) {
    flockfile(stdout);
    fwrite(s, 1, n, stdout);
    funlockfile(stdout);
}

/* (caller holds g_deferred_lock) */
static void flush_deferred_locked(void) {
    size_t n = atomic_load(&g_deferred_len);
    if (n) write_stdout(g_deferred, n);
    atomic_store(&g_deferred_len, 0);
}

static void print_text(const char *s, size_t n) {
    if (!atomic_load_explicit(&g_printf_defer, memory_order_relaxed)) {
        write_stdout(s, n);
        return;
    }
    pthread_mutex_lock(&g_deferred_lock);
    size_t len = atomic_load(&g_deferred_len);
    if (len + n > DEFERRED_MAX) {
        flush_deferred_locked();
        write_stdout(s, n);
    } else {
        if (len + n > g_deferred_cap) {
            size_t cap = g_deferred_cap ? 2 * g_deferred_cap : 4096;
            while (cap < len + n) cap *= 2;
            char *nb = realloc(g_deferred, cap);
            if (!nb) {
                flush_deferred_locked();
                write_stdout(s, n);
                pthread_mutex_unlock(&g_deferred_lock);
                return;
            }
            g_deferred = nb;
            g_deferred_cap = cap;
        }
        memcpy(g_deferred + len, s, n);
        atomic_store(&g_deferred_len, len + n);
    }
    pthread_mutex_unlock(&g_deferred_lock);
}

/* fork: the parent wrote what it deferred before forking (cudart_async.c); a device printf
 * another thread was in may have held the lock */
static void reset_deferred_printf(void) {
    pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
    memcpy(&g_deferred_lock, &fresh, sizeof fresh);
    atomic_store(&g_deferred_len, 0);
}

void cpuify_printf_defer(int32_t on) { atomic_store(&g_printf_defer, on != 0); }

void cpuify_printf_flush(void) {
    if (!atomic_load(&g_deferred_len)) return;
    pthread_mutex_lock(&g_deferred_lock);
    flush_deferred_locked();
    pthread_mutex_unlock(&g_deferred_lock);
}

/* device printf: a no-cancel section (stdout's lock, the heap) */
int32_t cpuify_vprintf(const char *fmt, const void *argsp) {
    nocancel_begin();
    int32_t n = vprintf_impl(fmt, argsp);
    nocancel_end();
    return n;
}

/* device malloc/free (the heap's locks): no-cancel sections */
void *cpuify_device_malloc(uint64_t size) {
    nocancel_begin();
    void *p = size <= SIZE_MAX ? malloc((size_t)size) : NULL;
    nocancel_end();
    return p;
}

void cpuify_device_free(void *p) {
    nocancel_begin();
    free(p);
    nocancel_end();
}

static _Atomic uint64_t g_stack_limit = 1024;   /* CUDA's default cudaLimitStackSize */
static _Thread_local void *t_call_stack;
static _Thread_local uint64_t t_call_stack_size;

void cpuify_set_stack_limit(uint64_t bytes) { atomic_store(&g_stack_limit, bytes); }
uint64_t cpuify_stack_limit(void) { return atomic_load(&g_stack_limit); }

void *cpuify_call_stack(void) {
    uint64_t want = atomic_load(&g_stack_limit);
    if (t_call_stack_size != want || !t_call_stack) {
        nocancel_begin();
        free(t_call_stack);
        t_call_stack = want && want <= SIZE_MAX ? malloc((size_t)want) : NULL;
        t_call_stack_size = t_call_stack ? want : 0;
        nocancel_end();
    }
    return t_call_stack;
}

uint64_t cpuify_call_stack_size(void) { return t_call_stack_size; }

void cpuify_nocancel(int32_t begin) {
    if (begin) nocancel_begin();
    else nocancel_end();
}

static int32_t vprintf_impl(const char *fmt, const void *argsp) {
    if (!fmt) return -1;
    const unsigned char *args = (const unsigned char *)argsp;
    size_t off = 0;
    outbuf ob;
    ob.buf = ob.local;
    ob.len = 0;
    ob.cap = sizeof ob.local;
    ob.failed = 0;

    const char *p = fmt;
    while (*p) {
        if (*p != '%') {
            const char *q = strchr(p, '%');
            size_t n = q ? (size_t)(q - p) : strlen(p);
            ob_append(&ob, p, n);
            p += n;
            continue;
        }
        const char *start = p++;
        if (*p == '%') {
            ob_append(&ob, "%", 1);
            p++;
            continue;
        }
        char spec[48];
        size_t sl = 0;
        int bad = 0;
        spec[sl++] = '%';
        while (*p && strchr("-+ #0", *p)) {
            if (sl < 16) spec[sl++] = *p;
            p++;
        }
        if (*p == '*') {
            bad = 1;
            p++;
        } else {
            size_t nd = 0;
            while (*p >= '0' && *p <= '9') {
                if (++nd > 6) bad = 1; /* absurd width */
                if (sl < 30) spec[sl++] = *p;
                p++;
            }
        }
        if (*p == '.') {
            if (sl < 31) spec[sl++] = '.';
            p++;
            if (*p == '*') {
                bad = 1;
                p++;
            } else {
                size_t nd = 0;
                while (*p >= '0' && *p <= '9') {
                    if (++nd > 6) bad = 1;
                    if (sl < 40) spec[sl++] = *p;
                    p++;
                }
            }
        }
        int len = LEN_NONE;
        switch (*p) {
        case 'h':
            p++;
            if (*p == 'h') {
                len = LEN_HH;
                p++;
            } else
                len = LEN_H;
            break;
        case 'l':
            p++;
            if (*p == 'l') {
                len = LEN_LL;
                p++;
            } else
                len = LEN_L;
            break;
        case 'j': len = LEN_J; p++; break;
        case 'z': len = LEN_Z; p++; break;
        case 't': len = LEN_T; p++; break;
        case 'L': len = LEN_BIGL; p++; break;
        default: break;
        }
        const char conv = *p;
        if (conv == '\0') { /* truncated spec at the end: print it as is */
            ob_append(&ob, start, strlen(start));
            break;
        }
        p++;
        if (bad) {
            ob_append(&ob, start, (size_t)(p - start));
            continue;
        }
        const int wide = len == LEN_L || len == LEN_LL || len == LEN_J || len == LEN_Z ||
                         len == LEN_T || len == LEN_BIGL;
        int ok = 1;
        switch (conv) {
        case 'd':
        case 'i':
        case 'u':
        case 'o':
        case 'x':
        case 'X': {
            const int is_signed = conv == 'd' || conv == 'i';
            if (wide) {
                spec[sl++] = 'l';
                spec[sl++] = 'l';
                spec[sl++] = conv;
                spec[sl] = '\0';
                uint64_t v;
                if (next_arg(args, &off, 8, &v)) { ok = 0; break; }
                if (is_signed)
                    OB_FORMAT(&ob, spec, (long long)v);
                else
                    OB_FORMAT(&ob, spec, (unsigned long long)v);
            } else {
                if (len == LEN_H || len == LEN_HH) spec[sl++] = 'h';
                if (len == LEN_HH) spec[sl++] = 'h';
                spec[sl++] = conv;
                spec[sl] = '\0';
                uint32_t v;
                if (next_arg(args, &off, 4, &v)) { ok = 0; break; }
                if (is_signed)
                    OB_FORMAT(&ob, spec, (int)(int32_t)v);
                else
                    OB_FORMAT(&ob, spec, (unsigned)v);
            }
            break;
        }
        case 'c': {
            uint32_t v;
            if (next_arg(args, &off, 4, &v)) { ok = 0; break; }
            if (len == LEN_L) {
                spec[sl++] = 'l';
                spec[sl++] = 'c';
                spec[sl] = '\0';
                OB_FORMAT(&ob, spec, (wint_t)v);
            } else {
                spec[sl++] = 'c';
                spec[sl] = '\0';
                OB_FORMAT(&ob, spec, (int)(unsigned char)v);
            }
            break;
        }
        case 's': {
            uint64_t v;
            if (next_arg(args, &off, 8, &v)) { ok = 0; break; }
            if (len == LEN_L && v) {
                spec[sl++] = 'l';
                spec[sl++] = 's';
                spec[sl] = '\0';
                OB_FORMAT(&ob, spec, (const wchar_t *)(uintptr_t)v);
            } else {
                spec[sl++] = 's';
                spec[sl] = '\0';
                const char *str = v ? (const char *)(uintptr_t)v : "(null)";
                OB_FORMAT(&ob, spec, str);
            }
            break;
        }
        case 'p': {
            uint64_t v;
            if (next_arg(args, &off, 8, &v)) { ok = 0; break; }
            spec[sl++] = 'p';
            spec[sl] = '\0';
            OB_FORMAT(&ob, spec, (void *)(uintptr_t)v);
            break;
        }
        case 'f':
        case 'F':
        case 'e':
        case 'E':
        case 'g':
        case 'G':
        case 'a':
        case 'A': {
            double v;
            if (next_arg(args, &off, 8, &v)) { ok = 0; break; }
            spec[sl++] = conv;
            spec[sl] = '\0';
            OB_FORMAT(&ob, spec, v);
            break;
        }
        case 'n': { /* consumes its pointer, writes nothing */
            uint64_t v;
            if (next_arg(args, &off, 8, &v)) ok = 0;
            break;
        }
        default:
            ok = 0;
            break;
        }
        if (!ok) ob_append(&ob, start, (size_t)(p - start));
    }

    int32_t n = (int32_t)(ob.len > INT32_MAX ? INT32_MAX : ob.len);
    if (ob.len) print_text(ob.buf, ob.len);
    if (ob.buf != ob.local) free(ob.buf);
    return ob.failed && ob.len == 0 ? -1 : n;
}
