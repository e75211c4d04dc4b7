"""Conservative post-editing: two ways to keep an APE system from rewriting MT that is
already right, both options of the ``ape`` task (so of ``fairseq-generate``,
``fairseq-interactive`` and :class:`~fairseq_sparse.ape.postedit.PostEditor`).

``--conservativeness C`` (Lopes et al., WMT 2019, the BERT encoder-decoder APE system
of Correia's group): during beam search, every candidate target token that occurs in
neither the sentence's src nor its mt has C subtracted from its log-probability, so
the search prefers words it can copy.  Presence is decided on the tokens the model
reads, the WordPieces of the data's words: a piece is present when some word of src
or mt was split into it (so ``##ing`` is present wherever one present word ends in
it, and a new word made only of present pieces is not penalised); punctuation marks
are data tokens like any other (``,`` is present when src or mt has one, and a mark
inside a token, as in ``film-coated``, is the ``##-`` piece); ``[SEP]``, which ends
the post-edit, is always present.  C = 0 is plain beam search.

``--keep-mt-margin M`` (the sentence-level gate of WMT APE systems since 2019): the
MT itself is scored as a hypothesis by forced decoding, with the length
normalisation the beam uses (``--lenpen``, ``--unnormalized``, ``--temperature``,
``--unkpen`` alike; no conservativeness penalty applies, every MT token being
present), and the beam's hypotheses keep their place only when their score beats
the MT's by more than M nats per token; the MT goes where the first that does not
stands (a hypothesis that is the MT itself counts once, at its first place), so with
``--nbest 1`` the post-edit replaces the MT only when it is clearly better.  M = inf
keeps every MT (doing nothing); M = -inf returns the beam's own output but still
scores the MT: each returned hypothesis carries ``mt_score`` and ``is_mt``, for tuning
M afterwards with :func:`keeps_mt`, the same rule.

``--keep-mt-max-edits E`` limits the margin gate to small edits: a hypothesis outranks
the MT only when it also lies within E word edits of it (TER's insertions, deletions,
substitutions and shifts turning the hypothesis into the MT, on the WordPiece-merged text
the model writes: :func:`word_edits`), so the MT goes before every other, and a
hypothesis further down the beam that passes both tests is returned before it.  Why:
the edits that repair an MT are mostly small and the ones that break it large
(docs/notes/ape.md#why-an-edit-limit), while the margin, a per-token confidence, cannot tell them apart in a long sentence.
Off (the default) is the margin gate alone; it needs ``--keep-mt-margin`` (-inf to limit
the edits alone).

With the gate, for :class:`~fairseq_sparse.ape.postedit.PostEditor` (``list_candidates``),
each returned hypothesis also carries ``candidates`` (tokens, text, total log-probability,
score as the beam normalises it, ``is_mt``), from which tuning applies any M and E
afterwards (with the same ``MarginRule``); generation itself computes only what ranking
needs, the word edits of a hypothesis only where its margin does not decide.
"""

import dataclasses
import functools
import logging
import math
import numbers
from typing import Optional

import torch
from fairseq.data import data_utils
from fairseq.models import FairseqEncoderDecoderModel
from fairseq.sequence_generator import EnsembleModel, EnsembleModelWithAlignment, SequenceGenerator

from .bert_dictionary import WordPieceDetokenizer
from .ter import official_ter
from .triplets import mt_segment

logger = logging.getLogger(__name__)


def check_decoding_options(conservativeness: float, keep_mt_margin: Optional[float],
                           keep_mt_max_edits: Optional[int] = None):
    """Refuse values that would make search meaningless, naming the option."""
    for option, value in (("--conservativeness", conservativeness), ("--keep-mt-margin", keep_mt_margin)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, numbers.Real)):
            raise TypeError(f"{option} {value!r}: must be a number, not a {type(value).__name__}")
    if not conservativeness >= 0:  # also NaN
        raise ValueError(f"--conservativeness {conservativeness}: must be a number >= 0 (0: plain beam search)")
    if keep_mt_margin is not None and math.isnan(keep_mt_margin):
        raise ValueError("--keep-mt-margin nan: must be a number (nats per token; leave it out to turn the "
                         "keep-the-MT gate off)")
    if keep_mt_max_edits is not None:
        if isinstance(keep_mt_max_edits, bool) or not isinstance(keep_mt_max_edits, int) or keep_mt_max_edits < 0:
            raise ValueError(f"--keep-mt-max-edits {keep_mt_max_edits}: must be a whole number of word edits >= 0 "
                             "(0: keep every MT; leave it out for no limit)")
        if keep_mt_margin is None:
            raise ValueError("--keep-mt-max-edits limits the margin gate: give --keep-mt-margin too (-inf to limit "
                             "the edits alone)")


