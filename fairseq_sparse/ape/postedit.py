"""Post-edit from Python with a trained ``ape`` checkpoint.

    from fairseq_sparse.ape.postedit import PostEditor
    editor = PostEditor.from_checkpoint("checkpoints/checkpoint_best.pt", data="DATA_DIR")
    editor.postedit(["Das ist gut ."], ["This is well ."])   # -> ["this is good ."]

``data`` is the directory the model was trained on (for the tokenizer kept there,
``DATA_DIR/tokenizer``); by default the one stored in the checkpoint.  Output is
WordPiece-merged text, as ``fairseq-generate`` prints on its ``D-`` lines.
"""

import numpy as np
import torch
from fairseq import checkpoint_utils, utils
from fairseq.dataclass.configs import GenerationConfig

from .bert_dictionary import WordPieceDetokenizer


class PostEditor:
    def __init__(self, models, task, beam=5, max_len_b=200, batch_size=32):
        self.models, self.task = models, task
        for model in models:
            model.eval()
        self.generator = task.build_generator(models, GenerationConfig(beam=beam, max_len_b=max_len_b))
        self.batch_size = batch_size
        self.max_positions = utils.resolve_max_positions(task.max_positions(), *[m.max_positions() for m in models])
        self.detokenizer = WordPieceDetokenizer()

    @classmethod
    def from_checkpoint(cls, path, data=None, device="cpu", max_segment_tokens=None, **kwargs):
        """``max_segment_tokens`` overrides the training run's cut of src and mt (for a model
        whose positions cannot hold longer inputs); ``kwargs`` go to :class:`PostEditor`."""
        overrides = {"data": str(data)} if data is not None else {}
        if max_segment_tokens is not None:
            overrides["max_segment_tokens"] = max_segment_tokens
        models, _cfg, task = checkpoint_utils.load_model_ensemble_and_task([str(path)], arg_overrides=overrides)
        if task.__class__.__name__ != "APETask":
            raise ValueError(f"{path} was not trained with --task ape")
        models = [m.to(device) for m in models]
        return cls(models, task, **kwargs)

    @torch.no_grad()
    def postedit(self, src_sentences, mt_sentences):
        """The post-edit of each (src, mt) pair, in order."""
        sources = self.task.encode_inputs(src_sentences, mt_sentences)
        device = next(self.models[0].parameters()).device
        outputs = [None] * len(sources)
        dataset = self.task.build_dataset_for_inference(sources, [len(s) for s in sources])
        # As fairseq-generate does: a pair longer than the model's positions is an error that
        # names it and --max-segment-tokens, not an IndexError deep in the position embedding.
        self.task.filter_indices_by_size(np.arange(len(sources)), dataset, self.max_positions)
        order = sorted(range(len(sources)), key=lambda i: len(sources[i]))
        for start in range(0, len(order), self.batch_size):
            batch = dataset.collater([dataset[i] for i in order[start:start + self.batch_size]])
            batch = {k: (v.to(device) if torch.is_tensor(v) else v) for k, v in batch.items()}
            batch["net_input"] = {k: v.to(device) for k, v in batch["net_input"].items()}
            hypos = self.task.inference_step(self.generator, self.models, batch)
            for sample_id, hypo in zip(batch["id"].tolist(), hypos):
                text = self.task.target_dictionary.string(hypo[0]["tokens"].int().cpu())
                outputs[sample_id] = self.detokenizer.decode(text)
        return outputs
