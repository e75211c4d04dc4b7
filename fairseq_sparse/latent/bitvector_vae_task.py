"""``bitvector_vae``: a VAE whose latent is D bits with a uniform prior (Correia et al.,
NeurIPS 2020, Sec. 5.3), on images as in :mod:`.image_experiment`.  The model
reads grey levels (17 for the digits, 256 for MNIST-format sets) and predicts a
categorical over them per pixel, so bits per dimension are comparable with the
paper's 8-bit Fashion-MNIST numbers only in shape."""

import logging
from dataclasses import dataclass, field

import torch
from fairseq.tasks import register_task

from .image_task import ImageExperimentConfig, ImageExperimentTask
from .images import ImageDataset
from .spaces import BitVector

logger = logging.getLogger(__name__)


@dataclass
class BitVectorVAEConfig(ImageExperimentConfig):
    latent_bits: int = field(default=32, metadata={"help": "D, the number of latent bits (the paper: 32 and 128)"})


@register_task("bitvector_vae", dataclass=BitVectorVAEConfig)
class BitVectorVAETask(ImageExperimentTask):
    cfg: BitVectorVAEConfig

    def __init__(self, cfg):
        super().__init__(cfg)
        if cfg.latent_bits < 1:
            raise ValueError(f"--latent-bits must be positive, not {cfg.latent_bits}")
        self.latent_space = BitVector(cfg.latent_bits)
        logger.info(f"bitvector_vae {cfg.dataset}: {len(self.parts['train'])} train / {len(self.parts['valid'])} "
                    f"valid / {len(self.parts['test'])} test images of {self.input_dim} pixels, "
                    f"{self.num_levels} grey levels; {cfg.latent_bits} latent bits")

    def train_intensity_mean(self):
        """Each pixel's mean intensity (grey level scaled to [0, 1]) over the training images."""
        return self.levels[self.parts["train"]].double().mean(0).float() / (self.num_levels - 1)

    def build_split(self, split, index):
        return ImageDataset(self.levels[index], self.labels[index], torch.ones(len(index), dtype=torch.bool),
                            shuffle=(split == "train"))
