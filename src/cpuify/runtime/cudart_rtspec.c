/* Run-time specialization of the kernels of `cpuify nvcc` programs (nvcc/rtspec.py says
 * why and what the build records).
 *
 * Per (kernel, block shape) without a block function of its own from the build, an entry:
 *   COUNTING  the generic code runs; its launches' wall time is added up, and when it
 *             reaches CPUIFY_RUNTIME_SPECIALIZE_AFTER_MS (default 250; 0: at the first
 *             launch) `python -m cpuify.nvcc.rtspec` is started in the background, one
 *             compile at a time per process (the others start at a launch after it);
 *   PENDING   the compile runs; launches look (at most once a millisecond) for the
 *             `.meta` or `.failed` file it writes last;
 *   READY     the shared object is loaded: launches run its block function;
 *   FAILED    the generic code runs for good (a compile error is reported once).
 * A shape whose `.meta` (or `.failed`) is in the cache from an earlier run starts READY
 * (FAILED).  CPUIFY_RUNTIME_SPECIALIZE_WAIT=1 waits for the compile at the launch that
 * starts it (deterministic runs and tests); CPUIFY_RUNTIME_SPECIALIZE=0 or
 * CPUIFY_SPECIALIZE=0 turns all of this off.
 *
 * C11 + POSIX (posix_spawn, dlopen). */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cpuify_cudart.h"
#include "cudart_internal.h"

extern char **environ;

enum { RTS_COUNTING, RTS_PENDING, RTS_READY, RTS_FAILED };

typedef struct rts_module {
    const cpuify_module_desc *m;
    const char *python, *pypath, *ptx, *prefix, *passes;
} rts_module;

struct cpuify_rtspec {
    const cpuify_kernel_desc *d;
    const char *pretty;            /* the kernel's name in messages */
    const rts_module *mod;
    uint32_t index;                /* the kernel's position in its module */
    uint32_t block[3];
    _Atomic int state;
    _Atomic uint64_t generic_ns;   /* COUNTING: wall time spent in the generic code */
    pid_t pid;
    cpuify_block_fn fn;            /* READY */
    uint32_t per_thread;
    uint64_t extra;
    struct cpuify_rtspec *next;
};

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static rts_module *g_mods;
static size_t g_nmods, g_cap;
/* (prepended under g_lock, never removed: launches look entries up without the lock) */
static struct cpuify_rtspec *_Atomic g_entries;
static int g_running;              /* compiles started and not yet retired */
static uint64_t g_next_poll_ns;

void cpuify_cudart_note_rtspec(const cpuify_module_desc *m, const char *python, const char *pypath,
                               const char *ptx, const char *prefix, const char *passes) {
    pthread_mutex_lock(&g_lock);
    if (g_nmods == g_cap) {
        size_t cap = g_cap ? 2 * g_cap : 8;
        rts_module *grown = realloc(g_mods, cap * sizeof *grown);
        if (!grown) {
            pthread_mutex_unlock(&g_lock);
            return;                /* (no run-time specialization for this module) */
        }
        g_mods = grown;
        g_cap = cap;
    }
    g_mods[g_nmods++] = (rts_module){m, python, pypath, ptx, prefix, passes};
    pthread_mutex_unlock(&g_lock);
}

static int env_off(const char *name) {
    const char *v = getenv(name);
    return v && strcmp(v, "0") == 0;
}

static int enabled(void) {
    static int on = -1;
    if (on < 0) on = !env_off("CPUIFY_RUNTIME_SPECIALIZE") && !env_off("CPUIFY_SPECIALIZE");
    return on;
}

static uint64_t read_after_ns(void) {
    const char *v = getenv("CPUIFY_RUNTIME_SPECIALIZE_AFTER_MS");
    if (!v || !*v) return 250000000ull;
    char *end;
    double ms = strtod(v, &end);
    if (end == v || ms < 0) return 250000000ull;
    return (uint64_t)(ms * 1e6);
}

static uint64_t after_ns(void) {
    static _Atomic uint64_t after = UINT64_MAX;    /* (read once: every generic launch asks) */
    uint64_t a = atomic_load_explicit(&after, memory_order_relaxed);
    if (a == UINT64_MAX) atomic_store_explicit(&after, a = read_after_ns(), memory_order_relaxed);
    return a;
}

/* "<prefix>_k<index>_<x>x<y>x<z><suffix>" */
static void entry_path(const struct cpuify_rtspec *e, const char *suffix, char *out, size_t n) {
    snprintf(out, n, "%s_k%u_%ux%ux%u%s", e->mod->prefix, e->index, e->block[0], e->block[1],
             e->block[2], suffix);
}

