"""DistributedOptimizer for Keras 2 (tf_keras) optimizers, legacy
(tf_keras.optimizers.legacy, OptimizerV2) and new (tf_keras.optimizers)
alike: the gradients are reduced over the ranks where the optimizer
computes them, as Horovod does: `_compute_gradients` (the legacy family's
minimize, which model.fit calls), `get_gradients` (the legacy family in
graph mode) and `compute_gradients` (the new family's minimize). A custom
loop that computes gradients itself and calls apply_gradients reduces them
with DistributedGradientTape.

With backward_passes_per_step=N the gradients of N passes are summed
locally (averaged with average_aggregated_gradients) and reduced on every
Nth; apply_gradients applies them then, and on the other passes only counts
the optimizer's iterations."""

import tensorflow as tf

from kolo.tensorflow.gradient_reduction import _reduce_except_local, _ref


class Keras2DistributedMixin:
    """Methods put in front of a tf_keras optimizer's class."""

    _kolo_distributed = True

    def register_local_var(self, var):
        """Keeps `var`'s gradient local: never reduced over the ranks
        (divided by their number when scale_local_gradients)."""
        self._kolo_local.add(_ref(var))

    def _compute_gradients(self, loss, var_list, grad_loss=None, tape=None):
        pairs = super()._compute_gradients(loss, var_list, grad_loss, tape=tape)
        return self._kolo_pairs(pairs)

    def compute_gradients(self, loss, var_list, tape=None):
        pairs = super().compute_gradients(loss, var_list, tape=tape)
        return self._kolo_pairs(pairs)

    def get_gradients(self, loss, params):
        grads = super().get_gradients(loss, params)
        return self._kolo_gradients(grads, list(params))

    def _kolo_pairs(self, pairs):
        pairs = list(pairs)
        if not pairs:
            return pairs
        grads, variables = zip(*pairs)
        return list(zip(self._kolo_gradients(list(grads), list(variables)), variables))

    def _kolo_reduce(self, grads, variables):
        return _reduce_except_local(grads, variables, self._kolo_local,
                                    self._kolo_scale_local, self._kolo_kwargs)

    def _kolo_gradients(self, grads, variables):
        if self._kolo_passes == 1:
            return self._kolo_reduce(grads, variables)
        return self._kolo_aggregate(grads, variables)

    def _kolo_boundary(self):
        # True on the pass that reduces and applies (the counter has just
        # been advanced by this pass's gradients).
        return tf.equal(self._kolo_count % self._kolo_passes, 0)

    def _kolo_aggregate(self, grads, variables):
        if not hasattr(self, "_kolo_acc"):
            with tf.init_scope():
                self._kolo_acc = [None if g is None else
                                  tf.Variable(tf.zeros(v.shape, g.dtype), trainable=False)
                                  for g, v in zip(grads, variables)]
                self._kolo_count = tf.Variable(0, dtype=tf.int64, trainable=False)
        for a, g in zip(self._kolo_acc, grads):
            if a is not None:
                a.assign_add(tf.convert_to_tensor(g))
        self._kolo_count.assign_add(1)
        live = [i for i, a in enumerate(self._kolo_acc) if a is not None]

        def _reduced():
            scale = 1.0 / self._kolo_passes if self._kolo_average_acc else 1.0
            summed = [self._kolo_acc[i].read_value() * scale for i in live]
            return self._kolo_reduce(summed, [variables[i] for i in live])

        def _not_yet():
            return [tf.zeros_like(self._kolo_acc[i]) for i in live]

        out = tf.cond(self._kolo_boundary(), _reduced, _not_yet)
        out = out if isinstance(out, (list, tuple)) else [out]
        result = [None] * len(grads)
        for i, g in zip(live, out):
            result[i] = g
        return result

    def apply_gradients(self, grads_and_vars, *args, **kwargs):
        if self._kolo_passes == 1:
            return super().apply_gradients(grads_and_vars, *args, **kwargs)
        grads_and_vars = list(grads_and_vars)
        variables = [v for _, v in grads_and_vars]
        # Slots are made here, outside the branch that updates them.
        with tf.init_scope():
            if hasattr(self, "_create_all_weights"):
                self._create_all_weights(variables)
            elif not getattr(self, "_built", False):
                self.build(variables)

        def _apply():
            super(Keras2DistributedMixin, self).apply_gradients(grads_and_vars, *args, **kwargs)
            for a in self._kolo_acc:
                if a is not None:
                    a.assign(tf.zeros_like(a))
            return tf.constant(True)

        def _count_only():
            self.iterations.assign_add(1)
            return tf.constant(False)

        return tf.cond(self._kolo_boundary(), _apply, _count_only)

