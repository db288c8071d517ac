/* Names of collectives and algorithms, for messages, logs and [comm]
 * algorithm. Pure functions; the bottom of communication's call graph. */
#include <string.h>

#include "commstate/comm_state.h"

const char *plait_coll_kind_name(plait_coll_kind kind) {
    static const char *const names[] = {"allreduce", "reduce_scatter", "allgather",
                                        "broadcast", "reduce",         "gather",
                                        "scatter",   "alltoall",       "barrier"};
    return (unsigned)kind < PLAIT_COLL_KIND_COUNT ? names[kind] : "?";
}

static const char *const algo_names[] = {"auto", "ring", "rhd", "tree", "direct", "ordered", "native", "hier"};

const char *plait_coll_algo_name(plait_coll_algo algo) {
    return (unsigned)algo < sizeof algo_names / sizeof algo_names[0] ? algo_names[algo] : "?";
}

int plait_coll_algo_parse(const char *name) {
    for (unsigned i = 0; i < sizeof algo_names / sizeof algo_names[0]; i++)
        if (name && strcmp(name, algo_names[i]) == 0) return (int)i;
    return -1;
}
