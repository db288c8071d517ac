/*
 * The CUDA emulator against kernels whose right answer or whose fault is
 * known: a block reduction comes out right; the same reduction without
 * its barrier comes out wrong under the emulator's thread orders (so the
 * orders do expose a missing barrier); a barrier in divergent code, a
 * shuffle after lanes exited, a host pointer handed to a kernel, a
 * launch of too many threads, one over the kernel's __launch_bounds__ or of
 * over 256 threads without one, a warp collective whose lanes disagree on
 * its mask, a 64-bit atomic on shared memory, a barrier a launch site reaches only after
 * its first launch (which ran without fibers) are each refused with the runtime's error
 * sticky afterwards, as CUDA's launch failures are. Compiled by the host
 * C++ compiler with emu_kernel.h force-included, like the plugin's
 * kernels; each fault runs in a child process (a failure is sticky for
 * the rest of a process). Streams are late: work runs when the host
 * waits, in stream order, across streams through events, and copies treat
 * pageable and page-locked host memory as CUDA does; a page-locked source
 * the host rewrites before its queued copy ran is caught. The stand-ins
 * of the tensor-core instructions (mma, ldmatrix) give what PTX's
 * fragment layouts say, and a misaligned ldmatrix row is refused.
 * Asynchronous copies (cp.async) land when their thread waits for them:
 * read after the wait and a barrier they are right; read before the wait,
 * without the barrier, or refilled before every thread read them, wrong;
 * a misaligned one, two to the same bytes and a source changed while its
 * copy is pending are refused; a thread may exit with one pending.
 * Dynamic shared memory over 48 KiB runs once cudaFuncSetAttribute allowed
 * it and is refused before, as is a kernel using it launched with none.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#define PC_LAUNCH(kernel, blocks, threads) pc_emu_launcher(#kernel, kernel, (blocks), (threads))
#define THREADS 256

/* the plugin's tensor-core and asynchronous-copy wrappers, as its kernels see them here */
#define PLAIT_CUDA_EMU
#include "async_copy.cuh"
#include "mma.cuh"

/* mma.sync m16n8k16 (bf16, fp32 accumulators) on fragments built from
 * PTX's formulas, written out here per lane: out = A·B + C, 16x8 */
__global__ static void mma_from_formulas(float *out, const float *A, const float *Bm, const float *Cm) {
    const int lane = threadIdx.x, g = lane / 4, t = lane % 4;
    uint32_t a[4], b[2];
    float d[4];
    for (int r = 0; r < 4; r++) {
        float v[2];
        for (int h = 0; h < 2; h++) {
            int i = 2 * r + h;
            v[h] = A[(g + 8 * ((i / 2) % 2)) * 16 + 2 * t + i % 2 + 8 * (i / 4)];
        }
        a[r] = pc_pack_bf16(v[0], v[1]);
    }
    for (int r = 0; r < 2; r++)
        b[r] = pc_pack_bf16(Bm[(2 * t + 8 * r) * 8 + g], Bm[(2 * t + 1 + 8 * r) * 8 + g]);
    for (int i = 0; i < 4; i++) d[i] = Cm[(g + 8 * (i / 2)) * 8 + 2 * t + i % 2];
    pc_mma_bf16(d, a, b);
    for (int i = 0; i < 4; i++) out[(g + 8 * (i / 2)) * 8 + 2 * t + i % 2] = d[i];
}

/* ldmatrix .x4 (trans) of a 16x16 bf16 matrix held in shared memory, the
 * four 8x8 blocks at (0,0), (8,0), (0,8), (8,8); each lane writes its
 * four pairs. `skew` bytes misalign every row address (a fault). */
__global__ static void ldmatrix_blocks(float *out, const float *M, int trans, int skew) {
    __shared__ __align__(16) uint32_t s[16 * 8];
    const int lane = threadIdx.x;
    for (int i = lane; i < 16 * 8; i += 32) s[i] = pc_pack_bf16(M[2 * i], M[2 * i + 1]);
    __syncthreads();
    const int row = lane % 8 + ((lane / 8) & 1) * 8, col = (lane / 16) * 8;
    const char *addr = (const char *)s + 2 * (row * 16 + col) + skew;
    uint32_t r[4];
    if (trans) pc_ldmatrix_x4_trans(r, addr);
    else pc_ldmatrix_x4(r, addr);
    for (int j = 0; j < 4; j++) {
        out[lane * 8 + 2 * j] = __uint_as_float(r[j] << 16);
        out[lane * 8 + 2 * j + 1] = __uint_as_float(r[j] & 0xffff0000u);
    }
}

