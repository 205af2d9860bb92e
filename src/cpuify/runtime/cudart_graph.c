/* cpuify's CUDA runtime: CUDA graphs and stream capture.
 *
 * A graph is a list of nodes (in creation order, which is also the order the node queries
 * and cudaGraphExecUpdate pair nodes by) with dependency edges both ways.  A node keeps its
 * own copy of its parameters: a kernel node copies the arguments when it is made (by
 * cudaGraphAddKernelNode or by capturing a launch), as CUDA does, so a replay reads those
 * values and never the host variables.
 *
 * Stream capture: a capturing stream has a frontier (the nodes its next work depends on);
 * work issued to it becomes a node depending on the frontier, which it then replaces.
 * cudaEventRecord in a capture copies the frontier into the event; cudaStreamWaitEvent on
 * such an event adds it to the waiting stream's frontier, and a stream that is not capturing
 * joins the capture that way (a fork).  cudaStreamEndCapture checks that the work of every
 * forked stream is joined back (an ancestor of the origin stream's frontier).  The rules on
 * what may be called during a capture follow CUDA 13 as measured on an H100 (see
 * docs/usage.md): refused calls return the error CUDA returns and invalidate the capture.
 *
 * Execution: cudaGraphInstantiate orders the nodes topologically (child graphs inlined) and
 * prepares each one completely (the kernel's block function for its block shape, buffer
 * sizes, its parameter buffer; copies as plain pointers and pitches), so cudaGraphLaunch is a
 * loop over ready work.  A launch queues the nodes, in that order, on its stream
 * (cudart_async.c; each kernel uses all workers), after the launch before it of the same
 * exec: independent branches run serially, which CUDA allows.  An event-wait node waits for
 * the event's last record as of the launch; the queued work keeps copies of the parameters,
 * so changing or destroying the exec does not touch launches in flight.
 */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpuify_cudart.h"
#include "cudart_internal.h"

#define GRAPH_MAGIC 0x47524150u
#define NODE_MAGIC 0x4e4f4445u
#define EXEC_MAGIC 0x47455843u

#define FAIL(e) return cpuify_cudart_fail(e)
#define CHECK_STICKY()                                          \
    do {                                                        \
        cudaError_t st_ = cpuify_cudart_sticky();               \
        if (st_ != cudaSuccess) return st_;                     \
    } while (0)

/* the launch-parameter buffer of cudaKernelNodeParams::extra (cuda.h's CU_LAUNCH_PARAM_*) */
#define LAUNCH_PARAM_END ((void *)0)
#define LAUNCH_PARAM_BUFFER_POINTER ((void *)1)
#define LAUNCH_PARAM_BUFFER_SIZE ((void *)2)

typedef struct CUgraphNode_st node_t;
typedef struct CUgraph_st graph_t;

#if CUDART_VERSION < 12030
/* (toolkits before 12.3 have no edge data; the functions that take it are 13's) */
typedef struct cudaGraphEdgeData_st {
    unsigned char from_port, to_port, type, reserved[5];
} cudaGraphEdgeData;
#endif

/* ------------------------------------------------------------------------------------ */
/* node lists                                                                           */

typedef struct node_list {
    node_t **v;
    size_t n, cap;
} node_list;

static int list_push(node_list *l, node_t *x) {
    if (l->n == l->cap) {
        size_t c = l->cap ? l->cap * 2 : 4;
        node_t **v = realloc(l->v, c * sizeof *v);
        if (!v) return -1;
        l->v = v;
        l->cap = c;
    }
    l->v[l->n++] = x;
    return 0;
}

static int list_has(const node_list *l, const node_t *x) {
    for (size_t i = 0; i < l->n; i++)
        if (l->v[i] == x) return 1;
    return 0;
}

static void list_remove(node_list *l, const node_t *x) {
    for (size_t i = 0; i < l->n; i++)
        if (l->v[i] == x) {
            memmove(&l->v[i], &l->v[i + 1], (l->n - i - 1) * sizeof *l->v);
            l->n--;
            return;
        }
}

static int list_copy(node_list *dst, node_t *const *src, size_t n) {
    dst->n = 0;
    for (size_t i = 0; i < n; i++)
        if (!list_has(dst, src[i]) && list_push(dst, src[i])) return -1;
    return 0;
}

static void list_free(node_list *l) {
    free(l->v);
    l->v = NULL;
    l->n = l->cap = 0;
}

/* ------------------------------------------------------------------------------------ */
/* graphs and nodes                                                                     */

typedef struct kernel_args {
    struct kentry *kernel;
    const void *func;           /* what cudaGraphKernelNodeGetParams gives back */
    dim3 grid, block;
    unsigned shared;
    int cooperative;
    unsigned char *args;        /* the parameters at their offsets (param_size bytes) */
    void **argv;                /* one pointer into args per parameter */
} kernel_args;

struct CUgraphNode_st {
    uint32_t magic;
    enum cudaGraphNodeType type;
    graph_t *graph;
    uint64_t id;                /* unique in the process */
    uint64_t origin;            /* id of the node this one is a clone of (else its own) */
    size_t index;               /* position in graph->nodes */
    node_list in, out;          /* dependencies, dependents */
    uint64_t mark;
    int disabled;               /* cudaGraphNodeSetEnabled(0) (nodes of an exec's graph) */
    union {
        kernel_args kernel;
        struct cudaMemcpy3DParms memcpy;
        struct cudaMemsetParams memset;
        struct cudaHostNodeParams host;
        graph_t *child;
        cudaEvent_t event;
    } p;
};

struct CUgraph_st {
    uint32_t magic;
    unsigned id;
    node_list nodes;
};

static _Atomic uint64_t g_node_ids;
static _Atomic unsigned g_graph_ids;
static _Atomic uint64_t g_marks;

static int graph_ok(const graph_t *g) { return g && g->magic == GRAPH_MAGIC; }
static int node_ok(const node_t *n) { return n && n->magic == NODE_MAGIC; }

static graph_t *graph_new(void) {
    graph_t *g = calloc(1, sizeof *g);
    if (!g) return NULL;
    g->magic = GRAPH_MAGIC;
    g->id = atomic_fetch_add(&g_graph_ids, 1) + 1;
    return g;
}

static void graph_free(graph_t *g);

static void node_params_free(node_t *n) {
    switch (n->type) {
    case cudaGraphNodeTypeKernel:
        free(n->p.kernel.args);
        free(n->p.kernel.argv);
        break;
    case cudaGraphNodeTypeGraph:
        graph_free(n->p.child);
        break;
    default:
        break;
    }
}

static void node_free(node_t *n) {
    node_params_free(n);
    list_free(&n->in);
    list_free(&n->out);
    n->magic = 0;
    free(n);
}

static void graph_free(graph_t *g) {
    if (!g) return;
    for (size_t i = 0; i < g->nodes.n; i++) node_free(g->nodes.v[i]);
    list_free(&g->nodes);
    g->magic = 0;
    free(g);
}

static node_t *node_new(enum cudaGraphNodeType type) {
    node_t *n = calloc(1, sizeof *n);
    if (!n) return NULL;
    n->magic = NODE_MAGIC;
    n->type = type;
    n->id = n->origin = atomic_fetch_add(&g_node_ids, 1) + 1;
    return n;
}

/* Whether deps are distinct nodes of g. */
static cudaError_t check_deps(const graph_t *g, const cudaGraphNode_t *deps, size_t ndeps) {
    if (ndeps && !deps) return cudaErrorInvalidValue;
    for (size_t i = 0; i < ndeps; i++) {
        if (!node_ok(deps[i]) || deps[i]->graph != g) return cudaErrorInvalidValue;
        for (size_t j = 0; j < i; j++)
            if (deps[j] == deps[i]) return cudaErrorInvalidValue;
    }
    return cudaSuccess;
}

/* Adds n (its parameters set) to g after deps (checked); frees n on failure. */
static cudaError_t attach(graph_t *g, node_t *n, node_t *const *deps, size_t ndeps) {
    n->graph = g;
    n->index = g->nodes.n;
    if (list_push(&g->nodes, n)) goto oom;
    for (size_t i = 0; i < ndeps; i++)
        if (list_push(&n->in, deps[i]) || list_push(&deps[i]->out, n)) {
            for (size_t j = 0; j <= i; j++) list_remove(&deps[j]->out, n);
            g->nodes.n--;
            goto oom;
        }
    return cudaSuccess;
oom:
    node_free(n);
    return cudaErrorMemoryAllocation;
}

/* ------------------------------------------------------------------------------------ */
/* node parameters                                                                      */

/* Fills ka from a kernel node's parameters: the kernel resolved, the launch configuration
 * checked as a launch checks it, the arguments copied. */
static cudaError_t kernel_args_make(kernel_args *ka, const struct cudaKernelNodeParams *p) {
    if (!p) return cudaErrorInvalidValue;
    cudaError_t e = cudaSuccess;
    struct kentry *k = cpuify_cudart_kernel(p->func, &e);
    if (!k) return p->func ? e : cudaErrorInvalidValue;
    cpuify_cudart_launch l;
    e = cpuify_cudart_prepare_launch(k, p->gridDim, p->blockDim, p->sharedMemBytes, 0, &l);
    if (e) return e;
    const cpuify_kernel_desc *d = cpuify_cudart_kernel_desc(k);
    unsigned char *args = calloc(1, d->param_size ? d->param_size : 1);
    void **argv = calloc(d->nparams ? d->nparams : 1, sizeof *argv);
    if (!args || !argv) {
        free(args);
        free(argv);
        return cudaErrorMemoryAllocation;
    }
    e = cudaSuccess;
    if (p->kernelParams) {
        for (uint32_t i = 0; i < d->nparams && !e; i++) {
            if (!p->kernelParams[i]) e = cudaErrorInvalidValue;
            else memcpy(args + d->param_offsets[i], p->kernelParams[i], d->param_sizes[i]);
        }
    } else if (p->extra) {
        /* one buffer with the parameters laid out as the kernel's parameter space */
        const void *buf = NULL;
        size_t size = 0;
        for (void **x = p->extra; *x != LAUNCH_PARAM_END && !e; x += 2) {
            if (*x == LAUNCH_PARAM_BUFFER_POINTER) buf = x[1];
            else if (*x == LAUNCH_PARAM_BUFFER_SIZE && x[1]) size = *(const size_t *)x[1];
            else e = cudaErrorInvalidValue;
        }
        if (!e && (!buf || size < d->param_size)) e = cudaErrorInvalidValue;
        if (!e) memcpy(args, buf, d->param_size);
    } else if (d->nparams) {
        e = cudaErrorInvalidValue;
    }
    if (e) {
        free(args);
        free(argv);
        return e;
    }
    for (uint32_t i = 0; i < d->nparams; i++) argv[i] = args + d->param_offsets[i];
    const void *host = cpuify_cudart_kernel_host_fun(k);
    *ka = (kernel_args){k, host ? host : p->func, p->gridDim, p->blockDim, p->sharedMemBytes, 0, args, argv};
    return cudaSuccess;
}

static cudaError_t kernel_args_copy(kernel_args *dst, const kernel_args *src) {
    const cpuify_kernel_desc *d = cpuify_cudart_kernel_desc(src->kernel);
    *dst = *src;
    dst->args = malloc(d->param_size ? d->param_size : 1);
    dst->argv = calloc(d->nparams ? d->nparams : 1, sizeof *dst->argv);
    if (!dst->args || !dst->argv) {
        free(dst->args);
        free(dst->argv);
        return cudaErrorMemoryAllocation;
    }
    memcpy(dst->args, src->args, d->param_size);
    for (uint32_t i = 0; i < d->nparams; i++) dst->argv[i] = dst->args + d->param_offsets[i];
    return cudaSuccess;
}

/* A memcpy node's copy as a plan.  A 1D copy (as a capture of cudaMemcpyAsync makes it,
 * like CUDA's) has pitch 0: its row is its pitch. */
static cudaError_t memcpy_plan(const struct cudaMemcpy3DParms *p, cpuify_cudart_copy *c) {
    if (!p) return cudaErrorInvalidValue;
    struct cudaMemcpy3DParms q = *p;
    if (q.extent.height == 1 && q.extent.depth == 1) {
        if (!q.srcArray && q.srcPtr.pitch == 0) q.srcPtr.pitch = q.extent.width + q.srcPos.x;
        if (!q.dstArray && q.dstPtr.pitch == 0) q.dstPtr.pitch = q.extent.width + q.dstPos.x;
    }
    return cpuify_cudart_plan_copy3d(&q, c);
}

static cudaError_t memset_check(const struct cudaMemsetParams *p) {
    if (!p) return cudaErrorInvalidValue;
    return cpuify_cudart_check_memset(p->dst, p->pitch, p->elementSize, p->width, p->height);
}

static int event_valid(cudaEvent_t e) { return e && e->magic == CPUIFY_EVENT_MAGIC; }

static graph_t *graph_clone(const graph_t *g);

/* Copies the parameters of src into n (same type). */
static cudaError_t node_params_copy(node_t *n, const node_t *src) {
    n->disabled = src->disabled;
    switch (src->type) {
    case cudaGraphNodeTypeKernel: return kernel_args_copy(&n->p.kernel, &src->p.kernel);
    case cudaGraphNodeTypeGraph:
        n->p.child = graph_clone(src->p.child);
        return n->p.child ? cudaSuccess : cudaErrorMemoryAllocation;
    default:
        n->p = src->p;
        return cudaSuccess;
    }
}

