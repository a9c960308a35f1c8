"""Keras callbacks for training with kolo.tensorflow, of the program's Keras
(tf.keras: Keras 3, or tf_keras under TF_USE_LEGACY_KERAS)."""

import warnings

import numpy as np
import tensorflow as tf

from kolo import _api
from kolo.tensorflow import functions as F
from kolo.tensorflow._keras import LEGACY, keras
from kolo.tensorflow.gradient_reduction import _ref


def _optimizer_variables(optimizer):
    if optimizer is None:
        return []
    v = getattr(optimizer, "variables", [])
    return list(v() if callable(v) else v)


class BroadcastGlobalVariablesCallback(keras.callbacks.Callback):
    """Copies root_rank's model and optimizer variables to every rank when
    training starts (Keras 3, which builds the optimizer first), or after
    the first batch (Keras 2, whose optimizer makes its slots in that
    batch), so all ranks go on from the same state. `local_variables`
    (variables, or a Keras 3 variable's tf.Variable) are not broadcast:
    each rank keeps its own value."""

    def __init__(self, root_rank=0, device="", local_variables=None, process_set=None):
        super().__init__()
        self.root_rank = root_rank
        self.process_set = process_set or _api.global_process_set
        self.broadcast_done = False
        self._local = set()
        for var in local_variables or []:
            self.register_local_var(var)

    def register_local_var(self, var):
        """Leaves `var` out of the broadcast: each rank keeps its own value."""
        self._local.add(_ref(var))

    def _broadcast(self):
        if self.broadcast_done:
            return
        variables = list(self.model.variables) + _optimizer_variables(
            getattr(self.model, "optimizer", None))
        variables = [v for v in variables if _ref(v) not in self._local]
        F.broadcast_variables(variables, self.root_rank, process_set=self.process_set)
        self.broadcast_done = True

    def on_train_begin(self, logs=None):
        # Keras 3 builds the model and optimizer before the first batch, so
        # every variable exists here; a model built later is caught below.
        if self.model.built and not LEGACY:
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


def _set_learning_rate(optimizer, lr):
    lr_var = optimizer.learning_rate
    if hasattr(lr_var, "assign"):
        lr_var.assign(lr)
    else:
        optimizer.learning_rate = lr


def _momentum_correction_note(optimizer, wanted):
    """Keras optimizers (Keras 3, and Keras 2's new ones) read `momentum`
    as a constant when the train step is traced, so Horovod's momentum
    correction (momentum scaled by the learning rate's change for one step)
    is not applied: say so once."""
    momentum = getattr(optimizer, "momentum", 0.0)
    if callable(momentum) or hasattr(momentum, "numpy"):
        momentum = np.asarray(momentum() if callable(momentum) else momentum)
    if wanted and float(momentum or 0.0) != 0.0:
        warnings.warn("momentum_correction is not applied: Keras optimizers fix momentum "
                      "when the training step is traced; the learning rate still follows "
                      "the schedule", stacklevel=3)


class LearningRateScheduleCallback(keras.callbacks.Callback):
    """Sets the optimizer's learning rate to initial_lr * multiplier(epoch)
    from start_epoch until end_epoch (exclusive; None: to the end).

    multiplier: a number, or a function of the epoch. staircase=True changes
    the rate at the start of each epoch; staircase=False every batch, with a
    fractional epoch (batch / steps_per_epoch; Keras' own step count unless
    given)."""

    def __init__(self, initial_lr, multiplier, start_epoch=0, end_epoch=None, staircase=True,
                 momentum_correction=True, steps_per_epoch=None):
        super().__init__()
        self.initial_lr = float(initial_lr)
        self.multiplier = multiplier if callable(multiplier) else (lambda epoch: multiplier)
        self.start_epoch = start_epoch
        self.end_epoch = end_epoch
        self.staircase = staircase
        self.momentum_correction = momentum_correction
        self.steps_per_epoch = steps_per_epoch
        self.current_epoch = None

    def _in_range(self, epoch):
        return epoch >= self.start_epoch and (self.end_epoch is None or epoch < self.end_epoch)

    def _adjust(self, epoch):
        if self._in_range(epoch):
            _set_learning_rate(self.model.optimizer,
                               self.initial_lr * float(self.multiplier(epoch)))

    def on_train_begin(self, logs=None):
        _momentum_correction_note(self.model.optimizer, self.momentum_correction)
        if self.steps_per_epoch is None:
            self.steps_per_epoch = (self.params or {}).get("steps")
        if not self.staircase and not self.steps_per_epoch:
            raise ValueError("staircase=False needs steps_per_epoch (fit() without a known "
                             "number of steps per epoch does not give it)")

    def on_epoch_begin(self, epoch, logs=None):
        self.current_epoch = epoch
        if self.staircase:
            self._adjust(epoch)

    def on_train_batch_begin(self, batch, logs=None):
        if not self.staircase and self.current_epoch is not None:
            self._adjust(self.current_epoch + float(batch) / self.steps_per_epoch)

    def on_epoch_end(self, epoch, logs=None):
        if logs is not None:
            logs["lr"] = float(np.asarray(self.model.optimizer.learning_rate))


class LearningRateWarmupCallback(LearningRateScheduleCallback):
    """Ramps the learning rate from initial_lr / size to initial_lr over
    warmup_epochs, batch by batch (the large-batch warmup of Goyal et al.):
    lr = initial_lr / size * (epoch * (size - 1) / warmup_epochs + 1)."""

    def __init__(self, initial_lr, warmup_epochs=5, momentum_correction=True,
                 steps_per_epoch=None, verbose=0):
        size = _api.size()

        def multiplier(epoch):
            return 1.0 / size * (epoch * (size - 1) / warmup_epochs + 1)

        super().__init__(initial_lr, multiplier, start_epoch=0, end_epoch=warmup_epochs,
                         staircase=False, momentum_correction=momentum_correction,
                         steps_per_epoch=steps_per_epoch)
        self.warmup_epochs = warmup_epochs
        self.verbose = verbose

    def on_epoch_end(self, epoch, logs=None):
        if epoch == self.warmup_epochs - 1:
            # The ramp ends exactly at initial_lr.
            _set_learning_rate(self.model.optimizer, self.initial_lr)
            if self.verbose and _api.rank() == 0:
                print(f"\nEpoch {epoch + 1}: finished the learning rate warmup to "
                      f"{self.initial_lr:g}.")
        super().on_epoch_end(epoch, logs)


class BestModelCheckpoint(keras.callbacks.ModelCheckpoint):
    """Saves the model whenever `monitor` improves, on rank 0 only (the
    other ranks hold the same weights). `filepath` may be given later, as
    an attribute, before training starts."""

    def __init__(self, monitor="val_loss", verbose=0, mode="auto", save_freq="epoch",
                 filepath=None):
        # Keras checks the file name's extension here; a path set later
        # must end in .keras or .h5 as well.
        super().__init__(filepath=filepath or "unset.keras", monitor=monitor, verbose=verbose,
                         save_best_only=True, save_weights_only=False, mode=mode,
                         save_freq=save_freq)
        self.filepath = filepath

    def on_train_begin(self, logs=None):
        if not self.filepath:
            raise ValueError("BestModelCheckpoint needs filepath (give it, or set "
                             ".filepath before training)")
        super().on_train_begin(logs)

    def _save_model(self, *args, **kwargs):
        if _api.rank() == 0:
            super()._save_model(*args, **kwargs)
