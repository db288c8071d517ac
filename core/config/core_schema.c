/*
 * Keys of the core's sections. Plugin sections ("[comm.tcp]") are declared
 * by their plugins. Every key a user may write is here with its type,
 * default, range and one-line doc; `plait config show` prints them.
 */
#include "config/config.h"

#define KEY(k, type, def, lo, hi, choices, flags, doc) \
    {sizeof(plait_key_decl), (flags), (k), (type), (def), (lo), (hi), (choices), (doc)}

#define SAME PLAIT_KEY_SAME_ON_ALL
#define I PLAIT_KEY_INT
#define F PLAIT_KEY_FLOAT
#define B PLAIT_KEY_BOOL
#define S PLAIT_KEY_STRING
#define E PLAIT_KEY_ENUM
#define Z PLAIT_KEY_BYTES

static const char *const resume_choices[] = {"no", "auto", "yes", NULL};
static const char *const progress_choices[] = {"auto", "tty", "plain", "off", NULL};
static const char *const bind_choices[] = {"auto", "none", "cores", "numa", NULL};
static const char *const ckpt_format_choices[] = {"gathered", "sharded", NULL};
static const char *const arch_choices[] = {"gpt", "mlp", "llama", NULL};
static const char *const recompute_choices[] = {"none", "selective", "full", NULL};
static const char *const recompute_offload_choices[] = {"none", "host", NULL};
static const char *const rope_scaling_choices[] = {"none", "llama3", NULL};
static const char *const router_choices[] = {"softmax", "sigmoid", NULL};
static const char *const format_choices[] = {"auto", "text", "bin", "u16", NULL};
static const char *const algo_choices[] = {"auto", "ring", "rhd", "tree", "direct", "ordered", "hier", NULL};
static const char *const schedule_choices[] = {"cosine", "constant", "linear", "wsd", "inverse_sqrt", NULL};
static const char *const sampling_choices[] = {"random", "epochs", NULL};
static const char *const exit_signal_choices[] = {"none", "SIGTERM", "SIGINT", "SIGHUP", "SIGUSR1", "SIGUSR2", NULL};
static const char *const decay_style_choices[] = {"linear", "cosine", "sqrt", "exponential", NULL};
static const char *const offload_choices[] = {"none", "host", "nvme", NULL};
static const char *const moments_choices[] = {"fp32", "bf16", NULL};
static const char *const precision_choices[] = {"fp32", "tf32", "bf16", NULL};
static const char *const residual_choices[] = {"fp32", "bf16", NULL};

