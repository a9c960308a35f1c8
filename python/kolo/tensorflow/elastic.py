"""kolo.tensorflow.elastic: elastic training for TensorFlow 2 and Keras 3
programs (the horovod.tensorflow.elastic API) over kolo.elastic.

    import kolo.tensorflow as hvd
    hvd.init()
    state = hvd.elastic.TensorFlowKerasState(model, optimizer, epoch=0)

    @hvd.elastic.run
    def train(state):
        while state.epoch < epochs:
            ...one epoch of steps, state.commit() every few of them
            state.epoch += 1
            state.commit()

    train(state)

The states keep the model's and optimizer's variables: commit() copies their
values to host memory, restore() assigns the copies back, and sync() (run on
entry and after every reset) broadcasts rank 0's values to every rank and
takes them as the committed ones. Other keyword arguments become plain
attributes kept as kolo.elastic.ObjectState keeps them (epoch, batch, ...).

A state is used from the training thread only.
"""

import numpy as np
import tensorflow as tf

from kolo.elastic import HostsUpdatedInterrupt, ObjectState, State, run  # noqa: F401
from kolo.tensorflow import functions as _functions
from kolo.tensorflow.callbacks import _optimizer_variables

__all__ = ["run", "State", "ObjectState", "TensorFlowKerasState", "TensorFlowState",
           "HostsUpdatedInterrupt"]


def _values(variables):
    # np.array copies: a variable's numpy() may share the variable's buffer.
    return [np.array(v.numpy(), copy=True) for v in variables]


class TensorFlowKerasState(ObjectState):
    """A Keras model's weights and its optimizer's variables (slots, step
    count) as elastic state, with `kwargs` as ObjectState attributes.

    Eager (TensorFlow 2) programs. `optimizer` defaults to model.optimizer
    (set by compile()). The model must be built (its weights exist) on every rank before the first sync;
    a Keras 3 optimizer that has not been built yet is built for the
    model's trainable variables at sync, so every rank broadcasts the same
    variable list (a rank that joins has not trained, so its optimizer would
    otherwise have no slots). `backend` is accepted for Horovod's signature
    and ignored."""

    def __init__(self, model, optimizer=None, backend=None, **kwargs):
        del backend
        self.model = model
        self._optimizer = optimizer
        self._saved_model = []
        self._saved_optimizer = []
        super().__init__(**kwargs)

    @property
    def optimizer(self):
        return self._optimizer if self._optimizer is not None \
            else getattr(self.model, "optimizer", None)

    @optimizer.setter
    def optimizer(self, optimizer):
        self._optimizer = optimizer

    def _build_optimizer(self):
        opt = self.optimizer
        if opt is None or getattr(opt, "built", True) or not hasattr(opt, "build"):
            return
        opt.build(self.model.trainable_variables)

    def _save_variables(self):
        self._saved_model = _values(self.model.weights)
        self._saved_optimizer = _values(_optimizer_variables(self.optimizer))

    def save(self):
        super().save()
        self._save_variables()

    def restore(self):
        super().restore()
        for var, value in zip(self.model.weights, self._saved_model):
            var.assign(value)
        opt_vars = _optimizer_variables(self.optimizer)
        if len(opt_vars) == len(self._saved_optimizer):
            for var, value in zip(opt_vars, self._saved_optimizer):
                var.assign(value)
        # Otherwise the optimizer was built after the last commit: its fresh
        # variables stay, and the next sync makes them rank 0's.

    def sync(self):
        self._build_optimizer()
        _functions.broadcast_variables(
            list(self.model.weights) + list(_optimizer_variables(self.optimizer)), root_rank=0)
        self._save_variables()
        super().sync()


class TensorFlowState(ObjectState):
    """A list of tf.Variables as elastic state, with `kwargs` as ObjectState
    attributes. Eagerly the variables are read and assigned directly; in a
    TF1 graph pass `session`, through which they are read, loaded and
    broadcast. `variables` defaults to the graph's global variables."""

    def __init__(self, variables=None, session=None, **kwargs):
        self.variables = list(variables) if variables is not None \
            else list(tf.compat.v1.global_variables())
        self.session = session
        self._saved_values = []
        self._graph_sync = None  # the graph's broadcast op, built once
        self._graph_restore = None  # (placeholders, their assignment), built once
        super().__init__(**kwargs)

    def _read(self):
        if self.session is None:
            return _values(self.variables)
        return [np.array(v, copy=True) for v in self.session.run(self.variables)]

    def save(self):
        super().save()
        self._saved_values = self._read()

    def restore(self):
        super().restore()
        if self.session is None:
            for var, value in zip(self.variables, self._saved_values):
                var.assign(value)
            return
        if self._graph_restore is None:
            with self.session.graph.as_default(), \
                    tf.compat.v1.name_scope("kolo_elastic_tensorflow_state_restore"):
                holders = [tf.compat.v1.placeholder(v.dtype.base_dtype, v.shape)
                           for v in self.variables]
                assigns = tf.group(*[v.assign(h) for v, h in zip(self.variables, holders)])
            self._graph_restore = (holders, assigns)
        holders, assigns = self._graph_restore
        self.session.run(assigns, feed_dict=dict(zip(holders, self._saved_values)))

    def sync(self):
        if self.session is None:
            _functions.broadcast_variables(self.variables, root_rank=0)
        else:
            if self._graph_sync is None:
                # Built once, under a scope of its own, so that its ops have
                # the same node names (the collectives' names) on every rank,
                # whenever each rank first syncs.
                with self.session.graph.as_default(), \
                        tf.compat.v1.name_scope("kolo_elastic_tensorflow_state_sync"):
                    self._graph_sync = _functions.broadcast_variables(self.variables, 0)
            self.session.run(self._graph_sync)
        self._saved_values = self._read()
        super().sync()