/* A copy of g: same nodes in the same order, same edges; each node's origin is the node it
 * copies (cudaGraphNodeFindInClone). */
static graph_t *graph_clone(const graph_t *g) {
    graph_t *c = graph_new();
    if (!c) return NULL;
    for (size_t i = 0; i < g->nodes.n; i++) {
        const node_t *s = g->nodes.v[i];
        node_t *n = node_new(s->type);
        if (!n || node_params_copy(n, s)) {
            if (n) {
                n->type = cudaGraphNodeTypeEmpty; /* nothing of its own to free */
                node_free(n);
            }
            graph_free(c);
            return NULL;
        }
        n->origin = s->id;
        if (attach(c, n, NULL, 0)) {
            graph_free(c);
            return NULL;
        }
    }
    for (size_t i = 0; i < g->nodes.n; i++) {
        const node_t *s = g->nodes.v[i];
        node_t *n = c->nodes.v[i];
        for (size_t j = 0; j < s->out.n; j++) {
            node_t *t = c->nodes.v[s->out.v[j]->index];
            if (list_push(&n->out, t) || list_push(&t->in, n)) {
                graph_free(c);
                return NULL;
            }
        }
    }
    /* keep the order of each node's dependencies as in g */
    for (size_t i = 0; i < g->nodes.n; i++) {
        const node_t *s = g->nodes.v[i];
        node_t *n = c->nodes.v[i];
        for (size_t j = 0; j < s->in.n; j++) n->in.v[j] = c->nodes.v[s->in.v[j]->index];
    }
    return c;
}

/* ------------------------------------------------------------------------------------ */
/* stream capture                                                                       */

typedef struct capture {
    uint64_t id;
    graph_t *graph;
    int own_graph;                  /* 0: cudaStreamBeginCaptureToGraph's graph */
    enum cudaStreamCaptureMode mode;
    pthread_t thread;               /* the thread that began it */
    struct CUstream_st *origin;
    int invalidated;
    struct CUstream_st **streams;   /* the streams taking part, origin first */
    size_t nstreams, cap_streams;
    struct capture *next;
} capture;

struct cpuify_stream_capture {
    capture *cap;
    node_list frontier;             /* what the stream's next work depends on */
    cudaGraphEdgeData *edges;       /* zeros, for cudaStreamGetCaptureInfo */
    size_t nedges;
    int blocking;                   /* the stream synchronizes with the legacy stream */
};

struct cpuify_captured_event {
    uint64_t capture_id;            /* of the capture the last record was part of */
    node_list deps;
};

_Atomic int cpuify_graph_open;
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static capture *g_captures;
static uint64_t g_capture_ids;
static _Thread_local enum cudaStreamCaptureMode tls_mode = cudaStreamCaptureModeGlobal;
/* the per-thread default stream, as a stream object that can capture */
static _Thread_local struct CUstream_st tls_per_thread = {CPUIFY_STREAM_MAGIC, 0, 0, NULL, NULL};

/* fork: the child must not inherit g_lock held by a thread it does not have */
static void lock_for_fork(void) { pthread_mutex_lock(&g_lock); }
static void unlock_after_fork(void) { pthread_mutex_unlock(&g_lock); }
__attribute__((constructor)) static void register_graph_fork_handlers(void) {
    pthread_atfork(lock_for_fork, unlock_after_fork, unlock_after_fork);
}

/* The stream object of s: NULL for the legacy stream. */
static struct CUstream_st *stream_obj(cudaStream_t s) {
    if (s == NULL || s == cudaStreamLegacy) return NULL;
    if (s == cudaStreamPerThread) return &tls_per_thread;
    return s;
}

static int stream_valid(cudaStream_t s) {
    return s == NULL || s == cudaStreamLegacy || s == cudaStreamPerThread ||
           s->magic == CPUIFY_STREAM_MAGIC;
}

static capture *find_capture(uint64_t id) {
    for (capture *c = g_captures; c; c = c->next)
        if (c->id == id) return c;
    return NULL;
}

/* The legacy stream is used: a capture of a stream that synchronizes with it would get an
 * implicit dependency on it; CUDA refuses that with cudaErrorStreamCaptureImplicit and
 * invalidates the capture. */
static cudaError_t legacy_use_locked(int invalidate) {
    int hit = 0;
    for (capture *c = g_captures; c; c = c->next)
        for (size_t i = 0; i < c->nstreams; i++)
            if (c->streams[i]->capture->blocking) {
                if (invalidate) c->invalidated = 1;
                hit = 1;
                break;
            }
    return hit ? cudaErrorStreamCaptureImplicit : cudaSuccess;
}

/* A potentially unsafe call (allocation, freeing, synchronizing something that is not
 * captured) by this thread: refused, and the captures concerned invalidated, when this
 * thread has a capture not begun in relaxed mode, or when its mode is global and another
 * thread has a global capture (cudaThreadExchangeStreamCaptureMode). */
static cudaError_t unsafe_locked(void) {
    enum cudaStreamCaptureMode mode = tls_mode;
    if (mode == cudaStreamCaptureModeRelaxed) return cudaSuccess;
    pthread_t self = pthread_self();
    int hit = 0;
    for (capture *c = g_captures; c; c = c->next) {
        if (c->invalidated) continue;
        int mine = pthread_equal(c->thread, self);
        if ((mine && c->mode != cudaStreamCaptureModeRelaxed) ||
            (!mine && mode == cudaStreamCaptureModeGlobal && c->mode == cudaStreamCaptureModeGlobal)) {
            c->invalidated = 1;
            hit = 1;
        }
    }
    return hit ? cudaErrorStreamCaptureUnsupported : cudaSuccess;
}

/* Makes s (not capturing) take part in capture c with the given frontier. */
static cudaError_t join_locked(capture *c, struct CUstream_st *so, node_t *const *deps, size_t ndeps) {
    struct cpuify_stream_capture *sc = calloc(1, sizeof *sc);
    if (!sc) return cudaErrorMemoryAllocation;
    if (c->nstreams == c->cap_streams) {
        size_t n = c->cap_streams ? c->cap_streams * 2 : 4;
        struct CUstream_st **v = realloc(c->streams, n * sizeof *v);
        if (!v) {
            free(sc);
            return cudaErrorMemoryAllocation;
        }
        c->streams = v;
        c->cap_streams = n;
    }
    if (list_copy(&sc->frontier, deps, ndeps)) {
        free(sc);
        return cudaErrorMemoryAllocation;
    }
    sc->cap = c;
    sc->blocking = so == &tls_per_thread || !(so->flags & cudaStreamNonBlocking);
    c->streams[c->nstreams++] = so;
    so->capture = sc;
    return cudaSuccess;
}

static void leave_locked(struct CUstream_st *so) {
    struct cpuify_stream_capture *sc = so->capture;
    if (!sc) return;
    capture *c = sc->cap;
    for (size_t i = 0; i < c->nstreams; i++)
        if (c->streams[i] == so) {
            memmove(&c->streams[i], &c->streams[i + 1], (c->nstreams - i - 1) * sizeof *c->streams);
            c->nstreams--;
            break;
        }
    list_free(&sc->frontier);
    free(sc->edges);
    free(sc);
    so->capture = NULL;
}

/* Ends capture c: every stream leaves it; returns its graph (c is freed). */
static graph_t *terminate_locked(capture *c) {
    while (c->nstreams) leave_locked(c->streams[c->nstreams - 1]);
    for (capture **pp = &g_captures; *pp; pp = &(*pp)->next)
        if (*pp == c) {
            *pp = c->next;
            break;
        }
    atomic_fetch_sub(&cpuify_graph_open, 1);
    graph_t *g = c->graph;
    free(c->streams);
    free(c);
    return g;
}

/* Whether the work of every stream of c is an ancestor of (or in) the origin's frontier. */
static int joined_locked(capture *c) {
    uint64_t m = atomic_fetch_add(&g_marks, 1) + 1;
    node_list stack = {0};
    const node_list *f = &c->origin->capture->frontier;
    for (size_t i = 0; i < f->n; i++)
        if (f->v[i]->mark != m) {
            f->v[i]->mark = m;
            if (list_push(&stack, f->v[i])) goto oom;
        }
    while (stack.n) {
        node_t *n = stack.v[--stack.n];
        for (size_t i = 0; i < n->in.n; i++)
            if (n->in.v[i]->mark != m) {
                n->in.v[i]->mark = m;
                if (list_push(&stack, n->in.v[i])) goto oom;
            }
    }
    list_free(&stack);
    for (size_t s = 0; s < c->nstreams; s++) {
        const node_list *sf = &c->streams[s]->capture->frontier;
        for (size_t i = 0; i < sf->n; i++)
            if (sf->v[i]->mark != m) return 0;
    }
    return 1;
oom:
    list_free(&stack);
    return 1;
}

int cpuify_graph_enqueue(cudaStream_t s) {
    struct CUstream_st *so = stream_obj(s);
    int r = 0;
    pthread_mutex_lock(&g_lock);
    if (!so) r = legacy_use_locked(1);
    else if (so->capture)
        r = so->capture->cap->invalidated ? cudaErrorStreamCaptureInvalidated : CPUIFY_CAPTURE;
    pthread_mutex_unlock(&g_lock);
    return r;
}

/* Adds node n to the capture of stream s (after its frontier, which n then replaces). */
static cudaError_t capture_add(cudaStream_t s, node_t *n) {
    struct CUstream_st *so = stream_obj(s);
    pthread_mutex_lock(&g_lock);
    cudaError_t e = cudaSuccess;
    struct cpuify_stream_capture *sc = so ? so->capture : NULL;
    if (!sc || sc->cap->invalidated) {
        e = cudaErrorStreamCaptureInvalidated;
        node_free(n);
    } else {
        e = attach(sc->cap->graph, n, sc->frontier.v, sc->frontier.n);
        if (!e) {
            sc->frontier.n = 0;
            list_push(&sc->frontier, n); /* (never fails: the list has room) */
        } else {
            sc->cap->invalidated = 1;
        }
    }
    pthread_mutex_unlock(&g_lock);
    return e;
}

cudaError_t cpuify_graph_capture_kernel(cudaStream_t s, const cpuify_cudart_launch *l,
                                        const unsigned char *params) {
    const cpuify_kernel_desc *d = cpuify_cudart_kernel_desc(l->kernel);
    node_t *n = node_new(cudaGraphNodeTypeKernel);
    kernel_args *ka = n ? &n->p.kernel : NULL;
    if (ka) {
        ka->args = malloc(d->param_size ? d->param_size : 1);
        ka->argv = calloc(d->nparams ? d->nparams : 1, sizeof *ka->argv);
    }
    if (!ka || !ka->args || !ka->argv) {
        if (n) node_free(n);
        return cudaErrorMemoryAllocation;
    }
    memcpy(ka->args, params, d->param_size);
    for (uint32_t i = 0; i < d->nparams; i++) ka->argv[i] = ka->args + d->param_offsets[i];
    ka->kernel = l->kernel;
    ka->func = cpuify_cudart_kernel_host_fun(l->kernel);
    ka->grid = (dim3){l->dims.grid[0], l->dims.grid[1], l->dims.grid[2]};
    ka->block = (dim3){l->dims.block[0], l->dims.block[1], l->dims.block[2]};
    ka->shared = l->dyn_shared;
    ka->cooperative = l->cooperative;
    return capture_add(s, n);
}

cudaError_t cpuify_graph_capture_memcpy(cudaStream_t s, const struct cudaMemcpy3DParms *p) {
    node_t *n = node_new(cudaGraphNodeTypeMemcpy);
    if (!n) return cudaErrorMemoryAllocation;
    n->p.memcpy = *p;
    return capture_add(s, n);
}

cudaError_t cpuify_graph_capture_memset(cudaStream_t s, void *dst, size_t pitch, int value,
                                        size_t width, size_t height) {
    node_t *n = node_new(cudaGraphNodeTypeMemset);
    if (!n) return cudaErrorMemoryAllocation;
    /* as CUDA captures it: the byte value, 1-byte elements */
    n->p.memset = (struct cudaMemsetParams){dst, height > 1 ? pitch : 0, (unsigned)value & 0xffu, 1,
                                            width, height};
    return capture_add(s, n);
}

cudaError_t cpuify_graph_capture_host(cudaStream_t s, cudaHostFn_t fn, void *data) {
    node_t *n = node_new(cudaGraphNodeTypeHost);
    if (!n) return cudaErrorMemoryAllocation;
    n->p.host = (struct cudaHostNodeParams){fn, data};
    return capture_add(s, n);
}

cudaError_t cpuify_graph_capture_event(cudaStream_t s, cudaEvent_t e, int record) {
    node_t *n = node_new(record ? cudaGraphNodeTypeEventRecord : cudaGraphNodeTypeWaitEvent);
    if (!n) return cudaErrorMemoryAllocation;
    n->p.event = e;
    return capture_add(s, n);
}

/* Invalidates the capture of stream s and returns e. */
cudaError_t cpuify_graph_invalidate(cudaStream_t s, cudaError_t e) {
    struct CUstream_st *so = stream_obj(s);
    pthread_mutex_lock(&g_lock);
    if (so && so->capture) so->capture->cap->invalidated = 1;
    pthread_mutex_unlock(&g_lock);
    return e;
}