/* The runtime's functions kernel code may call (codegen's intrinsics), by name: a program
 * linked with the static runtime does not export them to the dynamic linker. */
#define RTS_FN(i, name) extern char rts_fn##i[] __asm__(name);
RTS_FN(0, "cpuify_vprintf") RTS_FN(1, "cpuify_assert_message") RTS_FN(2, "cpuify_run_block_from")
RTS_FN(3, "cpuify_call_stack") RTS_FN(4, "cpuify_call_stack_size") RTS_FN(5, "cpuify_device_malloc")
RTS_FN(6, "cpuify_device_free") RTS_FN(7, "cpuify_device_launch") RTS_FN(8, "cpuify_device_launch_buffer")
RTS_FN(9, "cpuify_device_launch_status") RTS_FN(10, "cpuify_envreg") RTS_FN(11, "cpuify_tex")
RTS_FN(12, "cpuify_txq") RTS_FN(13, "cpuify_suld") RTS_FN(14, "cpuify_sust")
#undef RTS_FN
static const struct { const char *name; void *addr; } g_runtime_fns[] = {
    {"cpuify_vprintf", rts_fn0}, {"cpuify_assert_message", rts_fn1},
    {"cpuify_run_block_from", rts_fn2}, {"cpuify_call_stack", rts_fn3},
    {"cpuify_call_stack_size", rts_fn4}, {"cpuify_device_malloc", rts_fn5},
    {"cpuify_device_free", rts_fn6}, {"cpuify_device_launch", rts_fn7},
    {"cpuify_device_launch_buffer", rts_fn8}, {"cpuify_device_launch_status", rts_fn9},
    {"cpuify_envreg", rts_fn10}, {"cpuify_tex", rts_fn11}, {"cpuify_txq", rts_fn12},
    {"cpuify_suld", rts_fn13}, {"cpuify_sust", rts_fn14},
};

/* The address symbol `name` of entry e's code refers to: a variable of its module, a
 * function of the runtime, or what the process's dynamic symbols have (the C library). */
static void *resolve(const struct cpuify_rtspec *e, const char *name) {
    const cpuify_module_desc *m = e->mod->m;
    for (uint32_t i = 0; i < m->nvars; i++)
        if (strcmp(m->vars[i].name, name) == 0) return m->vars[i].addr;
    for (size_t i = 0; i < sizeof g_runtime_fns / sizeof g_runtime_fns[0]; i++)
        if (strcmp(g_runtime_fns[i].name, name) == 0) return g_runtime_fns[i].addr;
    return dlsym(RTLD_DEFAULT, name);
}

/* Loads entry e's shared object and fills its slots from the `.meta` file f (its first
 * line read: symbol, scratch sizes, slot count); NULL with *why set when it cannot. */
static cpuify_block_fn load(const struct cpuify_rtspec *e, FILE *f, const char *symbol, unsigned nslots,
                            const char **why, char *buf, size_t nbuf) {
    char path[4096];
    entry_path(e, ".so", path, sizeof path);
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        *why = dlerror();
        return NULL;
    }
    struct link_map *lm = NULL;
    if (dlinfo(lib, RTLD_DI_LINKMAP, &lm) != 0 || !lm) {
        *why = "no link map";
        return NULL;
    }
    for (unsigned i = 0; i < nslots; i++) {
        unsigned long long off;
        int kind;
        long long addend;
        char name[512];
        if (!fgets(buf, (int)nbuf, f) || sscanf(buf, "%llx %d %lld %511s", &off, &kind, &addend, name) != 4) {
            *why = "a damaged .meta file";
            return NULL;
        }
        void *addr = resolve(e, name);
        if (!addr) {
            snprintf(buf, nbuf, "its code refers to '%s', which this program does not have", name);
            *why = buf;
            return NULL;
        }
        uint64_t v = (uint64_t)(uintptr_t)addr + (kind == 1 ? (uint64_t)addend : 0);
        memcpy((char *)lm->l_addr + off, &v, 8);    /* (-z norelro: the slots stay writable) */
    }
    void *fn = dlsym(lib, symbol);
    if (!fn) *why = "no block function in it";
    return (cpuify_block_fn)fn;
}

/* The result of a finished compile, if there is one: READY (loaded), FAILED, or PENDING
 * (no result file yet).  Under g_lock. */
