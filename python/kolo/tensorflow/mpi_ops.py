"""horovod.tensorflow.mpi_ops's names: the ops and the job's facts, the
same objects kolo.tensorflow exports (programs that import them from
mpi_ops keep working)."""

from kolo._api import (  # noqa: F401
    Average, Sum, Min, Max, Product, Adasum, ReduceOp, ProcessSet, global_process_set,
    add_process_set, remove_process_set, shutdown, is_initialized, rank, size, local_rank,
    local_size,
)
from kolo._topology import (  # noqa: F401
    cross_rank, cross_size, is_homogeneous, mpi_threads_supported, mpi_enabled, mpi_built,
    gloo_enabled, gloo_built, nccl_built, cuda_built, rocm_built, ddl_built, ccl_built,
)
from kolo._timeline import start_timeline, stop_timeline  # noqa: F401
from kolo.tensorflow.functions import (  # noqa: F401
    allreduce, grouped_allreduce, allgather, grouped_allgather, broadcast, broadcast_,
    reducescatter, grouped_reducescatter, alltoall, barrier, join,
)
