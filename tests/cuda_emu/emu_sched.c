/*
 * The CUDA emulator's scheduler (emu_sched.h): fibers with a hand-written
 * x86-64 context switch (six callee-saved registers and the stack pointer;
 * ucontext's swapcontext makes a system call per switch, and a launch
 * switches a few times per GPU thread), run block by block.
 *
 * A block's threads each get a stack from a per-OS-thread pool (64 KiB,
 * a guard page below each, so an overflow faults instead of corrupting a
 * neighbour). The scheduler runs every runnable thread, in a shuffled
 * order, until it finishes or blocks at a barrier; when none can run it
 * releases the warps whose 32 lanes all wait at a shuffle (handing each
 * lane its partner's value), else the block if all its live threads wait at
 * __syncthreads, else reports the deadlock it found.
 *
 * Most kernels (element-wise ones) never wait for anybody, and a fiber per
 * thread costs more than the thread's work. So each launch site's first
 * launch runs on fibers and notes whether any thread reached a barrier or
 * a shuffle; if none did, later launches from that site run each thread as
 * a plain call on the scheduler's stack. A barrier reached in such a launch
 * (a kernel whose barriers depend on its arguments) cannot wait there: the
 * launch fails, naming the kernel, and the site runs on fibers from then on
 * (PLAIT_CUDA_EMU_FIBERS=1 runs every launch on fibers).
 */
#include "emu_sched.h"

#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#if !defined(__x86_64__)
#error "the CUDA emulator's context switch is written for x86-64 (tests/cuda_emu/CMakeLists.txt builds it there only)"
#endif

#define MAX_THREADS 1024
#define WARP 32
#define STACK_BYTES (64 * 1024)
#define DYNAMIC_SPAN (((size_t)PC_EMU_SHARED_OPTIN + 4095) / 4096 * 4096)

enum { RUNNABLE, AT_SYNCTHREADS, AT_SHUFFLE, FINISHED };

/* One cp.async a thread issued that no wait has completed yet: its bytes
 * as the source held them at the issue, and the group it belongs to
 * (1-based: the thread's commits before it, plus one). */
typedef struct cp_copy {
    unsigned char *dst;
    const unsigned char *src;
    unsigned char bytes_at_issue[16];
    unsigned bytes, group;
} cp_copy;

typedef struct fiber {
    void *sp; /* saved stack pointer while switched out */
    unsigned tid;
    int state;
    /* a pending shuffle: this lane's value, the lane it reads, the result;
     * or a gather (src GATHER): every lane's value and mask into the
     * scheduler's table */
    unsigned char mine[8], out[8];
    size_t bytes;
    unsigned src, mask;
    /* or a warp-wide instruction (src WARP_OP): its operation and this
     * lane's operands */
    pc_emu_warp_fn op;
    void *op_mine;
    /* pending cp.async copies in issue order, and the groups committed so
     * far (the array is kept from block to block, its count reset) */
    cp_copy *copies;
    unsigned ncopies, capcopies, groups;
} fiber;

#define GATHER 0xffffffffu
#define WARP_OP 0xfffffffeu

/* How a launch site's threads run: learnt on its first launch. */
enum { SITE_UNKNOWN, SITE_FIBERS, SITE_DIRECT };
#define SITES 512

typedef struct sched {
    char *stacks; /* MAX_THREADS stacks, each above a guard page */
    fiber fibers[MAX_THREADS];
    unsigned order[MAX_THREADS];
    void *main_sp;
    fiber *cur;
    unsigned here[4][3]; /* threadIdx, blockIdx, blockDim, gridDim */
    void (*body)(void *);
    void *ctx;
    const char *kernel;
    int failed;
    uint64_t rng;
    int direct;          /* this launch runs threads as plain calls */
    int waited;          /* some thread of this launch reached a barrier */
    jmp_buf direct_exit; /* where a barrier in a direct launch ends it */
    unsigned char *dynamic; /* PC_EMU_SHARED_OPTIN bytes (rounded to pages), a guard page after */
    size_t dynamic_bytes;   /* this launch's */
    fiber direct_fiber;
    /* the warp pass under way (run_block): its first thread, its lanes,
     * the lanes' order and the next place in it; and the threads of the
     * block not finished */
    unsigned pass_w0, pass_lanes, pass_j, lane_order[WARP], live;
    /* the last gather's values and masks: the released warp's lanes read
     * it as they resume, before any of them can reach another collective */
    pc_emu_lane table[WARP];
    struct {
        const char *site;
        int mode;
    } sites[SITES];
} sched;

