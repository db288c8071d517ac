/* Checkpoints: round trip with nanoGPT names and global shapes and the run
 * state (seed, data position, the data's identity), the value source with TP
 * shards, atomicity under simulated crashes, refusal of damaged checkpoints,
 * state.json formats (1 still read), latest-complete discovery, pruning. */
#include "train_io_test.h"

#include <sys/wait.h>

#include <glob.h>
#include <inttypes.h>
#include <math.h>

#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_shard.h"
#include "checkpoint/safetensors_crc32c.h"
#include "checkpoint/checkpoint_fs.h"
#include "cli/sample.h"

static char scratch[PATH_MAX];

static int setup(void **state) {
    (void)state;
    make_scratch(scratch, sizeof scratch, "ckpt");
    return 0;
}

static int teardown(void **state) {
    (void)state;
    rm_tree(scratch);
    return 0;
}

/* A tiny GPT-like parameter list: V = 10, C = 4, block 8, one layer. */
enum { N_PARAMS = 6 };
static plait_param g_params[N_PARAMS];
static plait_model_spec g_spec;
static const char *const adam_states[] = {"exp_avg", "exp_avg_sq", NULL};

static void add_param(int i, const char *name, uint32_t flags, int ndim, int64_t d0, int64_t d1, int32_t tied) {
    plait_param *p = &g_params[i];
    memset(p, 0, sizeof *p);
    p->struct_size = sizeof *p;
    p->flags = flags;
    p->name = name;
    p->index = i;
    p->ndim = ndim;
    p->shape[0] = d0;
    p->shape[1] = d1;
    p->shard.dim = -1;
    p->shard.parts = 1;
    p->shard.groups = 1;
    p->local_shape[0] = d0;
    p->local_shape[1] = d1;
    p->numel = (size_t)(ndim == 2 ? d0 * d1 : d0);
    p->tied_to = tied;
}

static void build_spec(void) {
    add_param(0, "transformer.wte.weight", 0, 2, 10, 4, -1);
    add_param(1, "transformer.wpe.weight", 0, 2, 8, 4, -1);
    add_param(2, "transformer.h.0.ln_1.weight", PLAIT_PARAM_NO_DECAY, 1, 4, 0, -1);
    add_param(3, "transformer.h.0.attn.c_attn.weight", 0, 2, 12, 4, -1);
    add_param(4, "transformer.ln_f.bias", PLAIT_PARAM_NO_DECAY, 1, 4, 0, -1);
    add_param(5, "lm_head.weight", PLAIT_PARAM_TIED_COPY, 2, 10, 4, 0);
    memset(&g_spec, 0, sizeof g_spec);
    g_spec.struct_size = sizeof g_spec;
    g_spec.arch = "gpt";
    g_spec.n_params = N_PARAMS;
    g_spec.params = g_params;
}

/* Value of element i of tensor `which` of parameter p (distinct everywhere). */
static float value_of(int p, int which, size_t i) { return (float)(1000 * which + 100 * p) + (float)i * 0.5f; }

static void fill(float *buf, int p, int which, size_t n) {
    for (size_t i = 0; i < n; i++) buf[i] = value_of(p, which, i);
}

/* When set, save() writes this value into element 1 of parameter g_poison_param's tensor. */
static int g_poison_param = -1;
static float g_poison_value;
/* When set, extra model-file metadata: key, value, ..., NULL. */
static const char *const *g_model_meta;
static int64_t g_protect = -1; /* the step a resumed run protects from pruning */

/* Save a full checkpoint of the spec at `step`; `crash` for simulated crashes. */
static plait_status save(const char *out_dir, int64_t step, plait_ckpt_crash crash, int keep) {
    plait_ckpt_writer *w;
    plait_status st = plait_ckpt_writer_begin(out_dir, step, &w);
    if (st != PLAIT_OK) return st;
    assert_int_equal(plait_ckpt_declare_model(w, &g_spec, adam_states), PLAIT_OK);
    assert_int_equal(plait_ckpt_file_metadata(w, PLAIT_CKPT_MODEL, "n_embd", "4"), PLAIT_OK);
    for (size_t m = 0; g_model_meta && g_model_meta[m]; m += 2)
        assert_int_equal(plait_ckpt_file_metadata(w, PLAIT_CKPT_MODEL, g_model_meta[m], g_model_meta[m + 1]),
                         PLAIT_OK);
    assert_int_equal(plait_ckpt_set_meta(w, "config", "[model]\nn_embd = 4\n"), PLAIT_OK);
    float buf[64];
    /* Tensors in reverse order, optimizer state first: any order is fine. */
    for (int i = N_PARAMS - 1; i >= 0; i--) {
        if (!plait_ckpt_param_stored(&g_spec, i)) continue;
        const plait_param *p = &g_params[i];
        char name[256];
        for (int s = 0; s < 2; s++) {
            fill(buf, i, s + 1, p->numel);
            plait_ckpt_optim_name(name, sizeof name, adam_states[s], p->name);
            assert_int_equal(plait_ckpt_write(w, name, buf, p->numel), PLAIT_OK);
        }
        fill(buf, i, 0, p->numel);
        if (i == g_poison_param) buf[1] = g_poison_value;
        assert_int_equal(plait_ckpt_write(w, p->name, buf, 1), PLAIT_OK); /* in two chunks */
        assert_int_equal(plait_ckpt_write(w, p->name, buf + 1, p->numel - 1), PLAIT_OK);
    }
    plait_ckpt_writer_crash_at(w, crash);
    if (g_protect >= 0) plait_ckpt_writer_protect(w, g_protect);
    plait_ckpt_state s = {.step = step, .seed = 1337, .data_step = step, .optim_step = step + 1, .has_data = 1,
                          .data = {.path = "data/corpus \"x\".txt", .tokens = 383157, .train_tokens = 344842,
                                   .train_crc32c = 0x0123abcdu},
                          .layout = "dp=1 tp=1 pp=1 optim=adam"};
    return plait_ckpt_commit(w, &s, keep, 0);
}

