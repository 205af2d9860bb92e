/* The block scheduler: runs the segments of one thread block between its sync points.
 *
 * Generated code cuts a kernel at block barriers and warp collectives into segments; each
 * segment is a loop over the block's threads that runs every thread from a resume point
 * until it reaches the next sync point (state[t] = CPUIFY_STATE_WAIT | s) or exits
 * (state[t] = -1).  This function decides what runs next:
 *   - threads waiting at warp collectives: the exchange is done per warp among the lanes
 *     waiting at the same collective, then those lanes resume;
 *   - threads at yield points (the back edge of a loop that waits for memory other threads
 *     write: transforms/progress.py) go round their loop once more after the others have
 *     run as far as they can; when a round moves none of them, the block waits
 *     (cpuify_block_wait: the runtime runs other blocks, and fails a launch that can make
 *     no progress at all).  Threads at a barrier wait for the spinning threads to arrive;
 *   - otherwise every live thread must wait at the same block barrier (threads that exited
 *     are not waited for, as on Volta and later); anything else is a barrier divergence.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "cpuify_rt.h"

#define STATE_EXITED (-1)
#define STATE_WAIT 0x10000

typedef struct cpuify_block_ctx {
    const void *params;
    const void *dims;
    char *shared;
    char *scratch;
    int32_t *state;
    uint64_t *xval;
    uint32_t *xb;
    uint32_t *xc;
    uint32_t *xmask;
    uint64_t *xout;
    uint32_t *xpred;
    char *slots;
    char *local;
    uint32_t bx, by, bz, nthreads;
    int32_t error;
    uint32_t dyn_shared;
    uint32_t local_size;
    uint32_t live_end; /* masked segment runs stop at this linear thread id (0: run to the end) */
} cpuify_block_ctx;

/* Runs the segment at `resume` for all threads (masked == 0) or for those whose state is
 * `resume`.  Returns the state every thread ended in when the compiler proved they all took
 * the same path (a segment whose branches are block-uniform), else STATE_UNKNOWN. */
typedef int32_t (*cpuify_dispatch_fn)(cpuify_block_ctx *ctx, int32_t resume, int32_t masked);
#define STATE_UNKNOWN INT32_MIN

enum {
    K_BARRIER = 0, K_BAR_POPC = 1, K_BAR_AND = 2, K_BAR_OR = 3,
    K_SOFT = 4,   /* header of an interchanged loop: a resume point, not a meeting point */
    K_YIELD = 5,  /* back edge of a spin-wait loop: the thread lets the others run */
    K_NAMED = 8, K_ARRIVE = 9,   /* bar.sync / bar.arrive id, count (xb: id, xc: count) */
    K_SYNCWARP = 10, K_SHFL_UP = 11, K_SHFL_DOWN = 12, K_SHFL_BFLY = 13, K_SHFL_IDX = 14,
    K_VOTE_ALL = 20, K_VOTE_ANY = 21, K_VOTE_UNI = 22, K_VOTE_BALLOT = 23,
    K_ACTIVEMASK = 30, K_MATCH_ANY = 31, K_MATCH_ALL = 32,
    K_LOCKSTEP = 33,   /* a step of legacy warp-synchronous code (the warp-lockstep pass) */
    K_REDUX_ADD = 40, K_REDUX_MIN_U = 41, K_REDUX_MAX_U = 42, K_REDUX_MIN_S = 43,
    K_REDUX_MAX_S = 44, K_REDUX_AND = 45, K_REDUX_OR = 46, K_REDUX_XOR = 47,
};
#define K_64BIT 0x100
/* a shuffle whose operands are constants and whose mask is the full warp: when every thread
 * waits there the next segment reads the source lanes itself (no exchange, run unmasked) */
#define K_STATIC 0x200

static int is_warp_kind(int32_t k) { return (k & 0xff) >= 10; }
static int is_named_kind(int32_t k) { return k == K_NAMED || k == K_ARRIVE; }

/* Named barriers (bar.sync/bar.arrive id, count): threads at bar.arrive add to their
 * barrier's arrival count and go on; the threads waiting at bar.sync on a barrier are
 * released, `count` threads per completion (0: every live thread of the block) counting
 * the arrivals, in thread order.  Returns whether any thread was resumed (`resumed` gets
 * the resume ids). */
