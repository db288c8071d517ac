/*
 * Activation memory of the GPT model as it keeps it (model/model_slots.c,
 * model/recompute.c's recompute modes), in bytes, from the layer range a
 * model chunk holds. Both the cost of a rank from its plugin's plan
 * (rank_cost.h) and the cost of a stage from the model's shape alone
 * (stages.h) use it. Pure arithmetic; thread-safe.
 *
 * Per block and micro-batch this is Korthikanti et al.'s count ("Reducing
 * Activation Recomputation in Large Transformer Models", 2022) for a model
 * without dropout: 16·s·b·h elements plus a·s²·b for the attention
 * probabilities (their 34·s·b·h + 5·a·s²·b bytes at 2 bytes an element,
 * less the dropout masks and outputs); selective recomputation drops the
 * probabilities (and, as plait does, the GELU output), full keeps the
 * block's input alone. A fused attention (the model uses the device's
 * when its kernel table has one) keeps a·s·b log-sum-exps instead of the
 * probabilities, and its backward recomputes the scores in every mode. With tensor parallelism the head-split and
 * column-split tensors shrink by t, the LayerNorm inputs do not. With
 * sequence parallelism (Korthikanti et al.'s section 4.2.2) they do too:
 * the LayerNorms' inputs and statistics, the residual stream at
 * every boundary and its gradient, each cut along the
 * sequence over the t ranks (their sbh/t·(34 + 5as/h), without the
 * dropout), and such a layout is counted as the model's sequence-parallel
 * path keeps it: bf16 on a bf16 run where the device has the bf16 path,
 * its messages bf16 too.
 *
 * Where the model stores its activations in bf16 (plait_model_grants_bf16:
 * a bf16 run of the gpt arch on a device whose kernels have the bf16
 * path, without context parallelism, in any recompute mode, under tp and
 * sequence parallelism too) the tensors the products read and write take
 * 2 bytes an element (LayerNorm outputs, q/k/v, the attention output,
 * GELU's input and output, the logits without tp, the backward scratch of
 * the products' gradients, a split backward's stash); the residual stream
 * and its gradient, LayerNorm's statistics, the log-sum-exps and the
 * losses stay float32, and under tp the head (vocabulary-parallel) with a
 * float32 gradient buffer for the group's collectives. Elsewhere every
 * activation is float32. The norms' outputs are kept gathered under
 * sequence parallelism (the column-parallel products read every row).
 */
#ifndef PLAIT_CORE_COST_ACTIVATIONS_H
#define PLAIT_CORE_COST_ACTIVATIONS_H

#include <stdint.h>
#include <plait/device.h>
#include <plait/kernels.h>
#include <plait/model.h>

#include "config/config.h"

/* What a device's kernels change in a rank's activations, for one model
 * (its sequence length T and head size HS). The cost model never opens a
 * device: its caller describes the one the ranks use. */
typedef struct plait_cost_device {
    int bf16_path;      /* the kernels run the GPT's bf16-activation path (plait_model_kernels_bf16) */
    int llama_bf16_path; /* ... and the llama arch's (plait_model_kernels_llama_bf16) */
    int ring_bf16;       /* ... and ring attention on bf16 (PLAIT_KERNELS_HAS_RING_ATTENTION_BF16) */
    int moe_bf16;        /* ... and the experts' bf16 entries (PLAIT_KERNELS_HAS_MOE_BF16, from_bf16) */
    double att_scratch; /* floats of the fused attention's scratch per sequence and head
                           (the table's attention_fused_scratch(1, T, 1, HS)) */
    /* products of a (query tile, key tile) pair in the fused attention's
     * backward: 5 on the CPU (the scores again, dV, dP, dQ, dK), 7 on
     * cuda, whose deterministic dQ kernel computes the scores and dP once
     * more (plugins/device/cuda/attention.cu); 0 = 5 */
    double att_backward_products;
    /* it widens bf16 tensors back (from_bf16, SDK 1.23): a bf16 run's tp
     * collectives and pipeline sends cross a comm plugin that moves device
     * memory itself (nccl) as bf16 tensors, else float32 there
     * (docs/parallelism.md, "What crosses ranks, and in which type") */
    int bf16_tensors;
    /* its memory is its own, not the host's (a GPU; the sim test device):
     * [model] recompute_offload moves bytes off it, where on the cpu
     * device, whose memory is host memory, train refuses the key */
    int own_memory;
} plait_cost_device;