static const plait_key_decl run_keys[] = {
    KEY("seed", I, "1337", 0, 9.2e18, NULL, SAME, "seed for initial weights, data sampling and generation"),
    KEY("steps", I, "100", 0, 1e12, NULL, SAME, "optimizer steps to train (total, counting resumed ones)"),
    KEY("out_dir", S, "", 1, 0, NULL, 0,
        "run directory for logs, metrics.csv and checkpoints; empty = runs/<config file name>"),
    KEY("resume", E, "no", 1, 0, resume_choices, SAME,
        "continue from the latest complete checkpoint: no, auto (if one exists), yes (must exist)"),
    KEY("max_restarts", I, "0", 0, 1000, NULL, 0,
        "relaunch a failed job from its latest complete checkpoint up to this many times (--max-restarts)"),
    KEY("nnodes", S, "", 1, 0, NULL, 0,
        "hosts of the job, one launcher each (--nnodes wins): N, or MIN:MAX for an elastic job that starts with "
        "MIN hosts and continues on the hosts that remain (docs/multi-node.md); empty = this host alone"),
    KEY("join_wait", F, "30", 0, 1e6, NULL, 0,
        "elastic jobs: once MIN hosts have joined, how many seconds the first round waits for up to MAX"),
    KEY("join_timeout", F, "300", 0.1, 1e7, NULL, 0,
        "elastic jobs: seconds a round waits for MIN hosts before the job ends, naming the hosts that came"),
    KEY("host_timeout", F, "5", 0.1, 3600, NULL, 0,
        "elastic jobs: a host whose launcher's heartbeat stops this many seconds is lost, and the job goes on "
        "without it"),
    KEY("replica_every", I, "0", 0, 1e12, NULL, SAME,
        "elastic jobs: every N steps each pipeline stage's checkpoint shard is also kept in memory, on its own "
        "host and on another one, so a restart resumes without disk, losing at most N steps (0 = off)"),
    KEY("init_from", S, "", 1, 0, NULL, SAME,
        "start a fresh run from pretrained weights: a safetensors file (or a directory holding "
        "model.safetensors, or a run directory: its newest checkpoint) in the Hugging Face GPT-2 or "
        "plait/nanoGPT format; for arch llama, a Hugging Face Llama directory (config.json checked "
        "against [model]; sharded too) or a plait llama checkpoint; empty = random init"),
    KEY("ckpt_every", I, "0", 0, 1e12, NULL, SAME, "checkpoint every N steps (0 = only at the end)"),
    KEY("exit_interval", I, "0", 0, 1e12, NULL, SAME,
        "stop after a step whose number is a multiple of N (counted from the run's start, across resumes), with a "
        "checkpoint of it, exiting 0: a long run trained N steps a job, each continuing with --resume, its "
        "schedule still that of [run] steps (Megatron-LM's --exit-interval); 0 = never"),
    KEY("exit_after_minutes", F, "0", 0, 1e9, NULL, SAME,
        "stop once this much wall time has passed since the run started: after the step that passes it, with a "
        "checkpoint of that step, exiting 0, so that a job under a time limit is resubmitted and continues with "
        "--resume (Megatron-LM's --exit-duration-in-mins); 0 = never"),
    KEY("exit_signal", E, "none", 1, 0, exit_signal_choices, SAME,
        "on this signal (to any rank, or to plait's launcher, which passes it on) every rank finishes its step, "
        "saves a checkpoint of it and exits 0, so that a job a scheduler preempts or warns (Slurm's --signal) "
        "continues with --resume (Megatron-LM's --exit-signal-handler); none = the signal acts as it would"),
    KEY("keep_checkpoints", I, "2", 1, 1000, NULL, 0, "how many recent checkpoints to keep"),
    KEY("keep_every", I, "0", 0, 1e12, NULL, 0,
        "also keep, beside the recent ones, every checkpoint whose step is a multiple of N, for good (llm.c's "
        "major checkpoints: a run's history to evaluate or branch from later); 0 = none"),
    KEY("ckpt_format", E, "gathered", 1, 0, ckpt_format_choices, SAME,
        "how a checkpoint is written: gathered = full tensors, gathered to world rank 0 and written by it "
        "(model.safetensors, optim.safetensors); sharded = every rank writes the slices it holds to its own "
        "shard file at once, with an index.json (the checkpoint directory must be on a file system every rank "
        "shares); any layout resumes either"),
    KEY("ckpt_async", B, "false", 1, 0, NULL, SAME,
        "sharded saves only: each rank copies its share to host memory at the saving step and a thread of its "
        "own writes it while training goes on (one save in flight; the next waits for it; the last save is "
        "waited for)"),
    KEY("eval_every", I, "0", 0, 1e12, NULL, SAME,
        "validation loss every N steps and at the last step of each plait train (0 = only there)"),
    KEY("eval_batches", I, "4", 1, 1e6, NULL, SAME, "micro-batches per validation"),
    KEY("deterministic", B, "false", 1, 0, NULL, SAME,
        "sum gradients in one canonical order so every layout is bit-identical to one process"),
    KEY("log_level", S, "info", 1, 0, NULL, 0,
        "error|warn|info|debug|trace, optionally per component: 'warn,tcp=debug' (PLAIT_LOG_LEVEL wins)"),
    KEY("progress", E, "auto", 1, 0, progress_choices, 0,
        "progress display on rank 0: auto (in place on a terminal), tty, plain lines, off"),
    KEY("threads", I, "0", 0, 1024, NULL, 0, "math threads per rank (0 = cores / local ranks)"),
    KEY("bind", E, "auto", 1, 0, bind_choices, 0,
        "where each rank and its math threads run (docs/multi-node.md): numa = the threads of its GPU's NUMA "
        "node; cores = [run] threads cores of its own there (CPU ranks: in blocks over the NUMA nodes); none; "
        "auto = numa for GPU ranks, cores for CPU ranks, unbound where the ranks' threads outnumber the cores. "
        "A mask the process starts with (taskset, Slurm, mpirun) is kept"),
    KEY("memory_check", B, "true", 1, 0, NULL, 0,
        "refuse, before any rank starts, a layout whose memory (plait plan's prediction per rank) exceeds "
        "what this host's ranks have, naming what would fit, and (before step 1) an elastic job's replicas a "
        "host cannot hold; false = start it anyway"),
    KEY("tensorboard", B, "false", 1, 0, NULL, 0,
        "also write each metrics.csv row as TensorBoard scalars, into <out_dir>/tensorboard (a new event file "
        "each start: tensorboard --logdir <out_dir>)"),
    KEY("trace", S, "", 1, 0, NULL, SAME,
        "record a timeline of these steps on every rank: N or FIRST:LAST (from 1), merged into "
        "<out_dir>/trace.json for Perfetto (docs/trace.md); empty = off"),
    KEY("precision", E, "fp32", 1, 0, precision_choices, SAME,
        "matrix products: fp32; bf16 = bf16 operands, fp32 accumulation, fp32 master weights and optimizer "
        "state (CPUs with AVX512_BF16 or AMX, or a GPU); tf32 = GPUs only (see docs/cpu.md and docs/gpu.md)"),
    KEY("residual", E, "fp32", 1, 0, residual_choices, SAME,
        "the residual stream between blocks: fp32; bf16 (precision = bf16 only) = rounded to bf16 after the "
        "embedding and after each block, the block boundaries a micro-batch keeps stored in bf16, as "
        "Megatron-LM keeps them without --fp32-residual-connection (docs/recompute.md)"),
    KEY("debug_cpu_hide", S, "", 1, 0, NULL, SAME | PLAIT_KEY_HIDDEN,
        "for tests: CPU features to treat as absent, comma-separated (avx2, avx512, avx512_bf16, amx_bf16)"),
    KEY("debug_bf16_emulate", B, "false", 1, 0, NULL, SAME | PLAIT_KEY_HIDDEN,
        "for tests: precision = bf16 without bf16 instructions: operands rounded to bf16, multiplied by "
        "the fp32 SGEMM (same numbers, slower)"),
    KEY("mfu_peak", F, "0", 0, 1e12, NULL, 0,
        "GFLOP/s the progress line's MFU is measured against (0 = one rank's GEMM rate times the ranks with "
        "cores of their own: measured once per machine, the best of 5 tries, and cached; only when progress "
        "is shown)"),
    KEY("debug_compute_sleep_ms", F, "0", 0, 60000, NULL, SAME | PLAIT_KEY_HIDDEN,
        "for tests: every FORWARD of a model chunk also sleeps this many ms and every BACKWARD twice that, "
        "so pipeline timing is set by the schedule, not by CPU contention (0 = off)"),
    KEY("debug_corrupt_replica", I, "0", 0, 1e12, NULL, SAME | PLAIT_KEY_HIDDEN,
        "for tests: on a job's first attempt, a rank keeping another host's replica of this step or a later "
        "one damages one byte of it before handing it to its launcher, as failing memory would (0 = off)"),
    KEY("debug_die_in_save", I, "0", 0, 1e12, NULL, SAME | PLAIT_KEY_HIDDEN,
        "for tests: on a job's first attempt (no --max-restarts restart yet), world rank 0 kills itself "
        "(SIGKILL) while saving the checkpoint of this step, after writing its tensors and before renaming "
        "them into place (0 = off)"),
    KEY("debug_die_in_save_rank", I, "0", 0, 1e6, NULL, SAME | PLAIT_KEY_HIDDEN,
        "for tests: the world rank debug_die_in_save and debug_die_in_replica kill; with ckpt_format = sharded "
        "it dies after writing its shard file, before the index"),
    KEY("debug_die_in_replica", I, "0", 0, 1e12, NULL, SAME | PLAIT_KEY_HIDDEN,
        "for tests: on a job's first attempt, world rank debug_die_in_save_rank kills itself (SIGKILL) while "
        "the in-memory snapshot of this step is taken, after the stages' images and before its own kept "
        "buffers (0 = off)"),
    KEY("debug_ckpt_copy_late", B, "false", 0, 0, NULL, SAME | PLAIT_KEY_HIDDEN,
        "for tests: a ckpt_async save's writer thread waits for its snapshot's device copies only once the "
        "next step has ended, so that a snapshot the next step's optimizer overwrote would show it"),
};