cudaError_t cpuify_graph_refuse(cudaStream_t s, const char *call) {
    static int said;
    if (!__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED))
        fprintf(stderr, "cpuify: %s on a capturing stream is not supported by cpuify's stream "
                        "capture (cudaErrorStreamCaptureUnsupported; the capture is invalidated)\n", call);
    return cpuify_graph_invalidate(s, cudaErrorStreamCaptureUnsupported);
}

static void forget_event_locked(cudaEvent_t e) {
    if (!e->captured) return;
    list_free(&e->captured->deps);
    free(e->captured);
    e->captured = NULL;
}

void cpuify_graph_forget_event(cudaEvent_t e) {
    pthread_mutex_lock(&g_lock);
    forget_event_locked(e);
    pthread_mutex_unlock(&g_lock);
}

int cpuify_graph_event_record(cudaEvent_t e, cudaStream_t s) {
    struct CUstream_st *so = stream_obj(s);
    int r = 0;
    pthread_mutex_lock(&g_lock);
    if (!so) r = legacy_use_locked(1);
    if (!r && so && so->capture) {
        struct cpuify_stream_capture *sc = so->capture;
        if (sc->cap->invalidated) {
            r = cudaErrorStreamCaptureInvalidated;
        } else {
            if (!e->captured) e->captured = calloc(1, sizeof *e->captured);
            if (!e->captured || list_copy(&e->captured->deps, sc->frontier.v, sc->frontier.n)) {
                r = cudaErrorMemoryAllocation;
            } else {
                e->captured->capture_id = sc->cap->id;
                r = CPUIFY_CAPTURE;
            }
        }
    } else if (!r) {
        forget_event_locked(e);   /* an ordinary record replaces a captured one */
    }
    pthread_mutex_unlock(&g_lock);
    return r;
}

int cpuify_graph_stream_wait(cudaStream_t s, cudaEvent_t e) {
    struct CUstream_st *so = stream_obj(s);
    int r = 0;
    pthread_mutex_lock(&g_lock);
    struct cpuify_captured_event *ce = e->captured;
    capture *ec = ce ? find_capture(ce->capture_id) : NULL;
    if (ce && !ec) {
        r = cudaErrorInvalidValue;          /* recorded in a capture that has ended */
    } else if (!so) {
        if (ec) {
            ec->invalidated = 1;
            r = cudaErrorStreamCaptureImplicit;
        } else {
            r = legacy_use_locked(1);
        }
    } else if (so->capture) {
        struct cpuify_stream_capture *sc = so->capture;
        if (sc->cap->invalidated) {
            r = cudaErrorStreamCaptureInvalidated;
        } else if (!ce) {
            /* work outside the capture: CUDA refuses the dependency */
            if (e->recorded) {
                sc->cap->invalidated = 1;
                r = cudaErrorStreamCaptureIsolation;
            }
        } else if (ec != sc->cap) {
            sc->cap->invalidated = ec->invalidated = 1;
            r = cudaErrorStreamCaptureMerge;
        } else {
            for (size_t i = 0; i < ce->deps.n && !r; i++)
                if (!list_has(&sc->frontier, ce->deps.v[i]) && list_push(&sc->frontier, ce->deps.v[i]))
                    r = cudaErrorMemoryAllocation;
        }
    } else if (ec) {
        /* a fork: s joins the capture */
        r = ec->invalidated ? cudaErrorStreamCaptureInvalidated
                            : join_locked(ec, so, ce->deps.v, ce->deps.n);
    }
    pthread_mutex_unlock(&g_lock);
    return r;
}

cudaError_t cpuify_graph_unsafe_call(void) {
    pthread_mutex_lock(&g_lock);
    cudaError_t e = unsafe_locked();
    pthread_mutex_unlock(&g_lock);
    return e;
}

cudaError_t cpuify_graph_sync_stream(cudaStream_t s, int query) {
    struct CUstream_st *so = stream_obj(s);
    cudaError_t e = cudaSuccess;
    pthread_mutex_lock(&g_lock);
    if (so && so->capture) {
        so->capture->cap->invalidated = 1;
        e = cudaErrorStreamCaptureUnsupported;
    } else {
        /* querying another stream is as unsafe as synchronizing it (measured) */
        (void)query;
        if (!so) e = legacy_use_locked(1);
        if (!e) e = unsafe_locked();
    }
    pthread_mutex_unlock(&g_lock);
    return e;
}

cudaError_t cpuify_graph_sync_event(cudaEvent_t ev, int how) {
    cudaError_t e = cudaSuccess;
    pthread_mutex_lock(&g_lock);
    if (ev->captured) {
        capture *c = find_capture(ev->captured->capture_id);
        if (c) {
            /* the event stands for work that does not run: CUDA refuses (and, but for
             * cudaEventElapsedTime, invalidates the capture) */
            if (how != CPUIFY_EVENT_TIMING) c->invalidated = 1;
            e = cudaErrorCapturedEvent;
        } else {
            e = how == CPUIFY_EVENT_TIMING ? cudaErrorInvalidResourceHandle : cudaErrorInvalidValue;
        }
    } else if (how != CPUIFY_EVENT_TIMING) {
        e = unsafe_locked();   /* querying is as unsafe as synchronizing (measured) */
    }
    pthread_mutex_unlock(&g_lock);
    return e;
}

cudaError_t cpuify_graph_sync_device(void) {
    /* the device encompasses every capturing stream */
    pthread_mutex_lock(&g_lock);
    cudaError_t e = g_captures ? cudaErrorStreamCaptureUnsupported : cudaSuccess;
    for (capture *c = g_captures; c; c = c->next) c->invalidated = 1;
    pthread_mutex_unlock(&g_lock);
    return e;
}

void cpuify_graph_forget_stream(cudaStream_t s) {
    pthread_mutex_lock(&g_lock);
    struct cpuify_stream_capture *sc = s->capture;
    if (sc) {
        capture *c = sc->cap;
        c->invalidated = 1;
        if (c->origin == s) {
            int own = c->own_graph;
            graph_t *g = terminate_locked(c);   /* nobody can end it any more */
            if (own) graph_free(g);
        } else {
            leave_locked(s);
        }
    }
    pthread_mutex_unlock(&g_lock);
}

static cudaError_t begin_capture(cudaStream_t s, graph_t *g, const cudaGraphNode_t *deps, size_t ndeps,
                                 enum cudaStreamCaptureMode mode) {
    CHECK_STICKY();
    if ((unsigned)mode > cudaStreamCaptureModeRelaxed) FAIL(cudaErrorInvalidValue);
    if (s == NULL || s == cudaStreamLegacy) FAIL(cudaErrorStreamCaptureUnsupported);
    if (!stream_valid(s)) FAIL(cudaErrorInvalidResourceHandle);
    struct CUstream_st *so = stream_obj(s);
    pthread_mutex_lock(&g_lock);
    cudaError_t e = cudaSuccess;
    capture *c = NULL;
    if (so->capture) {
        e = cudaErrorIllegalState;
        goto out;
    }
    c = calloc(1, sizeof *c);
    if (!c) {
        e = cudaErrorMemoryAllocation;
        goto out;
    }
    c->own_graph = g == NULL;
    c->graph = g ? g : graph_new();
    c->mode = mode;
    c->thread = pthread_self();
    c->origin = so;
    c->id = ++g_capture_ids;
    if (!c->graph || (e = join_locked(c, so, deps, ndeps))) {
        if (!e) e = cudaErrorMemoryAllocation;
        if (c->own_graph) graph_free(c->graph);
        free(c->streams);
        free(c);
        goto out;
    }
    c->next = g_captures;
    g_captures = c;
    atomic_fetch_add(&cpuify_graph_open, 1);
out:
    pthread_mutex_unlock(&g_lock);
    return e ? cpuify_cudart_fail(e) : cudaSuccess;
}

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, enum cudaStreamCaptureMode mode) {
    return begin_capture(stream, NULL, NULL, 0, mode);
}

static cudaError_t check_edge_data(const cudaGraphEdgeData *data, size_t n) {
    for (size_t i = 0; data && i < n; i++)
        if (data[i].from_port || data[i].to_port || data[i].type) return cudaErrorNotSupported;
    return cudaSuccess;
}

#if CUDART_VERSION >= 13000
cudaError_t cudaStreamBeginCaptureToGraph(cudaStream_t stream, cudaGraph_t graph,
                                          const cudaGraphNode_t *dependencies,
                                          const cudaGraphEdgeData *dependencyData,
                                          size_t numDependencies, enum cudaStreamCaptureMode mode) {
    if (!graph_ok(graph)) FAIL(cudaErrorInvalidValue);
    cudaError_t e = check_deps(graph, dependencies, numDependencies);
    if (!e) e = check_edge_data(dependencyData, numDependencies);
    if (e) FAIL(e);
    return begin_capture(stream, graph, dependencies, numDependencies, mode);
}
#endif

cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *pGraph) {
    CHECK_STICKY();
    if (!stream_valid(s)) FAIL(cudaErrorInvalidResourceHandle);
    struct CUstream_st *so = stream_obj(s);
    if (!so) FAIL(cudaErrorIllegalState);
    pthread_mutex_lock(&g_lock);
    struct cpuify_stream_capture *sc = so->capture;
    if (!sc) {
        pthread_mutex_unlock(&g_lock);
        FAIL(cudaErrorIllegalState);
    }
    capture *c = sc->cap;
    if (c->origin != so) {
        c->invalidated = 1;
        pthread_mutex_unlock(&g_lock);
        FAIL(cudaErrorStreamCaptureUnmatched);
    }
    cudaError_t e = cudaSuccess;
    if (c->mode != cudaStreamCaptureModeRelaxed && !pthread_equal(c->thread, pthread_self()))
        e = cudaErrorStreamCaptureWrongThread;
    else if (c->invalidated)
        e = cudaErrorStreamCaptureInvalidated;
    else if (!joined_locked(c))
        e = cudaErrorStreamCaptureUnjoined;
    int own = c->own_graph;
    graph_t *g = terminate_locked(c);
    pthread_mutex_unlock(&g_lock);
    if (e || !pGraph) {
        if (own) graph_free(g);
        if (pGraph) *pGraph = NULL;
        return e ? cpuify_cudart_fail(e) : cudaSuccess;
    }
    *pGraph = g;
    return cudaSuccess;
}

/* The legacy stream captures nothing; asking while a stream that synchronizes with it
 * captures is cudaErrorStreamCaptureImplicit, as in CUDA. */
static cudaError_t capture_status(cudaStream_t s, enum cudaStreamCaptureStatus *status,
                                  struct cpuify_stream_capture **out) {
    if (!status) return cudaErrorInvalidValue;
    if (!stream_valid(s)) return cudaErrorInvalidResourceHandle;
    struct CUstream_st *so = stream_obj(s);
    *out = NULL;
    if (!so) {
        *status = cudaStreamCaptureStatusNone;
        return legacy_use_locked(0);
    }
    struct cpuify_stream_capture *sc = so->capture;
    *status = !sc ? cudaStreamCaptureStatusNone
              : sc->cap->invalidated ? cudaStreamCaptureStatusInvalidated : cudaStreamCaptureStatusActive;
    *out = sc;
    return cudaSuccess;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t s, enum cudaStreamCaptureStatus *pCaptureStatus) {
    CHECK_STICKY();
    struct cpuify_stream_capture *sc;
    pthread_mutex_lock(&g_lock);
    cudaError_t e = capture_status(s, pCaptureStatus, &sc);
    pthread_mutex_unlock(&g_lock);
    return e ? cpuify_cudart_fail(e) : cudaSuccess;
}

#if CUDART_VERSION >= 13000
cudaError_t cudaStreamGetCaptureInfo(cudaStream_t s, enum cudaStreamCaptureStatus *captureStatus_out,
                                     unsigned long long *id_out, cudaGraph_t *graph_out,
                                     const cudaGraphNode_t **dependencies_out,
                                     const cudaGraphEdgeData **edgeData_out,
                                     size_t *numDependencies_out) {
    CHECK_STICKY();
    struct cpuify_stream_capture *sc;
    pthread_mutex_lock(&g_lock);
    cudaError_t e = capture_status(s, captureStatus_out, &sc);
    if (!e && sc) {
        if (id_out) *id_out = sc->cap->id;
        if (graph_out) *graph_out = sc->cap->graph;
        if (dependencies_out) *dependencies_out = (const cudaGraphNode_t *)sc->frontier.v;
        if (numDependencies_out) *numDependencies_out = sc->frontier.n;
        if (edgeData_out) {
            if (sc->nedges < sc->frontier.n) {
                cudaGraphEdgeData *z = calloc(sc->frontier.n, sizeof *z);
                if (z) {
                    free(sc->edges);
                    sc->edges = z;
                    sc->nedges = sc->frontier.n;
                }
            }
            *edgeData_out = sc->nedges >= sc->frontier.n ? sc->edges : NULL;
        }
    }
    pthread_mutex_unlock(&g_lock);
    return e ? cpuify_cudart_fail(e) : cudaSuccess;
}