/* The device whose kernel table is `k` (an open device's, or the core's
 * CPU kernels, which the cpu device runs). */
void plait_cost_device_of(const plait_kernels *k, int64_t T, int64_t HS, plait_cost_device *out);
/* The cuda device, for planning a GPU cluster without one: its table has
 * the bf16 path, and its fused attention keeps one float per row of scores
 * (B·NH·T: plugins/device/cuda/kernels.c, k_attention_fused_scratch).
 * test_cost_device checks this against the plugin's own table. */
void plait_cost_device_cuda(int64_t T, int64_t HS, plait_cost_device *out);

/* What a rank's activations depend on besides the model. */
typedef struct plait_cost_shape_in {
    double B;                   /* sequences a micro-batch */
    int tp;                     /* the tp group's size */
    int tensor_parallel;        /* its plan cuts layers over tp ranks (plan->tp_ops: tp > 1 with plait's plugins) */
    double vocab_padded;        /* the vocabulary padded for tp (0 = unpadded) */
    int recompute;              /* 0 none, 1 selective, 2 full */
    int split;                  /* the schedule splits backwards into input and weight halves (zb1) */
    int sp;                     /* sequence parallelism over the tp group (tp > 1) */
    int cp;                     /* context parallelism: the rank keeps T / cp of each sequence (0 = 1) */
    plait_precision precision;  /* the run's */
    const plait_cost_device *device;
    int residual_bf16; /* [run] residual = bf16 (the model takes it on a bf16 run, from_bf16 kernels) */
    int offload;       /* [model] recompute_offload = host (the model takes it under recompute full, on a device
                          with memory of its own) */
} plait_cost_shape_in;

/* The shapes one rank's activations have. */
typedef struct plait_cost_shape {
    double B, T, C;   /* micro-batch, this rank's share of the sequence (T / cp), width */
    double cp;        /* context parallelism (1 without): the whole sequence is T x cp */
    double Cl, NHl;   /* this rank's attention width and heads (C/tp, n_head/tp) */
    double Fl, Vl;    /* its MLP width (4C/tp) and vocabulary slice */
    int L, gpt;       /* blocks; the GPT model (else the MLP test model, or llama) */
    int llama;        /* the llama arch (float32, recompute none: model/llama_layers.c) */
    double Wq;        /* llama: a row of q, k and v ((NHl + 2·n_kv_head/tp)·HS) */
    double NKVl;      /* llama: this rank's key/value heads */
    int qk_norm;      /* llama: q's and k's heads have norms ([model] qk_norm, model/qk_norm.h) */
    int recompute;    /* 0 none, 1 selective, 2 full */
    int split;        /* the schedule splits backwards into input and weight halves (zb1) */
    int fused;        /* fused attention: each row's log-sum-exp, no probabilities (GPT, head size <=
                         PLAIT_ATTENTION_FUSED_MAX_HS: plait's devices all have it) */
    double HS;        /* head size */
    double att_scratch; /* the fused attention's scratch floats per sequence and head (the device's) */
    double att_bwd;     /* the fused attention's backward products a tile pair (the device's; 5 without one) */
    int bf16;         /* the model stores this rank's activations in bf16 (plait_model_grants_bf16) */
    int res16;        /* the residual stream rounded to bf16, the slots' own boundaries stored so */
    int offload;      /* recompute full with [model] recompute_offload = host: those boundaries in host memory */
    int bf16_head;    /* and its head's (without tensor parallelism) */
    int moe_kernels;  /* the device has the experts' bf16 entries (plait_cost_experts_bf16 decides) */
    int sp;           /* sequence parallelism: the tensors outside the tp-split regions are cut by q */
    double q;         /* the tp group's size under sequence parallelism, else 1 */
} plait_cost_shape;

