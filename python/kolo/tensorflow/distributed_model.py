"""DistributedModel: a Keras model that trains with kolo."""

from kolo.tensorflow.callbacks import BroadcastGlobalVariablesCallback
from kolo.tensorflow.gradient_aggregation import DistributedOptimizer


class _DistributedModelMixin:
    _kolo_distributed_model = True

    def compile(self, optimizer="rmsprop", *args, **kwargs):
        from kolo.tensorflow._keras import keras

        opt = keras.optimizers.get(optimizer)
        return super().compile(DistributedOptimizer(opt), *args, **kwargs)

    def fit(self, *args, callbacks=None, **kwargs):
        callbacks = list(callbacks or [])
        if not any(isinstance(c, BroadcastGlobalVariablesCallback) for c in callbacks):
            callbacks.insert(0, BroadcastGlobalVariablesCallback(self._kolo_root_rank))
        return super().fit(*args, callbacks=callbacks, **kwargs)


def DistributedModel(model, root_rank=0):
    """Makes `model` (changed in place, and returned) train across the ranks:
    compile() wraps a plain optimizer in DistributedOptimizer, and fit()
    starts from root_rank's variables (BroadcastGlobalVariablesCallback)
    unless the caller passes that callback already."""
    if getattr(model, "_kolo_distributed_model", False):
        return model
    base = type(model)
    model.__class__ = type(base.__name__, (_DistributedModelMixin, base),
                           {"__module__": base.__module__})
    model._kolo_root_rank = root_rank
    return model
