"""BroadcastGlobalVariablesHook: TF1 MonitoredTrainingSession programs start
every rank from root_rank's variables."""

import tensorflow as tf

from kolo.tensorflow.functions import broadcast_global_variables


class BroadcastGlobalVariablesHook(tf.compat.v1.train.SessionRunHook):
    """Broadcasts root_rank's global variables to every rank once the
    session is created (and again for each new session, e.g. after a
    restore from a checkpoint)."""

    def __init__(self, root_rank, device=""):
        super().__init__()
        self.root_rank = root_rank
        self.device = device
        self.bcast_op = None

    def begin(self):
        if self.bcast_op is None or self.bcast_op.graph != tf.compat.v1.get_default_graph():
            with tf.device(self.device):
                self.bcast_op = broadcast_global_variables(self.root_rank)

    def after_create_session(self, session, coord):
        session.run(self.bcast_op)
