"""Post-edit from Python, or a file from the command line, with a trained ``ape`` checkpoint.

    fairseq-sparse-postedit --path CKPT --src test.src --mt test.mt [--keep-mt-margin M] > test.postedit

    from fairseq_sparse.ape.postedit import PostEditor
    editor = PostEditor.from_checkpoint("checkpoints/checkpoint_best.pt", data="DATA_DIR")
    editor.postedit(["Das ist gut ."], ["This is well ."])   # -> ["this is good ."]
    ensemble = PostEditor.from_checkpoint("seed1/checkpoint_last.pt:seed2/checkpoint_last.pt", data="DATA_DIR")

``data`` is the directory the model was trained on (for the tokenizer kept there,
``DATA_DIR/tokenizer``); by default the one stored in the checkpoint.  Output is
WordPiece-merged text, as ``fairseq-generate`` prints on its ``D-`` lines, except
where the output is the MT itself (kept by the gate, or copied by the beam): there it
is the MT's own text, with the case and accents an uncased BERT drops.

``conservativeness``, ``keep_mt_margin`` and ``keep_mt_max_edits`` are the ape task's
``--conservativeness``, ``--keep-mt-margin`` and ``--keep-mt-max-edits``
(:mod:`fairseq_sparse.ape.decoding`); by default the values the checkpoint's task was
given (0 and off unless set in training).
"""

from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional

import numpy as np
import torch
from fairseq import checkpoint_utils, utils
from fairseq.dataclass.configs import GenerationConfig
from fairseq.tasks import FairseqTask

from ..compat.checkpoint_files import load_for_task
from .bert_dictionary import WordPieceDetokenizer
from .decoding import build_ape_generator
from .triplets import mt_segment

_TASKS = object()  # "the task's value" (None already means "gate off")


@dataclass
class Candidate:
    """What a gate weighed: a beam hypothesis or the MT, as the WordPiece-merged ``text`` the
    model writes, with its total ``log_prob`` and its ``score`` (normalised as the beam
    normalises it) as the beam scores it."""
    text: str
    log_prob: float
    is_mt: bool
    score: Optional[float] = None


@dataclass
class PostEdit:
    """One sentence's output: ``text`` (the MT's own text where ``is_mt``), its
    length-normalised ``score``, and ``mt_score``, the MT's score under the same
    normalisation; with the gate the ``candidates`` it weighed (None where the gate is off)."""
    text: str
    score: float
    is_mt: bool
    mt_score: Optional[float] = None
    candidates: Optional[List[Candidate]] = None


class PostEditor:
    def __init__(self, models, task, beam=5, max_len_b=200, batch_size=32, conservativeness=_TASKS,
                 keep_mt_margin=_TASKS, keep_mt_max_edits=_TASKS):
        for name, value, least in (("beam", beam, 1), ("batch_size", batch_size, 1), ("max_len_b", max_len_b, 0)):
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise ValueError(f"PostEditor {name}={value!r}: must be a whole number >= {least}")
        self.models, self.task = models, task
        for model in models:
            model.eval()
        conservativeness = task.cfg.conservativeness if conservativeness is _TASKS else conservativeness
        keep_mt_margin = task.cfg.keep_mt_margin if keep_mt_margin is _TASKS else keep_mt_margin
        keep_mt_max_edits = (getattr(task.cfg, "keep_mt_max_edits", None) if keep_mt_max_edits is _TASKS
                             else keep_mt_max_edits)
        # fairseq's own generator, then the ape task's options as given here, not as the task has them.
        generator = FairseqTask.build_generator(task, models, GenerationConfig(beam=beam, max_len_b=max_len_b))
        self.generator = build_ape_generator(generator, models, task.target_dictionary, conservativeness,
                                             keep_mt_margin, log_kept=False, keep_mt_max_edits=keep_mt_max_edits,
                                             list_candidates=True)
        self.batch_size = batch_size
        self.max_positions = utils.resolve_max_positions(task.max_positions(), *[m.max_positions() for m in models])
        self.detokenizer = WordPieceDetokenizer()

    @classmethod
    def from_checkpoint(cls, path, data=None, device="cpu", max_segment_tokens=None, **kwargs):
        """``path``: one checkpoint, or an ensemble as a list of them or as fairseq's
        ``--path a.pt:b.pt`` (their probabilities averaged at every step, as
        ``fairseq-generate`` does; the gate scores the MT by the same average).
        ``max_segment_tokens`` overrides the training run's cut of src and mt (for a model
        whose positions cannot hold longer inputs); ``kwargs`` go to :class:`PostEditor`."""
        paths = utils.split_paths(path) if isinstance(path, str) else [path] if isinstance(path, Path) else path
        overrides = {"data": str(data)} if data is not None else {}
        if max_segment_tokens is not None:
            overrides["max_segment_tokens"] = max_segment_tokens
        models, task = [], None
        for member in paths:
            state = load_for_task(member, "ape", "post-editing", overrides)
            # The first member's task (data, tokenizer, segment cut) serves them all; each member's
            # weights are checked against its tokenizer as they load.
            try:
                loaded, _cfg, task = checkpoint_utils.load_model_ensemble_and_task(
                    [str(member)], arg_overrides=overrides, task=task, state=state)
            except ValueError as e:  # a vocabulary that does not fit the data: which checkpoint and data
                where = f" with data={data}" if data is not None else ""
                raise ValueError(f"{member}{where}: {e}") from None
            models += loaded
        if not models:
            raise ValueError("PostEditor.from_checkpoint: no checkpoint given")
        return cls([m.to(device) for m in models], task, **kwargs)

    def postedit(self, src_sentences, mt_sentences):
        """The post-edit of each (src, mt) pair, in order."""
        return [edit.text for edit in self.postedits(src_sentences, mt_sentences)]

    @torch.no_grad()
    def postedits(self, src_sentences, mt_sentences):
        """A :class:`PostEdit` for each (src, mt) pair, in order."""
        # Iterables become lists (read twice below); a str stays one, for encode_inputs to refuse.
        src_sentences, mt_sentences = (x if isinstance(x, (str, bytes)) else list(x)
                                       for x in (src_sentences, mt_sentences))
        sources = self.task.encode_inputs(src_sentences, mt_sentences)
        device = next(self.models[0].parameters()).device
        outputs = [None] * len(sources)
        dataset = self.task.build_dataset_for_inference(sources, [len(s) for s in sources])
        # As fairseq-generate does: a pair longer than the model's positions is an error that
        # names it and --max-segment-tokens, not an IndexError deep in the position embedding.
        self.task.filter_indices_by_size(np.arange(len(sources)), dataset, self.max_positions)
        order = sorted(range(len(sources)), key=lambda i: len(sources[i]))
        dictionary = self.task.target_dictionary
        for start in range(0, len(order), self.batch_size):
            batch = dataset.collater([dataset[i] for i in order[start:start + self.batch_size]])
            batch = {k: (v.to(device) if torch.is_tensor(v) else v) for k, v in batch.items()}
            batch["net_input"] = {k: v.to(device) for k, v in batch["net_input"].items()}
            hypos = self.task.inference_step(self.generator, self.models, batch)
            for sample_id, nbest in zip(batch["id"].tolist(), hypos):
                best = nbest[0]
                tokens = best["tokens"].cpu()
                source = sources[sample_id]
                mt_tokens = source[mt_segment(source[None], dictionary.eos(), dictionary.pad())[0].bool()]
                is_mt = torch.equal(tokens, mt_tokens)  # mt [SEP]
                text = mt_sentences[sample_id] if is_mt else self.detokenizer.decode(dictionary.string(tokens.int()))
                optional = {key: None if best.get(key) is None else float(best[key])
                            for key in ("mt_score",)}
                if "candidates" in best:
                    optional["candidates"] = [Candidate(c["text"], c["log_prob"], c["is_mt"], c["score"])
                                              for c in best["candidates"]]
                outputs[sample_id] = PostEdit(text, float(best["score"]), is_mt, **optional)
        return outputs


