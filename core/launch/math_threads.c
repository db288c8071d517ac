#include "launch/math_threads.h"

#include <sched.h>
#include <unistd.h>

int plait_cores_available(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
        int n = CPU_COUNT(&set);
        if (n > 0) return n;
    }
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

int plait_math_threads_rule(int given, int local_ranks) {
    if (given > 0) return given;
    int threads = plait_cores_available() / (local_ranks > 0 ? local_ranks : 1);
    return threads < 1 ? 1 : threads;
}
