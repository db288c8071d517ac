/* Trainer building blocks without communication: batch arithmetic, mesh
 * coordinates, deterministic tree accumulation, what a resume checks against
 * the checkpoint's run state, who may write in a locked run directory. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/file.h>
#include <unistd.h>

#include "runtime/error.h"
#include "layout/batch.h"
#include "kernels/kernels.h"
#include "coll/sum_tree.h"
#include "layout/mesh.h"
#include "model/tied.h"
#include "train/run_source.h"
#include "host/host_table.h"
#include "runtime/clock.h"
#include "train/out_dir_lock.h"
#include "train/run_internal.h"

static void test_batch_derivations(void **state) {
    (void)state;
    plait_batch b;
    assert_int_equal(plait_batch_solve(0, 0, 0, 4, &b), PLAIT_OK);
    assert_int_equal(b.micro_batch, 8);
    assert_int_equal(b.accumulation, 1);
    assert_int_equal(b.global_batch, 32);
    assert_int_equal(plait_batch_solve(32, 4, 0, 2, &b), PLAIT_OK); /* derive accumulation */
    assert_int_equal(b.accumulation, 4);
    assert_int_equal(plait_batch_solve(32, 4, 0, 4, &b), PLAIT_OK); /* same global batch, other dp */
    assert_int_equal(b.accumulation, 2);
    assert_int_equal(plait_batch_solve(32, 0, 2, 4, &b), PLAIT_OK); /* derive micro batch */
    assert_int_equal(b.micro_batch, 4);
    assert_int_equal(plait_batch_solve(0, 4, 2, 3, &b), PLAIT_OK); /* derive global */
    assert_int_equal(b.global_batch, 24);
    assert_int_equal(plait_batch_solve(16, 0, 0, 2, &b), PLAIT_OK); /* global only */
    assert_int_equal(b.micro_batch, 8);
    assert_int_equal(plait_batch_solve(0, 0, 3, 1, &b), PLAIT_OK); /* accumulation only */
    assert_int_equal(b.global_batch, 24);
    assert_int_equal(plait_batch_solve(30, 4, 0, 2, &b), PLAIT_ERR_INVALID_CONFIG);
    assert_non_null(strstr(plait_last_error(), "not a multiple of dp x micro_batch"));
    assert_int_equal(plait_batch_solve(32, 4, 2, 2, &b), PLAIT_ERR_INVALID_CONFIG);
    assert_non_null(strstr(plait_last_error(), "do not agree"));
}

static void test_mesh_coords_roundtrip(void **state) {
    (void)state;
    int axes[PLAIT_MESH_AXES];
    assert_int_equal(plait_mesh_parse_order("tp,dp,pp", axes), PLAIT_OK);
    int sizes[PLAIT_MESH_AXES] = {2, 2, 2, 1}; /* dp, tp, pp, cp */
    int c[PLAIT_MESH_AXES];
    plait_mesh_coords(1, sizes, axes, c); /* tp innermost: rank 1 = tp 1 */
    assert_int_equal(c[PLAIT_AXIS_TP], 1);
    assert_int_equal(c[PLAIT_AXIS_DP], 0);
    plait_mesh_coords(2, sizes, axes, c);
    assert_int_equal(c[PLAIT_AXIS_DP], 1);
    plait_mesh_coords(4, sizes, axes, c);
    assert_int_equal(c[PLAIT_AXIS_PP], 1);
    int s2[PLAIT_MESH_AXES] = {3, 2, 4, 1};
    assert_int_equal(plait_mesh_parse_order("dp, pp, tp", axes), PLAIT_OK);
    for (int r = 0; r < 24; r++) {
        plait_mesh_coords(r, s2, axes, c);
        assert_int_equal(plait_mesh_rank_of(c, s2, axes), r);
    }
    assert_int_equal(plait_mesh_parse_order("tp,dp", axes), PLAIT_ERR_INVALID_CONFIG);
    assert_int_equal(plait_mesh_parse_order("tp,tp,pp", axes), PLAIT_ERR_INVALID_CONFIG);
    assert_int_equal(plait_mesh_parse_order("tp,ep,dp,pp", axes), PLAIT_ERR_INVALID_CONFIG);
    assert_non_null(strstr(plait_last_error(), "carved out of dp x cp"));
}

/* cp, unnamed in the order, sits just outside tp (tp,cp,dp,pp); with cp = 1
 * every rank has the coordinates of the three-axis mesh. */