def keeps_mt(hypothesis_score: float, mt_score: float, margin: float, edits: Optional[int] = None,
             max_edits: Optional[int] = None) -> bool:
    """The gate's rule: the MT stays unless the hypothesis beats it by more than margin and,
    where max_edits is given, lies within max_edits word edits of it."""
    return not (hypothesis_score - mt_score > margin and (max_edits is None or edits <= max_edits))


def word_edits(hypothesis: str, mt: str) -> int:
    """How many word edits (TER's insertions, deletions, substitutions and shifts, tercom's
    settings) turn the hypothesis into the MT."""
    return int(official_ter().sentence_score(hypothesis, [mt]).num_edits)


@dataclasses.dataclass(frozen=True)
class MarginRule:
    """The keep-the-MT gate's one rule, for generation (``KeepMTGate``) and for tuning
    afterwards on the candidates it listed (``fairseq_sparse.ape.tuning``) alike: a
    candidate outranks the MT when it beats the MT's score by more than ``margin`` and,
    with ``max_edits``, lies within that many word edits of it."""
    margin: float
    max_edits: Optional[int] = None

    def outranks(self, score: float, mt_score: float, edits: Optional[int] = None) -> bool:
        return not keeps_mt(score, mt_score, self.margin, edits, self.max_edits)

    def needs_edits(self, score: float, mt_score: float) -> bool:
        """Whether deciding on a candidate of this score needs its word edits: only under an
        edit limit, and only where it beats the MT by the margin (else the MT stays anyway)."""
        return self.max_edits is not None and score - mt_score > self.margin

    def first(self, scores, mt_score, edits=None):
        """The index of the first candidate (in the beam's order) that outranks the MT, or
        None; ``edits`` (each candidate's word edits to the MT) is needed with max_edits."""
        edits = edits if edits is not None else [None] * len(scores)
        return next((i for i, (score, e) in enumerate(zip(scores, edits)) if self.outranks(score, mt_score, e)), None)


def never_generate(lprobs, never):
    """``lprobs`` with -inf at the ``never`` token ids (in place)."""
    if never:
        lprobs[:, never] = -math.inf
    return lprobs


class AlignmentEnsemble(EnsembleModelWithAlignment):
    """fairseq's ensemble for ``--print-alignment``, with the ``never`` tokens at -inf as in
    :class:`ConservativeEnsemble` (which conservativeness it does not apply)."""

    def __init__(self, models, never=()):
        super().__init__(models)
        self.never = list(never)

    def forward_decoder(self, tokens, encoder_outs, incremental_states, temperature: float = 1.0):
        lprobs, attn = super().forward_decoder(tokens, encoder_outs, incremental_states, temperature)
        return never_generate(lprobs, self.never), attn


class ConservativeEnsemble(EnsembleModel):
    """fairseq's ensemble whose next-token log-probabilities have ``penalty`` subtracted
    for every token that is not in the row's source ``[CLS] src [SEP] mt [SEP]``, and are
    -inf for the ``never`` tokens (the special tokens a post-edit never holds: a briefly
    trained model would otherwise repeat ``[CLS]`` up to the length limit, which prints
    as an empty post-edit).

    The source of each beam row follows the row through fairseq's reordering
    (``reorder_encoder_out`` is called with every new row order, finished sentences
    removed), so no change to the search itself is needed."""

    def __init__(self, models, penalty: float, eos: int, never=()):
        super().__init__(models)
        self.penalty, self.eos = penalty, eos
        self.never = list(never)
        self.src_tokens = None

    def forward_encoder(self, net_input):
        self.src_tokens = net_input["src_tokens"]
        return super().forward_encoder(net_input)

    def reorder_encoder_out(self, encoder_outs, new_order):
        self.src_tokens = self.src_tokens.index_select(0, new_order)
        return super().reorder_encoder_out(encoder_outs, new_order)

    def forward_decoder(self, tokens, encoder_outs, incremental_states, temperature: float = 1.0):
        lprobs, attn = super().forward_decoder(tokens, encoder_outs, incremental_states, temperature)
        lprobs = never_generate(lprobs, self.never)
        if self.penalty == 0:  # plain search: nothing to subtract, no (rows, vocabulary) mask per step
            return lprobs, attn
        present = torch.zeros_like(lprobs, dtype=torch.bool).scatter_(1, self.src_tokens, True)
        present[:, self.eos] = True
        # where(), not a multiplication: C = inf must not turn present tokens into NaN,
        # and C = 0 leaves every log-probability exactly as it was.
        return torch.where(present, lprobs, lprobs - self.penalty), attn


