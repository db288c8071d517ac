#!/usr/bin/env python3
"""What one training step of plait's GPT costs on the cuda device, from the code.

Walks the calls the model (core/model/model.c, gpt_layers.c, mlp.c), the trainer
(core/train/run_step.c) and the adam optimizer plugin make through the
device's kernel table in one step of one micro-batch, and what the cuda
plugin (plugins/device/cuda/kernels.c, gemm.c, *.cu) turns each call into:
launches, bytes of device memory moved (each input read once and each
output written once: a floor; tiles re-read through L2 are not counted)
and floating-point operations. Then the time they imply on a GPU given
its memory bandwidth, its bf16 GEMM rate, the rate of plait's own
tensor-core kernels (the fused attention) and a launch's cost: each
kernel takes the longest of its bytes over the bandwidth, its FLOPs over
its rate and one launch, and each host synchronisation drains the
stream.

A variant is the code at one point of the GPU-speed work: `unfused` (the
scores materialised, products through cuBLASLt), `fused-attention` (the
flash-style kernels of attention.cu and attention_tc.cu), and so on. The
table is printed for every variant, kernel family by family. Estimates,
not measurements: nothing here has run on a GPU (docs/gpu.md).

    scripts/gpu-step-estimate.py                      # GPT-2 124M, batch 16, bf16, H100 figures
    scripts/gpu-step-estimate.py --config configs/gpt2-124m.ini --batch 16 --bw 3.0 --gemm 700
"""
import argparse
import configparser
import math
import sys

VARIANTS = ["unfused", "fused-attention", "device-step", "fused-loss", "residual-in-c", "layernorm-fused",
            "gelu-epilogue", "bf16-activations", "chunked-head", "bias-grad-epilogue", "layernorm-bf16-copy"]
BF16_VARIANTS = VARIANTS[VARIANTS.index("bf16-activations"):]
# the code as it is: with bf16 activations, and with float32 ones (tf32 and
# fp32 runs, which the bf16-activation variants do not touch)
LATEST = {"bf16": VARIANTS[-1], "float32": "gelu-epilogue"}
VARIANT_TEXT = {
    "unfused": "attention's scores materialised (T×T fp32, 16 per-sequence cuBLASLt calls a product)",
    "fused-attention": "fused flash-style attention (attention.cu): lse kept, scores never stored",
    "device-step": "+ the optimizer step on the device: Σg² of adjacent gradients in one call, the clipping "
                   "factor on the device (sumsq_clip), one AdamW launch for every tensor (adamw_multi), "
                   "the norm read with the loss",
    "fused-loss": "+ the loss and the logits' gradient in one pass in the forward (crossentropy_fused), and each "
                  "linear layer's input and weight gradients from one call (its output gradient converted once)",
    "residual-in-c": "+ the residual stream as cuBLASLt's C of the products that add it, the sum written to D "
                     "(no copy of the residual first)",
    "layernorm-fused": "+ each LayerNorm's backward in one pass (layernorm_backward_fused): the residual's gradient "
                       "added there instead of copied first, the parameters' partial sums from the same reads",
    "gelu-epilogue": "+ GELU in the MLP's first product (cuBLASLt's GELU_AUX_BIAS: GELU's output and input written "
                     "by the product) and its derivative in the backward's (DGELU: the product reads GELU's input)",
    "bf16-activations": "+ the activations the products read and write stored in bf16 (gpt_bf16.c): no operand "
                        "copies but the weights' bf16 copy once a step and the residual stream's gradient once for "
                        "the two products that read it; bf16 outputs, LayerNorm writing bf16, attention and the "
                        "loss reading and writing bf16",
    "chunked-head": "+ the head's backward in its forward, a chunk of rows at a time (gpt_bf16.c): no logits kept, "
                    "lm_head's weight gradient accumulated over the chunks in float32 and added once",
    "bias-grad-epilogue": "+ each bias gradient summed by the weight gradient's product as it reads the output "
                          "gradient (cuBLASLt's BGRADB epilogue), added to the gradient by one small kernel, instead "
                          "of the column-sum kernels reading it again",
    "layernorm-bf16-copy": "+ the residual stream's gradient stored in bf16 by the LayerNorm backward that makes "
                           "it (layernorm_backward_fused_bf16_copy), instead of read back and converted before "
                           "each block half's products",
}