static int named_barriers(cpuify_block_ctx *c, const int32_t *kinds, uint32_t *arrived,
                          uint64_t *resumed, int32_t *resume_big)
{
    const uint32_t n = c->nthreads;
    int32_t *state = c->state;
    uint32_t waiting[16] = {0}, live = 0;
    int progressed = 0, any = 0;
    for (uint32_t t = 0; t < n; t++) {
        int32_t s = state[t];
        if (s == STATE_EXITED) continue;
        live++;
        if (!(s & STATE_WAIT) || !is_named_kind(kinds[(s & 0xffff) - 1])) continue;
        any = 1;
        uint32_t id = c->xb[t] & 15;
        if (kinds[(s & 0xffff) - 1] == K_ARRIVE) {
            arrived[id]++;
            state[t] = s & 0xffff;
            int32_t r = s & 0xffff;
            if (r < 256) resumed[r >> 6] |= 1ull << (r & 63); else *resume_big = r;
            progressed = 1;
        } else {
            waiting[id]++;
        }
    }
    if (!any) return 0;
    for (uint32_t id = 0; id < 16; id++) {
        while (waiting[id]) {
            uint32_t need = 0;
            for (uint32_t t = 0; t < n && !need; t++) {
                int32_t s = state[t];
                if (s != STATE_EXITED && (s & STATE_WAIT) && kinds[(s & 0xffff) - 1] == K_NAMED
                    && (c->xb[t] & 15) == id)
                    need = c->xc[t] ? c->xc[t] : live;
            }
            uint32_t from_arrivals = arrived[id] < need ? arrived[id] : need;
            if (from_arrivals + waiting[id] < need) break;   /* not complete (yet) */
            uint32_t release = need - from_arrivals;
            arrived[id] -= from_arrivals;
            for (uint32_t t = 0; t < n && release; t++) {
                int32_t s = state[t];
                if (s != STATE_EXITED && (s & STATE_WAIT) && kinds[(s & 0xffff) - 1] == K_NAMED
                    && (c->xb[t] & 15) == id) {
                    int32_t r = s & 0xffff;
                    state[t] = r;
                    if (r < 256) resumed[r >> 6] |= 1ull << (r & 63); else *resume_big = r;
                    release--;
                    waiting[id]--;
                }
            }
            progressed = 1;
            if (need == 0) break;
        }
    }
    return progressed;
}

/* Resumes the threads whose state is one of the resume ids in `resumed` (and, rarely, ids
 * of 256 and more), each id's threads together. */
static int32_t resume_all(cpuify_block_ctx *c, cpuify_dispatch_fn run, const uint64_t *resumed,
                          int32_t resume_big)
{
    for (int32_t r = 0; r < 256; r++)
        if (resumed[r >> 6] >> (r & 63) & 1) {
            run(c, r, 1);
            if (c->error) return c->error;
        }
    if (resume_big >= 0) {
        for (;;) {
            int32_t r = -1;
            for (uint32_t t = 0; t < c->nthreads; t++)
                if (c->state[t] >= 256 && !(c->state[t] & STATE_WAIT)) { r = c->state[t]; break; }
            if (r < 0) break;
            run(c, r, 1);
            if (c->error) return c->error;
        }
    }
    return 0;
}

