"""kolo.tensorflow's collectives: TensorFlow ops that work eagerly and inside
tf.function graphs, with gradients."""

import itertools

import numpy as np
import tensorflow as tf

import kolo._api as _api
from kolo import _pickling
from kolo import _shared
from kolo._api import Average, Sum, Min, Max, Product, ReduceOp  # noqa: F401
from kolo._api import ProcessSet, global_process_set
from kolo._shared import ps_id
from kolo.tensorflow._ops import ops as _ops
from kolo.tensorflow.compression import Compression, native_code


def _tensor_name(name):
    return "" if name is None else str(name)


def _op_code(op, average):
    return _shared.op_code(op, average)


def _is_indexed_slices(t):
    return isinstance(t, tf.IndexedSlices)


def _compressed(compression, tensors):
    """`tensors` ready for an allreduce with `compression`: (inputs, ctxs,
    wire code). Kolo's own fp16/bf16 on float32 tensors only (a group: on
    all of them) leave the rounding to kolod; else `compression.compress`
    runs here and its tensors travel as they are."""
    code = native_code(compression)
    if code and all(t.dtype == tf.float32 for t in tensors):
        return list(tensors), [None] * len(tensors), code
    if not compression:
        return list(tensors), [None] * len(tensors), 0
    comp = [compression.compress(t) for t in tensors]
    return [c[0] for c in comp], [c[1] for c in comp], 0


def _decompressed(compression, outs, ctxs, code):
    if code or not compression:
        return list(outs)
    return [compression.decompress(o, c) for o, c in zip(outs, ctxs)]


def _compress_here(compression, tensor):
    """`compression` for a collective kolod does not compress (reducescatter):
    it runs here, float32 included."""
    return compression.compress(tensor) if compression else (tensor, None)


def allreduce(tensor, average=None, device_dense="", device_sparse="",
              compression=Compression.none, op=None, prescale_factor=1.0,
              postscale_factor=1.0, name=None, process_set=global_process_set,
              ignore_name_scope=False):
    """Reduces `tensor` over the ranks (default op: Average). An
    IndexedSlices is gathered instead (values and indices of every rank;
    averaged values divided by the number of ranks)."""
    code = _op_code(op, average)
    if _is_indexed_slices(tensor):
        return _gather_slices([tensor], code, prescale_factor, postscale_factor, process_set,
                              name)[0]
    (compressed,), ctxs, wire = _compressed(compression, [tf.convert_to_tensor(tensor)])
    out = _ops.kolo_allreduce(
        compressed, tensor_name=_tensor_name(name), reduce_op=code,
        prescale_factor=float(prescale_factor), postscale_factor=float(postscale_factor),
        compression=wire, process_set=ps_id(process_set))
    return _decompressed(compression, [out], ctxs, wire)[0]


def _gather_slices(slices, code, prescale_factor, postscale_factor, process_set, name):
    """IndexedSlices reduced as Horovod reduces them: every rank's values and
    indices gathered (one grouped allgather for all of them), the values
    scaled. Average divides the values by the number of ranks as Horovod
    does, in TensorFlow's true division (integer values come back as
    floats: float32 from 8 and 16 bits, float64 from 32 and 64); the indices
    stay as they are, of any integer type. dense_shape is kept as given, None
    included."""
    if code not in (int(Sum), int(Average)):
        raise NotImplementedError("sparse allreduce supports only Sum and Average")
    parts = grouped_allgather([p for s in slices for p in (s.values, s.indices)], name=name,
                              process_set=process_set)
    ranks = _shared.ps_size(process_set) if code == int(Average) else 0
    scale = prescale_factor * postscale_factor
    out = []
    for i, s in enumerate(slices):
        values, indices = parts[2 * i], parts[2 * i + 1]
        out.append(tf.IndexedSlices(_scaled_values(values, ranks, scale), indices,
                                    dense_shape=s.dense_shape))
    return out


def _scaled_values(values, ranks, scale):
    """Gathered slice values divided by `ranks` (0: not averaged), then
    times `scale` (integers scaled in float64 and cast back)."""
    if ranks:
        values = values / tf.cast(ranks, values.dtype)
    if scale == 1.0:
        return values
    if values.dtype.is_integer:
        return tf.cast(tf.cast(values, tf.float64) * scale, values.dtype)
    return values * tf.cast(scale, values.dtype)