static void test_mesh_cp_axis(void **state) {
    (void)state;
    int axes[PLAIT_MESH_AXES], named[PLAIT_MESH_AXES], c[PLAIT_MESH_AXES];
    assert_int_equal(plait_mesh_parse_order("tp,dp,pp", axes), PLAIT_OK);
    assert_int_equal(plait_mesh_parse_order("tp,cp,dp,pp", named), PLAIT_OK);
    assert_memory_equal(axes, named, sizeof axes);
    assert_int_equal(plait_mesh_parse_order("dp,pp,tp", axes), PLAIT_OK);
    assert_int_equal(axes[3], PLAIT_AXIS_CP);
    assert_int_equal(plait_mesh_parse_order("tp,dp,pp", axes), PLAIT_OK);
    int s[PLAIT_MESH_AXES] = {2, 2, 2, 2}; /* dp, tp, pp, cp */
    plait_mesh_coords(2, s, axes, c);      /* after tp, the cp ring */
    assert_int_equal(c[PLAIT_AXIS_CP], 1);
    assert_int_equal(c[PLAIT_AXIS_TP], 0);
    plait_mesh_coords(4, s, axes, c);
    assert_int_equal(c[PLAIT_AXIS_DP], 1);
    assert_int_equal(c[PLAIT_AXIS_CP], 0);
    /* the dp x cp index nests cp inside dp here; ep takes its innermost ranks */
    plait_mesh m;
    plait_mesh_fill(&m, 2 + 4, s, axes, 2, "tp,dp,pp");
    assert_int_equal(m.dp_rank, 1);
    assert_int_equal(m.cp_rank, 1);
    assert_int_equal(m.dpcp_rank, 3);
    assert_int_equal(m.ep_rank, 1);
    assert_int_equal(m.world_size, 16);
    int s1[PLAIT_MESH_AXES] = {3, 2, 2, 1};
    for (int r = 0; r < 12; r++) {
        plait_mesh_fill(&m, r, s1, axes, 1, "tp,dp,pp");
        assert_int_equal(m.tp_rank, r % 2);
        assert_int_equal(m.dp_rank, r / 2 % 3);
        assert_int_equal(m.pp_rank, r / 6);
        assert_int_equal(m.cp_rank, 0);
        assert_int_equal(m.dpcp_rank, m.dp_rank);
    }
}

static float rnd(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(*s >> 40) / (double)(1ull << 24) - 0.5) * 3.7f;
}

/* Reference: the left-complete pairwise tree in float arithmetic. */
static float tree_f(const float *v, int32_t n) {
    if (n == 1) return v[0];
    int32_t half = 1;
    while (half * 2 < n) half *= 2;
    return tree_f(v, half) + tree_f(v + half, n - half);
}

static void run_tree(const float *mbs, int32_t m, size_t n, float *out) {
    plait_sum_tree *t = NULL;
    assert_int_equal(plait_sum_tree_create(n, PLAIT_F32, PLAIT_SUM, m, "test tree", &t), PLAIT_OK);
    float *fresh = malloc(n * sizeof(float));
    for (int32_t j = 0; j < m; j++) {
        memcpy(fresh, mbs + (size_t)j * n, n * sizeof(float));
        assert_int_equal(plait_sum_tree_add(t, j, fresh, out, 0, n / 2, NULL), PLAIT_OK);
        assert_int_equal(plait_sum_tree_add(t, j, fresh + n / 2, out + n / 2, n / 2, n - n / 2, NULL), PLAIT_OK);
    }
    /* the levels it allocated are those the planner counts (cost/memory.c) */
    assert_int_equal(plait_sum_tree_bytes(t), (size_t)plait_sum_tree_levels_used(m) * n * sizeof(float));
    assert_true(plait_sum_tree_levels_used(m) <= plait_sum_tree_max_levels(m));
    free(fresh);
    plait_sum_tree_free(t);
}

/* The accumulator equals the reference tree bit for bit, and splitting the
 * micro-batches into power-of-two blocks (data-parallel ranks) finished by a
 * tree over the blocks gives the same bits. */
