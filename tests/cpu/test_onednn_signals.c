/*
 * oneDNN's products under signals: oneDNN 2.x's generated f32 GEMM kernels
 * point the stack pointer into a heap buffer while they run, so a signal
 * handled on that thread meanwhile wrote its frame into the heap (glibc
 * aborted some frees later: "corrupted size vs. prev_size"), as a run
 * stopped by [run] exit_signal did. plait holds the asynchronous signals
 * around each oneDNN call (kernels_onednn.c). Here a timer signals the
 * process every 50 us, with a handler, while plait_k_sgemm runs through
 * oneDNN on 1 and 2 threads beside the heap's use: every product gives the
 * bits it gave before the timer, the process lives, the handler ran (the
 * held signals arrive after each call) and the calling thread's mask is
 * its own again afterwards. Skips (77) where libdnnl.so.2 is absent.
 */
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "cpu_check.h"
#include "kernels/kernels.h"

static volatile sig_atomic_t g_hits;
static void on_alarm(int sig) {
    (void)sig;
    g_hits++;
}

static void timer(long usec) {
    struct itimerval it = {{0, usec}, {0, usec}};
    setitimer(ITIMER_REAL, &it, NULL);
}

/* rounds of the product on `threads` threads, each against ref; how many
 * differed */
static int rounds(int threads, int n, const float *A, const float *B, float *C, const float *ref, int64_t M, int64_t N,
                  int64_t K) {
    plait_kernels_set_threads(threads);
    int wrong = 0;
    for (int i = 0; i < n; i++) {
        void *churn = malloc(1000 + (size_t)(i % 64) * 512); /* the heap in use beside the products */
        memset(churn, i, 1000);
        plait_k_sgemm(0, 1, M, N, K, 1.0f, A, K, B, K, 0.0f, C, N);
        wrong += memcmp(C, ref, sizeof(float) * (size_t)(M * N)) != 0;
        free(churn);
    }
    return wrong;
}

int main(void) {
    char err[512];
    if (plait_kernels_set_gemm("onednn", err, sizeof err) != 0) {
        printf("SKIP: %s\n", err);
        return 77;
    }
    /* a gpt-tiny MLP product's shape (the run that aborted made it), twice
     * its rows so that two threads share it */
    const int64_t M = 2048, N = 128, K = 512;
    float *A = malloc(sizeof(float) * (size_t)(M * K)), *B = malloc(sizeof(float) * (size_t)(N * K));
    float *C = malloc(sizeof(float) * (size_t)(M * N)), *ref1 = malloc(sizeof(float) * (size_t)(M * N));
    float *ref2 = malloc(sizeof(float) * (size_t)(M * N));
    fill(A, M * K, 1);
    fill(B, N * K, 2);
    plait_kernels_set_threads(1);
    plait_k_sgemm(0, 1, M, N, K, 1.0f, A, K, B, K, 0.0f, ref1, N);
    plait_kernels_set_threads(2);
    plait_k_sgemm(0, 1, M, N, K, 1.0f, A, K, B, K, 0.0f, ref2, N);

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    CHECK(sigaction(SIGALRM, &sa, NULL) == 0, "sigaction");
    timer(50);
    int wrong1 = rounds(1, 200, A, B, C, ref1, M, N, K);
    int wrong2 = rounds(2, 200, A, B, C, ref2, M, N, K);
    timer(0);
    CHECK(wrong1 == 0, "%d of 200 products on 1 thread differed under signals", wrong1);
    CHECK(wrong2 == 0, "%d of 200 products on 2 threads differed under signals", wrong2);
    CHECK(g_hits > 0, "the timer's signal never reached its handler");
    sigset_t now;
    pthread_sigmask(SIG_SETMASK, NULL, &now);
    CHECK(!sigismember(&now, SIGALRM) && !sigismember(&now, SIGTERM), "the caller's signals stayed held");
    printf("400 products through oneDNN under %d signals: every one the same bits\n", (int)g_hits);
    free(A);
    free(B);
    free(C);
    free(ref1);
    free(ref2);
    return failures ? 1 : 0;
}