cudaError_t cudaStreamUpdateCaptureDependencies(cudaStream_t s, cudaGraphNode_t *dependencies,
                                                const cudaGraphEdgeData *dependencyData,
                                                size_t numDependencies, unsigned int flags) {
    CHECK_STICKY();
    if (flags > cudaStreamSetCaptureDependencies) FAIL(cudaErrorInvalidValue);
    if (!stream_valid(s)) FAIL(cudaErrorInvalidResourceHandle);
    cudaError_t e = check_edge_data(dependencyData, numDependencies);
    if (e) FAIL(e);
    struct CUstream_st *so = stream_obj(s);
    pthread_mutex_lock(&g_lock);
    struct cpuify_stream_capture *sc = so ? so->capture : NULL;
    if (!sc) e = cudaErrorIllegalState;
    else if (sc->cap->invalidated) e = cudaErrorStreamCaptureInvalidated;
    else e = check_deps(sc->cap->graph, dependencies, numDependencies);
    if (!e) {
        if (flags == cudaStreamSetCaptureDependencies) sc->frontier.n = 0;
        for (size_t i = 0; i < numDependencies && !e; i++)
            if (!list_has(&sc->frontier, dependencies[i]) && list_push(&sc->frontier, dependencies[i]))
                e = cudaErrorMemoryAllocation;
    }
    pthread_mutex_unlock(&g_lock);
    return e ? cpuify_cudart_fail(e) : cudaSuccess;
}
#endif

cudaError_t cudaThreadExchangeStreamCaptureMode(enum cudaStreamCaptureMode *mode) {
    if (!mode) FAIL(cudaErrorInvalidValue);
    enum cudaStreamCaptureMode old = tls_mode;
    tls_mode = *mode;
    *mode = old;
    return cudaSuccess;
}

/* ------------------------------------------------------------------------------------ */
/* explicit construction                                                                */

cudaError_t cudaGraphCreate(cudaGraph_t *pGraph, unsigned int flags) {
    CHECK_STICKY();
    if (!pGraph || flags) FAIL(cudaErrorInvalidValue);
    graph_t *g = graph_new();
    if (!g) FAIL(cudaErrorMemoryAllocation);
    *pGraph = g;
    return cudaSuccess;
}

static int graph_capturing(const graph_t *g) {
    int busy = 0;
    pthread_mutex_lock(&g_lock);
    for (capture *c = g_captures; c; c = c->next)
        if (c->graph == g) busy = 1;
    pthread_mutex_unlock(&g_lock);
    return busy;
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
    CHECK_STICKY();
    if (!graph_ok(graph) || graph_capturing(graph)) FAIL(cudaErrorInvalidValue);
    graph_free(graph);
    return cudaSuccess;
}

/* The common part of cudaGraphAdd*Node: n (parameters set) joins graph after deps. */
static cudaError_t add_node(cudaGraphNode_t *pNode, graph_t *g, const cudaGraphNode_t *deps,
                            size_t ndeps, node_t *n) {
    cudaError_t e = !pNode || !graph_ok(g) ? cudaErrorInvalidValue : check_deps(g, deps, ndeps);
    if (e) {
        node_free(n);
        FAIL(e);
    }
    e = attach(g, n, deps, ndeps);
    if (e) FAIL(e);
    *pNode = n;
    return cudaSuccess;
}

/* A new node of `type`, or NULL (and *e) */
static node_t *make_node(enum cudaGraphNodeType type, cudaError_t *e) {
    node_t *n = node_new(type);
    *e = n ? cudaSuccess : cudaErrorMemoryAllocation;
    return n;
}

cudaError_t cudaGraphAddKernelNode(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
                                   const cudaGraphNode_t *pDependencies, size_t numDependencies,
                                   const struct cudaKernelNodeParams *pNodeParams) {
    CHECK_STICKY();
    cudaError_t e;
    node_t *n = make_node(cudaGraphNodeTypeKernel, &e);
    if (n) e = kernel_args_make(&n->p.kernel, pNodeParams);
    if (e) {
        if (n) {
            n->type = cudaGraphNodeTypeEmpty;
            node_free(n);
        }
        FAIL(e);
    }
    return add_node(pGraphNode, graph, pDependencies, numDependencies, n);
}

cudaError_t cudaGraphAddMemcpyNode(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
                                   const cudaGraphNode_t *pDependencies, size_t numDependencies,
                                   const struct cudaMemcpy3DParms *pCopyParams) {
    CHECK_STICKY();
    cpuify_cudart_copy c;
    cudaError_t e = memcpy_plan(pCopyParams, &c);
    if (e) FAIL(e);
    node_t *n = make_node(cudaGraphNodeTypeMemcpy, &e);
    if (!n) FAIL(e);
    n->p.memcpy = *pCopyParams;
    return add_node(pGraphNode, graph, pDependencies, numDependencies, n);
}

static struct cudaMemcpy3DParms params_1d(void *dst, const void *src, size_t count,
                                          enum cudaMemcpyKind kind) {
    struct cudaMemcpy3DParms p = {0};
    p.srcPtr.ptr = (void *)src;
    p.dstPtr.ptr = dst;
    p.extent = (struct cudaExtent){count, 1, 1};
    p.kind = kind;
    return p;
}

cudaError_t cudaGraphAddMemcpyNode1D(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
                                     const cudaGraphNode_t *pDependencies, size_t numDependencies,
                                     void *dst, const void *src, size_t count, enum cudaMemcpyKind kind) {
    struct cudaMemcpy3DParms p = params_1d(dst, src, count, kind);
    return cudaGraphAddMemcpyNode(pGraphNode, graph, pDependencies, numDependencies, &p);
}

cudaError_t cudaGraphAddMemcpyNodeToSymbol(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
                                           const cudaGraphNode_t *pDependencies, size_t numDependencies,
                                           const void *symbol, const void *src, size_t count,
                                           size_t offset, enum cudaMemcpyKind kind) {
    char *addr;
    cudaError_t e = cpuify_cudart_symbol_address(symbol, count, offset, &addr);
    if (e) FAIL(e);
    return cudaGraphAddMemcpyNode1D(pGraphNode, graph, pDependencies, numDependencies, addr, src,
                                    count, kind);
}

cudaError_t cudaGraphAddMemcpyNodeFromSymbol(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
                                             const cudaGraphNode_t *pDependencies,
                                             size_t numDependencies, void *dst, const void *symbol,
                                             size_t count, size_t offset, enum cudaMemcpyKind kind) {
    char *addr;
    cudaError_t e = cpuify_cudart_symbol_address(symbol, count, offset, &addr);
    if (e) FAIL(e);
    return cudaGraphAddMemcpyNode1D(pGraphNode, graph, pDependencies, numDependencies, dst, addr,
                                    count, kind);
}

cudaError_t cudaGraphAddMemsetNode(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
                                   const cudaGraphNode_t *pDependencies, size_t numDependencies,
                                   const struct cudaMemsetParams *pMemsetParams) {
    CHECK_STICKY();
    cudaError_t e = memset_check(pMemsetParams);
    if (e) FAIL(e);
    node_t *n = make_node(cudaGraphNodeTypeMemset, &e);
    if (!n) FAIL(e);
    n->p.memset = *pMemsetParams;
    return add_node(pGraphNode, graph, pDependencies, numDependencies, n);
}

cudaError_t cudaGraphAddHostNode(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
                                 const cudaGraphNode_t *pDependencies, size_t numDependencies,
                                 const struct cudaHostNodeParams *pNodeParams) {
    CHECK_STICKY();
    if (!pNodeParams || !pNodeParams->fn) FAIL(cudaErrorInvalidValue);
    cudaError_t e;
    node_t *n = make_node(cudaGraphNodeTypeHost, &e);
    if (!n) FAIL(e);
    n->p.host = *pNodeParams;
    return add_node(pGraphNode, graph, pDependencies, numDependencies, n);
}

cudaError_t cudaGraphAddChildGraphNode(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
                                       const cudaGraphNode_t *pDependencies, size_t numDependencies,
                                       cudaGraph_t childGraph) {
    CHECK_STICKY();
    if (!graph_ok(childGraph) || childGraph == graph) FAIL(cudaErrorInvalidValue);
    cudaError_t e;
    node_t *n = make_node(cudaGraphNodeTypeGraph, &e);
    if (!n) FAIL(e);
    /* the node owns a copy: later changes to childGraph do not reach it */
    n->p.child = graph_clone(childGraph);
    if (!n->p.child) {
        n->type = cudaGraphNodeTypeEmpty;
        node_free(n);
        FAIL(cudaErrorMemoryAllocation);
    }
    return add_node(pGraphNode, graph, pDependencies, numDependencies, n);
}

cudaError_t cudaGraphAddEmptyNode(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
                                  const cudaGraphNode_t *pDependencies, size_t numDependencies) {
    CHECK_STICKY();
    cudaError_t e;
    node_t *n = make_node(cudaGraphNodeTypeEmpty, &e);
    if (!n) FAIL(e);
    return add_node(pGraphNode, graph, pDependencies, numDependencies, n);
}

static cudaError_t add_event_node(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
                                  const cudaGraphNode_t *pDependencies, size_t numDependencies,
                                  cudaEvent_t event, enum cudaGraphNodeType type) {
    CHECK_STICKY();
    if (!event_valid(event)) FAIL(cudaErrorInvalidValue);
    cudaError_t e;
    node_t *n = make_node(type, &e);
    if (!n) FAIL(e);
    n->p.event = event;
    return add_node(pGraphNode, graph, pDependencies, numDependencies, n);
}

cudaError_t cudaGraphAddEventRecordNode(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
                                        const cudaGraphNode_t *pDependencies, size_t numDependencies,
                                        cudaEvent_t event) {
    return add_event_node(pGraphNode, graph, pDependencies, numDependencies, event,
                          cudaGraphNodeTypeEventRecord);
}

cudaError_t cudaGraphAddEventWaitNode(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
                                      const cudaGraphNode_t *pDependencies, size_t numDependencies,
                                      cudaEvent_t event) {
    return add_event_node(pGraphNode, graph, pDependencies, numDependencies, event,
                          cudaGraphNodeTypeWaitEvent);
}

/* node parameters: get and set */

static cudaError_t node_of_type(const node_t *n, enum cudaGraphNodeType type) {
    return node_ok(n) && n->type == type ? cudaSuccess : cudaErrorInvalidValue;
}

cudaError_t cudaGraphKernelNodeGetParams(cudaGraphNode_t node, struct cudaKernelNodeParams *p) {
    CHECK_STICKY();
    if (!p || node_of_type(node, cudaGraphNodeTypeKernel)) FAIL(cudaErrorInvalidValue);
    const kernel_args *ka = &node->p.kernel;
    *p = (struct cudaKernelNodeParams){(void *)ka->func, ka->grid, ka->block, ka->shared, ka->argv, NULL};
    return cudaSuccess;
}

cudaError_t cudaGraphKernelNodeSetParams(cudaGraphNode_t node, const struct cudaKernelNodeParams *p) {
    CHECK_STICKY();
    if (node_of_type(node, cudaGraphNodeTypeKernel)) FAIL(cudaErrorInvalidValue);
    kernel_args ka;
    cudaError_t e = kernel_args_make(&ka, p);
    if (e) FAIL(e);
    node_params_free(node);
    node->p.kernel = ka;
    return cudaSuccess;
}

cudaError_t cudaGraphMemcpyNodeGetParams(cudaGraphNode_t node, struct cudaMemcpy3DParms *p) {
    CHECK_STICKY();
    if (!p || node_of_type(node, cudaGraphNodeTypeMemcpy)) FAIL(cudaErrorInvalidValue);
    *p = node->p.memcpy;
    return cudaSuccess;
}

cudaError_t cudaGraphMemcpyNodeSetParams(cudaGraphNode_t node, const struct cudaMemcpy3DParms *p) {
    CHECK_STICKY();
    if (node_of_type(node, cudaGraphNodeTypeMemcpy)) FAIL(cudaErrorInvalidValue);
    cpuify_cudart_copy c;
    cudaError_t e = memcpy_plan(p, &c);
    if (e) FAIL(e);
    node->p.memcpy = *p;
    return cudaSuccess;
}

cudaError_t cudaGraphMemcpyNodeSetParams1D(cudaGraphNode_t node, void *dst, const void *src,
                                           size_t count, enum cudaMemcpyKind kind) {
    struct cudaMemcpy3DParms p = params_1d(dst, src, count, kind);
    return cudaGraphMemcpyNodeSetParams(node, &p);
}

cudaError_t cudaGraphMemsetNodeGetParams(cudaGraphNode_t node, struct cudaMemsetParams *p) {
    CHECK_STICKY();
    if (!p || node_of_type(node, cudaGraphNodeTypeMemset)) FAIL(cudaErrorInvalidValue);
    *p = node->p.memset;
    return cudaSuccess;
}

cudaError_t cudaGraphMemsetNodeSetParams(cudaGraphNode_t node, const struct cudaMemsetParams *p) {
    CHECK_STICKY();
    if (node_of_type(node, cudaGraphNodeTypeMemset)) FAIL(cudaErrorInvalidValue);
    cudaError_t e = memset_check(p);
    if (e) FAIL(e);
    node->p.memset = *p;
    return cudaSuccess;
}

cudaError_t cudaGraphHostNodeGetParams(cudaGraphNode_t node, struct cudaHostNodeParams *p) {
    CHECK_STICKY();
    if (!p || node_of_type(node, cudaGraphNodeTypeHost)) FAIL(cudaErrorInvalidValue);
    *p = node->p.host;
    return cudaSuccess;
}