/* every thread adds its value into shared memory in a fixed tree */
__global__ static void tree_sum(float *out, const float *in, int barrier) {
    __shared__ float s[THREADS];
    unsigned t = threadIdx.x;
    s[t] = in[blockIdx.x * THREADS + t];
    if (barrier) __syncthreads();
    for (unsigned span = THREADS / 2; span > 0; span /= 2) {
        if (t < span) s[t] += s[t + span];
        if (barrier) __syncthreads();
    }
    if (t == 0) out[blockIdx.x] = s[0];
}

__global__ static void warp_sum(float *out, const float *in) {
    float v = in[blockIdx.x * blockDim.x + threadIdx.x];
    for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (threadIdx.x % 32 == 0) out[(blockIdx.x * blockDim.x + threadIdx.x) / 32] = v;
}

__global__ static void divergent_barrier(float *out) {
    if (threadIdx.x < 64) return;
    __syncthreads();
    out[threadIdx.x] = 1.0f;
}

__global__ static void shuffle_after_exit(float *out) {
    if (threadIdx.x % 32 >= 16) return;
    out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1.0f, 1);
}

/* lanes grouped by in[i] % 3: each lane's group sum (through
 * __match_any_sync and __reduce_add_sync on the group), the lanes whose
 * value is odd (__ballot_sync), the warp's largest value
 * (__reduce_max_sync) and whether any lane's value is 7 modulo 64
 * (__any_sync) */
__global__ static void group_sums(unsigned *sums, unsigned *odd, unsigned *most, unsigned *any7, const unsigned *in) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x, v = in[i];
    unsigned group = __match_any_sync(0xffffffffu, v % 3);
    sums[i] = __reduce_add_sync(group, v);
    odd[i] = __ballot_sync(0xffffffffu, v & 1);
    most[i] = __reduce_max_sync(0xffffffffu, v);
    any7[i] = (unsigned)__any_sync(0xffffffffu, v % 64 == 7);
}

/* lanes 0-15 name the whole warp in their mask, 16-31 only themselves */
__global__ static void masks_disagree(unsigned *out) {
    unsigned lane = threadIdx.x % 32;
    out[threadIdx.x] = __reduce_add_sync(lane < 16 ? 0xffffffffu : 0xffff0000u, 1u);
}

__global__ static void shared_atomic64(unsigned long long *out) {
    __shared__ unsigned long long s;
    if (threadIdx.x == 0) s = 0;
    __syncthreads();
    atomicAdd(&s, 1ull);
    __syncthreads();
    if (threadIdx.x == 0) atomicAdd(out, s); /* 64-bit on device memory: allowed */
}

__global__ static void write_one(float *out) { out[threadIdx.x] = 1.0f; }
__global__ static void write_value(float *out, float v) { out[threadIdx.x] = v; }

/* a barrier only when asked: after a launch without one, the emulator runs
 * this site without fibers, and must refuse the barrier loudly */
__global__ static void barrier_if(float *out, int wait) {
    if (wait) __syncthreads();
    out[threadIdx.x] = 2.0f;
}

/* ---- cp.async ---------------------------------------------------------------
 * Thread t of a block of ASYNC_THREADS copies 16 bytes (4 floats) of `in`
 * into shared memory with cp.async and writes out[t], from its
 * neighbour's copy, what it read. ASYNC_RIGHT waits, then a barrier, then
 * reads; the others leave out a step a GPU requires. */
#define ASYNC_THREADS 64
enum {
    ASYNC_RIGHT,        /* wait, barrier, read */
    ASYNC_EARLY,        /* reads its own copy before its wait */
    ASYNC_NO_BARRIER,   /* waits, then reads its neighbour's copy without a barrier */
    ASYNC_REFILL_EARLY, /* copies a second tile into the buffer before every thread has read the first */
};
__global__ static void async_rotate(float *out, const float *in, int mode) {
    __shared__ __align__(16) float s[4 * ASYNC_THREADS];
    const unsigned t = threadIdx.x, next = (t + 1) % ASYNC_THREADS;
    pc_cp_async16(s + 4 * t, in + 4 * t);
    pc_cp_async_commit();
    if (mode == ASYNC_EARLY) out[t] = s[4 * t];
    pc_cp_async_wait<0>();
    if (mode != ASYNC_NO_BARRIER) __syncthreads();
    if (mode == ASYNC_REFILL_EARLY) {
        pc_cp_async16(s + 4 * t, in + 4 * (ASYNC_THREADS + t)); /* the bug: no barrier before the refill */
        pc_cp_async_commit();
    }
    if (mode != ASYNC_EARLY) out[t] = s[4 * next];
    pc_cp_async_wait<0>();
}