def mt_targets(src_tokens, dictionary):
    """Each row's mt segment and its closing ``[SEP]`` (= eos): the rows, and as the decoder
    is trained on them, right-padded, (target, prev_output_tokens)."""
    pad, eos = dictionary.pad(), dictionary.eos()
    segment = mt_segment(src_tokens, eos, pad).bool()
    rows = [row[mask] for row, mask in zip(src_tokens, segment)]
    target = data_utils.collate_tokens(rows, pad, eos, left_pad=False)
    prev = data_utils.collate_tokens(rows, pad, eos, left_pad=False, move_eos_to_beginning=True)
    return rows, target, prev


def check_can_score_mt(models):
    for model in models:
        if not isinstance(model, FairseqEncoderDecoderModel):
            raise ValueError(f"--keep-mt-margin: {type(model).__name__} is not an encoder-decoder model, so it "
                             "cannot score the MT by forced decoding; leave the option out")


def marked_once(hypotheses, mt_tokens, mt_score):
    """The hypotheses in order, each marked ``is_mt`` and given ``mt_score``; the MT counts at
    its first place only."""
    marked, seen_mt = [], False
    for hypo in hypotheses:
        is_mt = torch.equal(hypo["tokens"], mt_tokens)
        if not (is_mt and seen_mt):
            marked.append(dict(hypo, is_mt=is_mt, mt_score=mt_score))
        seen_mt |= is_mt
    return marked


class KeepMTGate:
    """Wraps a :class:`SequenceGenerator`: after its search, each sentence's MT competes
    with the returned hypotheses by the ``MarginRule`` (see the module docstring).  Everything else
    (``eos``, the symbols fairseq-generate strips) is the wrapped generator's."""

    def __init__(self, generator: SequenceGenerator, models, dictionary, margin: float, log_kept=True,
                 max_edits: Optional[int] = None, list_candidates=False):
        check_can_score_mt(models)
        self.generator, self.models, self.dictionary = generator, models, dictionary
        self.rule = MarginRule(margin, max_edits)
        self.detokenizer = WordPieceDetokenizer()
        self.log_kept = log_kept
        # Each hypothesis's ``candidates`` (what tuning weighs), for PostEditor; generation
        # needs only the ranking.
        self.list_candidates = list_candidates
        self.kept = self.sentences = 0

    def __getattr__(self, name):
        return getattr(self.__dict__["generator"], name)

    @torch.no_grad()
    def mt_scores(self, sample):
        """(MT token rows, their scores as the beam would score them)."""
        net_input = sample["net_input"]
        rows, target, prev = mt_targets(net_input["src_tokens"], self.dictionary)
        positions = min(model.max_decoder_positions() for model in self.models)
        if target.size(1) > positions:
            raise ValueError(f"--keep-mt-margin: an MT of {target.size(1)} tokens does not fit the model's "
                             f"{positions} target positions; lower --max-segment-tokens")
        lprobs = []
        for model in self.models:
            logits, extra = model(**{k: v for k, v in net_input.items() if k != "prev_output_tokens"},
                                  prev_output_tokens=prev)
            out = model.get_normalized_probs((logits.div(self.generator.temperature), extra), log_probs=True)
            lprobs.append(out.gather(-1, target.unsqueeze(-1)).squeeze(-1))
        # The ensemble's average of probabilities, as EnsembleModel.forward_decoder takes it.
        token_scores = torch.logsumexp(torch.stack(lprobs).float(), 0) - math.log(len(lprobs))
        token_scores = token_scores - self.generator.unk_penalty * target.eq(self.dictionary.unk())
        lengths = target.ne(self.dictionary.pad()).sum(1)
        token_scores = token_scores.masked_fill(target.eq(self.dictionary.pad()), 0.0)
        scores = token_scores.sum(1)
        if self.generator.normalize_scores:
            scores = scores / lengths.float() ** self.generator.len_penalty
        return rows, [(s, token_scores[i, :n]) for i, (s, n) in enumerate(zip(scores, lengths.tolist()))]

    def text(self, tokens):
        """The WordPiece-merged text of a token row, as the edit limit compares candidates."""
        return self.detokenizer.decode(self.dictionary.string(tokens.int()))

    def outranks_mt(self, hypo, mt_score, mt_text):
        """The margin rule: whether a hypothesis beats the MT by more than the margin (and lies
        within the edit limit of the MT's text, ``mt_text()``); the word edits (a sentence TER)
        are counted only where the margin alone does not decide."""
        score, mt_score = float(hypo["score"]), float(mt_score)
        edits = (word_edits(self.text(hypo["tokens"]), mt_text()) if self.rule.needs_edits(score, mt_score)
                 else None)
        return self.rule.outranks(score, mt_score, edits)

    def generate(self, models, sample, prefix_tokens=None, constraints=None, **kwargs):
        if prefix_tokens is not None or constraints is not None:
            raise ValueError("--keep-mt-margin cannot be combined with --prefix-size or "
                             "--constraints: the MT would compete with hypotheses forced to another start")
        finalized = self.generator.generate(models, sample, **kwargs)
        rows, scored = self.mt_scores(sample)
        for i, hypos in enumerate(finalized):
            mt_score, positional = scored[i]
            mt = {"tokens": rows[i], "score": mt_score, "attention": torch.empty(0), "alignment": torch.empty(0),
                  "positional_scores": positional}
            # The hypotheses that beat the MT (by the margin, within the edits) keep their
            # order before it, the rest follow it; without an edit limit the first are the
            # beam's best, down to the first that does not beat the MT.  Where the beam found
            # the MT itself, only its first place counts.
            mt_text = functools.cache(functools.partial(self.text, rows[i]))  # read only where the edits are
            ahead = [self.outranks_mt(hypo, mt_score, mt_text) for hypo in hypos]
            ranked = marked_once([h for h, a in zip(hypos, ahead) if a] + [mt]
                                 + [h for h, a in zip(hypos, ahead) if not a], rows[i], mt_score)
            finalized[i] = ranked[:max(len(hypos), 1)]
            if self.list_candidates:
                # Every candidate once, with what tuning weighs: the beam's hypotheses, then the
                # MT unless the beam found it.
                listed = [{"tokens": c["tokens"], "text": self.text(c["tokens"]), "is_mt": c["is_mt"],
                           "log_prob": float(c["positional_scores"].sum()), "score": float(c["score"])}
                          for c in marked_once(hypos + [mt], rows[i], mt_score)]
                finalized[i] = [dict(c, candidates=listed) for c in finalized[i]]
            self.kept += finalized[i][0]["is_mt"]
        self.sentences += len(finalized)
        if self.log_kept:  # fairseq-generate and -interactive show their counts; PostEditor returns them
            gate = f"--keep-mt-margin {self.rule.margin}"
            gate += "" if self.rule.max_edits is None else f" --keep-mt-max-edits {self.rule.max_edits}"
            logger.info(f"keep-the-MT gate ({gate}): {self.kept} of {self.sentences} sentences so far kept their MT")
        return finalized