static int take_result(struct cpuify_rtspec *e, int report) {
    char path[4096], line[1024];
    entry_path(e, ".meta", path, sizeof path);
    FILE *f = fopen(path, "r");
    if (f) {
        char symbol[512];
        unsigned per_thread = 0, nslots = 0;
        unsigned long long extra = 0;
        const char *why = "a damaged .meta file";
        cpuify_block_fn fn = NULL;
        if (fgets(line, sizeof line, f) &&
            sscanf(line, "%511s %u %llu %u", symbol, &per_thread, &extra, &nslots) == 4)
            fn = load(e, f, symbol, nslots, &why, line, sizeof line);
        fclose(f);
        if (!fn) {
            if (report)
                fprintf(stderr, "cpuify: kernel '%s': the code compiled at run time for blocks of "
                                "(%u, %u, %u) could not be loaded (%s); the generic code runs\n",
                        e->pretty, e->block[0], e->block[1], e->block[2], why);
            return RTS_FAILED;
        }
        e->fn = fn;
        e->per_thread = per_thread;
        e->extra = extra;
        return RTS_READY;
    }
    entry_path(e, ".failed", path, sizeof path);
    f = fopen(path, "r");
    if (f) {
        int error = fgets(line, sizeof line, f) != NULL && strncmp(line, "error:", 6) == 0;
        fclose(f);
        /* a refusal (a relocation it cannot fill, another toolchain's program) is silent */
        if (error && report) {
            line[strcspn(line, "\n")] = 0;
            entry_path(e, ".log", path, sizeof path);
            fprintf(stderr, "cpuify: kernel '%s': compiling it for blocks of (%u, %u, %u) at run "
                            "time failed (%s; log: %s); the generic code runs\n",
                    e->pretty, e->block[0], e->block[1], e->block[2], line + 7, path);
        }
        return RTS_FAILED;
    }
    return RTS_PENDING;
}

/* Starts the compile of entry e (under g_lock): PENDING, or FAILED when it cannot start. */
static int start_compile(struct cpuify_rtspec *e) {
    char block[64], index[16], logpath[4096], pypath[8192];
    snprintf(block, sizeof block, "%u,%u,%u", e->block[0], e->block[1], e->block[2]);
    snprintf(index, sizeof index, "%u", e->index);
    entry_path(e, ".log", logpath, sizeof logpath);
    const char *old = getenv("PYTHONPATH");
    snprintf(pypath, sizeof pypath, "PYTHONPATH=%s%s%s", e->mod->pypath, old && *old ? ":" : "",
             old && *old ? old : "");
    /* the environment with PYTHONPATH replaced */
    size_t n = 0;
    while (environ[n]) n++;
    char **env = malloc((n + 2) * sizeof *env);
    if (!env) return RTS_FAILED;
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (strncmp(environ[i], "PYTHONPATH=", 11) != 0) env[k++] = environ[i];
    env[k++] = pypath;
    env[k] = NULL;
    char *argv[] = {(char *)e->mod->python, "-m", "cpuify.nvcc.rtspec", "--ptx", (char *)e->mod->ptx,
                    "--prefix", (char *)e->mod->prefix, "--kernel", (char *)e->d->name,
                    "--index", index, "--block", block, "--passes", (char *)e->mod->passes, NULL};
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, logpath, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
#if defined(__GLIBC__) && (__GLIBC__ > 2 || __GLIBC_MINOR__ >= 34)
    /* none of the program's descriptors (a pipe its caller waits on) outlives it in the child */
    posix_spawn_file_actions_addclosefrom_np(&fa, 3);
#endif
    /* a session of its own: a compile that outlives the program is cpuify's cache filling,
     * not part of the program (a harness's process group, its terminal's signals) */
    posix_spawnattr_t at;
    posix_spawnattr_init(&at);
    posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSID);
    pid_t pid;
    int rc = posix_spawn(&pid, e->mod->python, &fa, &at, argv, env);
    posix_spawnattr_destroy(&at);
    posix_spawn_file_actions_destroy(&fa);
    free(env);
    if (rc != 0) {
        static int said;
        if (!said++)
            fprintf(stderr, "cpuify: cannot start the compiler that specializes kernels for block "
                            "shapes met at run time (%s: %s); those launches run the generic code "
                            "(CPUIFY_RUNTIME_SPECIALIZE=0 silences this)\n", e->mod->python, strerror(rc));
        return RTS_FAILED;
    }
    e->pid = pid;
    const char *wait = getenv("CPUIFY_RUNTIME_SPECIALIZE_WAIT");
    if (wait && strcmp(wait, "1") == 0) {
        int status;
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
        e->pid = 0;
        int got = take_result(e, 1);
        return got == RTS_PENDING ? RTS_FAILED : got;    /* (it died without a word) */
    }
    return RTS_PENDING;
}