/* Two groups a thread: after wait_group 1 the older group's copy is there
 * (out[2t]) and the newer one's not yet (out[2t+1], undefined on a GPU:
 * NaN here); after wait_group 0 both (out[64 + t]). */
__global__ static void async_groups(float *out, const float *in) {
    __shared__ __align__(16) float s[8 * 32];
    const unsigned t = threadIdx.x;
    pc_cp_async16(s + 8 * t, in + 8 * t);
    pc_cp_async_commit();
    pc_cp_async16(s + 8 * t + 4, in + 8 * t + 4);
    pc_cp_async_commit();
    pc_cp_async_wait<1>();
    out[2 * t] = s[8 * t];
    out[2 * t + 1] = s[8 * t + 4];
    pc_cp_async_wait<0>();
    out[64 + t] = s[8 * t + 4];
}

/* What a GPU refuses or leaves undefined: `what` 0, a 16-byte copy 8 bytes
 * off alignment; 1, two pending copies to the same bytes; 2, a source
 * rewritten while its copy is pending; 3, a thread that exits with a copy
 * pending (legal: the launch runs). */
__global__ static void async_misuse(float *in, int what) {
    __shared__ __align__(16) float s[8 * 32];
    const unsigned t = threadIdx.x;
    pc_cp_async16(s + 8 * t + (what == 0 ? 2 : 0), in + 8 * t);
    if (what == 1) pc_cp_async16(s + 8 * t, in + 8 * t + 4);
    pc_cp_async_commit();
    if (what == 2) in[8 * t] = 1.0f;
    if (what != 3) pc_cp_async_wait<0>();
}

/* Dynamic shared memory (extern __shared__, kcommon.cuh's
 * PC_SHARED_DYNAMIC): n floats of `in` reversed through it; out[n] is
 * what the block found at float n, which nothing wrote. */
__global__ static void dynamic_reverse(float *out, const float *in, int n) {
    float *s = (float *)pc_emu_dynamic_shared();
    for (int i = threadIdx.x; i < n; i += blockDim.x) s[i] = in[i];
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += blockDim.x) out[i] = s[n - 1 - i];
    if (threadIdx.x == 0) out[n] = s[n];
}

static int failures;

static void check(int ok, const char *what) {
    printf("%s %s\n", ok ? "ok  " : "FAIL", what);
    if (!ok) failures++;
}

static float *device_floats(size_t n) {
    void *p = NULL;
    if (cudaMalloc(&p, n * sizeof(float)) != cudaSuccess) {
        fprintf(stderr, "FATAL: cudaMalloc\n");
        exit(1);
    }
    return (float *)p;
}

/* Run `fn` in a child; 1 if the launch failed, the failure was sticky
 * afterwards and the child said so. */
static int refused(void (*fn)(void)) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        fn();
        /* a launch fails when it runs: CUDA reports it at the next synchronisation */
        cudaError_t first = cudaDeviceSynchronize();
        void *p = NULL;
        cudaError_t later = cudaMalloc(&p, 16);
        _exit(first == cudaErrorLaunchFailure && later == cudaErrorLaunchFailure ? 3 : 4);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) && WEXITSTATUS(st) == 3;
}

static void launch_masks_disagree(void) {
    unsigned *out;
    cudaMalloc((void **)&out, 32 * sizeof *out);
    PC_LAUNCH(masks_disagree, 1, 32)(out);
    cudaDeviceSynchronize();
}
static void launch_shared_atomic64(void) {
    unsigned long long *out;
    cudaMalloc((void **)&out, sizeof *out);
    cudaMemsetAsync(out, 0, sizeof *out, NULL);
    PC_LAUNCH(shared_atomic64, 1, 64)(out);
    cudaDeviceSynchronize();
}

