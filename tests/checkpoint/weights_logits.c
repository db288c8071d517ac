/*
 * Not a test: the logits plait computes for a weights file, for
 * tests/e2e/test_weights_torch.sh to hold against PyTorch's.
 *   weights_logits WEIGHTS TOKENS OUT n_layer n_head n_embd block_size vocab_size [KEY=VALUE ...]
 * WEIGHTS: anything [run] init_from reads. TOKENS: a safetensors file whose
 * "tokens" tensor is [B, T] token ids (as F32). OUT: a safetensors file
 * with "logits" [B, T, vocab_size] (F32). KEY=VALUE: more [model] keys
 * (arch=llama n_kv_head=2 ffn_hidden=176, for tests/e2e/test_llama_torch.sh).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint/weights_import.h"
#include "model/model_harness.h"
#include "runtime/error.h"
#include "checkpoint/safetensors.h"

static int die(const char *what) {
    fprintf(stderr, "weights_logits: %s: %s\n", what, plait_last_error());
    return 1;
}

int main(int argc, char **argv) {
    if (argc < 9) {
        fprintf(stderr, "usage: weights_logits WEIGHTS TOKENS OUT n_layer n_head n_embd block_size vocab_size "
                        "[KEY=VALUE ...]\n");
        return 2;
    }
    plait_st_file *in = NULL;
    if (plait_st_open(argv[2], 0, &in) != PLAIT_OK) return die(argv[2]);
    const plait_st_tensor *tok = plait_st_find(in, "tokens");
    if (!tok || tok->ndim != 2) {
        fprintf(stderr, "weights_logits: %s: no 2-D 'tokens'\n", argv[2]);
        return 1;
    }
    const int B = (int)tok->shape[0], T = (int)tok->shape[1];
    char ini[2048];
    size_t len = (size_t)snprintf(ini, sizeof ini,
                                  "[model]\nn_layer = %s\nn_head = %s\nn_embd = %s\nblock_size = %s\nvocab_size = %s\n",
                                  argv[4], argv[5], argv[6], argv[7], argv[8]);
    for (int a = 9; a < argc && len < sizeof ini; a++) {
        const char *eq = strchr(argv[a], '=');
        if (!eq) {
            fprintf(stderr, "weights_logits: '%s' is not KEY=VALUE\n", argv[a]);
            return 2;
        }
        len += (size_t)snprintf(ini + len, sizeof ini - len, "%.*s = %s\n", (int)(eq - argv[a]), argv[a], eq + 1);
    }
    harness h;
    if (harness_init(&h, ini, B, 1, 0, NULL) != 0 || h.T != T) {
        fprintf(stderr, "weights_logits: the model does not take [%d, %d] tokens\n", B, T);
        return 1;
    }
    plait_weights *w = NULL;
    if (plait_weights_open(argv[1], h.spec, h.cfg, &w) != PLAIT_OK) return die(argv[1]);
    for (int32_t i = 0; i < h.set.n_params; i++) {
        plait_param *p = &h.set.params[i];
        if (!(p->flags & PLAIT_PARAM_TIED_COPY) && plait_weights_read(w, p, 0, p->numel, p->data) != PLAIT_OK)
            return die(p->name);
    }
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)(B * T));
    if (!ids) return 1;
    for (int i = 0; i < B * T; i++) ids[i] = (int32_t)tok->data[i];
    if (harness_forward(&h, ids, ids) != PLAIT_OK) return die("forward");
    int64_t shape[3] = {B, T, h.V};
    plait_st_writer *out = NULL;
    if (plait_st_writer_create(argv[3], &out) != PLAIT_OK || plait_st_writer_declare(out, "logits", 3, shape) != PLAIT_OK ||
        plait_st_writer_write(out, "logits", plait_model_logits(h.model, 0), (size_t)(B * T * h.V)) != PLAIT_OK ||
        plait_st_writer_finish(out, NULL) != PLAIT_OK || plait_st_writer_commit(out) != PLAIT_OK)
        return die(argv[3]);
    free(ids);
    plait_weights_close(w);
    plait_st_close(in);
    harness_free(&h);
    return 0;
}
