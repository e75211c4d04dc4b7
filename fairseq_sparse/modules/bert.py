"""Hugging Face BERT checkpoints, loaded offline: the one place the APE models and the
BERT sentence VAE get a BERT's tokenizer and weights from (a local directory, or a
model name already in the Hugging Face cache; nothing is ever downloaded)."""

import logging
from pathlib import Path

import torch
from torch import nn

logger = logging.getLogger(__name__)


def load_bert_tokenizer(name_or_path, option="--bert-model"):
    """The Hugging Face tokenizer of a BERT checkpoint (local directory or hub name;
    we never download: a name must already be in the local cache)."""
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(str(name_or_path), local_files_only=True)
    except (OSError, ValueError) as e:
        raise FileNotFoundError(
            f"{option} {name_or_path}: no BERT tokenizer found there (a directory with vocab.txt / "
            f"tokenizer.json, or a model name already in the Hugging Face cache): {e}") from None
    missing = [t for t in ("cls_token", "sep_token", "pad_token", "unk_token") if getattr(tokenizer, t) is None]
    if missing:
        raise ValueError(f"{option} {name_or_path}: the tokenizer has no {', '.join(missing)}; is it a BERT checkpoint?")
    return tokenizer


def load_bert_model(name_or_path, option="--bert-model"):
    """Hugging Face's ``BertModel`` of a checkpoint, without its pooling layer."""
    from transformers import BertModel

    try:
        return BertModel.from_pretrained(str(name_or_path), local_files_only=True, add_pooling_layer=False)
    except (OSError, ValueError) as e:
        raise FileNotFoundError(f"{option} {name_or_path}: cannot load a BERT model from it ({e})") from None


def tokenizer_files_exist(directory):
    return (Path(directory) / "vocab.txt").is_file() or (Path(directory) / "tokenizer.json").is_file()


def vocabulary_sha256(tokenizer):
    """The identity of a tokenizer's vocabulary: sha256 of its tokens in id order.  Two
    BERTs with vocabularies of one size but other tokens (or orders) differ here."""
    import hashlib

    tokens = sorted(tokenizer.get_vocab().items(), key=lambda item: item[1])
    return hashlib.sha256("\n".join(token for token, _ in tokens).encode("utf-8")).hexdigest()


class VocabularyCheck(nn.Module):
    """A buffer-only module attached to a model built on a tokenizer (``source`` names it
    in errors): the vocabulary's digest is saved with the weights, and weights saved with
    another vocabulary are refused, naming both.  fairseq calls ``upgrade_state_dict_named``
    on every submodule before a model loads weights (generation, fairseq-interactive,
    PostEditor, the attention report, a resumed training run), so the check runs wherever
    weights are loaded.  A checkpoint from before the digest was kept loads with a warning."""

    def __init__(self, tokenizer, source):
        super().__init__()
        self.digest, self.source, self.size = vocabulary_sha256(tokenizer), source, len(tokenizer.get_vocab())
        self.register_buffer("sha256", torch.tensor(list(bytes.fromhex(self.digest)), dtype=torch.uint8))

    def upgrade_state_dict_named(self, state_dict, name):
        key = f"{name}.sha256"
        if key not in state_dict:
            # Without the digest, the embedding matrix still tells a checkpoint of another
            # vocabulary (another task's, say) before torch's bare size-mismatch error.
            rows = {v.shape[0] for k, v in state_dict.items() if k.endswith("embed_tokens.weight") and v.dim() == 2}
            if rows and rows != {self.size}:
                raise ValueError(f"the checkpoint's token embeddings have {', '.join(map(str, sorted(rows)))} rows, "
                                 f"not the {self.size} tokens of {self.source}: it was trained on another vocabulary "
                                 "(or another task)")
            logger.warning(f"the checkpoint does not record its BERT vocabulary (written before it did), so it "
                           f"cannot be checked against {self.source}")
            state_dict[key] = self.sha256.clone()
            return
        stored = bytes(state_dict[key].tolist()).hex()
        if stored != self.digest:
            raise ValueError(f"the checkpoint was trained with another BERT vocabulary (sha256 {stored[:12]}) than "
                             f"{self.source} (sha256 {self.digest[:12]}): its token ids would mean other words; use "
                             "the data directory (and tokenizer) the model was trained with")
