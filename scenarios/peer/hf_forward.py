"""The proof of an HF export is the forward pass (torch 2.6 chroot).

    hf_forward.py train RUNS_DIR NAME MEGATRON_SRC OUT_ROOT
        Megatron's own training loop (megatron_run.py: pretrain_gpt.py argv, setup_model_and_
        optimizer, optimizer steps, save_checkpoint) writes EXTRA_ROOTS[NAME] (architectures the
        fixtures lack: Mixtral-style MoE, Qwen2) into OUT_ROOT.
    hf_forward.py megatron RUNS_DIR ROOT MEGATRON_SRC OUT.pt
        Megatron's own GPTModel, built by megatron.training from the root's pretrain_gpt.py argv
        (fixtures/megatron-runs/megatron_run.py) under tp=1 pp=1 ep=1 in one gloo process, with
        the root loaded by Megatron's load_checkpoint; cast to float32 and run in eval mode on
        TOKENS; logits [S, V] saved to OUT.pt.
    hf_forward.py hf HF_DIR OUT.pt
        The exported safetensors loaded BY HF PARAMETER NAME (every name used, none missing)
        into our own forward pass, written to follow transformers' modeling files (cited per
        function below), float32; logits saved to OUT.pt.
    hf_forward.py hf HF_DIR OUT.pt perturb
        The same with one weight (the first layer norm's) scaled by 1.1: the negative control
        (its logits must move past the tolerance, or the comparison proves nothing).
    hf_forward.py compare A.pt B.pt TOLERANCE
        max |A - B| over all logits; exit 1 above TOLERANCE.

The modeling files followed (huggingface/transformers):
  src/transformers/models/llama/modeling_llama.py at 002272831fba584eb30dca9729c1be456836960a
      (read with the read_file tool): LlamaRMSNorm, LlamaRotaryEmbedding (inv_freq, cat(freqs,
      freqs)), rotate_half, apply_rotary_pos_emb, repeat_kv, LlamaAttention (q k^T / sqrt(D),
      softmax in float32), LlamaMLP (down(act(gate) * up)); qwen2/modeling_qwen2.py is the same
      with q/k/v biases.
  src/transformers/models/gpt2/modeling_gpt2.py (stored at c44b2d9976e8eafbdcb89cb2710141b2bc9b138f):
      GPT2Attention (c_attn split into q, k, v of embed_dim each; heads view(B, S, H, D);
      scale_attn_weights), GPT2MLP, GPT2Block (pre-LN residuals), Conv1D (x @ weight + bias).
  src/transformers/models/mixtral/modeling_mixtral.py at 00d4b3d2142cb4ced2f51b90614b5d26bc045015
      (read with the read_file tool): MixtralSparseMoeBlock (softmax(gate(x)) in float, top-k,
      renormalised, index_add_ of w2(act(w1 x) * w3 x) * weight), MixtralAttention as Llama's.
  src/transformers/models/qwen2_moe/modeling_qwen2_moe.py at 00a3f9386614dde0dc41cf4e9b8d0abd3af0671d
      (read with the read_file tool): Qwen2MoeAttention (q/k/v bias = config.qkv_bias, o without),
      Qwen2MoeSparseMoeBlock (norm_topk_prob; sigmoid-gated shared expert added).
  src/transformers/activations.py: NewGELUActivation ("gelu_new"), GELUActivation ("gelu").
No transformers code is copied: the math is re-implemented here.
"""
import json
import math
import os
import sys

TOKENS = [5, 17, 42, 255, 0, 128, 77, 200, 3, 99, 254, 1]

