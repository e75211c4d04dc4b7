"""``--scoring ter``: translation edit rate, computed by sacrebleu.

Configured as the official WMT APE evaluation (tercom): case-sensitive, no
normalisation, punctuation kept, on the text as given (already tokenised APE
data is not re-tokenised).  Lower is better; reported in percent with
sacrebleu's signature.
"""

import functools
from dataclasses import dataclass, field

from fairseq.dataclass import FairseqDataclass
from fairseq.scoring import BaseScorer, register_scorer


def official_ter():
    """sacrebleu's TER with the settings of the WMT APE shared tasks."""
    from sacrebleu.metrics import TER

    return TER(case_sensitive=True, normalized=False, no_punct=False, asian_support=False)


def official_bleu():
    """sacrebleu's BLEU as the WMT APE tasks report it: on the tokenised text as is (``-tok none``)."""
    from sacrebleu.metrics import BLEU

    # APE text is tokenised by design: force only silences sacrebleu's "forgot to
    # detokenize" warning (same score, same signature).
    return BLEU(tokenize="none", force=True)


def corpus_ter(ter, sentence_scores, hyps, refs):
    """sacrebleu's corpus TER of ``hyps`` against ``refs`` (one reference each), given their
    sentence scores by ``ter.sentence_score``: sacrebleu's own sum of the sentences'
    statistics (edits over reference words), so that a grid of settings whose outputs share
    sentences scores each sentence once.  sacrebleu has no public call from statistics to a
    score; where its private one (``TER._aggregate_and_compute``, sacrebleu 2.x) is missing,
    the corpus is scored again from the text, the same number at a higher cost."""
    if _aggregates_statistics(type(ter)):
        return ter._aggregate_and_compute([[s.num_edits, s.ref_length] for s in sentence_scores])
    return ter.corpus_score(hyps, [refs])


@functools.lru_cache(maxsize=None)
def _aggregates_statistics(metric_class):
    """Whether this sacrebleu's TER turns statistics (edits, reference words) into a score;
    probed once per class, not once per grid setting."""
    try:
        return metric_class()._aggregate_and_compute([[2.0, 4.0]]).score == 50.0
    except (AttributeError, TypeError, IndexError, ValueError):
        return False


def ape_scores(hyps, refs):
    """(TER, TER signature, BLEU, BLEU signature) as the WMT APE tasks report them:
    TER as above, BLEU on the tokenised text as is (``-tok none``)."""
    ter, bleu = official_ter(), official_bleu()
    return (ter.corpus_score(hyps, [refs]).score, str(ter.get_signature()),
            bleu.corpus_score(hyps, [refs]).score, str(bleu.get_signature()))


def edit_effects(hyps, mts, refs, sentence_ter=None):
    """What post-editing did sentence by sentence, as the WMT APE shared tasks report it
    (Chatterjee et al., Findings of the WMT 2018 APE task): how many MT sentences the
    system modified, and of those how many got a lower sentence TER against the
    reference than the MT had (improved) or a higher one (deteriorated); precision is
    improved / modified.  A corpus TER close to doing nothing can hide many small
    repairs and as many breakages; these counts show which.  ``sentence_ter(i, text)``, if
    given, is text's sentence TER against refs[i] (a caller's cache of sacrebleu's)."""
    if sentence_ter is None:
        ter = official_ter()

        def sentence_ter(i, text):
            return ter.sentence_score(text, [refs[i]]).score
    modified = improved = deteriorated = 0
    for i, (hyp, mt, _ref) in enumerate(zip(hyps, mts, refs, strict=True)):
        if hyp == mt:
            continue
        modified += 1
        delta = sentence_ter(i, hyp) - sentence_ter(i, mt)
        improved += delta < 0
        deteriorated += delta > 0
    return {"sentences": len(refs), "modified": modified, "improved": improved, "deteriorated": deteriorated,
            "precision": improved / modified if modified else 0.0}


@dataclass
class TerScorerConfig(FairseqDataclass):
    ter_lowercase: bool = field(
        default=False, metadata={"help": "score lowercased text (only for uncased models; the official "
                                         "evaluation is case-sensitive)"})


@register_scorer("ter", dataclass=TerScorerConfig)
class TerScorer(BaseScorer):
    def __init__(self, cfg):
        super().__init__(cfg)
        self.metric = official_ter()

    def add_string(self, ref, pred):
        if self.cfg.ter_lowercase:
            ref, pred = ref.lower(), pred.lower()
        self.ref.append(ref)
        self.pred.append(pred)

    def _score(self):
        return self.metric.corpus_score(self.pred, [self.ref])

    def score(self):
        return self._score().score

    def result_string(self):
        return f"{self._score()} (signature: {self.metric.get_signature()})"