cudaError_t cudaGraphHostNodeSetParams(cudaGraphNode_t node, const struct cudaHostNodeParams *p) {
    CHECK_STICKY();
    if (!p || !p->fn || node_of_type(node, cudaGraphNodeTypeHost)) FAIL(cudaErrorInvalidValue);
    node->p.host = *p;
    return cudaSuccess;
}

cudaError_t cudaGraphChildGraphNodeGetGraph(cudaGraphNode_t node, cudaGraph_t *pGraph) {
    CHECK_STICKY();
    if (!pGraph || node_of_type(node, cudaGraphNodeTypeGraph)) FAIL(cudaErrorInvalidValue);
    *pGraph = node->p.child;
    return cudaSuccess;
}

static cudaError_t event_get(cudaGraphNode_t node, cudaEvent_t *out, enum cudaGraphNodeType type) {
    CHECK_STICKY();
    if (!out || node_of_type(node, type)) FAIL(cudaErrorInvalidValue);
    *out = node->p.event;
    return cudaSuccess;
}

static cudaError_t event_set(cudaGraphNode_t node, cudaEvent_t e, enum cudaGraphNodeType type) {
    CHECK_STICKY();
    if (!event_valid(e) || node_of_type(node, type)) FAIL(cudaErrorInvalidValue);
    node->p.event = e;
    return cudaSuccess;
}

cudaError_t cudaGraphEventRecordNodeGetEvent(cudaGraphNode_t node, cudaEvent_t *event_out) {
    return event_get(node, event_out, cudaGraphNodeTypeEventRecord);
}
cudaError_t cudaGraphEventRecordNodeSetEvent(cudaGraphNode_t node, cudaEvent_t event) {
    return event_set(node, event, cudaGraphNodeTypeEventRecord);
}
cudaError_t cudaGraphEventWaitNodeGetEvent(cudaGraphNode_t node, cudaEvent_t *event_out) {
    return event_get(node, event_out, cudaGraphNodeTypeWaitEvent);
}
cudaError_t cudaGraphEventWaitNodeSetEvent(cudaGraphNode_t node, cudaEvent_t event) {
    return event_set(node, event, cudaGraphNodeTypeWaitEvent);
}

cudaError_t cudaGraphNodeGetType(cudaGraphNode_t node, enum cudaGraphNodeType *pType) {
    CHECK_STICKY();
    if (!node_ok(node) || !pType) FAIL(cudaErrorInvalidValue);
    *pType = node->type;
    return cudaSuccess;
}

/* queries: lists are returned in creation order */

/* The common shape of the queries: with out NULL, *count = the size; else up to *count
 * entries, the rest NULL, and *count = the number given. */
static cudaError_t give_nodes(node_t *const *src, size_t n, cudaGraphNode_t *out,
                              cudaGraphEdgeData *edges, size_t *count) {
    if (!count) return cudaErrorInvalidValue;
    if (!out) {
        *count = n;
        return cudaSuccess;
    }
    size_t k = n < *count ? n : *count;
    for (size_t i = 0; i < *count; i++) {
        out[i] = i < k ? src[i] : NULL;
        if (edges) memset(&edges[i], 0, sizeof edges[i]);
    }
    *count = k;
    return cudaSuccess;
}

cudaError_t cudaGraphGetNodes(cudaGraph_t graph, cudaGraphNode_t *nodes, size_t *numNodes) {
    CHECK_STICKY();
    if (!graph_ok(graph)) FAIL(cudaErrorInvalidValue);
    cudaError_t e = give_nodes(graph->nodes.v, graph->nodes.n, nodes, NULL, numNodes);
    return e ? cpuify_cudart_fail(e) : cudaSuccess;
}

cudaError_t cudaGraphGetRootNodes(cudaGraph_t graph, cudaGraphNode_t *pRootNodes, size_t *pNumRootNodes) {
    CHECK_STICKY();
    if (!graph_ok(graph)) FAIL(cudaErrorInvalidValue);
    node_list roots = {0};
    for (size_t i = 0; i < graph->nodes.n; i++)
        if (!graph->nodes.v[i]->in.n && list_push(&roots, graph->nodes.v[i])) {
            list_free(&roots);
            FAIL(cudaErrorMemoryAllocation);
        }
    cudaError_t e = give_nodes(roots.v, roots.n, pRootNodes, NULL, pNumRootNodes);
    list_free(&roots);
    return e ? cpuify_cudart_fail(e) : cudaSuccess;
}

static cudaError_t get_edges(cudaGraph_t graph, cudaGraphNode_t *from, cudaGraphNode_t *to,
                             cudaGraphEdgeData *edgeData, size_t *numEdges) {
    CHECK_STICKY();
    if (!graph_ok(graph) || !numEdges || (!from) != (!to)) FAIL(cudaErrorInvalidValue);
    size_t total = 0;
    for (size_t i = 0; i < graph->nodes.n; i++) total += graph->nodes.v[i]->out.n;
    if (!from) {
        *numEdges = total;
        return cudaSuccess;
    }
    size_t k = 0;
    for (size_t i = 0; i < graph->nodes.n; i++) {
        node_t *n = graph->nodes.v[i];
        for (size_t j = 0; j < n->out.n && k < *numEdges; j++, k++) {
            from[k] = n;
            to[k] = n->out.v[j];
        }
    }
    for (size_t i = 0; i < *numEdges; i++) {
        if (i >= k) from[i] = to[i] = NULL;
        if (edgeData) memset(&edgeData[i], 0, sizeof edgeData[i]);
    }
    *numEdges = k;
    return cudaSuccess;
}

static cudaError_t node_links(cudaGraphNode_t node, int incoming, cudaGraphNode_t *out,
                              cudaGraphEdgeData *edges, size_t *count) {
    CHECK_STICKY();
    if (!node_ok(node)) FAIL(cudaErrorInvalidValue);
    const node_list *l = incoming ? &node->in : &node->out;
    cudaError_t e = give_nodes(l->v, l->n, out, edges, count);
    return e ? cpuify_cudart_fail(e) : cudaSuccess;
}

/* Edge changes: all pairs are checked before any is made. */
static cudaError_t change_edges(cudaGraph_t graph, const cudaGraphNode_t *from,
                                const cudaGraphNode_t *to, const cudaGraphEdgeData *edgeData,
                                size_t n, int add) {
    CHECK_STICKY();
    if (!graph_ok(graph) || (n && (!from || !to))) FAIL(cudaErrorInvalidValue);
    cudaError_t e = check_edge_data(edgeData, n);
    if (e) FAIL(e);
    for (size_t i = 0; i < n; i++) {
        if (!node_ok(from[i]) || !node_ok(to[i]) || from[i]->graph != graph ||
            to[i]->graph != graph || from[i] == to[i])
            FAIL(cudaErrorInvalidValue);
        if (list_has(&from[i]->out, to[i]) == add) FAIL(cudaErrorInvalidValue);
        for (size_t j = 0; j < i; j++)
            if (from[j] == from[i] && to[j] == to[i]) FAIL(cudaErrorInvalidValue);
    }
    for (size_t i = 0; i < n; i++) {
        if (add) {
            if (list_push(&from[i]->out, to[i]) || list_push(&to[i]->in, from[i])) {
                list_remove(&from[i]->out, to[i]);
                FAIL(cudaErrorMemoryAllocation);
            }
        } else {
            list_remove(&from[i]->out, to[i]);
            list_remove(&to[i]->in, from[i]);
        }
    }
    return cudaSuccess;
}

#if CUDART_VERSION >= 13000
cudaError_t cudaGraphGetEdges(cudaGraph_t graph, cudaGraphNode_t *from, cudaGraphNode_t *to,
                              cudaGraphEdgeData *edgeData, size_t *numEdges) {
    return get_edges(graph, from, to, edgeData, numEdges);
}
cudaError_t cudaGraphNodeGetDependencies(cudaGraphNode_t node, cudaGraphNode_t *pDependencies,
                                         cudaGraphEdgeData *edgeData, size_t *pNumDependencies) {
    return node_links(node, 1, pDependencies, edgeData, pNumDependencies);
}
cudaError_t cudaGraphNodeGetDependentNodes(cudaGraphNode_t node, cudaGraphNode_t *pDependentNodes,
                                           cudaGraphEdgeData *edgeData, size_t *pNumDependentNodes) {
    return node_links(node, 0, pDependentNodes, edgeData, pNumDependentNodes);
}
cudaError_t cudaGraphAddDependencies(cudaGraph_t graph, const cudaGraphNode_t *from,
                                     const cudaGraphNode_t *to, const cudaGraphEdgeData *edgeData,
                                     size_t numDependencies) {
    return change_edges(graph, from, to, edgeData, numDependencies, 1);
}
cudaError_t cudaGraphRemoveDependencies(cudaGraph_t graph, const cudaGraphNode_t *from,
                                        const cudaGraphNode_t *to, const cudaGraphEdgeData *edgeData,
                                        size_t numDependencies) {
    return change_edges(graph, from, to, edgeData, numDependencies, 0);
}
#else
cudaError_t cudaGraphGetEdges(cudaGraph_t graph, cudaGraphNode_t *from, cudaGraphNode_t *to,
                              size_t *numEdges) {
    return get_edges(graph, from, to, NULL, numEdges);
}
cudaError_t cudaGraphNodeGetDependencies(cudaGraphNode_t node, cudaGraphNode_t *pDependencies,
                                         size_t *pNumDependencies) {
    return node_links(node, 1, pDependencies, NULL, pNumDependencies);
}
cudaError_t cudaGraphNodeGetDependentNodes(cudaGraphNode_t node, cudaGraphNode_t *pDependentNodes,
                                           size_t *pNumDependentNodes) {
    return node_links(node, 0, pDependentNodes, NULL, pNumDependentNodes);
}
cudaError_t cudaGraphAddDependencies(cudaGraph_t graph, const cudaGraphNode_t *from,
                                     const cudaGraphNode_t *to, size_t numDependencies) {
    return change_edges(graph, from, to, NULL, numDependencies, 1);
}
cudaError_t cudaGraphRemoveDependencies(cudaGraph_t graph, const cudaGraphNode_t *from,
                                        const cudaGraphNode_t *to, size_t numDependencies) {
    return change_edges(graph, from, to, NULL, numDependencies, 0);
}
#endif

cudaError_t cudaGraphDestroyNode(cudaGraphNode_t node) {
    CHECK_STICKY();
    if (!node_ok(node) || graph_capturing(node->graph)) FAIL(cudaErrorInvalidValue);
    graph_t *g = node->graph;
    for (size_t i = 0; i < node->in.n; i++) list_remove(&node->in.v[i]->out, node);
    for (size_t i = 0; i < node->out.n; i++) list_remove(&node->out.v[i]->in, node);
    list_remove(&g->nodes, node);
    for (size_t i = 0; i < g->nodes.n; i++) g->nodes.v[i]->index = i;
    node_free(node);
    return cudaSuccess;
}

cudaError_t cudaGraphClone(cudaGraph_t *pGraphClone, cudaGraph_t originalGraph) {
    CHECK_STICKY();
    if (!pGraphClone || !graph_ok(originalGraph)) FAIL(cudaErrorInvalidValue);
    graph_t *c = graph_clone(originalGraph);
    if (!c) FAIL(cudaErrorMemoryAllocation);
    *pGraphClone = c;
    return cudaSuccess;
}

cudaError_t cudaGraphNodeFindInClone(cudaGraphNode_t *pNode, cudaGraphNode_t originalNode,
                                     cudaGraph_t clonedGraph) {
    CHECK_STICKY();
    if (!pNode || !node_ok(originalNode) || !graph_ok(clonedGraph)) FAIL(cudaErrorInvalidValue);
    for (size_t i = 0; i < clonedGraph->nodes.n; i++)
        if (clonedGraph->nodes.v[i]->origin == originalNode->id) {
            *pNode = clonedGraph->nodes.v[i];
            return cudaSuccess;
        }
    FAIL(cudaErrorInvalidValue);
}

cudaError_t cudaGraphNodeGetContainingGraph(cudaGraphNode_t hNode, cudaGraph_t *phGraph) {
    CHECK_STICKY();
    if (!node_ok(hNode) || !phGraph) FAIL(cudaErrorInvalidValue);
    *phGraph = hNode->graph;
    return cudaSuccess;
}

#if CUDART_VERSION >= 13050
/* the generic node API (cudaGraphAddNode and friends, cudaGraphNodeParams), as CUDA 13.5
 * declares it (13.0 has no cudaGraphNodeGetParams) */

