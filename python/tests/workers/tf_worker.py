"""Checks of kolo.tensorflow, eager and in tf.function, run on every rank."""

import os
import time
import warnings

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import keras  # noqa: E402

import kolo.tensorflow as hvd  # noqa: E402
from harness import check, run  # noqa: E402
from trace_check import read_trace  # noqa: E402

PAIR = hvd.ProcessSet([0, 1])
hvd.init(process_sets=[PAIR])  # a static process set, registered at init
R, N = hvd.rank(), hvd.size()
MODES = {"eager": lambda f: f, "function": tf.function}


def expect(cond, msg):
    if not cond:
        raise AssertionError(msg)


def close(a, b, rtol=1e-5):
    np.testing.assert_allclose(np.asarray(a, np.float64), np.asarray(b, np.float64),
                               rtol=rtol, atol=1e-5)


@check
def topology():
    expect(hvd.is_initialized() and hvd.size() == N and 0 <= hvd.rank() < N, "rank/size")
    expect(hvd.local_size() == N and hvd.local_rank() == R, "local")
    expect(hvd.cross_size() == 1 and hvd.cross_rank() == 0, "cross")


def _allreduce_all(x):
    return (hvd.allreduce(x), hvd.allreduce(x, op=hvd.Sum), hvd.allreduce(x, op=hvd.Min),
            hvd.allreduce(x, op=hvd.Max), hvd.allreduce(x + 1, op=hvd.Product),
            hvd.allreduce(x, op=hvd.Sum, prescale_factor=2.0, postscale_factor=0.25))


def _check_allreduce(fn):
    x = tf.constant([[1.0, 2.0], [3.0, 4.0]]) * (R + 1)
    base = np.array([[1.0, 2.0], [3.0, 4.0]])
    s = N * (N + 1) / 2
    avg, tot, mn, mx, prod, scaled = fn(x)
    close(avg, base * s / N)
    close(tot, base * s)
    close(mn, base)
    close(mx, base * N)
    close(prod, np.prod([base * (r + 1) + 1 for r in range(N)], axis=0))
    close(scaled, base * s * 0.5)


@check
def allreduce_eager():
    _check_allreduce(_allreduce_all)


@check
def allreduce_function():
    _check_allreduce(tf.function(_allreduce_all))


@check
def allreduce_dtypes_and_compression():
    for mode, wrap in MODES.items():
        for dt in [tf.int16, tf.uint16, tf.int32, tf.int64, tf.float16, tf.float64, tf.uint8]:
            y = wrap(lambda: hvd.allreduce(tf.ones([3], dt) * (R + 1), op=hvd.Sum))()
            expect(y.dtype == dt, f"{mode} {dt}: {y.dtype}")
            close(y, np.full([3], N * (N + 1) / 2))
        for dt in [tf.float32, tf.float64]:
            y = wrap(lambda: hvd.allreduce(tf.linspace(0.0, 1.0, 16) * (R + 1) if dt == tf.float32
                                           else tf.cast(tf.linspace(0.0, 1.0, 16), tf.float64) * (R + 1),
                                           compression=hvd.Compression.fp16))()
            expect(y.dtype == dt, f"{mode} compressed dtype {y.dtype}")
            close(y, np.linspace(0, 1, 16) * (N + 1) / 2, rtol=1e-2)


@check
def compressor_api_and_compressors_of_ones_own():
    # Horovod's contract: fp16 compresses floating tensors to float16 with
    # their dtype as the context; decompress restores it.
    for dt in (tf.float32, tf.float64, tf.float16):
        c, ctx = hvd.Compression.fp16.compress(tf.ones([3], dt))
        expect(c.dtype == tf.float16 and ctx == dt, f"fp16.compress({dt}): {c.dtype}, {ctx}")
        expect(hvd.Compression.fp16.decompress(c, ctx).dtype == dt, f"decompress {dt}")
    c, ctx = hvd.Compression.fp16.compress(tf.ones([3], tf.int32))
    expect(c.dtype == tf.int32 and hvd.Compression.fp16.decompress(c, ctx).dtype == tf.int32,
           "fp16 leaves int32 as it is")
    c, ctx = hvd.Compression.none.compress(tf.ones([3]))
    expect(c.dtype == tf.float32 and hvd.Compression.none.decompress(c, ctx).dtype == tf.float32,
           "none")
    calls = []

    class Halves(hvd.Compression.none):
        # Sends x / 2 as float64, doubles the result back into x's dtype.
        @staticmethod
        def compress(tensor):
            calls.append("compress")
            return tf.cast(tensor, tf.float64) / 2, tensor.dtype

        @staticmethod
        def decompress(tensor, ctx):
            calls.append("decompress")
            return tf.cast(tensor * 2, ctx)

    class Fp16Counted(hvd.Compression.fp16):
        @staticmethod
        def compress(tensor):
            calls.append("fp16 compress")
            return hvd.Compression.fp16.compress(tensor)

    x = tf.linspace(0.0, 1.0, 8) * (R + 1)
    want = np.linspace(0, 1, 8) * N * (N + 1) / 2
    for mode, wrap in MODES.items():
        del calls[:]
        y = wrap(lambda: hvd.allreduce(x, op=hvd.Sum, compression=Halves))()
        expect(y.dtype == tf.float32 and calls == ["compress", "decompress"], f"{mode}: {calls}")
        close(y, want)
        del calls[:]
        a, b = wrap(lambda: hvd.grouped_allreduce([x, tf.cast(x, tf.float64)], op=hvd.Sum,
                                                  compression=Halves))()
        expect(a.dtype == tf.float32 and b.dtype == tf.float64, f"{mode}: {a.dtype} {b.dtype}")
        expect(calls.count("compress") == 2, f"{mode} grouped: {calls}")
        close(a, want)
        close(b, want)
        del calls[:]
        y = wrap(lambda: hvd.allreduce(x, op=hvd.Sum, compression=Fp16Counted))()
        expect(y.dtype == tf.float32 and calls == ["fp16 compress"], f"{mode}: {calls}")
        close(y, want, rtol=1e-2)
        for comp in (hvd.Compression.fp16, hvd.Compression.bf16):
            y = wrap(lambda: hvd.reducescatter(tf.ones([N, 2]) * (R + 1), op=hvd.Sum,
                                               compression=comp))()
            expect(y.dtype == tf.float32, f"{mode} reducescatter: {y.dtype}")
            close(y, np.full([1, 2], N * (N + 1) / 2), rtol=1e-2)
    # DistributedGradientTape and DistributedOptimizer honour both.
    for comp in (Halves, hvd.Compression.fp16):
        w = tf.Variable([1.0, 2.0])
        del calls[:]
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(w * float(R + 1))
        (g,) = hvd.DistributedGradientTape(tape, compression=comp).gradient(loss, [w])
        expect(g.dtype == tf.float32, f"tape {comp.__name__}: {g.dtype}")
        close(g, np.full([2], (N + 1) / 2), rtol=1e-2)
        expect((calls == ["compress", "decompress"]) == (comp is Halves), f"tape: {calls}")
        keras.utils.set_random_seed(R)
        model = keras.Sequential([keras.Input([4]), keras.layers.Dense(1)])
        model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.05),
                                                         compression=comp), loss="mse")
        rng = np.random.default_rng(R)
        del calls[:]
        model.fit(rng.normal(size=[32, 4]).astype(np.float32),
                  rng.normal(size=[32, 1]).astype(np.float32), batch_size=16, epochs=1,
                  verbose=0, callbacks=[hvd.BroadcastGlobalVariablesCallback(0)])
        expect(comp is not Halves or "compress" in calls, f"optimizer: {calls}")
        flat = np.concatenate([v.numpy().ravel() for v in model.trainable_variables])
        gathered = hvd.allgather(tf.constant(flat[None, :])).numpy()
        for r in range(N):
            close(gathered[r], gathered[0])


