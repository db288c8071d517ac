/* What a tokenizer.json's pre-tokenizer and post-processor ask for, as far
 * as plait implements it: GPT-2's ByteLevel, Llama 3's and Qwen2's Split +
 * ByteLevel, and a TemplateProcessing that puts one special token before
 * the text.
 * Anything else is refused with the JSON path of what plait does not do,
 * since encoding with another pattern would give other ids silently. */
#include <stdio.h>
#include <string.h>

#include "runtime/error.h"
#include "tokenizer/tokenizer_internal.h"
#include "checkpoint/safetensors_json.h"

static int is_string(const plait_json *j, const char *s) {
    return j && j->type == PLAIT_JSON_STRING && strcmp(j->str, s) == 0;
}

static const char *type_of(const plait_json *j) {
    const plait_json *type = plait_json_get(j, "type");
    return type && type->type == PLAIT_JSON_STRING ? type->str : "(no type)";
}

/* A boolean that must be `want` when present (absent: `absent`). */
static plait_status flag(const plait_json *obj, const char *key, int want, int absent, const char *path,
                         const char *meaning, const char *what) {
    const plait_json *v = plait_json_get(obj, key);
    int have = !v || v->type == PLAIT_JSON_NULL ? absent : v->type == PLAIT_JSON_BOOL ? (int)v->num : -1;
    if (have == want) return PLAIT_OK;
    return plait_set_error(PLAIT_ERR_PROTOCOL, "%s: byte %zu: %s.%s must be %s here: %s", what, v ? v->pos : obj->pos,
                           path, key, want ? "true" : "false", meaning);
}

/* {"type": "ByteLevel", ...}: GPT-2's pattern inside it (use_regex true) or
 * none (false, after Llama 3's Split); never a space added before the text. */
static plait_status byte_level(const plait_json *b, int use_regex, const char *path, const char *what) {
    plait_status st = flag(b, "add_prefix_space", 0, 0, path, "plait never adds a space before the text", what);
    if (st == PLAIT_OK)
        st = flag(b, "use_regex", use_regex, 1, path,
                  use_regex ? "a ByteLevel alone splits with GPT-2's pattern, the only one plait pairs it with"
                            : "after a Split, a second split by GPT-2's pattern is not something plait does",
                  what);
    return st;
}

/* Llama 3's: [{"type": "Split", "pattern": {"Regex": ...}, "behavior":
 * "Isolated", "invert": false}, {"type": "ByteLevel", "use_regex": false}];
 * Qwen2's the same with its pattern. */
static plait_status sequence(const plait_json *pre, const char *what, plait_pretokenizer *out) {
    const plait_json *list = plait_json_get(pre, "pretokenizers");
    if (!list || list->type != PLAIT_JSON_ARRAY || list->count != 2)
        return plait_set_error(PLAIT_ERR_PROTOCOL,
                               "%s: byte %zu: pre_tokenizer.pretokenizers: plait reads a Sequence "
                               "of exactly a Split (Llama 3's or Qwen2's pattern) and a ByteLevel",
                               what, list ? list->pos : pre->pos);
    const plait_json *split = list->child, *bl = list->child->next;
    if (strcmp(type_of(split), "Split") != 0)
        return plait_set_error(PLAIT_ERR_PROTOCOL,
                               "%s: byte %zu: pre_tokenizer.pretokenizers[0] is \"%s\"; plait "
                               "reads a Split with Llama 3's or Qwen2's pattern there",
                               what, split->pos, type_of(split));
    const plait_json *pattern = plait_json_get(split, "pattern");
    const plait_json *regex = plait_json_get(pattern, "Regex");
    if (!regex || regex->type != PLAIT_JSON_STRING)
        return plait_set_error(PLAIT_ERR_PROTOCOL,
                               "%s: byte %zu: pre_tokenizer.pretokenizers[0].pattern must be "
                               "{\"Regex\": ...} (a plain \"String\" pattern is not supported)",
                               what, pattern ? pattern->pos : split->pos);
    const int qwen2 = strcmp(regex->str, plait_pretokenize_qwen2_pattern) == 0;
    if (!qwen2 && strcmp(regex->str, plait_pretokenize_llama3_pattern) != 0)
        return plait_set_error(PLAIT_ERR_PROTOCOL,
                               "%s: byte %zu: pre_tokenizer.pretokenizers[0].pattern.Regex "
                               "\"%.200s\" is not a pattern plait implements (Llama 3's is "
                               "\"%s\", Qwen2's \"%s\")",
                               what, regex->pos, regex->str, plait_pretokenize_llama3_pattern,
                               plait_pretokenize_qwen2_pattern);
    const plait_json *behavior = plait_json_get(split, "behavior");
    if (!is_string(behavior, "Isolated"))
        return plait_set_error(PLAIT_ERR_PROTOCOL,
                               "%s: byte %zu: pre_tokenizer.pretokenizers[0].behavior must be "
                               "\"Isolated\" (each match its own piece)",
                               what, behavior ? behavior->pos : split->pos);
    plait_status st = flag(split, "invert", 0, 0, "pre_tokenizer.pretokenizers[0]",
                           "an inverted split keeps what lies between the matches", what);
    if (st == PLAIT_OK && strcmp(type_of(bl), "ByteLevel") != 0)
        st = plait_set_error(PLAIT_ERR_PROTOCOL,
                             "%s: byte %zu: pre_tokenizer.pretokenizers[1] is \"%s\"; plait "
                             "reads a ByteLevel there",
                             what, bl->pos, type_of(bl));
    if (st == PLAIT_OK) st = byte_level(bl, 0, "pre_tokenizer.pretokenizers[1]", what);
    if (st == PLAIT_OK) *out = qwen2 ? PLAIT_PRETOK_QWEN2 : PLAIT_PRETOK_LLAMA3;
    return st;
}