def read_shape(path, batch):
    cp = configparser.ConfigParser(inline_comment_prefixes=(";", "#"))
    with open(path) as f:
        cp.read_string(f.read())
    m = cp["model"]
    s = dict(L=int(m.get("n_layer", 12)), NH=int(m.get("n_head", 12)), C=int(m.get("n_embd", 768)),
             T=int(m.get("block_size", 1024)), V=int(m.get("vocab_size", 50304)))
    s["B"] = batch
    s["HS"] = s["C"] // s["NH"]
    return s


class Step:
    """Kernel calls of one step, summed per family."""

    def __init__(self, args):
        self.a = args
        self.rows = {}   # family -> [launches, bytes, flops, seconds]
        self.syncs = 0

    def kernel(self, family, nbytes, flops=0.0, rate=None, launches=1):
        """`launches` launches moving `nbytes` and computing `flops` in all."""
        a = self.a
        t_bytes = nbytes / (a.bw * 1e12)
        t_flops = flops / ((rate or a.gemm) * 1e12) if flops else 0.0
        t = max(t_bytes, t_flops, launches * a.launch_us * 1e-6)
        r = self.rows.setdefault(family, [0, 0.0, 0.0, 0.0])
        r[0] += launches
        r[1] += nbytes
        r[2] += flops
        r[3] += t

    def sync(self, what):
        self.syncs += 1
        r = self.rows.setdefault("host synchronisations (" + what + ")", [0, 0.0, 0.0, 0.0])
        r[3] += self.a.sync_us * 1e-6


# ---- what the cuda plugin does for each table entry ------------------------

def gemm(st, family, M, N, K, batch=1, beta=0.0, a_span=None, b_span=None, bias=False, a_converted=False, aux=False,
         stored=False, out_esz=4):
    """pc_gemm_run (gemm.c): bf16 runs round both operands' spans into
    scratch (convert.cu: one launch each, 4 bytes read and 2 written an
    element; an A the entry's previous product converted is reused:
    a_converted) unless they are stored in bf16 already (stored: bf16
    activations and the weights' bf16 copy), then one cuBLASLt product (bf16
    operands, an fp32 output, or with out_esz 2 a bf16 one; the bias
    epilogue; aux: a GELU epilogue's M x N matrix of the output's type,
    written or read)."""
    bf16 = st.a.precision == "bf16"
    esz = 2 if bf16 else 4
    a_span = a_span if a_span is not None else M * K * batch
    b_span = b_span if b_span is not None else K * N * batch
    if bf16 and not stored:
        conv = b_span + (0 if a_converted else a_span)
        st.kernel("bf16 operand copies", 6 * conv, launches=1 if a_converted else 2)
    out = out_esz * M * N * batch * (2 if beta else 1)
    st.kernel(family, esz * (a_span + b_span) + out + (out_esz * N if bias else 0) + (out_esz * M * N if aux else 0),
              2.0 * M * N * K * batch)


def colsum(st, family, rows, cols, esz=4):
    """Column sums in two passes (pcuda.h PC_COL_ROWS): partials, then the
    accumulated gradient (vector.cu); the rows of esz bytes an element."""
    chunks = math.ceil(rows / 64)
    st.kernel(family, esz * rows * cols + 4 * chunks * cols)
    st.kernel(family, 4 * chunks * cols + 8 * cols)


def layernorm_fwd(st, BT, C, out_esz=4):
    st.kernel("layernorm", 4 * BT * C + out_esz * BT * C + 8 * BT + 8 * C)


def layernorm_bwd_input(st, BT, C):
    # dinp += ...: reads dout, inp, mean, rstd, w; reads and writes dinp
    st.kernel("layernorm", 4 * BT * C * 4 + 8 * BT)


def layernorm_bwd_fused(st, BT, C, dres, dout_esz=4, copy=False):
    """norm.cu's layernorm_backward_fused: a block of 64 rows reads dout (of
    dout_esz bytes an element), inp (and dres, in place or beside) once for
    dinp (and, copy, writes dinp in bf16 too) and the parameters' partial
    sums (the second read from cache), then a finish each."""
    chunks = math.ceil(BT / 64)
    st.kernel("layernorm", dout_esz * BT * C + 4 * BT * C * (3 if dres else 2) + (2 * BT * C if copy else 0) +
              8 * BT + 8 * chunks * C)
    st.kernel("layernorm", 4 * chunks * C + 8 * C, launches=1)
    st.kernel("layernorm", 4 * chunks * C + 8 * C, launches=1)


