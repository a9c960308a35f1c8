"""Horovod Keras programs' uses of kolo.tensorflow.keras, run on every rank
under the Keras that tf.keras is: Keras 3, or Keras 2 (tf_keras) when the
test starts the ranks with TF_USE_LEGACY_KERAS=1. Every check trains or
reduces with numbers whose result is known exactly."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import kolo.tensorflow.keras as hvd  # noqa: E402
from harness import check, run  # noqa: E402

K = tf.keras
LEGACY = K.__name__.startswith("tf_keras")
hvd.init()
R, N = hvd.rank(), hvd.size()


def expect(cond, msg):
    if not cond:
        raise AssertionError(msg)


def close(a, b, rtol=1e-5):
    np.testing.assert_allclose(np.asarray(a, np.float64), np.asarray(b, np.float64),
                               rtol=rtol, atol=1e-6)


def everyone(x):
    """Every rank's value of `x`, rank by rank."""
    x = np.asarray(x, np.float64)
    return hvd.allgather(tf.constant(x[None])).numpy()


def _optimizer_families():
    """(label, SGD class) for each optimizer family of this Keras, and a
    subclass of each (a program's own optimizer)."""
    if LEGACY:
        families = [("legacy", K.optimizers.legacy.SGD), ("new", K.optimizers.SGD)]
    else:
        families = [("keras3", K.optimizers.SGD)]
    out = []
    for label, cls in families:
        sub = type(f"My{label.capitalize()}SGD", (cls,), {})
        out += [(label, cls), (f"{label} subclass", sub)]
    return out


def _linear(name="w", use_bias=False):
    inp = K.Input((1,))
    return K.Model(inp, K.layers.Dense(1, use_bias=use_bias, kernel_initializer="zeros",
                                       name=name)(inp))


@check
def keras_keyword_of_the_running_keras():
    expect(LEGACY == (os.environ.get("TF_USE_LEGACY_KERAS") == "1"), f"tf.keras is {K.__name__}")
    if LEGACY:
        import keras

        # The Keras 3 package stays importable beside tf_keras.
        expect(keras.__version__.startswith("3."), keras.__version__)


@check
def every_optimizer_family_and_subclass_trains_on_the_average():
    # One sample per rank: x = r + 1, y = 1, w = 0, so dL/dw = -2 (r + 1) and
    # the average over the ranks is -(N + 1); one SGD step of 0.1 gives
    # w = 0.1 (N + 1) on every rank.
    for label, cls in _optimizer_families():
        model = _linear()
        opt = hvd.DistributedOptimizer(cls(learning_rate=0.1))
        expect(type(opt).__name__ == cls.__name__ and isinstance(opt, cls),
               f"{label}: {type(opt).__mro__}")
        model.compile(optimizer=opt, loss="mse")
        model.fit(np.full((1, 1), R + 1.0, np.float32), np.ones((1, 1), np.float32),
                  batch_size=1, epochs=1, verbose=0)
        close(model.get_weights()[0], [[0.1 * (N + 1)]])
    # Adam of each family: the ranks stay equal.
    adams = [K.optimizers.legacy.Adam, K.optimizers.Adam] if LEGACY else [K.optimizers.Adam]
    for cls in adams:
        model = _linear(use_bias=True)
        model.compile(optimizer=hvd.DistributedOptimizer(cls(0.01)), loss="mse")
        model.fit(np.full((4, 1), R + 1.0, np.float32), np.full((4, 1), R, np.float32),
                  batch_size=2, epochs=2, verbose=0)
        for w in model.get_weights():
            got = everyone(w)
            close(got, np.broadcast_to(got[0], got.shape))
    if not LEGACY:
        return
    # Keras 2's own paths: minimize (legacy _compute_gradients, new
    # compute_gradients) eagerly and get_gradients in a graph.
    for label, cls in _optimizer_families():
        v = tf.Variable([0.0, 0.0])
        opt = hvd.DistributedOptimizer(cls(learning_rate=1.0))
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(v * tf.constant([R + 1.0, 2.0 * R]))
        opt.minimize(loss, [v], tape=tape)
        close(v.numpy(), [-(N + 1) / 2.0, -(N - 1.0)])
    graph = tf.Graph()
    with graph.as_default():
        v = tf.compat.v1.Variable([1.0])
        opt = hvd.DistributedOptimizer(K.optimizers.legacy.SGD(1.0))
        (g,) = opt.get_gradients(tf.reduce_sum(v * float(R + 1)), [v])
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            close(sess.run(g), [(N + 1) / 2.0])


