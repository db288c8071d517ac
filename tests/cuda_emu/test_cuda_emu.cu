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
 * the host rewrites before its queued copy ran is caught.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#define PC_LAUNCH(kernel, blocks, threads) pc_emu_launcher(#kernel, kernel, (blocks), (threads))
#define THREADS 256

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
 * __match_any_sync and __reduce_add_sync on the group), and the lanes whose
 * value is odd (__ballot_sync) */
__global__ static void group_sums(unsigned *sums, unsigned *odd, const unsigned *in) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x, v = in[i];
    unsigned group = __match_any_sync(0xffffffffu, v % 3);
    sums[i] = __reduce_add_sync(group, v);
    odd[i] = __ballot_sync(0xffffffffu, v & 1);
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
    unsigned in[N], sums[N], odd[N], *din, *dsums, *dodd;
    cudaMalloc((void **)&din, sizeof in), cudaMalloc((void **)&dsums, sizeof sums), cudaMalloc((void **)&dodd, sizeof odd);
    for (unsigned i = 0; i < N; i++) in[i] = (i * 2654435761u) >> 20;
    cudaMemcpy(din, in, sizeof in, cudaMemcpyHostToDevice);
    PC_LAUNCH(group_sums, 2, 64)(dsums, dodd, din);
    cudaMemcpy(sums, dsums, sizeof sums, cudaMemcpyDeviceToHost);
    cudaMemcpy(odd, dodd, sizeof odd, cudaMemcpyDeviceToHost);
    int same = cudaGetLastError() == cudaSuccess;
    for (unsigned i = 0; i < N; i++) {
        unsigned w0 = i / 32 * 32, want = 0, ballot = 0;
        for (unsigned l = 0; l < 32; l++) {
            want += in[w0 + l] % 3 == in[i] % 3 ? in[w0 + l] : 0;
            ballot |= (in[w0 + l] & 1) << l;
        }
        same &= sums[i] == want && odd[i] == ballot;
    }
    return same;
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
static void launch_too_many(void) { PC_LAUNCH(write_one, 1, 2048)(device_floats(2048)); }
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

    check(check_warp_collectives(), "__match_any_sync groups, __reduce_add_sync over each group and __ballot_sync "
                                    "give the host's answers");
    check_streams();
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