# Roots trained here (not in fixtures/megatron-runs) for architectures those lack: name ->
# (ranks, pretrain_gpt.py argv after megatron_run.BASE_ARGV). Saved at iteration 5.
EXTRA_ROOTS = {
    # Mixtral-style MoE: RMSNorm, RoPE, SwiGLU experts, no biases, untied, GQA, EP=2.
    'mixtral-ep2': (2, ['--normalization', 'RMSNorm', '--position-embedding-type', 'rope',
                        '--swiglu', '--disable-bias-linear', '--untie-embeddings-and-output-weights',
                        '--group-query-attention', '--num-query-groups', '2', '--no-rope-fusion',
                        '--num-experts', '4', '--moe-router-topk', '2',
                        '--expert-model-parallel-size', '2', '--moe-ffn-hidden-size', '32']),
    # Qwen2-style dense: q/k/v biases only, tied, TP=2.
    'qwen2-tp2': (2, ['--tensor-model-parallel-size', '2', '--normalization', 'RMSNorm',
                      '--position-embedding-type', 'rope', '--swiglu', '--ffn-hidden-size', '64',
                      '--disable-bias-linear', '--add-qkv-bias', '--no-rope-fusion']),
    # Qwen2-MoE-style: q/k/v biases, a sigmoid-gated shared expert, pre-softmax routing
    # (top-k weights not renormalised: norm_topk_prob false), EP=2.
    'qwen2moe-ep2': (2, ['--normalization', 'RMSNorm', '--position-embedding-type', 'rope',
                         '--swiglu', '--disable-bias-linear', '--add-qkv-bias', '--no-rope-fusion',
                         '--num-experts', '4', '--moe-router-topk', '2', '--moe-router-pre-softmax',
                         '--moe-shared-expert-intermediate-size', '32', '--moe-shared-expert-gate',
                         '--expert-model-parallel-size', '2', '--moe-ffn-hidden-size', '32']),
}


def root_argv(mr, name):
    if name in EXTRA_ROOTS:
        return EXTRA_ROOTS[name][1]
    return mr.ROOTS[name][1]


def train(runs, name, src, out_root):
    """Megatron's own training loop (megatron_run.py) saves EXTRA_ROOTS[name] at iteration 5."""
    sys.path.insert(0, runs)
    import megatron_run as mr
    import megatron_cpu
    world, argv = EXTRA_ROOTS[name]
    codes = mr.launch(world, dict(mode='train', src=src, extra_paths=[megatron_cpu.debs_path()],
                                  argv=mr.BASE_ARGV + argv, save=out_root, iterations=[5]),
                      log=out_root + '.train.log')
    if any(codes):
        sys.exit(f'{name}: training ranks exited {codes}: ' + ' | '.join(mr.failure_lines(out_root + '.train.log')))
    print(f'trained {name} on {world} ranks (Megatron training loop), saved iteration 5')


# --------------------------------------------------------------------------- Megatron side
def megatron(runs, root, src, out):
    # Megatron's jit_fuser (torch.compile) runs eagerly: inductor needs a GPU.
    os.environ['TORCHDYNAMO_DISABLE'] = '1'
    import torch
    sys.path.insert(0, runs)
    os.environ.update(RANK='0', WORLD_SIZE='1', LOCAL_RANK='0', MASTER_ADDR='127.0.0.1',
                      MASTER_PORT=os.environ.get('HF_FORWARD_PORT', '29533'),
                      CUDA_DEVICE_MAX_CONNECTIONS='1')
    import megatron_run as mr
    import megatron_cpu
    name = os.path.basename(root.rstrip('/'))
    argv = mr.with_topology(mr.BASE_ARGV + root_argv(mr, name), tp=1, pp=1, ep=1)
    argv += ['--no-load-optim', '--no-load-rng']
    args, model, _, _ = mr.build(dict(src=src, extra_paths=[megatron_cpu.debs_path()],
                                      argv=argv, load=root))
    from megatron.core.utils import unwrap_model
    gpt = unwrap_model(model)[0]
    gpt.float()
    # The softmax modules captured --bf16 at construction; in float32 they must not cast back.
    for m in gpt.modules():
        for flag in ('input_in_fp16', 'input_in_bf16', 'input_in_float16'):
            if hasattr(m, flag):
                setattr(m, flag, False)
    gpt.eval()
    s = len(TOKENS)
    ids = torch.tensor([TOKENS])
    pos = torch.arange(s).unsqueeze(0)
    mask = torch.triu(torch.ones(1, 1, s, s, dtype=torch.bool), diagonal=1)  # True: masked
    with torch.no_grad():
        logits = gpt(ids, pos, mask)
    logits = logits.reshape(s, -1).float()
    torch.save(logits, out)
    print(f'megatron {name}: logits {tuple(logits.shape)} from {type(gpt).__name__}')
    import torch.distributed as dist
    dist.barrier()
    os._exit(0)