static void test_round_trip(void **state) {
    (void)state;
    char out[PATH_MAX];
    snprintf(out, sizeof out, "%s/rt/nested", scratch);
    assert_int_equal(save(out, 12, PLAIT_CKPT_CRASH_NONE, 0), PLAIT_OK);
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s/ckpt-00000012", out);
    plait_ckpt *ck;
    if (plait_ckpt_open(dir, &ck) != PLAIT_OK) fail_msg("%s", plait_last_error());
    const plait_ckpt_state *s = plait_ckpt_state_of(ck);
    assert_int_equal(s->step, 12);
    assert_int_equal(s->seed, 1337);
    assert_int_equal(s->data_step, 12);
    assert_int_equal(s->optim_step, 13);
    assert_true(s->has_data);
    assert_string_equal(s->data.path, "data/corpus \"x\".txt");
    assert_int_equal(s->data.tokens, 383157);
    assert_int_equal(s->data.train_tokens, 344842);
    assert_int_equal(s->data.train_crc32c, 0x0123abcdu);
    assert_string_equal(s->layout, "dp=1 tp=1 pp=1 optim=adam");
    assert_string_equal(plait_ckpt_meta(ck, "config"), "[model]\nn_embd = 4\n");
    assert_string_equal(plait_ckpt_file_meta(ck, PLAIT_CKPT_MODEL, "n_embd"), "4");
    /* Model file: 5 tensors with nanoGPT names, no lm_head; optim: 10. */
    assert_int_equal(plait_st_count(plait_ckpt_st(ck, PLAIT_CKPT_MODEL)), 5);
    assert_int_equal(plait_st_count(plait_ckpt_st(ck, PLAIT_CKPT_OPTIM)), 10);
    assert_null(plait_ckpt_tensor(ck, "lm_head.weight"));
    assert_string_equal(plait_ckpt_param_name(&g_spec, 5), "transformer.wte.weight");
    const plait_st_tensor *t = plait_ckpt_tensor(ck, "transformer.h.0.attn.c_attn.weight");
    assert_non_null(t);
    assert_int_equal(t->shape[0], 12);
    assert_int_equal(t->shape[1], 4);
    for (size_t i = 0; i < t->numel; i++) assert_true(t->data[i] == value_of(3, 0, i));
    t = plait_ckpt_tensor(ck, "optim.exp_avg_sq.transformer.wpe.weight");
    assert_non_null(t);
    for (size_t i = 0; i < t->numel; i++) assert_true(t->data[i] == value_of(1, 2, i));
    float buf[8];
    assert_int_equal(plait_ckpt_read(ck, "transformer.h.0.ln_1.weight", 1, 3, buf), PLAIT_OK);
    assert_true(buf[0] == value_of(2, 0, 1) && buf[2] == value_of(2, 0, 3));
    assert_int_equal(plait_ckpt_read(ck, "transformer.h.0.ln_1.weight", 2, 3, buf), PLAIT_ERR_INVALID_ARG);
    assert_int_equal(plait_ckpt_read(ck, "nope", 0, 1, buf), PLAIT_ERR_UNSUPPORTED);
    plait_ckpt_close(ck);

    /* The model file is a standard safetensors file with checksums. */
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    plait_st_file *f;
    assert_int_equal(plait_st_open(path, PLAIT_ST_VERIFY, &f), PLAIT_OK);
    assert_non_null(plait_st_find(f, "transformer.wte.weight"));
    plait_st_close(f);
}

