"""kolo.tensorflow's collectives: TensorFlow ops that work eagerly and inside
tf.function graphs, with gradients."""

import pickle

import numpy as np
import tensorflow as tf

import kolo._api as _api
from kolo._api import Average, Sum, Min, Max, Product, ReduceOp  # noqa: F401
from kolo._api import ProcessSet, global_process_set, _ps_id
from kolo.tensorflow._ops import ops as _ops
from kolo.tensorflow.compression import Compression


def _tensor_name(name):
    return "" if name is None else str(name)


def _op_code(op, average):
    return _api._op_code(op, average)


def _is_indexed_slices(t):
    return isinstance(t, tf.IndexedSlices)


def _native_code(tensor, compression):
    if compression is None or tensor.dtype != tf.float32:
        return 0
    return int(getattr(compression, "kolo_code", 0))


def allreduce(tensor, average=None, device_dense="", device_sparse="",
              compression=Compression.none, op=None, prescale_factor=1.0,
              postscale_factor=1.0, name=None, process_set=global_process_set,
              ignore_name_scope=False):
    """Reduces `tensor` over the ranks (default op: Average). An
    IndexedSlices is gathered instead (values and indices of every rank;
    averaged values divided by the number of ranks)."""
    code = _op_code(op, average)
    if _is_indexed_slices(tensor):
        if code not in (int(Sum), int(Average)):
            raise NotImplementedError("sparse allreduce supports only Sum and Average")
        values = allgather(tensor.values, process_set=process_set)
        indices = allgather(tensor.indices, process_set=process_set)
        scale = prescale_factor * postscale_factor
        if code == int(Average):
            scale /= _api._ps_size(process_set)
        if scale != 1.0:
            values = values * tf.cast(scale, values.dtype)
        return tf.IndexedSlices(values, indices, dense_shape=tensor.dense_shape)
    tensor = tf.convert_to_tensor(tensor)
    compressed, ctx = compression.compress(tensor) if compression else (tensor, None)
    out = _ops.kolo_allreduce(
        compressed, tensor_name=_tensor_name(name), reduce_op=code,
        prescale_factor=float(prescale_factor), postscale_factor=float(postscale_factor),
        compression=_native_code(compressed, compression),
        process_set=_ps_id(process_set))
    return compression.decompress(out, ctx) if compression else out


def grouped_allreduce(tensors, average=None, device_dense="", device_sparse="",
                      compression=Compression.none, op=None, prescale_factor=1.0,
                      postscale_factor=1.0, name=None, process_set=global_process_set,
                      ignore_name_scope=False):
    """Reduces several tensors negotiated and fused as one collective."""
    if not tensors:
        return []
    code = _op_code(op, average)
    dense = [tf.convert_to_tensor(t) for t in tensors]
    comp = [compression.compress(t) if compression else (t, None) for t in dense]
    native = 0
    if compression is not None and all(c[0].dtype == tf.float32 for c in comp):
        native = int(getattr(compression, "kolo_code", 0))
    outs = _ops.kolo_grouped_allreduce(
        [c[0] for c in comp], tensor_name=_tensor_name(name), reduce_op=code,
        prescale_factor=float(prescale_factor), postscale_factor=float(postscale_factor),
        compression=native, process_set=_ps_id(process_set))
    if compression:
        return [compression.decompress(o, c[1]) for o, c in zip(outs, comp)]
    return list(outs)


def broadcast(tensor, root_rank, name=None, ignore_name_scope=False,
              process_set=global_process_set):
    """root_rank's `tensor` on every rank."""
    return _ops.kolo_broadcast(tf.convert_to_tensor(tensor), root_rank=int(root_rank),
                               tensor_name=_tensor_name(name),
                               process_set=_ps_id(process_set))


def allgather(tensor, name=None, ignore_name_scope=False,
              process_set=global_process_set):
    """Every rank's `tensor` concatenated along the first dimension."""
    tensor = tf.convert_to_tensor(tensor)
    if tensor.shape.rank == 0:
        tensor = tf.reshape(tensor, [1])
    return _ops.kolo_allgather(tensor, tensor_name=_tensor_name(name),
                               process_set=_ps_id(process_set))