/* group sums and ballots against the host's */
static int check_warp_collectives(void) {
    enum { N = 128 };
    unsigned in[N], sums[N], odd[N], most[N], any7[N], *din, *dsums, *dodd, *dmost, *dany7;
    cudaMalloc((void **)&din, sizeof in), cudaMalloc((void **)&dsums, sizeof sums), cudaMalloc((void **)&dodd, sizeof odd);
    cudaMalloc((void **)&dmost, sizeof most), cudaMalloc((void **)&dany7, sizeof any7);
    for (unsigned i = 0; i < N; i++) in[i] = (i * 2654435761u) >> 20;
    in[70] = 64 * 9 + 7; /* one lane of the third warp only: __any_sync differs between warps */
    cudaMemcpy(din, in, sizeof in, cudaMemcpyHostToDevice);
    PC_LAUNCH(group_sums, 2, 64)(dsums, dodd, dmost, dany7, din);
    cudaMemcpy(sums, dsums, sizeof sums, cudaMemcpyDeviceToHost);
    cudaMemcpy(odd, dodd, sizeof odd, cudaMemcpyDeviceToHost);
    cudaMemcpy(most, dmost, sizeof most, cudaMemcpyDeviceToHost);
    cudaMemcpy(any7, dany7, sizeof any7, cudaMemcpyDeviceToHost);
    int same = cudaGetLastError() == cudaSuccess, anys = 0;
    for (unsigned i = 0; i < N; i++) {
        unsigned w0 = i / 32 * 32, want = 0, ballot = 0, top = 0, seven = 0;
        for (unsigned l = 0; l < 32; l++) {
            want += in[w0 + l] % 3 == in[i] % 3 ? in[w0 + l] : 0;
            ballot |= (in[w0 + l] & 1) << l;
            top = in[w0 + l] > top ? in[w0 + l] : top;
            seven |= in[w0 + l] % 64 == 7;
        }
        same &= sums[i] == want && odd[i] == ballot && most[i] == top && any7[i] == seven;
        anys += seven;
    }
    return same && anys > 0 && anys < N;
}

static int all_equal(const float *x, int n, float v) {
    int same = 1;
    for (int i = 0; i < n; i++) same &= x[i] == v;
    return same;
}

static void launch_divergent(void) { PC_LAUNCH(divergent_barrier, 1, THREADS)(device_floats(THREADS)); }
static void launch_shuffle_after_exit(void) { PC_LAUNCH(shuffle_after_exit, 1, 64)(device_floats(64)); }
static void launch_host_pointer(void) {
    static float host[THREADS];
    PC_LAUNCH(write_one, 1, THREADS)(host);
}
static void launch_late_barrier(void) {
    float *out = device_floats(THREADS);
    for (int wait = 0; wait < 2; wait++) PC_LAUNCH(barrier_if, 1, THREADS)(out, wait);
}
/* a float4 read at `off` floats past p (a 16-byte access wherever off % 4 == 0) */
__global__ static void read_float4(float *out, const float *p, int off) {
    const float4 q = *(const float4 *)(p + off + 4 * threadIdx.x);
    out[threadIdx.x] = q.x + q.y + q.z + q.w;
}
static int vector_read_at(int off) {
    float *p = device_floats(160), *o = device_floats(32), zeros[160] = {0};
    cudaMemcpy(p, zeros, sizeof zeros, cudaMemcpyHostToDevice);
    PC_LAUNCH(read_float4, 1, 32)(o, p, off);
    return cudaDeviceSynchronize() == cudaSuccess;
}
static void launch_misaligned_float4(void) { (void)vector_read_at(2); }
static void launch_too_many(void) { PC_LAUNCH(write_one, 1, 2048)(device_floats(2048)); }
static void launch_misaligned_ldmatrix(void) {
    float *m = device_floats(256), *o = device_floats(256), zeros[256] = {0};
    cudaMemcpy(m, zeros, sizeof zeros, cudaMemcpyHostToDevice);
    PC_LAUNCH(ldmatrix_blocks, 1, 32)(o, m, 0, 4);
}

/* The tensor-core stand-ins (mma.cuh under PLAIT_CUDA_EMU) give what
 * PTX's fragment formulas say, restated lane by lane in the kernels
 * above: small integers, so every product and sum is exact. */
static void check_tensor_cores(void) {
    float A[256], Bm[128], Cm[128], got[256], want[128];
    for (int i = 0; i < 256; i++) A[i] = (float)((i * 37) % 17 - 8);
    for (int i = 0; i < 128; i++) Bm[i] = (float)((i * 11) % 13 - 6), Cm[i] = (float)(i % 5);
    float *dA = device_floats(256), *dB = device_floats(128), *dC = device_floats(128), *dO = device_floats(256);
    cudaMemcpy(dA, A, sizeof A, cudaMemcpyHostToDevice);
    cudaMemcpy(dB, Bm, sizeof Bm, cudaMemcpyHostToDevice);
    cudaMemcpy(dC, Cm, sizeof Cm, cudaMemcpyHostToDevice);
    PC_LAUNCH(mma_from_formulas, 1, 32)(dO, dA, dB, dC);
    cudaMemcpy(got, dO, 128 * sizeof(float), cudaMemcpyDeviceToHost);
    int same = cudaGetLastError() == cudaSuccess;
    for (int m = 0; m < 16; m++)
        for (int n = 0; n < 8; n++) {
            want[m * 8 + n] = Cm[m * 8 + n];
            for (int k = 0; k < 16; k++) want[m * 8 + n] += A[m * 16 + k] * Bm[k * 8 + n];
            same &= got[m * 8 + n] == want[m * 8 + n];
        }
    check(same, "mma m16n8k16 on fragments laid out as PTX documents gives A.B + C");

    for (int i = 0; i < 256; i++) A[i] = (float)i; /* M[r][c] = 16r + c, exact in bf16 */
    cudaMemcpy(dA, A, sizeof A, cudaMemcpyHostToDevice);
    for (int trans = 0; trans < 2; trans++) {
        PC_LAUNCH(ldmatrix_blocks, 1, 32)(dO, dA, trans, 0);
        cudaMemcpy(got, dO, sizeof got, cudaMemcpyDeviceToHost);
        same = cudaGetLastError() == cudaSuccess;
        for (int l = 0; l < 32; l++)
            for (int j = 0; j < 4; j++) {
                const int r0 = (j & 1) * 8, c0 = (j >> 1) * 8;
                for (int h = 0; h < 2; h++) {
                    int r = trans ? r0 + 2 * (l % 4) + h : r0 + l / 4, c = trans ? c0 + l / 4 : c0 + 2 * (l % 4) + h;
                    same &= got[l * 8 + 2 * j + h] == A[r * 16 + c];
                }
            }
        check(same, trans ? "ldmatrix.x4.trans gives each lane the pairs PTX documents"
                          : "ldmatrix.x4 gives each lane the pairs PTX documents");
    }
}

