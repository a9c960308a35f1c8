"""kolo.tensorflow.keras.elastic: elastic training with Keras model.fit
(horovod.tensorflow.keras.elastic).

    import kolo.tensorflow.keras as hvd
    hvd.init()
    state = hvd.elastic.KerasState(model, batch=0, epoch=0)
    callbacks = [hvd.elastic.UpdateBatchStateCallback(state),
                 hvd.elastic.UpdateEpochStateCallback(state),
                 hvd.elastic.CommitStateCallback(state, batches_per_commit=10)]

    @hvd.elastic.run
    def train(state):
        model.fit(data, steps_per_epoch=..., epochs=epochs - state.epoch,
                  callbacks=callbacks)

    train(state)

List CommitStateCallback after the two Update callbacks: Keras calls
callbacks in list order, and a commit saves what has been updated before it.
After a reset fit() starts again, so `epochs` must count the epochs left
(or pass initial_epoch=state.epoch with the total); the epoch that was cut
short runs again in full (Keras 3 has no way to shorten one epoch), from the
weights of the last commit.

The callbacks are used from the training thread only.
"""

from kolo.tensorflow._keras import keras

from kolo.elastic import HostsUpdatedInterrupt, ObjectState, State  # noqa: F401
from kolo.tensorflow.elastic import TensorFlowKerasState, run  # noqa: F401

__all__ = ["run", "State", "ObjectState", "KerasState", "CommitStateCallback",
           "UpdateBatchStateCallback", "UpdateEpochStateCallback", "HostsUpdatedInterrupt"]


class KerasState(TensorFlowKerasState):
    """A Keras model's weights and its optimizer's variables as elastic
    state, with `kwargs` (e.g. epoch=0, batch=0) as plain attributes: see
    kolo.tensorflow.elastic.TensorFlowKerasState."""


class CommitStateCallback(keras.callbacks.Callback):
    """Commits `state` after every `batches_per_commit` batches and at the
    end of every epoch. The count starts afresh with each fit(), so after a
    reset every rank (a joiner too) commits at the same batches: a commit is
    a collective."""

    def __init__(self, state, batches_per_commit=1):
        super().__init__()
        if batches_per_commit < 1:
            raise ValueError(f"batches_per_commit must be at least 1, not {batches_per_commit}")
        self.state = state
        self.batches_per_commit = int(batches_per_commit)
        self.batches_remaining = self.batches_per_commit

    def on_train_begin(self, logs=None):
        self.batches_remaining = self.batches_per_commit

    def on_batch_end(self, batch, logs=None):
        self.batches_remaining -= 1
        if self.batches_remaining == 0:
            self.state.commit()
            self.batches_remaining = self.batches_per_commit

    def on_epoch_end(self, epoch, logs=None):
        self.state.commit()
        self.batches_remaining = self.batches_per_commit


class UpdateBatchStateCallback(keras.callbacks.Callback):
    """Keeps state.batch at the index (within its epoch) of the last batch
    trained, and at 0 once an epoch ends."""

    def __init__(self, state):
        super().__init__()
        self.state = state

    def on_batch_end(self, batch, logs=None):
        self.state.batch = batch

    def on_epoch_end(self, epoch, logs=None):
        self.state.batch = 0


class UpdateEpochStateCallback(keras.callbacks.Callback):
    """Keeps state.epoch at the number of epochs finished: one more at each
    epoch's end, counting from the state.epoch fit() began with (a reset
    restores it), so it works with fit(epochs=total - state.epoch) and with
    fit(initial_epoch=state.epoch, epochs=total) alike."""

    def __init__(self, state):
        super().__init__()
        self.state = state

    def on_epoch_end(self, epoch, logs=None):
        self.state.epoch += 1
