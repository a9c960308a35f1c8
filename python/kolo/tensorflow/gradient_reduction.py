"""Reducing a list of gradients over the ranks, as DistributedGradientTape
and every DistributedOptimizer do (the op, compression, scaling and process
set come in `kw`), and the keys of local variables."""

import tensorflow as tf

from kolo import _shared
from kolo._api import Average, global_process_set
from kolo.tensorflow import functions as F
from kolo.tensorflow.compression import Compression


def _densify(grad, var):
    """An IndexedSlices gradient as a dense tensor; one without dense_shape
    takes its variable's shape (TensorFlow cannot convert it alone)."""
    if grad.dense_shape is None:
        if var is None:
            raise ValueError("an IndexedSlices gradient without dense_shape can be made dense "
                             "only with its variable: pass variables=")
        grad = tf.IndexedSlices(grad.values, grad.indices, tf.shape(var, out_type=tf.int64))
    return tf.convert_to_tensor(grad)


def allreduce_gradients(grads, op=Average, compression=Compression.none,
                        sparse_as_dense=False, prescale_factor=1.0,
                        postscale_factor=1.0, process_set=global_process_set,
                        name=None, variables=None):
    """Reduces a list of gradients (None entries stay None): dense ones as one
    grouped collective, IndexedSlices gathered (or densified first when
    sparse_as_dense, with the shape of their variable in `variables` where
    they carry none)."""
    grads = list(grads)
    out = list(grads)
    dense_idx, sparse_idx = [], []
    for i, g in enumerate(grads):
        if g is None:
            continue
        if isinstance(g, tf.IndexedSlices):
            if sparse_as_dense:
                out[i] = _densify(g, None if variables is None else variables[i])
                dense_idx.append(i)
            else:
                sparse_idx.append(i)
        else:
            dense_idx.append(i)
    if dense_idx:
        reduced = F.grouped_allreduce([out[i] for i in dense_idx], op=op,
                                      compression=compression,
                                      prescale_factor=prescale_factor,
                                      postscale_factor=postscale_factor,
                                      process_set=process_set, name=name)
        for i, r in zip(dense_idx, reduced):
            out[i] = r
    if sparse_idx:
        gathered = F.grouped_allreduce([grads[i] for i in sparse_idx], op=op,
                                       prescale_factor=prescale_factor,
                                       postscale_factor=postscale_factor,
                                       process_set=process_set,
                                       name=None if name is None else f"{name}.sparse")
        for i, g in zip(sparse_idx, gathered):
            out[i] = g
    return out


def _ref(var):
    """A hashable key for a variable: a tf.Variable's ref(); a Keras 3
    variable has none, and stands for its tf.Variable (`.value`), which is
    what a GradientTape sees when a model is called."""
    if not hasattr(var, "ref") and isinstance(getattr(var, "value", None), tf.Variable):
        var = var.value
    return var.ref() if hasattr(var, "ref") else id(var)


def _reduce_except_local(grads, variables, local, scale_local, kw):
    """`grads` of `variables` reduced over the ranks, except those of the
    variables whose keys are in `local`: kept as they are, or divided by the
    set's size with `scale_local` (Horovod's rule, so that a local layer
    learns at the rate the averaged layers do)."""
    grads = list(grads)
    if not local:
        return allreduce_gradients(grads, variables=variables, **kw)
    shared = [i for i, v in enumerate(variables) if _ref(v) not in local]
    out = list(grads)
    for i, r in zip(shared, allreduce_gradients([grads[i] for i in shared],
                                                variables=[variables[i] for i in shared],
                                                **kw)):
        out[i] = r
    if scale_local:
        n = _shared.ps_size(kw.get("process_set"))
        for i, v in enumerate(variables):
            g = out[i]
            if _ref(v) not in local or g is None:
                continue
            if isinstance(g, tf.IndexedSlices):
                out[i] = tf.IndexedSlices(g.values / n, g.indices, g.dense_shape)
            else:
                out[i] = g / n
    return out