static struct cpuify_rtspec *find_entry(struct cpuify_rtspec *e, const cpuify_kernel_desc *d,
                                        const uint32_t block[3]) {
    for (; e; e = e->next)
        if (e->d == d && e->block[0] == block[0] && e->block[1] == block[1] && e->block[2] == block[2])
            return e;
    return NULL;
}

struct cpuify_rtspec *cpuify_rtspec_entry(const cpuify_kernel_desc *d, const uint32_t block[3],
                                          const char *pretty) {
    if (!enabled() || !d) return NULL;
    struct cpuify_rtspec *e = find_entry(atomic_load_explicit(&g_entries, memory_order_acquire),
                                         d, block);
    if (e) return atomic_load(&e->state) != RTS_FAILED ? e : NULL;
    pthread_mutex_lock(&g_lock);
    struct cpuify_rtspec *head = atomic_load_explicit(&g_entries, memory_order_relaxed);
    e = find_entry(head, d, block);
    if (!e) {
        const rts_module *mod = NULL;
        for (size_t i = 0; i < g_nmods && !mod; i++)
            if (d >= g_mods[i].m->kernels && d < g_mods[i].m->kernels + g_mods[i].m->nkernels)
                mod = &g_mods[i];
        e = mod ? calloc(1, sizeof *e) : NULL;
        if (e) {
            e->d = d;
            e->pretty = pretty;
            e->mod = mod;
            e->index = (uint32_t)(d - mod->m->kernels);
            memcpy(e->block, block, sizeof e->block);
            /* compiled (or refused) by an earlier run of the program? */
            int got = take_result(e, 1);
            atomic_store(&e->state, got == RTS_PENDING ? RTS_COUNTING : got);
            e->next = head;
            atomic_store_explicit(&g_entries, e, memory_order_release);
        }
    }
    pthread_mutex_unlock(&g_lock);
    return e && atomic_load(&e->state) != RTS_FAILED ? e : NULL;
}

/* Retires the compiles that finished (under g_lock; at most once a millisecond). */
static void poll_pending(void) {
    uint64_t now = cpuify_cudart_now_ns();
    if (now < g_next_poll_ns) return;
    g_next_poll_ns = now + 1000000ull;
    for (struct cpuify_rtspec *e = atomic_load_explicit(&g_entries, memory_order_relaxed); e;
         e = e->next) {
        if (atomic_load(&e->state) != RTS_PENDING) continue;
        int status;
        int done = e->pid && waitpid(e->pid, &status, WNOHANG) == e->pid;
        int got = take_result(e, 1);
        if (got == RTS_PENDING && done) got = RTS_FAILED;   /* it died without a word */
        if (done) e->pid = 0;
        if (got != RTS_PENDING) g_running--;
        atomic_store_explicit(&e->state, got, memory_order_release);
    }
}

int cpuify_rtspec_ready(struct cpuify_rtspec *e, cpuify_block_fn *fn, uint32_t *per_thread,
                        uint64_t *extra) {
    int s = atomic_load_explicit(&e->state, memory_order_acquire);
    if (s == RTS_PENDING) {
        pthread_mutex_lock(&g_lock);
        poll_pending();
        pthread_mutex_unlock(&g_lock);
        s = atomic_load_explicit(&e->state, memory_order_acquire);
    }
    if (s != RTS_READY) return 0;
    *fn = e->fn;
    *per_thread = e->per_thread;
    *extra = e->extra;
    return 1;
}

void cpuify_rtspec_ran_generic(struct cpuify_rtspec *e, uint64_t ns) {
    if (atomic_load(&e->state) != RTS_COUNTING) return;
    /* (the lock only once the threshold is crossed: a launch of a shape still counting
     * takes none) */
    if (atomic_fetch_add(&e->generic_ns, ns) + ns < after_ns()) return;
    pthread_mutex_lock(&g_lock);
    if (atomic_load(&e->state) == RTS_COUNTING) {
        if (g_running) poll_pending();
        /* one compile at a time: the others wait for their next launch after it */
        if (!g_running) {
            int got = start_compile(e);
            if (got == RTS_PENDING) g_running++;
            atomic_store_explicit(&e->state, got, memory_order_release);
        }
    }
    pthread_mutex_unlock(&g_lock);
}
