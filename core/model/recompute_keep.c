/*
 * What each [model] recompute mode keeps of a block's activations, and the
 * buffers the dropped parts share (recompute.c says what the modes are and
 * how the backward refills them). The slots (model_slots.c) lay out their
 * memory with it; it calls nothing of the model's above it.
 */
#include <stddef.h>

#include "model/model_bodies.h"

#define ALIGN_FLOATS 16

static size_t align_up(size_t n) { return (n + ALIGN_FLOATS - 1) / ALIGN_FLOATS * ALIGN_FLOATS; }

/* The parts of a block's acts: the float32 pointer, and the bf16 one that
 * holds the part under bf16 activations (NO_BF16: float32 there too); the
 * architectures that have the part, and those whose selective mode drops
 * it too (G gpt, M mlp, L llama). */
#define NO_BF16 ((size_t)-1)
enum { G = 1, M = 2, L = 4 };
typedef struct part {
    size_t field, bf_field;
    unsigned archs;
    unsigned selective;
} part;

#define F32(f) offsetof(block_acts, f), NO_BF16
#define BF16(f) offsetof(block_acts, f), offsetof(block_acts, bf.f)
/* the llama arch: fch and fcg are gate's and up's outputs, swi SwiGLU's,
 * which its selective mode rebuilds from them; under bf16 activations
 * bf.gu holds gate's and up's side by side instead (llama_bf16.c), a
 * part of its own, bf16 only */
static const part parts[] = {
    {BF16(ln1), G | L, 0},
    {F32(ln1_mean), G, 0},
    {F32(ln1_rstd), G | L, 0},
    {BF16(qkv), G | L, 0},
    {F32(att), G, G},
    {BF16(atty), G | L, 0},
    {F32(res2), G | L, 0},
    {BF16(ln2), G | M | L, 0},
    {F32(ln2_mean), G | M, 0},
    {F32(ln2_rstd), G | M | L, 0},
    {BF16(fch), G | M | L, 0},
    {BF16(fcg), G | M | L, G | M},
    {F32(lse), G | L, 0},
    {BF16(swi), L, L},
    {offsetof(block_acts, bf.gu), offsetof(block_acts, bf.gu), L, 0},
    {BF16(qkn), L, 0},
    {F32(qk_rstd), L, 0},
};

static unsigned arch_of(const plait_model *m) { return m->desc->is_gpt ? G : m->desc->is_llama ? L : M; }
#undef BF16
#undef F32
#define N_PARTS (sizeof parts / sizeof parts[0])

static const part *find_part(size_t field) {
    for (size_t i = 0; i < N_PARTS; i++)
        if (parts[i].field == field) return &parts[i];
    return NULL;
}

/* Elements of a part (of its bf16 form or its float32 one: the same count). */
static size_t part_elems(const plait_model *m, size_t field) {
    const int64_t BT = m->B * m->T, C = m->C;
    const int llama_bf16 = m->desc->is_llama && m->bf16;
    /* sequence parallelism splits the residual stream, the norms'
     * statistics and (but the llama arch's float32 ones) their outputs: m->R rows */
    if (field == offsetof(block_acts, ln1) || field == offsetof(block_acts, ln2))
        return (size_t)((m->desc->is_llama && !m->bf16 ? BT : m->R) * C);
    /* the llama arch: gate's and up's outputs apart in float32, side by side in bf16 */
    if (field == offsetof(block_acts, bf.gu)) return llama_bf16 ? (size_t)(2 * BT * m->Fl) : 0;
    if ((field == offsetof(block_acts, fch) || field == offsetof(block_acts, fcg)) && llama_bf16) return 0;
    if (field == offsetof(block_acts, res2)) return (size_t)(m->R * C);
    /* [model] qk_norm: q's heads and k's before their norms, and their deviations (qk_norm.c) */
    if (field == offsetof(block_acts, qkn)) return m->desc->qk_norm ? (size_t)plait_qk_norm_heads(m) : 0;
    if (field == offsetof(block_acts, qk_rstd)) return m->desc->qk_norm ? (size_t)plait_qk_norm_rows(m) : 0;
    if (field == offsetof(block_acts, qkv)) return (size_t)(BT * (m->desc->is_llama ? m->Wq : 3 * m->Cl));
    /* a model has the probabilities or, with fused attention, the rows' log-sum-exp */
    if (field == offsetof(block_acts, att)) return m->fused_attn ? 0 : (size_t)(m->B * m->NHl * m->T * m->T);
    if (field == offsetof(block_acts, lse)) return m->fused_attn ? (size_t)(m->B * m->NHl * m->T) : 0;
    if (field == offsetof(block_acts, atty)) return (size_t)(BT * m->Cl);
    if (field == offsetof(block_acts, fch) || field == offsetof(block_acts, fcg) || field == offsetof(block_acts, swi))
        return (size_t)(BT * m->Fl);
    return (size_t)m->R; /* means and reciprocal deviations */
}

static int part_bf16(const plait_model *m, const part *p) { return m->bf16 && p->bf_field != NO_BF16; }

/* Floats a part takes, aligned: a bf16 part two elements a float. */
static size_t part_floats(const plait_model *m, const part *p) {
    const size_t n = part_elems(m, p->field);
    return align_up(part_bf16(m, p) ? (n + 1) / 2 : n);
}

/* Points part p of `a` at `at`, in the part's type. */
static void part_point(const plait_model *m, const part *p, block_acts *a, float *at) {
    if (part_bf16(m, p)) *(plait_bf16 **)(void *)((char *)a + p->bf_field) = (plait_bf16 *)(void *)at;
    else *(float **)(void *)((char *)a + p->field) = at;
}

/* Where part p of `a` points (as floats: the start of its buffer). */
static float *part_at(const plait_model *m, const part *p, block_acts *a) {
    if (part_bf16(m, p)) return (float *)(void *)*(plait_bf16 **)(void *)((char *)a + p->bf_field);
    return *(float **)(void *)((char *)a + p->field);
}

static int dropped(const plait_model *m, const part *p) {
    if (!(p->archs & arch_of(m))) return 0;
    if (part_elems(m, p->field) == 0) return 0; /* a part this model does not have */
    switch (m->desc->recompute) {
        case PLAIT_RECOMPUTE_FULL:
            return 1;
        case PLAIT_RECOMPUTE_SELECTIVE:
            return (p->selective & arch_of(m)) != 0;
        default:
            return 0;
    }
}

int plait_recompute_keeps(const plait_model *m, size_t which) {
    const part *p = find_part(which);
    return !p || !dropped(m, p);
}

size_t plait_recompute_floats(const plait_model *m) {
    size_t n = 0;
    for (size_t i = 0; i < N_PARTS; i++)
        if (dropped(m, &parts[i])) n += part_floats(m, &parts[i]);
    return n;
}

void plait_recompute_carve(plait_model *m, float *base) {
    size_t off = 0;
    for (size_t i = 0; i < N_PARTS; i++) {
        if (!dropped(m, &parts[i])) continue;
        part_point(m, &parts[i], &m->rc, base + off);
        off += part_floats(m, &parts[i]);
    }
}

void plait_recompute_share(plait_model *m, block_acts *a) {
    for (size_t i = 0; i < N_PARTS; i++)
        if (dropped(m, &parts[i])) part_point(m, &parts[i], a, part_at(m, &parts[i], &m->rc));
}
