"""kolo.torch.elastic: elastic training for PyTorch programs (the
horovod.torch.elastic API) over kolo.elastic.

    import kolo.torch as hvd
    hvd.init()
    sampler = hvd.elastic.ElasticSampler(dataset)
    loader = torch.utils.data.DataLoader(dataset, batch_size=B, sampler=sampler)
    state = hvd.elastic.TorchState(model, optimizer, train_sampler=sampler, epoch=0)

    @hvd.elastic.run
    def train(state):
        while state.epoch < epochs:
            for i, batch in enumerate(loader):
                ...step...
                state.train_sampler.record_batch(i, B)
                state.commit()
            state.epoch += 1
            state.train_sampler.set_epoch(state.epoch)
            state.commit()

    train(state)

TorchState keeps the state_dict of its models, optimizers, schedulers and
ElasticSamplers, and the other keyword arguments as kolo.elastic.ObjectState
keeps them. After a reset the samplers
deal the samples their epoch has not committed yet over the ranks the job
has now.

States and samplers are used from the training thread only.
"""

import copy
import math

import torch

from kolo import _api
from kolo import elastic as _elastic
from kolo.elastic import HostsUpdatedInterrupt, ObjectState, State, run  # noqa: F401
from kolo.torch import functions as _functions

__all__ = ["run", "State", "ObjectState", "TorchState", "ElasticSampler",
           "HostsUpdatedInterrupt"]


class ElasticSampler(torch.utils.data.Sampler):
    """Deals a dataset's indices over the ranks, one epoch at a time, so that
    an elastic job trains on each sample once per epoch whatever happens to
    its membership.

    The epoch's order is a permutation of range(len(dataset)) (seeded by
    seed + epoch when `shuffle`, else the identity), the same on every rank.
    Of the part of it not processed yet, rank r of n takes positions r, r+n,
    r+2n, ...; the last round is padded with the first remaining indices so
    that every rank takes as many (at most n - 1 samples are seen twice an
    epoch). Recording batches (record_batch / record_indices, every rank as
    many) advances the processed part; reset() (TorchState calls it through
    load_state_dict after every reset) deals what is left over the ranks the
    job has now. set_epoch starts an epoch from its beginning."""

    def __init__(self, dataset, shuffle=True, seed=0):
        self.dataset = dataset
        self.shuffle = bool(shuffle)
        self.seed = int(seed)
        self.epoch = 0
        self.processed_num = 0  # how many of the epoch's order are processed
        self.reset()

    def set_epoch(self, epoch):
        """Starts epoch `epoch` from its beginning (its own order, nothing
        processed)."""
        self.epoch = int(epoch)
        self.processed_num = 0
        self.reset()

    def record_batch(self, batch_idx, batch_size):
        """Every rank processed one more batch of `batch_size` samples (the
        last one of an epoch may be shorter). `batch_idx` is accepted for
        Horovod's signature; only the count matters."""
        del batch_idx
        self._advance(int(batch_size))

    def record_indices(self, indices):
        """This rank processed `indices`, the next ones of its share; every
        rank records as many."""
        self._advance(len(indices))

    def _advance(self, per_rank):
        self.processed_num = min(len(self.dataset),
                                 self.processed_num + per_rank * self.num_replicas)

    def get_indices(self, batch_idx, batch_size):
        """This rank's indices of batch `batch_idx` (of `batch_size`) of the
        current share."""
        start = batch_idx * batch_size
        return self.indices[start:start + batch_size]

    def state_dict(self):
        return {"epoch": self.epoch, "processed_num": self.processed_num}

    def load_state_dict(self, state_dict):
        """Takes the epoch and its progress, and deals what is left over the
        ranks the job has now."""
        self.epoch = int(state_dict["epoch"])
        self.processed_num = int(state_dict["processed_num"])
        self.reset()

    def reset(self):
        """Deals the unprocessed part of the epoch over the current ranks."""
        self.num_replicas = _api.size() if _api.is_initialized() else 1
        self.rank = _api.rank() if _api.is_initialized() else 0
        n = len(self.dataset)
        if self.shuffle:
            g = torch.Generator()
            g.manual_seed(self.seed + self.epoch)
            order = torch.randperm(n, generator=g).tolist()
        else:
            order = list(range(n))
        self.remaining_indices = order[self.processed_num:]
        self.num_samples = math.ceil(len(self.remaining_indices) / self.num_replicas)
        self.total_size = self.num_samples * self.num_replicas
        padded = list(self.remaining_indices)
        while padded and len(padded) < self.total_size:
            padded += self.remaining_indices[:self.total_size - len(padded)]
        self.indices = padded[self.rank:self.total_size:self.num_replicas]

    def __iter__(self):
        return iter(list(self.indices))

    def __len__(self):
        return self.num_samples


def _by_state_dict(value):
    """Whether TorchState keeps `value` by its state_dict: modules,
    optimizers, learning-rate schedulers, ElasticSamplers."""
    return isinstance(value, (torch.nn.Module, torch.optim.Optimizer)) or (
        hasattr(value, "state_dict") and hasattr(value, "load_state_dict"))


class TorchState(ObjectState):
    """Models, optimizers, learning-rate schedulers and samplers as elastic
    state (`model` and `optimizer` may be None; more of each may come as
    keyword arguments), with the other keyword arguments kept as
    ObjectState keeps them. Every value with a state_dict is kept by it and
    stays the same object.

    commit() keeps a copy of each state_dict(); restore() loads them back;
    sync() broadcasts rank 0's optimizer states (broadcast_optimizer_state,
    which first gives a rank whose optimizer never stepped its state), then
    its modules' parameters and buffers (broadcast_parameters, so rank 0's
    weights win over that step), then the other state_dicts, and commits the
    result."""

    def __init__(self, model=None, optimizer=None, **kwargs):
        self.model = model
        self.optimizer = optimizer
        given = dict(kwargs, model=model, optimizer=optimizer)
        self._handled = {k: v for k, v in given.items() if v is not None and _by_state_dict(v)}
        for name, value in self._handled.items():
            setattr(self, name, value)
        self._saved_handled = {}
        super().__init__(**{k: v for k, v in kwargs.items() if k not in self._handled})

    def _save_handled(self):
        self._saved_handled = {name: copy.deepcopy(v.state_dict())
                               for name, v in self._handled.items()}

    def save(self):
        super().save()
        self._save_handled()

    def restore(self):
        super().restore()
        for name, value in self._handled.items():
            if name in self._saved_handled:
                # A copy: optimizers and samplers keep what they load.
                value.load_state_dict(copy.deepcopy(self._saved_handled[name]))

    def sync(self):
        handled = sorted(self._handled.items())
        for name, value in handled:
            if isinstance(value, torch.optim.Optimizer):
                _functions.broadcast_optimizer_state(
                    value, root_rank=0, model=self.model if name == "optimizer" else None)
        for name, value in handled:
            if isinstance(value, torch.nn.Module):
                _functions.broadcast_parameters(value.state_dict(), root_rank=0)
        for name, value in handled:
            if not isinstance(value, (torch.nn.Module, torch.optim.Optimizer)):
                value.load_state_dict(_elastic.broadcast_object(
                    value.state_dict(), name=f"kolo.torch.elastic.state.{name}"))
        self._save_handled()
        super().sync()
