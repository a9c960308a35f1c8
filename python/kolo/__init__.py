"""Kolo's Python SDK: collectives on NumPy arrays through the node's kolod.

    import kolo
    kolo.init()                       # attaches this rank (KOLO_* environment)
    g = kolo.allreduce(grad)          # averaged over the job's ranks
    h = kolo.allreduce_async(grad, op=kolo.Sum)
    total = h.wait()                  # or kolo.synchronize(h)

Launch ranks with `kolorun -np N -- python train.py`. Every failure raises a
subclass of kolo.KoloError carrying kolod's message. kolo.tensorflow offers the
same collectives as TensorFlow ops.
"""

from kolo.errors import *  # noqa: F401,F403  (the KoloError hierarchy)
from kolo.errors import KoloError  # noqa: F401
from kolo._api import (  # noqa: F401
    Average, Sum, Min, Max, Product, Adasum, ReduceOp, Compression,
    ProcessSet, global_process_set, Handle,
    init, shutdown, is_initialized, rank, size, local_rank, local_size,
    allreduce, allreduce_async, allreduce_, allreduce_async_, grouped_allreduce, grouped_allreduce_async,
    broadcast, broadcast_, broadcast_async, broadcast_async_,
    allgather, allgather_async, grouped_allgather, grouped_allgather_async,
    reducescatter, reducescatter_async, grouped_reducescatter,
    grouped_reducescatter_async, alltoall, alltoall_async,
    barrier, join, poll, synchronize,
    add_process_set, remove_process_set,
)

__version__ = "0.1.0"
