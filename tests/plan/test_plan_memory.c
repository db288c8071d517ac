/*
 * The planner's memory per rank against what plait allocates: for a few
 * layouts of a small GPT (dp 2 with adam, ZeRO-1 (its gradients' micro-batches
 * added up in bf16 too) and ZeRO-3, and Adam's moments in bf16 under adam,
 * ZeRO-2 and ZeRO-3; ZeRO-3's bf16
 * weight copy is one layer's, ZeRO-1 and a llama's ZeRO-2 on bf16 copies
 * with their masters sharded or whole; tp 2, with
 * sequence parallelism too, and with pp 2 zb1 in bf16; pp 2
 * with selective and with full recomputation, with experts too (llama full, gpt
 * selective, zb1: gpt, and llama under full; zb1 under bf16 activations
 * too, gpt, llama and at ep 2), and zero-bubble's split
 * backward with none and selective; one rank whose bf16 head
 * runs in chunks), in fp32 and bf16, on the sim test device
 * (float32 activations), the cpu device training in
 * bf16 (its bf16 activations) and the cuda_emu device (the cuda
 * plugin's own code: bf16 activations and the weights' bf16 copy where the
 * model grants them, float32 otherwise; the llama arch's bf16 blocks
 * under tp 2 with sequence parallelism, tp 2 with full recomputation,
 * pp 2 zb1 and pp 2 with selective; both archs' bf16 blocks at cp 2; q and
 * k norms ([model] qk_norm: the heads before their norms, the norms'
 * buffers and the split backward's stash of their gradients) in float32 at
 * tp 2, pp 2 zb1 and pp 2 zb1 full, in bf16 at tp 2 full and pp 2 zb1; a
 * bf16 residual stream in one process, at pp 2 (interleaved too) and under tp 2 with
 * sequence parallelism; full recomputation's kept boundaries offloaded to
 * host memory, in one process and at pp 2, float32 and bf16),
 * the prediction `plait config
 * check` prints (plait_cli_predict_memory, exact bytes) beside the run's
 * memory.csv, category by category: parameters, gradients, optimizer state,
 * activations.
 *
 * Tolerance 0.5% a category. Everything the planner counts is counted as
 * plait allocates it (the model's slot carving, alignment and bf16 buffers
 * included); what it leaves out is ZeRO's partition padding: the planner
 * takes a rank's shard as Ψ/dp, and ZeRO packs each unit's parameters on
 * 16-float boundaries and pads the unit to a multiple of dp, which here
 * (width 40: LayerNorm vectors and biases not multiples of 16) adds up to
 * 0.1% of a shard. Buffers are not compared (the collective scratch is
 * the transports', not in the report).
 *
 * test_zero_buffers_follow_keys compares the buffers too, as a change
 * from one run to another: ZeRO's working buffers as [optim.zeroN]
 * max_inflight and [optim.zero3] prefetch_layers size them, and [run]
 * deterministic's summation tree (adam's in the core, ZeRO-2's own).
 *
 * The cuda_emu layouts are skipped, and said so, where the emulator is not
 * built (no CUDA toolkit, sanitizer builds); the others always run.
 */
#include "zero/zero_train_util.h"

#include "cli/cli.h"
#include "cli/cost_device.h"
#include "cli/memory_check.h"
#include "cost/layouts.h"
#include "host/host_table.h"
#include "runtime/error.h"

#define TOL 0.005

static char dir[4096], ini[4200];

static int setup(void **state) {
    (void)state;
    zt_scratch(dir, sizeof dir, "plan-mem");
    snprintf(ini, sizeof ini, "%s/small.ini", dir);
    char text[4096];
    snprintf(text, sizeof text,
             "[run]\nsteps = 1\nseed = 3\nprogress = off\nmfu_peak = 100\neval_every = 0\nckpt_every = 0\n"
             "[model]\narch = gpt\nn_layer = 2\nn_head = 4\nn_embd = 40\nblock_size = 24\nvocab_size = 256\n"
             "[data]\npath = %s/data/corpus.txt\nglobal_batch = 4\n"
             "[comm]\nplugin = tcp\ntimeout = 60\n"
             "[parallel]\nplugin = hybrid\n"
             "[optim]\nplugin = adam\nlr = 1e-3\n",
             getenv("PLAIT_SOURCE_DIR"));
    zt_write(ini, text);
    plait_host_install();
    return 0;
}

static int teardown(void **state) {
    (void)state;
    zt_rm_rf(dir);
    return 0;
}

typedef struct layout {
    const char *name;
    const char *over[12]; /* NULL-terminated; the run takes the first 10 */
    int emu;             /* needs the cuda_emu device */
    int bf16;            /* the model stores bf16 activations */
    int states_only;     /* parameters, gradients and optimizer state compared, not the activations */
} layout;

