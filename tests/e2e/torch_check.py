"""What the checks of plait against PyTorch share (llama_torch_check.py,
mixtral_torch_check.py, weights_torch_check.py): logits compared with
plait's, and the random Hugging Face models they build, save and load.

Only torch is imported here; safetensors inside the functions that read or
write a file with it, so that weights_torch_check.py runs on a python with
torch and numpy alone.
"""
import torch


def logits_agree(what, got, want, who="transformers"):
    """True when GOT equals plait's logits WANT within 1e-4 of the largest
    logit (max |diff| / max |logit|, printed with WHAT)."""
    err = (got - want).abs().max().item()
    scale = want.abs().max().item()
    rel = err / scale if scale > 0 else float("inf")
    print(f"{what}: max |{who} - plait| = {err:.3g}, max |logit| = {scale:.3g}, relative {rel:.3g}")
    return rel <= 1e-4


def compare(model, model_dir, tokens_path, plait_path):
    """0 when MODEL's float32 logits on TOKENS_PATH's "tokens" agree with
    PLAIT_PATH's "logits" (logits_agree), 1 otherwise."""
    from safetensors.torch import load_file

    tokens = load_file(tokens_path)["tokens"].long()
    want = load_file(plait_path)["logits"].double()
    with torch.no_grad():
        got = model(input_ids=tokens).logits.double()
    return 0 if logits_agree(model_dir, got, want) else 1


def randomize(model, router=None):
    """Weights drawn from N(0, 0.08), the norms' (the 1-d ones) from
    U(0.5, 1.5), so that no weight is trivially 0 or 1; those whose name
    ends with ROUTER from N(0, 0.5), so that no token's experts nearly tie."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.uniform_(0.5, 1.5)
            elif router and name.endswith(router):
                p.normal_(0.0, 0.5)
            else:
                p.normal_(0.0, 0.08)


def save(model, out_dir, tokens_path):
    """MODEL saved with save_pretrained into OUT_DIR and sharded
    (max_shard_size 40KB: an index and a file a tensor or a few) into
    OUT_DIR-sharded; and TOKENS_PATH, a safetensors file with "tokens"
    [2, 32] below 256 (float32 ids, as tests/checkpoint/weights_logits.c
    reads them)."""
    from safetensors.torch import save_file

    model.save_pretrained(out_dir, safe_serialization=True)
    model.save_pretrained(out_dir + "-sharded", safe_serialization=True, max_shard_size="40KB")
    tokens = torch.randint(0, 256, (2, 32), generator=torch.Generator().manual_seed(5))
    save_file({"tokens": tokens.float().contiguous()}, tokens_path)


def load(cls, model_dir):
    """MODEL_DIR read by cls.from_pretrained in float32 with eager
    attention; None, saying why, when a tensor is missing (but a tied
    lm_head), unexpected or of another shape."""
    try:
        model, info = cls.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="eager",
                                          output_loading_info=True)
    except TypeError:  # transformers before 4.56 names it torch_dtype
        model, info = cls.from_pretrained(model_dir, torch_dtype=torch.float32, attn_implementation="eager",
                                          output_loading_info=True)
    tied = model.config.tie_word_embeddings
    missing = [k for k in info.get("missing_keys", []) if not (k == "lm_head.weight" and tied)]
    if missing or info.get("unexpected_keys") or info.get("mismatched_keys"):
        print(f"{model_dir}: missing {missing}, unexpected {info.get('unexpected_keys')}, "
              f"mismatched {info.get('mismatched_keys')}")
        return None
    return model.eval()