def build_ape_generator(generator, models, dictionary, conservativeness: float = 0.0,
                        keep_mt_margin: Optional[float] = None, log_kept: bool = True,
                        keep_mt_max_edits: Optional[int] = None, list_candidates: bool = False):
    """fairseq's generator made conservative and/or gated (see the module docstring);
    ``list_candidates``: the gate lists what it weighed with each hypothesis (PostEditor).
    A :class:`fairseq.sequence_scorer.SequenceScorer` (``--score-reference``) is returned
    as is: it scores given targets and searches nothing, so a search option with it is an
    error."""
    check_decoding_options(conservativeness, keep_mt_margin, keep_mt_max_edits)
    if not isinstance(generator, SequenceGenerator):
        searching = {"--conservativeness": conservativeness > 0, "--keep-mt-margin": keep_mt_margin is not None,
                     "--keep-mt-max-edits": keep_mt_max_edits is not None}
        given = [option for option, on in searching.items() if on]
        if given:  # they shape a search, and --score-reference searches nothing: they would be ignored
            raise ValueError(f"--score-reference scores the reference post-edits and searches nothing, so "
                             f"{' and '.join(given)} would be ignored: leave out {'them' if len(given) > 1 else 'it'} "
                             "or --score-reference")
        return generator
    # Wrapped at C = 0 too, so that plain search goes through the same code (tested to be
    # fairseq's own, hypothesis for hypothesis).
    never = getattr(dictionary, "never_generated", ())
    if type(generator.model) is EnsembleModel:
        generator.model = ConservativeEnsemble(list(generator.model.models), conservativeness, dictionary.eos(), never)
        generator.model.eval()
    elif conservativeness > 0:
        raise ValueError(f"--conservativeness: not available with {type(generator.model).__name__} "
                         "(--print-alignment); leave one of them out")
    elif type(generator.model) is EnsembleModelWithAlignment:
        generator.model = AlignmentEnsemble(list(generator.model.models), never)
        generator.model.eval()
    if keep_mt_margin is not None:
        return KeepMTGate(generator, models, dictionary, keep_mt_margin, log_kept, max_edits=keep_mt_max_edits,
                          list_candidates=list_candidates)
    return generator