@check
def grouped_allreduce():
    for mode, wrap in MODES.items():
        outs = wrap(lambda: hvd.grouped_allreduce(
            [tf.ones([2]) * R, tf.ones([2, 2], tf.int64)], op=hvd.Sum))()
        close(outs[0], np.full([2], N * (N - 1) / 2))
        close(outs[1], np.full([2, 2], N))


@check
def broadcast():
    for mode, wrap in MODES.items():
        for root in range(N):
            y = wrap(lambda: hvd.broadcast(tf.range(4) * (R + 1), root))()
            close(y, np.arange(4) * (root + 1))


@check
def broadcast_variables():
    v = tf.Variable(tf.ones([3]) * R)
    kv = keras.Variable(np.full([2], R, np.float32))
    hvd.broadcast_variables([v, kv], root_rank=N - 1)
    close(v.numpy(), np.full([3], N - 1))
    close(kv.numpy(), np.full([2], N - 1))
    w = tf.Variable(tf.ones([2]) * R)
    tf.function(lambda: hvd.broadcast_variables([w], root_rank=0))()
    close(w.numpy(), np.zeros([2]))


@check
def broadcast_and_allgather_object():
    expect(hvd.broadcast_object({"from": R}, root_rank=1) == {"from": 1}, "broadcast_object")
    expect(hvd.allgather_object(R * 10) == [r * 10 for r in range(N)], "allgather_object")


@check
def objects_in_a_tf1_graph_and_broadcast_object_fn():
    graph = tf.Graph()
    with graph.as_default(), tf.compat.v1.Session(graph=graph) as sess:
        got = hvd.broadcast_object({"from": R}, root_rank=N - 1, session=sess)
        expect(got == {"from": N - 1}, f"graph broadcast_object: {got}")
        with sess.as_default():  # the default session serves too
            got = hvd.allgather_object(("rank", R))
        expect(got == [("rank", r) for r in range(N)], f"graph allgather_object: {got}")
    # Lambdas travel (cloudpickle), and a broadcast_object_fn serves many calls.
    fn = hvd.broadcast_object(lambda x: x + 10 * R, root_rank=1)
    expect(fn(1) == 11, f"lambda from rank 1 gives {fn(1)}")
    bcast = hvd.broadcast_object_fn(root_rank=N - 1)
    expect(bcast(R) == N - 1 and bcast([R]) == [N - 1], "broadcast_object_fn")


@check
def allgather():
    want = np.concatenate([np.full([r + 1, 2], r) for r in range(N)])
    for mode, wrap in MODES.items():
        y = wrap(lambda: hvd.allgather(tf.fill([R + 1, 2], R)))()
        expect(tuple(y.shape) == want.shape and (y.numpy() == want).all(), f"{mode}: {y}")


@check
def reducescatter():
    rows = 2 * N
    x = np.arange(rows * 3, dtype=np.float32).reshape(rows, 3)
    for mode, wrap in MODES.items():
        y = wrap(lambda: hvd.reducescatter(tf.constant(x) * (R + 1), op=hvd.Sum))()
        close(y, x[2 * R:2 * R + 2] * N * (N + 1) / 2)


@check
def alltoall():
    splits = [j + 1 for j in range(N)]
    x = np.concatenate([np.full([j + 1], 100 * R + j) for j in range(N)])
    want = np.concatenate([np.full([R + 1], 100 * r + R) for r in range(N)])
    for mode, wrap in MODES.items():
        out, received = wrap(lambda: hvd.alltoall(tf.constant(x), splits=splits))()
        expect((out.numpy() == want).all(), f"{mode}: {out}")
        expect(list(received.numpy()) == [R + 1] * N, f"{mode}: {received}")


def _expect_error(error, what, call, says):
    """`call` raises `error` (a tf.errors class) whose message has `says`."""
    try:
        call()
    except error as e:
        expect(says in e.message, f"{what} on {R}: {e.message}")
    else:
        raise AssertionError(f"{what}: no {error.__name__} on rank {R}")