static void test_grad_tree_bits(void **state) {
    (void)state;
    const size_t n = 29;
    for (int32_t m = 1; m <= 17; m++) {
        float *mbs = malloc(sizeof(float) * n * (size_t)m), out[29], col[17];
        uint64_t seed = 99u + (uint64_t)m;
        for (size_t i = 0; i < n * (size_t)m; i++) mbs[i] = rnd(&seed);
        run_tree(mbs, m, n, out);
        for (size_t i = 0; i < n; i++) {
            for (int32_t j = 0; j < m; j++) col[j] = mbs[(size_t)j * n + i];
            float ref = tree_f(col, m);
            assert_memory_equal(&out[i], &ref, sizeof ref);
        }
        /* dp split: blocks of 2^k micro-batches, then a tree over the blocks */
        for (int32_t blk = 1; blk <= m; blk *= 2) {
            if (m % blk) continue;
            int32_t dp = m / blk;
            float partial[17][29];
            for (int32_t r = 0; r < dp; r++) run_tree(mbs + (size_t)r * blk * n, blk, n, partial[r]);
            for (size_t i = 0; i < n; i++) {
                for (int32_t r = 0; r < dp; r++) col[r] = partial[r][i];
                float split = tree_f(col, dp);
                assert_memory_equal(&split, &out[i], sizeof split);
            }
        }
        free(mbs);
    }
    double d[5] = {1e16, 1, -1e16, 1, 3};
    assert_true(plait_sum_tree_f64(d, 5) == ((1e16 + 1) + (-1e16 + 1)) + 3);
}

/* A resume continues the interrupted run's data position; another seed or
 * other data is reported (and warned about), never silently taken; a state
 * whose data position is not its step is refused. */
/* The tied weight's rules (model/tied.h, plait/model.h): a copy reads and is
 * stored as its original, pairs across stages are flagged on both local
 * members, and the fold is original + copy, only when both are local. */
static void test_tied_weight(void **state) {
    (void)state;
    plait_param g[3] = {
        {.name = "transformer.wte.weight", .index = 0, .layer = 0, .tied_to = -1, .numel = 2},
        {.name = "h.0.w", .index = 1, .layer = 1, .tied_to = -1, .numel = 2},
        {.name = "lm_head.weight", .index = 2, .layer = 2, .flags = PLAIT_PARAM_TIED_COPY, .tied_to = 0, .numel = 2},
    };
    plait_model_spec spec = {.struct_size = sizeof spec, .n_params = 3, .params = g};
    assert_int_equal(plait_tied_original(&g[2]), 0);
    assert_int_equal(plait_tied_original(&g[1]), -1);
    assert_true(plait_tied_is_copy(&g[2]) && !plait_tied_is_copy(&g[0]));
    assert_string_equal(plait_tied_source(&spec, &g[2])->name, "transformer.wte.weight");
    assert_ptr_equal(plait_tied_source(&spec, &g[1]), &g[1]);
    plait_param as = plait_tied_init_as(&spec, &g[2]);
    assert_string_equal(as.name, "transformer.wte.weight");
    assert_int_equal(as.index, 0);
    assert_int_equal(as.layer, 2); /* the rest stays the copy's */

    /* one stage holds all: no remote flags; the fold adds the copy in */
    float gw[2] = {1e8f, 1}, gh[2] = {0, 0}, gc[2] = {-1e8f, 3};
    plait_param local[3] = {g[0], g[1], g[2]};
    local[0].grad = gw, local[1].grad = gh, local[2].grad = gc;
    int32_t all[3] = {0, 1, 2}, one_stage[3] = {0, 0, 0}, split[3] = {0, 0, 1};
    plait_tied_mark_remote(&spec, one_stage, local, all);
    for (int i = 0; i < 3; i++) assert_false(local[i].flags & PLAIT_PARAM_TIED_REMOTE);
    plait_param_set set = {.struct_size = sizeof set, .n_params = 3, .params = local};
    assert_int_equal(plait_tied_local_original(&set, &local[2]), 0);
    plait_tied_fold_grads(&set, plait_kernels_table());
    assert_true(gw[0] == 0.0f && gw[1] == 4.0f);
    assert_true(gc[0] == -1e8f); /* the copy keeps its own gradient */

    /* embedding and head on different stages: both local members flagged */
    plait_tied_mark_remote(&spec, split, local, all);
    assert_true(local[0].flags & PLAIT_PARAM_TIED_REMOTE);
    assert_false(local[1].flags & PLAIT_PARAM_TIED_REMOTE);
    assert_true(local[2].flags & PLAIT_PARAM_TIED_REMOTE);
    /* the last stage alone: only the copy is here, and nothing is folded */
    plait_param last[1] = {g[2]};
    last[0].grad = gc;
    int32_t map[3] = {-1, -1, 0};
    plait_tied_mark_remote(&spec, split, last, map);
    assert_true(last[0].flags & PLAIT_PARAM_TIED_REMOTE);
    plait_param_set last_set = {.struct_size = sizeof last_set, .n_params = 1, .params = last};
    assert_int_equal(plait_tied_local_original(&last_set, &last[0]), -1);
    plait_tied_fold_grads(&last_set, plait_kernels_table());
    assert_true(gc[0] == -1e8f && gc[1] == 3.0f);
}

