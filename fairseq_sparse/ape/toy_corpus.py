"""A generated APE corpus for demos and tests: toy German sources, English MT output
with typical MT errors, and the correct English post-edit.

This is not real data, and says so: sentences are built from a small grammar
(subject, verb, place or time), translated word by word into a reference, and the
"MT" is that reference with errors of the kinds APE systems learn to repair,
injected at random: subject-verb agreement, adjective order, a dropped article, a
literal preposition, a repeated word, an untranslated source word.  About a
quarter of the MT sentences are left correct, so that "do nothing" is sometimes right.
"""

import itertools
import random

from .triplets import FIELDS, write_triplets

SUBJECTS = [  # (source, target, plural)
    ("der hund", "the dog", False), ("die katze", "the cat", False), ("der lehrer", "the teacher", False),
    ("das kind", "the child", False), ("die kinder", "the children", True), ("die vögel", "the birds", True),
    ("meine freunde", "my friends", True), ("die nachbarn", "the neighbours", True),
]
ADJECTIVES = [("kleine", "small"), ("alte", "old"), ("müde", "tired"), ("neue", "new")]
VERBS = [  # (source singular, source plural, target singular, target plural)
    ("schläft", "schlafen", "sleeps", "sleep"), ("singt", "singen", "sings", "sing"),
    ("läuft", "laufen", "runs", "run"), ("spielt", "spielen", "plays", "play"),
    ("wartet", "warten", "waits", "wait"), ("arbeitet", "arbeiten", "works", "work"),
]
PLACES = [  # (source, target, literal mistranslation)
    ("im garten", "in the garden", "im the garden"), ("am morgen", "in the morning", "at the morning"),
    ("zu hause", "at home", "to house"), ("im park", "in the park", "in park"),
    ("am abend", "in the evening", "on the evening"), ("in der stadt", "in the city", "in the town city"),
]


def _sentence(subject, adjective, verb, place):
    src_subj, tgt_subj, plural = subject
    if adjective:
        det, noun = src_subj.split(" ", 1)
        src_subj = f"{det} {adjective[0]} {noun}"
        det, noun = tgt_subj.split(" ", 1)
        tgt_subj = f"{det} {adjective[1]} {noun}"
    src = f"{src_subj} {verb[1] if plural else verb[0]} {place[0]} ."
    tgt = f"{tgt_subj} {verb[3] if plural else verb[2]} {place[1]} ."
    return src, tgt


def _errors(subject, adjective, verb, place):
    """Functions that damage a correct English sentence in one typical way each."""
    _, tgt_subj, plural = subject
    right, wrong = (verb[3], verb[2]) if plural else (verb[2], verb[3])
    errors = [lambda s: s.replace(f" {right} ", f" {wrong} ", 1),  # agreement
              lambda s: s.replace(place[1], place[2], 1)]  # literal preposition / article
    if adjective:
        noun = tgt_subj.split(" ", 1)[1]
        errors.append(lambda s: s.replace(f"{adjective[1]} {noun}", f"{noun} {adjective[1]}", 1))  # word order
    errors.append(lambda s: s.replace(f" {right} ", f" {right} {right} ", 1))  # repeated word
    errors.append(lambda s: s.replace(f" {right} ", f" {verb[1] if plural else verb[0]} ", 1))  # untranslated
    errors.append(lambda s: s.split(" ", 1)[1] if s.startswith("the ") else s)  # dropped article
    return errors


def generate(seed=0):
    """All (src, mt, pe) triplets of the grammar, shuffled, with one MT per sentence."""
    rng = random.Random(seed)
    triplets = []
    for subject, adjective, verb, place in itertools.product(SUBJECTS, [None] + ADJECTIVES, VERBS, PLACES):
        src, pe = _sentence(subject, adjective, verb, place)
        mt = pe
        if rng.random() > 0.25:
            for damage in rng.sample(_errors(subject, adjective, verb, place), rng.choice([1, 1, 2])):
                mt = damage(mt)
        triplets.append((src, mt, pe))
    rng.shuffle(triplets)
    return triplets


def write(directory, seed=0, valid=100, test=200, train=None):
    """Write {train,valid,test}.{src,mt,pe} (train: the first `train` of the rest, or all of
    it); returns the split sizes."""
    triplets = generate(seed)
    rest = triplets[test + valid:]
    splits = {"test": triplets[:test], "valid": triplets[test:test + valid], "train": rest[:train]}
    for split, rows in splits.items():
        write_triplets(directory, split, {field: [r[i] for r in rows] for i, field in enumerate(FIELDS)})
    return {split: len(rows) for split, rows in splits.items()}
