#include <dlfcn.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <stdint.h>
typedef int (*sgemm_fn)(char, char, int64_t, int64_t, int64_t, float, const float *, int64_t, const float *, int64_t,
                        float, float *, int64_t);
static volatile sig_atomic_t hits;
static void on(int s) {
    (void)s;
    hits++;
}
int main(int argc, char **argv) {
    int iters = argc > 1 ? atoi(argv[1]) : 2000, usec = argc > 2 ? atoi(argv[2]) : 50;
    int flags = argc > 3 ? atoi(argv[3]) : SA_RESTART;
    void *lib = dlopen("libdnnl.so.2", RTLD_NOW | RTLD_LOCAL);
    sgemm_fn f = (sgemm_fn)dlsym(lib, "dnnl_sgemm");
    void (*omp)(int) = (void (*)(int))dlsym(lib, "omp_set_num_threads");
    omp(1);
    int64_t M = 1024, N = 128, K = 512;
    float *A = malloc(M * K * 4), *B = malloc(N * K * 4), *C = malloc(M * N * 4), *R = malloc(M * N * 4);
    for (int64_t i = 0; i < M * K; i++) A[i] = (float)((i * 7919) % 1000) / 1000.f - .5f;
    for (int64_t i = 0; i < N * K; i++) B[i] = (float)((i * 104729) % 1000) / 1000.f - .5f;
    f('N', 'T', M, N, K, 1.f, A, K, B, K, 0.f, R, N);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on;
    sa.sa_flags = flags;
    if (getenv("ALT")) {
        stack_t ss = {.ss_sp = malloc(1 << 16), .ss_size = 1 << 16};
        sigaltstack(&ss, NULL);
        sa.sa_flags |= SA_ONSTACK;
    }
    sigaction(SIGALRM, &sa, NULL);
    struct itimerval it = {{0, usec}, {0, usec}};
    setitimer(ITIMER_REAL, &it, NULL);
    int bad = 0;
    for (int i = 0; i < iters; i++) {
        void *p = malloc(1000 + i % 5000);
        f('N', 'T', M, N, K, 1.f, A, K, B, K, 0.f, C, N);
        if (memcmp(C, R, M * N * 4)) bad++;
        free(p);
    }
    printf("iters %d signals %d wrong %d\n", iters, (int)hits, bad);
    return 0;
}