/* out[t] of async_rotate as each mode ran it: how many of the block's
 * threads read the value they should have (values of each mode's own, so
 * what an earlier launch left in shared memory is never right) */
static int async_rotate_right(int mode) {
    float host[8 * ASYNC_THREADS], got[ASYNC_THREADS];
    for (int i = 0; i < 8 * ASYNC_THREADS; i++) host[i] = (float)(1000 * mode + i + 1);
    float *in = device_floats(8 * ASYNC_THREADS), *out = device_floats(ASYNC_THREADS);
    cudaMemcpy(in, host, sizeof host, cudaMemcpyHostToDevice);
    PC_LAUNCH(async_rotate, 1, ASYNC_THREADS)(out, in, mode);
    cudaMemcpy(got, out, sizeof got, cudaMemcpyDeviceToHost);
    if (cudaGetLastError() != cudaSuccess) return -1;
    int right = 0;
    for (int t = 0; t < ASYNC_THREADS; t++) {
        const int from = mode == ASYNC_EARLY ? t : (t + 1) % ASYNC_THREADS;
        right += got[t] == host[4 * from];
    }
    cudaFree(in);
    cudaFree(out);
    return right;
}

static void check_async_copies(void) {
    const int right = async_rotate_right(ASYNC_RIGHT);
    check(right == ASYNC_THREADS, "cp.async then wait_group 0 and a barrier: every thread reads its neighbour's copy");
    for (int mode = ASYNC_EARLY; mode <= ASYNC_REFILL_EARLY; mode++) {
        const int r = async_rotate_right(mode);
        static const char *const what[] = {
            "", "a read of its own copy before its wait comes out wrong in every thread",
            "a read of another thread's copy without the barrier after its wait comes out wrong",
            "a copy into a buffer before every thread read the last comes out wrong"};
        printf("     %d of %d threads read the right value\n", r, ASYNC_THREADS);
        check(mode == ASYNC_EARLY ? r == 0 : r >= 0 && r < ASYNC_THREADS, what[mode]);
    }
    float host[8 * 32], got[96];
    for (int i = 0; i < 8 * 32; i++) host[i] = (float)i;
    float *in = device_floats(8 * 32), *out = device_floats(96);
    cudaMemcpy(in, host, sizeof host, cudaMemcpyHostToDevice);
    PC_LAUNCH(async_groups, 1, 32)(out, in);
    cudaMemcpy(got, out, sizeof got, cudaMemcpyDeviceToHost);
    int same = cudaGetLastError() == cudaSuccess;
    for (int t = 0; t < 32; t++) same &= got[2 * t] == host[8 * t] && isnan(got[2 * t + 1]) && got[64 + t] == host[8 * t + 4];
    check(same, "wait_group 1 completes all but the newest group, wait_group 0 the rest");
    PC_LAUNCH(async_misuse, 1, 32)(in, 3);
    check(cudaDeviceSynchronize() == cudaSuccess, "a thread may exit with a cp.async pending (PTX does not forbid it)");
    cudaFree(in);
    cudaFree(out);
}
static void launch_async_misuse(int what) {
    float *in = device_floats(8 * 32), zeros[8 * 32] = {0};
    cudaMemcpy(in, zeros, sizeof zeros, cudaMemcpyHostToDevice);
    PC_LAUNCH(async_misuse, 1, 32)(in, what);
}
static void launch_async_misaligned(void) { launch_async_misuse(0); }
static void launch_async_same_bytes(void) { launch_async_misuse(1); }
static void launch_async_source_changed(void) { launch_async_misuse(2); }

