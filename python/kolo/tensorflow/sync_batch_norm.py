"""SyncBatchNormalization: Keras batch normalization whose training-time
statistics cover the batches of every rank (horovod.tensorflow's
SyncBatchNormalization), of the program's Keras (Keras 3, or tf_keras under
TF_USE_LEGACY_KERAS)."""

import tensorflow as tf

from kolo._api import Sum, global_process_set
from kolo.tensorflow import functions as F
from kolo.tensorflow._keras import LEGACY, keras


def _weights(inputs, mask):
    """Each element's weight: 1, or its mask entry (a mask has the leading
    dimensions of `inputs`)."""
    if mask is None:
        return tf.ones_like(inputs)
    weights = tf.cast(mask, inputs.dtype)
    for _ in range(inputs.shape.rank - weights.shape.rank):
        weights = tf.expand_dims(weights, -1)
    return tf.broadcast_to(weights, tf.shape(inputs))


def _global_moments(inputs, axes, mask, name, process_set):
    """The mean and variance over `axes` of the inputs of every rank (kept
    dimensions): each rank's sums and element counts are allreduced (Sum),
    then the squared deviations from the global mean (two passes, which
    stays accurate where E[x^2] - E[x]^2 would cancel). The allreduces are
    differentiable, so gradients flow through the global statistics."""
    weights = _weights(inputs, mask)
    local_sum = tf.reduce_sum(inputs * weights, axes, keepdims=True)
    local_count = tf.reduce_sum(weights, axes, keepdims=True)
    shape = tf.shape(local_sum)
    totals = F.allreduce(tf.concat([tf.reshape(local_sum, [-1]),
                                    tf.reshape(local_count, [-1])], 0),
                         op=Sum, name=f"{name}.sync_bn.mean", process_set=process_set)
    k = tf.size(local_sum)
    count = tf.reshape(tf.maximum(totals[k:], 1.0), shape)
    mean = tf.reshape(totals[:k], shape) / count
    local_sq = tf.reduce_sum(tf.square(inputs - mean) * weights, axes, keepdims=True)
    sq = F.allreduce(local_sq, op=Sum, name=f"{name}.sync_bn.variance",
                     process_set=process_set)
    return mean, sq / count


class SyncBatchNormalization(keras.layers.BatchNormalization):
    """BatchNormalization with the batch mean and variance of the whole job.
    Inference uses the moving statistics as usual. `fused` is Horovod's
    argument: only False (the global statistics are not a fused kernel's);
    Keras 2 gets fused=False, Keras 3 has no such argument."""

    def __init__(self, *args, fused=False, process_set=global_process_set, **kwargs):
        if fused is not False:
            raise ValueError("SyncBatchNormalization does not support fused=True: its "
                             "statistics are reduced over the ranks")
        kwargs.pop("synchronized", None)  # Keras' own cross-replica flag
        if LEGACY:
            kwargs["fused"] = False
        super().__init__(*args, **kwargs)
        self.process_set = process_set

    def _moments(self, inputs, *args, **kwargs):
        if LEGACY:
            # tf_keras: _moments(inputs, reduction_axes, keep_dims, mask=None)
            # also zeroes the statistics of an empty batch; the statistics
            # themselves come from _calculate_mean_and_var below.
            return super()._moments(inputs, *args, **kwargs)
        mask = args[0] if args else kwargs.get("mask")
        mean, var = _global_moments(inputs, self._reduction_axes, mask, self.name,
                                    self.process_set)
        return tf.squeeze(mean, self._reduction_axes), tf.squeeze(var, self._reduction_axes)

    def _calculate_mean_and_var(self, inputs, reduction_axes, keep_dims, mask=None):
        mean, var = _global_moments(inputs, reduction_axes, mask, self.name, self.process_set)
        if keep_dims:
            return mean, var
        return tf.squeeze(mean, reduction_axes), tf.squeeze(var, reduction_axes)