@check
def a_wrong_optimizer_is_refused_with_the_families_named():
    try:
        hvd.DistributedOptimizer(object())
    except TypeError as e:
        expect("Keras 2 (tf_keras)" in str(e) and "Keras 3" in str(e), str(e))
    else:
        raise AssertionError("DistributedOptimizer(object()) was accepted")


def _apply_step(opt, v, coeffs):
    """One pass of the optimizer on loss = sum(v * coeffs): gradients
    `coeffs`, through Keras 2's minimize or Keras 3's apply."""
    if hasattr(opt, "minimize") and LEGACY:
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(v * tf.constant(coeffs, tf.float32))
        opt.minimize(loss, [v], tape=tape)
    else:
        opt.apply([tf.constant(coeffs, tf.float32)], [v])


@check
def backward_passes_per_step_aggregate_and_meet_inf_gradients():
    for label, cls in _optimizer_families():
        for average in (False, True):
            v = tf.Variable([0.0, 0.0])
            opt = hvd.DistributedOptimizer(cls(learning_rate=1.0), backward_passes_per_step=2,
                                           average_aggregated_gradients=average)
            # Two passes: gradients (r+1, 1) then (2(r+1), 3): nothing moves
            # after the first; after the second v = -(reduced sum).
            _apply_step(opt, v, [R + 1.0, 1.0])
            close(v.numpy(), [0.0, 0.0])
            _apply_step(opt, v, [2.0 * (R + 1), 3.0])
            scale = 0.5 if average else 1.0
            close(v.numpy(), [-scale * 3 * (N + 1) / 2.0, -scale * 4.0])
            # A pass whose gradient is inf on rank 0: the reduced gradient is
            # inf everywhere, and the next aggregation starts from zero again.
            v.assign([0.0, 0.0])
            _apply_step(opt, v, [np.inf if R == 0 else 1.0, 1.0])
            _apply_step(opt, v, [1.0, 1.0])
            expect(np.isneginf(v.numpy()[0]) and np.isfinite(v.numpy()[1]),
                   f"{label}: {v.numpy()}")
            # The inf reached the optimizer's own slots too (Keras 2's new SGD
            # keeps a momentum buffer even at momentum 0, and 0 * inf is
            # NaN): clear them, so that only Kolo's aggregation carries on.
            v.assign([0.0, 0.0])
            slots = opt.variables() if callable(opt.variables) else opt.variables
            for slot in slots:
                if tuple(slot.shape) == (2,):
                    slot.assign(tf.zeros_like(slot))
            _apply_step(opt, v, [1.0, 1.0])
            _apply_step(opt, v, [1.0, 1.0])
            close(v.numpy(), [-2.0 * scale, -2.0 * scale])
            if LEGACY:
                expect(int(opt.iterations.numpy()) == 6, f"{label}: {opt.iterations.numpy()}")
    # In model.fit (compiled): 2 batches of one sample, x = (r+1) and
    # 2(r+1), one update from their summed gradients.
    for label, cls in _optimizer_families():
        model = _linear()
        model.compile(optimizer=hvd.DistributedOptimizer(cls(0.01), backward_passes_per_step=2),
                      loss="mse")
        model.fit(np.array([[R + 1.0], [2.0 * (R + 1)]], np.float32),
                  np.ones((2, 1), np.float32), batch_size=1, epochs=1, shuffle=False, verbose=0)
        close(model.get_weights()[0], [[0.01 * 3 * (N + 1)]])


def _two_branches():
    inp = K.Input((1,))
    shared = K.layers.Dense(1, use_bias=False, kernel_initializer="zeros", name="shared")
    local = K.layers.Dense(1, use_bias=False, kernel_initializer="zeros", name="local")
    return K.Model(inp, K.layers.Add()([shared(inp), local(inp)])), shared, local


@check
def partial_distributed_optimizer_keeps_local_layers_local():
    # pred = (ws + wl) x, x = r + 1, y = 1: both gradients are -2 (r + 1);
    # the shared one is averaged, the local one divided by N.
    for label, cls in _optimizer_families():
        for passes in (1, 2):
            model, shared, local = _two_branches()
            opt = hvd.PartialDistributedOptimizer(cls(0.1), local_layers=[local],
                                                  backward_passes_per_step=passes)
            model.compile(optimizer=opt, loss="mse")
            model.fit(np.full((passes, 1), R + 1.0, np.float32),
                      np.ones((passes, 1), np.float32), batch_size=1, epochs=1, verbose=0)
            close(shared.get_weights()[0], [[0.1 * (N + 1) * passes]])
            close(local.get_weights()[0], [[0.2 * (R + 1) / N * passes]])


