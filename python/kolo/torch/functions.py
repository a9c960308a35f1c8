"""Broadcasting a model's parameters and optimizer state, and Python objects
(horovod.torch's broadcast_parameters, broadcast_optimizer_state,
broadcast_object and allgather_object)."""

import torch

import kolo._api as _api
from kolo import _pickling
from kolo import _shared
from kolo._api import global_process_set
from kolo.torch import mpi_ops


def _named(params):
    """(name, tensor) pairs of a state_dict, of named_parameters() or of a
    list of tensors (parameters()), named by position where unnamed."""
    if isinstance(params, dict):
        return sorted(params.items())
    items = list(params)
    return [item if isinstance(item, tuple) and len(item) == 2 else (f"param.{i}", item)
            for i, item in enumerate(items)]


def broadcast_parameters(params, root_rank, process_set=global_process_set):
    """Overwrites every tensor of `params` (model.state_dict(),
    model.named_parameters() or model.parameters()) with root_rank's, in
    place."""
    handles = []
    for name, p in _named(params):
        if p is None:
            continue
        if not isinstance(p, torch.Tensor):
            raise TypeError(f"parameter {name} is a {type(p).__name__}, not a tensor")
        handles.append(mpi_ops.broadcast_async_(p.data, root_rank,
                                                name=f"broadcast_parameters.{name}",
                                                process_set=process_set))
    _shared.GroupHandle(handles).wait()


class _TensorSlot:
    """Where a tensor stood in root's optimizer state (shape and dtype)."""

    def __init__(self, index, tensor):
        self.index = index
        self.shape = tuple(tensor.shape)
        self.dtype = str(tensor.dtype).replace("torch.", "")


def _strip(value, tensors):
    """`value` with each tensor replaced by a _TensorSlot (collected in order)."""
    if isinstance(value, torch.Tensor):
        tensors.append(value)
        return _TensorSlot(len(tensors) - 1, value)
    if isinstance(value, dict):
        return {k: _strip(v, tensors) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_strip(v, tensors) for v in value)
    return value


def _fill(value, tensors):
    if isinstance(value, _TensorSlot):
        return tensors[value.index]
    if isinstance(value, dict):
        return {k: _fill(v, tensors) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_fill(v, tensors) for v in value)
    return value


def _initialize_state(optimizer, model):
    """Creates a fresh optimizer's state as Horovod does, by one step with
    zero gradients (Adam's moments, momentum buffers, step counts); `model`
    names the sparse embeddings whose gradients must stay sparse."""
    sparse = set()
    if model is not None:
        for m in model.modules():
            if isinstance(m, torch.nn.Embedding) and m.sparse:
                sparse.update(id(p) for p in m.parameters())
    for group in optimizer.param_groups:
        for p in group["params"]:
            if p.requires_grad:
                p.grad = torch.zeros_like(p)
                if isinstance(optimizer, torch.optim.SparseAdam) or id(p) in sparse:
                    p.grad = p.grad.to_sparse()
    # A DistributedOptimizer's own step() would allreduce; the wrapped
    # optimizer's step initializes the state locally.
    if hasattr(optimizer, "skip_synchronize"):
        with optimizer.skip_synchronize():
            optimizer.step()
    else:
        optimizer.step()


def broadcast_optimizer_state(optimizer, root_rank, model=None, process_set=global_process_set):
    """Makes every rank's optimizer state (hyper-parameters of each group and
    per-parameter state such as Adam's moments) equal to root_rank's.

    A rank whose optimizer never stepped first creates its state with one
    zero-gradient step, as Horovod does (`model` tells which embeddings have
    sparse gradients). Then the state's structure and scalars travel as one
    pickled object and its tensors are broadcast in place of tensors
    allocated to root's shapes."""
    if isinstance(optimizer, torch.optim.LBFGS):
        raise ValueError("cannot broadcast torch.optim.LBFGS state")
    if len(optimizer.state_dict()["state"]) == 0:
        _initialize_state(optimizer, model)
    state = optimizer.state_dict()
    tensors = []
    skeleton = _strip(state, tensors)
    is_root = _api.rank() == root_rank  # root_rank is a global rank
    skeleton = broadcast_object(skeleton if is_root else None, root_rank,
                                name="broadcast_optimizer_state.skeleton",
                                process_set=process_set)
    slots = []
    _collect_slots(skeleton, slots)
    slots.sort(key=lambda s: s.index)
    if is_root:
        buffers = [t.detach().contiguous() for t in tensors]
    else:
        buffers = [torch.empty(s.shape, dtype=getattr(torch, s.dtype)) for s in slots]
    handles = [mpi_ops.broadcast_async_(b.cpu() if b.device.type != "cpu" else b, root_rank,
                                        name=f"broadcast_optimizer_state.{i}",
                                        process_set=process_set)
               for i, b in enumerate(buffers)]
    received = _shared.GroupHandle(handles).wait()
    if not is_root:
        optimizer.load_state_dict(_fill(skeleton, received))


def _collect_slots(value, out):
    if isinstance(value, _TensorSlot):
        out.append(value)
    elif isinstance(value, dict):
        for v in value.values():
            _collect_slots(v, out)
    elif isinstance(value, (list, tuple)):
        for v in value:
            _collect_slots(v, out)


def _dumps(obj):
    """`obj` pickled into a uint8 tensor (kolo._pickling)."""
    return torch.frombuffer(bytearray(_pickling.dumps(obj)), dtype=torch.uint8)


def broadcast_object(obj, root_rank=0, name=None, process_set=global_process_set):
    """root_rank's `obj` (any picklable object) on every rank; the other
    ranks' `obj` is ignored (None will do)."""
    name = _shared.collective_name("broadcast_object", name, process_set)
    is_root = _api.rank() == root_rank  # root_rank is a global rank
    if is_root:
        data = _dumps(obj)
        length = torch.tensor([data.numel()], dtype=torch.int64)
    else:
        data, length = None, torch.zeros(1, dtype=torch.int64)
    mpi_ops.broadcast_(length, root_rank, name=f"{name}.length", process_set=process_set)
    if data is None:
        data = torch.empty(int(length[0]), dtype=torch.uint8)
    mpi_ops.broadcast_(data, root_rank, name=f"{name}.data", process_set=process_set)
    return obj if is_root else _pickling.loads(data.numpy().tobytes())


def allgather_object(obj, name=None, process_set=global_process_set):
    """Every rank's `obj` (any picklable object), as a list in rank order."""
    name = _shared.collective_name("allgather_object", name, process_set)
    data = _dumps(obj)
    lengths = mpi_ops.allgather_async(torch.tensor([data.numel()], dtype=torch.int64),
                                      name=f"{name}.lengths", process_set=process_set).wait()
    gathered = mpi_ops.allgather_async(data, name=f"{name}.data",
                                       process_set=process_set).wait().numpy()
    out, offset = [], 0
    for n in lengths.tolist():
        out.append(_pickling.loads(gathered[offset:offset + n].tobytes()))
        offset += n
    return out