static void test_resume_checks(void **state) {
    (void)state;
    plait_ckpt_data data = {.path = "a.txt", .tokens = 1000, .train_tokens = 900, .train_crc32c = 0x1234abcdu};
    plait_ckpt_state saved = {.step = 40, .seed = 7, .data_step = 40, .optim_step = 40, .has_data = 1, .data = data};
    unsigned differs = 99;
    assert_int_equal(plait_run_check_resume(&saved, "ck", 7, &data, 1, &differs), PLAIT_OK);
    assert_int_equal(differs, 0);
    data.path = "moved/a.txt"; /* the same data elsewhere */
    assert_int_equal(plait_run_check_resume(&saved, "ck", 7, &data, 1, &differs), PLAIT_OK);
    assert_int_equal(differs, 0);

    assert_int_equal(plait_run_check_resume(&saved, "ck", 8, &data, 1, &differs), PLAIT_OK);
    assert_int_equal(differs, PLAIT_RESUME_OTHER_SEED);
    plait_ckpt_data other[3] = {data, data, data};
    other[0].train_crc32c ^= 1;
    other[1].tokens++;
    other[2].train_tokens--;
    for (int k = 0; k < 3; k++) {
        assert_int_equal(plait_run_check_resume(&saved, "ck", 7, &other[k], 0, &differs), PLAIT_OK);
        assert_int_equal(differs, PLAIT_RESUME_OTHER_DATA);
    }
    assert_int_equal(plait_run_check_resume(&saved, "ck", 8, &other[0], 0, &differs), PLAIT_OK);
    assert_int_equal(differs, PLAIT_RESUME_OTHER_SEED | PLAIT_RESUME_OTHER_DATA);

    saved.has_data = 0; /* format 1: nothing to compare the data with */
    assert_int_equal(plait_run_check_resume(&saved, "ck", 7, &other[0], 1, &differs), PLAIT_OK);
    assert_int_equal(differs, 0);

    saved.data_step = 39;
    assert_int_equal(plait_run_check_resume(&saved, "ck/ckpt-00000040", 7, &data, 1, &differs), PLAIT_ERR_PROTOCOL);
    assert_non_null(strstr(plait_last_error(), "checkpoint ck/ckpt-00000040: its data position (data_step 39) is "
                                               "not its step (40)"));
}

/* A split backward's device: one declaring 1.6 or later, or whose kernel
 * table was built against an SDK that states 1.6's contract (a 1.3
 * plugin built today, as the cuda plugin is); not a 1.5 plugin whose
 * table ends before the 1.7 entries, nor one without a table. */
static void test_split_device_rule(void **state) {
    (void)state;
    plait_kernels today = {.struct_size = sizeof(plait_kernels)};
    plait_kernels old = {.struct_size = (uint32_t)offsetof(plait_kernels, attention_fused_scratch)};
    assert_true(plait_split_kernels_ok(6, &old));
    assert_true(plait_split_kernels_ok(9, NULL));
    assert_true(plait_split_kernels_ok(3, &today));
    assert_false(plait_split_kernels_ok(5, &old));
    assert_false(plait_split_kernels_ok(3, NULL));
}

/* The names in `dir` other than . and .., space-separated. */
static void dir_names(const char *dir, char *out, size_t cap) {
    out[0] = '\0';
    DIR *d = opendir(dir);
    assert_non_null(d);
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
            snprintf(out + strlen(out), cap - strlen(out), "%s%s", out[0] ? " " : "", e->d_name);
    closedir(d);
}

static void read_text(const char *path, char *out, size_t cap) {
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    size_t n = fread(out, 1, cap - 1, f);
    out[n] = '\0';
    fclose(f);
}

typedef struct {
    const char *dir, *job;
    double wait_s;
    int lock;   /* plait_out_dir_lock rather than plait_out_dir_enter */
    int fd;
    plait_status st;
} dir_call;

static void *call_in_thread(void *arg) {
    dir_call *c = arg;
    c->st = c->lock ? plait_out_dir_lock(c->dir, c->job, &c->fd) : plait_out_dir_enter(c->dir, c->job, c->wait_s);
    return NULL;
}

