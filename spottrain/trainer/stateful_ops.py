"""The TensorFlow ops whose state no checkpoint keeps (the resume probe's and fit_dataset's)."""

# TensorFlow's stateful random ops: each kernel keeps its generator's position to
# itself (a GuardedPhiloxRandom, tensorflow/core/kernels/random_op.cc and
# random_shuffle_op.cc), which no checkpoint holds, so a resumed process draws from
# the start again (or, unseeded, from anywhere): tf.random.normal/uniform/
# truncated_normal/shuffle/gamma/poisson/categorical without a stateless_ twin.
# Keras 3's keras.random ops are stateless ones fed from a SeedGenerator's variable
# (keras/src/backend/tensorflow/random.py, tf_draw_seed), which the engine saves.
STATEFUL_RANDOM_OPS = frozenset(
    {
        "RandomUniform",
        "RandomUniformInt",
        "RandomStandardNormal",
        "TruncatedNormal",
        "ParameterizedTruncatedNormal",
        "RandomShuffle",
        "RandomGamma",
        "RandomPoisson",
        "RandomPoissonV2",
        "Multinomial",
        "RandomCrop",
    }
)