# --------------------------------------------------------------------------- HF side
class Weights:
    """The safetensors of an HF directory by name; `take` marks a name used."""

    def __init__(self, hf_dir):
        from safetensors.torch import load_file
        index = json.load(open(os.path.join(hf_dir, 'model.safetensors.index.json')))
        self.t = {}
        for f in sorted(set(index['weight_map'].values())):
            for k, v in load_file(os.path.join(hf_dir, f)).items():
                self.t[k] = v.float()
        self.used = set()

    def __call__(self, name):
        if name not in self.t:
            raise SystemExit(f'missing HF parameter: {name}')
        self.used.add(name)
        return self.t[name]

    def check_all_used(self):
        unexpected = sorted(set(self.t) - self.used)
        if unexpected:
            raise SystemExit(f'unexpected HF parameters (not used by the model): {unexpected}')


def act(name, x):
    import torch
    if name == 'gelu_new':  # activations.py NewGELUActivation
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x.pow(3))))
    if name == 'gelu':  # GELUActivation: torch's erf GELU
        return torch.nn.functional.gelu(x)
    if name == 'silu':
        return torch.nn.functional.silu(x)
    raise SystemExit(f'activation {name}')


def causal_softmax_attention(q, k, v, scaling):
    # eager_attention_forward: softmax(q k^T * scaling + causal mask) v, in float32.
    import torch
    s = q.shape[-2]
    w = torch.matmul(q, k.transpose(2, 3)) * scaling
    mask = torch.triu(torch.full((s, s), float('-inf')), diagonal=1)
    w = torch.softmax(w + mask, dim=-1, dtype=torch.float32)
    return torch.matmul(w, v)


def gpt2_forward(W, cfg, ids):
    # modeling_gpt2.py: GPT2Model.forward, GPT2Block, GPT2Attention (c_attn split into q, k, v
    # of embed_dim each, heads split as view(B, S, H, D)), Conv1D (x @ weight + bias).
    import torch
    F = torch.nn.functional
    H, E, eps = cfg['n_head'], cfg['n_embd'], cfg['layer_norm_epsilon']
    D = E // H
    s = ids.shape[1]
    h = W('transformer.wte.weight')[ids] + W('transformer.wpe.weight')[torch.arange(s)][None]
    for i in range(cfg['n_layer']):
        p = f'transformer.h.{i}.'
        r = h
        x = F.layer_norm(h, (E,), W(p + 'ln_1.weight'), W(p + 'ln_1.bias'), eps)
        qkv = x @ W(p + 'attn.c_attn.weight') + W(p + 'attn.c_attn.bias')
        q, k, v = qkv.split(E, dim=2)
        q, k, v = (t.view(1, s, H, D).transpose(1, 2) for t in (q, k, v))
        a = causal_softmax_attention(q, k, v, 1.0 / math.sqrt(D))  # scale_attn_weights
        a = a.transpose(1, 2).reshape(1, s, E)
        a = a @ W(p + 'attn.c_proj.weight') + W(p + 'attn.c_proj.bias')
        h = r + a
        r = h
        x = F.layer_norm(h, (E,), W(p + 'ln_2.weight'), W(p + 'ln_2.bias'), eps)
        m = act(cfg['activation_function'], x @ W(p + 'mlp.c_fc.weight') + W(p + 'mlp.c_fc.bias'))
        h = r + (m @ W(p + 'mlp.c_proj.weight') + W(p + 'mlp.c_proj.bias'))
    h = F.layer_norm(h, (E,), W('transformer.ln_f.weight'), W('transformer.ln_f.bias'), eps)
    head = W('transformer.wte.weight') if cfg.get('tie_word_embeddings', True) else W('lm_head.weight')
    return (h @ head.T)[0]


def rms_norm(x, w, eps):
    # LlamaRMSNorm: x * rsqrt(mean(x^2) + eps), then weight * x.
    import torch
    var = x.pow(2).mean(-1, keepdim=True)
    return w * (x * torch.rsqrt(var + eps))