static const layout layouts[] = {
    {"sim fp32 dp2 adam", {"device.plugin=sim", "parallel.dp=2", NULL}, 0, 0},
    {"sim fp32 dp2 zero1", {"device.plugin=sim", "parallel.dp=2", "optim.plugin=zero1", NULL}, 0, 0},
    {"sim fp32 dp2 zero3", {"device.plugin=sim", "parallel.dp=2", "optim.plugin=zero3", NULL}, 0, 0},
    /* Adam's moments in bf16, whole and sharded */
    {"sim fp32 dp2 adam bf16 moments", {"device.plugin=sim", "parallel.dp=2", "optim.moments=bf16", NULL}, 0, 0},
    {"sim fp32 dp2 zero2 bf16 moments",
     {"device.plugin=sim", "parallel.dp=2", "optim.plugin=zero2", "optim.moments=bf16", NULL},
     0,
     0},
    /* zero1 adding 2 micro-batches up in bf16: float32 slices and bf16 sums */
    {"sim fp32 dp2 zero1 bf16 grads",
     {"device.plugin=sim", "parallel.dp=2", "optim.plugin=zero1", "optim.zero1.grad_accum=bf16", "data.micro_batch=1",
      NULL},
     0,
     0},
    /* the cpu device's bf16 activations (emulated products: any CPU) */
    {"cpu bf16 dp2 zero1",
     {"device.plugin=cpu", "run.precision=bf16", "run.debug_bf16_emulate=true", "parallel.dp=2", "optim.plugin=zero1",
      NULL},
     0,
     1},
    {"cpu bf16 cp2",
     {"device.plugin=cpu", "run.precision=bf16", "run.debug_bf16_emulate=true", "parallel.cp=2", NULL},
     0,
     1},
    /* the llama arch (float32 on the cpu device): grouped-query q, k, v,
     * the SwiGLU MLP's three tensors, the untied head */
    {"cpu llama dp2 adam",
     {"device.plugin=cpu", "model.arch=llama", "model.n_kv_head=2", "model.ffn_hidden=104", "parallel.dp=2", NULL},
     0,
     0},
    {"cpu llama pp2 1f1b zero1",
     {"device.plugin=cpu", "model.arch=llama", "model.n_kv_head=1", "model.ffn_hidden=96", "parallel.pp=2",
      "data.micro_batch=1", "optim.plugin=zero1", NULL},
     0,
     0},
    {"cpu llama pp2 zb1 qk_norm",
     {"device.plugin=cpu", "model.arch=llama", "model.n_kv_head=2", "model.ffn_hidden=104", "parallel.pp=2",
      "parallel.pp.schedule=zb1", "data.micro_batch=1", "model.qk_norm=true", NULL},
     0,
     0},
    {"cpu llama pp2 1f1b selective",
     {"device.plugin=cpu", "model.arch=llama", "model.ffn_hidden=104", "parallel.pp=2", "data.micro_batch=1",
      "model.recompute=selective", NULL},
     0,
     0},
    {"cpu llama pp2 zb1 full qk_norm",
     {"device.plugin=cpu", "model.arch=llama", "model.ffn_hidden=104", "parallel.pp=2", "parallel.pp.schedule=zb1",
      "data.micro_batch=1", "model.recompute=full", "model.qk_norm=true", NULL},
     0,
     0},
    {"cpu llama tp2 qk_norm",
     {"device.plugin=cpu", "model.arch=llama", "model.n_kv_head=2", "model.ffn_hidden=104", "parallel.tp=2",
      "model.qk_norm=true", NULL},
     0,
     0},
    {"cpu llama dp2 zero3",
     {"device.plugin=cpu", "model.arch=llama", "model.tie_embeddings=true", "parallel.dp=2", "optim.plugin=zero3",
      NULL},
     0,
     0},
    /* context parallelism: each of the 2 cp ranks keeps half of every
     * sequence (12 of its 24 tokens), ZeRO-1's moments sharded over dp x cp */
    {"cpu llama cp2 zero1",
     {"device.plugin=cpu", "model.arch=llama", "model.n_kv_head=2", "model.ffn_hidden=104", "parallel.cp=2",
      "optim.plugin=zero1", NULL},
     0,
     0},
    {"cpu gpt cp2 dp2 adam", {"device.plugin=cpu", "parallel.cp=2", "parallel.dp=2", NULL}, 0, 0},
    /* bf16 activations under context parallelism (the ring's bf16 block
     * entries): each rank's bf16 blocks over its 12 of the 24 tokens */
    {"cuda_emu bf16 cp2", {"device.plugin=cuda_emu", "run.precision=bf16", "parallel.cp=2", NULL}, 1, 1},
    {"cuda_emu llama bf16 cp2",
     {"device.plugin=cuda_emu", "run.precision=bf16", "model.arch=llama", "model.n_kv_head=2", "model.ffn_hidden=104",
      "parallel.cp=2", NULL},
     1,
     1},
    /* a mixture of experts, each expert's width (and the shared expert's)
     * split over tp: the routing, the experts' activations and their
     * backward's scratch at the rank's width */
    {"cpu gpt moe tp2 sp",
     {"device.plugin=cpu", "model.moe_experts=4", "model.moe_ffn_hidden=64", "model.moe_shared_experts=1",
      "parallel.tp=2", "parallel.tp.sequence_parallel=true", NULL},
     0,
     0},
    /* full recomputation with experts: the slots keep no sparse block's
     * routing or experts' rows, one block's set is shared by all */
    {"cpu llama moe pp2 full",
     {"device.plugin=cpu", "model.arch=llama", "model.moe_experts=4", "model.moe_shared_experts=1", "parallel.pp=2",
      "data.micro_batch=1", "model.recompute=full", NULL},
     0,
     0},
    /* zero-bubble with experts: each slot's sparse blocks keep the output
     * gradients at their products between the backward's halves, in
     * place of the dense MLP's, whatever recompute drops */
    {"cpu gpt moe pp2 zb1",
     {"device.plugin=cpu", "model.moe_experts=4", "model.moe_ffn_hidden=64", "model.moe_shared_experts=1",
      "parallel.pp=2", "parallel.pp.schedule=zb1", "data.micro_batch=1", NULL},
     0,
     0},
    {"cpu llama moe pp2 zb1 full",
     {"device.plugin=cpu", "model.arch=llama", "model.moe_experts=4", "parallel.pp=2", "parallel.pp.schedule=zb1",
      "data.micro_batch=1", "model.recompute=full", NULL},
     0,
     0},
    /* selective with experts: the experts' GELU outputs (routed and
     * shared) in one block's buffers all share */
    {"cpu gpt moe pp2 selective",
     {"device.plugin=cpu", "model.moe_experts=4", "model.moe_ffn_hidden=64", "model.moe_shared_experts=1",
      "parallel.pp=2", "data.micro_batch=1", "model.recompute=selective", NULL},
     0,
     0},
    /* expert parallelism with every token routed to both experts (top_k =
     * moe_experts: the routing balanced whatever the router's scores), so
     * the rows each rank's expert holds for the ep group are the
     * planner's B·T·k: the sparse blocks' activations compared too */
    {"cpu moe dp2 ep2 balanced",
     {"device.plugin=cpu", "parallel.dp=2", "parallel.ep=2", "model.moe_experts=2", "model.moe_top_k=2",
      "model.moe_ffn_hidden=48", NULL},
     0,
     0},
    /* the same under zb1 at pp 2: each holder keeps its held rows' output
     * gradients beside them to the weight half */
    {"cpu moe dp2 ep2 pp2 zb1 balanced",
     {"device.plugin=cpu", "parallel.dp=2", "parallel.ep=2", "model.moe_experts=2", "model.moe_top_k=2",
      "parallel.pp=2", "parallel.pp.schedule=zb1", NULL},
     0,
     0},
    /* the same interleaved over 4 chunks a stage (6 sparse blocks): the
     * block chunks share their slots, a moved slot's sparse parts carved
     * afresh and its held rows handed to the layers it moves to */
    {"cpu moe dp2 ep2 pp2 interleaved v4 balanced",
     {"parallel.dp=2", "parallel.ep=2", "model.moe_experts=2", "model.n_layer=6", "parallel.pp=2",
      "parallel.pp.schedule=interleaved", "parallel.pp.virtual_stages=4", "data.micro_batch=1", "data.global_batch=16",
      NULL},
     0,
     0},
    /* expert parallelism: each rank's 2 of the 4 experts, ZeRO's shards of
     * them over the 2 ranks holding the same experts, the dense ones' over
     * 4; the sparse blocks' activations (rows per expert as the router
     * sends them) are not compared here */
    {"cpu moe dp4 ep2 zero2",
     {"device.plugin=cpu", "parallel.dp=4", "parallel.ep=2", "model.moe_experts=4", "model.moe_top_k=2",
      "model.moe_ffn_hidden=48", "optim.plugin=zero2", NULL},
     0,
     0,
     1},
    {"cpu moe dp4 ep2 zero3",
     {"device.plugin=cpu", "parallel.dp=4", "parallel.ep=2", "model.moe_experts=4", "model.moe_top_k=2",
      "model.moe_ffn_hidden=48", "optim.plugin=zero3", NULL},
     0,
     0,
     1},
    {"cuda_emu fp32 dp2 adam", {"device.plugin=cuda_emu", "parallel.dp=2", NULL}, 1, 0},
    {"cuda_emu bf16 dp2 adam", {"device.plugin=cuda_emu", "run.precision=bf16", "parallel.dp=2", NULL}, 1, 1},
    {"cuda_emu bf16 dp2 zero1",
     {"device.plugin=cuda_emu", "run.precision=bf16", "parallel.dp=2", "optim.plugin=zero1", NULL},
     1,
     1},
    {"cuda_emu bf16 dp2 zero3",
     {"device.plugin=cuda_emu", "run.precision=bf16", "parallel.dp=2", "optim.plugin=zero3", NULL},
     1,
     1},
    /* ZeRO-3's bf16 weight copy: one layer's at a time (the llama arch's
     * stacked projections; the GPT's above, whose largest is the head's) */
    {"cuda_emu llama bf16 dp2 zero3",
     {"device.plugin=cuda_emu", "run.precision=bf16", "model.arch=llama", "model.n_kv_head=2", "model.ffn_hidden=104",
      "parallel.dp=2", "optim.plugin=zero3", NULL},
     1,
     1},
    /* ZeRO-1/2 as a distributed optimizer (the default on bf16 copies):
     * the copied weights' float32 masters in the shards alone; and
     * ZeRO-1 keeping them whole ([optim.zero1] master = whole) */
    {"cuda_emu llama bf16 dp2 zero2",
     {"device.plugin=cuda_emu", "run.precision=bf16", "model.arch=llama", "model.ffn_hidden=104", "parallel.dp=2",
      "optim.plugin=zero2", NULL},
     1,
     1},
    /* the device's to_bf16 and from_bf16 for bf16 moments */
    {"cuda_emu bf16 dp2 zero3 bf16 moments",
     {"device.plugin=cuda_emu", "run.precision=bf16", "parallel.dp=2", "optim.plugin=zero3", "optim.moments=bf16",
      NULL},
     1,
     1},
    /* the device's to_bf16 and from_bf16 for zero1's bf16 running sums */
    {"cuda_emu bf16 dp2 zero1 bf16 grads",
     {"device.plugin=cuda_emu", "run.precision=bf16", "parallel.dp=2", "optim.plugin=zero1",
      "optim.zero1.grad_accum=bf16", "data.micro_batch=1", NULL},
     1,
     1},
    {"cuda_emu bf16 dp2 zero1 whole masters",
     {"device.plugin=cuda_emu", "run.precision=bf16", "parallel.dp=2", "optim.plugin=zero1", "optim.zero1.master=whole",
      NULL},
     1,
     1},
    /* 96 rows of 4,096 logits: the head in 2 chunks of 48, the scratch
     * grown beyond the gradients' room for them */
    {"cuda_emu bf16 adam head chunks",
     {"device.plugin=cuda_emu", "run.precision=bf16", "model.vocab_size=4096", NULL},
     1,
     1},
    /* bf16 blocks under tp, the vocabulary-parallel head float32; with
     * sequence parallelism the residual stream and the norms' statistics
     * cut along the sequence, the norms' outputs kept gathered */
    {"cuda_emu bf16 tp2", {"device.plugin=cuda_emu", "run.precision=bf16", "parallel.tp=2", NULL}, 1, 1},
    {"cuda_emu bf16 tp2 sp",
     {"device.plugin=cuda_emu", "run.precision=bf16", "parallel.tp=2", "parallel.tp.sequence_parallel=true", NULL},
     1,
     1},
    {"cuda_emu bf16 tp2 sp pp2 zb1",
     {"device.plugin=cuda_emu", "run.precision=bf16", "parallel.tp=2", "parallel.tp.sequence_parallel=true",
      "parallel.pp=2", "parallel.pp.schedule=zb1", "data.micro_batch=1", NULL},
     1,
     1},
    {"cpu tp2 sp", {"device.plugin=cpu", "parallel.tp=2", "parallel.tp.sequence_parallel=true", NULL}, 0, 0},
    /* the llama arch's bf16 blocks (q|k|v and gate|up stacked, the head
     * float32): tp 2 with sequence parallelism (the norms' outputs on this
     * rank's rows), tp 2 with full recomputation (one block's working set
     * for all), pp 2 with zb1 (the split backward's stash in bf16) and
     * with selective (SwiGLU's output in one bf16 buffer the blocks
     * share) */
    {"cuda_emu llama bf16 tp2 sp",
     {"device.plugin=cuda_emu", "run.precision=bf16", "model.arch=llama", "model.n_kv_head=2", "model.ffn_hidden=104",
      "parallel.tp=2", "parallel.tp.sequence_parallel=true", NULL},
     1,
     1},
    {"cuda_emu llama bf16 tp2 full qk_norm",
     {"device.plugin=cuda_emu", "run.precision=bf16", "model.arch=llama", "model.ffn_hidden=104", "parallel.tp=2",
      "model.recompute=full", "model.qk_norm=true", NULL},
     1,
     1},
    {"cuda_emu llama bf16 pp2 zb1 qk_norm",
     {"device.plugin=cuda_emu", "run.precision=bf16", "model.arch=llama", "model.ffn_hidden=104", "parallel.pp=2",
      "parallel.pp.schedule=zb1", "data.micro_batch=1", "model.qk_norm=true", NULL},
     1,
     1},
    {"cuda_emu llama bf16 pp2 selective",
     {"device.plugin=cuda_emu", "run.precision=bf16", "model.arch=llama", "model.ffn_hidden=104", "parallel.pp=2",
      "data.micro_batch=1", "model.recompute=selective", NULL},
     1,
     1},
    /* a mixture of experts under bf16 activations: the dense halves'
     * activations bf16, the sparse halves' norms float32 (their shared norm
     * buffers with the experts' scratch), the experts' rows bf16; the experts' width under tp and
     * sequence parallelism, and a llama with a dense block and full
     * recomputation */
    {"cuda_emu gpt moe bf16 tp2 sp",
     {"device.plugin=cuda_emu", "run.precision=bf16", "model.moe_experts=4", "model.moe_ffn_hidden=64",
      "model.moe_shared_experts=1", "parallel.tp=2", "parallel.tp.sequence_parallel=true", NULL},
     1,
     1},
    {"cuda_emu llama moe bf16 full",
     {"device.plugin=cuda_emu", "run.precision=bf16", "model.arch=llama", "model.ffn_hidden=104", "model.moe_experts=4",
      "model.moe_every=2", "model.recompute=full", NULL},
     1,
     1},
    /* the experts' rows bf16 at ep 2 (their held rows, the rows'
     * gradients and their weights' bf16 copies), every token routed to
     * both experts (top_k's default 2) so the held rows are the planner's
     * B·T·k; gpt, and llama under selective recomputation */
    {"cuda_emu moe bf16 dp2 ep2 balanced",
     {"device.plugin=cuda_emu", "run.precision=bf16", "parallel.dp=2", "parallel.ep=2", "model.moe_experts=2",
      "model.moe_top_k=2", "model.moe_ffn_hidden=48", NULL},
     1,
     1},
    {"cuda_emu llama moe bf16 dp2 ep2 selective",
     {"device.plugin=cuda_emu", "run.precision=bf16", "model.arch=llama", "parallel.dp=2", "parallel.ep=2",
      "model.moe_experts=2", "model.recompute=selective", NULL},
     1,
     1},
    /* zero-bubble with experts under bf16 activations: each slot's sparse
     * blocks keep their float32 norm output gradient and their products'
     * output gradients (the experts' in bf16) between the halves; gpt with
     * a shared expert, llama, and at ep 2 the holders' in bf16 */
    {"cuda_emu gpt moe bf16 pp2 zb1",
     {"device.plugin=cuda_emu", "run.precision=bf16", "model.moe_experts=4", "model.moe_shared_experts=1",
      "parallel.pp=2", "parallel.pp.schedule=zb1", "data.micro_batch=1", NULL},
     1,
     1},
    {"cuda_emu llama moe bf16 pp2 zb1",
     {"device.plugin=cuda_emu", "run.precision=bf16", "model.arch=llama", "model.ffn_hidden=104", "model.moe_experts=4",
      "parallel.pp=2", "parallel.pp.schedule=zb1", "data.micro_batch=1", NULL},
     1,
     1},
    {"cuda_emu moe bf16 dp2 ep2 pp2 zb1 balanced",
     {"device.plugin=cuda_emu", "run.precision=bf16", "parallel.dp=2", "parallel.ep=2", "model.moe_experts=2",
      "model.moe_ffn_hidden=48", "parallel.pp=2", "parallel.pp.schedule=zb1", NULL},
     1,
     1},
    {"cuda_emu bf16 pp2 1f1b selective",
     {"device.plugin=cuda_emu", "run.precision=bf16", "parallel.pp=2", "parallel.pp.schedule=1f1b",
      "data.micro_batch=1", "model.recompute=selective", NULL},
     1,
     1},
    {"cuda_emu bf16 pp2 1f1b full",
     {"device.plugin=cuda_emu", "run.precision=bf16", "parallel.pp=2", "parallel.pp.schedule=1f1b",
      "data.micro_batch=1", "model.recompute=full", NULL},
     1,
     1},
    /* interleaved, one layer a chunk: every chunk but the head's sends its
     * output from a buffer of the boundary pool, given back when that send
     * is waited for (the embedding's chunk keeps no boundary of its own) */
    {"cpu gpt pp2 interleaved v2 full",
     {"device.plugin=cpu", "parallel.pp=2", "parallel.pp.schedule=interleaved", "parallel.pp.virtual_stages=2",
      "data.micro_batch=1", "model.recompute=full", NULL},
     0,
     0},
    /* 8 micro-batches: 16 sends of each kind a stage, beyond the window
     * of pp + 1 = 3 sends in flight, so the boundary pool peaks where the
     * window makes a send wait for the one 3 before it */
    {"cpu gpt pp2 interleaved v2 m8",
     {"device.plugin=cpu", "parallel.pp=2", "parallel.pp.schedule=interleaved", "parallel.pp.virtual_stages=2",
      "data.micro_batch=1", "data.global_batch=8", NULL},
     0,
     0},
    /* 6 blocks, 4 chunks a stage, a layer each: the first stage's three
     * block chunks (and the second's) share their slots, the embedding's
     * and the head's chunk their own, so a stage holds the most of its
     * block chunks' micro-batches alive at once, not each chunk's most */
    {"cpu gpt pp2 interleaved v4 m8 shared slots",
     {"device.plugin=cpu", "parallel.pp=2", "parallel.pp.schedule=interleaved", "parallel.pp.virtual_stages=4",
      "model.n_layer=6", "data.micro_batch=1", "data.global_batch=8", NULL},
     0,
     0},
    {"cuda_emu bf16 pp2 interleaved v2 full",
     {"device.plugin=cuda_emu", "run.precision=bf16", "parallel.pp=2", "parallel.pp.schedule=interleaved",
      "parallel.pp.virtual_stages=2", "data.micro_batch=1", "model.recompute=full", NULL},
     1,
     1},
    /* a bf16 residual stream: the boundaries a slot writes and reads
     * itself in bf16, the running layer's input and output float32 in two
     * buffers all share; at pp 2 a stage's received boundary in bf16 too,
     * its sent one float32 (a buffer of the boundary pool), through
     * the two chunks of an interleaved stage as well; under sequence
     * parallelism on this rank's rows */
    {"cuda_emu bf16 residual bf16 full",
     {"device.plugin=cuda_emu", "run.precision=bf16", "run.residual=bf16", "model.recompute=full", NULL},
     1,
     1},
    {"cuda_emu bf16 residual bf16 pp2",
     {"device.plugin=cuda_emu", "run.precision=bf16", "run.residual=bf16", "parallel.pp=2", "data.micro_batch=1", NULL},
     1,
     1},
    {"cuda_emu bf16 residual bf16 pp2 interleaved v2 full",
     {"device.plugin=cuda_emu", "run.precision=bf16", "run.residual=bf16", "parallel.pp=2",
      "parallel.pp.schedule=interleaved", "parallel.pp.virtual_stages=2", "data.micro_batch=1", "model.recompute=full",
      NULL},
     1,
     1},
    /* [model] recompute_offload = host: the slots' kept boundaries in
     * host memory (not activations), the running layer's two buffers on
     * the device; float32 and under a bf16 residual stream, at pp 2 a
     * stage's received boundary too */
    {"sim fp32 full offload",
     {"device.plugin=sim", "model.recompute=full", "model.recompute_offload=host", NULL},
     0,
     0},
    {"sim fp32 pp2 full offload",
     {"device.plugin=sim", "parallel.pp=2", "data.micro_batch=1", "model.recompute=full",
      "model.recompute_offload=host", NULL},
     0,
     0},
    {"cuda_emu bf16 residual bf16 pp2 full offload",
     {"device.plugin=cuda_emu", "run.precision=bf16", "run.residual=bf16", "parallel.pp=2", "data.micro_batch=1",
      "model.recompute=full", "model.recompute_offload=host", NULL},
     1,
     1},
    {"cuda_emu llama residual bf16 tp2 sp",
     {"device.plugin=cuda_emu", "run.precision=bf16", "run.residual=bf16", "model.arch=llama", "model.ffn_hidden=104",
      "parallel.tp=2", "parallel.tp.sequence_parallel=true", NULL},
     1,
     1},
    /* the split backward's stash in bf16, over c_fc's and c_attn's outputs
     * (none) and apart (selective) */
    {"cuda_emu bf16 pp2 zb1",
     {"device.plugin=cuda_emu", "run.precision=bf16", "parallel.pp=2", "parallel.pp.schedule=zb1", "data.micro_batch=1",
      NULL},
     1,
     1},
    {"cuda_emu bf16 pp2 zb1 selective",
     {"device.plugin=cuda_emu", "run.precision=bf16", "parallel.pp=2", "parallel.pp.schedule=zb1", "data.micro_batch=1",
      "model.recompute=selective", NULL},
     1,
     1},
};