/* Shapes of a rank of the model `spec` (the gpt arch's bf16 copy and
 * grant use its parameters and arch). */
void plait_cost_shape_init(plait_cost_shape *s, const plait_model_spec *spec, const plait_cost_shape_in *in);

/* Bytes an element of a TP collective or a pipeline message takes: the
 * activations' own under sequence parallelism (bf16 where granted), else
 * float32, as the model sends them now. */
double plait_cost_message_bytes(const plait_cost_shape *s);

/* Bytes one activation slot holds for layers [first, last] of the model
 * (0 = embedding, 1..L blocks, L+1 head): token and target ids, the
 * residual stream at every boundary the slot touches but the output of a
 * chunk that ends before the head (sent on from a buffer of the boundary
 * pool), each block's saved tensors and, with the head, its logits. */
double plait_cost_slot_bytes(const plait_cost_shape *s, int first, int last);
/* Bytes of pinned host memory one slot holds for layers [first, last]
 * under [model] recompute_offload = host (model/model_slots.c, host_carve):
 * the boundaries plait_cost_slot_bytes then leaves out; 0 without. Each is
 * copied out after its forward and back before its backward. */
double plait_cost_slot_host_bytes(const plait_cost_shape *s, int first, int last);
/* Bytes of one buffer of the model's boundary pool (model/model_slots.c):
 * a boundary's residual stream in float32, its gradient or a sent output;
 * cost/stages.c counts the buffers a stage's schedule holds at its peak. */
double plait_cost_boundary_bytes(const plait_cost_shape *s);

/* Ring attention's traffic (cp > 1; nothing otherwise) for `blocks`
 * blocks and `micro_batches` micro-batches a step: r's cp_passes,
 * cp_msg_elems, cp_hide_flops and cp_tail_msgs (cost.h says what each
 * is). A pass's transfer is this rank's K and V (its kv heads only under
 * grouped-query attention), 2·B·(T/cp)·n_kv_head/tp·HS elements; a
 * block of the ring is (T/cp)² of the attention's scores. */
struct plait_cost_rank;

/* Bytes one rank sends a step in expert parallelism's trades (ep > 1; 0
 * otherwise), `tokens` its tokens a micro-batch, k routes each, C wide, E
 * experts over ep ranks, `sparse_blocks` local sparse blocks: per block and
 * micro-batch the forward's dispatch and combine and the backward's two,
 * each the (ep - 1)/ep of the rank's tokens·k rows of C float32 that leave
 * it when the routes spread evenly, and the forward's row counts (E/ep
 * int32 to each of the other ep - 1 ranks). core/model/moe.c moves these. */
double plait_cost_ep_bytes(double tokens, int64_t k, int64_t C, int64_t E, int ep, double sparse_blocks,
                           double micro_batches);

/* A mixture of experts as the cost model reads it: E routed experts (0:
 * a dense model), k routes a token, F an expert's width, S shared experts. */
typedef struct plait_cost_moe {
    int64_t E, k, F, S;
    int llama; /* the Llama family's experts: gate, up and down, no biases */
} plait_cost_moe;

/* The model's experts from `cfg` (finalized; F the dense MLP's
 * `ffn_hidden` where moe_ffn_hidden is 0, as the model takes it). */
void plait_cost_moe_of(const plait_config *cfg, int64_t ffn_hidden, plait_cost_moe *out);

/* 1 if a rank of shape s at tensor parallelism tp runs its experts in
 * bf16 (the model's plait_model_moe_bf16 under granted bf16 activations):
 * their rows, hidden tensors, held rows, the rows' gradients and the ep
 * trades take 2 bytes an element, and their weights a bf16 copy. */
int plait_cost_experts_bf16(const plait_cost_moe *moe, const plait_cost_shape *s, int tp);