/* Split every way the model's TP roles do and put the slices back. */
static void test_shard_mapping(void **state) {
    (void)state;
    int64_t shape[2] = {10, 6};
    float global[60], back[60], slice[128];
    for (int i = 0; i < 60; i++) global[i] = (float)i + 1;
    struct {
        int32_t dim, parts, groups;
        int64_t padded;
    } cases[] = {
        {0, 2, 1, 10}, /* column: rows split */
        {1, 2, 1, 6},  /* row: columns split */
        {1, 3, 1, 6},
        {0, 5, 1, 10},
        {0, 2, 1, 12}, /* vocab split with padding: 12 rows, 2 of them padding */
        {0, 4, 1, 12},
        {1, 3, 2, 6},  /* fused groups (q,k,v-like) on columns */
        {0, 1, 1, 16}, /* no split, padded */
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        memset(back, 0, sizeof back);
        for (int32_t r = 0; r < cases[c].parts; r++) {
            plait_shard s = {.dim = cases[c].dim, .parts = cases[c].parts, .index = r, .groups = cases[c].groups,
                             .padded_len = cases[c].padded};
            size_t n;
            assert_int_equal(plait_shard_numel(2, shape, &s, &n), PLAIT_OK);
            assert_int_equal(n, (size_t)(cases[c].padded / cases[c].parts) * (size_t)(cases[c].dim ? 10 : 6));
            assert_int_equal(plait_shard_extract(2, shape, &s, global, 0, n, slice), PLAIT_OK);
            /* Chunked extraction agrees with the whole. */
            float part[128];
            for (size_t off = 0; off < n; off += 7) {
                size_t k = n - off < 7 ? n - off : 7;
                assert_int_equal(plait_shard_extract(2, shape, &s, global, off, k, part), PLAIT_OK);
                assert_memory_equal(part, slice + off, k * sizeof(float));
            }
            assert_int_equal(plait_shard_insert(2, shape, &s, slice, back), PLAIT_OK);
            assert_int_equal(plait_shard_extract(2, shape, &s, global, n, 1, part), PLAIT_ERR_INVALID_ARG);
        }
        assert_memory_equal(back, global, sizeof global);
    }
    /* Known values: rows split in 2 with padding to 12: rank 1 holds rows 6..11,
     * rows 10 and 11 are padding (zeros). */
    plait_shard s = {.dim = 0, .parts = 2, .index = 1, .groups = 1, .padded_len = 12};
    assert_int_equal(plait_shard_extract(2, shape, &s, global, 0, 36, slice), PLAIT_OK);
    assert_true(slice[0] == 37.0f && slice[23] == 60.0f && slice[24] == 0.0f && slice[35] == 0.0f);
    /* Columns in 2 groups of 3, split in 3: rank 1 holds columns 1 and 4. */
    plait_shard g = {.dim = 1, .parts = 3, .index = 1, .groups = 2, .padded_len = 6};
    assert_int_equal(plait_shard_extract(2, shape, &g, global, 0, 20, slice), PLAIT_OK);
    assert_true(slice[0] == 2.0f && slice[1] == 5.0f && slice[2] == 8.0f && slice[3] == 11.0f);
    plait_shard bad = {.dim = 0, .parts = 4, .index = 0, .groups = 1, .padded_len = 10};
    size_t n;
    assert_int_equal(plait_shard_numel(2, shape, &bad, &n), PLAIT_ERR_INVALID_ARG);
}

/* A rank holding TP slices fills them from the checkpoint through the value source. */
static void test_value_source(void **state) {
    (void)state;
    char out[PATH_MAX];
    snprintf(out, sizeof out, "%s/src", scratch);
    assert_int_equal(save(out, 3, PLAIT_CKPT_CRASH_NONE, 0), PLAIT_OK);
    plait_ckpt *ck;
    assert_int_equal(plait_ckpt_open_latest(out, &ck), PLAIT_OK);
    assert_non_null(ck);
    /* TP rank 1 of 2: wte vocab-split padded to 12, c_attn column split in 3
     * groups, lm_head tied to wte with the same split. */
    plait_param local[N_PARAMS];
    memcpy(local, g_params, sizeof local);
    plait_shard vocab = {.dim = 0, .parts = 2, .index = 1, .groups = 1, .padded_len = 12};
    plait_shard qkv = {.dim = 0, .parts = 2, .index = 1, .groups = 3, .padded_len = 12};
    local[0].shard = vocab;
    local[0].numel = 6 * 4;
    local[3].shard = qkv;
    local[3].numel = 6 * 4;
    local[5].shard = vocab;
    local[5].numel = 6 * 4;
    plait_param_set set = {.struct_size = sizeof set, .n_params = N_PARAMS, .params = local};
    plait_ckpt_source src;
    plait_ckpt_source_init(&src, ck, &g_spec, &set);
    float buf[32];
    /* wte rows 6..9 then two padding rows. */
    assert_int_equal(src.src.read(src.src.ctx, 0, "param", 0, 24, buf), PLAIT_OK);
    assert_true(buf[0] == value_of(0, 0, 24) && buf[15] == value_of(0, 0, 39) && buf[16] == 0.0f);
    /* The tied copy reads the original's tensors, optimizer state included. */
    assert_int_equal(src.src.read(src.src.ctx, 5, "exp_avg", 4, 4, buf), PLAIT_OK);
    assert_true(buf[0] == value_of(0, 1, 28));
    /* c_attn: rows 2,3 (q), 6,7 (k), 10,11 (v). */
    assert_int_equal(src.src.read(src.src.ctx, 3, "exp_avg_sq", 0, 24, buf), PLAIT_OK);
    assert_true(buf[0] == value_of(3, 2, 8) && buf[8] == value_of(3, 2, 24) && buf[16] == value_of(3, 2, 40));
    /* Missing state: unsupported (the optimizer zero-fills). */
    assert_int_equal(src.src.read(src.src.ctx, 2, "momentum", 0, 4, buf), PLAIT_ERR_UNSUPPORTED);
    /* A different model: shape mismatch is a config error naming both. */
    local[2].shape[0] = 8;
    assert_int_equal(src.src.read(src.src.ctx, 2, "param", 0, 4, buf), PLAIT_ERR_INVALID_CONFIG);
    assert_error_contains("has shape [4] but the model's transformer.h.0.ln_1.weight is [8]");
    plait_ckpt_close(ck);
}

/* Files in `dir` named "<base>.<pid>-<random>.tmp" (a writer's own temporary). */
static int temps_of(const char *dir, const char *base) {
    char pattern[PATH_MAX];
    snprintf(pattern, sizeof pattern, "%s/%s.*.tmp", dir, base);
    glob_t g;
    int n = glob(pattern, 0, NULL, &g) == 0 ? (int)g.gl_pathc : 0;
    globfree(&g);
    return n;
}