/* A new node of p's type with p's parameters (checked), in *out. */
static cudaError_t node_from_params(node_t **out, const struct cudaGraphNodeParams *p) {
    if (!p) return cudaErrorInvalidValue;
    cudaError_t e = cudaSuccess;
    switch (p->type) {
    case cudaGraphNodeTypeKernel:
    case cudaGraphNodeTypeMemcpy:
    case cudaGraphNodeTypeMemset:
    case cudaGraphNodeTypeHost:
    case cudaGraphNodeTypeGraph:
    case cudaGraphNodeTypeEmpty:
    case cudaGraphNodeTypeWaitEvent:
    case cudaGraphNodeTypeEventRecord:
        break;
    default:
        fprintf(stderr, "cpuify: graph nodes of type %d (memory, conditional, external semaphore, "
                        "batched copy nodes) are not supported\n", (int)p->type);
        return cudaErrorNotSupported;
    }
    node_t *n = node_new(cudaGraphNodeTypeEmpty);
    if (!n) return cudaErrorMemoryAllocation;
    switch (p->type) {
    case cudaGraphNodeTypeKernel: {
        if (p->kernel.functionType == cudaKernelFunctionTypeFunction) {
            e = cudaErrorNotSupported;   /* a driver cudaFunction_t: cuModule* is not supported */
            break;
        }
        struct cudaKernelNodeParams k = {p->kernel.func, p->kernel.gridDim, p->kernel.blockDim,
                                         p->kernel.sharedMemBytes, p->kernel.kernelParams, p->kernel.extra};
        e = kernel_args_make(&n->p.kernel, &k);
        break;
    }
    case cudaGraphNodeTypeMemcpy: {
        cpuify_cudart_copy c;
        e = memcpy_plan(&p->memcpy.copyParams, &c);
        n->p.memcpy = p->memcpy.copyParams;
        break;
    }
    case cudaGraphNodeTypeMemset: {
        const struct cudaMemsetParamsV2 *m = &p->memset;
        n->p.memset = (struct cudaMemsetParams){m->dst, m->pitch, m->value, m->elementSize, m->width, m->height};
        e = memset_check(&n->p.memset);
        break;
    }
    case cudaGraphNodeTypeHost:
        if (!p->host.fn) e = cudaErrorInvalidValue;
        n->p.host = (struct cudaHostNodeParams){p->host.fn, p->host.userData};
        break;
    case cudaGraphNodeTypeGraph:
        if (!graph_ok(p->graph.graph)) {
            e = cudaErrorInvalidValue;
        } else if (p->graph.ownership == cudaGraphChildGraphOwnershipMove) {
            n->p.child = p->graph.graph;   /* the node owns it from now on */
        } else {
            n->p.child = graph_clone(p->graph.graph);
            if (!n->p.child) e = cudaErrorMemoryAllocation;
        }
        break;
    case cudaGraphNodeTypeWaitEvent:
    case cudaGraphNodeTypeEventRecord: {
        cudaEvent_t ev = p->type == cudaGraphNodeTypeWaitEvent ? p->eventWait.event : p->eventRecord.event;
        if (!event_valid(ev)) e = cudaErrorInvalidValue;
        n->p.event = ev;
        break;
    }
    default: break;
    }
    if (e) {
        node_free(n);   /* (still of type empty: its parameters are not freed) */
        return e;
    }
    n->type = p->type;
    *out = n;
    return cudaSuccess;
}

cudaError_t cudaGraphAddNode(cudaGraphNode_t *pGraphNode, cudaGraph_t graph, const cudaGraphNode_t *pDependencies,
                             const cudaGraphEdgeData *dependencyData, size_t numDependencies,
                             struct cudaGraphNodeParams *nodeParams) {
    CHECK_STICKY();
    cudaError_t e = check_edge_data(dependencyData, numDependencies);
    if (e) FAIL(e);
    if (nodeParams && nodeParams->type == cudaGraphNodeTypeGraph && nodeParams->graph.graph == graph)
        FAIL(cudaErrorInvalidValue);
    node_t *n;
    e = node_from_params(&n, nodeParams);
    if (e) FAIL(e);
    return add_node(pGraphNode, graph, pDependencies, numDependencies, n);
}

cudaError_t cudaGraphNodeGetParams(cudaGraphNode_t node, struct cudaGraphNodeParams *p) {
    CHECK_STICKY();
    if (!node_ok(node) || !p) FAIL(cudaErrorInvalidValue);
    memset(p, 0, sizeof *p);
    p->type = node->type;
    switch (node->type) {
    case cudaGraphNodeTypeKernel: {
        const kernel_args *ka = &node->p.kernel;
        p->kernel.func = (void *)ka->func;
        p->kernel.gridDim = ka->grid;
        p->kernel.blockDim = ka->block;
        p->kernel.sharedMemBytes = ka->shared;
        p->kernel.kernelParams = ka->argv;
        p->kernel.functionType = cudaKernelFunctionTypeDeviceEntry;
        break;
    }
    case cudaGraphNodeTypeMemcpy: p->memcpy.copyParams = node->p.memcpy; break;
    case cudaGraphNodeTypeMemset: {
        const struct cudaMemsetParams *m = &node->p.memset;
        p->memset.dst = m->dst;
        p->memset.pitch = m->pitch;
        p->memset.value = m->value;
        p->memset.elementSize = m->elementSize;
        p->memset.width = m->width;
        p->memset.height = m->height;
        break;
    }
    case cudaGraphNodeTypeHost:
        p->host.fn = node->p.host.fn;
        p->host.userData = node->p.host.userData;
        break;
    case cudaGraphNodeTypeGraph: p->graph.graph = node->p.child; break;
    case cudaGraphNodeTypeWaitEvent: p->eventWait.event = node->p.event; break;
    case cudaGraphNodeTypeEventRecord: p->eventRecord.event = node->p.event; break;
    default: break;
    }
    return cudaSuccess;
}

cudaError_t cudaGraphNodeSetParams(cudaGraphNode_t node, struct cudaGraphNodeParams *p) {
    CHECK_STICKY();
    if (!node_ok(node) || !p || p->type != node->type) FAIL(cudaErrorInvalidValue);
    node_t *t;
    cudaError_t e = node_from_params(&t, p);
    if (e) FAIL(e);
    node_params_free(node);
    node->p = t->p;
    t->type = cudaGraphNodeTypeEmpty;   /* its parameters now belong to node */
    node_free(t);
    return cudaSuccess;
}

cudaError_t cudaGraphExecNodeSetParams(cudaGraphExec_t graphExec, cudaGraphNode_t node,
                                       struct cudaGraphNodeParams *p) {
    if (!p || !node_ok(node) || p->type != node->type) FAIL(cudaErrorInvalidValue);
    switch (p->type) {
    case cudaGraphNodeTypeKernel: {
        if (p->kernel.functionType == cudaKernelFunctionTypeFunction) FAIL(cudaErrorNotSupported);
        struct cudaKernelNodeParams k = {p->kernel.func, p->kernel.gridDim, p->kernel.blockDim,
                                         p->kernel.sharedMemBytes, p->kernel.kernelParams, p->kernel.extra};
        return cudaGraphExecKernelNodeSetParams(graphExec, node, &k);
    }
    case cudaGraphNodeTypeMemcpy: return cudaGraphExecMemcpyNodeSetParams(graphExec, node, &p->memcpy.copyParams);
    case cudaGraphNodeTypeMemset: {
        const struct cudaMemsetParamsV2 *m = &p->memset;
        struct cudaMemsetParams v = {m->dst, m->pitch, m->value, m->elementSize, m->width, m->height};
        return cudaGraphExecMemsetNodeSetParams(graphExec, node, &v);
    }
    case cudaGraphNodeTypeHost: {
        struct cudaHostNodeParams h = {p->host.fn, p->host.userData};
        return cudaGraphExecHostNodeSetParams(graphExec, node, &h);
    }
    case cudaGraphNodeTypeGraph: return cudaGraphExecChildGraphNodeSetParams(graphExec, node, p->graph.graph);
    case cudaGraphNodeTypeWaitEvent: return cudaGraphExecEventWaitNodeSetEvent(graphExec, node, p->eventWait.event);
    case cudaGraphNodeTypeEventRecord:
        return cudaGraphExecEventRecordNodeSetEvent(graphExec, node, p->eventRecord.event);
    default: FAIL(cudaErrorInvalidValue);
    }
}
#endif

/* ------------------------------------------------------------------------------------ */
/* cudaGraphDebugDotPrint                                                               */

static void dot_text(FILE *f, const char *s) {
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') fputc('\\', f);
        fputc(*s, f);
    }
}

static const char *type_name(enum cudaGraphNodeType t) {
    switch (t) {
    case cudaGraphNodeTypeKernel: return "KERNEL";
    case cudaGraphNodeTypeMemcpy: return "MEMCPY";
    case cudaGraphNodeTypeMemset: return "MEMSET";
    case cudaGraphNodeTypeHost: return "HOST";
    case cudaGraphNodeTypeGraph: return "CHILD_GRAPH";
    case cudaGraphNodeTypeEmpty: return "EMPTY";
    case cudaGraphNodeTypeWaitEvent: return "EVENT_WAIT";
    case cudaGraphNodeTypeEventRecord: return "EVENT_RECORD";
    default: return "OTHER";
    }
}

static void dot_graph(FILE *f, const graph_t *g, int depth) {
    fprintf(f, "%*ssubgraph cluster_graph_%u {\n", depth * 2, "", g->id);
    fprintf(f, "%*s  label=\"graph_%u\"; style=dashed;\n", depth * 2, "", g->id);
    for (size_t i = 0; i < g->nodes.n; i++) {
        const node_t *n = g->nodes.v[i];
        fprintf(f, "%*s  \"graph_%u_node_%zu\" [shape=box, label=\"%zu %s\\n", depth * 2, "", g->id, i, i,
                type_name(n->type));
        switch (n->type) {
        case cudaGraphNodeTypeKernel: {
            const kernel_args *ka = &n->p.kernel;
            dot_text(f, cpuify_cudart_kernel_name(ka->kernel));
            fprintf(f, "\\ngrid (%u, %u, %u) block (%u, %u, %u) dynamic shared %u", ka->grid.x,
                    ka->grid.y, ka->grid.z, ka->block.x, ka->block.y, ka->block.z, ka->shared);
            break;
        }
        case cudaGraphNodeTypeMemcpy: {
            const struct cudaMemcpy3DParms *p = &n->p.memcpy;
            fprintf(f, "kind %d, %zu x %zu x %zu bytes\\nsrc %p, dst %p", (int)p->kind, p->extent.width,
                    p->extent.height, p->extent.depth, p->srcArray ? (void *)p->srcArray : p->srcPtr.ptr,
                    p->dstArray ? (void *)p->dstArray : p->dstPtr.ptr);
            break;
        }
        case cudaGraphNodeTypeMemset: {
            const struct cudaMemsetParams *p = &n->p.memset;
            fprintf(f, "dst %p, value 0x%x, %u-byte elements, %zu x %zu, pitch %zu", p->dst, p->value,
                    p->elementSize, p->width, p->height, p->pitch);
            break;
        }
        case cudaGraphNodeTypeHost:
            fprintf(f, "function %p, data %p", (void *)n->p.host.fn, n->p.host.userData);
            break;
        case cudaGraphNodeTypeGraph: fprintf(f, "graph_%u", n->p.child->id); break;
        case cudaGraphNodeTypeWaitEvent:
        case cudaGraphNodeTypeEventRecord: fprintf(f, "event %p", (void *)n->p.event); break;
        default: break;
        }
        fprintf(f, "\"];\n");
    }
    for (size_t i = 0; i < g->nodes.n; i++) {
        const node_t *n = g->nodes.v[i];
        for (size_t j = 0; j < n->out.n; j++)
            fprintf(f, "%*s  \"graph_%u_node_%zu\" -> \"graph_%u_node_%zu\";\n", depth * 2, "", g->id, i,
                    g->id, n->out.v[j]->index);
    }
    fprintf(f, "%*s}\n", depth * 2, "");
    /* a child graph: its own cluster, reached from its node by dotted edges to its roots */
    for (size_t i = 0; i < g->nodes.n; i++) {
        const node_t *n = g->nodes.v[i];
        if (n->type != cudaGraphNodeTypeGraph) continue;
        const graph_t *c = n->p.child;
        dot_graph(f, c, depth);
        for (size_t j = 0; j < c->nodes.n; j++)
            if (!c->nodes.v[j]->in.n)
                fprintf(f, "%*s\"graph_%u_node_%zu\" -> \"graph_%u_node_%zu\" [style=dotted, lhead=cluster_graph_%u];\n",
                        depth * 2, "", g->id, i, c->id, j, c->id);
    }
}

cudaError_t cudaGraphDebugDotPrint(cudaGraph_t graph, const char *path, unsigned int flags) {
    (void)flags; /* every node's parameters are always written */
    CHECK_STICKY();
    if (!graph_ok(graph) || !path) FAIL(cudaErrorInvalidValue);
    FILE *f = fopen(path, "w");
    if (!f) FAIL(cudaErrorOperatingSystem);
    fprintf(f, "digraph cpuify_graph {\n  compound=true;\n");
    dot_graph(f, graph, 1);
    fprintf(f, "}\n");
    if (fclose(f)) FAIL(cudaErrorOperatingSystem);
    return cudaSuccess;
}

/* ------------------------------------------------------------------------------------ */
/* executable graphs                                                                    */

typedef struct exec_node {
    enum cudaGraphNodeType type;
    union {
        struct {
            cpuify_cudart_launch launch;
            unsigned char *buf;             /* parameters, dynamic shared size, prologue values */
        } kernel;
        cpuify_cudart_copy copy;
        struct cudaMemsetParams memset;
        struct cudaHostNodeParams host;
        cudaEvent_t event;
    } u;
} exec_node;

struct CUgraphExec_st {
    uint32_t magic;
    graph_t *shape;             /* a private copy of the graph: the parameters in force */
    exec_node *nodes;           /* the work, in execution order */
    size_t n, cap;
    size_t *slot;               /* shape's top-level node i -> its exec node (SIZE_MAX: none) */
    uint64_t *ids_instantiated; /* shape's top-level node i pairs with the user's node of id */
    uint64_t *ids_updated;      /* ... (of the graph given to the last cudaGraphExecUpdate) */
    unsigned long long flags;
    cpuify_cudart_mark last;    /* the last item its last launch queued (cudart_async.c) */
    pthread_mutex_t lock;       /* one launch or change of its work at a time */
};