plait_status plait_hf_pre_tokenizer(const plait_json *root, const char *what, plait_pretokenizer *out) {
    *out = PLAIT_PRETOK_GPT2;
    const plait_json *pre = plait_json_get(root, "pre_tokenizer");
    if (!pre || pre->type == PLAIT_JSON_NULL) return PLAIT_OK;
    if (is_string(plait_json_get(pre, "type"), "ByteLevel")) return byte_level(pre, 1, "pre_tokenizer", what);
    if (is_string(plait_json_get(pre, "type"), "Sequence")) return sequence(pre, what, out);
    return plait_set_error(PLAIT_ERR_PROTOCOL,
                           "%s: byte %zu: pre_tokenizer.type \"%s\" is not supported; plait reads "
                           "ByteLevel (GPT-2's) or a Sequence of a Split with Llama 3's or Qwen2's pattern "
                           "and a ByteLevel",
                           what, pre->pos, type_of(pre));
}

/* TemplateProcessing's "single": special tokens, then {"Sequence": {"id":
 * "A"}}; plait puts at most one token first and none after. */
static plait_status template_first(plait_tokenizer *t, const plait_json *tp, const char *path, const char *what) {
    const plait_json *single = plait_json_get(tp, "single");
    if (!single || single->type != PLAIT_JSON_ARRAY)
        return plait_set_error(PLAIT_ERR_PROTOCOL, "%s: byte %zu: %s.single must be an array", what, tp->pos, path);
    size_t i = 0;
    const plait_json *special = NULL;
    int text = 0;
    for (const plait_json *p = single->child; p; p = p->next, i++) {
        const plait_json *seq = plait_json_get(p, "Sequence"), *sp = plait_json_get(p, "SpecialToken");
        if (!text && seq && is_string(plait_json_get(seq, "id"), "A")) {
            text = 1;
            continue;
        }
        if (text || !sp || special)
            return plait_set_error(PLAIT_ERR_PROTOCOL,
                                   "%s: byte %zu: %s.single[%zu]: plait's encoding puts the text "
                                   "({\"Sequence\": {\"id\": \"A\"}}) with at most one special token before "
                                   "it and none after it",
                                   what, p->pos, path, i);
        special = sp;
    }
    if (!text)
        return plait_set_error(PLAIT_ERR_PROTOCOL,
                               "%s: byte %zu: %s.single has no {\"Sequence\": {\"id\": \"A\"}}: where the "
                               "text goes is not said",
                               what, single->pos, path);
    if (!special) return PLAIT_OK;
    const plait_json *first = plait_json_get(special, "id");
    const char *name = first && first->type == PLAIT_JSON_STRING ? first->str : NULL;
    const plait_json *named = name ? plait_json_get(plait_json_get(tp, "special_tokens"), name) : NULL;
    const plait_json *ids = plait_json_get(named, "ids");
    if (!ids || ids->type != PLAIT_JSON_ARRAY || ids->count != 1 || ids->child->type != PLAIT_JSON_INT ||
        ids->child->num < 0 || ids->child->num >= t->n_ids)
        return plait_set_error(PLAIT_ERR_PROTOCOL,
                               "%s: byte %zu: %s.special_tokens must give the token %s put "
                               "first one id of the vocabulary (\"ids\": [N], N below %d)",
                               what, named ? named->pos : special->pos, path, name ? name : "?", t->n_ids);
    t->bos = (int32_t)ids->child->num;
    return PLAIT_OK;
}

plait_status plait_hf_post_processor(plait_tokenizer *t, const plait_json *root, const char *what) {
    const plait_json *post = plait_json_get(root, "post_processor");
    if (!post || post->type == PLAIT_JSON_NULL) return PLAIT_OK;
    /* Llama 3's is a Sequence of a ByteLevel (offsets only) and a template */
    const plait_json *list = is_string(plait_json_get(post, "type"), "Sequence") ? plait_json_get(post, "processors")
                                                                                 : NULL;
    const plait_json *one = list && list->type == PLAIT_JSON_ARRAY ? list->child : post;
    size_t i = 0;
    char path[64];
    for (; one; one = list ? one->next : NULL, i++) {
        snprintf(path, sizeof path, list ? "post_processor.processors[%zu]" : "post_processor", i);
        const char *type = type_of(one);
        plait_status st = PLAIT_OK;
        if (!strcmp(type, "TemplateProcessing")) st = template_first(t, one, path, what);
        else if (strcmp(type, "ByteLevel") != 0)
            st = plait_set_error(PLAIT_ERR_PROTOCOL,
                                 "%s: byte %zu: %s.type \"%s\" is not supported; plait reads "
                                 "ByteLevel and TemplateProcessing (or a Sequence of them)",
                                 what, one->pos, path, type);
        if (st != PLAIT_OK) return st;
    }
    return PLAIT_OK;
}