/* Bytes a sparse block keeps at ep > 1 (0 otherwise) for the rows other
 * ranks' tokens bring to this rank's experts, per micro-batch alive
 * (model/moe.c's held rows, in the device's memory: each row's input, C
 * wide, its three F-wide hidden tensors (two under selective; the outputs
 * the combine sends back are a buffer the blocks share,
 * plait_cost_moe_scratch_bytes),
 * float32, or bf16 where plait_cost_experts_bf16; in host memory the block's 72-byte head and the E int32 row
 * counts, as held_alloc allocates them; the rows' gradients are in the
 * backward's scratch, plait_cost_moe_scratch_bytes, but under a split
 * backward each row's output gradients at its products, C and F wide
 * (llama: C and 2F), kept beside it to the weight half). Balanced
 * routing assumed (the planner cannot know the router's skew): a rank's
 * experts receive B·T·k rows a micro-batch, as many as its tokens send. */
double plait_cost_held_bytes(const plait_cost_moe *moe, const plait_cost_shape *s, int tp, int ep);

/* Bytes of plait_cost_slot_bytes' block that a sparse block's slot does
 * not keep (model/model_slots.c): the dense MLP's products' parts, and
 * under bf16 activations its norm's bf16 output (model/moe_bf16.c
 * rebuilds it in float32); under a split backward, the dense MLP's
 * stashed output gradients (the sparse block keeps its own:
 * plait_cost_moe_split_bytes), under bf16 activations less the float32
 * norm output gradient it stashes instead. */
double plait_cost_sparse_unkept_bytes(const plait_cost_shape *s);

/* Bytes a sparse block keeps per micro-batch alive (model/moe.c's
 * moe_acts: the router's logits and scores, each route's choice, gate and
 * rows, the permuted inputs and outputs, the experts' hidden tensors at
 * this tp rank's width F/tp (at ep > 1 the outputs alone: the holders keep
 * the hidden tensors, plait_cost_held_bytes, and the inputs the dispatch
 * sends are a buffer the blocks share), the shared experts'; under selective without
 * the activation function's outputs; the rows and hidden tensors bf16
 * where plait_cost_experts_bf16, with the shared experts' bf16 input),
 * and the backward's
 * scratch all sparse blocks share (once a rank; at ep > 1 with each ep
 * source's gradients of the rank's experts: the Llama family's 3·F·C
 * floats an expert, the GPT's 2·F·C + F + C, and the held rows' output
 * and input gradients, 2·C floats a row of B·T·k (bf16 where the experts
 * run bf16, and the rows the dispatch sends and those the held experts
 * send back, B·T·k rows of C each; under bf16 activations with the sparse
 * halves' float32 norm output and its gradient, model/moe_bf16.c, and
 * where the llama arch's experts run bf16 N·k·C floats for their gate's
 * and up's input gradients); 0 for a dense model. */
double plait_cost_moe_acts_bytes(const plait_cost_moe *moe, const plait_cost_shape *s, int tp, int ep);
/* Bytes one sparse block's slot keeps between the halves of a split
 * backward whatever [model] recompute drops (model/moe.c's kept_carve):
 * the output gradients at its products, the block's, the router's
 * logits', each of the B·T·k rows' at both expert products (llama: gate's
 * and up's apart; at ep > 1 the holder keeps those, plait_cost_held_bytes),
 * the shared experts'; where the experts run bf16 (plait_cost_experts_bf16)
 * the rows' and the shared experts' in bf16, the first product's as one
 * tensor; 0 without a split or experts. */
double plait_cost_moe_split_bytes(const plait_cost_moe *moe, const plait_cost_shape *s, int tp, int ep);
/* What [model] recompute leaves of the sparse blocks once a rank, in the
 * buffers they share (model/moe.c): under full one block's moe_acts and
 * held rows (the per-block counts above and plait_cost_held_bytes then
 * count none), under selective the experts' activation function outputs
 * of one block (at ep > 1 the held rows' in place of this rank's routed
 * rows'); 0 under none.
 * The held part alone: plait_cost_held_shared_bytes. */
double plait_cost_moe_shared_bytes(const plait_cost_moe *moe, const plait_cost_shape *s, int tp, int ep);
double plait_cost_held_shared_bytes(const plait_cost_moe *moe, const plait_cost_shape *s, int tp, int ep);
double plait_cost_moe_scratch_bytes(const plait_cost_moe *moe, const plait_cost_shape *s, int tp, int ep);