def _expect_invalid(what, call, says):
    _expect_error(tf.errors.InvalidArgumentError, what, call, says)


@check
def alltoall_bad_splits_raise_invalid_argument_on_every_rank():
    # Horovod's contract: splits that sum past the first dimension, or that
    # are not one per rank, raise InvalidArgumentError where they are passed,
    # with the op's own message (kolod's would differ); the name can be used
    # again at once, unnamed eager alltoalls (which share one) included.
    short = tf.range(N - 1, dtype=tf.float32)
    for mode, wrap in MODES.items():
        _expect_invalid(f"{mode} sum", wrap(lambda: hvd.alltoall(
            short, splits=tf.ones([N], tf.int32), name=f"a2a.sum.{mode}")),
            "more than the first dimension")
        _expect_invalid(f"{mode} length", wrap(lambda: hvd.alltoall(
            tf.range(N + 1), splits=[1] * (N + 1), name=f"a2a.len.{mode}")),
            f"{N + 1} splits for a process set of {N} ranks")
        if PAIR.included():
            _expect_invalid(f"{mode} set length", wrap(lambda: hvd.alltoall(
                tf.range(3), splits=[1, 1, 1], process_set=PAIR, name=f"a2a.set.{mode}")),
                "3 splits for a process set of 2 ranks")
        _expect_invalid(f"{mode} unnamed", wrap(lambda: hvd.alltoall(short, splits=[1] * N)),
                        "more than the first dimension")
        out, _ = wrap(lambda: hvd.alltoall(tf.range(N) * (R + 1), splits=[1] * N))()
        expect(list(out.numpy()) == [R * (r + 1) for r in range(N)], f"{mode} unnamed: {out}")
        out, _ = wrap(lambda: hvd.alltoall(tf.range(N) * (R + 1), splits=[1] * N,
                                           name=f"a2a.sum.{mode}"))()
        expect(list(out.numpy()) == [R * (r + 1) for r in range(N)], f"{mode} retried: {out}")
    try:
        hvd.alltoall(tf.range(N), splits=tf.ones([N]), name="a2a.float")
    except ValueError as e:
        expect("integers" in str(e), str(e))
    else:
        raise AssertionError("float splits accepted")
    graph = tf.Graph()
    with graph.as_default():
        sp = tf.compat.v1.placeholder(tf.int32, [None])
        out, _ = hvd.alltoall(tf.range(N - 1, dtype=tf.float32), splits=sp, name="a2a.graph")
        with tf.compat.v1.Session(graph=graph) as sess:
            _expect_invalid("graph sum", lambda: sess.run(out, {sp: np.ones([N])}),
                            "more than the first dimension")
    # Only the last rank passes bad splits: it gets InvalidArgumentError,
    # the others kolod's refusal naming it, none waits.
    last = R == N - 1
    for mode, wrap in MODES.items():
        try:
            wrap(lambda: hvd.alltoall(tf.range(N) if not last else tf.range(N - 1),
                                      splits=[1] * N, name=f"a2a.one.{mode}"))()
        except tf.errors.InvalidArgumentError as e:
            expect(last and "more than the first dimension" in e.message, f"{R}: {e.message}")
        except tf.errors.FailedPreconditionError as e:
            expect(not last and f"rank {N - 1}'s splits sum" in e.message, f"{R}: {e.message}")
        else:
            raise AssertionError(f"{mode}: no error on rank {R}")
    out, received = hvd.alltoall(tf.range(N) * (R + 1), splits=[1] * N, name="a2a.after")
    expect(list(out.numpy()) == [R * (r + 1) for r in range(N)], f"after: {out}")


@check
def barrier():
    hvd.barrier()
    tf.function(lambda: hvd.barrier())()


@check
def allreduce_gradient():
    for mode, wrap in MODES.items():
        x = tf.Variable(tf.ones([3]))

        def step():
            with tf.GradientTape() as tape:
                y = hvd.allreduce(x * (R + 1), op=hvd.Sum)
                loss = tf.reduce_sum(y)
            return tape.gradient(loss, x)

        g = wrap(step)()
        # d/dx sum_r allreduce(x*(r+1)) on this rank: the allreduce of the
        # upstream ones (N) times this rank's factor.
        close(g, np.full([3], N * (R + 1)))


@check
def distributed_gradient_tape():
    for mode, wrap in MODES.items():
        w = tf.Variable([1.0, 2.0])

        def step():
            with tf.GradientTape() as tape:
                loss = tf.reduce_sum(w * float(R + 1))
            tape = hvd.DistributedGradientTape(tape)
            return tape.gradient(loss, [w])

        (g,) = wrap(step)()
        close(g, np.full([2], (N + 1) / 2))


@check
def keras_fit_distributed_optimizer():
    # Each rank trains on different data; averaged gradients keep the
    # weights identical on every rank.
    keras.utils.set_random_seed(R)  # different initial weights too
    model = keras.Sequential([keras.Input([4]), keras.layers.Dense(3), keras.layers.Dense(1)])
    opt = hvd.DistributedOptimizer(keras.optimizers.SGD(0.05))
    model.compile(optimizer=opt, loss="mse")
    rng = np.random.default_rng(R)
    x = rng.normal(size=[64, 4]).astype(np.float32)
    y = rng.normal(size=[64, 1]).astype(np.float32)
    model.fit(x, y, batch_size=16, epochs=2, verbose=0,
              callbacks=[hvd.BroadcastGlobalVariablesCallback(0), hvd.MetricAverageCallback()])
    flat = np.concatenate([v.numpy().ravel() for v in model.trainable_variables])
    gathered = hvd.allgather(tf.constant(flat[None, :])).numpy()
    for r in range(N):
        close(gathered[r], gathered[0])


