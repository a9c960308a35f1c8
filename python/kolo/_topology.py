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
    """kolod serves CUDA tensors through NCCL where it was built with CUDA;
    the client accepts them everywhere."""
    return True


def cuda_built():
    return True


def rocm_built():
    return False


def ddl_built():
    return False


def ccl_built():
    return False
