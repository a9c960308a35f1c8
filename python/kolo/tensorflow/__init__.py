"""kolo.tensorflow: Kolo's collectives for TensorFlow 2 and Keras 3, as a
drop-in for programs written against the horovod.tensorflow API.

    import kolo.tensorflow as hvd
    hvd.init()
    opt = hvd.DistributedOptimizer(keras.optimizers.Adam(0.001 * hvd.size()))
    model.compile(optimizer=opt, ...)
    model.fit(..., callbacks=[hvd.BroadcastGlobalVariablesCallback(0)])

The collectives are TensorFlow ops (CPU tensors) usable eagerly and inside
tf.function. A failed collective raises TensorFlow's error class of the same
code (e.g. tf.errors.FailedPreconditionError when ranks disagree), whose
message is kolod's.
"""

import tensorflow as tf

import kolo._api as _api
from kolo._native import core as _core
from kolo._api import (  # noqa: F401
    Average, Sum, Min, Max, Product, ReduceOp, ProcessSet, global_process_set,
    shutdown, is_initialized, rank, size, local_rank, local_size,
    add_process_set, remove_process_set,
)
from kolo.errors import KoloError  # noqa: F401
from kolo._api import Adasum  # noqa: F401
from kolo._topology import (  # noqa: F401
    cross_size, cross_rank, is_homogeneous, mpi_threads_supported, mpi_enabled, mpi_built,
    gloo_enabled, gloo_built, nccl_built, cuda_built, rocm_built, ddl_built, ccl_built,
)
from kolo._timeline import start_timeline, stop_timeline  # noqa: F401
from kolo.tensorflow.compression import Compression  # noqa: F401
from kolo.tensorflow.functions import (  # noqa: F401
    allreduce, grouped_allreduce, broadcast, allgather, grouped_allgather,
    reducescatter, grouped_reducescatter, alltoall, barrier, join,
    broadcast_variables, broadcast_, broadcast_global_variables, broadcast_object,
    broadcast_object_fn, allgather_object,
)
from kolo.tensorflow.gradient_aggregation import (  # noqa: F401
    DistributedGradientTape, DistributedOptimizer, PartialDistributedGradientTape,
    LocalGradientAggregationHelper, allreduce_gradients,
)
from kolo.tensorflow.hooks import BroadcastGlobalVariablesHook  # noqa: F401
from kolo.tensorflow import mpi_ops, data  # noqa: F401
from kolo.tensorflow import callbacks  # noqa: F401
from kolo.tensorflow.callbacks import (  # noqa: F401
    BroadcastGlobalVariablesCallback, MetricAverageCallback, LearningRateScheduleCallback,
    LearningRateWarmupCallback,
)
from kolo.tensorflow.distributed_model import DistributedModel  # noqa: F401
from kolo.tensorflow.saving import load_model  # noqa: F401
from kolo.tensorflow.sync_batch_norm import SyncBatchNormalization  # noqa: F401


def init(comm=None, process_sets=None):
    """Attaches this process to kolod (KOLO_* environment; one rank without
    it) and registers `process_sets` (a list of ProcessSet, the same on every
    rank; "dynamic" or None registers none)."""
    _api.init_job(comm, process_sets)


def _int_op(value, name):
    return tf.constant(value, dtype=tf.int32, name=name)


def rank_op(name=None):
    """This rank as an int32 tensor (fixed once init() has run)."""
    return _int_op(_api.rank(), name)


def size_op(process_set_id=0, name=None):
    """The number of ranks (of a process set) as an int32 tensor."""
    return _int_op(_api.size() if process_set_id == 0
                   else _core.process_set_size(process_set_id), name)


def local_rank_op(name=None):
    return _int_op(_api.local_rank(), name)


def local_size_op(name=None):
    return _int_op(_api.local_size(), name)


def process_set_included_op(process_set_id=0, name=None):
    """1 if this rank belongs to the process set, else 0, as an int32 tensor."""
    if process_set_id == 0:
        return _int_op(1, name)
    try:
        _core.process_set_rank(process_set_id)
        included = 1
    except KoloError:
        included = 0
    return _int_op(included, name)

# hvd.elastic, as Horovod makes it available on import.
from kolo.tensorflow import elastic  # noqa: E402,F401