@check
def partial_distributed_gradient_tape_on_keras_variables():
    model, shared, local = _two_branches()
    model(np.ones((1, 1), np.float32))
    with tf.GradientTape() as tape:
        pred = model(np.full((1, 1), R + 1.0, np.float32))
        loss = tf.reduce_mean(tf.square(pred - 1.0))
    tape = hvd.PartialDistributedGradientTape(tape, local_layers=[local])
    g_shared, g_local = tape.gradient(loss, shared.trainable_variables
                                      + local.trainable_variables)
    close(g_shared, [[-(N + 1.0)]])
    close(g_local, [[-2.0 * (R + 1) / N]])


@check
def broadcast_callback_leaves_local_variables_alone():
    inp = K.Input((1,))
    a = K.layers.Dense(1, kernel_initializer=K.initializers.Constant(R + 1.0), name="a")
    b = K.layers.Dense(1, kernel_initializer=K.initializers.Constant(10.0 * (R + 1)), name="b")
    model = K.Model(inp, b(a(inp)))
    model.compile(optimizer=hvd.DistributedOptimizer(K.optimizers.SGD(0.0)), loss="mse")
    cb = hvd.callbacks.BroadcastGlobalVariablesCallback(0, local_variables=[b.kernel])
    model.fit(np.ones((2, 1), np.float32), np.ones((2, 1), np.float32), batch_size=1,
              epochs=1, verbose=0, callbacks=[cb])
    close(a.get_weights()[0], [[1.0]])
    close(b.get_weights()[0], [[10.0 * (R + 1)]])
    # Positional device argument, as Horovod's signature has it.
    hvd.BroadcastGlobalVariablesCallback(0, "", [a.kernel])


@check
def sync_batch_normalization_matches_one_process():
    def batch(r):
        return np.random.RandomState(40 + r).normal(size=(r + 2, 2, 3)).astype(np.float32)

    sync = hvd.SyncBatchNormalization(momentum=0.5, fused=False)
    ref = K.layers.BatchNormalization(momentum=0.5)
    x = tf.constant(batch(R))
    everything = tf.constant(np.concatenate([batch(r) for r in range(N)]))
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = sync(x, training=True)
        loss = tf.reduce_sum(y * tf.range(1.0, 4.0))
    grad = tape.gradient(loss, x)
    with tf.GradientTape() as tape:
        tape.watch(everything)
        y_all = ref(everything, training=True)
        loss_all = tf.reduce_sum(y_all * tf.range(1.0, 4.0))
    grad_all = tape.gradient(loss_all, everything)
    start = sum(r + 2 for r in range(R))
    close(y.numpy(), y_all.numpy()[start:start + R + 2], rtol=1e-4)
    close(grad.numpy(), grad_all.numpy()[start:start + R + 2], rtol=1e-3)
    close(sync.moving_mean.numpy(), ref.moving_mean.numpy(), rtol=1e-4)
    close(sync.moving_variance.numpy(), ref.moving_variance.numpy(), rtol=1e-4)
    try:
        hvd.SyncBatchNormalization(fused=True)
    except ValueError as e:
        expect("fused" in str(e), str(e))
    else:
        raise AssertionError("fused=True was accepted")
    # In a compiled fit, the channel axis first as well.
    model = K.Sequential([K.Input((2, 3)), hvd.SyncBatchNormalization(axis=1),
                          K.layers.Flatten(), K.layers.Dense(1)])
    model.compile(optimizer=hvd.DistributedOptimizer(K.optimizers.SGD(0.01)), loss="mse")
    model.fit(batch(R), np.ones((R + 2, 1), np.float32), batch_size=8, epochs=1, verbose=0,
              callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0)])
    for w in model.get_weights():
        got = everyone(w)
        close(got, np.broadcast_to(got[0], got.shape), rtol=1e-4)