@check
def distributed_model_and_metric_average():
    keras.utils.set_random_seed(R)
    model = hvd.DistributedModel(keras.Sequential([keras.Input([2]), keras.layers.Dense(1)]))
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse")
    expect(getattr(model.optimizer, "_kolo_distributed", False), "compile did not wrap")
    x = np.full([8, 2], R + 1, np.float32)
    hist = model.fit(x, x[:, :1], epochs=1, verbose=0, callbacks=[hvd.MetricAverageCallback()])
    loss = hist.history["loss"][-1]
    losses = hvd.allgather(tf.constant([loss], tf.float64)).numpy()
    close(losses, np.full([N], losses[0]))
    flat = np.concatenate([v.numpy().ravel() for v in model.trainable_variables])
    gathered = hvd.allgather(tf.constant(flat[None, :])).numpy()
    for r in range(N):
        close(gathered[r], gathered[0])


@check
def mismatch_raises_in_eager():
    try:
        hvd.allreduce(tf.ones([2 + R]), name="tf.mismatch.eager")
    except tf.errors.FailedPreconditionError as e:
        expect("tf.mismatch.eager" in e.message, e.message)
    else:
        raise AssertionError("no error for mismatched shapes")


@check
def mismatch_raises_in_function():
    f = tf.function(lambda: hvd.allreduce(tf.ones([2 + R]), name="tf.mismatch.function"))
    try:
        f()
    except tf.errors.FailedPreconditionError as e:
        expect("tf.mismatch.function" in e.message, e.message)
    else:
        raise AssertionError("no error for mismatched shapes")


@check
def mismatches_raise_in_a_tf1_graph():
    # Each collective with ranks that disagree, run by a session: every rank
    # gets FailedPreconditionError naming the tensor.
    graph = tf.Graph()
    with graph.as_default():
        last = R == N - 1
        cases = {
            "g3.allreduce.shape": hvd.allreduce(tf.ones([2 + R]), name="g3.allreduce.shape"),
            "g3.allgather.cols": hvd.allgather(tf.ones([1, 2 + R]), name="g3.allgather.cols"),
            "g3.broadcast.root": hvd.broadcast(tf.ones([2]), root_rank=1 if last else 0,
                                               name="g3.broadcast.root"),
            "g3.reducescatter.op": hvd.reducescatter(tf.ones([N, 2]),
                                                     op=hvd.Sum if last else hvd.Average,
                                                     name="g3.reducescatter.op"),
            "g3.alltoall.dtype": hvd.alltoall(tf.ones([N], tf.int32 if last else tf.float32),
                                              name="g3.alltoall.dtype"),
        }
        with tf.compat.v1.Session(graph=graph) as sess:
            for name, out in cases.items():
                _expect_error(tf.errors.FailedPreconditionError, name,
                              lambda: sess.run(out), name)


@check
def horovod_names_ops_and_static_process_set():
    expect(PAIR.process_set_id is not None, "init(process_sets=) registered the set")
    if PAIR.included():
        close(hvd.allreduce(tf.constant([1.0]), op=hvd.Sum, process_set=PAIR,
                            name="tf.static.set"), [2.0])
    expect(int(hvd.rank_op()) == R and int(hvd.size_op()) == N, "rank_op/size_op")
    expect(int(hvd.local_rank_op()) == R and int(hvd.local_size_op()) == N, "local ops")
    expect(int(hvd.size_op(PAIR.process_set_id)) == 2, "size_op of a process set")
    expect(int(hvd.process_set_included_op(PAIR.process_set_id)) == int(R < 2),
           "process_set_included_op")
    # What the build found: NCCL's version code (0 without it); CUDA tensors
    # are served exactly when NCCL is there.
    from kolo._native import core
    expect(hvd.nccl_built() == core.NCCL_VERSION and hvd.cuda_built() is (core.NCCL_VERSION != 0)
           and not hvd.mpi_built(), "built flags")
    close(hvd.allreduce(tf.ones([2]), op=hvd.Adasum), [1.0, 1.0])  # equal tensors stay
    vs = [tf.Variable([float(R)] * 2), tf.Variable(float(R * 10))]
    vals = hvd.broadcast_(vs, root_rank=N - 1)  # the new values, as in Horovod
    close(vals[1], float((N - 1) * 10))
    close(vs[0].numpy(), [float(N - 1)] * 2)
    close(vs[1].numpy(), float((N - 1) * 10))


@check
def broadcast_global_variables_in_a_graph():
    graph = tf.Graph()
    with graph.as_default():
        v = tf.compat.v1.get_variable("v", initializer=tf.constant([float(R)] * 3))
        bcast = hvd.broadcast_global_variables(0)
        with tf.compat.v1.Session(graph=graph) as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            sess.run(bcast)
            close(sess.run(v), [0.0] * 3)


@check
def learning_rate_callbacks_and_load_model():
    keras.utils.set_random_seed(5)  # the same initial weights on every rank
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.04)), loss="mse")
    x, y = np.ones((32, 3), np.float32), np.ones((32, 1), np.float32)
    seen = []
    record = keras.callbacks.LambdaCallback(
        on_train_batch_begin=lambda b, logs: seen.append(float(model.optimizer.learning_rate)))
    warmup = hvd.LearningRateWarmupCallback(0.04, warmup_epochs=2)
    model.fit(x, y, batch_size=8, epochs=3, verbose=0, callbacks=[warmup, record])
    # 4 steps per epoch: lr = 0.04/N * (epoch * (N-1)/2 + 1), epoch fractional.
    want = [0.04 / N * ((e + b / 4) * (N - 1) / 2 + 1) for e in range(2) for b in range(4)]
    close(seen[:8], want)
    close(seen[8:], [0.04] * 4)  # after the warmup: the full rate
    seen.clear()
    sched = hvd.LearningRateScheduleCallback(0.04, lambda epoch: 0.5 ** epoch, start_epoch=1)
    model.fit(x, y, batch_size=8, epochs=3, verbose=0, callbacks=[sched, record])
    close(seen, [0.04] * 4 + [0.02] * 4 + [0.01] * 4)
    path = os.path.join(os.environ["KOLO_TEST_OUT"], f"model.{R}.keras")
    model.save(path)
    steps = int(model.optimizer.iterations.numpy())
    loaded = hvd.load_model(path)
    expect(getattr(loaded.optimizer, "_kolo_distributed", False), "not distributed")
    expect(int(loaded.optimizer.iterations.numpy()) == steps, "optimizer state lost")
    loaded.fit(x * (R + 1), y, batch_size=8, epochs=1, verbose=0)
    w = loaded.layers[0].get_weights()[0].reshape(1, -1)
    gathered = hvd.allgather(tf.constant(w)).numpy()
    expect(np.isfinite(gathered).all() and all(np.allclose(gathered[0], g) for g in gathered),
           f"ranks diverged after load: {gathered}")


