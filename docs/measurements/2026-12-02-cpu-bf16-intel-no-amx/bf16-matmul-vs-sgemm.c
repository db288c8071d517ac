/* One product on one thread: oneDNN's dnnl_sgemm (fp32) against its bf16
 * matmul primitive (bf16 source and weights, fp32 destination, the weights
 * row-major and transposed), the implementation oneDNN picked printed.
 * Build: gcc -O2 bf16-matmul-vs-sgemm.c -o mm -ldnnl (Debian's libdnnl-dev
 * 2.6); run: OMP_NUM_THREADS=1 ./mm M N K REPEATS. */
#include <dnnl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

#define CK(x)                                                                                                          \
    do {                                                                                                               \
        dnnl_status_t s_ = (x);                                                                                        \
        if (s_) {                                                                                                      \
            printf("oneDNN status %d at line %d\n", (int)s_, __LINE__);                                                \
            exit(1);                                                                                                   \
        }                                                                                                              \
    } while (0)

static uint16_t *to_bf16(const float *x, long n) {
    uint16_t *y = malloc((size_t)n * sizeof *y);
    for (long i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &x[i], sizeof u);
        y[i] = (uint16_t)(u >> 16);
    }
    return y;
}

int main(int argc, char **argv) {
    if (argc < 5) return 2;
    const int M = atoi(argv[1]), N = atoi(argv[2]), K = atoi(argv[3]), reps = atoi(argv[4]);
    const double flop = 2.0 * M * N * K * reps;
    float *A = malloc(sizeof(float) * (size_t)M * K), *B = malloc(sizeof(float) * (size_t)K * N);
    float *C = malloc(sizeof(float) * (size_t)M * N);
    for (long i = 0; i < (long)M * K; i++) A[i] = (float)(rand() % 100) / 100.f;
    for (long i = 0; i < (long)K * N; i++) B[i] = (float)(rand() % 100) / 100.f;
    for (int r = 0; r < 3; r++) dnnl_sgemm('N', 'N', M, N, K, 1.f, A, K, B, N, 0.f, C, N);
    double t = now();
    for (int r = 0; r < reps; r++) dnnl_sgemm('N', 'N', M, N, K, 1.f, A, K, B, N, 0.f, C, N);
    printf("dnnl_sgemm NN %dx%dx%d: %.1f GFLOP/s\n", M, N, K, flop / (now() - t) / 1e9);
    t = now();
    for (int r = 0; r < reps; r++) dnnl_sgemm('N', 'T', M, N, K, 1.f, A, K, B, K, 0.f, C, N);
    printf("dnnl_sgemm NT: %.1f GFLOP/s\n", flop / (now() - t) / 1e9);

    dnnl_engine_t eng;
    dnnl_stream_t st;
    CK(dnnl_engine_create(&eng, dnnl_cpu, 0));
    CK(dnnl_stream_create(&st, eng, dnnl_stream_default_flags));
    uint16_t *Ab = to_bf16(A, (long)M * K), *Bb = to_bf16(B, (long)K * N);
    for (int transposed = 0; transposed < 2; transposed++) {
        dnnl_memory_desc_t a, b, c;
        dnnl_dims_t da = {M, K}, db = {K, N}, dc = {M, N};
        CK(dnnl_memory_desc_init_by_tag(&a, 2, da, dnnl_bf16, dnnl_ab));
        CK(dnnl_memory_desc_init_by_tag(&b, 2, db, dnnl_bf16, transposed ? dnnl_ba : dnnl_ab));
        CK(dnnl_memory_desc_init_by_tag(&c, 2, dc, dnnl_f32, dnnl_ab));
        dnnl_matmul_desc_t md;
        CK(dnnl_matmul_desc_init(&md, &a, &b, NULL, &c));
        dnnl_primitive_desc_t pd;
        CK(dnnl_primitive_desc_create(&pd, &md, NULL, eng, NULL));
        const char *impl = "?";
        dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl);
        dnnl_primitive_t p;
        CK(dnnl_primitive_create(&p, pd));
        dnnl_memory_t ma, mb, mc;
        CK(dnnl_memory_create(&ma, &a, eng, Ab));
        CK(dnnl_memory_create(&mb, &b, eng, Bb));
        CK(dnnl_memory_create(&mc, &c, eng, C));
        dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}};
        for (int r = 0; r < 3; r++) CK(dnnl_primitive_execute(p, st, 3, args));
        CK(dnnl_stream_wait(st));
        t = now();
        for (int r = 0; r < reps; r++) CK(dnnl_primitive_execute(p, st, 3, args));
        CK(dnnl_stream_wait(st));
        printf("bf16 matmul %s, weights %s: %.1f GFLOP/s\n", impl, transposed ? "ba" : "ab", flop / (now() - t) / 1e9);
    }
    return 0;
}