/* One warp collective among the lanes `group` (bitmask) of the warp starting at `base`. */
static void warp_exchange(cpuify_block_ctx *c, uint32_t base, uint32_t nlanes, uint32_t group,
                          int32_t kind)
{
    int32_t k = kind & 0xff;
    uint64_t *xv = c->xval;
    for (uint32_t l = 0; l < nlanes; l++) {
        if (!(group >> l & 1))
            continue;
        uint32_t t = base + l;
        uint64_t out = 0;
        uint32_t pred = 1;
        switch (k) {
        case K_SYNCWARP: case K_LOCKSTEP:
            break;
        case K_SHFL_UP: case K_SHFL_DOWN: case K_SHFL_BFLY: case K_SHFL_IDX: {
            uint32_t bval = c->xb[t] & 31, cval = c->xc[t] & 31, segmask = (c->xc[t] >> 8) & 31;
            int32_t maxlane = (int32_t)((l & segmask) | (cval & ~segmask));
            int32_t minlane = (int32_t)(l & segmask);
            int32_t j;
            if (k == K_SHFL_UP) { j = (int32_t)l - (int32_t)bval; pred = j >= maxlane; }
            else if (k == K_SHFL_DOWN) { j = (int32_t)l + (int32_t)bval; pred = j <= maxlane; }
            else if (k == K_SHFL_BFLY) { j = (int32_t)(l ^ bval); pred = j <= maxlane; }
            else { j = minlane | (int32_t)(bval & ~segmask); pred = j <= maxlane; }
            /* as an H100 does: a source lane outside the segment or the warp gives the
             * lane its own value; one that takes no part (not in the member mask, at no
             * shuffle with this mask, exited, past a partial warp's end) gives 0 */
            if (!pred)
                out = xv[t];
            else if (j < 0 || (uint32_t)j >= nlanes || !(group >> j & 1))
                out = 0;
            else
                out = xv[base + (uint32_t)j];
            break;
        }
        case K_VOTE_ALL: case K_VOTE_ANY: case K_VOTE_UNI: case K_VOTE_BALLOT: {
            uint32_t ballot = 0;
            for (uint32_t m = 0; m < nlanes; m++)
                if ((group >> m & 1) && (xv[base + m] & 1))
                    ballot |= 1u << m;
            if (k == K_VOTE_BALLOT) out = ballot;
            else if (k == K_VOTE_ALL) out = ballot == group;
            else if (k == K_VOTE_ANY) out = ballot != 0;
            else out = ballot == 0 || ballot == group;
            break;
        }
        case K_ACTIVEMASK:
            out = group;
            break;
        case K_MATCH_ANY: case K_MATCH_ALL: {
            uint64_t mine = xv[t];
            if (!(kind & K_64BIT)) mine &= 0xffffffffu;
            uint32_t same = 0;
            for (uint32_t m = 0; m < nlanes; m++) {
                uint64_t other = xv[base + m];
                if (!(kind & K_64BIT)) other &= 0xffffffffu;
                if ((group >> m & 1) && other == mine)
                    same |= 1u << m;
            }
            if (k == K_MATCH_ANY) out = same;
            else { pred = same == group; out = pred ? group : 0; }
            break;
        }
        default: {   /* redux.sync */
            uint32_t acc = 0;
            int first = 1;
            for (uint32_t m = 0; m < nlanes; m++) {
                if (!(group >> m & 1)) continue;
                uint32_t v = (uint32_t)xv[base + m];
                if (first) { acc = v; first = 0; continue; }
                switch (k) {
                case K_REDUX_ADD: acc += v; break;
                case K_REDUX_MIN_U: acc = v < acc ? v : acc; break;
                case K_REDUX_MAX_U: acc = v > acc ? v : acc; break;
                case K_REDUX_MIN_S: acc = (int32_t)v < (int32_t)acc ? v : acc; break;
                case K_REDUX_MAX_S: acc = (int32_t)v > (int32_t)acc ? v : acc; break;
                case K_REDUX_AND: acc &= v; break;
                case K_REDUX_OR: acc |= v; break;
                default: acc ^= v; break;
                }
            }
            out = acc;
        }
        }
        c->xout[t] = out;
        c->xpred[t] = pred;
    }
}

CPUIFY_API int32_t cpuify_run_block_from(cpuify_block_ctx *c, cpuify_dispatch_fn run,
                                         const int32_t *kinds, int32_t nsync, int32_t known,
                                         const char *const *where);

CPUIFY_API int32_t cpuify_run_block(cpuify_block_ctx *c, cpuify_dispatch_fn run,
                                    const int32_t *kinds, int32_t nsync)
{
    return cpuify_run_block_from(c, run, kinds, nsync, run(c, 0, 0), NULL);
}

/* Runs the exchanges of warp collectives that can run and resumes their lanes: per warp,
 * lanes waiting at one collective with one member mask form a group.  A group runs when
 * every live lane of its mask has arrived (so __syncwarp and full-mask collectives wait for
 * lanes still in a divergent branch); with `incomplete`, if no group of the block is
 * complete, incomplete groups run anyway (so that code whose masks do not match its control
 * flow still makes progress).  Returns whether a group ran (-1: the block failed). */
