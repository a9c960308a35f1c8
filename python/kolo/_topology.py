"""The job's shape beyond rank and size, and what this runtime is built
with, as horovod's framework modules report them (shared by kolo.tensorflow
and kolo.torch)."""

from kolo._native import core


def cross_size():
    """The number of nodes the job spans (ranks divided by ranks per node)."""
    return max(1, core.size() // max(1, core.local_size()))


def cross_rank():
    """The index of this rank's node."""
    return core.rank() // max(1, core.local_size())


def is_homogeneous():
    """Whether every node runs the same number of ranks."""
    return core.size() % max(1, core.local_size()) == 0


# Kolo moves data through kolod (shared memory, UCX between nodes, NCCL for
# CUDA tensors), never through MPI or Gloo in the training process.
def mpi_threads_supported():
    return False


def mpi_enabled():
    return False


def mpi_built():
    return False


def gloo_enabled():
    return False


def gloo_built():
    return False


def nccl_built():
    """The NCCL version kolod's device backend was built against, as Horovod
    reports it (major*10000 + minor*100 + patch, e.g. 22809 for 2.28.9);
    0 where Kolo was built without CUDA and NCCL (CUDA tensors are then
    refused)."""
    return int(getattr(core, "NCCL_VERSION", 0))


def cuda_built():
    """Whether kolod serves CUDA tensors (built with CUDA and NCCL)."""
    return nccl_built() != 0


def rocm_built():
    return False


def ddl_built():
    return False


def ccl_built():
    return False
