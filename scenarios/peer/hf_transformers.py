"""An HF export loaded by the real `transformers` package, its logits against Megatron's.

    hf_transformers.py HF_DIR MEGATRON_LOGITS.pt TOLERANCE
        AutoModelForCausalLM.from_pretrained(HF_DIR) in float32 with eager attention: the
        architecture and every field come from the export's config.json, the weights from its
        safetensors by name. Fails when transformers reports a missing, unexpected or
        mismatched parameter, or when max |logits - MEGATRON_LOGITS| exceeds TOLERANCE on the
        token sequence of hf_forward.py (MEGATRON_LOGITS: `hf_forward.py megatron`'s [S, V]).
        Exit 77 where transformers cannot be imported (the torch 2.6 chroot has no
        transformers; a machine with it installed, e.g. a GPU image, runs this).

The check beside hf_forward.py's own forward pass: that one re-implements the modeling files,
this one is the modeling files.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_forward import TOKENS  # noqa: E402  the same token sequence as Megatron's forward


def main(hf_dir, megatron_logits, tolerance):
    try:
        import torch
        import transformers
    except ImportError as e:
        print(f'SKIPPED: transformers is not importable here ({e})')
        sys.exit(77)
    # transformers 5 names the dtype argument `dtype` (4.x: `torch_dtype`).
    dtype_arg = 'dtype' if int(transformers.__version__.split('.')[0]) >= 5 else 'torch_dtype'
    model, info = transformers.AutoModelForCausalLM.from_pretrained(
        hf_dir, attn_implementation='eager', output_loading_info=True,
        **{dtype_arg: torch.float32})
    bad = {k: v for k, v in info.items() if k in (
        'missing_keys', 'unexpected_keys', 'mismatched_keys') and v}
    if bad:
        sys.exit(f'{hf_dir}: transformers {transformers.__version__} loading info: {bad}')
    model.eval()
    with torch.no_grad():
        logits = model(torch.tensor([TOKENS])).logits.reshape(len(TOKENS), -1).float()
    want = torch.load(megatron_logits)
    if logits.shape != want.shape:
        sys.exit(f'{hf_dir}: logits {tuple(logits.shape)}, Megatron {tuple(want.shape)}')
    diff = (logits - want).abs().max().item()
    argmax = bool((logits.argmax(-1) == want.argmax(-1)).all())
    print(f'{os.path.basename(hf_dir.rstrip("/"))}: transformers {transformers.__version__} '
          f'{type(model).__name__}, {sum(p.numel() for p in model.parameters())} parameters, '
          f'no missing/unexpected/mismatched keys; max |logit diff| vs Megatron = {diff:.3e} '
          f'(argmax equal: {argmax})')
    if not diff <= float(tolerance):
        sys.exit(f'{hf_dir}: logits differ by {diff} > {tolerance}')


if __name__ == '__main__':
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    main(*sys.argv[1:4])
