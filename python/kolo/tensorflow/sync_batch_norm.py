"""SyncBatchNormalization: Keras batch normalization whose training-time
statistics cover the batches of every rank (horovod.tensorflow's
SyncBatchNormalization)."""

import keras
import tensorflow as tf

from kolo._api import Sum, global_process_set
from kolo.tensorflow import functions as F


class SyncBatchNormalization(keras.layers.BatchNormalization):
    """keras.layers.BatchNormalization with the batch mean and variance of
    the whole job: each rank's per-channel sums and element counts are
    allreduced (Sum), then the squared deviations from the global mean (two
    passes, which stays accurate where E[x^2] - E[x]^2 would cancel). The
    allreduces are differentiable, so gradients flow through the global
    statistics. Inference uses the moving statistics as usual."""

    def __init__(self, *args, process_set=global_process_set, **kwargs):
        kwargs.pop("synchronized", None)  # Keras' own cross-replica flag
        super().__init__(*args, **kwargs)
        self.process_set = process_set

    def _moments(self, inputs, mask):
        axes = self._reduction_axes
        if mask is None:
            weights = tf.ones_like(inputs)
        else:
            weights = tf.cast(tf.broadcast_to(tf.expand_dims(mask, -1), tf.shape(inputs)),
                              inputs.dtype)
        local_sum = tf.reduce_sum(inputs * weights, axes)
        local_count = tf.reduce_sum(weights, axes)
        totals = F.allreduce(tf.concat([local_sum, local_count], 0), op=Sum,
                             name=f"{self.name}.sync_bn.mean", process_set=self.process_set)
        channels = tf.shape(local_sum)[0]
        count = tf.maximum(totals[channels:], 1.0)
        mean = totals[:channels] / count
        local_sq = tf.reduce_sum(tf.square(inputs - mean) * weights, axes)
        sq = F.allreduce(local_sq, op=Sum, name=f"{self.name}.sync_bn.variance",
                         process_set=self.process_set)
        return mean, sq / count