static int64_t latest_step(const char *out) {
    plait_ckpt *ck;
    assert_int_equal(plait_ckpt_open_latest(out, &ck), PLAIT_OK);
    int64_t s = ck ? plait_ckpt_state_of(ck)->step : -1;
    plait_ckpt_close(ck);
    return s;
}

static void test_crash_keeps_previous(void **state) {
    (void)state;
    char out[PATH_MAX];
    snprintf(out, sizeof out, "%s/crash", scratch);
    assert_int_equal(latest_step(out), -1); /* no out_dir yet: nothing to resume */
    assert_int_equal(save(out, 100, PLAIT_CKPT_CRASH_NONE, 0), PLAIT_OK);
    assert_int_equal(save(out, 200, PLAIT_CKPT_CRASH_BEFORE_RENAME, 0), PLAIT_ERR_INTERNAL);
    assert_error_contains("simulated crash");
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/ckpt-00000200", out);
    assert_int_equal(temps_of(path, "model.safetensors"), 1); /* written and synced, never renamed */
    snprintf(path, sizeof path, "%s/ckpt-00000200/model.safetensors", out);
    assert_int_equal(access(path, F_OK), -1);
    assert_int_equal(latest_step(out), 100);
    plait_ckpt *ck;
    snprintf(path, sizeof path, "%s/ckpt-00000200", out);
    assert_int_equal(plait_ckpt_open(path, &ck), PLAIT_ERR_PROTOCOL);
    assert_error_contains("incomplete");

    assert_int_equal(save(out, 300, PLAIT_CKPT_CRASH_BEFORE_MARKER, 0), PLAIT_ERR_INTERNAL);
    assert_int_equal(latest_step(out), 100);
    plait_ckpt_entry e[8];
    assert_int_equal(plait_ckpt_list(out, e, 8), 3);
    assert_true(e[0].step == 100 && e[0].has_marker);
    assert_true(e[1].step == 200 && !e[1].has_marker);
    assert_true(e[2].step == 300 && !e[2].has_marker);

    /* The leftover as a killed process leaves it: a temporary name of a pid
     * that is gone (a child that has exited). */
    pid_t gone = fork();
    if (gone == 0) _exit(0);
    waitpid(gone, NULL, 0);
    snprintf(path, sizeof path, "%s/ckpt-00000200/model.safetensors.*.tmp", out);
    glob_t g;
    assert_int_equal(glob(path, 0, NULL, &g), 0);
    char dead[PATH_MAX];
    snprintf(dead, sizeof dead, "%s/ckpt-00000200/model.safetensors.%ld-0badf00d.tmp", out, (long)gone);
    assert_int_equal(rename(g.gl_pathv[0], dead), 0);
    globfree(&g);
    /* Saving step 200 again over the leftovers gives a complete checkpoint,
     * and the dead writer's temporary file is gone. */
    assert_int_equal(save(out, 200, PLAIT_CKPT_CRASH_NONE, 0), PLAIT_OK);
    assert_int_equal(latest_step(out), 200);
    snprintf(path, sizeof path, "%s/ckpt-00000200", out);
    assert_int_equal(temps_of(path, "model.safetensors"), 0);
    /* And an existing complete step saved again is incomplete while it is rewritten. */
    assert_int_equal(save(out, 200, PLAIT_CKPT_CRASH_BEFORE_MARKER, 0), PLAIT_ERR_INTERNAL);
    assert_int_equal(latest_step(out), 100);
}

static void copy_file(const char *from, const char *to) {
    size_t n = file_size(from);
    char *buf = malloc(n ? n : 1);
    FILE *f = fopen(from, "rb");
    assert_int_equal(fread(buf, 1, n, f), n);
    fclose(f);
    write_bytes(to, buf, n);
    free(buf);
}