def grouped_allreduce(tensors, average=None, device_dense="", device_sparse="",
                      compression=Compression.none, op=None, prescale_factor=1.0,
                      postscale_factor=1.0, name=None, process_set=global_process_set,
                      ignore_name_scope=False):
    """Reduces several tensors negotiated and fused as one collective. Its
    IndexedSlices are gathered as allreduce gathers one (all of them in one
    grouped allgather)."""
    if not tensors:
        return []
    code = _op_code(op, average)
    sparse = [i for i, t in enumerate(tensors) if _is_indexed_slices(t)]
    if sparse:
        out = list(tensors)
        dense_idx = [i for i in range(len(tensors)) if i not in set(sparse)]
        gathered = _gather_slices([tensors[i] for i in sparse], code, prescale_factor,
                                  postscale_factor, process_set,
                                  None if name is None else f"{name}.sparse")
        reduced = grouped_allreduce([tensors[i] for i in dense_idx], average, device_dense,
                                    device_sparse, compression, op, prescale_factor,
                                    postscale_factor, name, process_set)
        for i, r in zip(sparse + dense_idx, gathered + reduced):
            out[i] = r
        return out
    inputs, ctxs, wire = _compressed(compression, [tf.convert_to_tensor(t) for t in tensors])
    outs = _ops.kolo_grouped_allreduce(
        inputs, tensor_name=_tensor_name(name), reduce_op=code,
        prescale_factor=float(prescale_factor), postscale_factor=float(postscale_factor),
        compression=wire, process_set=ps_id(process_set))
    return _decompressed(compression, outs, ctxs, wire)


def broadcast(tensor, root_rank, name=None, ignore_name_scope=False,
              process_set=global_process_set):
    """root_rank's `tensor` on every rank."""
    return _ops.kolo_broadcast(tf.convert_to_tensor(tensor), root_rank=int(root_rank),
                               tensor_name=_tensor_name(name),
                               process_set=ps_id(process_set))


def allgather(tensor, name=None, ignore_name_scope=False,
              process_set=global_process_set):
    """Every rank's `tensor` concatenated along the first dimension."""
    tensor = tf.convert_to_tensor(tensor)
    if tensor.shape.rank == 0:
        tensor = tf.reshape(tensor, [1])
    return _ops.kolo_allgather(tensor, tensor_name=_tensor_name(name),
                               process_set=ps_id(process_set))


def grouped_allgather(tensors, name=None, ignore_name_scope=False,
                      process_set=global_process_set):
    """Gathers several tensors negotiated and fused as one collective: none
    runs before every one is ready on every rank."""
    if not tensors:
        return []
    dense = [tf.convert_to_tensor(t) for t in tensors]
    dense = [tf.reshape(t, [1]) if t.shape.rank == 0 else t for t in dense]
    return list(_ops.kolo_grouped_allgather(dense, tensor_name=_tensor_name(name),
                                            process_set=ps_id(process_set)))


def reducescatter(tensor, device_dense="", compression=Compression.none, op=Average,
                  name=None, process_set=global_process_set, ignore_name_scope=False,
                  prescale_factor=1.0, postscale_factor=1.0):
    """This rank's block of rows of the reduction of `tensor` (Sum or
    Average), compressed on the way as `compression` says."""
    compressed, ctx = _compress_here(compression, tf.convert_to_tensor(tensor))
    out = _ops.kolo_reducescatter(
        compressed, tensor_name=_tensor_name(name),
        reduce_op=_op_code(op, None), prescale_factor=float(prescale_factor),
        postscale_factor=float(postscale_factor), process_set=ps_id(process_set))
    return compression.decompress(out, ctx) if compression else out


def grouped_reducescatter(tensors, device_dense="", compression=Compression.none,
                          op=Average, name=None, process_set=global_process_set,
                          prescale_factor=1.0, postscale_factor=1.0):
    """Reduces and scatters several tensors negotiated and fused as one
    collective, compressed on the way as `compression` says."""
    if not tensors:
        return []
    comp = [_compress_here(compression, tf.convert_to_tensor(t)) for t in tensors]
    outs = _ops.kolo_grouped_reducescatter(
        [c[0] for c in comp], tensor_name=_tensor_name(name),
        reduce_op=_op_code(op, None), prescale_factor=float(prescale_factor),
        postscale_factor=float(postscale_factor), process_set=ps_id(process_set))
    if compression:
        return [compression.decompress(o, c[1]) for o, c in zip(outs, comp)]
    return list(outs)


