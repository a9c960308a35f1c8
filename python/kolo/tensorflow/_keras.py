"""Which Keras a program trains with, and the optimizer families of each.

TensorFlow's `tf.keras` is Keras 3 unless TF_USE_LEGACY_KERAS is set before
TensorFlow is imported; then it is the `tf_keras` package (Keras 2). Kolo's
layers and callbacks derive from `tf.keras`, so they are of the program's
Keras either way; optimizers are told apart by their class."""

import sys

import tensorflow as tf

# The Keras of tf.keras: Keras 3, or tf_keras under TF_USE_LEGACY_KERAS.
keras = tf.keras
LEGACY = keras.__name__.startswith("tf_keras")


def keras2_optimizer_kind(optimizer):
    """"legacy" for a tf_keras.optimizers.legacy optimizer (OptimizerV2),
    "new" for a tf_keras.optimizers one, None for anything else (a Keras 3
    optimizer among them). tf_keras is looked at only when it is loaded: an
    optimizer of it cannot exist otherwise."""
    tfk = sys.modules.get("tf_keras")
    if tfk is None:
        return None
    if isinstance(optimizer, tfk.optimizers.legacy.Optimizer):
        return "legacy"
    if isinstance(optimizer, tfk.optimizers.Optimizer):
        return "new"
    return None


def is_layer(obj):
    """Whether `obj` is a layer of Keras 3 or of tf_keras."""
    import keras as keras3

    if isinstance(obj, keras3.layers.Layer):
        return True
    tfk = sys.modules.get("tf_keras")
    return tfk is not None and isinstance(obj, tfk.layers.Layer)