@check
def allgather_gradient_in_a_graph_with_unknown_rows():
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, 2])
        g = hvd.allgather(x, name="tf.graph.allgather")
        grad = tf.gradients(tf.reduce_sum(g * 2.0), x)[0]
        with tf.compat.v1.Session(graph=graph) as sess:
            out = sess.run(grad, {x: np.ones((R + 1, 2), np.float32)})
    # Horovod's scaling: the output gradient is averaged over the ranks.
    close(out, np.full((R + 1, 2), 2.0))


@check
def collectives_in_a_tf1_graph():
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, 2])
        outs = {
            "allreduce": hvd.allreduce(x, op=hvd.Sum, name="g1.allreduce"),
            "grouped": hvd.grouped_allreduce([x, x * 2], op=hvd.Sum, name="g1.grouped"),
            "broadcast": hvd.broadcast(x, root_rank=N - 1, name="g1.broadcast"),
            "allgather": hvd.allgather(x, name="g1.allgather"),
            "reducescatter": hvd.reducescatter(x, op=hvd.Sum, name="g1.reducescatter"),
            "alltoall": hvd.alltoall(x, name="g1.alltoall"),
        }
        grads = tf.gradients(tf.reduce_sum(outs["allreduce"]) +
                             tf.reduce_sum(outs["alltoall"][0] if isinstance(outs["alltoall"], tuple)
                                           else outs["alltoall"]), x)[0]
        with tf.compat.v1.Session(graph=graph) as sess:
            got, g = sess.run((outs, grads), {x: np.full((N, 2), float(R + 1), np.float32)})
    total = sum(r + 1 for r in range(N))
    close(got["allreduce"], np.full((N, 2), total))
    close(got["grouped"][1], np.full((N, 2), 2 * total))
    close(got["broadcast"], np.full((N, 2), N))
    close(got["allgather"], np.repeat(np.arange(1, N + 1), N).reshape(-1, 1) * np.ones((1, 2)))
    close(got["reducescatter"], np.full((1, 2), total))
    a2a = got["alltoall"][0] if isinstance(got["alltoall"], tuple) else got["alltoall"]
    close(a2a, np.arange(1, N + 1).reshape(-1, 1) * np.ones((1, 2)))
    close(g, np.full((N, 2), N + 1.0))


@check
def alltoall_without_splits_returns_the_tensor_only():
    for mode, wrap in MODES.items():
        out = wrap(lambda: hvd.alltoall(tf.fill([N, 2], float(R))))()
        expect(isinstance(out, tf.Tensor), f"{mode}: {type(out)}")
        close(out, np.repeat(np.arange(N, dtype=np.float32), 1).reshape(-1, 1) * np.ones((1, 2)))


@check
def grouped_allgather_and_reducescatter():
    rows = 2 * N
    x = np.arange(rows * 2, dtype=np.float32).reshape(rows, 2)
    gathered = np.concatenate([np.full([r + 1, 2], r) for r in range(N)])
    for mode, wrap in MODES.items():
        g = wrap(lambda: hvd.grouped_allgather([tf.fill([R + 1, 2], float(R)),
                                                tf.constant([R], tf.int64)]))()
        close(g[0], gathered)
        expect(g[1].dtype == tf.int64 and list(g[1].numpy()) == list(range(N)), f"{mode}: {g[1]}")
        s = wrap(lambda: hvd.grouped_reducescatter([tf.constant(x) * (R + 1), tf.constant(x)],
                                                   op=hvd.Sum))()
        close(s[0], x[2 * R:2 * R + 2] * N * (N + 1) / 2)
        close(s[1], x[2 * R:2 * R + 2] * N)
    # One op per group (negotiated and fused as a unit), with Horovod's
    # gradients, in a TF1 graph of unknown rows.
    graph = tf.Graph()
    with graph.as_default():
        a = tf.compat.v1.placeholder(tf.float32, [None, 2])
        ga = hvd.grouped_allgather([a, a * 2], name="g2.ga")
        rs = hvd.grouped_reducescatter([a, a * 3], op=hvd.Average, name="g2.rs")
        rs_sum = hvd.grouped_reducescatter([a], op=hvd.Sum, name="g2.rs.sum")
        types = [op.type for op in graph.get_operations()]
        expect(types.count("KoloGroupedAllgather") == 1 and "KoloAllgather" not in types, types)
        expect(types.count("KoloGroupedReducescatter") == 2 and "KoloReducescatter" not in types,
               types)
        loss = sum(tf.reduce_sum(t) for t in ga + rs + rs_sum)
        grad = tf.gradients(loss, a)[0]
        with tf.compat.v1.Session(graph=graph) as sess:
            got_ga, got_rs, g = sess.run((ga, rs, grad), {a: np.full((N, 2), R + 1.0, np.float32)})
    close(got_ga[0], np.repeat(np.arange(1, N + 1), N).reshape(-1, 1) * np.ones((1, 2)))
    close(got_ga[1], 2 * got_ga[0])
    close(got_rs[0], np.full((1, 2), (N + 1) / 2))
    close(got_rs[1], np.full((1, 2), 3 * (N + 1) / 2))
    # allgathers: 1 + 2 (averaged); reducescatter Average: 1 + 3; Sum: N.
    close(g, np.full((N, 2), 7.0 + N))