/* 64 KiB of dynamic shared memory a block: over the 48 KiB a block gets
 * without cudaFuncSetAttribute. */
#define DYNAMIC_BYTES (64u << 10)
static int dynamic_reverse_right(size_t shared) {
    const int n = (int)(DYNAMIC_BYTES / sizeof(float)) - 1;
    float *in = device_floats((size_t)n), *out = device_floats((size_t)n + 1), *host = (float *)malloc(2 * (n + 1) * sizeof(float));
    for (int i = 0; i < n; i++) host[i] = (float)i;
    cudaMemcpy(in, host, (size_t)n * sizeof(float), cudaMemcpyHostToDevice);
    pc_emu_launcher("dynamic_reverse", dynamic_reverse, 2, THREADS, NULL, THREADS, shared)(out, in, n);
    float *got = host + n + 1;
    cudaMemcpy(got, out, (size_t)(n + 1) * sizeof(float), cudaMemcpyDeviceToHost);
    int right = cudaGetLastError() == cudaSuccess && isnan(got[n]);
    for (int i = 0; i < n; i++) right &= got[i] == (float)(n - 1 - i);
    free(host);
    return right;
}
static void launch_dynamic_unallowed(void) { (void)dynamic_reverse_right(DYNAMIC_BYTES); }
static void launch_dynamic_none(void) { (void)dynamic_reverse_right(0); }

static void check_dynamic_shared(void) {
    check(refused(launch_dynamic_unallowed), "64 KiB of dynamic shared memory without cudaFuncSetAttribute is refused");
    check(refused(launch_dynamic_none), "a kernel using dynamic shared memory launched with none is refused");
    check(cudaFuncSetAttribute((const void *)dynamic_reverse, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               (int)(228u << 10)) == cudaErrorInvalidValue,
          "cudaFuncSetAttribute refuses more dynamic shared memory than a block may opt in to (227 KiB)");
    (void)cudaGetLastError();
    check(cudaFuncSetAttribute((const void *)dynamic_reverse, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               (int)DYNAMIC_BYTES) == cudaSuccess &&
              dynamic_reverse_right(DYNAMIC_BYTES),
          "64 KiB of dynamic shared memory once allowed: right, and NaN where the block wrote nothing");
}

/* kernels declared as PC_KERNEL(write_one, 512) would be: their bound goes to the launch */
static void launch_unbounded_512(void) { PC_LAUNCH(write_one, 1, 512)(device_floats(512)); }
static void launch_over_bound(void) { pc_emu_launcher("write_one", write_one, 1, 1024, NULL, 512)(device_floats(1024)); }
static int launch_within_bound(void) {
    float *out = device_floats(512), host[512];
    pc_emu_launcher("write_one", write_one, 1, 512, NULL, 512)(out);
    cudaMemcpy(host, out, sizeof host, cudaMemcpyDeviceToHost);
    return cudaGetLastError() == cudaSuccess && all_equal(host, 512, 1.0f);
}

/* the host refills a page-locked buffer that a queued copy still reads */
static void pinned_source_reused(void) {
    float *pinned = NULL, *dev = device_floats(THREADS);
    cudaStream_t s;
    if (cudaHostAlloc((void **)&pinned, THREADS * sizeof(float), 0) != cudaSuccess ||
        cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess)
        _exit(5);
    for (int i = 0; i < THREADS; i++) pinned[i] = 1.0f;
    cudaMemcpyAsync(dev, pinned, THREADS * sizeof(float), cudaMemcpyHostToDevice, s);
    for (int i = 0; i < THREADS; i++) pinned[i] = 2.0f; /* the bug: no wait before reuse */
    cudaStreamSynchronize(s);
}


/* Streams are late and ordered: work runs when the host waits, in stream
 * order, and a wait on another stream's event runs that stream's work
 * first; copies from and to host memory follow CUDA's rules. */
