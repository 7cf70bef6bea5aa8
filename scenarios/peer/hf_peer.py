"""Checks distckpt's Hugging Face export with the real `safetensors` library.

    hf_peer.py check HF_DIR DUMPS_DIR SPEC.json

Loads every file of model.safetensors.index.json with safetensors.torch, and
compares every tensor bit for bit with the Megatron tensors `distckpt dump`
wrote to DUMPS_DIR/<key>.bin, mapped to Llama names here independently of
distckpt (qkv per query group [q, k, v], SwiGLU fc1 [gate; up], vocab padding
dropped, tied embeddings without lm_head). Exits 1 on any difference.
"""
import json
import os
import sys

import torch
from safetensors.torch import load_file


def main():
    _, cmd, hf_dir, dumps, spec_path = sys.argv
    assert cmd == "check"
    spec = json.load(open(spec_path))
    spec = spec.get("model", spec)
    if isinstance(spec, list):
        spec = spec[0]
    layers, h, heads, ffn, vocab = (spec[k] for k in ("layers", "hidden", "heads", "ffn", "vocab"))
    groups = spec.get("query_groups", heads)
    glu, tied, prefix = spec.get("glu", False), spec.get("tied", False), spec.get("prefix", "")
    d = h // heads
    qpg = heads // groups * d
    per = qpg + 2 * d

    index = json.load(open(os.path.join(hf_dir, "model.safetensors.index.json")))
    loaded, total = {}, 0
    for name in sorted(set(index["weight_map"].values())):
        tensors = load_file(os.path.join(hf_dir, name))
        for k, t in tensors.items():
            assert index["weight_map"][k] == name, f"{k}: index says {index['weight_map'][k]}, found in {name}"
            loaded[k] = t
            total += t.numel() * t.element_size()
    assert total == index["metadata"]["total_size"], (total, index["metadata"]["total_size"])

    def dump(key, dtype):
        raw = open(os.path.join(dumps, prefix + key + ".bin"), "rb").read()
        return torch.frombuffer(bytearray(raw), dtype=dtype)

    expected = {}
    any_t = next(iter(loaded.values()))
    dt = any_t.dtype
    emb = dump("embedding.word_embeddings.weight", dt).view(-1, h)
    expected["model.embed_tokens.weight"] = emb[:vocab]
    L = "decoder.layers."
    ln = dump(L + "input_layernorm.weight", dt).view(layers, h)
    qkv = dump(L + "self_attention.linear_qkv.weight", dt).view(layers, groups, per, h)
    proj = dump(L + "self_attention.linear_proj.weight", dt).view(layers, h, h)
    pre = dump(L + "pre_mlp_layernorm.weight", dt).view(layers, h)
    fc1 = dump(L + "mlp.linear_fc1.weight", dt).view(layers, -1, h)
    fc2 = dump(L + "mlp.linear_fc2.weight", dt).view(layers, h, ffn)
    for i in range(layers):
        p = f"model.layers.{i}."
        expected[p + "input_layernorm.weight"] = ln[i]
        expected[p + "self_attn.q_proj.weight"] = qkv[i, :, :qpg].reshape(-1, h)
        expected[p + "self_attn.k_proj.weight"] = qkv[i, :, qpg:qpg + d].reshape(-1, h)
        expected[p + "self_attn.v_proj.weight"] = qkv[i, :, qpg + d:].reshape(-1, h)
        expected[p + "self_attn.o_proj.weight"] = proj[i]
        expected[p + "post_attention_layernorm.weight"] = pre[i]
        if glu:
            expected[p + "mlp.gate_proj.weight"] = fc1[i, :ffn]
            expected[p + "mlp.up_proj.weight"] = fc1[i, ffn:]
        else:
            expected[p + "mlp.up_proj.weight"] = fc1[i]
        expected[p + "mlp.down_proj.weight"] = fc2[i]
    optional = {}
    for name, key, shape in (
            ("self_attn.q_proj.bias", "self_attention.linear_qkv.bias", None),
            ("self_attn.o_proj.bias", "self_attention.linear_proj.bias", (layers, h)),
            ("mlp.down_proj.bias", "mlp.linear_fc2.bias", (layers, h))):
        if not os.path.exists(os.path.join(dumps, prefix + L + key + ".bin")):
            continue
        if shape is None:
            b = dump(L + key, dt).view(layers, groups, per)
            for i in range(layers):
                p = f"model.layers.{i}.self_attn."
                optional[p + "q_proj.bias"] = b[i, :, :qpg].reshape(-1)
                optional[p + "k_proj.bias"] = b[i, :, qpg:qpg + d].reshape(-1)
                optional[p + "v_proj.bias"] = b[i, :, qpg + d:].reshape(-1)
        else:
            b = dump(L + key, dt).view(*shape)
            for i in range(layers):
                optional[f"model.layers.{i}.{name}"] = b[i]
    expected.update(optional)
    expected["model.norm.weight"] = dump("decoder.final_layernorm.weight", dt)
    if not tied:
        expected["lm_head.weight"] = dump("output_layer.weight", dt).view(-1, h)[:vocab]
    bad = sorted(set(expected) ^ set(loaded))
    if bad:
        print("name sets differ:", bad[:10])
        sys.exit(1)
    for k, want in expected.items():
        got = loaded[k]
        if got.dtype != want.dtype or tuple(got.shape) != tuple(want.shape) or \
                not torch.equal(got.contiguous().view(torch.uint8), want.contiguous().view(torch.uint8)):
            print(f"{k}: differs (got {got.dtype} {tuple(got.shape)}, want {want.dtype} {tuple(want.shape)})")
            sys.exit(1)
    print(f"safetensors {__import__('safetensors').__version__} loaded {len(loaded)} tensors "
          f"from {len(set(index['weight_map'].values()))} files: all bit-equal to distckpt dump")


if __name__ == "__main__":
    main()