static int exec_ok(const struct CUgraphExec_st *x) { return x && x->magic == EXEC_MAGIC; }

/* The nodes of g in a topological order (stable: creation order among ready nodes), or
 * cudaErrorInvalidValue for a cycle (in g or a child graph). */
static cudaError_t topo_order(const graph_t *g, node_t **order) {
    size_t n = g->nodes.n, head = 0, tail = 0;
    size_t *pending = calloc(n ? n : 1, sizeof *pending);
    if (!pending) return cudaErrorMemoryAllocation;
    for (size_t i = 0; i < n; i++) {
        pending[i] = g->nodes.v[i]->in.n;
        if (!pending[i]) order[tail++] = g->nodes.v[i];
    }
    while (head < tail) {
        node_t *x = order[head++];
        for (size_t j = 0; j < x->out.n; j++)
            if (--pending[x->out.v[j]->index] == 0) order[tail++] = x->out.v[j];
    }
    free(pending);
    if (tail != n) return cudaErrorInvalidValue;
    for (size_t i = 0; i < n; i++)
        if (g->nodes.v[i]->type == cudaGraphNodeTypeGraph) {
            node_t **sub = malloc((g->nodes.v[i]->p.child->nodes.n + 1) * sizeof *sub);
            if (!sub) return cudaErrorMemoryAllocation;
            cudaError_t e = topo_order(g->nodes.v[i]->p.child, sub);
            free(sub);
            if (e) return e;
        }
    return cudaSuccess;
}

static void exec_node_free(exec_node *en) {
    if (en->type == cudaGraphNodeTypeKernel) free(en->u.kernel.buf);
}

/* Prepares the work of node n (everything a replay needs, checked now). */
static cudaError_t exec_node_make(exec_node *en, const node_t *n) {
    memset(en, 0, sizeof *en);
    en->type = n->type;
    switch (n->type) {
    case cudaGraphNodeTypeKernel: {
        const kernel_args *ka = &n->p.kernel;
        cudaError_t e = cpuify_cudart_prepare_launch(ka->kernel, ka->grid, ka->block, ka->shared,
                                                     ka->cooperative, &en->u.kernel.launch);
        if (e) return e;
        const cpuify_kernel_desc *d = cpuify_cudart_kernel_desc(ka->kernel);
        en->u.kernel.buf = calloc(1, en->u.kernel.launch.param_bytes);
        if (!en->u.kernel.buf) return cudaErrorMemoryAllocation;
        for (uint32_t i = 0; i < d->nparams; i++)
            memcpy(en->u.kernel.buf + d->param_offsets[i], ka->args + d->param_offsets[i], d->param_sizes[i]);
        return cudaSuccess;
    }
    case cudaGraphNodeTypeMemcpy: return memcpy_plan(&n->p.memcpy, &en->u.copy);
    case cudaGraphNodeTypeMemset:
        en->u.memset = n->p.memset;
        return memset_check(&n->p.memset);
    case cudaGraphNodeTypeHost: en->u.host = n->p.host; return cudaSuccess;
    case cudaGraphNodeTypeWaitEvent:
    case cudaGraphNodeTypeEventRecord: en->u.event = n->p.event; return cudaSuccess;
    default: return cudaSuccess;
    }
}

static exec_node *exec_push(struct CUgraphExec_st *x) {
    if (x->n == x->cap) {
        size_t c = x->cap ? x->cap * 2 : 16;
        exec_node *v = realloc(x->nodes, c * sizeof *v);
        if (!v) return NULL;
        x->nodes = v;
        x->cap = c;
    }
    return &x->nodes[x->n++];
}

/* Appends the work of g, in topological order, child graphs inlined (empty nodes have no
 * work: a launch runs the nodes one after another, on its stream). */
static cudaError_t exec_build(struct CUgraphExec_st *x, const graph_t *g, int top, node_t **bad) {
    node_t **order = malloc((g->nodes.n + 1) * sizeof *order);
    if (!order) return cudaErrorMemoryAllocation;
    cudaError_t e = topo_order(g, order);
    for (size_t i = 0; i < g->nodes.n && !e; i++) {
        node_t *n = order[i];
        if (top) x->slot[n->index] = SIZE_MAX;
        if (n->type == cudaGraphNodeTypeGraph) {
            e = exec_build(x, n->p.child, 0, bad);
        } else if (n->type != cudaGraphNodeTypeEmpty) {
            exec_node *en = exec_push(x);
            if (!en) {
                e = cudaErrorMemoryAllocation;
                break;
            }
            e = exec_node_make(en, n);
            if (e) {
                x->n--;
                if (bad) *bad = n;
                break;
            }
            if (n->disabled) {
                exec_node_free(en);
                en->type = cudaGraphNodeTypeEmpty;
            }
            if (top) x->slot[n->index] = (size_t)(en - x->nodes);
        }
    }
    free(order);
    return e;
}

static void exec_clear(struct CUgraphExec_st *x) {
    for (size_t i = 0; i < x->n; i++) exec_node_free(&x->nodes[i]);
    free(x->nodes);
    free(x->slot);
    x->nodes = NULL;
    x->slot = NULL;
    x->n = x->cap = 0;
}

/* (Re)makes the work of x from x->shape. */
static cudaError_t exec_make(struct CUgraphExec_st *x, node_t **bad) {
    exec_clear(x);
    x->slot = malloc((x->shape->nodes.n + 1) * sizeof *x->slot);
    if (!x->slot) return cudaErrorMemoryAllocation;
    return exec_build(x, x->shape, 1, bad);
}

static void exec_free(struct CUgraphExec_st *x) {
    exec_clear(x);
    graph_free(x->shape);
    free(x->ids_instantiated);
    free(x->ids_updated);
    pthread_mutex_destroy(&x->lock);
    x->magic = 0;
    free(x);
}

static cudaError_t instantiate(cudaGraphExec_t *pGraphExec, cudaGraph_t graph, unsigned long long flags,
                               cudaGraphInstantiateResult *result, cudaGraphNode_t *errNode) {
    CHECK_STICKY();
    if (result) *result = cudaGraphInstantiateError;
    if (errNode) *errNode = NULL;
    if (!pGraphExec || !graph_ok(graph)) FAIL(cudaErrorInvalidValue);
    if (flags & ~(unsigned long long)(cudaGraphInstantiateFlagAutoFreeOnLaunch | cudaGraphInstantiateFlagUpload |
                                      cudaGraphInstantiateFlagDeviceLaunch |
                                      cudaGraphInstantiateFlagUseNodePriority))
        FAIL(cudaErrorInvalidValue);
    if (flags & cudaGraphInstantiateFlagDeviceLaunch) {
        fprintf(stderr, "cpuify: cudaGraphInstantiateFlagDeviceLaunch (graphs launched from the "
                        "device) is not supported\n");
        if (result) *result = cudaGraphInstantiateNodeOperationNotSupported;
        FAIL(cudaErrorNotSupported);
    }
    node_t **order = malloc((graph->nodes.n + 1) * sizeof *order);
    if (!order) FAIL(cudaErrorMemoryAllocation);
    cudaError_t e = topo_order(graph, order);
    free(order);
    if (e) {
        if (result && e == cudaErrorInvalidValue) *result = cudaGraphInstantiateInvalidStructure;
        FAIL(e);
    }
    struct CUgraphExec_st *x = calloc(1, sizeof *x);
    if (!x) FAIL(cudaErrorMemoryAllocation);
    x->magic = EXEC_MAGIC;
    x->flags = flags;
    pthread_mutex_init(&x->lock, NULL);
    x->shape = graph_clone(graph);
    size_t n = graph->nodes.n;
    x->ids_instantiated = malloc((n + 1) * sizeof *x->ids_instantiated);
    x->ids_updated = malloc((n + 1) * sizeof *x->ids_updated);
    node_t *bad = NULL;
    e = !x->shape || !x->ids_instantiated || !x->ids_updated ? cudaErrorMemoryAllocation : exec_make(x, &bad);
    if (e) {
        if (errNode && bad && bad->graph == x->shape) *errNode = graph->nodes.v[bad->index];
        if (result) *result = cudaGraphInstantiateError;
        exec_free(x);
        FAIL(e);
    }
    for (size_t i = 0; i < n; i++) x->ids_instantiated[i] = x->ids_updated[i] = graph->nodes.v[i]->id;
    if (result) *result = cudaGraphInstantiateSuccess;
    *pGraphExec = x;
    return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t *pGraphExec, cudaGraph_t graph, unsigned long long flags) {
    return instantiate(pGraphExec, graph, flags, NULL, NULL);
}

cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t *pGraphExec, cudaGraph_t graph,
                                          unsigned long long flags) {
    return instantiate(pGraphExec, graph, flags, NULL, NULL);
}

cudaError_t cudaGraphInstantiateWithParams(cudaGraphExec_t *pGraphExec, cudaGraph_t graph,
                                           cudaGraphInstantiateParams *instantiateParams) {
    if (!instantiateParams) FAIL(cudaErrorInvalidValue);
    if ((instantiateParams->flags & cudaGraphInstantiateFlagUpload) &&
        !stream_valid(instantiateParams->uploadStream))
        FAIL(cudaErrorInvalidResourceHandle);
    return instantiate(pGraphExec, graph, instantiateParams->flags, &instantiateParams->result_out,
                       &instantiateParams->errNode_out);
}

cudaError_t cudaGraphExecGetFlags(cudaGraphExec_t graphExec, unsigned long long *flags) {
    CHECK_STICKY();
    if (!exec_ok(graphExec) || !flags) FAIL(cudaErrorInvalidValue);
    *flags = graphExec->flags;
    return cudaSuccess;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t graphExec) {
    CHECK_STICKY();
    if (!exec_ok(graphExec)) FAIL(cudaErrorInvalidValue);
    exec_free(graphExec);
    return cudaSuccess;
}

cudaError_t cudaGraphUpload(cudaGraphExec_t graphExec, cudaStream_t stream) {
    CHECK_STICKY();
    if (!exec_ok(graphExec)) FAIL(cudaErrorInvalidValue);
    if (!stream_valid(stream)) FAIL(cudaErrorInvalidResourceHandle);
    return cudaSuccess; /* everything was prepared at instantiation */
}

/* Runs the work of x in order on the calling thread (a launch that cannot be queued).  A
 * kernel that fails stops the replay (its error is sticky: on a GPU the work after it would
 * not run either). */
static cudaError_t exec_run(struct CUgraphExec_st *x) {
    for (size_t i = 0; i < x->n; i++) {
        exec_node *en = &x->nodes[i];
        cudaError_t e = cudaSuccess;
        switch (en->type) {
        case cudaGraphNodeTypeKernel: {
            int r = cpuify_cudart_run_launch(&en->u.kernel.launch, en->u.kernel.buf);
            if (r) return r == cudaErrorLaunchOutOfResources ? (cudaError_t)r : cudaSuccess;
            break;
        }
        case cudaGraphNodeTypeMemcpy: e = cpuify_cudart_run_copy(&en->u.copy); break;
        case cudaGraphNodeTypeMemset: {
            const struct cudaMemsetParams *p = &en->u.memset;
            e = cpuify_cudart_run_memset(p->dst, p->pitch, p->value, p->elementSize, p->width, p->height);
            break;
        }
        case cudaGraphNodeTypeHost: en->u.host.fn(en->u.host.userData); break;
        case cudaGraphNodeTypeEventRecord: {
            cudaEvent_t ev = en->u.event;
            if (ev->captured) cpuify_graph_forget_event(ev);
            cpuify_cudart_event_reached(ev);
            ev->recorded = 1;
            break;
        }
        case cudaGraphNodeTypeWaitEvent: cpuify_cudart_event_done(en->u.event, 1); break;
        default: break;
        }
        if (e) return e;
    }
    return cudaSuccess;
}

/* Queues the work of x on stream s, in order, after x's previous launch (cudart_async.c: one
 * batch, each node an item of s's queue as if issued to s one after another); 0: run it now
 * (it waited for what the launch is ordered after). */
static int exec_enqueue(struct CUgraphExec_st *x, cudaStream_t s) {
    cpuify_cudart_batch b = {0};
    size_t param_bytes = 0;
    for (size_t i = 0; i < x->n; i++)
        if (x->nodes[i].type == cudaGraphNodeTypeKernel) param_bytes += x->nodes[i].u.kernel.launch.param_bytes;
    cpuify_cudart_batch_reserve(&b, x->n, param_bytes);
    for (size_t i = 0; i < x->n; i++) {
        exec_node *en = &x->nodes[i];
        switch (en->type) {
        case cudaGraphNodeTypeKernel:
            cpuify_cudart_batch_launch(&b, &en->u.kernel.launch, en->u.kernel.buf);
            break;
        case cudaGraphNodeTypeMemcpy:
            if (en->u.copy.width) cpuify_cudart_batch_copy(&b, &en->u.copy);
            break;
        case cudaGraphNodeTypeMemset: {
            const struct cudaMemsetParams *p = &en->u.memset;
            cpuify_cudart_batch_memset(&b, p->dst, p->pitch, p->value, p->elementSize, p->width, p->height);
            break;
        }
        case cudaGraphNodeTypeHost: cpuify_cudart_batch_host(&b, en->u.host.fn, en->u.host.userData); break;
        case cudaGraphNodeTypeEventRecord: {
            cudaEvent_t ev = en->u.event;
            if (ev->captured) cpuify_graph_forget_event(ev);
            ev->recorded = 1;
            cpuify_cudart_batch_event(&b, ev, 1);
            break;
        }
        case cudaGraphNodeTypeWaitEvent: cpuify_cudart_batch_event(&b, en->u.event, 0); break;
        default: break;
        }
    }
    return cpuify_cudart_enqueue_batch(&b, s, &x->last, &x->last);
}

