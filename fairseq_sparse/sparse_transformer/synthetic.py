"""Synthetic tasks for length extrapolation, each generated from a seed: a prompt of a
given length and the answer a model must give after it (Vasylenko, Pitorro, Martins &
Treviso, "Long-Context Generalization with Sparse Attention", ICLR 2026, whose task
formats these follow: symbols drawn uniformly from a vocabulary of 32 for copy, reverse
and sort; two-symbol keys and values among 256 symbols, spread over blanks, with four
queries for associative recall; write, ignore and read commands with bits, a write at
probability 0.1, for flip-flop).

Every generator takes a ``numpy.random.Generator`` and the prompt's length and returns
``(prompt, answer)`` as lists of symbols (strings, the words of the task's dictionary).
:data:`TASKS` maps each task's name to its generator, and :func:`answer_of` computes the
answer of a prompt from the prompt alone, the brute-force check of every generator.
"""

import numpy as np

# Copy, reverse and sort: the prompt's symbols.
SYMBOLS = 32
# Associative recall: the alphabet of keys and values, their length, the share of the
# prompt that holds key-value pairs, and the keys asked for after it.
RECALL_ALPHABET, RECALL_PART, RECALL_SHARE, RECALL_QUERIES = 256, 2, 0.8, 4
BLANK, BIND, ASK = "_", ":", "?"
# Flip-flop: the probability of a write at each command.
WRITE_PROBABILITY = 0.1
WRITE, IGNORE, READ = "w", "i", "r"


def _symbols(rng, length, vocabulary=SYMBOLS):
    return [str(s) for s in rng.integers(0, vocabulary, length)]


def copy(rng, length):
    """The prompt's ``length`` symbols, then the same symbols."""
    prompt = _symbols(rng, length)
    return prompt, list(prompt)


def reverse(rng, length):
    """The prompt's ``length`` symbols, then the same symbols last to first."""
    prompt = _symbols(rng, length)
    return prompt, prompt[::-1]


def sort(rng, length):
    """The prompt's ``length`` symbols, then the same symbols in ascending order (as numbers)."""
    prompt = _symbols(rng, length)
    return prompt, sorted(prompt, key=int)


def _recall_word(index):
    return f"a{index}"


def associative_recall(rng, length):
    """Key-value pairs (``k1 k2 : v1 v2``, distinct keys of two symbols each) spread over
    blanks to ``length`` positions, then ``RECALL_QUERIES`` queries (``? k1 k2``) of keys
    among them; the answer is ``? v1 v2`` for each query, in order."""
    pairs = max(1, int(length * RECALL_SHARE) // (2 * RECALL_PART + 2))
    slots = rng.choice(RECALL_ALPHABET ** RECALL_PART, size=pairs, replace=False)
    keys = [[_recall_word(int(s) // RECALL_ALPHABET ** i % RECALL_ALPHABET) for i in range(RECALL_PART)]
            for s in slots]
    values = [_symbols_from(rng) for _ in range(pairs)]
    body = [token for key, value in zip(keys, values) for token in [*key, BIND, *value, BLANK]]
    # The remaining positions are blanks, put between the pairs at random.
    blanks = max(0, length - len(body))
    cuts = np.sort(rng.integers(0, pairs + 1, blanks))
    prompt, at = [], 0
    for i in range(pairs + 1):
        while at < len(cuts) and cuts[at] == i:
            prompt.append(BLANK)
            at += 1
        if i < pairs:
            prompt += body[i * (2 * RECALL_PART + 2):(i + 1) * (2 * RECALL_PART + 2)]
    asked = rng.integers(0, pairs, RECALL_QUERIES)
    prompt += [token for q in asked for token in [ASK, *keys[q]]]
    return prompt, [token for q in asked for token in [ASK, *values[q]]]


def _symbols_from(rng):
    return [_recall_word(int(s)) for s in rng.integers(0, RECALL_ALPHABET, RECALL_PART)]


def flip_flop(rng, length):
    """``length // 2`` commands, each followed by a bit (the last, a read, by none): the
    first is a write, the last a read, the others a write at ``WRITE_PROBABILITY`` and
    an ignore otherwise; the answer is the bit of the last write."""
    commands = max(2, length // 2)
    kinds = [WRITE] + [WRITE if w else IGNORE for w in rng.random(commands - 2) < WRITE_PROBABILITY] + [READ]
    bits = [str(b) for b in rng.integers(0, 2, commands - 1)]
    prompt = [token for kind, bit in zip(kinds, bits) for token in (kind, bit)] + [READ]
    last = max(i for i, kind in enumerate(kinds[:-1]) if kind == WRITE)
    return prompt, [bits[last]]


TASKS = {"copy": copy, "reverse": reverse, "sort": sort, "associative_recall": associative_recall,
         "flip_flop": flip_flop}


def answer_of(task, prompt):
    """The answer to ``prompt`` of ``task``, computed from the prompt alone."""
    if task == "copy":
        return list(prompt)
    if task == "reverse":
        return prompt[::-1]
    if task == "sort":
        return sorted(prompt, key=int)
    if task == "associative_recall":
        question = prompt.index(ASK)
        table, tokens = {}, prompt[:question]
        for i, token in enumerate(tokens):
            if token == BIND:
                table[tuple(tokens[i - RECALL_PART:i])] = tokens[i + 1:i + 1 + RECALL_PART]
        queries = prompt[question:]
        step = RECALL_PART + 1
        return [token for i in range(0, len(queries), step)
                for token in [ASK, *table[tuple(queries[i + 1:i + step])]]]
    if task == "flip_flop":
        writes = [prompt[i + 1] for i in range(0, len(prompt) - 1, 2) if prompt[i] == WRITE]
        return [writes[-1]]
    raise ValueError(f"unknown synthetic task {task!r}; one of {', '.join(TASKS)}")


def words(task):
    """Every symbol the prompts and answers of ``task`` may hold, in a fixed order."""
    if task in ("copy", "reverse", "sort"):
        return [str(s) for s in range(SYMBOLS)]
    if task == "associative_recall":
        return [BLANK, BIND, ASK] + [_recall_word(i) for i in range(RECALL_ALPHABET)]
    if task == "flip_flop":
        return [WRITE, IGNORE, READ, "0", "1"]
    raise ValueError(f"unknown synthetic task {task!r}; one of {', '.join(TASKS)}")
