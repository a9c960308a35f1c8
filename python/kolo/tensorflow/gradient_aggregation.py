"""Averaging gradients over the ranks: DistributedGradientTape and
DistributedOptimizer (Keras 3, Keras 2 (tf_keras) and tf.compat.v1.train
optimizers)."""

import tensorflow as tf

from kolo._api import Average, global_process_set
from kolo.tensorflow._keras import is_layer, keras2_optimizer_kind
from kolo.tensorflow.compression import Compression
from kolo.tensorflow.gradient_reduction import (  # noqa: F401
    _reduce_except_local, _ref, allreduce_gradients,
)


def _local_vars_of(local_layers):
    if local_layers is None:
        return []
    layers = local_layers if isinstance(local_layers, (list, tuple)) else [local_layers]
    for layer in layers:
        if not is_layer(layer):
            raise ValueError(f"local_layers takes Keras layers, not {type(layer).__name__}")
    return [v for layer in layers for v in layer.trainable_weights]


class DistributedGradientTape:
    """Wraps a tf.GradientTape: gradient() returns gradients reduced over the
    ranks (averaged by default). Every other attribute is the tape's."""

    def __init__(self, gradtape, device_dense="", device_sparse="",
                 compression=Compression.none, sparse_as_dense=False, op=Average,
                 gradient_predivide_factor=1.0, num_groups=0, groups=None,
                 process_set=global_process_set, scale_local_gradients=True,
                 **kwargs):
        self._tape = gradtape
        self._kw = dict(op=op, compression=compression, sparse_as_dense=sparse_as_dense,
                        process_set=process_set)
        self._local = set()
        self._scale_local = bool(scale_local_gradients)
        if gradient_predivide_factor != 1.0:
            if op != Average:
                raise ValueError("gradient_predivide_factor needs op=Average")
            self._kw["prescale_factor"] = 1.0 / gradient_predivide_factor
            self._kw["postscale_factor"] = gradient_predivide_factor

    def __getattr__(self, attr):
        return getattr(self._tape, attr)

    def __enter__(self):
        self._tape.__enter__()
        return self

    def __exit__(self, *exc):
        return self._tape.__exit__(*exc)

    def register_local_source(self, source):
        """Keeps `source`'s gradient local: never reduced over the ranks
        (divided by their number when scale_local_gradients)."""
        self._local.add(_ref(source))

    def gradient(self, target, sources, output_gradients=None, use_generic_names=False,
                 **kwargs):
        # use_generic_names only shortens Horovod's op names; Kolo names the
        # group itself, so there is nothing to shorten.
        del use_generic_names
        grads = self._tape.gradient(target, sources, output_gradients, **kwargs)
        reduced = _reduce_except_local(tf.nest.flatten(grads), tf.nest.flatten(sources),
                                       self._local, self._scale_local, self._kw)
        return tf.nest.pack_sequence_as(grads, reduced)


def PartialDistributedGradientTape(gradtape, device_dense="", device_sparse="",
                                   compression=Compression.none, sparse_as_dense=False,
                                   op=Average, gradient_predivide_factor=1.0, num_groups=0,
                                   groups=None, process_set=global_process_set,
                                   local_layers=None, scale_local_gradients=True):
    """A DistributedGradientTape that keeps the gradients of `local_layers`
    (Keras layers) local to each rank."""
    tape = DistributedGradientTape(gradtape, device_dense, device_sparse, compression,
                                   sparse_as_dense, op, gradient_predivide_factor, num_groups,
                                   groups, process_set, scale_local_gradients)
    for var in _local_vars_of(local_layers):
        tape.register_local_source(var)
    return tape


class _DistributedOptimizerMixin:
    """Methods put in front of a Keras 3 optimizer's class: apply() reduces
    the gradients over the ranks before the update, so model.fit, a custom
    train_step and apply_gradients all train on the ranks' average."""

    _kolo_distributed = True

    def register_local_var(self, var):
        """Keeps `var`'s gradient local: never reduced over the ranks
        (divided by their number when scale_local_gradients)."""
        self._kolo_local.add(_ref(var))

    def _kolo_reduce(self, grads, trainable_variables):
        if trainable_variables is None:
            trainable_variables = self._trainable_variables
        return _reduce_except_local(grads, list(trainable_variables), self._kolo_local,
                                    self._kolo_scale_local, self._kolo_kwargs)

    def apply(self, grads, trainable_variables=None):
        grads = list(grads)
        if self._kolo_passes > 1:
            return self._kolo_accumulate(grads, trainable_variables)
        return super().apply(self._kolo_reduce(grads, trainable_variables), trainable_variables)

    def _kolo_accumulate(self, grads, trainable_variables):
        # Sums backward_passes_per_step passes locally, then reduces and applies.
        if trainable_variables is None:
            trainable_variables = self._trainable_variables
        if not hasattr(self, "_kolo_acc"):
            self._kolo_acc = [tf.Variable(tf.zeros_like(v), trainable=False)
                              for v in trainable_variables]
            self._kolo_count = tf.Variable(0, dtype=tf.int64, trainable=False)
        for a, g in zip(self._kolo_acc, grads):
            if g is not None:
                a.assign_add(tf.convert_to_tensor(g))
        self._kolo_count.assign_add(1)

        def _apply():
            scale = 1.0 / self._kolo_passes if self._kolo_average_acc else 1.0
            acc = [a * scale for a in self._kolo_acc]
            reduced = self._kolo_reduce(acc, trainable_variables)
            super(_DistributedOptimizerMixin, self).apply(reduced, trainable_variables)
            for a in self._kolo_acc:
                a.assign(tf.zeros_like(a))
            return tf.constant(True)

        tf.cond(self._kolo_count % self._kolo_passes == 0, _apply, lambda: tf.constant(False))


