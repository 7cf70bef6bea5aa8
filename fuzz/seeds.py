#!/usr/bin/env python3
"""Seed corpora that ci/fuzz makes from the fixtures for the multi-file
targets (fuzz/fuzz_parts.h: parts separated by SEP).

  fuzz/seeds.py TARGET OUT_DIR   TARGET: hf_import, verl_fsdp1, megatron_objects
"""
import glob
import hashlib
import io
import json
import struct
import sys
import zipfile

SEP = b"\n#distckpt-part#\n"


def write(out, name, parts):
    data = SEP.join(parts)
    with open(f"{out}/seed-{name}-{hashlib.sha1(data).hexdigest()[:10]}", "wb") as f:
        f.write(data)


def safetensors(entries):
    header, data = {"__metadata__": {"format": "pt"}}, b""
    for name, dtype, shape in entries:
        n = 4 if dtype == "F32" else 2
        for d in shape:
            n *= d
        payload = bytes((i * 7 + len(name)) % 251 for i in range(n))
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + n]}
        data += payload
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + data


def hf_import(out):
    # The fuzzer's spec: one layer, hidden 8, 2 heads (head dim 4), 2 query
    # groups, SwiGLU ffn 16, vocab 16, untied: Llama, or Qwen2 with q/k/v biases.
    h, ffn, vocab, p = 8, 16, 16, "model.layers.0."
    for arch, biases in (("llama", False), ("qwen2", True)):
        for dtype in ("F32", "BF16"):
            first = [("model.embed_tokens.weight", dtype, [vocab, h]),
                     (p + "input_layernorm.weight", dtype, [h]),
                     (p + "self_attn.q_proj.weight", dtype, [h, h]),
                     (p + "self_attn.k_proj.weight", dtype, [h, h]),
                     (p + "self_attn.v_proj.weight", dtype, [h, h]),
                     (p + "self_attn.o_proj.weight", dtype, [h, h])]
            if biases:
                first += [(p + f"self_attn.{x}_proj.bias", dtype, [h]) for x in "qkv"]
            second = [(p + "post_attention_layernorm.weight", dtype, [h]),
                      (p + "mlp.gate_proj.weight", dtype, [ffn, h]),
                      (p + "mlp.up_proj.weight", dtype, [ffn, h]),
                      (p + "mlp.down_proj.weight", dtype, [h, ffn]),
                      ("model.norm.weight", dtype, [h]),
                      ("lm_head.weight", dtype, [vocab, h])]
            weight_map = {n: "model-00001-of-00002.safetensors" for n, _, _ in first}
            weight_map.update({n: "model-00002-of-00002.safetensors" for n, _, _ in second})
            total = sum(len(safetensors([e])) for e in first + second)
            index = json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map},
                               indent=2).encode()
            config = json.dumps({"architectures": ["LlamaForCausalLM" if arch == "llama" else
                                                   "Qwen2ForCausalLM"], "model_type": arch,
                                 "hidden_size": h, "num_attention_heads": 2,
                                 "num_key_value_heads": 2, "intermediate_size": ffn,
                                 "vocab_size": vocab, "num_hidden_layers": 1,
                                 "tie_word_embeddings": False,
                                 "torch_dtype": "float32" if dtype == "F32" else "bfloat16"},
                                indent=2).encode()
            write(out, f"{arch}-{dtype}", [index, config, safetensors(first), safetensors(second)])
            # One model.safetensors, no index.
            write(out, f"{arch}-{dtype}-single", [b"", config, safetensors(first + second), b""])
    # The config.json verl's fixtures hold (Hugging Face's own), with the Llama tensors.
    for f in sorted(glob.glob("fixtures/verl-runs/*/global_step_1/actor/huggingface/config.json"))[:2]:
        config = open(f, "rb").read()
        write(out, "verl-config", [b"", config, safetensors(first + second), b""])


def zip_records(blob):
    """The records of the torch.save archives in `blob` (one .pt, or a .distcp
    holding one per item, back to back): a list of archives, each a dict
    name (without the prefix) -> bytes. Each archive ends at its
    end-of-central-directory record; zipfile finds where it starts."""
    archives, start, at = [], 0, 0
    while True:
        at = blob.find(b"PK\x05\x06", at)
        if at < 0:
            return archives
        end = at + 22
        try:
            with zipfile.ZipFile(io.BytesIO(blob[start:end])) as z:
                archives.append({n.split("/", 1)[-1]: z.read(n) for n in z.namelist()})
            start = end
        except (zipfile.BadZipFile, ValueError, KeyError):
            pass
        at = end


def verl_fsdp1(out):
    for run in sorted(glob.glob("fixtures/verl-runs/fsdp1-*")):
        for actor in sorted(glob.glob(run + "/global_step_*/actor")):
            # The fuzzer's model file is fsdp1-w3's: its config, with each
            # run's optimizer pickles (other shard sizes: other units).
            config = open(actor + "/fsdp_config.json", "rb").read().replace(
                b'"world_size": 2', b'"world_size": 3').replace(b'"world_size": 4', b'"world_size": 3')
            for optim in sorted(glob.glob(actor + "/optim_world_size_*_rank_*.pt")):
                for archive in zip_records(open(optim, "rb").read()):
                    write(out, "fsdp1", [config, archive["data.pkl"]])


def megatron_objects(out):
    files = glob.glob("fixtures/megatron-runs/*/iter_*/*.distcp") + \
        glob.glob("fixtures/megatron/*/*.distcp") + glob.glob("fixtures/megatron/*/common.pt")
    seen = 0
    for f in sorted(files):
        for archive in zip_records(open(f, "rb").read()):
            pkl = archive.get("data.pkl", b"")
            # The objects: pickles naming a class other than a tensor rebuild.
            if b"_rebuild_tensor" in pkl[:64] or len(pkl) > 200_000:
                continue
            storages = [archive.get(f"data/{i}", b"") for i in range(8)]
            if sum(map(len, storages)) > 64 * 1024:
                continue
            write(out, "megatron", [pkl] + storages)
            seen += 1
    if seen == 0:
        sys.exit("fuzz/seeds.py: no Megatron objects found in fixtures/")


if __name__ == "__main__":
    {"hf_import": hf_import, "verl_fsdp1": verl_fsdp1,
     "megatron_objects": megatron_objects}[sys.argv[1]](sys.argv[2])
