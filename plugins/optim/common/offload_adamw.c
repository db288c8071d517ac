/*
 * The host's AdamW for offloaded optimizer state (offload.h): the cpu
 * device's `adamw` (core/kernels/kernels_vector.c) value for value, both
 * running plait_adamw_elem (plait/kernels.h), which the cuda device's
 * per-element intrinsics also follow, so an update on the host leaves the
 * bits an update on the device would.
 *
 * Exactness rests on three things: the same expression in the same order
 * (plait_adamw_elem: each product and sum rounded to float, the bias
 * corrections in double), no contraction of a product and a sum into an FMA (this file
 * is compiled with -ffp-contract=off, see common/offload.cmake), and element-wise
 * independence, so the compiler's vectorisation of the loop and the split
 * over threads change no value. No ISA is assumed at build time: the loop
 * is vectorised for the baseline the build targets.
 */
#include "offload.h"

#include <pthread.h>

typedef struct adamw_job {
    float *param, *m, *v;
    const float *grad;
    size_t lo, hi;
    const plait_adamw_args *args;
} adamw_job;

static void adamw_range(const adamw_job *j) {
    const plait_adamw_consts c = plait_adamw_consts_of(j->args);
    float *restrict param = j->param, *restrict m = j->m, *restrict v = j->v;
    const float *restrict grad = j->grad;
    for (size_t i = j->lo; i < j->hi; i++) plait_adamw_elem(&param[i], grad[i], &m[i], &v[i], &c);
}

static void *adamw_thread(void *arg) {
    adamw_range(arg);
    return NULL;
}

#define MAX_THREADS 64
#define MIN_PER_THREAD 65536 /* below this a thread costs more than it saves */

void optim_host_adamw(float *param, const float *grad, float *m, float *v, size_t n, const plait_adamw_args *args,
                      int threads) {
    if (threads > MAX_THREADS) threads = MAX_THREADS;
    if (threads < 1 || n < 2 * (size_t)MIN_PER_THREAD) threads = 1;
    if ((size_t)threads > n / MIN_PER_THREAD && n / MIN_PER_THREAD >= 1) threads = (int)(n / MIN_PER_THREAD);
    adamw_job jobs[MAX_THREADS];
    pthread_t tid[MAX_THREADS];
    int started[MAX_THREADS] = {0};
    size_t per = (n + (size_t)threads - 1) / (size_t)threads;
    for (int t = 0; t < threads; t++) {
        size_t lo = (size_t)t * per, hi = lo + per < n ? lo + per : n;
        jobs[t] =
            (adamw_job){.param = param, .m = m, .v = v, .grad = grad, .lo = lo < n ? lo : n, .hi = hi, .args = args};
        /* thread 0 is the caller; a thread that cannot start runs here */
        if (t > 0 && pthread_create(&tid[t], NULL, adamw_thread, &jobs[t]) == 0) started[t] = 1;
    }
    adamw_range(&jobs[0]);
    for (int t = 1; t < threads; t++) {
        if (started[t]) pthread_join(tid[t], NULL);
        else adamw_range(&jobs[t]);
    }
}