static const plait_key_decl model_keys[] = {
    KEY("arch", E, "gpt", 1, 0, arch_choices, SAME,
        "model: gpt (GPT-2 decoder), llama (Llama-family decoder: RMSNorm, rotary positions, SwiGLU, "
        "grouped-query attention, untied head) or mlp (small test model)"),
    KEY("n_layer", I, "4", 1, 4096, NULL, SAME, "transformer blocks (mlp: hidden layers)"),
    KEY("n_head", I, "4", 1, 1024, NULL, SAME, "attention heads per block"),
    KEY("n_embd", I, "128", 1, 65536, NULL, SAME, "embedding width (must be a multiple of n_head)"),
    KEY("block_size", I, "128", 1, 1048576, NULL, SAME, "sequence length (context) in tokens"),
    KEY("vocab_size", I, "256", 2, 10000000, NULL, SAME, "vocabulary size (256 = bytes)"),
    KEY("n_kv_head", I, "0", 0, 1024, NULL, SAME,
        "llama: key/value heads of grouped-query attention, dividing n_head (1 = multi-query; 0 = n_head)"),
    KEY("ffn_hidden", I, "0", 0, 1048576, NULL, SAME,
        "llama: the SwiGLU MLP's width (0 = Llama's rule: 8/3 n_embd, times ffn_multiplier, rounded up to "
        "a multiple of multiple_of)"),
    KEY("multiple_of", I, "256", 1, 65536, NULL, SAME, "llama: ffn_hidden's rule rounds up to a multiple of this"),
    KEY("ffn_multiplier", F, "1", 0.01, 100, NULL, SAME, "llama: ffn_hidden's rule scales 8/3 n_embd by this"),
    KEY("norm_eps", F, "1e-5", 1e-12, 1, NULL, SAME, "llama: RMSNorm's epsilon"),
    KEY("rope_theta", F, "10000", 1e-300, 1e300, NULL, SAME,
        "llama: the base of the rotary positions' frequencies (Llama 3: 500000); must be above 0"),
    KEY("rope_scaling", E, "none", 1, 0, rope_scaling_choices, SAME,
        "llama: the rotary frequencies' scaling: none, or llama3 (Llama 3.1's long-context scaling, Hugging "
        "Face's rope_type llama3: rope_factor, rope_low_freq_factor, rope_high_freq_factor, "
        "rope_original_max_pos)"),
    KEY("rope_factor", F, "8", 1, 1e6, NULL, SAME,
        "llama, rope_scaling = llama3: the low frequencies are divided by this (Hugging Face's factor)"),
    KEY("rope_low_freq_factor", F, "1", 1e-6, 1e6, NULL, SAME,
        "llama, rope_scaling = llama3: wavelengths above rope_original_max_pos / this are scaled whole"),
    KEY("rope_high_freq_factor", F, "4", 1e-6, 1e6, NULL, SAME,
        "llama, rope_scaling = llama3: wavelengths below rope_original_max_pos / this are kept; above "
        "rope_low_freq_factor"),
    KEY("rope_original_max_pos", I, "8192", 1, 1073741824, NULL, SAME,
        "llama, rope_scaling = llama3: the context the model was first trained for (Hugging Face's "
        "original_max_position_embeddings)"),
    KEY("tie_embeddings", B, "false", 1, 0, NULL, SAME,
        "llama: the output head shares the token embedding's weights (gpt always does)"),
    KEY("head_dim", I, "0", 0, 256, NULL, SAME,
        "llama: the attention heads' size (0 = n_embd / n_head); q_proj is n_head x head_dim wide, o_proj reads as "
        "many (Mistral Nemo's 128 where n_embd / n_head is 160)"),
    KEY("qkv_bias", B, "false", 1, 0, NULL, SAME,
        "llama: q_proj, k_proj and v_proj add a bias, as Qwen2's do (Megatron-LM's --add-qkv-bias); o_proj and "
        "the MLP have none"),
    KEY("qk_norm", B, "false", 1, 0, NULL, SAME,
        "llama: each attention head's query and key pass through an RMSNorm of head_dim before the rotary "
        "positions, one weight for the query heads and one for the key heads, as Qwen3's q_norm and k_norm "
        "(Megatron-Core's qk_layernorm)"),
    KEY("init_std", F, "0.02", 1e-6, 1, NULL, SAME,
        "a fresh model's linear and embedding weights are drawn from N(0, init_std), the residual projections' "
        "(attention and MLP outputs) from N(0, init_std / sqrt(2 n_layer)), as GPT-2 and Megatron-LM's scaled "
        "init (--init-method-std); [run] init_from's weights are taken as they are"),
    KEY("recompute", E, "none", 1, 0, recompute_choices, SAME,
        "activation checkpointing: none (keep every activation), selective (recompute the attention "
        "probabilities and the GELU in backward), full (keep only each block's input, rerun its forward)"),
    KEY("recompute_offload", E, "none", 1, 0, recompute_offload_choices, SAME,
        "recompute = full: where the blocks' kept inputs wait for the backward: none (device memory) or host "
        "(pinned host memory, copied out after each layer's forward and back before its backward, as "
        "DeepSpeed's cpu_checkpointing; docs/recompute.md)"),
    KEY("moe_experts", I, "0", 0, 4096, NULL, SAME,
        "mixture of experts: routed experts of a sparse block's MLP (0 = a dense model; docs/models.md)"),
    KEY("moe_top_k", I, "2", 1, 4096, NULL, SAME, "mixture of experts: experts each token is routed to"),
    KEY("moe_shared_experts", I, "0", 0, 64, NULL, SAME,
        "mixture of experts: experts every token passes through besides its routed ones (DeepSeek's shared "
        "experts)"),
    KEY("moe_ffn_hidden", I, "0", 0, 1048576, NULL, SAME,
        "mixture of experts: one expert's MLP width (0 = the dense MLP's: 4 n_embd for gpt, ffn_hidden for "
        "llama)"),
    KEY("moe_every", I, "1", 1, 4096, NULL, SAME,
        "mixture of experts: every n-th block is sparse (blocks n-1, 2n-1, ...; 1 = every block)"),
    KEY("moe_router", E, "softmax", 1, 0, router_choices, SAME,
        "mixture of experts: the router's scores, softmax (Mixtral, Switch) or sigmoid (DeepSeek-V3); the "
        "top-k scores renormalised to sum to 1 when top_k > 1"),
    KEY("moe_aux_loss", F, "0.01", 0, 1e3, NULL, SAME,
        "mixture of experts: coefficient of the load-balancing auxiliary loss (Switch/GShard form; 0 = off)"),
    KEY("moe_z_loss", F, "0", 0, 1e3, NULL, SAME,
        "mixture of experts: coefficient of the router's z-loss, the mean squared log-sum-exp of its logits "
        "(0 = off)"),
    KEY("moe_bias_rate", F, "0", 0, 1e3, NULL, SAME,
        "mixture of experts: DeepSeek-V3's auxiliary-loss-free balancing, each expert's selection bias moved "
        "by this after every step, up when it took fewer tokens than the mean (0 = off)"),
    KEY("moe_capacity", F, "0", 0, 1e6, NULL, SAME,
        "mixture of experts: capacity factor, an expert taking at most factor x tokens x top_k / experts "
        "tokens of a micro-batch, the rest dropped and counted (0 = dropless)"),
};

