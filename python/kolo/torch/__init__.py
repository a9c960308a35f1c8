"""kolo.torch: Kolo's collectives for PyTorch, as a drop-in for programs
written against the horovod.torch API.

    import kolo.torch as hvd
    hvd.init()
    opt = hvd.DistributedOptimizer(torch.optim.Adam(model.parameters(), 1e-3 * hvd.size()),
                                   named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(opt, root_rank=0)

Launch with `kolorun -np N -- python train.py`. Collectives take CPU and CUDA
tensors (see kolo/torch/mpi_ops.py for the copies each path makes); a failed
collective raises the kolo.KoloError subclass of its status code with kolod's
message.
"""

from kolo._api import (  # noqa: F401
    Average, Sum, Min, Max, Product, ReduceOp, ProcessSet, global_process_set,
    shutdown, is_initialized, rank, size, local_rank, local_size,
    add_process_set, remove_process_set,
)
from kolo.errors import KoloError  # noqa: F401
from kolo._topology import (  # noqa: F401
    cross_size, cross_rank, is_homogeneous, mpi_threads_supported, mpi_enabled, mpi_built,
    gloo_enabled, gloo_built, nccl_built, cuda_built, rocm_built, ddl_built, ccl_built,
)
from kolo._timeline import start_timeline, stop_timeline  # noqa: F401
from kolo.torch.compression import Compression  # noqa: F401
from kolo.torch._handles import DuplicateNameError  # noqa: F401
from kolo.torch.mpi_ops import (  # noqa: F401
    init, Adasum, HorovodInternalError, Handle, poll, synchronize, sparse_allreduce_async,
    allreduce, allreduce_, allreduce_async, allreduce_async_,
    grouped_allreduce, grouped_allreduce_, grouped_allreduce_async, grouped_allreduce_async_,
    allgather, allgather_async, grouped_allgather, grouped_allgather_async,
    broadcast, broadcast_, broadcast_async, broadcast_async_,
    alltoall, alltoall_async,
    reducescatter, reducescatter_async, grouped_reducescatter, grouped_reducescatter_async,
    barrier, join,
)
from kolo.torch.functions import (  # noqa: F401
    broadcast_parameters, broadcast_optimizer_state, broadcast_object, allgather_object,
)
from kolo.torch.optimizer import DistributedOptimizer  # noqa: F401
from kolo.torch.sync_batch_norm import SyncBatchNorm  # noqa: F401

# hvd.elastic, as Horovod makes it available on import.
from kolo.torch import elastic  # noqa: E402,F401