static void test_refuses_damage(void **state) {
    (void)state;
    char out[PATH_MAX], dir[PATH_MAX], path[PATH_MAX], saved[PATH_MAX];
    snprintf(out, sizeof out, "%s/damage", scratch);
    assert_int_equal(save(out, 5, PLAIT_CKPT_CRASH_NONE, 0), PLAIT_OK);
    assert_int_equal(save(out, 6, PLAIT_CKPT_CRASH_NONE, 0), PLAIT_OK);
    snprintf(dir, sizeof dir, "%s/ckpt-00000006", out);
    plait_ckpt *ck;
    struct {
        const char *file;
        int kind; /* 0 truncate, 1 flip, 2 delete */
        size_t where;
        const char *expect;
    } cases[] = {
        {"model.safetensors", 0, 100, "model.safetensors: truncated"},
        {"optim.safetensors", 1, 300, "optim.safetensors: checksum mismatch"},
        {"model.safetensors", 1, 20, "model.safetensors: checksum mismatch"},
        {"state.json", 1, 30, "state.json: checksum mismatch"},
        {"COMPLETE", 1, 3, "COMPLETE: malformed"},
        {"COMPLETE", 2, 0, "no COMPLETE marker"},
        {"optim.safetensors", 2, 0, "optim.safetensors: cannot open"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        snprintf(path, sizeof path, "%s/%s", dir, cases[c].file);
        snprintf(saved, sizeof saved, "%s/saved", scratch);
        copy_file(path, saved);
        if (cases[c].kind == 0) assert_int_equal(truncate(path, (off_t)cases[c].where), 0);
        else if (cases[c].kind == 1) flip_bit(path, cases[c].where, 4);
        else assert_int_equal(unlink(path), 0);
        assert_int_equal(plait_ckpt_open(dir, &ck), PLAIT_ERR_PROTOCOL);
        assert_error_contains(cases[c].expect);
        assert_error_contains(dir);
        /* Auto-resume falls back to the previous checkpoint. */
        assert_int_equal(latest_step(out), 5);
        copy_file(saved, path);
        assert_int_equal(latest_step(out), 6);
    }
    /* A consistent but wrong-step manifest: rename the directory. */
    snprintf(path, sizeof path, "%s/ckpt-00000009", out);
    assert_int_equal(rename(dir, path), 0);
    assert_int_equal(plait_ckpt_open(path, &ck), PLAIT_ERR_PROTOCOL);
    assert_error_contains("step 6 does not match the directory name");
}

/* Replace `from` by `to` in state.json of `dir` and re-sign it in the marker,
 * as a writer of that text would have. */
static void rewrite_state(const char *dir, const char *from, const char *to) {
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/state.json", dir);
    size_t n = file_size(path);
    char *text = calloc(n + strlen(to) + 1, 1);
    FILE *f = fopen(path, "rb");
    assert_int_equal(fread(text, 1, n, f), n);
    fclose(f);
    char *at = strstr(text, from);
    if (!at) fail_msg("state.json has no \"%s\": %s", from, text);
    memmove(at + strlen(to), at + strlen(from), n - (size_t)(at - text) - strlen(from) + 1);
    memcpy(at, to, strlen(to));
    write_bytes(path, text, strlen(text));
    char marker[128];
    int64_t step = 0;
    assert_int_equal(sscanf(strstr(text, "\"step\": "), "\"step\": %" SCNd64, &step), 1);
    snprintf(marker, sizeof marker, "plait-checkpoint step=%" PRId64 " state.json crc32c=%08x\n", step,
             plait_crc32c(0, text, strlen(text)));
    snprintf(path, sizeof path, "%s/COMPLETE", dir);
    write_bytes(path, marker, strlen(marker));
    free(text);
}

/* Format 1 (an always-zero "rng_state", no "data") is still read, without
 * a data record; format 2 needs its "data"; a newer format than 3 (a
 * sharded checkpoint's) is refused. */
static void test_state_formats(void **state) {
    (void)state;
    char out[PATH_MAX], dir[PATH_MAX];
    snprintf(out, sizeof out, "%s/formats", scratch);
    assert_int_equal(save(out, 4, PLAIT_CKPT_CRASH_NONE, 0), PLAIT_OK);
    snprintf(dir, sizeof dir, "%s/ckpt-00000004", out);
    plait_ckpt *ck;
    assert_int_equal(plait_ckpt_open(dir, &ck), PLAIT_OK);
    plait_ckpt_close(ck);

    rewrite_state(dir, "\"format_version\": 2", "\"format_version\": 4");
    assert_int_equal(plait_ckpt_open(dir, &ck), PLAIT_ERR_PROTOCOL);
    assert_error_contains("format_version 4 is not 1 to 3 (written by a newer plait)");

    rewrite_state(dir, "\"format_version\": 4", "\"format_version\": 2");
    /* a negative count (a seed of -7 would come back as 2^64 - 7) */
    rewrite_state(dir, "\"seed\": 1337", "\"seed\": -7");
    assert_int_equal(plait_ckpt_open(dir, &ck), PLAIT_ERR_PROTOCOL);
    assert_error_contains("\"seed\" is missing or not an integer >= 0");
    rewrite_state(dir, "\"seed\": -7", "\"seed\": 1337");
    rewrite_state(dir, "\"train_crc32c\": \"0123abcd\"", "\"train_crc32c\": \"0123abc\"");
    assert_int_equal(plait_ckpt_open(dir, &ck), PLAIT_ERR_PROTOCOL);
    assert_error_contains("\"data\" must hold");

    /* what plait 0.1 wrote before the data record */
    rewrite_state(dir, "\"format_version\": 2", "\"format_version\": 1");
    rewrite_state(dir, "\"data\": ", "\"rng_state\": \"0000000000000000\",\n  \"old_data\": ");
    assert_int_equal(plait_ckpt_open(dir, &ck), PLAIT_OK);
    const plait_ckpt_state *s = plait_ckpt_state_of(ck);
    assert_false(s->has_data);
    assert_int_equal(s->step, 4);
    assert_int_equal(s->seed, 1337);
    assert_int_equal(s->data_step, 4);
    plait_ckpt_close(ck);
}

static void test_prune(void **state) {
    (void)state;
    char out[PATH_MAX];
    snprintf(out, sizeof out, "%s/prune", scratch);
    assert_int_equal(save(out, 1, PLAIT_CKPT_CRASH_NONE, 0), PLAIT_OK);
    assert_int_equal(save(out, 2, PLAIT_CKPT_CRASH_BEFORE_MARKER, 0), PLAIT_ERR_INTERNAL); /* crash leftover */
    assert_int_equal(save(out, 3, PLAIT_CKPT_CRASH_NONE, 0), PLAIT_OK);
    assert_int_equal(save(out, 4, PLAIT_CKPT_CRASH_NONE, 0), PLAIT_OK);
    assert_int_equal(save(out, 9, PLAIT_CKPT_CRASH_BEFORE_RENAME, 0), PLAIT_ERR_INTERNAL); /* newer, incomplete */
    assert_int_equal(save(out, 5, PLAIT_CKPT_CRASH_NONE, 2), PLAIT_OK);                     /* keep 2 */
    plait_ckpt_entry e[16];
    int n = plait_ckpt_list(out, e, 16);
    assert_int_equal(n, 3);
    assert_true(e[0].step == 4 && e[0].has_marker);
    assert_true(e[1].step == 5 && e[1].has_marker);
    assert_true(e[2].step == 9 && !e[2].has_marker); /* newer than any complete one: left alone */
    assert_int_equal(latest_step(out), 5);
    /* A stranger's directory inside a checkpoint is never deleted. */
    char odd[PATH_MAX];
    snprintf(odd, sizeof odd, "%s/ckpt-00000004/keepme", out);
    assert_int_equal(mkdir(odd, 0755), 0);
    assert_int_equal(plait_ckpt_prune(out, 1, 0, -1, -1), PLAIT_ERR_INVALID_ARG);
    assert_int_equal(access(odd, F_OK), 0);
    assert_int_equal(latest_step(out), 5);
    /* Non-checkpoint entries are ignored. */
    snprintf(odd, sizeof odd, "%s/ckpt-12x", out);
    assert_int_equal(mkdir(odd, 0755), 0);
    assert_int_equal(plait_ckpt_list(out, e, 16), 3);
}

static int has_step(const char *out, int64_t step) {
    plait_ckpt_entry e[32];
    int n = plait_ckpt_list(out, e, 32);
    for (int i = 0; i < n; i++)
        if (e[i].step == step) return 1;
    return 0;
}

/* After a resume that skipped a damaged newest checkpoint, pruning keeps
 * the checkpoint resumed from and the new one, never counts the damaged
 * one, and a checkpoint damaged in its size is no checkpoint to keep. */
static void test_prune_keeps_what_a_resume_needs(void **state) {
    (void)state;
    char out[PATH_MAX], path[PATH_MAX];
    snprintf(out, sizeof out, "%s/resumed", scratch);
    for (int s = 2; s <= 6; s += 2) assert_int_equal(save(out, s, PLAIT_CKPT_CRASH_NONE, 0), PLAIT_OK);
    snprintf(path, sizeof path, "%s/ckpt-00000006/model.safetensors", out);
    FILE *f = fopen(path, "r+b");
    fseek(f, 200, SEEK_SET);
    fputc(0x55, f);
    fclose(f);
    assert_int_equal(latest_step(out), 4); /* the resume skips the damaged one */
    g_protect = 4;
    assert_int_equal(save(out, 5, PLAIT_CKPT_CRASH_NONE, 1), PLAIT_OK);
    g_protect = -1;
    assert_true(has_step(out, 4) && has_step(out, 5) && has_step(out, 6));
    assert_false(has_step(out, 2));
    /* a checkpoint whose file was cut short is not counted among those kept */
    assert_int_equal(save(out, 10, PLAIT_CKPT_CRASH_NONE, 0), PLAIT_OK);
    assert_int_equal(save(out, 11, PLAIT_CKPT_CRASH_NONE, 0), PLAIT_OK);
    snprintf(path, sizeof path, "%s/ckpt-00000011/optim.safetensors", out);
    assert_int_equal(truncate(path, 100), 0);
    assert_int_equal(save(out, 12, PLAIT_CKPT_CRASH_NONE, 2), PLAIT_OK);
    assert_true(has_step(out, 10) && has_step(out, 12));
    assert_false(has_step(out, 11));
}

/* Nothing is deleted or written through a ckpt-* link out of the run
 * directory: pruning passes it by, a save onto it is refused naming it. */
static void test_prune_and_save_never_follow_links(void **state) {
    (void)state;
    char out[PATH_MAX], outside[PATH_MAX], link[PATH_MAX], path[PATH_MAX];
    snprintf(out, sizeof out, "%s/links", scratch);
    snprintf(outside, sizeof outside, "%s/outside", scratch);
    assert_int_equal(mkdir(outside, 0755), 0);
    const char *files[] = {"model.safetensors", "optim.safetensors", "state.json", "COMPLETE", "notes"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", outside, files[i]);
        write_bytes(path, "keep", 4);
    }
    assert_int_equal(save(out, 1, PLAIT_CKPT_CRASH_NONE, 0), PLAIT_OK);
    snprintf(link, sizeof link, "%s/ckpt-00000002", out);
    assert_int_equal(symlink(outside, link), 0);
    assert_int_equal(save(out, 3, PLAIT_CKPT_CRASH_NONE, 1), PLAIT_OK); /* prunes 1, passes 2 by */
    assert_false(has_step(out, 1));
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", outside, files[i]);
        assert_int_equal(file_size(path), 4);
    }
    snprintf(link, sizeof link, "%s/ckpt-00000004", out);
    assert_int_equal(symlink(outside, link), 0);
    assert_int_equal(save(out, 4, PLAIT_CKPT_CRASH_NONE, 1), PLAIT_ERR_INVALID_ARG);
    assert_error_contains("ckpt-00000004 is a symbolic link");
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", outside, files[i]);
        assert_int_equal(file_size(path), 4);
    }
    assert_int_equal(latest_step(out), 3);
}

