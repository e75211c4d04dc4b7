"""``signaling_game``: emergent communication (Lewis 1969; Lazaridou et al. 2017), the
experiment of Correia et al. (NeurIPS 2020, Sec. 5.2).  A sender sees the target's
features and sends one of ``--num-messages`` messages (the latent z); a receiver
sees the message and ``--num-candidates`` candidates (the target and distractors,
in random order) and must pick the target.

Features: the images of :mod:`.image_experiment` (pixels scaled to [0, 1]), or
``--features FILE.npy``: a float array, one row of features per item (the paper
used ImageNet VGG features), split 80/10/10 like the images.  Distractors are
drawn from the same split: afresh for every training batch, once (by the split
seed) for validation and test, so their scores are comparable across runs.
"""

import logging
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from fairseq.data import FairseqDataset
from fairseq.tasks import register_task

from .image_task import ImageExperimentConfig, ImageExperimentTask
from .images import deterministic_splits
from .spaces import Categorical

logger = logging.getLogger(__name__)


@dataclass
class SignalingGameConfig(ImageExperimentConfig):
    features: str = field(default="", metadata={"help": "a .npy file of float features (items x dims) to play "
                                                        "with instead of the images"})
    num_messages: int = field(default=256, metadata={"help": "|Z|, the sender's vocabulary of messages"})
    num_candidates: int = field(default=16, metadata={"help": "|V|, the target and its distractors"})


def load_features(path):
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"--features {path}: no such file")
    try:
        features = np.load(path, allow_pickle=False)
    except ValueError as error:
        raise ValueError(f"--features {path}: not a .npy array ({error})") from None
    if features.ndim != 2 or not np.issubdtype(features.dtype, np.number):
        raise ValueError(f"--features {path}: expected a 2-d numeric array (items x dims), "
                         f"got shape {features.shape} of {features.dtype}")
    if not np.isfinite(features).all():
        row = int(np.argwhere(~np.isfinite(features))[0, 0])
        raise ValueError(f"--features {path}: row {row} is not finite")
    return torch.tensor(features, dtype=torch.float32)


class SignalingGameDataset(FairseqDataset):
    """Games over the items of one split: item i is the target of game i.

    Validation and test games are drawn once (by `seed`); a training game is drawn
    afresh each epoch from a generator seeded by (seed, epoch, target), so that a run
    resumed at any epoch plays the games the uninterrupted run plays."""

    def __init__(self, features, num_candidates, seed, fixed):
        if len(features) < num_candidates:
            raise ValueError(f"--num-candidates {num_candidates}: this split has only {len(features)} items")
        self.features, self.num_candidates, self.seed, self.fixed = features, num_candidates, seed, fixed
        self.sizes = np.ones(len(features), dtype=np.int64)
        if fixed:
            rng = np.random.default_rng(seed)
            self.games = [self.draw(i, rng) for i in range(len(features))]
        else:
            self.set_epoch(1)

    def set_epoch(self, epoch):
        # Drawn here, in the main thread, not in the collater: fairseq's prefetching thread
        # collates, and with 64 generators a batch it was still busy in torch when a run
        # stopped mid-epoch (--max-update); twice in one CI run the interpreter's shutdown
        # then aborted the process ("terminate called without an active exception").
        if not self.fixed:
            self.games = [self.draw(i, np.random.default_rng((self.seed, epoch, i)))
                          for i in range(len(self.features))]

    def draw(self, target, rng):
        """The candidates of a game (target among them) and the target's position."""
        distractors = rng.choice(len(self.features) - 1, self.num_candidates - 1, replace=False)
        distractors = distractors + (distractors >= target)  # every item but the target
        position = int(rng.integers(self.num_candidates))
        return np.insert(distractors, position, target), position

    def __getitem__(self, index):
        return {"id": index}

    def __len__(self):
        return len(self.features)

    def collater(self, samples):
        if not samples:
            return {}
        ids = [s["id"] for s in samples]
        games = [self.games[i] for i in ids]
        candidates = torch.tensor(np.stack([g[0] for g in games]))
        return {"id": torch.tensor(ids), "nsentences": len(ids), "ntokens": len(ids),
                "net_input": {"target": self.features[ids], "candidates": self.features[candidates]},
                "target_position": torch.tensor([g[1] for g in games])}

    def num_tokens(self, index):
        return 1

    def size(self, index):
        return 1

    def ordered_indices(self):
        return np.random.permutation(len(self)) if not self.fixed else np.arange(len(self))


@register_task("signaling_game", dataclass=SignalingGameConfig)
class SignalingGameTask(ImageExperimentTask):
    cfg: SignalingGameConfig

    def __init__(self, cfg):
        if cfg.features:
            super(ImageExperimentTask, self).__init__(cfg)
            self.items = load_features(cfg.features)
            self.parts = deterministic_splits(len(self.items), cfg.split_seed)
            source = cfg.features
        else:
            super().__init__(cfg)
            self.items = self.levels.float() / (self.num_levels - 1)
            source = cfg.dataset
        if cfg.num_messages < 2 or cfg.num_candidates < 2:
            raise ValueError("--num-messages and --num-candidates must be at least 2")
        self.input_dim = self.items.shape[1]
        self.latent_space = Categorical(cfg.num_messages)
        logger.info(f"signaling_game {source}: {len(self.parts['train'])} train / {len(self.parts['valid'])} valid / "
                    f"{len(self.parts['test'])} test items of {self.input_dim} features; {cfg.num_messages} "
                    f"messages, {cfg.num_candidates} candidates")

    def build_split(self, split, index):
        seed = self.cfg.split_seed * 1000 + ["train", "valid", "test"].index(split)
        return SignalingGameDataset(self.items[index], self.cfg.num_candidates, seed, fixed=(split != "train"))