/* Sets r's ep fields for `sparse` local sparse blocks and m micro-batches
 * a step (plait_cost_rank: ep_msgs, ep_bytes; plait_cost_ep_bytes), the
 * forward's trades twice under recompute = full. */
void plait_cost_ep_traffic(const plait_cost_moe *moe, const plait_cost_shape *s, int ep, double sparse, double m,
                           struct plait_cost_rank *r);

void plait_cost_ring_traffic(const plait_cost_shape *s, double blocks, double micro_batches, struct plait_cost_rank *r);

/* Bytes of the backward scratch all slots share, the fused attention's
 * scratch, and under recompute the one block's worth of dropped tensors
 * it recomputes into. */
double plait_cost_scratch_bytes(const plait_cost_shape *s);

/* FLOPs per token of one block in a step, from its forward count f
 * (model_desc: the products' 2 FLOPs a weight and attention's 4·T·C, QKᵀ
 * and att·V over the whole T x T square): *train the forward and
 * backward, *again the forward a recompute mode runs again (of *train's
 * kind: not included in it). Without a fused attention the backward is
 * twice the forward and full recomputation runs f again, selective the
 * attention's 4·T·C. plait's fused attention (every device's, and the
 * ring's blocks under cp) walks only the key tiles a causal query sees,
 * half the square: its forward is 2·T·C, its backward att_bwd products of
 * T·C each (the scores again among them, in every recompute mode), and
 * full recomputation runs the products and that 2·T·C again.
 * attention (NULL: not wanted) takes the fused attention's share of
 * *train + *again, then of *again, which a GPU runs at its own rate
 * (plait_cost_compute_s); 0 without a fused attention, whose products run
 * as the others do. */
void plait_cost_block_flops_per_token(const plait_cost_shape *s, double f, double *train, double *again,
                                      double attention[2]);
/* The TP collectives one block runs for a micro-batch, in all-reduces of
 * its B x T x C activation (under sequence parallelism an all-gather and a
 * reduce-scatter make one: the same bytes, 2(n-1) steps of S/n): Megatron's
 * four (two in the forward, two in the backward), and under full
 * recomputation the forward's again up to the MLP's activation, as
 * model/recompute.c reruns it: attn.c_proj's all-reduce (one more), or with
 * sequence parallelism the attention's all-gather and reduce-scatter and
 * the MLP's all-gather (one and a half); and under sequence parallelism
 * the all-gathers of the norms' outputs again before the weight gradients
 * (one for gpt and bf16 llama blocks, half for the mlp arch's). */
double plait_cost_tp_block_collectives(const plait_cost_shape *s);
/* A stage's tp collectives a step into *r (tp_msgs, tp_msg_elems and the
 * tp_hide_* figures, plait_cost_rank): `micro_batches` of `blocks` blocks
 * (`sparse` of them with experts), the vocabulary-parallel embedding's
 * all-reduce where `embedding`, the head's where `head`; of them what a
 * one-pass backward starts beside products ([parallel.tp] overlap: the
 * column-parallel products' input-gradient sums beside their weight
 * gradients, and under sequence parallelism the norms' outputs gathered
 * again beside the products before the weight gradients that read them)
 * and the FLOPs those products take. */
void plait_cost_tp_traffic(const plait_cost_shape *s, double blocks, double sparse, int embedding, int head,
                           double micro_batches, struct plait_cost_rank *r);

/* A step's FLOPs of one layer of forward estimate f a token, over
 * `tokens` tokens on tp ranks, added to *r's flops, recompute_flops and
 * their fused attention's shares (cost/cost.h): a block's as
 * plait_cost_block_flops_per_token counts them, another layer's (the
 * embedding, the head) 3f. */
struct plait_cost_rank;
void plait_cost_add_layer_flops(const plait_cost_shape *s, double f, int block, double tokens, int tp,
                                struct plait_cost_rank *r);

#endif