static int emu_built(void) {
    const char *path = getenv("PLAIT_PLUGIN_PATH");
    char f[4200];
    snprintf(f, sizeof f, "%s/libplait-device-cuda_emu.so", path ? path : ".");
    return access(f, R_OK) == 0;
}

/* memory.csv of run `out`: per rank param, grad, optim_state, activation
 * and buffer bytes */
static int read_memory_csv(const char *out, double rows[][5], int cap) {
    char path[4300];
    snprintf(path, sizeof path, "%s/memory.csv", out);
    char *text = zt_slurp(path), *save = NULL;
    char *line = strtok_r(text, "\n", &save);
    static const char head[] = "rank,dp,tp,pp,param_bytes,grad_bytes,optim_state_bytes,buffer_bytes,activation_bytes,";
    if (!line || strncmp(line, head, sizeof head - 1) != 0)
        fail_msg("%s: not the memory report's header: %s", path, line ? line : "(empty)");
    int n = 0;
    while ((line = strtok_r(NULL, "\n", &save)) && n < cap) {
        double v[9];
        if (sscanf(line, "%lf,%lf,%lf,%lf,%lf,%lf,%lf,%lf,%lf", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7],
                   &v[8]) != 9)
            fail_msg("%s: unreadable row %s", path, line);
        rows[n][0] = v[4], rows[n][1] = v[5], rows[n][2] = v[6], rows[n][3] = v[8], rows[n][4] = v[7];
        n++;
    }
    free(text);
    return n;
}