static void check_streams(void) {
    cudaStream_t a, b;
    cudaEvent_t e;
    float *x = device_floats(THREADS), *y = device_floats(THREADS), *pinned = NULL, host[THREADS];
    if (cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking) != cudaSuccess ||
        cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking) != cudaSuccess ||
        cudaEventCreateWithFlags(&e, cudaEventDisableTiming) != cudaSuccess ||
        cudaHostAlloc((void **)&pinned, sizeof host, 0) != cudaSuccess) {
        check(0, "streams, an event and page-locked memory created");
        return;
    }
    pc_emu_launcher("write_value", write_value, 1, THREADS, a)(x, 1.0f);
    check(isnan(x[0]) && cudaEventQuery(e) == cudaSuccess, "a kernel has not run when its launch returns");
    cudaEventRecord(e, a);
    check(cudaEventQuery(e) == cudaErrorNotReady, "an event after queued work is not ready at first");
    check(x[0] == 1.0f && cudaEventQuery(e) == cudaSuccess, "a polled event completes (its work ran)");

    pc_emu_launcher("write_value", write_value, 1, THREADS, a)(x, 2.0f);
    cudaEventRecord(e, a);
    cudaStreamWaitEvent(b, e, 0);
    pc_emu_launcher("write_value", write_value, 1, THREADS, a)(x, 5.0f); /* after the record: not waited for */
    cudaMemcpyAsync(y, x, sizeof host, cudaMemcpyDeviceToDevice, b);
    cudaStreamSynchronize(b);
    cudaMemcpy(host, y, sizeof host, cudaMemcpyDeviceToHost);
    check(all_equal(host, THREADS, 2.0f) && x[0] == 2.0f,
          "a stream waiting on an event sees the other stream's work up to the record, not after it");
    cudaStreamSynchronize(a);

    for (int i = 0; i < THREADS; i++) host[i] = 3.0f;
    cudaMemcpyAsync(x, host, sizeof host, cudaMemcpyHostToDevice, a);
    for (int i = 0; i < THREADS; i++) host[i] = 4.0f;
    cudaMemcpyAsync(pinned, x, sizeof host, cudaMemcpyDeviceToHost, a);
    check(isnan(pinned[0]), "a copy to page-locked memory has not written it when cudaMemcpyAsync returns");
    cudaStreamSynchronize(a);
    check(all_equal(pinned, THREADS, 3.0f), "a copy from pageable memory takes the bytes at the call");
    cudaMemcpyAsync(host, x, sizeof host, cudaMemcpyDeviceToHost, a);
    check(all_equal(host, THREADS, 3.0f), "a copy to pageable memory is done when cudaMemcpyAsync returns");
    check(cudaGetLastError() == cudaSuccess, "no error along the way");
    cudaEventDestroy(e);
    cudaStreamDestroy(a);
    cudaStreamDestroy(b);
    cudaFreeHost(pinned);
}

/* Timing events: the time between two records is when the stream reached
 * them (a sleep queued between them counts); not ready before the stream
 * got there; refused for events created without timing, as CUDA does. */
static void nap_10ms(void *ctx) {
    (void)ctx;
    usleep(10000);
}

static void check_event_timing(void) {
    cudaStream_t s;
    cudaEvent_t t0, t1, off;
    float ms = -1.0f;
    if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess || cudaEventCreate(&t0) != cudaSuccess ||
        cudaEventCreateWithFlags(&t1, cudaEventDefault) != cudaSuccess ||
        cudaEventCreateWithFlags(&off, cudaEventDisableTiming) != cudaSuccess) {
        check(0, "a stream and three events created");
        return;
    }
    cudaEventRecord(t0, s);
    pc_emu_enqueue(s, nap_10ms, NULL, NULL);
    cudaEventRecord(t1, s);
    check(cudaEventElapsedTime(&ms, t0, t1) == cudaErrorNotReady, "no elapsed time before the stream reached both");
    usleep(20000); /* the host's wait before the stream runs does not count */
    cudaStreamSynchronize(s);
    check(cudaEventElapsedTime(&ms, t0, t1) == cudaSuccess && ms >= 9.5f && ms < 500.0f,
          "the elapsed time is the stream's, the 10 ms it slept in between");
    cudaEventRecord(off, s);
    cudaStreamSynchronize(s);
    check(cudaEventElapsedTime(&ms, t0, off) == cudaErrorInvalidResourceHandle &&
              cudaEventElapsedTime(&ms, off, t1) == cudaErrorInvalidResourceHandle,
          "no elapsed time with an event created with cudaEventDisableTiming");
    cudaGetLastError();
    cudaEventDestroy(t0);
    cudaEventDestroy(t1);
    cudaEventDestroy(off);
    cudaStreamDestroy(s);
}