def _expect_refused_everywhere(what, call):
    """`call` fails on every rank: with the last rank's own error there, and
    with the refusal (naming that rank) on the others."""
    try:
        call()
    except tf.errors.FailedPreconditionError as e:
        expect(R != N - 1 and f"rank {N - 1} refused it" in e.message, f"{what} on {R}: {e}")
    except tf.errors.InvalidArgumentError as e:
        expect(R == N - 1 and "does not support dtype" in e.message, f"{what} on {R}: {e}")
    else:
        raise AssertionError(f"{what}: no error on rank {R}")


@check
def a_collective_one_rank_refuses_fails_on_every_rank():
    last = R == N - 1
    bad = tf.constant([1 + 2j, 3j], tf.complex64)
    good = tf.constant([1.0, 2.0])
    for mode, wrap in MODES.items():
        t = bad if last else good
        _expect_refused_everywhere(
            f"{mode} allreduce",
            wrap(lambda: hvd.allreduce(t, op=hvd.Sum, name=f"refused.{mode}")))
        _expect_refused_everywhere(
            f"{mode} grouped allgather",
            wrap(lambda: hvd.grouped_allgather([good, t], name=f"refused.group.{mode}")))
    graph = tf.Graph()
    with graph.as_default():
        p = tf.compat.v1.placeholder(tf.complex64 if last else tf.float32, [None])
        out = hvd.broadcast(p, root_rank=0, name="refused.graph")
        with tf.compat.v1.Session(graph=graph) as sess:
            _expect_refused_everywhere(
                "graph broadcast",
                lambda: sess.run(out, {p: np.ones([2], np.complex64 if last else np.float32)}))
    close(hvd.allreduce(tf.ones([2]), op=hvd.Sum, name="refused.after"), np.full([2], N))


@check
def a_retry_of_a_failed_name_runs_on_every_rank():
    # Horovod's error tests run one after another, unnamed ops included
    # (every unnamed eager op of a kind shares one name): after an op that
    # every rank refused, one rank refused, or the ranks disagreed on, the
    # same name runs again at once on every rank.
    last = R == N - 1
    bad = tf.constant([1j, 2j], tf.complex64)
    for mode, wrap in MODES.items():
        for name in (f"retry.every.{mode}", None):
            _expect_invalid(f"{mode} every rank refuses {name}",
                            wrap(lambda: hvd.allreduce(bad, name=name)), "does not support dtype")
            close(wrap(lambda: hvd.allreduce(tf.ones([2]), op=hvd.Sum, name=name))(),
                  np.full([2], N))
        _expect_refused_everywhere(f"{mode} one rank refuses", wrap(lambda: hvd.allreduce(
            bad if last else tf.ones([2]), op=hvd.Sum, name=f"retry.one.{mode}")))
        close(wrap(lambda: hvd.allreduce(tf.ones([2]), op=hvd.Sum, name=f"retry.one.{mode}"))(),
              np.full([2], N))
        _expect_error(tf.errors.FailedPreconditionError, f"{mode} shapes",
                      wrap(lambda: hvd.allreduce(tf.ones([2 + R]), name=f"retry.shape.{mode}")),
                      f"retry.shape.{mode}")
        close(wrap(lambda: hvd.allreduce(tf.ones([2]), op=hvd.Sum,
                                         name=f"retry.shape.{mode}"))(), np.full([2], N))
        _expect_invalid(f"{mode} every rank refuses a broadcast",
                        wrap(lambda: hvd.broadcast(bad, 0, name=f"retry.bcast.{mode}")),
                        "does not support dtype")
        close(wrap(lambda: hvd.broadcast(tf.ones([2]) * R, 0, name=f"retry.bcast.{mode}"))(),
              np.zeros([2]))


@check
def tf1_distributed_optimizer_in_a_session():
    # Each rank's loss differs; one SGD step moves every rank's weights by
    # the ranks' average gradient.
    graph = tf.Graph()
    with graph.as_default():
        w = tf.compat.v1.get_variable("w", initializer=tf.constant([1.0, 2.0]))
        loss = tf.reduce_sum(w * float(R + 1))
        opt = hvd.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.5))
        step = opt.minimize(loss)
        bcast = hvd.broadcast_global_variables(0)
        with tf.compat.v1.Session(graph=graph) as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            sess.run(bcast)
            sess.run(step)
            got = sess.run(w)
    close(got, np.array([1.0, 2.0]) - 0.5 * (N + 1) / 2)


@check
def horovod_return_values():
    # broadcast_ gives the new values, join a scalar tensor, reducescatter
    # takes compression, remove_process_set says whether it removed.
    v = tf.Variable(tf.fill([2], float(R)))
    vals = hvd.broadcast_([v], root_rank=N - 1)
    close(vals[0], np.full([2], N - 1.0))
    close(v.numpy(), np.full([2], N - 1.0))
    x = tf.constant(np.arange(2 * N * 3, dtype=np.float32).reshape(2 * N, 3))
    y = hvd.reducescatter(x, op=hvd.Sum, compression=hvd.Compression.fp16)
    expect(y.dtype == tf.float32, f"{y.dtype}")
    close(y, x.numpy()[2 * R:2 * R + 2] * N, rtol=1e-2)
    ps = hvd.add_process_set([0, 1])
    expect(hvd.remove_process_set(ps) is True, "remove_process_set")
    expect(hvd.remove_process_set(ps) is False, "removing twice")