static const plait_key_decl data_keys[] = {
    KEY("path", S, "data/corpus.txt", 1, 0, NULL, SAME,
        "training data: a text file (bytes are tokens) or token files (.bin, as plait data prepare writes); "
        "a list or glob of shards (comma or space separated) is read back to back"),
    KEY("val_path", S, "", 1, 0, NULL, SAME,
        "validation data, the same syntax (empty = hold out the tail of path by val_fraction)"),
    KEY("val_sets", S, "", 1, 0, NULL, SAME,
        "more validation sets, each scored at every evaluation as metrics.csv's val_loss_<name>: NAME=PATTERN "
        "items separated by commas or spaces (wiki=data/wiki_val.bin, code=data/code/val_*.bin), a pattern as "
        "val_path's; empty = none"),
    KEY("tokenizer", S, "", 1, 0, NULL, SAME,
        "the tokenizer the data was made with (a directory with vocab.json + merges.txt, or tokenizer.json); "
        "checked against vocab_size and recorded in checkpoints so plait sample encodes and decodes text "
        "(empty = none: bytes when vocab_size is 256, token ids otherwise)"),
    KEY("format", E, "auto", 1, 0, format_choices, SAME,
        "data format: auto (by extension: .bin = bin), text, bin (llm.c header with uint16 or uint32 "
        "tokens, or raw uint16; u16 is the old name)"),
    KEY("val_fraction", F, "0.1", 0, 0.9, NULL, SAME,
        "share of the data held out for validation (the tail); not used when val_path is set"),
    KEY("eod_token", I, "-1", -1, 1e9, NULL, SAME,
        "the token id the data's documents end with (GPT-2's <|endoftext|>: 50256); -1 = none, or [data] "
        "tokenizer's <|endoftext|> where eod_mask_loss asks for one"),
    KEY("eod_mask_loss", B, "false", 1, 0, NULL, SAME,
        "leave the target after each eod_token out of the loss (the next document's first token, which nothing "
        "before it predicts); the loss is the mean over the targets that count (Megatron-LM's --eod-mask-loss)"),
    KEY("weights", S, "", 1, 0, NULL, SAME,
        "a weighted blend of datasets: one weight >= 0 per pattern of path (each pattern's files one dataset), "
        "a training sequence drawn from dataset k with probability weight k / their sum (Megatron-LM's data "
        "blend); empty = one stream, every training token alike"),
    KEY("skip_batches", S, "", 1, 0, NULL, SAME,
        "training batches never read, as steps numbered in metrics.csv: 'A-B' or 'N', separated by commas "
        "(1200-1350, 1500): from step A on each step reads a later batch, so a run resumed from a checkpoint "
        "before a loss spike reads past the data around it (Megatron-LM's --iterations-to-skip; PaLM's "
        "restarts); empty = none"),
    KEY("sampling", E, "random", 1, 0, sampling_choices, SAME,
        "how training sequences are drawn: random = each a window of block_size + 1 tokens at a uniformly random "
        "start, with replacement (nanoGPT's); epochs = the training split cut into such windows (consecutive ones "
        "sharing a token), each read once an epoch in an order shuffled anew each epoch from [run] seed "
        "(Megatron-LM's samples); not with weights"),
    KEY("global_batch", I, "0", 0, 1e9, NULL, SAME,
        "sequences per optimizer step over all ranks (0 = derive from the other two)"),
    KEY("micro_batch", I, "0", 0, 1e9, NULL, SAME,
        "sequences per forward/backward on one rank (0 = derive; 8 if nothing is given)"),
    KEY("accumulation_steps", I, "0", 0, 1e9, NULL, SAME,
        "micro-batches per rank per step (0 = derive; 1 if nothing is given)"),
};

