/*
 * Helpers of the cuda device tests: is a library mapped into this process,
 * and a "quiet" window that captures stdout/stderr and counts the threads
 * and descriptors a call leaves behind.
 */
#ifndef PLAIT_TEST_CUDA_UTIL_H
#define PLAIT_TEST_CUDA_UTIL_H

/* 1 if a mapping of this process names a file containing `needle`. */
int cuda_test_mapped(const char *needle);

typedef struct cuda_test_quiet {
    int cap, out, err, threads, fds;
} cuda_test_quiet;

void cuda_test_quiet_begin(cuda_test_quiet *q);
/* Bytes written while quiet, and the change in threads and descriptors. */
void cuda_test_quiet_end(cuda_test_quiet *q, long *printed, int *threads, int *fds);

#endif