@check
def horovod_keras_program_with_callbacks():
    # The shape of Horovod's Keras examples: scaled learning rate, warmup,
    # metric averaging, broadcast; the ranks end with the same weights.
    rng = np.random.RandomState(R)
    x = rng.normal(size=(32, 4)).astype(np.float32)
    y = (x.sum(axis=1, keepdims=True) > 0).astype(np.float32)
    tf.random.set_seed(R)
    model = K.Sequential([K.Input((4,)), K.layers.Dense(8, activation="relu"),
                          K.layers.Dense(1, activation="sigmoid")])
    opt = K.optimizers.legacy.SGD(0.01 * N, momentum=0.9) if LEGACY else \
        K.optimizers.SGD(0.01 * N, momentum=0.9)
    model.compile(optimizer=hvd.DistributedOptimizer(opt), loss="binary_crossentropy",
                  metrics=["accuracy"])
    callbacks = [hvd.callbacks.BroadcastGlobalVariablesCallback(0),
                 hvd.callbacks.MetricAverageCallback(),
                 hvd.callbacks.LearningRateWarmupCallback(initial_lr=0.01 * N, warmup_epochs=2,
                                                          momentum_correction=False)]
    hist = model.fit(x, y, batch_size=8, epochs=3, verbose=0, callbacks=callbacks)
    loss = everyone(hist.history["loss"][-1])
    close(loss, np.full_like(loss, loss[0]))
    for w in model.get_weights():
        got = everyone(w)
        close(got, np.broadcast_to(got[0], got.shape), rtol=1e-4)



@check
def load_model_keeps_the_optimizer_state_and_trains_on_the_average():
    kinds = [K.optimizers.legacy.SGD, K.optimizers.SGD] if LEGACY else [K.optimizers.SGD]
    for cls in kinds:
        model = _linear()
        model.compile(optimizer=hvd.DistributedOptimizer(cls(0.1, momentum=0.5)), loss="mse")
        x = np.full((1, 1), R + 1.0, np.float32)
        y = np.ones((1, 1), np.float32)
        model.fit(x, y, batch_size=1, epochs=1, verbose=0)
        # Each rank its own file: the ranks write at the same time.
        # tf_keras keeps a legacy optimizer's slots in .h5 files only.
        ext = "h5" if "legacy" in cls.__module__ else "keras"
        path = os.path.join(os.environ["KOLO_TEST_OUT"], f"{cls.__name__}.{R}.{ext}")
        model.save(path)
        loaded = hvd.load_model(path)
        expect(getattr(loaded.optimizer, "_kolo_distributed", False),
               f"{type(loaded.optimizer).__mro__}")
        expect(int(loaded.optimizer.iterations.numpy()) == 1, "iterations")
        # The next step on both: same weights, momentum kept.
        model.fit(x, y, batch_size=1, epochs=1, verbose=0)
        loaded.fit(x, y, batch_size=1, epochs=1, verbose=0)
        close(loaded.get_weights()[0], model.get_weights()[0])



@check
def distributed_model_and_best_model_checkpoint():
    # DistributedModel wraps the compiled optimizer (a name, as Keras takes
    # it) and broadcasts rank 0's start; one SGD step on x = r + 1, y = 1
    # from rank 0's w gives the same w everywhere.
    tf.random.set_seed(R)
    inp = K.Input((1,))
    model = hvd.DistributedModel(K.Model(inp, K.layers.Dense(1, use_bias=False)(inp)))
    w0 = everyone(model.get_weights()[0])[0]
    model.compile(optimizer="sgd", loss="mse")
    expect(getattr(model.optimizer, "_kolo_distributed", False), f"{type(model.optimizer)}")
    path = os.path.join(os.environ["KOLO_TEST_OUT"], "best.h5")
    ckpt = hvd.callbacks.BestModelCheckpoint(monitor="loss", filepath=path)
    model.fit(np.full((1, 1), R + 1.0, np.float32), np.ones((1, 1), np.float32), batch_size=1,
              epochs=1, verbose=0, callbacks=[ckpt])
    got = everyone(model.get_weights()[0])
    close(got, np.broadcast_to(got[0], got.shape))
    if not LEGACY:  # Keras 3 broadcasts before the step, Keras 2 after it
        grads = [-2 * (r + 1) * (1 - w0[0, 0] * (r + 1)) for r in range(N)]
        close(got[0], w0 - 0.01 * np.mean(grads))
    hvd.barrier()
    expect(os.path.exists(path), "rank 0 saved no checkpoint")


run(hvd.rank)
hvd.shutdown()