def rotate_half(x):
    import torch
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def llama_forward(W, cfg, ids, moe=None):
    # modeling_llama.py: LlamaModel.forward, LlamaDecoderLayer, LlamaAttention (q/k/v/o_proj,
    # apply_rotary_pos_emb with rotate_half, repeat_kv), LlamaMLP (down(act(gate) * up));
    # qwen2/modeling_qwen2.py is the same with q/k/v biases.
    import torch
    H, KV, E = cfg['num_attention_heads'], cfg['num_key_value_heads'], cfg['hidden_size']
    D = cfg.get('head_dim') or E // H
    eps, theta = cfg['rms_norm_eps'], cfg.get('rope_theta', 10000.0)
    s = ids.shape[1]
    inv_freq = 1.0 / (theta ** (torch.arange(0, D, 2, dtype=torch.int64).float() / D))
    freqs = torch.arange(s).float()[:, None] * inv_freq[None]
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos()[None, None], emb.sin()[None, None]

    def lin(x, name, bias):
        y = x @ W(name + '.weight').T
        return y + W(name + '.bias') if bias else y

    # Qwen2: q/k/v biases always; Qwen2-MoE: config.qkv_bias; Llama: attention_bias (with o).
    attn_bias = (cfg.get('attention_bias', False) or cfg['model_type'] == 'qwen2' or
                 cfg.get('qkv_bias', False))
    o_bias = cfg.get('attention_bias', False)
    mlp_bias = cfg.get('mlp_bias', False)
    h = W('model.embed_tokens.weight')[ids]
    for i in range(cfg['num_hidden_layers']):
        p = f'model.layers.{i}.'
        r = h
        x = rms_norm(h, W(p + 'input_layernorm.weight'), eps)
        q = lin(x, p + 'self_attn.q_proj', attn_bias).view(1, s, H, D).transpose(1, 2)
        k = lin(x, p + 'self_attn.k_proj', attn_bias).view(1, s, KV, D).transpose(1, 2)
        v = lin(x, p + 'self_attn.v_proj', attn_bias).view(1, s, KV, D).transpose(1, 2)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        n_rep = H // KV  # repeat_kv: kv head g serves query heads g*n_rep .. (g+1)*n_rep-1
        k = k[:, :, None].expand(1, KV, n_rep, s, D).reshape(1, H, s, D)
        v = v[:, :, None].expand(1, KV, n_rep, s, D).reshape(1, H, s, D)
        a = causal_softmax_attention(q, k, v, D ** -0.5)
        a = a.transpose(1, 2).reshape(1, s, H * D)
        h = r + lin(a, p + 'self_attn.o_proj', o_bias)
        r = h
        x = rms_norm(h, W(p + 'post_attention_layernorm.weight'), eps)
        if moe:
            h = r + moe(W, cfg, p, x)
            continue
        m = act(cfg['hidden_act'], lin(x, p + 'mlp.gate_proj', mlp_bias)) * lin(x, p + 'mlp.up_proj', mlp_bias)
        h = r + lin(m, p + 'mlp.down_proj', mlp_bias)
    h = rms_norm(h, W('model.norm.weight'), eps)
    head = W('model.embed_tokens.weight') if cfg.get('tie_word_embeddings') else W('lm_head.weight')
    return (h @ head.T)[0]


def mixtral_forward(W, cfg, ids):
    # mixtral/modeling_mixtral.py: MixtralAttention as Llama's (no biases), then
    # MixtralSparseMoeBlock: router_logits = gate(x); softmax over experts (float); top-k;
    # renormalise the k weights; sum over chosen experts of w * w2(act(w1 x) * w3 x).
    return llama_forward(W, cfg, ids, moe=mixtral_moe)


def mixtral_moe(W, cfg, p, x):
    import torch
    k = cfg['num_experts_per_tok']
    flat = x.reshape(-1, x.shape[-1])
    logits = flat @ W(p + 'block_sparse_moe.gate.weight').T
    weights = torch.softmax(logits, dim=1, dtype=torch.float)
    weights, chosen = torch.topk(weights, k, dim=-1)
    weights = weights / weights.sum(dim=-1, keepdim=True)
    out = torch.zeros_like(flat)
    for e in range(cfg['num_local_experts']):
        token, slot = torch.where(chosen == e)
        if token.numel() == 0:
            # Every expert's tensors are the model's, used or not on this sequence.
            for w in ('w1', 'w2', 'w3'):
                W(f'{p}block_sparse_moe.experts.{e}.{w}.weight')
            continue
        h = flat[token]
        q = f'{p}block_sparse_moe.experts.{e}.'
        y = (act(cfg['hidden_act'], h @ W(q + 'w1.weight').T) * (h @ W(q + 'w3.weight').T)) @ W(q + 'w2.weight').T
        out.index_add_(0, token, y * weights[token, slot, None])
    return out.reshape(x.shape)


