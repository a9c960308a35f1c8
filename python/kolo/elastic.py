"""Elastic training: a job that loses ranks keeps training, and ranks that come
back or are added join at the next commit (Horovod's elastic API).

    import kolo
    import kolo.elastic

    kolo.init()
    state = kolo.elastic.ObjectState(epoch=0, weights=initial_weights)

    @kolo.elastic.run
    def train(state):
        for state.epoch in range(state.epoch, epochs):
            state.weights -= lr * kolo.allreduce(gradient(state.weights))
            state.commit()

    train(state)

Run it with `kolorun -np 3 --min-np 2 --max-np 4 -- python train.py`. kolod
keeps the job's membership: when a rank dies, the survivors' collectives fail
with kolo.errors.MembershipChangedError within moments; `run` then restores the
state of the last commit, resets (this process's session leaves the ended
epoch and attaches for the next one, with ranks renumbered densely: survivors
first in their old order, then joiners) and calls the function again after
syncing the state from the new rank 0. The process itself never restarts.
Ranks that kolorun restarts, or starts on hosts its discovery script adds,
wait in kolo.init() until the running ranks reach a commit: commit() asks
kolod whether ranks wait to join and, agreed on by every rank, raises
HostsUpdatedInterrupt, which `run` answers with a reset.

What a reset means for the program: kolo.rank() and kolo.size() may change
(read them again inside the function, e.g. to re-shard data or scale the
learning rate in a reset callback); process sets and unnamed collectives'
numbering start afresh (add process sets again in a reset callback);
collectives in flight on the old epoch fail. Elastic jobs run on one node.
"""

import copy
import functools
import itertools
import threading

import numpy as np

from kolo import _api
from kolo import _pickling
from kolo import _shared
from kolo import errors
from kolo._native import core


class HostsUpdatedInterrupt(RuntimeError):
    """Ranks wait to join the job: every rank stops the training function at
    the same commit and resets so that they can take part. `skip_sync`: the
    state need not be broadcast afterwards (False whenever a rank joined, which
    has no state yet)."""

    def __init__(self, skip_sync=False):
        super().__init__("ranks wait to join the elastic job at this commit")
        self.skip_sync = skip_sync


# Names of the collectives kolo.elastic issues itself; they start afresh with
# each epoch, as every rank of the new epoch (joiners too) counts from zero.
_commits = itertools.count()
_commits_lock = threading.Lock()


def _commit_name():
    with _commits_lock:
        return f"kolo.elastic.commit.{next(_commits)}"


def reset():
    """Leaves this process's ended epoch and attaches for the next one (it
    waits until that epoch forms). `run` calls it; call it yourself only when
    you drive the loop by hand."""
    global _commits
    core.elastic_reset()
    _shared.reset_names()
    with _commits_lock:
        _commits = itertools.count()


def epoch():
    """The membership epoch this process's session belongs to (0 when the job
    is not elastic)."""
    return core.epoch()


def broadcast_object(obj, root_rank=0, name=None):
    """root_rank's `obj` (any picklable object) on every rank."""
    base = _shared.collective_name("broadcast_object", name)
    is_root = _api.rank() == root_rank
    data = np.frombuffer(_pickling.dumps(obj), dtype=np.uint8) if is_root \
        else np.zeros([0], np.uint8)
    length = _api.broadcast(np.array([data.size], np.int64), root_rank, name=f"{base}.len")
    buf = data if is_root else np.zeros([int(length[0])], np.uint8)
    out = _api.broadcast(buf, root_rank, name=f"{base}.data")
    return obj if is_root else _pickling.loads(out.tobytes())


class State:
    """What an elastic training function keeps across membership changes.

    Subclasses implement save() (keep a copy of the live state), restore()
    (put the copy back) and sync() (make every rank's state rank 0's).
    commit() saves and then checks, together with every other rank, whether
    ranks wait to join (HostsUpdatedInterrupt)."""

    def __init__(self):
        self._reset_callbacks = []

    def register_reset_callbacks(self, callbacks):
        """Functions called (without arguments) after every reset, once the
        new epoch formed and before the state is synced: the place to re-read
        kolo.size(), rescale a learning rate or add process sets again."""
        self._reset_callbacks.extend(callbacks)

    def on_reset(self):
        for callback in self._reset_callbacks:
            callback()

    def commit(self):
        """Saves the state as the one to go back to, then checks for ranks
        waiting to join. Costs one small allreduce; commit as often as losing
        the work since the last commit would hurt."""
        self.save()
        self.check_host_updates()

    def check_host_updates(self):
        """Raises HostsUpdatedInterrupt on every rank alike when ranks wait to
        join (an allreduce of what each rank's kolod says). In a job that is
        not elastic it does nothing."""
        this_epoch, current, waiting = core.elastic_status()
        if this_epoch == 0:
            return
        if current != this_epoch:
            raise errors.MembershipChangedError(
                f"{errors.MEMBERSHIP_CHANGED_PREFIX}epoch {this_epoch} ended (the job is in "
                f"epoch {current}); reset into the next epoch")
        agreed = _api.allreduce(np.array([waiting], np.int32), op=_api.Max, name=_commit_name())
        if int(agreed[0]) > 0:
            raise HostsUpdatedInterrupt(skip_sync=False)

    def save(self):
        raise NotImplementedError("a State subclass implements save()")

    def restore(self):
        raise NotImplementedError("a State subclass implements restore()")

    def sync(self):
        raise NotImplementedError("a State subclass implements sync()")


class ObjectState(State):
    """Plain Python values as state: ObjectState(epoch=0, batch=0, weights=w)
    makes state.epoch, state.batch and state.weights; commit() keeps deep
    copies of them, restore() puts the copies back, sync() broadcasts rank 0's
    committed values to every rank."""

    def __init__(self, bcast_object=None, get_rank=None, **kwargs):
        super().__init__()
        self._bcast_object = bcast_object or broadcast_object
        self._get_rank = get_rank or _api.rank
        self._saved_state = dict(kwargs)
        for name, value in kwargs.items():
            setattr(self, name, value)
        self.save()

    def save(self):
        self._saved_state = {name: copy.deepcopy(getattr(self, name))
                             for name in self._saved_state}

    def restore(self):
        for name, value in self._saved_state.items():
            setattr(self, name, copy.deepcopy(value))

    def sync(self):
        if self._saved_state:
            self._saved_state = self._bcast_object(self._saved_state)
            # Only the plain values: a framework state syncs and loads its
            # own before it calls this.
            ObjectState.restore(self)


def run_fn(func, reset_fn):
    """`func(state, ...)` run elastically, resetting with `reset_fn` (the
    framework modules pass their own, which also clear framework caches)."""

    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
        reset_required = False
        skip_sync = False
        while True:
            try:
                if reset_required:
                    reset_fn()
                    state.on_reset()
                if not skip_sync:
                    state.sync()
                return func(state, *args, **kwargs)
            except HostsUpdatedInterrupt as e:
                skip_sync = e.skip_sync
            except Exception as e:  # noqa: BLE001 — frameworks wrap kolod's error in their own
                if not errors.is_membership_changed(e):
                    raise
                state.restore()
                skip_sync = False
            reset_required = True

    return wrapper


def run(func):
    """Decorates a training function `func(state, ...)`: state is synced
    from rank 0 first; when the job's membership changes the state of the
    last commit is restored, the process resets into the next epoch and
    `func` runs again from there. Any other error propagates."""
    return run_fn(func, reset)