/* A path without a marker is named for what it is: missing, a file, a
 * directory that is no checkpoint, or a checkpoint whose save stopped;
 * "the save was interrupted" only for the last. */
static void test_missing_marker_says_why(void **state) {
    (void)state;
    char path[PATH_MAX];
    plait_ckpt *ck = NULL;
    snprintf(path, sizeof path, "%s/typo-dir", scratch);
    assert_int_not_equal(plait_ckpt_open(path, &ck), PLAIT_OK);
    assert_error_contains("there is no checkpoint at");
    assert_error_contains("No such file or directory");
    assert_null(strstr(plait_last_error(), "interrupted"));
    snprintf(path, sizeof path, "%s/weights.safetensors", scratch);
    write_bytes(path, "x", 1);
    assert_int_not_equal(plait_ckpt_open(path, &ck), PLAIT_OK);
    assert_error_contains("is a file, not a checkpoint");
    assert_null(strstr(plait_last_error(), "interrupted"));
    snprintf(path, sizeof path, "%s/exported", scratch);
    assert_int_equal(mkdir(path, 0755), 0);
    char file[PATH_MAX + 32];
    snprintf(file, sizeof file, "%s/model.safetensors", path);
    write_bytes(file, "x", 1);
    assert_int_not_equal(plait_ckpt_open(path, &ck), PLAIT_OK);
    assert_error_contains("is not a plait checkpoint");
    assert_null(strstr(plait_last_error(), "interrupted"));
    char out[PATH_MAX];
    snprintf(out, sizeof out, "%s/stopped", scratch);
    assert_int_equal(save(out, 8, PLAIT_CKPT_CRASH_BEFORE_MARKER, 0), PLAIT_ERR_INTERNAL);
    snprintf(path, sizeof path, "%s/ckpt-00000008", out);
    assert_int_not_equal(plait_ckpt_open(path, &ck), PLAIT_OK);
    assert_error_contains("is incomplete: no COMPLETE marker (its save was interrupted)");
}

