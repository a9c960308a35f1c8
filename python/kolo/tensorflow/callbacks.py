"""Keras callbacks for training with kolo.tensorflow."""

import keras
import numpy as np
import tensorflow as tf

from kolo import _api
from kolo.tensorflow import functions as F


def _optimizer_variables(optimizer):
    if optimizer is None:
        return []
    v = getattr(optimizer, "variables", [])
    return list(v() if callable(v) else v)


class BroadcastGlobalVariablesCallback(keras.callbacks.Callback):
    """Copies root_rank's model and optimizer variables to every rank when
    training starts, so all ranks begin from the same state."""

    def __init__(self, root_rank=0, device="", process_set=None):
        super().__init__()
        self.root_rank = root_rank
        self.process_set = process_set or _api.global_process_set
        self.broadcast_done = False

    def _broadcast(self):
        if self.broadcast_done:
            return
        variables = list(self.model.variables) + _optimizer_variables(
            getattr(self.model, "optimizer", None))
        F.broadcast_variables(variables, self.root_rank, process_set=self.process_set)
        self.broadcast_done = True

    def on_train_begin(self, logs=None):
        # Keras 3 builds the model and optimizer before the first batch, so
        # every variable exists here; a model built later is caught below.
        if self.model.built:
            self._broadcast()

    def on_train_batch_end(self, batch, logs=None):
        self._broadcast()


class MetricAverageCallback(keras.callbacks.Callback):
    """Replaces each epoch's metrics in `logs` with their average over the
    ranks. Put it before callbacks that read the metrics."""

    def __init__(self, device="", process_set=None):
        super().__init__()
        self.process_set = process_set or _api.global_process_set

    def on_epoch_end(self, epoch, logs=None):
        if not logs:
            return
        for key in sorted(logs):
            value = logs[key]
            try:
                x = np.asarray(value, dtype=np.float64)
            except (TypeError, ValueError):
                continue
            if x.shape != ():
                continue
            avg = F.allreduce(tf.constant(x), op=_api.Average,
                              name=f"metric_average.{key}", process_set=self.process_set)
            logs[key] = float(avg.numpy())