/* Layout l predicted as `plait config check` predicts it (returned, n
 * ranks) and run into `out`. */
static plait_cost_mem *predict_and_run(const layout *l, const char *out, int *n) {
    int nover = 0;
    while (l->over[nover]) nover++;
    if (nover > 10) fail_msg("%s: %d overrides; the run takes 10 (zt_train's arguments)", l->name, nover);
    plait_config *cfg = NULL;
    if (plait_cli_load_config(ini, nover, (char *const *)l->over, &cfg) != PLAIT_OK)
        fail_msg("%s: %s", l->name, plait_last_error());
    plait_cli_device dev;
    plait_cli_device_ask(cfg, &dev);
    plait_cost_mem *pred = plait_cli_predict_memory(cfg, &dev.cost, n);
    if (!pred) fail_msg("%s: no prediction: %s", l->name, plait_last_error());
    plait_config_free(cfg);
    const char *argv[12];
    int k = 0;
    for (int i = 0; i < nover; i++) argv[k++] = l->over[i];
    while (k < 12) argv[k++] = NULL;
    zt_train(ini, *n, out, 120, argv[0], argv[1], argv[2], argv[3], argv[4], argv[5], argv[6], argv[7], argv[8],
             argv[9], (char *)NULL);
    return pred;
}

static void check_layout(const layout *l, int *worse) {
    char out[4300];
    snprintf(out, sizeof out, "%s/run%d", dir, (int)(l - layouts));
    int n = 0;
    plait_cost_mem *pred = predict_and_run(l, out, &n);
    char log[4400];
    snprintf(log, sizeof log, "%s.log", out);
    char *text = zt_slurp(log);
    int said_bf16 = strstr(text, "plait: activations bf16") != NULL;
    free(text);
    if (said_bf16 != l->bf16) fail_msg("%s: the run's activations are %s", l->name, said_bf16 ? "bf16" : "float32");
    double real[8][5];
    int got = read_memory_csv(out, real, 8);
    assert_int_equal(got, n);
    static const char *const what[4] = {"parameters", "gradients", "optimizer state", "activations"};
    for (int r = 0; r < n; r++) {
        const double p[4] = {pred[r].param, pred[r].grad, pred[r].state, pred[r].activations};
        fprintf(stderr, "%-34s %d", r ? "" : l->name, r);
        for (int c = 0; c < 4; c++) {
            double err = real[r][c] > 0 ? (p[c] - real[r][c]) / real[r][c] : p[c];
            fprintf(stderr, "  %9.0f %9.0f %+6.2f%%", p[c], real[r][c], 100 * err);
            if (fabs(err) > TOL && !(c == 3 && l->states_only)) {
                fprintf(stderr, " <- %s", what[c]);
                (*worse)++;
            }
        }
        fputc('\n', stderr);
    }
    free(pred);
}