def grouped_allgather(tensors, name=None, ignore_name_scope=False,
                      process_set=global_process_set):
    base = "grouped_allgather" if name is None else name
    return [allgather(t, name=None if name is None else f"{base}.{i}",
                      process_set=process_set) for i, t in enumerate(tensors)]


def reducescatter(tensor, device_dense="", compression=Compression.none, op=Average,
                  name=None, process_set=global_process_set, ignore_name_scope=False,
                  prescale_factor=1.0, postscale_factor=1.0):
    """This rank's block of rows of the reduction of `tensor` (Sum or Average)."""
    return _ops.kolo_reducescatter(
        tf.convert_to_tensor(tensor), tensor_name=_tensor_name(name),
        reduce_op=_op_code(op, None), prescale_factor=float(prescale_factor),
        postscale_factor=float(postscale_factor), process_set=_ps_id(process_set))


def grouped_reducescatter(tensors, device_dense="", compression=Compression.none,
                          op=Average, name=None, process_set=global_process_set,
                          prescale_factor=1.0, postscale_factor=1.0):
    base = "grouped_reducescatter" if name is None else name
    return [reducescatter(t, op=op, name=None if name is None else f"{base}.{i}",
                          process_set=process_set, prescale_factor=prescale_factor,
                          postscale_factor=postscale_factor)
            for i, t in enumerate(tensors)]


def alltoall(tensor, splits=None, name=None, ignore_name_scope=False,
             process_set=global_process_set):
    """Sends splits[j] rows to rank j (even split when None); returns
    (received rows in rank order, rows received from each rank)."""
    tensor = tf.convert_to_tensor(tensor)
    if splits is None:
        splits = tf.zeros([0], dtype=tf.int64)
    else:
        splits = tf.cast(tf.convert_to_tensor(splits), tf.int64)
    out, received = _ops.kolo_alltoall(tensor, splits, tensor_name=_tensor_name(name),
                                       process_set=_ps_id(process_set))
    return out, received


def barrier(process_set=global_process_set):
    """Returns once every rank of the process set has called it. Inside
    tf.function it runs in program order with the function's other stateful
    ops; in a TF1-style graph it returns the op to run."""
    op = _ops.kolo_barrier(process_set=_ps_id(process_set))
    if tf.executing_eagerly() or tf.inside_function():
        return None
    return op


def join():
    """Declares this rank out of data; returns the last rank to join (an int
    eagerly, a tensor in a graph)."""
    last = _ops.kolo_join()
    return int(last) if tf.executing_eagerly() else last


def broadcast_variables(variables, root_rank, process_set=global_process_set,
                        inplace=False):
    """Assigns root_rank's value to each variable (tf.Variable or Keras
    variable), in the order given: every rank passes the same list."""
    assigns = []
    for i, var in enumerate(variables):
        value = broadcast(var.value if _is_keras_variable(var) else var, root_rank,
                          name=None if not tf.executing_eagerly()
                          else f"broadcast_variables.{i}",
                          process_set=process_set)
        # A tf.Variable's assign without read_value gives the assignment op
        # itself, which a TF1 graph must run (with it, a value to read).
        assigns.append(var.assign(value, read_value=False) if isinstance(var, tf.Variable)
                       else var.assign(value))
    if tf.executing_eagerly() or tf.inside_function():
        return None
    return tf.group(*[a for a in assigns if isinstance(a, (tf.Operation, tf.Tensor))])


def broadcast_(variables, root_rank, name=None, process_set=global_process_set):
    """Replaces each variable's value with root_rank's, in place; returns the
    variables."""
    del name  # each variable's broadcast is named by its position
    broadcast_variables(variables, root_rank, process_set=process_set, inplace=True)
    return variables


def broadcast_global_variables(root_rank):
    """Broadcasts every global variable of the default graph (TF1 graphs;
    in TF2 programs use broadcast_variables with the model's variables)."""
    if tf.executing_eagerly():
        raise RuntimeError("broadcast_global_variables needs a TF1 graph (tf.compat.v1); "
                           "eagerly, call broadcast_variables(model.variables, root_rank)")
    return broadcast_variables(tf.compat.v1.global_variables(), root_rank)


def _is_keras_variable(var):
    return not isinstance(var, tf.Variable) and hasattr(var, "assign") \
        and hasattr(var, "value")