/* A rank other than 0 writes in the run directory only if no other run
 * holds it: its own job's holder (named in the lock file), a stale lock
 * and no lock at all let it in; another run's lock refuses it with rank
 * 0's message, nothing created or changed. Its rank 0 may hold the lock a
 * moment before naming the job, and its look must not make rank 0 (of
 * any job) take the directory for another run's. */
static void test_out_dir_holders(void **state) {
    (void)state;
    char dir[64], lock[128], names[256], before[512], after[512];
    snprintf(dir, sizeof dir, "/tmp/plait-lock-XXXXXX");
    assert_non_null(mkdtemp(dir));
    snprintf(lock, sizeof lock, "%s/" PLAIT_OUT_DIR_LOCK_FILE, dir);

    assert_int_equal(plait_out_dir_enter(dir, "aaa", 0), PLAIT_OK); /* nothing there */
    dir_names(dir, names, sizeof names);
    assert_string_equal(names, "");

    int fd = -1;
    assert_int_equal(plait_out_dir_lock(dir, "aaa", &fd), PLAIT_OK);
    read_text(lock, before, sizeof before);
    assert_non_null(strstr(before, "\njob aaa\n"));
    assert_int_equal(plait_out_dir_enter(dir, "aaa", 0), PLAIT_OK);
    double t0 = plait_clock_now();
    assert_int_equal(plait_out_dir_enter(dir, "bbb", 0.05), PLAIT_ERR_INVALID_CONFIG);
    assert_true(plait_clock_now() - t0 >= 0.05);
    char want[128];
    snprintf(want, sizeof want, "is in use by another run (pid %ld on host ", (long)getpid());
    assert_non_null(strstr(plait_last_error(), want));
    assert_int_equal(plait_out_dir_enter(dir, "", 0), PLAIT_ERR_INVALID_CONFIG); /* no job: never the holder's */
    assert_int_equal(plait_out_dir_enter(dir, "aa", 0), PLAIT_ERR_INVALID_CONFIG);
    dir_names(dir, names, sizeof names);
    assert_string_equal(names, PLAIT_OUT_DIR_LOCK_FILE);
    read_text(lock, after, sizeof after);
    assert_string_equal(after, before);
    int other = -1;
    assert_int_equal(plait_out_dir_lock(dir, "bbb", &other), PLAIT_ERR_INVALID_CONFIG);
    assert_int_equal(other, -1);
    plait_out_dir_unlock(fd);
    assert_int_equal(plait_out_dir_enter(dir, "bbb", 0), PLAIT_OK); /* stale */

    /* held by a process that has not yet named its job: the look waits */
    int held = open(lock, O_RDWR);
    assert_true(held >= 0);
    assert_int_equal(flock(held, LOCK_EX | LOCK_NB), 0);
    dir_call look = {.dir = dir, .job = "ccc", .wait_s = 30};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, call_in_thread, &look), 0);
    plait_clock_sleep(0.05);
    const char named[] = "pid 1 on host h, started now\njob ccc\n";
    assert_int_equal(ftruncate(held, 0), 0);
    assert_int_equal(pwrite(held, named, sizeof named - 1, 0), (ssize_t)(sizeof named - 1));
    pthread_join(th, NULL);
    assert_int_equal(look.st, PLAIT_OK); /* a look that missed the name would end refused after 30 s */

    /* a look (a shared lock) under way when rank 0 locks: rank 0 tries again */
    assert_int_equal(flock(held, LOCK_UN), 0);
    assert_int_equal(flock(held, LOCK_SH | LOCK_NB), 0);
    dir_call take = {.dir = dir, .job = "ddd", .lock = 1, .fd = -1};
    assert_int_equal(pthread_create(&th, NULL, call_in_thread, &take), 0);
    plait_clock_sleep(0.05);
    assert_int_equal(flock(held, LOCK_UN), 0);
    pthread_join(th, NULL);
    assert_int_equal(take.st, PLAIT_OK);
    read_text(lock, after, sizeof after);
    assert_non_null(strstr(after, "\njob ddd\n"));
    plait_out_dir_unlock(take.fd);
    close(held);

    unlink(lock);
    rmdir(dir);
}

int main(void) {
    plait_host_install(); /* plugins are handed the core's host table */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_batch_derivations), cmocka_unit_test(test_mesh_coords_roundtrip),
        cmocka_unit_test(test_mesh_cp_axis),      cmocka_unit_test(test_grad_tree_bits),
        cmocka_unit_test(test_tied_weight),       cmocka_unit_test(test_resume_checks),
        cmocka_unit_test(test_split_device_rule), cmocka_unit_test(test_out_dir_holders),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
