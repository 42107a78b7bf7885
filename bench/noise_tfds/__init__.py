"""A tfds dataset of incompressible images (random-noise PNGs), for bench/tfds_memory.py."""

import os

import numpy as np
import tensorflow_datasets as tfds

N, SIZE = int(os.environ.get("NOISE_N", 2400)), 160


class NoiseImages(tfds.core.GeneratorBasedBuilder):
    VERSION = tfds.core.Version("1.0.0")

    def _info(self):
        return self.dataset_info_from_configs(
            features=tfds.features.FeaturesDict(
                {
                    "image": tfds.features.Image(shape=(SIZE, SIZE, 3)),
                    "label": tfds.features.ClassLabel(names=["a", "b"]),
                }
            ),
            supervised_keys=("image", "label"),
        )

    def _split_generators(self, dl_manager):
        return {
            "train": self._generate_examples(0, N),
            "validation": self._generate_examples(1, 64),
        }

    def _generate_examples(self, seed, n):
        rng = np.random.default_rng(seed)
        for i in range(n):
            yield (
                i,
                {"image": rng.integers(0, 256, (SIZE, SIZE, 3), dtype=np.uint8), "label": i % 2},
            )