static int warp_round(cpuify_block_ctx *c, cpuify_dispatch_fn run, const int32_t *kinds,
                      int incomplete)
{
    const uint32_t n = c->nthreads;
    int32_t *state = c->state;
    /* per warp: lanes waiting at one collective with one member mask form a group.
     * A group runs when every live lane of its mask has arrived (so __syncwarp and
     * full-mask collectives wait for lanes still in a divergent branch); if no group
     * of the block is complete, incomplete groups run anyway so that code whose
     * masks do not match its control flow still makes progress.  Lockstep steps
     * (K_LOCKSTEP) group the lanes at the same step, whatever their masks; of those
     * of one warp only the lowest step runs: lanes that went past a branch wait at
     * the next step until the lanes in the branch catch up (pre-Volta reconvergence). */
    uint64_t resumed[4] = {0, 0, 0, 0};   /* bitset of resume ids (< 256) */
    int32_t resume_big = -1;
    int progressed = 0;
    for (int pass = 0; pass < 1 + incomplete && !progressed; pass++) {
        for (uint32_t base = 0; base < n; base += 32) {
            uint32_t nlanes = n - base < 32 ? n - base : 32;
            uint32_t live = 0;
            for (uint32_t m = 0; m < nlanes; m++)
                if (state[base + m] != STATE_EXITED) live |= 1u << m;
            uint32_t done = 0;
            int32_t lowest_step = INT32_MAX;
            for (uint32_t m = 0; m < nlanes; m++) {
                int32_t s = state[base + m];
                if (s != STATE_EXITED && (s & STATE_WAIT) &&
                    kinds[(s & 0xffff) - 1] == K_LOCKSTEP && (s & 0xffff) < lowest_step)
                    lowest_step = s & 0xffff;
            }
            for (uint32_t l = 0; l < nlanes; l++) {
                int32_t s = state[base + l];
                if (s == STATE_EXITED || (done >> l & 1) || !(s & STATE_WAIT)) continue;
                int32_t sync = s & 0xffff;
                if (!is_warp_kind(kinds[sync - 1])) continue;
                int32_t k = kinds[sync - 1] & 0xff;
                if (k == K_LOCKSTEP && sync != lowest_step) continue;
                int masked = k != K_ACTIVEMASK && k != K_LOCKSTEP;
                uint32_t mask = c->xmask[base + l];
                uint32_t group = 0;
                /* a collective with a member mask (`.sync`) meets the lanes at any
                 * collective of the same kind and mask, not only at the same
                 * instruction (PTX: "executed shfl.sync with the same qualifiers and
                 * the same membermask"; an H100 exchanges the values of two
                 * __shfl_sync(0xffffffff) in the two ways of a branch) */
                for (uint32_t m = l; m < nlanes; m++) {
                    int32_t sm = state[base + m];
                    if (sm == s || (masked && sm != STATE_EXITED && (sm & STATE_WAIT) &&
                                    !(done >> m & 1) &&
                                    (kinds[(sm & 0xffff) - 1] & ~K_STATIC) == (kinds[sync - 1] & ~K_STATIC)))
                        if (!masked || c->xmask[base + m] == mask)
                            group |= 1u << m;
                }
                done |= group;
                uint32_t want = masked ? (mask & live) : group;
                if (pass == 0 && (want & ~group) != 0)
                    continue;   /* members still on their way: wait for them */
                warp_exchange(c, base, nlanes, group, kinds[sync - 1]);
                for (uint32_t m = l; m < nlanes; m++) {
                    if (!(group >> m & 1)) continue;
                    int32_t own = state[base + m] & 0xffff;   /* each lane resumes after its own */
                    state[base + m] = own;
                    if (own < 256) resumed[own >> 6] |= 1ull << (own & 63);
                    else resume_big = own;
                }
                progressed = 1;
            }
        }
    }
    for (int32_t r = 0; r < 256; r++)
        if (resumed[r >> 6] >> (r & 63) & 1) {
            run(c, r, 1);
            if (c->error) return -1;
        }
    if (resume_big >= 0) {
        /* rare: more than 255 sync points; resume each id still present */
        for (;;) {
            int32_t r = -1;
            for (uint32_t t = 0; t < n; t++)
                if (state[t] >= 256) { r = state[t]; break; }
            if (r < 0) break;
            run(c, r, 1);
            if (c->error) return -1;
        }
    }
    return progressed;
}