class _LegacyDistributedOptimizer(tf.compat.v1.train.Optimizer):
    """A tf.compat.v1.train.Optimizer whose compute_gradients returns the
    gradients reduced over the ranks (TF1 graphs and sessions); everything
    else is the wrapped optimizer's."""

    _kolo_distributed = True

    def __init__(self, optimizer, name, use_locking, kwargs):
        super().__init__(name=name or f"Distributed{type(optimizer).__name__}",
                         use_locking=use_locking)
        self._optimizer = optimizer
        self._kolo_kwargs = kwargs

    def compute_gradients(self, *args, **kwargs):
        pairs = self._optimizer.compute_gradients(*args, **kwargs)
        if not pairs:
            return pairs
        grads, variables = zip(*pairs)
        return list(zip(allreduce_gradients(grads, variables=list(variables),
                                            **self._kolo_kwargs), variables))

    def apply_gradients(self, *args, **kwargs):
        return self._optimizer.apply_gradients(*args, **kwargs)

    def get_slot(self, *args, **kwargs):
        return self._optimizer.get_slot(*args, **kwargs)

    def get_slot_names(self, *args, **kwargs):
        return self._optimizer.get_slot_names(*args, **kwargs)

    def variables(self, *args, **kwargs):
        return self._optimizer.variables(*args, **kwargs)


def DistributedOptimizer(optimizer, name=None, use_locking=False, device_dense="",
                         device_sparse="", compression=Compression.none,
                         sparse_as_dense=False, backward_passes_per_step=1,
                         op=Average, gradient_predivide_factor=1.0,
                         average_aggregated_gradients=False, num_groups=0,
                         groups=None, process_set=global_process_set,
                         scale_local_gradients=True, **kwargs):
    """For a Keras 3 `optimizer`: a copy of it (same class, same config)
    whose updates use gradients reduced over the ranks (averaged by default).
    For a Keras 2 (tf_keras) one, legacy or new: a copy that reduces them
    where it computes them (keras2_optimizer). For a
    tf.compat.v1.train.Optimizer (TF1 graphs): a wrapper whose
    compute_gradients (and so minimize) reduces them."""
    if getattr(optimizer, "_kolo_distributed", False):
        return optimizer
    import keras

    kw = dict(op=op, compression=compression, sparse_as_dense=sparse_as_dense,
              process_set=process_set)
    if gradient_predivide_factor != 1.0:
        if op != Average:
            raise ValueError("gradient_predivide_factor needs op=Average")
        kw["prescale_factor"] = 1.0 / gradient_predivide_factor
        kw["postscale_factor"] = gradient_predivide_factor
    if isinstance(optimizer, tf.compat.v1.train.Optimizer):
        if int(backward_passes_per_step) != 1:
            raise NotImplementedError(
                "backward_passes_per_step > 1 is implemented for Keras optimizers; with a "
                "tf.compat.v1 optimizer, accumulate the gradients in the graph and apply them "
                "every N steps")
        return _LegacyDistributedOptimizer(optimizer, name, use_locking, kw)
    if keras2_optimizer_kind(optimizer):
        from kolo.tensorflow.keras2_optimizer import Keras2DistributedMixin as mixin
    elif isinstance(optimizer, keras.optimizers.Optimizer):
        mixin = _DistributedOptimizerMixin
    else:
        raise TypeError(
            f"DistributedOptimizer wraps a Keras 3, a Keras 2 (tf_keras) or a "
            f"tf.compat.v1.train optimizer, not {type(optimizer).__name__}; for a custom loop "
            f"use DistributedGradientTape")
    # A copy of the optimizer's own class (same name, same config), with
    # the mixin's methods in front.
    base = type(optimizer)
    cls = type(base.__name__, (mixin, base), {"__module__": base.__module__})
    dist = cls.from_config(optimizer.get_config())
    dist._kolo_kwargs = kw
    dist._kolo_local = set()
    dist._kolo_scale_local = bool(scale_local_gradients)
    dist._kolo_passes = int(backward_passes_per_step)
    dist._kolo_average_acc = bool(average_aggregated_gradients)
    return dist

def PartialDistributedOptimizer(optimizer, name=None, use_locking=False, device_dense="",
                                device_sparse="", compression=Compression.none,
                                sparse_as_dense=False, backward_passes_per_step=1, op=Average,
                                gradient_predivide_factor=1.0, average_aggregated_gradients=False,
                                groups=None, process_set=global_process_set, local_layers=None,
                                scale_local_gradients=True):
    """A DistributedOptimizer (Keras 3 or Keras 2) that keeps the gradients
    of `local_layers` (Keras layers) local to each rank."""
    dist = DistributedOptimizer(optimizer, name, use_locking, device_dense, device_sparse,
                                compression, sparse_as_dense, backward_passes_per_step, op,
                                gradient_predivide_factor, average_aggregated_gradients,
                                groups=groups, process_set=process_set,
                                scale_local_gradients=scale_local_gradients)
    if not hasattr(dist, "register_local_var"):
        raise TypeError("PartialDistributedOptimizer wraps a Keras 3 or a Keras 2 (tf_keras) "
                        "optimizer")
    for var in _local_vars_of(local_layers):
        dist.register_local_var(var)
    return dist


class LocalGradientAggregationHelper:
    """Horovod's internal helper for backward_passes_per_step in TF1 graphs.
    Kolo aggregates inside DistributedOptimizer instead."""

    def __init__(self, *args, **kwargs):
        raise NotImplementedError(
            "Kolo aggregates local gradients inside DistributedOptimizer: pass "
            "backward_passes_per_step=N to it (Keras optimizers)")