static const plait_key_decl comm_keys[] = {
    KEY("plugin", S, "tcp", 1, 0, NULL, SAME, "comm plugin: tcp, nccl, verbs, or a path to a .so"),
    KEY("timeout", F, "300", 0.01, 1e7, NULL, SAME,
        "seconds any wait may block before the operation fails naming the peers it waited on"),
    KEY("algorithm", E, "auto", 1, 0, algo_choices, SAME,
        "collective algorithm: auto (by size, ranks and hosts), ring, rhd, tree, direct, ordered, hier (hierarchical "
        "across hosts; allreduce, reduce_scatter, allgather)"),
    KEY("check_collectives", B, "false", 1, 0, NULL, SAME,
        "compare each collective's (op, size, dtype) across ranks and report a mismatch"),
    KEY("staging_chunk", I, "4194304", 256, 1073741824, NULL, SAME,
        "bytes per chunk when device buffers cross a host-memory transport through pinned host memory "
        "(copy-out of one chunk overlaps the transfer of the previous; docs/transport.md)"),
    KEY("rendezvous", S, "", 1, 0, NULL, SAME,
        "host:port of rank 0's store for multi-node jobs (empty = local, or from the launcher's env)"),
};

static const plait_key_decl parallel_keys[] = {
    KEY("plugin", S, "dp", 1, 0, NULL, SAME, "parallel plugin: dp, tp, pp, hybrid, or a path"),
    KEY("dp", I, "1", 1, 1e6, NULL, SAME, "data-parallel size"),
    KEY("tp", I, "1", 1, 1e6, NULL, SAME, "tensor-parallel size"),
    KEY("pp", I, "1", 1, 1e6, NULL, SAME, "pipeline-parallel size"),
    KEY("cp", I, "1", 1, 1e6, NULL, SAME,
        "context-parallel size: each rank holds 2 of 2cp chunks of every sequence (ring attention)"),
    KEY("ep", I, "1", 1, 1e6, NULL, SAME,
        "expert-parallel size, carved out of dp x cp (a divisor of dp*cp; training needs experts: 1 today)"),
    KEY("order", S, "tp,dp,pp", 1, 0, NULL, SAME,
        "mesh axis order, innermost (neighbouring ranks) first; cp, when not named, goes just outside tp"),
};