/* The smallest yield point above `after` some thread waits at (INT32_MAX: none). */
static int32_t next_yield(const cpuify_block_ctx *c, const int32_t *kinds, int32_t after)
{
    int32_t y = INT32_MAX;
    for (uint32_t t = 0; t < c->nthreads; t++) {
        int32_t s = c->state[t];
        if (s == STATE_EXITED || !(s & STATE_WAIT)) continue;
        int32_t sync = s & 0xffff;
        if ((kinds[sync - 1] & 0xff) == K_YIELD && sync > after && sync < y) y = sync;
    }
    return y;
}

/* One more round of the spin-wait loops of the threads at yield points (each group of
 * threads at the same yield point, in the order of the points).  Returns whether a thread
 * got anywhere else (-1: the block failed); *first_at, *first_thread: a yield point a thread
 * is back at, and that thread. */
static int yield_round(cpuify_block_ctx *c, cpuify_dispatch_fn run, const int32_t *kinds,
                       int32_t *first_at, uint32_t *first_thread)
{
    const uint32_t n = c->nthreads;
    int32_t *state = c->state;
    int moved = 0;
    int32_t y = next_yield(c, kinds, 0);
    while (y != INT32_MAX) {
        uint32_t waiting = 0;
        for (uint32_t t = 0; t < n; t++)
            if (state[t] == (STATE_WAIT | y)) { state[t] = y; waiting++; }
        run(c, y, 1);
        if (c->error) return -1;
        /* who is back at y, and the next yield point (above y) a thread waits at */
        uint32_t back = 0;
        int32_t next = INT32_MAX;
        for (uint32_t t = 0; t < n; t++) {
            int32_t s = state[t];
            if (s == (STATE_WAIT | y)) {
                if (!back) *first_thread = t;
                back++;
            } else if (s != STATE_EXITED && (s & STATE_WAIT)) {
                int32_t sync = s & 0xffff;
                if ((kinds[sync - 1] & 0xff) == K_YIELD && sync > y && sync < next) next = sync;
            }
        }
        if (back != waiting) moved = 1;
        else *first_at = y;
        y = next;
    }
    return moved;
}

CPUIFY_API void cpuify_block_progress(void);
CPUIFY_API int32_t cpuify_block_wait(const char *where, uint32_t bx, uint32_t by, uint32_t bz,
                                     uint32_t thread);

/* The scheduler, entered after the generated code ran segments itself for as long as all
 * threads stopped at the same plain barrier; `known` is what the last segment returned.
 * `where` (NULL when the kernel has no yield points): per sync point, where a thread at a
 * yield point waits, for the message of a launch that can make no progress. */
