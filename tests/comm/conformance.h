/*
 * The collective conformance matrix, transport-independent: every
 * collective × dtype × operator × size × algorithm × in-place form, and
 * send/recv × dtype × size, run on a world communicator by every rank in the
 * same order, each rank checking its own results exactly. Inputs are small integers (or ±1/2 for products)
 * so every result is exact whatever the reduction order; AVG is checked
 * bit for bit against the same single division the contract specifies.
 *
 * Used by test_coll_conformance (in-process threads transport) and by the
 * multi-process driver (TCP plugin, mpirun).
 */
#ifndef PLAIT_TESTS_CONFORMANCE_H
#define PLAIT_TESTS_CONFORMANCE_H

#include <stddef.h>
#include <stdint.h>

#include <plait/coll.h>

typedef struct conformance_opts {
    int big;            /* include the 1 MiB + 3 size */
    int full_big;       /* at the big size, every algorithm and in-place form (slow) */
    int big_subset;     /* at the big size, one dtype per (collective, op), rotating, instead of
                           every dtype: for many ranks on few cores, where checking the 1 MiB
                           results costs most of the time (the small sizes stay complete) */
    unsigned sample;    /* under big_subset, where the rotation starts (conformance_sample):
                           successive commits check the other dtypes at the big size */
    int only_kind;      /* -1 = all (and send/recv), else a plait_coll_kind */
    int verbose;
} conformance_opts;

typedef struct conformance_result {
    uint64_t cases;      /* collectives run by this rank */
    uint64_t wrong;      /* elements that differ from the expected value */
    uint64_t failed;     /* calls that returned an error */
    char first[512];     /* description of the first problem */
} conformance_result;

/* The rotation's start for big_subset, as tests/e2e/lib.sh samples its
 * matrices: PLAIT_TEST_SAMPLE when set (a number; anything else stops the
 * test, exit status 1, naming it), else
 * the commit of PLAIT_SOURCE_DIR's checkout read as hexadecimal (git), else
 * 0. Every rank of a run must use the same value: a multi-rank test reads
 * it once and passes it to its ranks. */
unsigned conformance_sample(void);

/* Whether the complete matrix is asked for (PLAIT_TEST_ALL set, as by
 * `make test-all`): then no big_subset. */
int conformance_complete(void);

/* Run the matrix on `world` (all ranks call it). Fills *res for this rank.
 * Returns 0 when this rank saw no problem. */
int conformance_run(plait_comm *world, const conformance_opts *opts, conformance_result *res);

/* Value of element i of rank q's input for a reduction with `op`, and for
 * pure data movement (op < 0). Exactly representable in every dtype, and
 * periodic in i (a period of at most 97 whatever q: the checks tabulate a
 * reduction's expected elements over one period). */
double conformance_input(int op, int is_unsigned, int q, size_t i);

/* buf holds the first min(period, count) of `count` elements of elem_size
 * bytes that repeat with `period`: copy them over the rest (a doubling
 * copy, a few memcpy calls for any count). */
void conformance_repeat(void *buf, size_t elem_size, size_t period, size_t count);

/* Store / load element i of a typed buffer as a double. */
void conformance_store(void *buf, int dtype, size_t i, double v);
double conformance_load(const void *buf, int dtype, size_t i);

#endif