def broadcast_object(obj, root_rank=0, name=None, process_set=global_process_set):
    """root_rank's picklable `obj` on every rank (eager only)."""
    base = "broadcast_object" if name is None else name
    data = np.frombuffer(pickle.dumps(obj), dtype=np.uint8) \
        if _api.rank() == root_rank else np.zeros([0], np.uint8)
    length = broadcast(tf.constant([data.size], tf.int64), root_rank,
                       name=f"{base}.len", process_set=process_set)
    buf = np.zeros([int(length[0])], np.uint8)
    if _api.rank() == root_rank:
        buf[:] = data
    out = broadcast(tf.constant(buf), root_rank, name=f"{base}.data",
                    process_set=process_set)
    return pickle.loads(out.numpy().tobytes())


def allgather_object(obj, name=None, process_set=global_process_set):
    """Every rank's picklable `obj`, in rank order (eager only)."""
    base = "allgather_object" if name is None else name
    data = np.frombuffer(pickle.dumps(obj), dtype=np.uint8)
    sizes = allgather(tf.constant([data.size], tf.int64), name=f"{base}.len",
                      process_set=process_set).numpy()
    gathered = allgather(tf.constant(data), name=f"{base}.data",
                         process_set=process_set).numpy()
    out, offset = [], 0
    for n in sizes:
        out.append(pickle.loads(gathered[offset:offset + n].tobytes()))
        offset += n
    return out


# ---------------------------------------------------------------- gradients

@tf.RegisterGradient("KoloAllreduce")
def _allreduce_grad(op, grad):
    code = op.get_attr("reduce_op")
    if code not in (int(Sum), int(Average)):
        raise NotImplementedError("kolo allreduce has a gradient only for Sum and Average")
    return _ops.kolo_allreduce(grad, reduce_op=code,
                               prescale_factor=op.get_attr("prescale_factor"),
                               postscale_factor=op.get_attr("postscale_factor"),
                               process_set=op.get_attr("process_set"))


@tf.RegisterGradient("KoloGroupedAllreduce")
def _grouped_allreduce_grad(op, *grads):
    code = op.get_attr("reduce_op")
    if code not in (int(Sum), int(Average)):
        raise NotImplementedError("kolo allreduce has a gradient only for Sum and Average")
    return _ops.kolo_grouped_allreduce(list(grads), reduce_op=code,
                                       prescale_factor=op.get_attr("prescale_factor"),
                                       postscale_factor=op.get_attr("postscale_factor"),
                                       process_set=op.get_attr("process_set"))


@tf.RegisterGradient("KoloBroadcast")
def _broadcast_grad(op, grad):
    ps = op.get_attr("process_set")
    reduced = _ops.kolo_allreduce(grad, reduce_op=int(Sum), process_set=ps)
    if _api.rank() != op.get_attr("root_rank"):
        return reduced * 0
    return reduced


@tf.RegisterGradient("KoloAllgather")
def _allgather_grad(op, grad):
    ps = op.get_attr("process_set")
    grad = _ops.kolo_allreduce(grad, reduce_op=int(Sum), process_set=ps)
    rows = tf.shape(op.inputs[0], out_type=tf.int64)[:1]
    all_rows = _ops.kolo_allgather(rows, process_set=ps)
    my_pos = _api._ps_rank(ps)
    # The number of pieces is the set's size: a graph cannot infer it from
    # all_rows, whose length is unknown until run time.
    return tf.split(grad, all_rows, num=_api._ps_size(ps), axis=0)[my_pos]


@tf.RegisterGradient("KoloReducescatter")
def _reducescatter_grad(op, grad):
    ps = op.get_attr("process_set")
    out = _ops.kolo_allgather(grad, process_set=ps)
    scale = op.get_attr("prescale_factor") * op.get_attr("postscale_factor")
    if op.get_attr("reduce_op") == int(Average):
        scale /= _api._ps_size(ps)
    return out * tf.cast(scale, out.dtype) if scale != 1.0 else out


@tf.RegisterGradient("KoloAlltoall")
def _alltoall_grad(op, grad, _grad_splits):
    back, _ = _ops.kolo_alltoall(grad, op.outputs[1], process_set=op.get_attr("process_set"))
    return [back, None]