static void test_writer_misuse(void **state) {
    (void)state;
    char out[PATH_MAX];
    snprintf(out, sizeof out, "%s/misuse", scratch);
    plait_ckpt_writer *w;
    assert_int_equal(plait_ckpt_writer_begin(out, 7, &w), PLAIT_OK);
    int64_t s[1] = {2};
    assert_int_equal(plait_ckpt_declare(w, PLAIT_CKPT_MODEL, "x", 1, s), PLAIT_OK);
    assert_int_equal(plait_ckpt_declare(w, PLAIT_CKPT_OPTIM, "x", 1, s), PLAIT_ERR_INVALID_ARG);
    assert_int_equal(plait_ckpt_write(w, "y", (float[]){1, 2}, 2), PLAIT_ERR_INVALID_ARG);
    /* Commit with an unwritten tensor fails and leaves no complete checkpoint. */
    plait_ckpt_state st = {.step = 7};
    assert_int_equal(plait_ckpt_commit(w, &st, 0, 0), PLAIT_ERR_INVALID_ARG);
    assert_error_contains("x has 0 of its 2 elements");
    assert_int_equal(latest_step(out), -1);
    /* Nothing but the empty directory is left behind. */
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/ckpt-00000007", out);
    assert_int_equal(temps_of(path, "model.safetensors"), 0);
}

/* Only regular files are read: a FIFO or a link to /dev/zero in place of a
 * checkpoint file is refused at once, never waited on or read forever. */
static void test_refuses_special_files(void **state) {
    (void)state;
    char out[PATH_MAX], dir[PATH_MAX], path[PATH_MAX], saved[PATH_MAX];
    snprintf(out, sizeof out, "%s/special", scratch);
    assert_int_equal(save(out, 3, PLAIT_CKPT_CRASH_NONE, 0), PLAIT_OK);
    snprintf(dir, sizeof dir, "%s/ckpt-00000003", out);
    snprintf(saved, sizeof saved, "%s/special-saved", scratch);
    const char *files[] = {"model.safetensors", "optim.safetensors", "state.json", "COMPLETE"};
    alarm(30); /* a hang fails the test instead of stalling the suite */
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        assert_int_equal(rename(path, saved), 0);
        plait_ckpt *ck = NULL;
        assert_int_equal(mkfifo(path, 0600), 0);
        assert_int_not_equal(plait_ckpt_open(dir, &ck), PLAIT_OK);
        assert_error_contains(files[i]);
        assert_error_contains("is a FIFO, not a regular file");
        assert_int_equal(unlink(path), 0);
        assert_int_equal(symlink("/dev/zero", path), 0);
        assert_int_not_equal(plait_ckpt_open(dir, &ck), PLAIT_OK);
        assert_error_contains("is a character device, not a regular file");
        assert_int_equal(unlink(path), 0);
        assert_int_equal(rename(saved, path), 0);
        assert_int_equal(plait_ckpt_open(dir, &ck), PLAIT_OK);
        plait_ckpt_close(ck);
    }
    plait_st_file *f;
    snprintf(path, sizeof path, "%s/fifo", scratch);
    assert_int_equal(mkfifo(path, 0600), 0);
    assert_int_not_equal(plait_st_open(path, PLAIT_ST_VERIFY, &f), PLAIT_OK);
    assert_error_contains("is a FIFO");
    unlink(path);
    alarm(0);
}

