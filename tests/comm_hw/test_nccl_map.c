/*
 * The NCCL plugin's pure mappings: every plait dtype and operator has its
 * NCCL counterpart (and unknown values are refused), NCCL results map to
 * the statuses the core acts on, the device choice, and the in-place
 * overlaps that decide between NCCL's own in-place forms and staging.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "nccl_map.h"

static void test_dtypes(void **state) {
    (void)state;
    struct { plait_dtype p; ncclDataType_t n; } want[] = {
        {PLAIT_F32, ncclFloat32}, {PLAIT_F64, ncclFloat64}, {PLAIT_F16, ncclFloat16}, {PLAIT_BF16, ncclBfloat16},
        {PLAIT_I32, ncclInt32},   {PLAIT_I64, ncclInt64},   {PLAIT_U8, ncclUint8}};
    assert_int_equal(sizeof want / sizeof want[0], PLAIT_DTYPE_COUNT_V1);
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        ncclDataType_t got = ncclNumTypes;
        assert_true(pnccl_dtype(want[i].p, &got));
        assert_int_equal(got, want[i].n);
    }
    ncclDataType_t got;
    assert_false(pnccl_dtype(PLAIT_DTYPE_COUNT_V1, &got));
    assert_false(pnccl_dtype((plait_dtype)-1, &got));
}

static void test_redops(void **state) {
    (void)state;
    struct { plait_redop p; ncclRedOp_t n; } want[] = {
        {PLAIT_SUM, ncclSum}, {PLAIT_PROD, ncclProd}, {PLAIT_MIN, ncclMin}, {PLAIT_MAX, ncclMax}, {PLAIT_AVG, ncclAvg}};
    assert_int_equal(sizeof want / sizeof want[0], PLAIT_REDOP_COUNT_V1);
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        ncclRedOp_t got = ncclNumOps;
        assert_true(pnccl_redop(want[i].p, &got));
        assert_int_equal(got, want[i].n);
    }
    ncclRedOp_t got;
    assert_false(pnccl_redop(PLAIT_REDOP_COUNT_V1, &got));
}

static void test_statuses(void **state) {
    (void)state;
    assert_int_equal(pnccl_status(ncclSuccess), PLAIT_OK);
    assert_int_equal(pnccl_status(ncclRemoteError), PLAIT_ERR_PEER_LOST);
    assert_int_equal(pnccl_status(ncclSystemError), PLAIT_ERR_SYSTEM);
    assert_int_equal(pnccl_status(ncclUnhandledCudaError), PLAIT_ERR_SYSTEM);
    assert_int_equal(pnccl_status(ncclInvalidArgument), PLAIT_ERR_INVALID_ARG);
    assert_int_equal(pnccl_status(ncclInvalidUsage), PLAIT_ERR_INVALID_ARG);
    assert_int_equal(pnccl_status(ncclInternalError), PLAIT_ERR_INTERNAL);
    assert_int_equal(pnccl_status(ncclInProgress), PLAIT_ERR_TIMEOUT);
    assert_int_equal(pnccl_status((ncclResult_t)99), PLAIT_ERR_INTERNAL);
    assert_non_null(strstr(pnccl_result_hint(ncclRemoteError), "peer process exited"));
}

static void test_device_choice(void **state) {
    (void)state;
    assert_int_equal(pnccl_pick_device(-1, 0, 8), 0);
    assert_int_equal(pnccl_pick_device(-1, 5, 8), 5);
    assert_int_equal(pnccl_pick_device(-1, 9, 8), 1); /* more local ranks than GPUs: wraps (init then refuses the duplicate) */
    assert_int_equal(pnccl_pick_device(3, 0, 8), 3);
    assert_int_equal(pnccl_pick_device(8, 0, 8), -1);
    assert_int_equal(pnccl_pick_device(-1, 0, 0), -1);
}

static void test_layouts(void **state) {
    (void)state;
    static char buf[4096];
    char *b = buf;
    /* same-size collectives */
    assert_int_equal(pnccl_overlap_same_size(b, b + 1024, 1024), PNCCL_SEPARATE);
    assert_int_equal(pnccl_overlap_same_size(b, b, 1024), PNCCL_NATIVE_IN_PLACE);
    assert_int_equal(pnccl_overlap_same_size(b, b + 512, 1024), PNCCL_BAD_OVERLAP);
    /* reduce_scatter over 4 ranks, 256-byte blocks */
    assert_int_equal(pnccl_overlap_reduce_scatter(b, b + 2048, 256, 4, 2), PNCCL_SEPARATE);
    assert_int_equal(pnccl_overlap_reduce_scatter(b, b + 512, 256, 4, 2), PNCCL_NATIVE_IN_PLACE); /* NCCL's form */
    assert_int_equal(pnccl_overlap_reduce_scatter(b, b, 256, 4, 0), PNCCL_NATIVE_IN_PLACE);       /* both forms agree */
    assert_int_equal(pnccl_overlap_reduce_scatter(b, b, 256, 4, 2), PNCCL_STAGING);                 /* MPI's form */
    assert_int_equal(pnccl_overlap_reduce_scatter(b, b + 100, 256, 4, 2), PNCCL_BAD_OVERLAP);
    /* allgather */
    assert_int_equal(pnccl_overlap_allgather(b + 2048, b, 256, 4, 1), PNCCL_SEPARATE);
    assert_int_equal(pnccl_overlap_allgather(b + 256, b, 256, 4, 1), PNCCL_NATIVE_IN_PLACE);
    assert_int_equal(pnccl_overlap_allgather(b, b, 256, 4, 1), PNCCL_STAGING);
    /* alltoall */
    assert_int_equal(pnccl_overlap_alltoall(b, b + 1024, 256, 4), PNCCL_SEPARATE);
    assert_int_equal(pnccl_overlap_alltoall(b, b, 256, 4), PNCCL_STAGING);
    /* empty buffers never overlap */
    assert_int_equal(pnccl_overlap_same_size(b, b + 1, 0), PNCCL_SEPARATE);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dtypes),     cmocka_unit_test(test_redops),  cmocka_unit_test(test_statuses),
        cmocka_unit_test(test_device_choice), cmocka_unit_test(test_layouts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
