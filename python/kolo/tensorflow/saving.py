"""load_model: a saved Keras model whose optimizer trains across the ranks
(horovod.tensorflow.keras.load_model), of the program's Keras (Keras 3, or
tf_keras under TF_USE_LEGACY_KERAS)."""

from kolo.tensorflow._keras import keras
from kolo.tensorflow.compression import Compression
from kolo.tensorflow.gradient_aggregation import DistributedOptimizer


def _is_built(opt):
    if hasattr(opt, "_create_all_weights"):  # Keras 2's legacy family
        return bool(opt.weights)
    return bool(getattr(opt, "built", getattr(opt, "_built", False)))


def _copy_state(opt, dist, variables):
    """Gives `dist` (a distributed copy of `opt`) the state of `opt`."""
    if hasattr(opt, "_create_all_weights"):
        dist._create_all_weights(variables)
        mine, saved = dist.weights, opt.weights
        if len(saved) == 1 < len(mine):
            # Its slots were not restored (tf_keras saves a legacy
            # optimizer's slots in .h5 files, not in .keras ones).
            mine = mine[:1]
    else:
        dist.build(variables)
        mine, saved = list(dist.variables), list(opt.variables)
    if len(mine) != len(saved):
        raise ValueError(f"load_model: the restored optimizer has {len(saved)} variables, "
                         f"its distributed copy {len(mine)}")
    for m, s in zip(mine, saved):
        m.assign(s)


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
    if _is_built(opt):
        _copy_state(opt, dist, model.trainable_variables)
    model.optimizer = dist
    return model