def qwen2_moe_moe(W, cfg, p, x):
    # qwen2_moe/modeling_qwen2_moe.py Qwen2MoeSparseMoeBlock: softmax(gate(x)) in float, top-k,
    # renormalised only with norm_topk_prob; experts Qwen2MoeMLP (down(act(gate) * up)); plus
    # sigmoid(shared_expert_gate(x)) * shared_expert(x).
    import torch
    k = cfg['num_experts_per_tok']
    flat = x.reshape(-1, x.shape[-1])
    weights = torch.softmax(flat @ W(p + 'mlp.gate.weight').T, dim=1, dtype=torch.float)
    weights, chosen = torch.topk(weights, k, dim=-1)
    if cfg['norm_topk_prob']:
        weights = weights / weights.sum(dim=-1, keepdim=True)

    def mlp(h, q):
        return (act(cfg['hidden_act'], h @ W(q + 'gate_proj.weight').T) * (h @ W(q + 'up_proj.weight').T)) @ W(q + 'down_proj.weight').T

    out = torch.zeros_like(flat)
    for e in range(cfg['num_experts']):
        q = f'{p}mlp.experts.{e}.'
        token, slot = torch.where(chosen == e)
        if token.numel() == 0:
            for w in ('gate_proj', 'up_proj', 'down_proj'):
                W(q + w + '.weight')
            continue
        out.index_add_(0, token, mlp(flat[token], q) * weights[token, slot, None])
    if cfg.get('shared_expert_intermediate_size', 0) > 0:
        shared = mlp(flat, p + 'mlp.shared_expert.')
        out = out + torch.sigmoid(flat @ W(p + 'mlp.shared_expert_gate.weight').T) * shared
    return out.reshape(x.shape)


def hf(hf_dir, out, perturb=None):
    import torch
    cfg = json.load(open(os.path.join(hf_dir, 'config.json')))
    W = Weights(hf_dir)
    if perturb:
        for name in ('transformer.h.0.ln_1.weight', 'model.layers.0.input_layernorm.weight'):
            if name in W.t:
                W.t[name] = W.t[name] * 1.1
    ids = torch.tensor([TOKENS])
    with torch.no_grad():
        if cfg['model_type'] == 'gpt2':
            logits = gpt2_forward(W, cfg, ids)
        elif cfg['model_type'] in ('llama', 'qwen2'):
            logits = llama_forward(W, cfg, ids)
        elif cfg['model_type'] == 'mixtral':
            logits = mixtral_forward(W, cfg, ids)
        elif cfg['model_type'] == 'qwen2_moe':
            logits = llama_forward(W, cfg, ids, moe=qwen2_moe_moe)
        else:
            raise SystemExit(f'model_type {cfg["model_type"]}: no forward here')
    W.check_all_used()
    torch.save(logits, out)
    print(f'hf {cfg["architectures"][0]}: {len(W.used)} parameters loaded by name, no missing or '
          f'unexpected; logits {tuple(logits.shape)}')


def compare(a, b, tol):
    import torch
    x, y = torch.load(a), torch.load(b)
    assert x.shape == y.shape, (x.shape, y.shape)
    diff = (x - y).abs().max().item()
    scale = y.abs().max().item()
    same_argmax = bool((x.argmax(-1) == y.argmax(-1)).all())
    print(f'max |logit diff| = {diff:.3e} (max |logit| {scale:.3e}; argmax equal: {same_argmax})')
    if len(sys.argv) > 5 and sys.argv[5] == 'must-differ':
        if not diff > float(tol):
            sys.exit(f'negative control: logits moved only {diff} <= {tol}')
        return
    if not diff <= float(tol):
        sys.exit(f'logits differ by {diff} > {tol}')


if __name__ == '__main__':
    cmd = sys.argv[1]
    if cmd == 'train':
        train(*sys.argv[2:6])
    elif cmd == 'megatron':
        megatron(*sys.argv[2:6])
    elif cmd == 'hf':
        hf(*sys.argv[2:5])
    elif cmd == 'compare':
        compare(*sys.argv[2:5])
    else:
        sys.exit(__doc__)
