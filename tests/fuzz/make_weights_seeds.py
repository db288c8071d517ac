#!/usr/bin/env python3
"""Write the seeds of fuzz_weights (tests/fuzz/corpus/weights/): small
safetensors files of the 1-layer, 2-head, width-8 GPT that fuzz_weights.c
describes, in each layout plait's weights reader takes, each prefixed with
the byte fuzz_weights reads as its variant. Standard library only.

    python3 tests/fuzz/make_weights_seeds.py tests/fuzz/corpus/weights
"""
import json
import os
import struct
import sys

C, V, T = 8, 10, 4
CONV1D = ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj")


def params(vocab=V, block=T, conv1d=True):
    """(name, shape) of every parameter, plait's canonical names."""
    out = [("transformer.wte.weight", [vocab, C]), ("transformer.wpe.weight", [block, C])]
    h = "transformer.h.0."
    lin = {"attn.c_attn": (3 * C, C), "attn.c_proj": (C, C), "mlp.c_fc": (4 * C, C), "mlp.c_proj": (C, 4 * C)}
    out += [(h + "ln_1.weight", [C]), (h + "ln_1.bias", [C])]
    for mod in ("attn.c_attn", "attn.c_proj"):
        o, i = lin[mod]
        out += [(h + mod + ".weight", [i, o] if conv1d else [o, i]), (h + mod + ".bias", [o])]
    out += [(h + "ln_2.weight", [C]), (h + "ln_2.bias", [C])]
    for mod in ("mlp.c_fc", "mlp.c_proj"):
        o, i = lin[mod]
        out += [(h + mod + ".weight", [i, o] if conv1d else [o, i]), (h + mod + ".bias", [o])]
    out += [("transformer.ln_f.weight", [C]), ("transformer.ln_f.bias", [C])]
    return out


def safetensors(tensors, metadata=None):
    """tensors: [(name, shape, dtype, bytes)]"""
    header, off, blob = {}, 0, b""
    if metadata:
        header["__metadata__"] = metadata
    for name, shape, dtype, data in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(data)]}
        off += len(data)
        blob += data
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + blob


def f32(shape, seed):
    n = 1
    for d in shape:
        n *= d
    return struct.pack("<%df" % n, *[((i * 7 + seed * 13) % 17 - 8) / 64.0 for i in range(n)])


def model(conv1d=True, vocab=V, block=T, head=False, prefix="", drop_transformer=False, buffers=False):
    out = []
    for k, (name, shape) in enumerate(params(vocab, block, conv1d)):
        if drop_transformer:
            name = name.replace("transformer.", "", 1)
        out.append((prefix + name, shape, "F32", f32(shape, k)))
    if head:
        out.append((prefix + "lm_head.weight", [vocab, C], "F32", out[0][3]))
    if buffers:
        out.append(("transformer.h.0.attn.bias", [1, 1, block, block], "F32", f32([1, 1, block, block], 99)))
        out.append(("transformer.h.0.attn.masked_bias", [], "F32", struct.pack("<f", -1e4)))
    return out


def main():
    d = sys.argv[1]
    seeds = {
        # variant byte: bit 0 padded vocabulary, bit 1 short block, bit 2 TP slices, bit 3 a directory
        "hf-conv1d": (0, safetensors(model(buffers=True))),
        "hf-gpt2model-names": (4, safetensors(model(drop_transformer=True))),
        "nanogpt-linear-head": (1, safetensors(model(conv1d=False, head=True))),
        "compiled-prefix": (2, safetensors(model(conv1d=False, prefix="_orig_mod."))),
        "plait-dir": (8 | 4, safetensors(model(conv1d=False), {"plait.model.n_head": "2"})),
        "short-vocab-long-pos": (3, safetensors(model(vocab=7, block=6))),
        "head-differs": (0, safetensors(model(head=True)[:-1] + [("lm_head.weight", [V, C], "F32", f32([V, C], 5))])),
        "bf16-tensor": (0, safetensors(model()[:-1] + [("transformer.ln_f.bias", [C], "BF16", b"\x80\x3f" * C)])),
    }
    for name, (variant, blob) in seeds.items():
        with open(os.path.join(d, name), "wb") as f:
            f.write(bytes([variant]) + blob)


if __name__ == "__main__":
    main()
