"""Capture the queries, keys and values a trained model's attention sees, for the kernel's
tests and benchmarks (``attention_inputs.captured`` reads what this writes).

Sentences of a text file, one per line, are packed into one sequence of ``length`` tokens
(``[CLS] s1 [SEP] s2 [SEP] ...``, the way long-context training packs documents) and run
through the model; each attention module's projected q, k and v (B, H, T, D) are kept in
float16, with the heads' alphas (learned ones from their ``HeadAlpha``, else the
normaliser's).  With ``packed``, each sentence (``[CLS] s [SEP]``) is run alone instead, as
the model was trained, and their q, k and v are packed into one row of at most ``length``
positions with the sentences' offsets (``cu_seqlens``), as a packing collator gives them.
"""

import torch

from fairseq_sparse.hf import attention_alphas, attention_modules, from_pretrained, query_heads
from fairseq_sparse.text import read_lines


def _projections(module):
    for names in (("query", "key", "value"), ("q_proj", "k_proj", "v_proj")):
        if all(isinstance(getattr(module, n, None), torch.nn.Linear) for n in names):
            return [getattr(module, n) for n in names]
    raise ValueError(f"{type(module).__name__}: no query/key/value (or q_proj/k_proj/v_proj) projections to capture")


@torch.no_grad()
def capture(model_dir, text, length=512, packed=False):
    """{"layers": [{"q", "k", "v", "alpha", "module", "cu_seqlens"} per attention module], "model",
    "text", "length", "scale"}; ``cu_seqlens`` is None unless ``packed``."""
    from transformers import AutoModel, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    model = from_pretrained(AutoModel, model_dir).eval()
    if packed:
        rows, total = [], 0
        for line in read_lines(text):
            ids = tokenizer(line)["input_ids"]  # [CLS] s [SEP]
            if total + len(ids) > length:
                break
            rows.append(ids)
            total += len(ids)
        if len(rows) < 2:
            raise ValueError(f"{text}: fewer than two sentences fit {length} positions")
    else:
        ids = [tokenizer.cls_token_id]
        for line in read_lines(text):
            ids += tokenizer(line, add_special_tokens=False)["input_ids"] + [tokenizer.sep_token_id]
            if len(ids) >= length:
                break
        if len(ids) < length:
            raise ValueError(f"{text}: its sentences make {len(ids)} tokens, fewer than the {length} to pack")
        rows = [ids[:length]]
    modules = attention_modules(model)
    captured, hooks = {}, []
    for name, module in modules.items():
        heads = query_heads(module)
        for role, projection in zip("qkv", _projections(module)):
            def keep(_, __, out, name=name, role=role, heads=heads):
                B, T, width = out.shape
                captured.setdefault((name, role), []).append(
                    out.view(B, T, heads, width // heads).transpose(1, 2).half().clone())
            hooks.append(projection.register_forward_hook(keep))
    try:
        for ids in rows:
            ids = torch.tensor([ids])
            model(input_ids=ids, attention_mask=torch.ones_like(ids))
    finally:
        for hook in hooks:
            hook.remove()
    offsets = torch.tensor([0, *map(len, rows)]).cumsum(0) if packed else None
    layers = [{**{role: torch.cat(captured[(name, role)], 2) for role in "qkv"},
               "alpha": alpha.float().clone(), "module": name, "cu_seqlens": offsets}
              for name, alpha in attention_alphas(model).items()]
    return {"layers": layers, "model": str(model_dir), "text": str(text), "length": length,
            "scale": float(modules[next(iter(modules))].scaling)}