static const plait_key_decl optim_keys[] = {
    KEY("plugin", S, "adam", 1, 0, NULL, SAME, "optimizer plugin: adam, zero1, zero2, zero3, or a path"),
    KEY("lr", F, "1e-3", 0, 10, NULL, SAME, "peak learning rate"),
    KEY("min_lr", F, "1e-4", 0, 10, NULL, SAME, "learning rate at the end of the decay"),
    KEY("lr_schedule", E, "cosine", 1, 0, schedule_choices, SAME,
        "after warmup: cosine or linear decay to min_lr at lr_decay_steps; constant; wsd (warmup-stable-decay: lr "
        "until the last lr_wsd_decay_steps before lr_decay_steps, then down to min_lr); inverse_sqrt (lr * "
        "sqrt(warmup_steps / step), at least min_lr)"),
    KEY("warmup_steps", I, "0", 0, 1e12, NULL, SAME, "linear warmup steps"),
    KEY("lr_decay_steps", I, "0", 0, 1e12, NULL, SAME, "step at which decay reaches min_lr (0 = [run] steps)"),
    KEY("lr_wsd_decay_steps", I, "0", 0, 1e12, NULL, SAME,
        "lr_schedule = wsd: the steps of the final decay, which ends at lr_decay_steps (needed: 1 up to the steps "
        "after warmup)"),
    KEY("lr_wsd_decay_style", E, "linear", 1, 0, decay_style_choices, SAME,
        "lr_schedule = wsd: the final decay's shape over its share p: linear (1 - p), cosine, sqrt (1 - sqrt(p)), "
        "or exponential (2 * 0.5^p - 1)"),
    KEY("beta1", F, "0.9", 0, 0.999999, NULL, SAME, "Adam beta1"),
    KEY("beta2", F, "0.95", 0, 0.999999999, NULL, SAME, "Adam beta2"),
    KEY("eps", F, "1e-8", 1e-30, 1, NULL, SAME,
        "Adam epsilon (> 0: it keeps the update finite where a "
        "parameter's second moment is zero)"),
    KEY("weight_decay", F, "0.1", 0, 10, NULL, SAME,
        "decoupled weight decay (not applied to biases and LayerNorm parameters)"),
    KEY("grad_clip", F, "1.0", 0, 1e9, NULL, SAME, "clip the global gradient norm to this (0 = off)"),
    KEY("moments", E, "fp32", 1, 0, moments_choices, SAME,
        "the type Adam's two moments are stored in (adam, zero1-3): fp32, or bf16 (4 bytes a parameter where fp32 "
        "takes 8; each update widens them, steps in float32 and rounds them back: Megatron-Core's "
        "--exp-avg-dtype/--exp-avg-sq-dtype bf16); checkpoints hold them as float32 either way. bf16 with offload "
        "is refused"),
    KEY("offload", E, "none", 1, 0, offload_choices, SAME,
        "where the optimizer state lives and steps: none (the device), host (host memory, the step on the host; "
        "a device whose memory is not host memory only), nvme (files under offload_path, streamed through "
        "offload_buffer)"),
    KEY("offload_path", S, "", 1, 0, NULL, 0,
        "directory of the optimizer state files when offload = nvme (a local disk; tmpfs counts against memory)"),
    KEY("offload_buffer", Z, "64M", 65536, 1099511627776.0, NULL, SAME,
        "host memory through which offload = nvme streams the state: three slots, one read ahead, one stepping, "
        "one being written"),
    KEY("offload_params", B, "false", 1, 0, NULL, SAME,
        "zero3: keep this rank's float32 parameter shards where offload keeps the state too, fetched as each "
        "layer's gather starts (only the gathered layers are on the device)"),
};

static const plait_key_decl device_keys[] = {
    KEY("plugin", S, "cpu", 1, 0, NULL, SAME,
        "compute device: cpu (host memory, the CPU kernels), cuda (one NVIDIA GPU per rank), or another "
        "installed device plugin or a path (`plait plugins` lists them)"),
    KEY("ordinal", I, "-1", -1, 1e6, NULL, 0,
        "which of the visible devices this rank uses (-1 = the local rank modulo the visible devices)"),
};

#define DECLARE(sec, arr)                                                                          \
    do {                                                                                           \
        plait_status st_ = plait_config_declare(cfg, sec, arr, sizeof(arr) / sizeof(arr[0]),       \
                                                sizeof(arr[0]), "core");                           \
        if (st_ != PLAIT_OK) return st_;                                                           \
    } while (0)

plait_status plait_config_declare_core(plait_config *cfg) {
    DECLARE("run", run_keys);
    DECLARE("model", model_keys);
    DECLARE("data", data_keys);
    DECLARE("comm", comm_keys);
    DECLARE("parallel", parallel_keys);
    DECLARE("optim", optim_keys);
    DECLARE("device", device_keys);
    return PLAIT_OK;
}
