"""What the three latent-variable experiments share: their images (digits by default,
MNIST-format with a data directory), the deterministic split, and the latent space
the criterion's estimator works in (``latent_space``, set by each task)."""

import logging
from dataclasses import dataclass, field

from fairseq.dataclass import ChoiceEnum, FairseqDataclass
from fairseq.tasks import FairseqTask

from .images import deterministic_splits, load_images

logger = logging.getLogger(__name__)


@dataclass
class ImageExperimentConfig(FairseqDataclass):
    # Optional positional (argparse_const gives it nargs="?"); "." rather than "" because
    # fairseq-train lists DATA_DIR for extra validation sets even when a task reads none.
    data: str = field(default=".", metadata={"help": "directory of --dataset mnist: the full MNIST's IDX files "
                                                     "(../shared/data/images/mnist-full, or data_prep/mnist.sh; "
                                                     "official test split, 10,000 of train for valid) or "
                                                     "../shared/data/images/mnist (its 10,000 test images, "
                                                     "split 80/10/10); not read for digits",
                                             "argparse_const": "."})
    dataset: ChoiceEnum(["digits", "mnist"]) = field(
        default="digits", metadata={"help": "digits: scikit-learn's bundled 8x8 digits (no download); mnist: DATA_DIR"})
    split_seed: int = field(default=0, metadata={"help": "seed of the deterministic split (80/10/10, or the "
                                                                 "validation images of an official training half)"})


class ImageExperimentTask(FairseqTask):
    latent_space = None

    def __init__(self, cfg):
        super().__init__(cfg)
        images = load_images(cfg.dataset, cfg.data)
        self.levels, self.labels, self.num_levels = images.levels, images.labels, images.num_levels
        self.parts = deterministic_splits(len(self.levels), cfg.split_seed, images.official_test)
        self.input_dim = self.levels.shape[1]
        self.num_classes = int(self.labels.max()) + 1

    @classmethod
    def setup_task(cls, cfg, **kwargs):
        return cls(cfg)

    def load_dataset(self, split, epoch=1, combine=False, **kwargs):
        if split not in self.parts:
            raise KeyError(f"{self.cfg._name} has splits {sorted(self.parts)}, not {split!r}")
        self.datasets[split] = self.build_split(split, self.parts[split])

    def build_split(self, split, index):
        raise NotImplementedError

    def max_positions(self):
        return None

    @property
    def source_dictionary(self):
        return None

    @property
    def target_dictionary(self):
        return None