def layernorm_bwd_weights(st, BT, C):
    # norm.cu: one pass over dout and inp into both partials, then a finish each
    chunks = math.ceil(BT / 64)
    st.kernel("layernorm", 8 * BT * C + 8 * BT + 8 * chunks * C)
    st.kernel("layernorm", 4 * chunks * C + 8 * C, launches=1)
    st.kernel("layernorm", 4 * chunks * C + 8 * C, launches=1)


def matmul_forward(st, family, BT, C, OC, residual=False, res_copy=True):
    """k_matmul_forward_residual: beta = 1 on a copy of the residual, or
    (res_copy False) the residual as cuBLASLt's C and the output its D."""
    if residual and res_copy:
        st.kernel("residual copies", 8 * BT * OC)
    gemm(st, family, BT, OC, C, beta=1.0 if residual else 0.0, bias=True)


def matmul_backward(st, family, BT, C, OC, dinp=True, dweight=True, dbias=True):
    """One call: with both halves, dout (the A of both products) is
    converted once (gemm.c's copies reused within an entry)."""
    if dinp:
        gemm(st, family, BT, C, OC)
    if dweight:
        gemm(st, family, OC, C, BT, beta=1.0, a_converted=dinp)
    if dbias:
        colsum(st, "bias gradients", BT, OC)


def attention_unfused_fwd(st, s):
    B, T, NH, HS, C = s["B"], s["T"], s["NH"], s["HS"], s["C"]
    span = (NH - 1) * HS + (T - 1) * 3 * C + HS  # q (or k, v) of one sequence, as gemm.c spans it
    for _ in range(B):  # Q·Kᵀ, one batched product a sequence
        gemm(st, "attention", T, T, HS, batch=NH, a_span=span, b_span=span)
    st.kernel("attention", 4 * B * NH * T * T * 2)  # softmax.cu, in place
    for _ in range(B):  # P·V
        gemm(st, "attention", T, HS, T, batch=NH, a_span=NH * T * T, b_span=span)


def attention_unfused_bwd(st, s):
    B, T, NH, HS, C = s["B"], s["T"], s["NH"], s["HS"], s["C"]
    span = (NH - 1) * HS + (T - 1) * 3 * C + HS
    dspan = (NH - 1) * HS + (T - 1) * C + HS
    for _ in range(B):  # dP = dO·Vᵀ
        gemm(st, "attention", T, T, HS, batch=NH, a_span=dspan, b_span=span)
    st.kernel("attention", 4 * B * NH * T * T * 3)  # the softmax's backward, in place
    for _ in range(B):  # dQ, dK, dV
        gemm(st, "attention", T, HS, T, batch=NH, a_span=NH * T * T, b_span=span)
        gemm(st, "attention", T, HS, T, batch=NH, a_span=NH * T * T, b_span=span)
        gemm(st, "attention", T, HS, T, batch=NH, a_span=NH * T * T, b_span=dspan)


def attention_fused(st, s, backward, e=4):
    """attention.cu: 64x64 tiles up to the diagonal; the forward's 2 tile
    products, the backward's 4 (dK, dV) + 3 (dQ) a (query, key) tile
    pair; bf16 runs on the tensor cores (their own rate), others fp32;
    q, k, v, the output and their gradients e bytes an element."""
    B, T, NH, HS, C = s["B"], s["T"], s["NH"], s["HS"], s["C"]
    nq = math.ceil(T / 64)
    pairs = B * NH * nq * (nq + 1) // 2
    tile = 2.0 * 64 * 64 * HS
    rate = st.a.attn if st.a.precision == "bf16" else st.a.fp32
    BT = B * T
    if not backward:
        st.kernel("attention", e * BT * 3 * C + e * BT * C + 4 * B * NH * T, 2 * tile * pairs, rate)
        return
    st.kernel("attention", 2 * e * BT * C + 4 * B * NH * T)  # D = dO·O
    ins = e * BT * 3 * C + e * BT * C + 8 * B * NH * T
    st.kernel("attention", ins + e * BT * 2 * C, 4 * tile * pairs, rate)  # dK, dV
    st.kernel("attention", ins + e * BT * C, 3 * tile * pairs, rate)  # dQ


