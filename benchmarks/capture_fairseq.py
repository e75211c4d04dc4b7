"""Capture the queries, keys and values a trained fairseq transformer's self-attention sees,
packed, for the kernel's tests and benchmarks (``attention_inputs.captured`` reads what
this writes, as it reads ``capture_hf.capture``'s).

The sentence pairs of a split are run through the model one at a time, in order (the
decoder teacher-forced on the reference), and each self-attention module's projected q,
k and v are packed into one row of at most ``length`` positions, whole sentences only:
encoder self-attention over the source sentences, decoder self-attention (causal) over the
targets.  ``cu_seqlens`` records where each sentence starts, so that attention over the
packed row with those offsets is exactly the attention the model computed sentence by
sentence.  Cross-attention has as many queries as target words and as many keys as source
words, which packing into one row does not keep; it is left out.
"""

import torch
from fairseq import checkpoint_utils

from fairseq_sparse.modules import AlphaEntmaxAttention


@torch.no_grad()
def capture(checkpoint, data, split="test", length=512):
    """{"layers": [{"q", "k", "v", "alpha", "module", "causal", "cu_seqlens"}], "model", "text",
    "length", "scale"} of the self-attention modules of the model in ``checkpoint`` over
    ``split`` of the binarized ``data``."""
    models, _, task = checkpoint_utils.load_model_ensemble_and_task([str(checkpoint)],
                                                                   arg_overrides={"data": str(data)})
    model = models[0].eval()
    task.load_dataset(split)
    dataset = task.dataset(split)
    modules = {name: m for name, m in model.named_modules()
               if isinstance(m, AlphaEntmaxAttention) and m.self_attention}
    if not modules:
        raise ValueError(f"{checkpoint}: no self-attention module of the package to capture")
    kept = {name: [] for name in modules}
    originals = {}
    for name, module in modules.items():
        originals[name] = module._project

        def project(*args, name=name, original=module._project):
            q, k, v, key_padding_mask = original(*args)
            kept[name].append((q[0].half().clone(), k[0].half().clone(), v[0].half().clone()))
            return q, k, v, key_padding_mask
        module._project = project
    sides = {name: "decoder" if ".decoder." in f".{name}." or name.startswith("decoder") else "encoder"
             for name in modules}
    lengths = {"encoder": [], "decoder": []}
    try:
        for index in range(len(dataset)):
            sample = dataset.collater([dataset[index]])
            source, target = sample["net_input"]["src_tokens"], sample["net_input"]["prev_output_tokens"]
            if sum(lengths["encoder"]) + source.shape[1] > length or sum(lengths["decoder"]) + target.shape[1] > length:
                break
            lengths["encoder"].append(source.shape[1])
            lengths["decoder"].append(target.shape[1])
            model(**sample["net_input"])
    finally:
        for name, module in modules.items():
            module._project = originals[name]
    if len(lengths["encoder"]) < 2:
        raise ValueError(f"{data} {split}: fewer than two sentences fit {length} positions")
    layers = []
    for name, module in modules.items():
        q, k, v = (torch.cat([step[i] for step in kept[name]], dim=1)[None] for i in range(3))
        offsets = torch.tensor([0, *lengths[sides[name]]]).cumsum(0)
        layers.append({"q": q, "k": k, "v": v, "alpha": module.alpha().float().clone(), "module": name,
                       "causal": sides[name] == "decoder", "cu_seqlens": offsets})
    return {"layers": layers, "model": str(checkpoint), "text": f"{data} {split}", "length": length,
            "scale": float(next(iter(modules.values())).scaling)}