static void test_prediction_by_category(void **state) {
    (void)state;
    int emu = emu_built(), worse = 0;
    fprintf(stderr, "%-34s %s  %29s  %29s  %29s  %29s\n", "layout", "r", "parameters: predicted, allocated",
            "gradients", "optimizer state", "activations");
    for (size_t i = 0; i < sizeof layouts / sizeof layouts[0]; i++) {
        if (layouts[i].emu && !emu) {
            fprintf(stderr, "%-34s skipped: the cuda_emu device is not built here\n", layouts[i].name);
            continue;
        }
        check_layout(&layouts[i], &worse);
    }
    if (worse) fail_msg("%d categories of a rank predicted more than %.1f%% off what plait allocates (above)", worse,
                        100 * TOL);
}

/* Planning a cluster opens no device: it takes a GPU node's ranks to run
 * the cuda device (plait_cost_device_cuda states its kernels) and a CPU
 * node's the cpu device (the core's kernels). Both as the devices' own
 * tables answer, asked as `plait config check` asks them. */
static void test_planned_devices(void **state) {
    (void)state;
    static const struct {
        const char *device;
        int gpu, emu;
    } kinds[] = {{"device.plugin=cpu", 0, 0}, {"device.plugin=sim", 0, 0}, {"device.plugin=cuda_emu", 1, 1}};
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        if (kinds[i].emu && !emu_built()) {
            fprintf(stderr, "%s: skipped, the cuda_emu device is not built here\n", kinds[i].device);
            continue;
        }
        /* two head sizes: 10, and 512 (past the fused attention's limit) */
        for (int big = 0; big < 2; big++) {
            char *over[] = {(char *)kinds[i].device, (char *)"run.precision=bf16",
                            big ? (char *)"model.n_embd=2048" : (char *)"model.n_embd=40"};
            plait_config *cfg = NULL;
            if (plait_cli_load_config(ini, 3, over, &cfg) != PLAIT_OK) fail_msg("%s", plait_last_error());
            plait_cli_device answer;
            plait_cli_device_ask(cfg, &answer);
            const plait_cost_device asked = answer.cost;
            plait_cost_device planned;
            plait_cost_device_planned(cfg, kinds[i].gpu, &planned);
            plait_config_free(cfg);
            fprintf(stderr, "%s n_embd %d: bf16 path %d, attention scratch %g floats a sequence and head; "
                            "planned %d, %g\n",
                    kinds[i].device, big ? 2048 : 40, asked.bf16_path, asked.att_scratch, planned.bf16_path,
                    planned.att_scratch);
            assert_int_equal(asked.bf16_path, planned.bf16_path);
            assert_true(asked.att_scratch == planned.att_scratch);
            /* both tables have the bf16-activation entries (the core's,
             * for a CPU node's ranks) */
            assert_int_equal(asked.bf16_path, !big);
        }
    }
}