def alltoall(tensor, splits=None, name=None, ignore_name_scope=False,
             process_set=global_process_set):
    """Sends splits[j] rows to rank j (even split when None). Returns the
    received rows in rank order and, when `splits` was given, also the rows
    received from each rank (Horovod's contract). Splits that are not one
    per rank of the set, or that do not sum to the first dimension, raise
    tf.errors.InvalidArgumentError on the rank that passed them, saying
    why (kolod refuses the collective, so the other ranks' calls of that
    name fail too and the name can be used again); splits of a non-integer
    dtype raise ValueError before anything is submitted."""
    tensor = tf.convert_to_tensor(tensor)
    if splits is None:
        sp = tf.zeros([0], dtype=tf.int64)
    else:
        sp = tf.convert_to_tensor(splits)
        if not sp.dtype.is_integer:  # raised before any rank could submit it, as Horovod's
            raise ValueError(f"alltoall splits must be integers, not {sp.dtype.name}")
        sp = tf.cast(sp, tf.int64)
    out, received = _ops.kolo_alltoall(tensor, sp, tensor_name=_tensor_name(name),
                                       process_set=ps_id(process_set),
                                       set_size=_shared.ps_size(process_set))
    return (out, received) if splits is not None else out


def barrier(process_set=global_process_set):
    """Returns once every rank of the process set has called it. Inside
    tf.function it runs in program order with the function's other stateful
    ops; in a TF1-style graph it returns the op to run."""
    op = _ops.kolo_barrier(process_set=ps_id(process_set))
    if tf.executing_eagerly() or tf.inside_function():
        return None
    return op


def join():
    """Declares this rank out of data; returns the last rank to join, as an
    int32 scalar tensor (Horovod's contract)."""
    return _ops.kolo_join()


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
    variables' new values (in a graph, read after the assignments)."""
    del name  # each variable's broadcast is named by its position
    assigned = broadcast_variables(variables, root_rank, process_set=process_set, inplace=True)
    deps = [assigned] if assigned is not None else []
    with tf.control_dependencies(deps):
        return [tf.identity(var.value if _is_keras_variable(var) else var.read_value())
                for var in variables]


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


def _object_values(tensors, session, what):
    """The values of `tensors`: eagerly their own, in a TF1 graph from
    `session` (or the default session) running them."""
    if tf.executing_eagerly():
        return [t.numpy() for t in tensors]
    if tf.inside_function():
        raise RuntimeError(f"{what} moves Python objects: call it eagerly or in a TF1 graph "
                           "with a session, not inside tf.function")
    sess = session or tf.compat.v1.get_default_session()
    if sess is None:
        raise ValueError(f"{what} in a TF1 graph needs session= (or a default session)")
    return sess.run(list(tensors))


def broadcast_object(obj, root_rank=0, session=None, name=None,
                     process_set=global_process_set):
    """root_rank's `obj` (any picklable object; cloudpickle where installed)
    on every rank; the other ranks' `obj` is ignored (None will do). Eagerly,
    or in a TF1 graph through `session` (default: the default session)."""
    base = _shared.collective_name("broadcast_object", name, process_set)
    is_root = _api.rank() == root_rank  # a global rank
    data = np.frombuffer(_pickling.dumps(obj), dtype=np.uint8) if is_root \
        else np.zeros([0], np.uint8)
    length, = _object_values([broadcast(tf.constant([data.size], tf.int64), root_rank,
                                        name=f"{base}.len", process_set=process_set)],
                             session, "broadcast_object")
    buf = data if is_root else np.zeros([int(length[0])], np.uint8)
    out, = _object_values([broadcast(tf.constant(buf), root_rank, name=f"{base}.data",
                                     process_set=process_set)], session, "broadcast_object")
    return obj if is_root else _pickling.loads(out.tobytes())


