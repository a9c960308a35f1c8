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

import kolo._api as _api
from kolo._api import (  # noqa: F401
    Average, Sum, Min, Max, Product, ReduceOp, ProcessSet, global_process_set,
    shutdown, is_initialized, rank, size, local_rank, local_size,
    add_process_set, remove_process_set,
)
from kolo.errors import KoloError  # noqa: F401
from kolo._topology import (  # noqa: F401
    cross_size, cross_rank, is_homogeneous, mpi_threads_supported, mpi_enabled, mpi_built,
    gloo_enabled, gloo_built,
)
from kolo.tensorflow.compression import Compression  # noqa: F401
from kolo.tensorflow.functions import (  # noqa: F401
    allreduce, grouped_allreduce, broadcast, allgather, grouped_allgather,
    reducescatter, grouped_reducescatter, alltoall, barrier, join,
    broadcast_variables, broadcast_object, allgather_object,
)
from kolo.tensorflow.gradient_aggregation import (  # noqa: F401
    DistributedGradientTape, DistributedOptimizer, allreduce_gradients,
)
from kolo.tensorflow import callbacks  # noqa: F401
from kolo.tensorflow.callbacks import (  # noqa: F401
    BroadcastGlobalVariablesCallback, MetricAverageCallback,
)
from kolo.tensorflow.distributed_model import DistributedModel  # noqa: F401


def init(*args, **kwargs):
    """Attaches this process to kolod (KOLO_* environment; one rank without
    it). Arguments of other runtimes' init (communicators, process sets) are
    accepted and ignored."""
    _api.init()


def nccl_built():
    return False


def start_timeline(*args, **kwargs):
    """Not supported by Kolo; kept so programs that call it still run."""


def stop_timeline():
    """Not supported by Kolo; kept so programs that call it still run."""