/* ZeRO's working buffers follow the keys that size them, in the planner's
 * count as in the buffers the plugins declare (memory.csv's buffer_bytes):
 * [optim.zeroN] max_inflight (the reductions holding a unit's buffer at
 * once) and [optim.zero3] prefetch_layers (the layers gathered at once).
 * Compared as the change from the defaults' run, which leaves out what
 * the two counts hold differently and the same in both runs (the
 * collective scratch the planner counts, the tied copy's gradient the
 * plugins do); to 0.5% of the change, the units' padding apart. */
static void test_zero_buffers_follow_keys(void **state) {
    (void)state;
    static const layout runs[][3] = {
        {{"zero3 defaults", {"device.plugin=sim", "parallel.dp=2", "optim.plugin=zero3", NULL}, 0, 0},
         {"zero3 no prefetch, 1 in flight",
          {"device.plugin=sim", "parallel.dp=2", "optim.plugin=zero3", "optim.zero3.prefetch_layers=0",
           "optim.zero3.max_inflight=1", NULL},
          0,
          0},
         {"zero3 prefetch 3, 4 in flight",
          {"device.plugin=sim", "parallel.dp=2", "optim.plugin=zero3", "optim.zero3.prefetch_layers=3",
           "optim.zero3.max_inflight=4", NULL},
          0,
          0}},
        {{"zero1 defaults", {"device.plugin=sim", "parallel.dp=2", "optim.plugin=zero1", NULL}, 0, 0},
         {"zero1 1 in flight",
          {"device.plugin=sim", "parallel.dp=2", "optim.plugin=zero1", "optim.zero1.max_inflight=1", NULL},
          0,
          0},
         {"zero1 5 in flight",
          {"device.plugin=sim", "parallel.dp=2", "optim.plugin=zero1", "optim.zero1.max_inflight=5", NULL},
          0,
          0}},
        /* [run] deterministic's summation tree: the core's over adam's
         * gradients, ZeRO-2's own over its units, at 4 and 8 or 2
         * micro-batches a step */
        {{"adam 4 micro-batches",
          {"device.plugin=sim", "parallel.dp=2", "data.global_batch=8", "data.micro_batch=1", NULL},
          0,
          0},
         {"adam deterministic, 4 micro-batches",
          {"device.plugin=sim", "parallel.dp=2", "data.global_batch=8", "data.micro_batch=1", "run.deterministic=true",
           NULL},
          0,
          0},
         {"adam deterministic, 8 micro-batches",
          {"device.plugin=sim", "parallel.dp=2", "data.global_batch=16", "data.micro_batch=1", "run.deterministic=true",
           NULL},
          0,
          0}},
        {{"zero2 4 micro-batches",
          {"device.plugin=sim", "parallel.dp=2", "optim.plugin=zero2", "data.global_batch=8", "data.micro_batch=1",
           NULL},
          0,
          0},
         {"zero2 deterministic, 4 micro-batches",
          {"device.plugin=sim", "parallel.dp=2", "optim.plugin=zero2", "data.global_batch=8", "data.micro_batch=1",
           "run.deterministic=true", NULL},
          0,
          0},
         {"zero2 deterministic, 2 micro-batches",
          {"device.plugin=sim", "parallel.dp=2", "optim.plugin=zero2", "data.global_batch=4", "data.micro_batch=1",
           "run.deterministic=true", NULL},
          0,
          0}},
    };
    for (size_t g = 0; g < sizeof runs / sizeof runs[0]; g++) {
        double pred[3], real[3];
        for (int i = 0; i < 3; i++) {
            char out[4300];
            snprintf(out, sizeof out, "%s/buffers%zu-%d", dir, g, i);
            int n = 0;
            plait_cost_mem *p = predict_and_run(&runs[g][i], out, &n);
            double rows[8][5];
            assert_int_equal(read_memory_csv(out, rows, 8), n);
            pred[i] = p[0].buffers, real[i] = rows[0][4];
            free(p);
        }
        for (int i = 1; i < 3; i++) {
            double dp = pred[i] - pred[0], dr = real[i] - real[0];
            fprintf(stderr, "%-32s buffers predicted %.0f, declared %.0f: %+.0f and %+.0f from the defaults'\n",
                    runs[g][i].name, pred[i], real[i], dp, dr);
            if (dr == 0 || fabs(dp - dr) > 0.005 * fabs(dr))
                fail_msg("%s: the buffers change by %.0f bytes in the planner's count, %.0f in the plugin's",
                         runs[g][i].name, dp, dr);
        }
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_planned_devices),
                                       cmocka_unit_test(test_prediction_by_category),
                                       cmocka_unit_test(test_zero_buffers_follow_keys)};
    return cmocka_run_group_tests(tests, setup, teardown);
}
