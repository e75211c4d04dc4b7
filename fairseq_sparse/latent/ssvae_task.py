"""``ssvae``: semi-supervised VAE (Kingma et al. 2014, M2) on digit images, the class a
latent variable wherever the label is hidden (Correia et al., NeurIPS 2020, Sec. 5.1).

Images as in :mod:`.image_experiment` (digits by default; ``--dataset mnist
DATA_DIR``), pixels scaled to [0, 1].  In train, ``--labelled-fraction`` (10%) of
the images keep their label, chosen per class.  ``--labelled-only`` trains on those
alone: the paper's warm start (its code trains 100 epochs at ``--lr 1e-3``, then
the whole objective from that checkpoint, ``--finetune-from-model``), which gives
sparsemax's classifier a start before its support shrinks to one class.
"""

import logging
from dataclasses import dataclass, field

import torch
from fairseq.tasks import register_task

from .image_task import ImageExperimentConfig, ImageExperimentTask
from .images import ImageDataset
from .spaces import Categorical

logger = logging.getLogger(__name__)


@dataclass
class SSVAEConfig(ImageExperimentConfig):
    labelled_fraction: float = field(default=0.1, metadata={"help": "fraction of training images whose label "
                                                                    "is kept (per class)"})
    labelled_only: bool = field(default=False, metadata={
        "help": "train on the labelled images alone (the paper's warm start; then train the whole objective "
                "with --finetune-from-model)"})


@register_task("ssvae", dataclass=SSVAEConfig)
class SSVAETask(ImageExperimentTask):
    cfg: SSVAEConfig

    def __init__(self, cfg):
        if not 0 < cfg.labelled_fraction <= 1:  # also NaN
            raise ValueError(f"--labelled-fraction {cfg.labelled_fraction}: must lie in (0, 1] (the fraction of "
                             "each class's training images whose label is kept)")
        super().__init__(cfg)
        self.latent_space = Categorical(self.num_classes)
        self.images = self.levels.float() / (self.num_levels - 1)
        generator = torch.Generator().manual_seed(cfg.split_seed)
        self.labelled = self.keep_labels(self.labels[self.parts["train"]], cfg.labelled_fraction, generator)
        logger.info(f"ssvae {cfg.dataset}: {len(self.parts['train'])} train ({int(self.labelled.sum())} "
                    f"labelled{', trained on alone' if cfg.labelled_only else ''}) / {len(self.parts['valid'])} "
                    f"valid / {len(self.parts['test'])} test images of {self.input_dim} pixels")

    @staticmethod
    def keep_labels(labels, fraction, generator):
        keep = torch.zeros(len(labels), dtype=torch.bool)
        for c in labels.unique():
            members = (labels == c).nonzero().squeeze(1)
            n = max(1, round(fraction * len(members)))
            keep[members[torch.randperm(len(members), generator=generator)[:n]]] = True
        return keep

    def build_split(self, split, index):
        labelled = self.labelled if split == "train" else torch.ones(len(index), dtype=torch.bool)
        if split == "train" and self.cfg.labelled_only:
            index, labelled = index[self.labelled], labelled[self.labelled]
        return ImageDataset(self.images[index], self.labels[index], labelled, shuffle=(split == "train"))
