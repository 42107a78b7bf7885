"""scikit-learn's digits as a real, locally prepared tfds dataset (no download).

Importing this module registers the builder ``digits_sklearn`` with tfds, the
same way a user's own tfds dataset module does.
"""

from __future__ import annotations

import numpy as np
import tensorflow_datasets as tfds


class DigitsSklearn(tfds.core.GeneratorBasedBuilder):
    """The 1,797 8x8 UCI digits bundled with scikit-learn; train and validation splits."""

    VERSION = tfds.core.Version("1.0.0")

    def _info(self):
        return self.dataset_info_from_configs(
            features=tfds.features.FeaturesDict(
                {
                    "image": tfds.features.Image(shape=(8, 8, 1)),
                    "label": tfds.features.ClassLabel(names=[str(i) for i in range(10)]),
                }
            ),
            supervised_keys=("image", "label"),
        )

    def _split_generators(self, dl_manager):
        from sklearn.datasets import load_digits

        d = load_digits()
        images = np.clip(d.images * (255 / 16), 0, 255).astype(np.uint8)[..., None]
        return {
            "train": self._generate_examples(images[:1600], d.target[:1600]),
            "validation": self._generate_examples(images[1600:], d.target[1600:]),
        }

    def _generate_examples(self, images, labels):
        for i, (image, label) in enumerate(zip(images, labels, strict=True)):
            yield i, {"image": image, "label": int(label)}
