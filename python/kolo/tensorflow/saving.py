"""load_model: a saved Keras model whose optimizer trains across the ranks
(horovod.tensorflow.keras.load_model)."""

import keras

from kolo.tensorflow.compression import Compression
from kolo.tensorflow.gradient_aggregation import DistributedOptimizer


def load_model(filepath, custom_optimizers=None, custom_objects=None,
               compression=Compression.none):
    """keras.models.load_model(filepath), with the model's optimizer made a
    DistributedOptimizer that keeps the saved optimizer's state (iteration
    count, momentum and other slots). custom_optimizers: optimizer classes
    the file names besides Keras' own; custom_objects as Keras takes them."""
    objects = dict(custom_objects or {})
    for cls in custom_optimizers or []:
        objects[cls.__name__] = cls
    model = keras.models.load_model(filepath, custom_objects=objects)
    opt = getattr(model, "optimizer", None)
    if opt is None or getattr(opt, "_kolo_distributed", False):
        return model
    dist = DistributedOptimizer(opt, compression=compression)
    if opt.built:
        dist.build(model.trainable_variables)
        if len(dist.variables) != len(opt.variables):
            raise ValueError(f"load_model: the restored optimizer has {len(opt.variables)} "
                             f"variables, its distributed copy {len(dist.variables)}")
        for mine, saved in zip(dist.variables, opt.variables):
            mine.assign(saved)
    model.optimizer = dist
    return model
