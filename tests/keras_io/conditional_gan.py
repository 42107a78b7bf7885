"""keras-io examples/generative/conditional_gan.py (Keras 3): a GAN conditioned on the digit.

What it exercises: an own ``train_step`` with two optimizers that its own
``compile()`` override stores as attributes (built lazily, at their first update),
two losses logged as ``g_loss`` and ``d_loss`` (no ``"loss"``), random draws from a
``SeedGenerator`` of the model, no ``call()`` and no ``get_config()``.
"""

import keras
import numpy as np
import tensorflow as tf
from keras import layers, ops

from spottrain import KerasTask

num_channels = 1
num_classes = 10
image_size = 28
latent_dim = 128

generator_in_channels = latent_dim + num_classes
discriminator_in_channels = num_channels + num_classes


def make_discriminator():
    return keras.Sequential(
        [
            keras.layers.InputLayer((28, 28, discriminator_in_channels)),
            layers.Conv2D(64, (3, 3), strides=(2, 2), padding="same"),
            layers.LeakyReLU(negative_slope=0.2),
            layers.Conv2D(128, (3, 3), strides=(2, 2), padding="same"),
            layers.LeakyReLU(negative_slope=0.2),
            layers.GlobalMaxPooling2D(),
            layers.Dense(1),
        ],
        name="discriminator",
    )


def make_generator():
    return keras.Sequential(
        [
            keras.layers.InputLayer((generator_in_channels,)),
            layers.Dense(7 * 7 * generator_in_channels),
            layers.LeakyReLU(negative_slope=0.2),
            layers.Reshape((7, 7, generator_in_channels)),
            layers.Conv2DTranspose(128, (4, 4), strides=(2, 2), padding="same"),
            layers.LeakyReLU(negative_slope=0.2),
            layers.Conv2DTranspose(128, (4, 4), strides=(2, 2), padding="same"),
            layers.LeakyReLU(negative_slope=0.2),
            layers.Conv2D(1, (7, 7), padding="same", activation="sigmoid"),
        ],
        name="generator",
    )


class ConditionalGAN(keras.Model):
    def __init__(self, discriminator, generator, latent_dim):
        super().__init__()
        self.discriminator = discriminator
        self.generator = generator
        self.latent_dim = latent_dim
        self.seed_generator = keras.random.SeedGenerator(1337)
        self.gen_loss_tracker = keras.metrics.Mean(name="generator_loss")
        self.disc_loss_tracker = keras.metrics.Mean(name="discriminator_loss")

    @property
    def metrics(self):
        return [self.gen_loss_tracker, self.disc_loss_tracker]

    def compile(self, d_optimizer, g_optimizer, loss_fn):
        super().compile()
        self.d_optimizer = d_optimizer
        self.g_optimizer = g_optimizer
        self.loss_fn = loss_fn

    def train_step(self, data):
        real_images, one_hot_labels = data

        # The labels as extra image channels, for the discriminator.
        image_one_hot_labels = one_hot_labels[:, :, None, None]
        image_one_hot_labels = ops.repeat(image_one_hot_labels, repeats=[image_size * image_size])
        image_one_hot_labels = ops.reshape(
            image_one_hot_labels, (-1, image_size, image_size, num_classes)
        )

        # Latent points with the labels, for the generator.
        batch_size = ops.shape(real_images)[0]
        random_latent_vectors = keras.random.normal(
            shape=(batch_size, self.latent_dim), seed=self.seed_generator
        )
        random_vector_labels = ops.concatenate([random_latent_vectors, one_hot_labels], axis=1)

        generated_images = self.generator(random_vector_labels)

        fake_image_and_labels = ops.concatenate([generated_images, image_one_hot_labels], -1)
        real_image_and_labels = ops.concatenate([real_images, image_one_hot_labels], -1)
        combined_images = ops.concatenate([fake_image_and_labels, real_image_and_labels], axis=0)

        labels = ops.concatenate([ops.ones((batch_size, 1)), ops.zeros((batch_size, 1))], axis=0)

        # The discriminator's step.
        with tf.GradientTape() as tape:
            predictions = self.discriminator(combined_images)
            d_loss = self.loss_fn(labels, predictions)
        grads = tape.gradient(d_loss, self.discriminator.trainable_weights)
        self.d_optimizer.apply_gradients(zip(grads, self.discriminator.trainable_weights))

        random_latent_vectors = keras.random.normal(
            shape=(batch_size, self.latent_dim), seed=self.seed_generator
        )
        random_vector_labels = ops.concatenate([random_latent_vectors, one_hot_labels], axis=1)

        misleading_labels = ops.zeros((batch_size, 1))

        # The generator's step (the discriminator's weights stay).
        with tf.GradientTape() as tape:
            fake_images = self.generator(random_vector_labels)
            fake_image_and_labels = ops.concatenate([fake_images, image_one_hot_labels], -1)
            predictions = self.discriminator(fake_image_and_labels)
            g_loss = self.loss_fn(misleading_labels, predictions)
        grads = tape.gradient(g_loss, self.generator.trainable_weights)
        self.g_optimizer.apply_gradients(zip(grads, self.generator.trainable_weights))

        self.gen_loss_tracker.update_state(g_loss)
        self.disc_loss_tracker.update_state(d_loss)
        return {
            "g_loss": self.gen_loss_tracker.result(),
            "d_loss": self.disc_loss_tracker.result(),
        }


def compiled_model():
    cond_gan = ConditionalGAN(
        discriminator=make_discriminator(), generator=make_generator(), latent_dim=latent_dim
    )
    cond_gan.compile(
        d_optimizer=keras.optimizers.Adam(learning_rate=0.0003),
        g_optimizer=keras.optimizers.Adam(learning_rate=0.0003),
        loss_fn=keras.losses.BinaryCrossentropy(from_logits=True),
    )
    return cond_gan


def fit_data():
    """The example's ``dataset``: digits and one-hot labels, batched (its shuffle seeded:
    an unseeded one gives other batches on every read, and --check says so)."""
    rng = np.random.default_rng(6)
    all_digits = rng.random((256, 28, 28, 1)).astype("float32")
    all_labels = keras.utils.to_categorical(rng.integers(0, 10, 256), 10)
    dataset = tf.data.Dataset.from_tensor_slices((all_digits, all_labels))
    return dataset.shuffle(buffer_size=1024, seed=0).batch(64)


# -- the port --
class Task(KerasTask):
    def model(self):
        return compiled_model()

    def examples(self):
        return fit_data()


PORT_LINES = 6
