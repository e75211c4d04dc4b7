"""``bert_sentence_vae``: the B-VAE / B-HSVAE of Prokhorov et al. (2021, Sec. 5): a
Hugging Face BERT checkpoint replaces the GRU encoder of ``sentence_vae``; the
posterior reads the mean of BERT's last layer over the sentence's WordPieces
(``[CLS]`` and ``[SEP]`` included, padding excluded); the GRU decoder is kept.

The objective is the criterion, as for ``sentence_vae``: ``--criterion elbo`` is
B-VAE, ``--criterion hsvae`` B-HSVAE.  The task gives the WordPiece ids when it
has ``--bert-model`` (the same option configures both).
"""

from dataclasses import dataclass, field
from typing import Optional

from fairseq.models import register_model
from omegaconf import II

from ..modules.bert import load_bert_model
from .sentence_vae import SentenceVAEModel, SentenceVAEModelConfig


@dataclass
class BertSentenceVAEModelConfig(SentenceVAEModelConfig):
    bert_model: Optional[str] = field(default=II("task.bert_model"), metadata={
        "help": "the BERT checkpoint the task's --bert-model names (one option configures both)"})
    freeze_bert: bool = field(default=False, metadata={
        "help": "keep the BERT encoder's weights fixed (default: fine-tuned with the VAE)"})


@register_model("bert_sentence_vae", dataclass=BertSentenceVAEModelConfig)
class BertSentenceVAEModel(SentenceVAEModel):
    @classmethod
    def build_model(cls, cfg, task):
        model = super().build_model(cfg, task)
        # The task pads WordPiece ids with its tokenizer's pad id; the mask must use the same.
        model.bert_pad = task.bert_tokenizer.pad_token_id
        return model

    def build_encoder(self, cfg):
        if not cfg.bert_model:
            raise ValueError("--arch bert_sentence_vae needs --bert-model (a BERT checkpoint directory or cached name)")
        bert = load_bert_model(cfg.bert_model)
        bert.requires_grad_(not cfg.freeze_bert)
        return bert, bert.config.hidden_size

    def encode(self, src_tokens, src_lengths, bert_tokens=None, **encoder_inputs):
        if bert_tokens is None:
            raise ValueError("bert_sentence_vae reads BERT's WordPiece ids: give the task --bert-model")
        mask = bert_tokens.ne(self.bert_pad)
        states = self.encoder(input_ids=bert_tokens, attention_mask=mask.long()).last_hidden_state
        mask = mask.unsqueeze(-1).to(states.dtype)
        pooled = (states * mask).sum(1) / mask.sum(1)
        return self.posterior_parameters(self.dropout(pooled))