/* Queued on the stream like the work it holds: the host goes on at once; a kernel's failure
 * shows at a later call, as a kernel launch's does. */
cudaError_t cudaGraphLaunch(cudaGraphExec_t graphExec, cudaStream_t stream) {
    cudaError_t st = cpuify_cudart_sticky_now();
    if (st) return st;
    if (!exec_ok(graphExec)) FAIL(cudaErrorInvalidValue);
    if (!stream_valid(stream)) FAIL(cudaErrorInvalidResourceHandle);
    if (CPUIFY_CAPTURE_OPEN()) {
        int r = cpuify_graph_enqueue(stream);
        /* CUDA 13 refuses a graph launch into a capturing stream (measured on an H100) */
        if (r == CPUIFY_CAPTURE) FAIL(cpuify_graph_invalidate(stream, cudaErrorStreamCaptureUnsupported));
        if (r) FAIL((cudaError_t)r);
    }
    pthread_mutex_lock(&graphExec->lock);
    cudaError_t e = cudaSuccess;
    if (cpuify_cudart_distributed() || !exec_enqueue(graphExec, stream)) {
        e = cpuify_cudart_sticky_now();
        if (!e) e = exec_run(graphExec);
    }
    pthread_mutex_unlock(&graphExec->lock);
    return e ? cpuify_cudart_fail(e) : cudaSuccess;
}

/* The top-level node of x's graph that `node` (of the instantiated graph, or of the graph
 * of the last update) pairs with. */
static node_t *exec_node_of(struct CUgraphExec_st *x, const node_t *node) {
    if (!exec_ok(x) || !node_ok(node)) return NULL;
    for (size_t i = 0; i < x->shape->nodes.n; i++)
        if (x->ids_instantiated[i] == node->id || x->ids_updated[i] == node->id) return x->shape->nodes.v[i];
    return NULL;
}

/* After a change of shape node sn's parameters: its work made again. */
static cudaError_t exec_refresh(struct CUgraphExec_st *x, node_t *sn) {
    size_t slot = x->slot[sn->index];
    if (slot == SIZE_MAX) return cudaSuccess;
    exec_node en;
    cudaError_t e = exec_node_make(&en, sn);
    if (e) {
        exec_node_free(&en);
        return e;
    }
    if (sn->disabled) {
        exec_node_free(&en);
        en.type = cudaGraphNodeTypeEmpty;
    }
    pthread_mutex_lock(&x->lock);
    exec_node_free(&x->nodes[slot]);
    x->nodes[slot] = en;
    pthread_mutex_unlock(&x->lock);
    return cudaSuccess;
}

cudaError_t cudaGraphExecKernelNodeSetParams(cudaGraphExec_t hGraphExec, cudaGraphNode_t node,
                                             const struct cudaKernelNodeParams *pNodeParams) {
    CHECK_STICKY();
    node_t *sn = exec_node_of(hGraphExec, node);
    if (!sn || sn->type != cudaGraphNodeTypeKernel) FAIL(cudaErrorInvalidValue);
    kernel_args ka;
    cudaError_t e = kernel_args_make(&ka, pNodeParams);
    if (e) FAIL(e);
    kernel_args old = sn->p.kernel;
    sn->p.kernel = ka;
    e = exec_refresh(hGraphExec, sn);
    kernel_args *drop = e ? &ka : &old;
    if (e) sn->p.kernel = old;
    free(drop->args);
    free(drop->argv);
    return e ? cpuify_cudart_fail(e) : cudaSuccess;
}

cudaError_t cudaGraphExecMemcpyNodeSetParams(cudaGraphExec_t hGraphExec, cudaGraphNode_t node,
                                             const struct cudaMemcpy3DParms *pNodeParams) {
    CHECK_STICKY();
    node_t *sn = exec_node_of(hGraphExec, node);
    if (!sn || sn->type != cudaGraphNodeTypeMemcpy || !pNodeParams) FAIL(cudaErrorInvalidValue);
    struct cudaMemcpy3DParms old = sn->p.memcpy;
    sn->p.memcpy = *pNodeParams;
    cudaError_t e = exec_refresh(hGraphExec, sn);
    if (e) {
        sn->p.memcpy = old;
        FAIL(e);
    }
    return cudaSuccess;
}

cudaError_t cudaGraphExecMemcpyNodeSetParams1D(cudaGraphExec_t hGraphExec, cudaGraphNode_t node,
                                               void *dst, const void *src, size_t count,
                                               enum cudaMemcpyKind kind) {
    struct cudaMemcpy3DParms p = params_1d(dst, src, count, kind);
    return cudaGraphExecMemcpyNodeSetParams(hGraphExec, node, &p);
}

cudaError_t cudaGraphExecMemsetNodeSetParams(cudaGraphExec_t hGraphExec, cudaGraphNode_t node,
                                             const struct cudaMemsetParams *pNodeParams) {
    CHECK_STICKY();
    node_t *sn = exec_node_of(hGraphExec, node);
    if (!sn || sn->type != cudaGraphNodeTypeMemset || !pNodeParams) FAIL(cudaErrorInvalidValue);
    struct cudaMemsetParams old = sn->p.memset;
    sn->p.memset = *pNodeParams;
    cudaError_t e = exec_refresh(hGraphExec, sn);
    if (e) {
        sn->p.memset = old;
        FAIL(e);
    }
    return cudaSuccess;
}

cudaError_t cudaGraphExecHostNodeSetParams(cudaGraphExec_t hGraphExec, cudaGraphNode_t node,
                                           const struct cudaHostNodeParams *pNodeParams) {
    CHECK_STICKY();
    node_t *sn = exec_node_of(hGraphExec, node);
    if (!sn || sn->type != cudaGraphNodeTypeHost || !pNodeParams || !pNodeParams->fn)
        FAIL(cudaErrorInvalidValue);
    sn->p.host = *pNodeParams;
    return exec_refresh(hGraphExec, sn) ? cpuify_cudart_fail(cudaErrorInvalidValue) : cudaSuccess;
}

static cudaError_t exec_event_set(cudaGraphExec_t x, cudaGraphNode_t node, cudaEvent_t event,
                                  enum cudaGraphNodeType type) {
    CHECK_STICKY();
    node_t *sn = exec_node_of(x, node);
    if (!sn || sn->type != type || !event_valid(event)) FAIL(cudaErrorInvalidValue);
    sn->p.event = event;
    return exec_refresh(x, sn) ? cpuify_cudart_fail(cudaErrorInvalidValue) : cudaSuccess;
}

cudaError_t cudaGraphExecEventRecordNodeSetEvent(cudaGraphExec_t hGraphExec, cudaGraphNode_t hNode,
                                                 cudaEvent_t event) {
    return exec_event_set(hGraphExec, hNode, event, cudaGraphNodeTypeEventRecord);
}

cudaError_t cudaGraphExecEventWaitNodeSetEvent(cudaGraphExec_t hGraphExec, cudaGraphNode_t hNode,
                                               cudaEvent_t event) {
    return exec_event_set(hGraphExec, hNode, event, cudaGraphNodeTypeWaitEvent);
}

cudaError_t cudaGraphNodeSetEnabled(cudaGraphExec_t hGraphExec, cudaGraphNode_t hNode, unsigned int isEnabled) {
    CHECK_STICKY();
    node_t *sn = exec_node_of(hGraphExec, hNode);
    if (!sn || (sn->type != cudaGraphNodeTypeKernel && sn->type != cudaGraphNodeTypeMemcpy &&
                sn->type != cudaGraphNodeTypeMemset))
        FAIL(cudaErrorInvalidValue);
    sn->disabled = !isEnabled;
    return exec_refresh(hGraphExec, sn) ? cpuify_cudart_fail(cudaErrorInvalidValue) : cudaSuccess;
}

cudaError_t cudaGraphNodeGetEnabled(cudaGraphExec_t hGraphExec, cudaGraphNode_t hNode, unsigned int *isEnabled) {
    CHECK_STICKY();
    node_t *sn = exec_node_of(hGraphExec, hNode);
    if (!sn || !isEnabled) FAIL(cudaErrorInvalidValue);
    *isEnabled = !sn->disabled;
    return cudaSuccess;
}

/* Whether b can replace a's parameters in an exec (cudaGraphExecUpdate's rules: same
 * nodes, paired in creation order, of the same types, with the same edges; parameters,
 * kernels included, may change). */
static enum cudaGraphExecUpdateResult same_shape(const graph_t *a, const graph_t *b, node_t **err) {
    *err = NULL;
    if (a->nodes.n != b->nodes.n) return cudaGraphExecUpdateErrorTopologyChanged;
    for (size_t i = 0; i < a->nodes.n; i++) {
        const node_t *x = a->nodes.v[i];
        node_t *y = b->nodes.v[i];
        *err = y;
        if (x->type != y->type) return cudaGraphExecUpdateErrorNodeTypeChanged;
        if (x->out.n != y->out.n || x->in.n != y->in.n) return cudaGraphExecUpdateErrorTopologyChanged;
        for (size_t j = 0; j < x->out.n; j++) {
            int found = 0;
            for (size_t k = 0; k < y->out.n && !found; k++) found = x->out.v[j]->index == y->out.v[k]->index;
            if (!found) return cudaGraphExecUpdateErrorTopologyChanged;
        }
        if (x->type == cudaGraphNodeTypeGraph) {
            node_t *inner;
            enum cudaGraphExecUpdateResult r = same_shape(x->p.child, y->p.child, &inner);
            if (r != cudaGraphExecUpdateSuccess) return r;
        }
    }
    *err = NULL;
    return cudaGraphExecUpdateSuccess;
}

cudaError_t cudaGraphExecUpdate(cudaGraphExec_t hGraphExec, cudaGraph_t hGraph,
                                cudaGraphExecUpdateResultInfo *resultInfo) {
    CHECK_STICKY();
    if (!exec_ok(hGraphExec) || !graph_ok(hGraph)) FAIL(cudaErrorInvalidValue);
    struct CUgraphExec_st *x = hGraphExec;
    cudaGraphExecUpdateResultInfo info = {cudaGraphExecUpdateSuccess, NULL, NULL};
    info.result = same_shape(x->shape, hGraph, &info.errorNode);
    struct CUgraphExec_st fresh = {0};
    if (info.result == cudaGraphExecUpdateSuccess) {
        /* everything is made anew first: on a failure x stays as it was */
        fresh.shape = graph_clone(hGraph);
        node_t *bad = NULL;
        cudaError_t e = fresh.shape ? exec_make(&fresh, &bad) : cudaErrorMemoryAllocation;
        if (e) {
            info.result = cudaGraphExecUpdateError;
            info.errorNode = bad && bad->graph == fresh.shape ? hGraph->nodes.v[bad->index] : NULL;
            exec_clear(&fresh);
            graph_free(fresh.shape);
        }
    }
    if (resultInfo) *resultInfo = info;
    if (info.result != cudaGraphExecUpdateSuccess) FAIL(cudaErrorGraphExecUpdateFailure);
    pthread_mutex_lock(&x->lock);
    exec_clear(x);
    graph_free(x->shape);
    x->shape = fresh.shape;
    x->nodes = fresh.nodes;
    x->n = fresh.n;
    x->cap = fresh.cap;
    x->slot = fresh.slot;
    for (size_t i = 0; i < hGraph->nodes.n; i++) x->ids_updated[i] = hGraph->nodes.v[i]->id;
    pthread_mutex_unlock(&x->lock);
    return cudaSuccess;
}

cudaError_t cudaGraphExecChildGraphNodeSetParams(cudaGraphExec_t hGraphExec, cudaGraphNode_t node,
                                                 cudaGraph_t childGraph) {
    CHECK_STICKY();
    node_t *sn = exec_node_of(hGraphExec, node);
    if (!sn || sn->type != cudaGraphNodeTypeGraph || !graph_ok(childGraph)) FAIL(cudaErrorInvalidValue);
    node_t *err;
    if (same_shape(sn->p.child, childGraph, &err) != cudaGraphExecUpdateSuccess) FAIL(cudaErrorInvalidValue);
    graph_t *copy = graph_clone(childGraph);
    if (!copy) FAIL(cudaErrorMemoryAllocation);
    graph_t *old = sn->p.child;
    sn->p.child = copy;
    pthread_mutex_lock(&hGraphExec->lock);
    cudaError_t e = exec_make(hGraphExec, NULL);
    if (e) {
        sn->p.child = old;
        graph_free(copy);
        exec_make(hGraphExec, NULL);
    } else {
        graph_free(old);
    }
    pthread_mutex_unlock(&hGraphExec->lock);
    return e ? cpuify_cudart_fail(e) : cudaSuccess;
}