/* initial-exec: one load per access (the plugin is dlopen'ed, and a pointer
 * fits the static TLS glibc keeps for that) instead of __tls_get_addr */
static _Thread_local sched *S __attribute__((tls_model("initial-exec")));
static uint64_t g_launches; /* seeds each launch's order; racy increments are harmless */

static pthread_mutex_t g_fail_lock = PTHREAD_MUTEX_INITIALIZER;
/* one launch at a time in the process: __shared__ is static storage */
static pthread_mutex_t g_launch_lock = PTHREAD_MUTEX_INITIALIZER;
static char g_failure[512];
static int g_has_failure;

/* ---- context switch -------------------------------------------------------- */

void pc_emu_switch(void **save_sp, void *to_sp);
__attribute__((used, visibility("hidden"))) void pc_emu_fiber_main(fiber *f);

__asm__(".text\n"
        ".p2align 4\n"
        ".type pc_emu_switch,@function\n"
        "pc_emu_switch:\n"
        "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
        "  movq %rsp, (%rdi)\n"
        "  movq %rsi, %rsp\n"
        "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n"
        "  ret\n"
        ".size pc_emu_switch, .-pc_emu_switch\n"
        ".p2align 4\n"
        ".type pc_emu_trampoline,@function\n"
        "pc_emu_trampoline:\n"
        "  movq %r12, %rdi\n"
        "  call pc_emu_fiber_main\n"
        "  ud2\n"
        ".size pc_emu_trampoline, .-pc_emu_trampoline\n");
void pc_emu_trampoline(void);

/* A fresh stack that "returns" into the trampoline with r12 = f; after the
 * six pops and the ret the stack pointer is 16-byte aligned for its call. */
static void *initial_sp(unsigned i, fiber *f) {
    /* tops staggered by a cache line per thread: stacks all starting at the
     * same page offset would fight over one L1 set */
    char *top = S->stacks + (size_t)(i + 1) * (STACK_BYTES + 4096) - (size_t)(i % 32) * 64;
    uint64_t *sp = (uint64_t *)(top - 72);
    memset(sp, 0, 72);
    sp[3] = (uint64_t)(uintptr_t)f;                  /* r12 */
    sp[6] = (uint64_t)(uintptr_t)pc_emu_trampoline; /* the return address */
    return sp;
}

/* The next lane of the warp pass that can run, or NULL at the pass's end. */
static fiber *next_lane(void) {
    while (S->pass_j < WARP) {
        unsigned l = S->lane_order[S->pass_j++];
        if (l >= S->pass_lanes) continue;
        fiber *f = &S->fibers[S->pass_w0 + l];
        if (f->state == RUNNABLE) return f;
    }
    return NULL;
}

/* Run lane f from where it stopped, saving the running stack's pointer in
 * *save (the scheduler's, or the lane that hands over). */
static void switch_to(void **save, fiber *f) {
    S->cur = f;
    S->here[0][0] = f->tid;
    pc_emu_switch(save, f->sp);
}

/* The running lane f stops (at a barrier, a warp collective, or finished):
 * it hands the core to the pass's next runnable lane itself, or, at the
 * pass's end or after a failure, to the scheduler. One switch a lane
 * where a return to the scheduler and a switch out of it took two: the
 * switch (a mispredicted return each) is the emulator's largest cost in
 * kernels that shuffle. */
static void leave(fiber *f) {
    if (f->state == FINISHED) S->live--;
    fiber *next = S->failed ? NULL : next_lane();
    if (next) switch_to(&f->sp, next);
    else pc_emu_switch(&f->sp, S->main_sp);
}