@check
def local_layers_stay_local():
    # PartialDistributedGradientTape: the local layer's gradient is this
    # rank's, divided by the number of ranks; the shared one is averaged.
    shared = keras.layers.Dense(1, use_bias=False, kernel_initializer="ones")
    local = keras.layers.Dense(1, use_bias=False, kernel_initializer="ones")
    x = tf.constant([[float(R + 1)]])
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(shared(x)) + tf.reduce_sum(local(x))
    tape = hvd.PartialDistributedGradientTape(tape, local_layers=[local])
    g_shared, g_local = tape.gradient(loss, [shared.kernel, local.kernel])
    close(g_shared, [[(N + 1) / 2]])
    close(g_local, [[(R + 1) / N]])
    # PartialDistributedOptimizer in a compiled fit: shared weights stay
    # equal on every rank, the local layer's drift apart.
    import kolo.tensorflow.keras as hvdk
    model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1, name="shared"),
                              keras.layers.Dense(1, name="local")])
    hvd.broadcast_variables(model.variables, root_rank=0)
    opt = hvdk.PartialDistributedOptimizer(keras.optimizers.SGD(0.05),
                                           local_layers=[model.layers[1]])
    model.compile(optimizer=opt, loss="mse")
    data = np.full((8, 1), R + 1.0, np.float32)
    model.fit(data, data * (R + 2), batch_size=4, epochs=2, verbose=0)
    for layer, same in ((model.layers[0], True), (model.layers[1], False)):
        w = hvd.allgather(tf.reshape(layer.kernel, [1, 1])).numpy().ravel()
        expect(np.allclose(w, w[0]) == same, f"{layer.name} weights over the ranks: {w}")


@check
def tf1_hook_and_best_model_checkpoint():
    graph = tf.Graph()
    with graph.as_default():
        v = tf.compat.v1.get_variable("hooked", initializer=tf.constant([float(R)] * 2))
        tf.compat.v1.train.get_or_create_global_step()
        with tf.compat.v1.train.MonitoredTrainingSession(
                hooks=[hvd.BroadcastGlobalVariablesHook(N - 1)]) as sess:
            got = sess.run(v)
    close(got, [N - 1.0] * 2)
    # BestModelCheckpoint saves on rank 0 only (each rank names its own file
    # here, so the others' would show).
    import tempfile
    path = os.path.join(tempfile.mkdtemp(), f"best{R}.keras")
    model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1)])
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.01)), loss="mse")
    x = np.ones((8, 1), np.float32)
    model.fit(x, x, validation_data=(x, x), epochs=2, verbose=0,
              callbacks=[hvd.callbacks.BestModelCheckpoint(filepath=path)])
    expect(os.path.exists(path) == (R == 0), f"rank {R}: {path} exists={os.path.exists(path)}")


@check
def timeline():
    path = os.path.join(os.environ["KOLO_TEST_OUT"], "tf_timeline.json")
    for bad in ("", None):
        try:
            hvd.start_timeline(bad)
        except ValueError:
            pass
        else:
            raise AssertionError(f"start_timeline({bad!r}) did not raise ValueError")
    try:
        hvd.stop_timeline()
    except ValueError as e:
        expect("start_timeline" in str(e), str(e))
    else:
        raise AssertionError("stop_timeline without start did not raise")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        hvd.start_timeline(path, mark_cycles=True)
    expect(any("mark_cycles" in str(w.message) for w in caught),
           f"no warning about mark_cycles: {[str(w.message) for w in caught]}")
    names = [f"tf.timeline.{mode}.{i}" for mode in MODES for i in range(2)]
    for name in names:
        wrap = MODES[name.split(".")[2]]
        close(wrap(lambda: hvd.allreduce(tf.ones([4]) * (R + 1), op=hvd.Sum, name=name))(),
              np.full([4], N * (N + 1) / 2))
    hvd.stop_timeline()
    hvd.barrier()  # rank 0 has written the file
    if R == 0:
        trace = read_trace(path)
        expect(sorted(trace.names_by_tid) == list(range(N)),
               f"rows {sorted(trace.names_by_tid)}, want one per rank")
        expect(len(trace.processes) == 1 and trace.processes[0].startswith("job "),
               f"process rows {trace.processes}")
        trace.expect_tensors(names, range(N))
    else:
        expect(not os.path.exists(path + ".node1"), "one node, one file")


def _dense(g, rows=10):
    return tf.math.unsorted_segment_sum(g.values, g.indices, rows).numpy() \
        if isinstance(g, tf.IndexedSlices) else np.asarray(g)


@check
def sparse_gradients_in_every_mode():
    # An embedding's gradient is an IndexedSlices: gathered from every rank
    # (averaged), or densified first with sparse_as_dense, in eager mode, in
    # tf.function and in a TF1 graph; each rank looks up rows R and R + 1.
    want = np.zeros((10, 3))
    for r in range(N):
        want[r] += 1.0 / N
        want[r + 1] += 1.0 / N
    emb = keras.layers.Embedding(10, 3)
    ids = tf.constant([[R, R + 1]])
    emb(ids)
    for sparse_as_dense in (False, True):
        for mode, wrap in MODES.items():
            def step():
                with tf.GradientTape() as tape:
                    loss = tf.reduce_sum(emb(ids))
                tape = hvd.DistributedGradientTape(tape, sparse_as_dense=sparse_as_dense)
                return tape.gradient(loss, emb.trainable_variables)[0]
            g = wrap(step)()
            expect(isinstance(g, tf.IndexedSlices) != sparse_as_dense, f"{mode}: {type(g)}")
            close(_dense(g), want)
    graph = tf.Graph()
    with graph.as_default():
        v = tf.compat.v1.get_variable("table", initializer=tf.zeros([10, 3]))
        loss = tf.reduce_sum(tf.gather(v, [R, R + 1]))
        step = hvd.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(1.0),
                                        sparse_as_dense=True).minimize(loss)
        with tf.compat.v1.Session(graph=graph) as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            sess.run(step)
            close(sess.run(v), -want)
    # Slices without dense_shape: grouped with dense tensors, and densified
    # by their variable's shape.
    bare = tf.IndexedSlices(tf.ones([1, 3]) * (R + 1), tf.constant([R]))
    summed = np.zeros((10, 3))
    summed[:N] = np.arange(1, N + 1)[:, None]
    for mode, wrap in MODES.items():
        s, d = wrap(lambda: hvd.grouped_allreduce([bare, tf.ones([2])], op=hvd.Sum))()
        expect(isinstance(s, tf.IndexedSlices), f"{mode}: {type(s)}")
        close(_dense(s), summed)
        close(d, np.full([2], N))
    table = tf.Variable(tf.zeros([10, 3]))
    dense, = hvd.allreduce_gradients([bare], op=hvd.Sum, sparse_as_dense=True,
                                     variables=[table])
    close(dense[:N], np.arange(1, N + 1)[:, None] * np.ones((1, 3)))