def main(argv=None):
    """``fairseq-sparse-postedit``: post-edit a file of MT, one output line per input line."""
    import argparse
    import logging
    import sys

    from .triplets import read_lines

    parser = argparse.ArgumentParser(
        prog="fairseq-sparse-postedit",
        description="Post-edit the MT of a file with a trained ape checkpoint: one post-edit per line of --mt, "
                    "in order, on stdout (the MT's own text where the keep-the-MT gate keeps it).")
    parser.add_argument("--path", required=True, help="checkpoint, or an ensemble as a.pt:b.pt")
    parser.add_argument("--src", required=True, help="source sentences, one per line")
    parser.add_argument("--mt", required=True, help="their machine translations, line-aligned with --src")
    parser.add_argument("--data", help="the data directory the model was trained on (for its tokenizer); "
                                       "default: the one recorded in the checkpoint")
    parser.add_argument("--beam", type=int, default=5, help="beam size (default: %(default)s)")
    parser.add_argument("--max-len-b", type=int, default=200,
                        help="longest post-edit in WordPieces (default: %(default)s)")
    parser.add_argument("--batch-size", type=int, default=32, help="sentences per batch (default: %(default)s)")
    parser.add_argument("--conservativeness", type=float, default=None,
                        help="penalty on tokens in neither src nor mt (default: the checkpoint's task value)")
    parser.add_argument("--keep-mt-margin", type=float, default=None,
                        help="keep the MT unless the best post-edit beats it by more than this many nats per "
                             "token (default: the checkpoint's task value, usually off)")
    parser.add_argument("--keep-mt-max-edits", type=int, default=None,
                        help="with --keep-mt-margin: replace the MT only by a post-edit within this many word "
                             "edits of it (default: the checkpoint's task value, usually no limit)")
    parser.add_argument("--device", default="cpu", help="torch device, e.g. cpu or cuda (default: %(default)s)")
    args = parser.parse_args(argv)
    try:
        device = torch.device(args.device)
        torch.empty(0, device=device)  # a device this machine has (torch's own error is an assertion)
    except (RuntimeError, AssertionError) as e:
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
        parser.error(f"--device {args.device}: not available here ({reason})")
    logging.basicConfig(format="%(levelname)s | %(name)s | %(message)s", level=logging.WARNING, stream=sys.stderr)
    options = {name: value for name, value in (("conservativeness", args.conservativeness),
                                               ("keep_mt_margin", args.keep_mt_margin),
                                               ("keep_mt_max_edits", args.keep_mt_max_edits)) if value is not None}
    try:
        src, mt = list(read_lines(args.src)), list(read_lines(args.mt))
        if len(src) != len(mt):
            raise ValueError(f"--src {args.src} has {len(src)} lines but --mt {args.mt} has {len(mt)}: not line-aligned")
        editor = PostEditor.from_checkpoint(args.path, data=args.data, device=args.device, beam=args.beam,
                                            max_len_b=args.max_len_b, batch_size=args.batch_size, **options)
        edits = editor.postedit(src, mt)
    except (OSError, ValueError, TypeError, RuntimeError) as e:
        raise SystemExit(f"fairseq-sparse-postedit: {e}") from None
    sys.stdout.write("".join(line + "\n" for line in edits))


if __name__ == "__main__":
    main()