def broadcast_object_fn(root_rank=0, session=None, name=None, process_set=global_process_set):
    """A function that broadcasts its argument from root_rank each time it is
    called (broadcast_object with these arguments)."""
    base = _shared.collective_name("broadcast_object_fn", name, process_set)
    calls = itertools.count()

    def _broadcast(obj):
        return broadcast_object(obj, root_rank, session, name=f"{base}.{next(calls)}",
                                process_set=process_set)

    return _broadcast


def allgather_object(obj, session=None, name=None, process_set=global_process_set):
    """Every rank's picklable `obj`, as a list in rank order. Eagerly, or in a
    TF1 graph through `session` (default: the default session)."""
    base = _shared.collective_name("allgather_object", name, process_set)
    data = np.frombuffer(_pickling.dumps(obj), dtype=np.uint8)
    sizes, gathered = _object_values(
        grouped_allgather([tf.constant([data.size], tf.int64), tf.constant(data)], name=base,
                          process_set=process_set), session, "allgather_object")
    out, offset = [], 0
    for n in sizes:
        out.append(_pickling.loads(gathered[offset:offset + n].tobytes()))
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


# The gradients below scale as Horovod 0.28's TensorFlow module does: a
# broadcast's and an allgather's output gradient is averaged over the ranks;
# a reducescatter's is gathered (times the set's size for Sum).

@tf.RegisterGradient("KoloBroadcast")
def _broadcast_grad(op, grad):
    ps = op.get_attr("process_set")
    reduced = _ops.kolo_allreduce(grad, reduce_op=int(Average), process_set=ps)
    if _api.rank() != op.get_attr("root_rank"):
        return reduced * 0
    return reduced


def _dense_grads(op, grads):
    """Output gradients of a grouped op, zeros for an output without one."""
    return [tf.zeros_like(out) if g is None else g for g, out in zip(grads, op.outputs)]


def _own_rows(reduced, inp, ps):
    """This rank's rows of `reduced` (an allgather's output gradient reduced
    over the ranks), whose input was `inp`."""
    rows = tf.shape(inp, out_type=tf.int64)[:1]
    all_rows = _ops.kolo_allgather(rows, process_set=ps)
    # The number of pieces is the set's size: a graph cannot infer it from
    # all_rows, whose length is unknown until run time.
    return tf.split(reduced, all_rows, num=_shared.ps_size(ps), axis=0)[_shared.ps_rank(ps)]


@tf.RegisterGradient("KoloAllgather")
def _allgather_grad(op, grad):
    ps = op.get_attr("process_set")
    return _own_rows(_ops.kolo_allreduce(grad, reduce_op=int(Average), process_set=ps),
                     op.inputs[0], ps)


@tf.RegisterGradient("KoloGroupedAllgather")
def _grouped_allgather_grad(op, *grads):
    ps = op.get_attr("process_set")
    reduced = _ops.kolo_grouped_allreduce(_dense_grads(op, grads), reduce_op=int(Average),
                                          process_set=ps)
    return [_own_rows(g, x, ps) for g, x in zip(reduced, op.inputs)]


def _scattered_grad(gathered, op):
    """A reducescatter's input gradient from the gathered output gradient:
    times the set's size for Sum, and by the forward pass's scale factors."""
    scale = op.get_attr("prescale_factor") * op.get_attr("postscale_factor")
    if op.get_attr("reduce_op") == int(Sum):
        scale *= _shared.ps_size(op.get_attr("process_set"))
    return gathered * tf.cast(scale, gathered.dtype) if scale != 1.0 else gathered


@tf.RegisterGradient("KoloReducescatter")
def _reducescatter_grad(op, grad):
    return _scattered_grad(_ops.kolo_allgather(grad, process_set=op.get_attr("process_set")), op)


@tf.RegisterGradient("KoloGroupedReducescatter")
def _grouped_reducescatter_grad(op, *grads):
    gathered = _ops.kolo_grouped_allgather(_dense_grads(op, grads),
                                           process_set=op.get_attr("process_set"))
    return [_scattered_grad(g, op) for g in gathered]


@tf.RegisterGradient("KoloAlltoall")
def _alltoall_grad(op, grad, _grad_splits):
    back, _ = _ops.kolo_alltoall(grad, op.outputs[1], process_set=op.get_attr("process_set"))
    return [back, None]