void pc_emu_fiber_main(fiber *f) {
    S->body(S->ctx);
    f->state = FINISHED;
    leave(f);
    abort(); /* a finished fiber is never resumed */
}

static void yield(void) { leave(S->cur); }

/* ---- per-OS-thread state ---------------------------------------------------- */

static sched *state(void) {
    if (S) return S;
    sched *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    size_t each = STACK_BYTES + 4096;
    void *m = mmap(NULL, each * MAX_THREADS, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    if (m == MAP_FAILED) {
        free(s);
        return NULL;
    }
    s->stacks = m;
    for (unsigned i = 0; i < MAX_THREADS; i++) mprotect(s->stacks + (size_t)i * each, 4096, PROT_NONE);
    void *d = mmap(NULL, DYNAMIC_SPAN + 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (d == MAP_FAILED) {
        munmap(m, each * MAX_THREADS);
        free(s);
        return NULL;
    }
    s->dynamic = d;
    mprotect(s->dynamic + DYNAMIC_SPAN, 4096, PROT_NONE);
    S = s;
    return s;
}

/* ---- failures ------------------------------------------------------------------- */

__attribute__((format(printf, 2, 3))) static void fail(unsigned tid, const char *fmt, ...) {
    char msg[384];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    char line[512];
    snprintf(line, sizeof line, "cuda_emu: kernel %s, block %u, thread %u: %s", S->kernel, S->here[1][0], tid, msg);
    fprintf(stderr, "%s\n", line);
    pthread_mutex_lock(&g_fail_lock);
    if (!g_has_failure) {
        memcpy(g_failure, line, sizeof g_failure);
        g_has_failure = 1;
    }
    pthread_mutex_unlock(&g_fail_lock);
    S->failed = 1;
}

const char *pc_emu_failure(void) {
    pthread_mutex_lock(&g_fail_lock);
    const char *f = g_has_failure ? g_failure : NULL;
    pthread_mutex_unlock(&g_fail_lock);
    return f;
}

/* ---- barriers ------------------------------------------------------------------- */

static fiber *current(const char *what) {
    if (!S || !S->cur) {
        fprintf(stderr, "cuda_emu: %s called outside a kernel\n", what);
        abort();
    }
    return S->cur;
}

const unsigned *pc_emu_builtin(int which) {
    (void)current("a CUDA built-in variable");
    return S->here[which];
}

/* A barrier reached in a launch running without fibers: nowhere to wait. */
static void barrier_in_direct_launch(fiber *f, const char *what) {
    fail(f->tid, "%s in a launch run without fibers (its first launch from this site reached no barrier); this "
                 "site runs on fibers from now on",
         what);
    longjmp(S->direct_exit, 1);
}

void pc_emu_syncthreads(void) {
    fiber *f = current("__syncthreads");
    S->waited = 1;
    if (S->direct) barrier_in_direct_launch(f, "__syncthreads");
    f->state = AT_SYNCTHREADS;
    yield();
}

/* A lane reaches a warp collective: publishes `bytes` of `mine` and waits
 * for the warp (release_warp); `bad` (a message) ends the launch instead. */
static void at_warp_collective(const char *bad, unsigned mask, const void *mine, size_t bytes, unsigned src) {
    fiber *f = current("a warp collective");
    S->waited = 1;
    if (S->direct) barrier_in_direct_launch(f, "a warp collective");
    if (bad) pc_emu_fault(bad);
    memcpy(f->mine, mine, bytes);
    f->bytes = bytes;
    f->src = src;
    f->mask = mask;
    f->state = AT_SHUFFLE;
    yield();
}

void pc_emu_shuffle(unsigned mask, const void *mine, void *out, size_t bytes, unsigned src_lane) {
    at_warp_collective(mask != 0xffffffffu || bytes > 8 ? "a shuffle with a partial mask or of over 8 bytes (the "
                                                          "emulator models full-warp shuffles of up to 8 bytes)"
                                                        : NULL,
                       mask, mine, bytes, src_lane);
    memcpy(out, S->cur->out, bytes);
}

const pc_emu_lane *pc_emu_warp_gather(unsigned mask, const void *mine, size_t bytes) {
    int in_mask = mask >> (pc_emu_builtin(0)[0] % WARP) & 1u;
    at_warp_collective(bytes > 8 || !in_mask ? "a warp collective of over 8 bytes, or whose mask leaves out the "
                                               "calling lane"
                                             : NULL,
                       mask, mine, bytes, GATHER);
    return S->table;
}

void pc_emu_warp_op(void *mine, pc_emu_warp_fn op) {
    fiber *f = current("a warp-wide instruction");
    f->op = op;
    f->op_mine = mine;
    at_warp_collective(NULL, 0xffffffffu, NULL, 0, WARP_OP);
}

/* The warp-wide instruction all 32 lanes from w0 wait at: run it once.
 * 1, or -1 after a failure (lanes at different instructions, or op's own). */
static int release_warp_op(unsigned w0) {
    void *lanes[WARP];
    for (unsigned l = 0; l < WARP; l++) {
        const fiber *f = &S->fibers[w0 + l];
        if (f->op != S->fibers[w0].op) {
            fail(f->tid, "lanes of one warp at different warp-wide instructions (lane %u and lane 0)", l);
            return -1;
        }
        lanes[l] = f->op_mine;
    }
    const char *err = S->fibers[w0].op(lanes);
    if (err) {
        fail(S->fibers[w0].tid, "%s", err);
        return -1;
    }
    for (unsigned l = 0; l < WARP; l++) S->fibers[w0 + l].state = RUNNABLE;
    return 1;
}

void pc_emu_fault(const char *what) {
    fiber *f = current("a kernel fault");
    fail(f->tid, "%s", what);
    if (S->direct) longjmp(S->direct_exit, 1);
    f->state = FINISHED;
    pc_emu_switch(&f->sp, S->main_sp);
    abort(); /* a finished fiber is never resumed */
}

/* ---- asynchronous copies ---------------------------------------------------- */

static int on_a_stack(const void *p) {
    const char *c = p;
    return c >= S->stacks && c < S->stacks + (size_t)MAX_THREADS * (STACK_BYTES + 4096);
}

void pc_emu_cp_async(void *dst, const void *src, unsigned bytes) {
    fiber *f = current("cp.async");
    char what[200];
    if (bytes != 4 && bytes != 8 && bytes != 16) {
        snprintf(what, sizeof what, "cp.async of %u bytes (PTX copies 4, 8 or 16)", bytes);
        pc_emu_fault(what);
    }
    if ((uintptr_t)dst % bytes || (uintptr_t)src % bytes) {
        snprintf(what, sizeof what, "misaligned address: cp.async of %u bytes from %p to %p, not both %u-byte aligned",
                 bytes, src, dst, bytes);
        pc_emu_fault(what);
    }
    if (on_a_stack(dst)) pc_emu_fault("cp.async into a thread's local memory (its destination must be shared memory)");
    unsigned char *d = dst;
    for (unsigned i = 0; i < f->ncopies; i++) {
        const cp_copy *o = &f->copies[i];
        if (d < o->dst + o->bytes && o->dst < d + bytes)
            pc_emu_fault("two pending cp.async of one thread write the same shared memory (PTX orders neither "
                         "against the other)");
    }
    if (f->ncopies == f->capcopies) {
        unsigned cap = f->capcopies ? 2 * f->capcopies : 64;
        cp_copy *c = realloc(f->copies, cap * sizeof *c);
        if (!c) pc_emu_fault("no host memory for a pending cp.async");
        f->copies = c;
        f->capcopies = cap;
    }
    cp_copy *c = &f->copies[f->ncopies++];
    c->dst = d;
    c->src = src;
    c->bytes = bytes;
    c->group = f->groups + 1;
    memcpy(c->bytes_at_issue, src, bytes);
    memset(d, 0xff, bytes); /* undefined until the copy is performed */
}

void pc_emu_cp_async_commit(void) { current("cp.async.commit_group")->groups++; }

/* Perform, in issue order, the copies of groups 1..f->groups - n. */
void pc_emu_cp_async_wait(unsigned n) {
    fiber *f = current("cp.async.wait_group");
    if (f->groups <= n) return;
    const unsigned last = f->groups - n;
    unsigned kept = 0;
    for (unsigned i = 0; i < f->ncopies; i++) {
        const cp_copy *c = &f->copies[i];
        if (c->group > last) {
            f->copies[kept++] = *c;
            continue;
        }
        if (memcmp(c->bytes_at_issue, c->src, c->bytes) != 0) {
            char what[200];
            snprintf(what, sizeof what, "the source of a cp.async (%u bytes at %p) changed while the copy was pending "
                                        "(undefined in PTX)", c->bytes, (const void *)c->src);
            pc_emu_fault(what);
        }
        memcpy(c->dst, c->bytes_at_issue, c->bytes);
    }
    f->ncopies = kept;
}

/* ---- dynamic shared memory ------------------------------------------------------- */

/* The launch's bytes, ending at the guard page (16-byte aligned). */
static unsigned char *dynamic_base(void) {
    return S->dynamic + DYNAMIC_SPAN - (S->dynamic_bytes + 15) / 16 * 16;
}

void *pc_emu_dynamic_shared(void) {
    (void)current("dynamic shared memory");
    if (!S->dynamic_bytes) pc_emu_fault("dynamic shared memory (extern __shared__) used by a launch that gave none");
    return dynamic_base();
}

/* What a GPU leaves in a block's shared memory is undefined. */
static void poison_dynamic(void) { memset(dynamic_base(), 0xff, S->dynamic_bytes); }

/* A thread starts with no copies pending (those of the thread that ran
 * before it on this fiber are dropped, never performed). */
static void no_copies(fiber *f) {
    f->ncopies = 0;
    f->groups = 0;
}

/* A typed access at an address its type's alignment does not divide: a
 * GPU ends the launch ("misaligned address"), a CPU carries on. The
 * kernels are compiled with -fsanitize=alignment (CMakeLists.txt), whose
 * check calls the handler below instead of the sanitizer's runtime, which
 * the emulator does not link: inside a kernel the launch fails as on the
 * GPU, naming the access; anywhere else (host code in a .cu file) the
 * process ends. The record's layout is the one GCC and Clang hand their
 * type-mismatch handler (version 1). */
struct ubsan_location {
    const char *file;
    uint32_t line, column;
};
struct ubsan_type {
    uint16_t kind, info;
    char name[1];
};
struct ubsan_mismatch {
    struct ubsan_location loc;
    const struct ubsan_type *type;
    unsigned char log_alignment, check_kind;
};

static void misaligned(const struct ubsan_mismatch *d, uintptr_t ptr) {
    char what[320];
    snprintf(what, sizeof what, "misaligned address: %s of %zu-byte aligned %s at %#lx (%s:%u)",
             d->check_kind == 1 ? "a store" : d->check_kind == 0 ? "a load" : "an access",
             (size_t)1 << d->log_alignment, d->type->name, (unsigned long)ptr, d->loc.file, d->loc.line);
    if (S && S->cur) pc_emu_fault(what);
    fprintf(stderr, "cuda_emu: %s, outside a kernel\n", what);
    abort();
}

/* Called only by the instrumented kernels; never declared in a header. */
void __ubsan_handle_type_mismatch_v1(const struct ubsan_mismatch *d, uintptr_t ptr);
void __ubsan_handle_type_mismatch_v1_abort(const struct ubsan_mismatch *d, uintptr_t ptr);
void __ubsan_handle_type_mismatch_v1(const struct ubsan_mismatch *d, uintptr_t ptr) { misaligned(d, ptr); }
void __ubsan_handle_type_mismatch_v1_abort(const struct ubsan_mismatch *d, uintptr_t ptr) { misaligned(d, ptr); }

/* Complete the shuffle of the warp of `lanes` threads from w0 if all its
 * lanes wait at one: 1 (its lanes runnable again), 0 if no lane waits at
 * a shuffle, -1 after a failure (a lane exited or waits at __syncthreads:
 * the warp can never complete it). */
static int release_warp(unsigned w0, unsigned lanes) {
    unsigned at = 0, first = 0;
    for (unsigned l = 0; l < lanes; l++)
        if (S->fibers[w0 + l].state == AT_SHUFFLE && !at++) first = w0 + l;
    if (!at) return 0;
    if (at < lanes)
        for (unsigned l = 0; l < lanes; l++) {
            const fiber *o = &S->fibers[w0 + l];
            if (o->state == AT_SHUFFLE) continue;
            fail(first, "a warp shuffle while lane %u of the warp %s", l,
                 o->state == FINISHED ? "has exited" : "waits at __syncthreads");
            return -1;
        }
    if (lanes < WARP) {
        fail(first, "a warp shuffle in a partial warp of %u lanes", lanes);
        return -1;
    }
    unsigned gathers = 0, ops = 0;
    for (unsigned l = 0; l < WARP; l++) {
        gathers += S->fibers[w0 + l].src == GATHER;
        ops += S->fibers[w0 + l].src == WARP_OP;
    }
    if ((gathers && gathers < WARP) || (ops && ops < WARP)) {
        fail(first, "a warp shuffle and another warp collective met (%u of the 32 lanes at the other)",
             gathers ? gathers : ops);
        return -1;
    }
    if (ops) return release_warp_op(w0);
    if (gathers) {
        /* every lane's value and mask, once, into the scheduler's table,
         * which each lane reads as it resumes (pc_emu_warp_gather) */
        pc_emu_lane *table = S->table;
        int one_mask = 1;
        for (unsigned k = 0; k < WARP; k++) {
            const fiber *o = &S->fibers[w0 + k];
            if (o->bytes != S->fibers[w0].bytes) {
                fail(S->fibers[w0].tid, "a warp collective of %zu bytes met one of %zu", S->fibers[w0].bytes,
                     o->bytes);
                return -1;
            }
            memset(table[k].value, 0, sizeof table[k].value);
            memcpy(table[k].value, o->mine, o->bytes);
            table[k].mask = o->mask;
            one_mask &= o->mask == table[0].mask;
        }
        /* the lanes of a mask agree on it (CUDA's rule for *_sync); they
         * do where every lane gives the same one */
        for (unsigned l = 0; !one_mask && l < WARP; l++) {
            const fiber *f = &S->fibers[w0 + l];
            for (unsigned m = f->mask, k; m; m &= m - 1)
                if (table[k = (unsigned)__builtin_ctz(m)].mask != f->mask) {
                    fail(f->tid, "a warp collective with mask 0x%08x while lane %u of it gives 0x%08x", f->mask, k,
                         table[k].mask);
                    return -1;
                }
        }
    }
    for (unsigned l = 0; !gathers && l < WARP; l++) {
        fiber *f = &S->fibers[w0 + l];
        const fiber *from = &S->fibers[w0 + (f->src % WARP)];
        if (f->src >= WARP || from->bytes != f->bytes) {
            fail(f->tid, "a shuffle reading lane %u (%zu bytes against %zu)", f->src, from->bytes, f->bytes);
            return -1;
        }
        memcpy(f->out, from->mine, sizeof f->out); /* the lane reads its f->bytes of them */
    }
    for (unsigned l = 0; l < WARP; l++) S->fibers[w0 + l].state = RUNNABLE;
    return 1;
}

/* Release the block if every live thread waits at __syncthreads: 1, or -1
 * after a failure. */
static int release_block(unsigned n) {
    unsigned waiting = 0, finished = 0, first = 0;
    for (unsigned t = 0; t < n; t++) {
        if (S->fibers[t].state == AT_SYNCTHREADS && !waiting++) first = t;
        if (S->fibers[t].state == FINISHED) finished++;
    }
    if (waiting + finished < n || !waiting) {
        fail(first, "deadlock: %u threads at __syncthreads, %u finished, the rest stuck", waiting, finished);
        return -1;
    }
    if (finished) {
        fail(first, "__syncthreads reached by %u threads while %u have exited (a barrier in divergent code)",
             waiting, finished);
        return -1;
    }
    for (unsigned t = 0; t < n; t++) S->fibers[t].state = RUNNABLE;
    return 1;
}

/* ---- launches ------------------------------------------------------------------- */

static uint64_t next_random(void) {
    uint64_t x = S->rng;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return S->rng = x;
}

/* The order threads are run in: forward, reverse or (by default) a fresh
 * shuffle per block, from PLAIT_CUDA_EMU_ORDER. */
static int order_mode(void) {
    static int mode = -1;
    if (mode < 0) {
        const char *e = getenv("PLAIT_CUDA_EMU_ORDER");
        mode = e && !strcmp(e, "forward") ? 0 : e && !strcmp(e, "reverse") ? 1 : 2;
    }
    return mode;
}

/* A permutation of 0..n-1 into `out`: identity, reversed or (by default)
 * shuffled afresh, from PLAIT_CUDA_EMU_ORDER. */
static void make_order(unsigned *out, unsigned n) {
    int mode = order_mode();
    for (unsigned i = 0; i < n; i++) out[i] = mode == 1 ? n - 1 - i : i;
    if (mode != 2 || n < 2) return;
    for (unsigned i = n - 1; i > 0; i--) {
        unsigned j = (unsigned)(next_random() % (i + 1)), t = out[i];
        out[i] = out[j];
        out[j] = t;
    }
}

/* Every thread of the block as a plain call, in the shuffled order. */
static int run_block_direct(unsigned n) {
    make_order(S->order, n);
    poison_dynamic();
    fiber *f = &S->direct_fiber;
    f->state = RUNNABLE;
    S->cur = f;
    for (unsigned k = 0; k < n; k++) {
        f->tid = S->order[k];
        S->here[0][0] = f->tid;
        no_copies(f);
        S->body(S->ctx);
    }
    S->cur = NULL;
    return 0;
}

/* Warp by warp (warps and the lanes within them in shuffled orders), each
 * warp's lanes run until none can go on, its shuffles completed as its 32
 * lanes reach them; then the block's barrier, until every thread is done. */
static int run_block(unsigned n) {
    poison_dynamic();
    for (unsigned t = 0; t < n; t++) {
        fiber *f = &S->fibers[t];
        f->tid = t;
        f->state = RUNNABLE;
        f->bytes = 0;
        no_copies(f);
        f->sp = initial_sp(t, f);
    }
    unsigned nw = (n + WARP - 1) / WARP;
    make_order(S->order, nw);
    make_order(S->lane_order, WARP);
    S->live = n;
    while (S->live) {
        for (unsigned k = 0; k < nw; k++) {
            unsigned w0 = S->order[k] * WARP, lanes = n - w0 < WARP ? n - w0 : WARP;
            int r;
            do {
                /* a pass: the first runnable lane, which hands on to the
                 * next (leave); the last returns here */
                S->pass_w0 = w0;
                S->pass_lanes = lanes;
                S->pass_j = 0;
                fiber *f = next_lane();
                if (f) {
                    switch_to(&S->main_sp, f);
                    S->cur = NULL;
                    if (S->failed) return -1;
                }
            } while ((r = release_warp(w0, lanes)) == 1);
            if (r < 0) return -1;
        }
        if (S->live && release_block(n) < 0) return -1;
    }
    return 0;
}

/* The launch site's slot (by the address of its kernel-name literal), or
 * NULL when the table is full (then: fibers). */
static int *site_mode(const char *kernel) {
    size_t h = ((uintptr_t)kernel >> 3) * 0x9e3779b97f4a7c15ull >> 55;
    for (size_t i = 0; i < SITES; i++) {
        size_t j = (h + i) % SITES;
        if (S->sites[j].site == kernel) return &S->sites[j].mode;
        if (!S->sites[j].site) {
            S->sites[j].site = kernel;
            S->sites[j].mode = SITE_UNKNOWN;
            return &S->sites[j].mode;
        }
    }
    return NULL;
}

static int fibers_always(void) {
    static int always = -1;
    if (always < 0) {
        const char *e = getenv("PLAIT_CUDA_EMU_FIBERS");
        always = e && *e == '1';
    }
    return always;
}

static int run_launch(const char *kernel, const unsigned grid[3], const unsigned block[3], size_t shared,
                      void (*body)(void *), void *ctx) {
    if (!state()) {
        fprintf(stderr, "cuda_emu: no memory for the fiber stacks\n");
        return -1;
    }
    S->kernel = kernel;
    S->failed = 0;
    memset(S->here, 0, sizeof S->here);
    if (grid[1] != 1 || grid[2] != 1 || block[1] != 1 || block[2] != 1 || !grid[0] || !block[0] ||
        block[0] > MAX_THREADS || grid[0] > 0x7fffffffu) {
        fail(0, "launch shape %ux%ux%u blocks of %ux%ux%u threads (the emulator runs 1-D shapes of 1..%d threads, "
                "as CUDA allows for x)",
             grid[0], grid[1], grid[2], block[0], block[1], block[2], MAX_THREADS);
        S->kernel = NULL;
        return -1;
    }
    if (shared > PC_EMU_SHARED_OPTIN) {
        fail(0, "%zu bytes of dynamic shared memory a block (at most %u)", shared, PC_EMU_SHARED_OPTIN);
        S->kernel = NULL;
        return -1;
    }
    S->dynamic_bytes = shared;
    S->body = body;
    S->ctx = ctx;
    S->rng = 0x9e3779b97f4a7c15ull ^ (++g_launches * 0xbf58476d1ce4e5b9ull);
    for (int i = 0; i < 3; i++) {
        S->here[2][i] = block[i];
        S->here[3][i] = grid[i];
        S->here[1][i] = 0;
    }
    /* blocks in a strided order (a stride coprime to the count): no kernel
     * may depend on the order blocks run in */
    unsigned nb = grid[0], stride = 1;
    if (order_mode() == 2 && nb > 2)
        for (stride = (unsigned)(next_random() % nb) | 1u; stride > 1; stride--) {
            unsigned a = stride, b = nb;
            while (b) {
                unsigned t = a % b;
                a = b;
                b = t;
            }
            if (a == 1) break;
        }
    int *mode = fibers_always() ? NULL : site_mode(kernel);
    S->direct = mode && *mode == SITE_DIRECT;
    S->waited = 0;
    /* volatile: read after a longjmp out of a direct launch */
    volatile int rc = 0;
    if (S->direct && setjmp(S->direct_exit)) {
        rc = -1;
        *mode = SITE_FIBERS;
    }
    for (unsigned i = 0; i < nb && rc == 0; i++) {
        unsigned b = order_mode() == 1 ? nb - 1 - i : (unsigned)(((uint64_t)i * stride) % nb);
        S->here[1][0] = b;
        rc = S->direct ? run_block_direct(block[0]) : run_block(block[0]);
    }
    if (mode && *mode == SITE_UNKNOWN && rc == 0) *mode = S->waited ? SITE_FIBERS : SITE_DIRECT;
    S->cur = NULL;
    S->direct = 0;
    S->body = NULL;
    S->kernel = NULL;
    return rc;
}

int pc_emu_run(const char *kernel, const unsigned grid[3], const unsigned block[3], size_t shared,
               void (*body)(void *), void *ctx) {
    if (S && S->body) {
        fprintf(stderr, "cuda_emu: kernel %s launched from inside kernel %s\n", kernel, S->kernel);
        abort();
    }
    pthread_mutex_lock(&g_launch_lock);
    int rc = run_launch(kernel, grid, block, shared, body, ctx);
    pthread_mutex_unlock(&g_launch_lock);
    return rc;
}