CPUIFY_API int32_t cpuify_run_block_from(cpuify_block_ctx *c, cpuify_dispatch_fn run,
                                         const int32_t *kinds, int32_t nsync, int32_t known,
                                         const char *const *where)
{
    const uint32_t n = c->nthreads;
    int32_t *state = c->state;
    uint32_t arrived[16] = {0};   /* named barriers: bar.arrive counts not yet used */
    (void)nsync;
    c->live_end = 0;   /* the generated code may have narrowed masked runs: not here */
    for (;;) {
        if (c->error)
            return c->error;
        if (known != STATE_UNKNOWN) {
            /* all threads stopped at the same place, known without a scan */
            if (known == STATE_EXITED)
                return 0;
            int32_t k = kinds[(known & 0xffff) - 1];
            if (k == K_BARRIER || k == K_SOFT || k == K_LOCKSTEP || (k & K_STATIC)) {
                known = run(c, known & 0xffff, 0);
                continue;
            }
        }
        if (known != STATE_UNKNOWN) {
            /* a segment that knew where every thread stopped may not have stored states */
            for (uint32_t t = 0; t < n; t++)
                state[t] = known;
        }
        known = STATE_UNKNOWN;
        /* fast path: every thread waits at the same plain barrier (the common case) */
        {
            const int32_t first = state[0];
            int32_t diff = 0;
            for (uint32_t t = 1; t < n; t++)   /* branch-free: the compiler vectorizes it */
                diff |= state[t] ^ first;
            if (diff == 0 && first != STATE_EXITED && (kinds[(first & 0xffff) - 1] == K_BARRIER ||
                                                      kinds[(first & 0xffff) - 1] == K_LOCKSTEP)) {
                known = run(c, first & 0xffff, 0);   /* the unmasked loop does not read state[] */
                continue;
            }
        }
        /* threads at soft barriers (one iteration of an interchanged loop done) go on:
         * each group of threads at the same soft barrier runs its next iteration */
        {
            int32_t soft = -1;
            uint32_t at_soft = 0, exited_now = 0;
            for (uint32_t t = 0; t < n; t++) {
                int32_t s = state[t];
                if (s == STATE_EXITED) { exited_now++; continue; }
                if ((s & STATE_WAIT) && kinds[(s & 0xffff) - 1] == K_SOFT) {
                    if (soft < 0) soft = s;
                    if (s == soft) at_soft++;
                }
            }
            if (soft >= 0) {
                int32_t sync = soft & 0xffff;
                for (uint32_t t = 0; t < n; t++)
                    if (state[t] == soft) state[t] = sync;
                known = run(c, sync, at_soft + exited_now != n || exited_now != 0);
                continue;
            }
        }
        /* named barriers that complete (and arrivals) go first */
        {
            uint64_t resumed[4] = {0, 0, 0, 0};
            int32_t resume_big = -1;
            if (named_barriers(c, kinds, arrived, resumed, &resume_big)) {
                int32_t rc = resume_all(c, run, resumed, resume_big);
                if (rc) return rc;
                continue;
            }
        }
        /* classify where the threads stopped */
        uint32_t exited = 0, warp_waiting = 0, yielding = 0;
        int32_t barrier = -1;
        int diverged = 0;
        for (uint32_t t = 0; t < n; t++) {
            int32_t s = state[t];
            if (s == STATE_EXITED) { exited++; continue; }
            int32_t sync = s & 0xffff;
            if (is_warp_kind(kinds[sync - 1])) { warp_waiting++; continue; }
            if ((kinds[sync - 1] & 0xff) == K_YIELD) { yielding++; continue; }
            if (is_named_kind(kinds[sync - 1])) { diverged = 1; continue; }   /* stuck there */
            if (barrier < 0) barrier = sync;
            else if (barrier != sync) diverged = 1;
        }
        if (exited == n)
            return 0;
        if (yielding) {
            /* complete warp groups first; then the spinning threads go round once more */
            if (warp_waiting) {
                int r = warp_round(c, run, kinds, 0);
                if (r < 0) return c->error;
                if (r) continue;
            }
            /* while nobody gets anywhere, the threads wait for others (other blocks): the
             * other threads of the block stay where they are meanwhile */
            for (;;) {
                int32_t at = 0;
                uint32_t thread = 0;
                int moved = yield_round(c, run, kinds, &at, &thread);
                if (moved < 0) return c->error;
                if (moved) {
                    cpuify_block_progress();
                    break;
                }
                int32_t rc = cpuify_block_wait(where ? where[at - 1] : NULL, c->bx, c->by,
                                               c->bz, thread);
                if (rc) return rc;
            }
            continue;
        }
        if (warp_waiting) {
            if (warp_round(c, run, kinds, 1) < 0) return c->error;
            continue;
        }
        if (diverged)
            return CPUIFY_ERR_BARRIER_DIVERGENCE;
        /* every live thread is at block barrier `barrier` */
        int32_t kind = kinds[barrier - 1];
        if (kind != K_BARRIER) {
            uint64_t count = 0, all = 1, any = 0;
            for (uint32_t t = 0; t < n; t++) {
                if (state[t] == STATE_EXITED) continue;
                uint64_t p = c->xval[t] & 1;
                count += p; all &= p; any |= p;
            }
            uint64_t r = kind == K_BAR_POPC ? count : kind == K_BAR_AND ? all : any;
            for (uint32_t t = 0; t < n; t++) c->xout[t] = r;
        }
        for (uint32_t t = 0; t < n; t++)
            if (state[t] != STATE_EXITED) state[t] = barrier;
        known = run(c, barrier, exited != 0);
    }
}

CPUIFY_API void cpuify_assert_message(const char *message)
{
    cpuify_nocancel(1);   /* stderr's lock: a cancel waits until it is released */
    fprintf(stderr, "cpuify: device assertion failed: %s\n", message ? message : "(no message)");
    fflush(stderr);
    cpuify_nocancel(0);
}
