"""``--scoring ter``: translation edit rate, computed by sacrebleu.

Configured as the official WMT APE evaluation (tercom): case-sensitive, no
normalisation, punctuation kept, on the text as given (already tokenised APE
data is not re-tokenised).  Lower is better; reported in percent with
sacrebleu's signature.
"""

from dataclasses import dataclass, field

from fairseq.dataclass import FairseqDataclass
from fairseq.scoring import BaseScorer, register_scorer


def official_ter():
    """sacrebleu's TER with the settings of the WMT APE shared tasks."""
    from sacrebleu.metrics import TER

    return TER(case_sensitive=True, normalized=False, no_punct=False, asian_support=False)


def ape_scores(hyps, refs):
    """(TER, TER signature, BLEU, BLEU signature) as the WMT APE tasks report them:
    TER as above, BLEU on the tokenised text as is (``-tok none``)."""
    from sacrebleu.metrics import BLEU

    # APE text is tokenised by design: force only silences sacrebleu's "forgot to
    # detokenize" warning (same score, same signature).
    ter, bleu = official_ter(), BLEU(tokenize="none", force=True)
    return (ter.corpus_score(hyps, [refs]).score, str(ter.get_signature()),
            bleu.corpus_score(hyps, [refs]).score, str(bleu.get_signature()))


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