@check
def sparse_average_of_integer_values_and_indices():
    # Horovod's: the values and indices of every rank gathered, the values
    # divided by the number of ranks in true division (integers become
    # float32 or float64), the indices as they are.
    want_dt = {tf.uint8: tf.float32, tf.int16: tf.float32, tf.int32: tf.float64,
               tf.int64: tf.float64, tf.float16: tf.float16, tf.float32: tf.float32,
               tf.float64: tf.float64}
    for mode, wrap in MODES.items():
        for dt, out_dt in want_dt.items():
            for idx_dt in (tf.int32, tf.int64):
                values = tf.cast(tf.fill([2, 3], 6 * (R + 1)), dt)
                slices = tf.IndexedSlices(values, tf.constant([R, R + 1], idx_dt),
                                          dense_shape=tf.constant([N + 1, 3], idx_dt))
                got = wrap(lambda: hvd.allreduce(slices, op=hvd.Average))()
                what = f"{mode} {dt.name} values, {idx_dt.name} indices"
                expect(isinstance(got, tf.IndexedSlices), f"{what}: {type(got)}")
                expect(got.values.dtype == out_dt and got.indices.dtype == idx_dt,
                       f"{what}: {got.values.dtype}, {got.indices.dtype}")
                # Horovod's own test subtracts the expected values like this.
                want = np.repeat([6.0 * (r + 1) / N for r in range(N)], 2)[:, None] * np.ones(3)
                diff = tf.reduce_max(tf.abs(got.values - tf.constant(want, out_dt)))
                expect(float(diff) <= 1e-2, f"{what}: {got.values.numpy()}")
                expect(list(got.indices.numpy()) == [i for r in range(N) for i in (r, r + 1)],
                       f"{what}: indices {got.indices.numpy()}")
        s, d = wrap(lambda: hvd.grouped_allreduce(
            [tf.IndexedSlices(tf.fill([1, 2], tf.constant(3 * (R + 1), tf.uint8)),
                              tf.constant([R], tf.int64)), tf.ones([2])], op=hvd.Average))()
        expect(s.values.dtype == tf.float32, f"{mode} grouped: {s.values.dtype}")
        close(s.values, np.repeat([3.0 * (r + 1) / N for r in range(N)], 1)[:, None] * np.ones(2))
        close(d, np.ones([2]))
    summed = hvd.allreduce(tf.IndexedSlices(tf.fill([1, 2], tf.constant(R + 1, tf.uint8)),
                                            tf.constant([R])), op=hvd.Sum, postscale_factor=2.0)
    expect(summed.values.dtype == tf.uint8, f"sum: {summed.values.dtype}")
    close(summed.values, np.arange(1, N + 1)[:, None] * np.full([1, 2], 2.0))


@check
def large_tensors_in_parts_late_peers_and_async_eager():
    # 6 MiB tensors go in parts. A rank that waits past the eager inline
    # budget for a late peer hands the wait to a thread; an op under way
    # by then finishes inline.
    n = (6 << 20) // 4
    x = tf.fill([n], float(R + 1))
    want = np.full([n], N * (N + 1) / 2)
    if R == 1:
        time.sleep(0.05)
    close(hvd.allreduce(x, op=hvd.Sum, name="tf.parts.late"), want)
    # Asynchronous eager mode: the ops are queued and run on one thread.
    tf.config.experimental.set_synchronous_execution(False)
    try:
        names = ["tf.parts.async.a", "tf.parts.async.b"]
        got = [hvd.allreduce(x * (i + 1), op=hvd.Sum, name=nm) for i, nm in enumerate(names)]
        for i, g in enumerate(got):
            close(g.numpy(), want * (i + 1))
    finally:
        tf.config.experimental.set_synchronous_execution(True)


@check
def join_then_broadcast_raises_on_the_ranks_that_did_not_join():
    # Horovod's test_horovod_join_broadcast: rank 0 joins, the others'
    # broadcast raises on each of them, then they join too and the job goes on.
    name = "tf.join.bcast"
    if R != 0:
        try:
            hvd.broadcast(tf.fill([3], float(R)), root_rank=1, name=name)
        except tf.errors.FailedPreconditionError as e:
            expect(name in e.message and "broadcast does not run with joined ranks" in e.message
                   and "rank 0 has joined" in e.message, e.message)
        else:
            raise AssertionError(f"broadcast with rank 0 joined did not raise on {R}")
    last = hvd.join()
    expect(int(last) != 0, f"join returned {int(last)}, the rank that joined first")
    close(hvd.allreduce(tf.fill([2], float(R + 1)), op=hvd.Sum, name=f"{name}.after"),
          np.full([2], N * (N + 1) // 2))
    close(hvd.broadcast(tf.fill([2], float(R)), root_rank=1, name=f"{name}.again"),
          np.full([2], 1.0))


@check
def join():
    if R != 0:
        close(hvd.allreduce(tf.ones([2]), op=hvd.Sum, name="tf.after.join"), np.full([2], N - 1))
    last = hvd.join()
    expect(isinstance(last, tf.Tensor) and last.dtype == tf.int32, f"{last!r}")
    expect(0 <= int(last) < N, f"{last}")


run(hvd.rank)
hvd.shutdown()
