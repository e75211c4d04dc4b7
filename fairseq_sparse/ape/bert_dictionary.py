"""A BERT checkpoint's WordPiece vocabulary as a fairseq :class:`Dictionary`.

The fairseq ids are BERT's ids, in BERT's order, so that BERT's embedding matrix
is the model's embedding matrix without reindexing: fairseq's pad / eos / bos /
unk are BERT's ``[PAD]`` / ``[SEP]`` / ``[CLS]`` / ``[UNK]``.  A decoder that
starts from eos therefore starts from ``[SEP]`` and stops at ``[SEP]``.
"""

from fairseq.data import Dictionary


class BertDictionary(Dictionary):
    """fairseq dictionary whose symbols and ids are exactly a BERT tokenizer's vocabulary."""

    def __init__(self, tokenizer):
        super().__init__()
        self.symbols, self.count, self.indices = [], [], {}
        vocab = tokenizer.get_vocab()
        for token, _ in sorted(vocab.items(), key=lambda item: item[1]):
            self.add_symbol(token)
        if [self.indices[t] for t in vocab] != [vocab[t] for t in vocab]:
            raise ValueError("the tokenizer's vocabulary ids are not contiguous from 0")
        self.bos_word, self.pad_word = tokenizer.cls_token, tokenizer.pad_token
        self.eos_word, self.unk_word = tokenizer.sep_token, tokenizer.unk_token
        self.bos_index, self.pad_index = tokenizer.cls_token_id, tokenizer.pad_token_id
        self.eos_index, self.unk_index = tokenizer.sep_token_id, tokenizer.unk_token_id
        # No symbol is "special" in fairseq's sense: all keep their BERT id.
        self.nspecial = 0
        # Tokens a post-edit never holds: every special token but [SEP], which ends it, and
        # [UNK], which copies a word the vocabulary cannot spell.
        self.never_generated = sorted(set(tokenizer.all_special_ids) - {self.eos_index, self.unk_index})

    def unk_string(self, escape=False):
        return "<<unk>>" if escape else self.unk_word


def wordpiece_ids(tokenizer, lines):
    """WordPiece ids of each line that keep the data's own tokenisation.

    BERT's basic tokenizer splits every punctuation mark off a word ("film-coated" ->
    ``film - coated``, "4.4" -> ``4 . 4``), so merging WordPieces cannot tell those
    splits from the data's spaces: on WMT APE text a perfect copy of the MT then loses
    5 TER points.  Here a basic token that follows the previous one without whitespace
    continues the same word with ``##`` pieces (``film ##- ##coat ##ed``, ``4 ##. ##4``), so
    that merging ``##`` (:class:`WordPieceDetokenizer`) gives back the data's tokens
    exactly: lowercased and without accents for an uncased BERT, ``[UNK]`` where the
    vocabulary cannot spell a piece.  Pieces are BERT's greedy longest-match-first."""
    if not tokenizer.is_fast:
        raise ValueError(f"{type(tokenizer).__name__}: a fast (Rust) BERT tokenizer is needed for the offsets")
    vocab = tokenizer.get_vocab()
    continuations = {}

    def continuation(word):
        if word not in continuations:
            pieces, start = [], 0
            while start < len(word):
                end = len(word)
                while end > start and f"##{word[start:end]}" not in vocab:
                    end -= 1
                if end == start:
                    pieces = [tokenizer.unk_token_id]
                    break
                pieces.append(vocab[f"##{word[start:end]}"])
                start = end
            continuations[word] = pieces
        return continuations[word]

    lines = list(lines)
    if not lines:  # the fast tokenizer fails on an empty batch
        return []
    encoded = tokenizer(lines, add_special_tokens=False, return_offsets_mapping=True)
    result = []
    for ids, offsets in zip(encoded["input_ids"], encoded["offset_mapping"]):
        pieces = tokenizer.convert_ids_to_tokens(ids)
        out, previous_end, i = [], None, 0
        while i < len(ids):
            # One basic token: a word-initial piece and the ## pieces after it.
            j = i + 1
            while j < len(ids) and pieces[j].startswith("##"):
                j += 1
            if offsets[i][0] == previous_end and ids[i] != tokenizer.unk_token_id:
                out.extend(continuation("".join(piece.removeprefix("##") for piece in pieces[i:j])))
            else:
                out.extend(ids[i:j])
            previous_end, i = offsets[j - 1][1], j
        result.append(out)
    return result


def model_spelling(tokenizer, lines):
    """Each line as a model with this tokenizer writes it when it copies it exactly: its
    :func:`wordpiece_ids` merged back by :class:`WordPieceDetokenizer`.  For an uncased
    BERT that is lowercased and without accents, so an APE system's edits are what
    differs from this, not from the MT's own bytes."""
    detokenizer = WordPieceDetokenizer()
    return [detokenizer.decode(" ".join(tokenizer.convert_ids_to_tokens(ids)))
            for ids in wordpiece_ids(tokenizer, lines)]


class WordPieceDetokenizer:
    """fairseq ``bpe`` object for WordPiece: ``decode`` merges ``##`` continuations,
    giving back the data's tokenisation for text encoded by :func:`wordpiece_ids`."""

    def encode(self, x: str) -> str:
        raise NotImplementedError("inputs are tokenised by the task's BERT tokenizer")

    def decode(self, x: str) -> str:
        return x.replace(" ##", "").replace("##", "").strip()

    def is_beginning_of_word(self, x: str) -> bool:
        return not x.startswith("##")
