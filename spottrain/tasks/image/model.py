"""Model construction: a pretrained backbone plus a new classification head."""

from __future__ import annotations

import keras
from keras import layers

from spottrain import exits
from spottrain.tasks.image.settings import ImageSettings


@keras.saving.register_keras_serializable(package="spottrain")
class Preprocess(layers.Layer):
    """Maps raw 0..255 pixels to what the backbone was trained on.

    Living inside the model, it travels with the saved model, so serving takes
    the same raw images the training pipeline does.
    """

    def __init__(self, mode: str, **kwargs):
        super().__init__(**kwargs)
        self.mode = mode

    def call(self, x):
        """Casts and normalises a batch of raw images."""
        x = keras.ops.cast(x, self.compute_dtype)
        if self.mode == "caffe":  # ResNet50: BGR, ImageNet mean subtracted
            x = x[..., ::-1] - keras.ops.convert_to_tensor(
                [103.939, 116.779, 123.68], dtype=self.compute_dtype
            )
            return x
        if self.mode == "tf":  # MobileNetV2: [-1, 1]
            return x / 127.5 - 1.0
        return x / 255.0

    def get_config(self):
        """Serialises the mode so ``keras.models.load_model`` rebuilds the layer."""
        return {**super().get_config(), "mode": self.mode}


# keras.utils.get_file raises a bare Exception starting with this when the download
# fails (keras 3.15 keras/src/utils/file_utils.py L392-399).
_KERAS_FETCH_FAILURE = "URL fetch failure"


def _backbone(cfg: ImageSettings):
    """Returns (backbone model or None, preprocessing mode).

    Raises:
        TrainerExit: UNAVAILABLE when the pretrained weights cannot be
            downloaded (a network problem another attempt may not have).
    """
    try:
        return _build_backbone(cfg)
    except Exception as e:
        if not str(e).startswith(_KERAS_FETCH_FAILURE):
            raise
        raise exits.TrainerExit(
            exits.UNAVAILABLE,
            f"could not download the {cfg.backbone} --weights {cfg.weights} ({e}); "
            "--weights none trains from scratch, or bake ~/.keras/models into the image",
        ) from None


def _build_backbone(cfg: ImageSettings):
    weights = None if cfg.weights == "none" else cfg.weights
    shape = (cfg.image_size, cfg.image_size, 3)
    if cfg.backbone == "resnet50":
        return keras.applications.ResNet50(
            include_top=False, weights=weights, input_shape=shape
        ), "caffe"
    if cfg.backbone == "mobilenet_v2":
        return keras.applications.MobileNetV2(
            include_top=False, weights=weights, input_shape=shape
        ), "tf"
    return None, "unit"


def build_model(cfg: ImageSettings, num_classes: int) -> keras.Model:
    """ResNet50 (default) or a smaller backbone, with a fresh softmax-free head.

    The head returns logits in float32 even under mixed precision, which keeps
    the loss numerically stable.
    """
    inputs = keras.Input((cfg.image_size, cfg.image_size, 3), dtype="uint8", name="image")
    backbone, mode = _backbone(cfg)
    x = Preprocess(mode, name="preprocess")(inputs)
    if backbone is None:  # a small CNN for CPU tests and tiny images
        for filters in (32, 64):
            x = layers.Conv2D(filters, 3, padding="same", activation="relu")(x)
            x = layers.MaxPooling2D()(x)
        x = layers.Flatten()(x)
        x = layers.Dense(128, activation="relu")(x)
    else:
        backbone.trainable = cfg.fine_tune
        # training=False keeps BatchNorm statistics frozen: the usual choice for
        # transfer learning, and it makes fine-tuning from here stable too.
        x = backbone(x, training=False)
        x = layers.GlobalAveragePooling2D()(x)
    x = layers.Dropout(0.2)(x)
    outputs = layers.Dense(num_classes, dtype="float32", name="logits")(x)
    return keras.Model(inputs, outputs, name=f"{cfg.backbone}_classifier")