/* NaN or Inf in a checkpoint whose checksums all agree: refused at load, naming the tensor. */
static void test_refuses_non_finite(void **state) {
    (void)state;
    const float bad[] = {NAN, INFINITY, -INFINITY};
    for (int b = 0; b < 3; b++) {
        char out[PATH_MAX], dir[PATH_MAX];
        snprintf(out, sizeof out, "%s/nonfinite%d", scratch, b);
        g_poison_param = 3;
        g_poison_value = bad[b];
        plait_status saved = save(out, 2, PLAIT_CKPT_CRASH_NONE, 0);
        g_poison_param = -1;
        assert_int_equal(saved, PLAIT_OK);
        snprintf(dir, sizeof dir, "%s/ckpt-00000002", out);
        plait_ckpt *ck = NULL;
        /* tools may open it; using its values (resume, sample) is refused */
        assert_int_equal(plait_ckpt_open(dir, &ck), PLAIT_OK);
        assert_int_equal(plait_ckpt_check_finite(ck), PLAIT_ERR_PROTOCOL);
        plait_ckpt_close(ck);
        assert_error_contains("model.safetensors: tensor transformer.h.0.attn.c_attn.weight holds a non-finite value");
        assert_error_contains(b ? "(Inf) at element 1 of 48" : "(NaN) at element 1 of 48");
        /* plait sample refuses it the same way */
        FILE *sink = tmpfile();
        plait_sample_options o = {.checkpoint = dir, .prompt = "", .tokens = 1};
        assert_int_not_equal(plait_sample(&o, sink), PLAIT_OK);
        fclose(sink);
        assert_error_contains("tensor transformer.h.0.attn.c_attn.weight holds a non-finite value");
    }
}

/* A tensor edited and the manifest re-signed to match the edited file: the
 * tensor's own checksum in the safetensors header still catches it. */
static void test_tensor_crc_behind_manifest(void **state) {
    (void)state;
    char out[PATH_MAX], dir[PATH_MAX], path[PATH_MAX], from[64], to[64];
    snprintf(out, sizeof out, "%s/tensorcrc", scratch);
    assert_int_equal(save(out, 2, PLAIT_CKPT_CRASH_NONE, 0), PLAIT_OK);
    snprintf(dir, sizeof dir, "%s/ckpt-00000002", out);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    uint64_t bytes;
    uint32_t before, after;
    assert_int_equal(plait_fs_file_crc32c(path, &bytes, &before), PLAIT_OK);
    flip_bit(path, file_size(path) - 2, 0); /* a float of the last tensor, still finite */
    assert_int_equal(plait_fs_file_crc32c(path, &bytes, &after), PLAIT_OK);
    snprintf(from, sizeof from, "\"crc32c\": \"%08x\"", before);
    snprintf(to, sizeof to, "\"crc32c\": \"%08x\"", after);
    rewrite_state(dir, from, to);
    plait_ckpt *ck = NULL;
    assert_int_equal(plait_ckpt_open(dir, &ck), PLAIT_ERR_PROTOCOL);
    assert_error_contains("checksum mismatch (stored");
    assert_error_contains("its data was altered");
}

/* plait sample on a checkpoint whose model metadata is out of range blames
 * the checkpoint's metadata (no command-line override was given); on one of
 * a checkpoint's files it asks for the directory. */
static void test_sample_blames_the_checkpoint(void **state) {
    (void)state;
    static const char *const meta[] = {"plait.model.arch", "gpt", "plait.model.n_layer", "1",
                                       "plait.model.n_head", "0", "plait.model.n_embd", "4",
                                       "plait.model.block_size", "8", "plait.model.vocab_size", "10", NULL};
    char out[PATH_MAX], dir[PATH_MAX], file[PATH_MAX + 32];
    snprintf(out, sizeof out, "%s/samplemeta", scratch);
    g_model_meta = meta;
    plait_status saved = save(out, 2, PLAIT_CKPT_CRASH_NONE, 0);
    g_model_meta = NULL;
    assert_int_equal(saved, PLAIT_OK);
    snprintf(dir, sizeof dir, "%s/ckpt-00000002", out);
    FILE *sink = tmpfile();
    assert_non_null(sink);
    plait_sample_options o = {.checkpoint = dir, .prompt = "", .tokens = 1};
    assert_int_not_equal(plait_sample(&o, sink), PLAIT_OK);
    assert_error_contains("model.safetensors (metadata plait.model.*):4: key 'n_head'");
    assert_error_contains("n_head");
    if (strstr(plait_last_error(), "command line")) fail_msg("blames the command line: %s", plait_last_error());
    snprintf(file, sizeof file, "%s/model.safetensors", dir);
    o.checkpoint = file;
    assert_int_equal(plait_sample(&o, sink), PLAIT_ERR_INVALID_ARG);
    assert_error_contains("is a file; plait sample reads a checkpoint directory");
    assert_error_contains(dir);
    fclose(sink);
}

int main(void) {
    build_spec();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_shard_mapping),
        cmocka_unit_test(test_value_source),
        cmocka_unit_test(test_crash_keeps_previous),
        cmocka_unit_test(test_refuses_damage),
        cmocka_unit_test(test_state_formats),
        cmocka_unit_test(test_prune),
        cmocka_unit_test(test_prune_keeps_what_a_resume_needs),
        cmocka_unit_test(test_prune_and_save_never_follow_links),
        cmocka_unit_test(test_missing_marker_says_why),
        cmocka_unit_test(test_writer_misuse),
        cmocka_unit_test(test_refuses_special_files),
        cmocka_unit_test(test_refuses_non_finite),
        cmocka_unit_test(test_tensor_crc_behind_manifest),
        cmocka_unit_test(test_sample_blames_the_checkpoint),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