def head_rows(BT, C, V):
    """plait_model_head_rows (core/model/gpt_bf16.c) with the room the
    backward scratch leaves after ln_f's output (model_slots.c: the bf16
    gradients of c_fc, the attention output, q/k/v and the residual stream,
    each 16-float aligned)."""
    def al(n):
        return (n + 15) // 16 * 16
    room = sum(al((BT * w + 1) // 2) for w in (4 * C, C, 3 * C, C))
    least = min(BT, 64)
    fit = min(room * 2 // V // 8 * 8, BT)
    fit = max(fit, least)
    if fit == BT:
        return BT
    chunks = -(-BT // fit)
    return -(-(-(-BT // chunks)) // 8) * 8


def step_bf16_activations(args, s, chunked=False, bgrad=False, lncopy=False):
    """The step under bf16 activations (core/model/gpt_bf16.c): every
    fusion of gelu-epilogue, with what the products read and write stored in
    bf16 (2 bytes an element), the residual stream and its gradient, the
    parameters and their gradients float32. chunked: the head's products'
    backward in its forward, head_rows rows at a time. bgrad: the bias
    gradients from the weight gradients' products (BGRADB), each added by
    one kernel of OC elements. lncopy: the residual stream's gradient
    written in bf16 by the LayerNorm backward that makes it."""
    st = Step(args)

    def bias_grad(rows, cols):
        if bgrad:
            st.kernel("bias gradients", 12 * cols)  # y += x over the vector BGRADB wrote
        else:
            colsum(st, "bias gradients", rows, cols, esz=2)
    B, T, C, L, V = s["B"], s["T"], s["C"], s["L"], s["V"]
    BT, F = B * T, 4 * C
    n_params = 12 * C * C + 13 * C
    numel = L * n_params + V * C + T * C + 2 * C
    st.kernel("optimizer", 4 * numel)  # the gradients zeroed
    # the weights' bf16 copy, made at each layer's first forward after the
    # optimizer step (model.c): c_attn's weight and bias, attn.c_proj's
    # weight, c_fc's weight and bias, mlp.c_proj's weight; lm_head's
    block_w = 12 * C * C + 3 * C + F
    st.kernel("bf16 operand copies", 6 * (L * block_w + V * C), launches=6 * L + 1)
    st.kernel("embedding", 4 * BT * C * 3 + 4 * BT)
    for _ in range(L):
        layernorm_fwd(st, BT, C, out_esz=2)
        gemm(st, "linear layers", BT, 3 * C, C, bias=True, stored=True, out_esz=2)
        attention_fused(st, s, backward=False, e=2)
        gemm(st, "linear layers", BT, C, C, beta=1.0, bias=True, stored=True)  # residual C, fp32 D
        layernorm_fwd(st, BT, C, out_esz=2)
        gemm(st, "linear layers", BT, F, C, bias=True, aux=True, stored=True, out_esz=2)
        gemm(st, "linear layers", BT, C, F, beta=1.0, bias=True, stored=True)
    layernorm_fwd(st, BT, C, out_esz=2)
    st.kernel("cross-entropy", 8, launches=1)  # zero_f64
    if chunked:
        # each chunk: its logits, the loss with their gradient in place,
        # ln_f's output gradient for its rows and lm_head's weight gradient
        # added into the float32 accumulator (zeroed first, read and written
        # by every chunk's product, added to the gradient in the backward:
        # counted with the optimizer, as the profile counts axpy)
        R = head_rows(BT, C, V)
        st.kernel("optimizer", 4 * V * C)
        for r in range(0, BT, R):
            n = min(R, BT - r)
            gemm(st, "lm_head", n, V, C, stored=True, out_esz=2)
            st.kernel("cross-entropy", 4 * n * V + 16 * n)
            st.kernel("cross-entropy", 4 * n)
            gemm(st, "lm_head", n, C, V, stored=True, out_esz=2)
            gemm(st, "lm_head", V, C, n, beta=1.0, stored=True)
        st.kernel("optimizer", 12 * V * C)
    else:
        gemm(st, "lm_head", BT, V, C, stored=True, out_esz=2)
        st.kernel("cross-entropy", 4 * BT * V + 16 * BT)  # bf16 logits read, their gradient written in place
        st.kernel("cross-entropy", 4 * BT)
        # backward: head
        gemm(st, "lm_head", BT, C, V, stored=True, out_esz=2)
        gemm(st, "lm_head", V, C, BT, beta=1.0, stored=True)
    layernorm_bwd_fused(st, BT, C, dres=False, dout_esz=2, copy=lncopy)
    for layer in range(L, 0, -1):
        # MLP half: d(y) converted once (or written by the LayerNorm before),
        # DGELU's product, c_fc's, LayerNorm
        if not lncopy:
            st.kernel("bf16 operand copies", 6 * BT * C)
        gemm(st, "linear layers", BT, F, C, aux=True, stored=True, out_esz=2)
        gemm(st, "linear layers", C, F, BT, beta=1.0, stored=True)
        bias_grad(BT, C)
        gemm(st, "linear layers", BT, C, F, stored=True, out_esz=2)
        gemm(st, "linear layers", F, C, BT, beta=1.0, stored=True)
        bias_grad(BT, F)
        layernorm_bwd_fused(st, BT, C, dres=True, dout_esz=2, copy=lncopy)
        # attention half: d(res2) converted once (or as above), c_proj,
        # attention, c_attn, LayerNorm (no copy under the first block: the
        # embedding reads float32)
        if not lncopy:
            st.kernel("bf16 operand copies", 6 * BT * C)
        gemm(st, "linear layers", BT, C, C, stored=True, out_esz=2)
        gemm(st, "linear layers", C, C, BT, beta=1.0, stored=True)
        bias_grad(BT, C)
        attention_fused(st, s, backward=True, e=2)
        st.kernel("bias gradients", 8 * C, launches=2)  # the key bias kept at zero: two copies
        gemm(st, "linear layers", BT, C, 3 * C, stored=True, out_esz=2)
        gemm(st, "linear layers", 3 * C, C, BT, beta=1.0, stored=True)
        bias_grad(BT, 3 * C)
        layernorm_bwd_fused(st, BT, C, dres=True, dout_esz=2, copy=lncopy and layer > 1)
    st.kernel("embedding", 4 * BT * C + 8 * V * C + 8 * T * C + 4 * BT)
    st.kernel("optimizer", 12 * V * C)  # the tied head's gradient folded into the table's
    st.sync("loss")
    st.kernel("optimizer", 4 * numel, launches=3)
    st.kernel("optimizer", 28 * numel, launches=1)
    return st


def step(args, s, variant):
    if variant in BF16_VARIANTS:
        v = BF16_VARIANTS.index(variant)
        return step_bf16_activations(args, s, chunked=v >= 1, bgrad=v >= 2, lncopy=v >= 3)
    st = Step(args)
    B, T, C, L, V, NH, HS = s["B"], s["T"], s["C"], s["L"], s["V"], s["NH"], s["HS"]
    BT, F = B * T, 4 * C
    v = VARIANTS.index(variant)
    fused = v >= 1
    one_call = v >= 3  # each linear layer's backward in one call (model/mlp.c, gpt_layers.c: BWD_ALL)
    fused_loss = v >= 3  # crossentropy_fused in the forward (gpt_layers.c)
    res_copy = v < 4  # the forward's residual copied before its product (kernels.c, gemm.c)
    ln_fused = v >= 5  # layernorm_backward_fused in the one-pass backward (mlp.c, gpt_layers.c)
    gelu_epi = v >= 6  # matmul_forward_gelu / matmul_backward_gelu (mlp.c; gemm.c's epilogues)
    # trainer: the gradients are zeroed at the step's start (run_step.c)
    n_params = 12 * C * C + 13 * C
    numel = L * n_params + V * C + T * C + 2 * C
    st.kernel("optimizer", 4 * numel)
    # forward: embedding, blocks, head
    st.kernel("embedding", 4 * BT * C * 3 + 4 * BT)
    for _ in range(L):
        layernorm_fwd(st, BT, C)
        matmul_forward(st, "linear layers", BT, C, 3 * C)
        if fused:
            attention_fused(st, s, backward=False)
        else:
            attention_unfused_fwd(st, s)
        matmul_forward(st, "linear layers", BT, C, C, residual=True, res_copy=res_copy)
        layernorm_fwd(st, BT, C)
        if gelu_epi:  # D = GELU(x) and aux = x from the one product
            gemm(st, "linear layers", BT, F, C, bias=True, aux=True)
        else:
            matmul_forward(st, "linear layers", BT, C, F)
            st.kernel("gelu", 8 * BT * F)
        matmul_forward(st, "linear layers", BT, F, C, residual=True, res_copy=res_copy)
    layernorm_fwd(st, BT, C)
    gemm(st, "lm_head", BT, V, C)
    st.kernel("cross-entropy", 8, launches=1)  # zero_f64
    if fused_loss:
        # loss.cu: one block a row (max, Σexp, loss, the gradient in place;
        # the row's re-reads from L2), then the losses' sum
        st.kernel("cross-entropy", 8 * BT * V + 16 * BT)
        st.kernel("cross-entropy", 4 * BT)
    else:
        # the loss in pieces (gpt_layers.c): row max, Σexp, target logit, rows
        st.kernel("cross-entropy", 4 * BT * V + 4 * BT)
        st.kernel("cross-entropy", 4 * BT * V + 8 * BT)
        st.kernel("cross-entropy", 8 * BT)
        st.kernel("cross-entropy", 20 * BT)
    # backward: head
    if not fused_loss:
        st.kernel("cross-entropy", 8 * BT * V + 8 * BT)  # dlogits in place
    if one_call:
        matmul_backward(st, "lm_head", BT, C, V, dbias=False)
    else:
        gemm(st, "lm_head", BT, C, V)
    if not one_call:
        gemm(st, "lm_head", V, C, BT, beta=1.0)
    if ln_fused:
        layernorm_bwd_fused(st, BT, C, dres=False)
    else:
        st.kernel("layernorm", 4 * BT * C)  # zero dx
        layernorm_bwd_input(st, BT, C)
        layernorm_bwd_weights(st, BT, C)
    for _ in range(L):
        # MLP half (mlp.c): input gradients, then weights (or both a call)
        if gelu_epi:  # DGELU: the input gradient's product reads GELU's input
            gemm(st, "linear layers", BT, F, C, aux=True)
            gemm(st, "linear layers", C, F, BT, beta=1.0, a_converted=True)  # dweight: dout's copy reused
            colsum(st, "bias gradients", BT, C)
        else:
            matmul_backward(st, "linear layers", BT, F, C, dweight=one_call, dbias=one_call)
            st.kernel("gelu", 12 * BT * F)
        matmul_backward(st, "linear layers", BT, C, F, dweight=one_call, dbias=one_call)
        if not one_call:
            matmul_backward(st, "linear layers", BT, F, C, dinp=False)
            matmul_backward(st, "linear layers", BT, C, F, dinp=False)
        if ln_fused:
            layernorm_bwd_fused(st, BT, C, dres=True)
        else:
            layernorm_bwd_weights(st, BT, C)
            st.kernel("residual copies", 8 * BT * C)
            layernorm_bwd_input(st, BT, C)
        # attention half (gpt_layers.c)
        matmul_backward(st, "linear layers", BT, C, C, dweight=one_call, dbias=one_call)
        if fused:
            attention_fused(st, s, backward=True)
        else:
            attention_unfused_bwd(st, s)
        st.kernel("bias gradients", 8 * C, launches=2)  # the key bias kept at zero: two copies
        matmul_backward(st, "linear layers", BT, C, 3 * C, dweight=one_call, dbias=one_call)
        if not one_call:
            matmul_backward(st, "linear layers", BT, C, C, dinp=False)
            matmul_backward(st, "linear layers", BT, C, 3 * C, dinp=False)
        if ln_fused:
            layernorm_bwd_fused(st, BT, C, dres=True)
        else:
            layernorm_bwd_weights(st, BT, C)
            layernorm_bwd_input(st, BT, C)
    # embedding backward (embedding.cu: 1024 blocks, each owning table rows)
    st.kernel("embedding", 4 * BT * C + 8 * V * C + 8 * T * C + 4 * BT)
    # the tied head's gradient folded into the token table's (tied.c: axpy)
    st.kernel("optimizer", 12 * V * C)
    # the step's losses to the host (run_step.c)
    st.sync("loss")
    # adam (params, grads, 2 moments: 28 B an element for AdamW)
    per_param = L * 12 + 4
    if v < 2:
        # the exact Σg² per parameter, the accumulator to the host, then
        # one AdamW launch per parameter
        st.kernel("optimizer", 4 * numel, launches=per_param + 1)
        st.sync("gradient norm")
        st.kernel("optimizer", 28 * numel, launches=per_param)
    else:
        # the accumulator zeroed, Σg² of the adjacent gradients in one call
        # (the tied head's is folded into the table's), the factor on the
        # device, one AdamW launch (adam.c: plait_optim_norm_on_device)
        st.kernel("optimizer", 4 * numel, launches=3)
        st.kernel("optimizer", 28 * numel, launches=1)
    return st


def cell(r):
    launches, nbytes, flops, t = r
    return "%d, %.1f, %.0f, %.2f" % (launches, nbytes / 1e9, flops / 1e9, t * 1e3)


def fmt_row(name, r):
    return "| %s | %s |" % (name, cell(r).replace(", ", " | "))


def side_by_side(args, s, variants):
    steps = [step(args, s, v) for v in variants]
    fams = []
    for st in steps:
        for f in sorted(st.rows, key=lambda n: -st.rows[n][3]):
            if f not in fams:
                fams.append(f)
    print("| kernel family | " + " | ".join("%s: launches, GB, GFLOP, ms" % v for v in variants) + " |")
    print("|---|" + "---|" * len(variants))
    totals = [[0, 0.0, 0.0, 0.0] for _ in variants]
    for f in fams:
        cells = []
        for i, st in enumerate(steps):
            r = st.rows.get(f)
            if r:
                totals[i] = [x + y for x, y in zip(totals[i], r)]
            cells.append(cell(r) if r else "—")
        print("| %s | %s |" % (f, " | ".join(cells)))
    print("| **step** | %s |" % " | ".join(cell(t) for t in totals))
    tokens = s["B"] * s["T"]
    print("\n" + "; ".join("%s: %.1f ms a step, %s tokens/s" % (v, t[3] * 1e3, format(round(tokens / t[3]), ","))
                           for v, t in zip(variants, totals)) + ".")
    return 0


# ---- measured beside estimated ------------------------------------------------

def read_profile(path):
    """The table [device.cuda] profile writes (plugins/device/cuda/profile.c):
    rows of label, detail, entry, calls, total_ms, median_us (and the least
    and greatest call)."""
    rows = []
    with open(path) as f:
        header = None
        for line in f:
            if line.startswith("#") or not line.strip():
                continue
            cols = line.rstrip("\n").split("\t")
            if header is None:
                header = cols
                continue
            r = dict(zip(header, cols))
            rows.append((r["label"], r["detail"], r["entry"], int(r["calls"]), float(r["total_ms"]),
                         float(r["median_us"])))
    return rows


def family_of(label, detail, entry, s):
    """The estimate's kernel family of a profile row; None: not part of a
    training step's kernels (the bench's GEMM-rate probe, the only caller
    of the sgemm entry; time outside the table; an entry's own fills)."""
    if entry == "sgemm" or label.startswith("("):
        return None
    if label == "gemm":
        dims = [int(x) for x in detail.split()[0].split("x")]
        if s["V"] in dims:
            return "lm_head"
        BT, C = s["B"] * s["T"], s["C"]
        if BT in dims and any(d in dims for d in (C, 3 * C, 4 * C)):
            return "linear layers"
        if any(d == s["T"] for d in dims) and "batched" in detail:
            return "attention"
        return None
    if label.startswith("axpy") and entry.startswith("matmul_backward"):
        return "bias gradients"  # what BGRADB wrote, added to the gradient (gemm.c)
    for prefix, fam in (("layernorm", "layernorm"), ("crossentropy", "cross-entropy"), ("logits_", "cross-entropy"),
                        ("loss_rows", "cross-entropy"), ("to_bf16", "bf16 operand copies"),
                        ("bias_backward", "bias gradients"), ("adamw", "optimizer"), ("sumsq", "optimizer"),
                        ("axpy", "optimizer"), ("scale", "optimizer"), ("embedding", "embedding"),
                        ("add_positions", "embedding"), ("gelu", "gelu"), ("bias/residual", "residual copies"),
                        ("bf16 epilogue", "linear layers")):
        if label.startswith(prefix):
            return fam
    if "attention" in label:
        return "attention"
    return None


def measured_beside(args, s, variant):
    """The profile's time per step, family by family, beside the estimate
    of `variant`. A key's per-step time is its median call times its calls
    a step: the first step's one-off costs (cuBLASLt's candidates timed,
    modules loaded) do not count."""
    rows = read_profile(args.measured)
    steps = args.steps
    if not steps:  # one optimizer step per training step
        steps = sum(c for lab, _, _, c, _, _ in rows if lab.startswith("adamw"))
    if not steps:
        print("%s: no optimizer step in the profile; give --steps" % args.measured, file=sys.stderr)
        return 2
    st = step(args, s, variant)
    meas, calls, other, span = {}, {}, 0.0, 0.0
    for label, detail, entry, n, total, median in rows:
        span += total
        fam = family_of(label, detail, entry, s)
        per_step = median * 1e-3 * n / steps
        if fam is None:
            other += total / steps
            continue
        meas[fam] = meas.get(fam, 0.0) + per_step
        calls[fam] = calls.get(fam, 0) + n / steps
    fams = sorted(set(st.rows) | set(meas), key=lambda f: -max(st.rows.get(f, [0, 0, 0, 0])[3] * 1e3, meas.get(f, 0)))
    print("Measured (%s, %d steps) beside estimated (%s): per step" % (args.measured, steps, variant))
    print()
    print("| kernel family | launches (est.) | launcher calls (measured) | ms (est.) | ms (measured) | measured / est. |")
    print("|---|---|---|---|---|---|")
    te = tm = 0.0
    for f in fams:
        r = st.rows.get(f)
        e = r[3] * 1e3 if r else 0.0
        m = meas.get(f)
        te += e
        tm += m or 0.0
        print("| %s | %s | %s | %.2f | %s | %s |" % (f, r[0] if r else "—", "%.0f" % calls[f] if f in calls else "—",
                                                   e, "%.2f" % m if m is not None else "—",
                                                   "%.2f" % (m / e) if m is not None and e > 0 else "—"))
    print("| other (outside the table, the entries' own fills, the bench's GEMM-rate probe) | — | — | — | %.2f | — |"
          % other)
    print("| **step** | | | %.2f | %.2f | %.2f |" % (te, tm + other, (tm + other) / te if te else 0.0))
    print()
    print("The stream's whole profiled time: %.1f ms over %d steps, %.2f ms a step (warm-up and idle included)." %
          (span, steps, span / steps))
    return 0


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", default="configs/gpt2-124m.ini")
    p.add_argument("--batch", type=int, default=16, help="sequences a step (one micro-batch)")
    p.add_argument("--precision", default="bf16", choices=["bf16", "tf32", "fp32"])
    p.add_argument("--bw", type=float, default=3.0, help="device memory bandwidth, TB/s")
    p.add_argument("--gemm", type=float, default=700.0, help="cuBLASLt bf16 rate, TFLOP/s")
    p.add_argument("--attn", type=float, default=300.0,
                   help="the fused attention's bf16 tensor-core rate, TFLOP/s (mma.sync, untuned)")
    p.add_argument("--fp32", type=float, default=50.0, help="fp32 rate of plait's own kernels, TFLOP/s")
    p.add_argument("--launch-us", type=float, default=3.0, help="the shortest a kernel takes, µs")
    p.add_argument("--sync-us", type=float, default=20.0, help="a host synchronisation's drain, µs")
    p.add_argument("--variant", action="append", choices=VARIANTS, help="only these (default: all)")
    p.add_argument("--table", action="store_true",
                   help="one table, the variants side by side (what docs/gpu.md shows)")
    p.add_argument("--measured", metavar="PROFILE",
                   help="a [device.cuda] profile of bench train with the same config, batch and precision: "
                        "its time per step beside the estimate of the code as it is")
    p.add_argument("--steps", type=int, default=0,
                   help="with --measured: the steps the profile covers, warm-up included (default: its AdamW calls)")
    args = p.parse_args(argv)
    s = read_shape(args.config, args.batch)
    tokens = s["B"] * s["T"]
    if args.measured:
        return measured_beside(args, s, args.variant[-1] if args.variant else
                               LATEST["bf16" if args.precision == "bf16" else "float32"])
    if args.table:
        return side_by_side(args, s, args.variant or VARIANTS)
    print("# %s: L %d, C %d, NH %d, T %d, V %d, batch %d, %s; %.1f TB/s, GEMMs %.0f TFLOP/s, "
          "attention %.0f TFLOP/s, %.0f µs a launch, %.0f µs a host sync" %
          (args.config, s["L"], s["C"], s["NH"], s["T"], s["V"], s["B"], args.precision, args.bw, args.gemm,
           args.attn, args.launch_us, args.sync_us))
    for v in args.variant or VARIANTS:
        st = step(args, s, v)
        print("\n## %s: %s\n" % (v, VARIANT_TEXT[v]))
        print("| kernel family | launches | GB moved | GFLOP | ms |")
        print("|---|---|---|---|---|")
        tot = [0, 0.0, 0.0, 0.0]
        for name in sorted(st.rows, key=lambda n: -st.rows[n][3]):
            r = st.rows[name]
            print(fmt_row(name, r))
            tot = [x + y for x, y in zip(tot, r)]
        print(fmt_row("**step**", tot))
        print("\n%s: %.1f ms a step, %.0f tokens/s, %d launches, %d host synchronisations" %
              (v, tot[3] * 1e3, tokens / tot[3], tot[0], st.syncs))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