int main(void) {
    enum { BLOCKS = 37 };
    float *in = device_floats(BLOCKS * THREADS), *out = device_floats(BLOCKS * THREADS);
    float host[BLOCKS * THREADS], want[BLOCKS * THREADS];
    /* integers: every order of addition gives the same sum */
    for (int i = 0; i < BLOCKS * THREADS; i++) host[i] = (float)((i * 7919) % 1000);
    cudaMemcpy(in, host, sizeof host, cudaMemcpyHostToDevice);

    for (int b = 0; b < BLOCKS; b++) {
        want[b] = 0;
        for (int t = 0; t < THREADS; t++) want[b] += host[b * THREADS + t];
    }
    PC_LAUNCH(tree_sum, BLOCKS, THREADS)(out, in, 1);
    cudaMemcpy(host, out, BLOCKS * sizeof(float), cudaMemcpyDeviceToHost);
    int same = cudaGetLastError() == cudaSuccess;
    for (int b = 0; b < BLOCKS; b++) same &= host[b] == want[b];
    check(same, "a block tree sum with its barriers is exact in every block");

    PC_LAUNCH(tree_sum, BLOCKS, THREADS)(out, in, 0);
    cudaMemcpy(host, out, BLOCKS * sizeof(float), cudaMemcpyDeviceToHost);
    int wrong = 0;
    for (int b = 0; b < BLOCKS; b++) wrong += host[b] != want[b];
    printf("     without its barriers: %d of %d block sums wrong\n", wrong, BLOCKS);
    check(wrong > 0, "the same sum without its barriers comes out wrong (the thread orders expose it)");

    PC_LAUNCH(warp_sum, BLOCKS, THREADS)(out, in);
    cudaMemcpy(host, out, BLOCKS * THREADS / 32 * sizeof(float), cudaMemcpyDeviceToHost);
    float src[BLOCKS * THREADS];
    cudaMemcpy(src, in, sizeof src, cudaMemcpyDeviceToHost);
    same = 1;
    for (int w = 0; w < BLOCKS * THREADS / 32; w++) {
        float s = 0;
        for (int l = 0; l < 32; l++) s += src[w * 32 + l];
        same &= host[w] == s;
    }
    check(same, "warp butterfly sums are exact");

    check(check_warp_collectives(), "__match_any_sync groups, __reduce_add_sync over each group, __ballot_sync, "
                                    "__reduce_max_sync and __any_sync give the host's answers");
    check_streams();
    check_event_timing();
    check_tensor_cores();
    check(refused(launch_misaligned_ldmatrix), "an ldmatrix row address that is not 16-byte aligned is refused");
    check_async_copies();
    check_dynamic_shared();
    check(refused(launch_async_misaligned), "a 16-byte cp.async to an address 8 bytes off 16 is refused");
    check(refused(launch_async_same_bytes), "two pending cp.async of a thread to the same bytes are refused");
    check(refused(launch_async_source_changed), "a cp.async source written while the copy is pending is refused");
    check(vector_read_at(4), "a float4 read at a 16-byte aligned address runs");
    check(refused(launch_misaligned_float4), "a float4 read at an address 8 bytes off 16 fails the launch (a GPU's "
                                             "misaligned address)");
    check(refused(pinned_source_reused), "a page-locked source written by the host before its queued copy ran is "
                                         "a sticky failure");
    check(refused(launch_divergent), "a __syncthreads some threads exited before is a sticky launch failure");
    check(refused(launch_shuffle_after_exit), "a full-warp shuffle after half the lanes exited is refused");
    check(refused(launch_host_pointer), "a pageable host pointer given to a kernel is refused");
    check(refused(launch_too_many), "a block of 2048 threads is refused");
    check(refused(launch_unbounded_512), "a block of 512 threads of a kernel without __launch_bounds__ is refused");
    check(refused(launch_over_bound), "a block over the kernel's __launch_bounds__ is refused");
    check(launch_within_bound(), "a block of 512 threads of a kernel bounded at 512 runs");
    check(refused(launch_masks_disagree), "a warp collective whose lanes disagree on its mask is refused");
    check(refused(launch_shared_atomic64), "a 64-bit atomicAdd on shared memory is refused (a compare-and-swap loop "
                                           "on the GPU)");
    check(refused(launch_late_barrier), "a barrier first reached on a launch site's second launch is refused");

    void *p = NULL;
    check(cudaMemcpy(host, in, 16, cudaMemcpyHostToDevice) == cudaErrorInvalidValue,
          "a copy whose direction does not match where its pointers live is refused");
    (void)cudaGetLastError();
    check(cudaFree(host) == cudaErrorInvalidValue, "freeing a pointer the runtime did not hand out is refused");
    (void)cudaGetLastError();
    check(cudaMalloc(&p, (size_t)17 << 30) == cudaErrorMemoryAllocation, "more than the 16 GiB device is refused");
    (void)cudaGetLastError();
    check(cudaMalloc(&p, 64) == cudaSuccess && ((const unsigned char *)p)[5] == 0xff,
          "fresh device memory is poisoned (0xff bytes: NaN as floats)");
    printf("%s: %d failure%s\n", failures ? "FAILED" : "passed", failures, failures == 1 ? "" : "s");
    return failures ? 1 : 0;
}
