"""Hugging Face BERT checkpoints, loaded offline: the one place the APE models and the
BERT sentence VAE get a BERT's tokenizer and weights from (a local directory, or a
model name already in the Hugging Face cache; nothing is ever downloaded)."""

from pathlib import Path


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
