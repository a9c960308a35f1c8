"""Adasum on every rank (see harness.py): kolo's NumPy API, kolo.torch and
kolo.tensorflow against a NumPy reference of the Adasum formula and tree."""

import numpy as np

import kolo
from harness import check, run

kolo.init()
R, N = kolo.rank(), kolo.size()


def expect(cond, msg):
    if not cond:
        raise AssertionError(msg)


def pair(a, b):
    """Adasum's combination of two tensors, in float64."""
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    dot, aa, bb = a @ b, a @ a, b @ b
    ca = 1 - dot / (2 * aa) if aa != 0 else 1.0
    cb = 1 - dot / (2 * bb) if bb != 0 else 1.0
    return ca * a + cb * b


def tree(tensors):
    """The tree of kolo's Adasum over tensors in rank order: with p the
    largest power of two <= n, the first 2(n - p) pair up first, then the p
    values left combine (0, 1), (2, 3), ... level by level."""
    n = len(tensors)
    p = 1
    while p * 2 <= n:
        p *= 2
    extra = n - p
    level = [pair(tensors[2 * i], tensors[2 * i + 1]) for i in range(extra)]
    level += [np.asarray(t, np.float64).ravel() for t in tensors[2 * extra:]]
    while len(level) > 1:
        level = [pair(level[i], level[i + 1]) for i in range(0, len(level), 2)]
    return level[0].reshape(np.shape(tensors[0]))


def operand(r, shape, seed=0):
    rng = np.random.default_rng(1000 * seed + r)
    return rng.standard_normal(shape)


def close(got, want, rtol=1e-5, msg=""):
    np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=rtol, atol=rtol,
                               err_msg=msg)


@check
def numpy_allreduce_matches_reference():
    for dtype, rtol in ((np.float64, 1e-12), (np.float32, 1e-5), (np.float16, 5e-3)):
        for shape in ((17,), (3, 5), (1000,)):
            ranks = [operand(r, shape).astype(dtype) for r in range(N)]
            got = kolo.allreduce(ranks[R], op=kolo.Adasum, name=f"a.{np.dtype(dtype)}.{shape}")
            expect(got.dtype == dtype, f"dtype {got.dtype}")
            close(got, tree(ranks), rtol, f"{np.dtype(dtype)} {shape}")


@check
def orthogonal_tensors_add_and_equal_ones_stay():
    e = np.zeros(max(N, 2), np.float32)
    e[R] = R + 1.0
    got = kolo.allreduce(e, op=kolo.Adasum)
    want = np.zeros_like(e)
    want[:N] = np.arange(1, N + 1)
    close(got, want)
    same = np.full(8, 3.0, np.float32)
    close(kolo.allreduce(same, op=kolo.Adasum), same)


@check
def grouped_allreduce_combines_each_tensor_alone():
    shapes = [(4,), (2, 3), (50,)]
    mine = [operand(R, s, seed=i + 1).astype(np.float32) for i, s in enumerate(shapes)]
    got = kolo.grouped_allreduce(mine, op=kolo.Adasum)
    for i, s in enumerate(shapes):
        want = tree([operand(r, s, seed=i + 1).astype(np.float32) for r in range(N)])
        close(got[i], want, 1e-5, f"tensor {i}")


@check
def scale_factors_scale_the_result():
    ranks = [operand(r, (9,)).astype(np.float64) for r in range(N)]
    got = kolo.allreduce(ranks[R], op=kolo.Adasum, prescale_factor=0.5, postscale_factor=3.0)
    close(got, 1.5 * tree(ranks), 1e-12)


@check
def zero_tensor_on_a_rank_leaves_the_others():
    ranks = [operand(r, (6,)) if r != 0 else np.zeros(6) for r in range(N)]
    close(kolo.allreduce(ranks[R], op=kolo.Adasum), tree(ranks), 1e-12)


@check
def process_set_combines_its_ranks_only():
    if N < 3:
        return
    ps = kolo.add_process_set([0, 2])
    try:
        if R in (0, 2):
            ranks = [operand(r, (5,)) for r in (0, 2)]
            got = kolo.allreduce(ranks[R // 2], op=kolo.Adasum, process_set=ps)
            close(got, tree(ranks), 1e-12)
    finally:
        kolo.remove_process_set(ps)


@check
def integer_tensors_raise_on_every_rank():
    try:
        kolo.allreduce(np.ones(3, np.int32), op=kolo.Adasum)
    except kolo.InvalidArgumentError as e:
        expect("adasum" in str(e) and "int32" in str(e), str(e))
    else:
        raise AssertionError("int32 adasum did not raise")
    # The job goes on.
    close(kolo.allreduce(np.ones(2, np.float32), op=kolo.Sum), np.full(2, N))


@check
def torch_allreduce_and_optimizer():
    import torch
    import kolo.torch as hvd

    hvd.init()
    ranks = [operand(r, (4, 3)) for r in range(N)]
    got = hvd.allreduce(torch.tensor(ranks[R], dtype=torch.float32), op=hvd.Adasum)
    close(got.numpy(), tree(ranks), 1e-5)
    got = hvd.grouped_allreduce([torch.tensor(ranks[R]), torch.tensor(ranks[R][0])],
                                op=hvd.Adasum)
    close(got[0].numpy(), tree(ranks), 1e-12)
    close(got[1].numpy(), tree([t[0] for t in ranks]), 1e-12)
    # DistributedOptimizer(op=Adasum): every rank ends with the same weights,
    # those the reference gives from the ranks' steps.
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    start = [p.detach().clone() for p in model.parameters()]
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters(), op=hvd.Adasum)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    x = torch.tensor(operand(R, (8, 3)), dtype=torch.float32)
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    w = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    ws = hvd.allgather(w.unsqueeze(0))
    for r in range(N):
        close(ws[r].numpy(), w.numpy(), 1e-6, f"rank {r}'s weights")
    expect(not torch.equal(w, torch.cat([s.reshape(-1) for s in start])), "no step taken")


@check
def torch_optimizer_combines_weight_changes():
    import torch
    import kolo.torch as hvd

    hvd.init()
    data = [(torch.tensor(operand(r, (8, 3), seed=5)), torch.tensor(operand(r, (8, 2), seed=6)))
            for r in range(N)]

    def loss(model, r):
        x, y = data[r]
        return (model(x) - y).pow(2).mean()

    cases = [("sgd_momentum", lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9), {}),
             ("adam", lambda ps: torch.optim.Adam(ps, lr=0.05), {"num_groups": 1})]
    for label, make, extra in cases:
        torch.manual_seed(0)
        model = torch.nn.Linear(3, 2).double()
        start = [p.detach().clone() for p in model.parameters()]
        opt = hvd.DistributedOptimizer(make(model.parameters()),
                                       named_parameters=model.named_parameters(),
                                       op=hvd.Adasum, **extra)
        # Each rank's own optimizer from the same start, its change of the
        # weights combined by the tree; and, to show the two differ, the
        # gradients combined by the tree instead.
        locals_ = []
        for r in range(N):
            m = torch.nn.Linear(3, 2).double()
            locals_.append((m, make(m.parameters())))
        grad_model = torch.nn.Linear(3, 2).double()
        grad_opt = make(grad_model.parameters())
        want = [s.clone() for s in start]
        with torch.no_grad():
            for p, s in zip(grad_model.parameters(), start):
                p.copy_(s)
        for step in range(3):
            opt.zero_grad()
            loss(model, R).backward()
            opt.step()
            deltas = []
            grads = []
            for r, (m, o) in enumerate(locals_):
                with torch.no_grad():
                    for p, w in zip(m.parameters(), want):
                        p.copy_(w)
                o.zero_grad()
                loss(m, r).backward()
                o.step()
                deltas.append([(p.detach() - w).numpy() for p, w in zip(m.parameters(), want)])
                grad_model.zero_grad()
                loss(grad_model, r).backward()
                grads.append([p.grad.clone().numpy() for p in grad_model.parameters()])
            want = [w + torch.tensor(tree([d[i] for d in deltas])) for i, w in enumerate(want)]
            grad_model.zero_grad()
            for i, p in enumerate(grad_model.parameters()):
                p.grad = torch.tensor(tree([g[i] for g in grads]))
            grad_opt.step()
            w = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
            ws = hvd.allgather(w.unsqueeze(0))
            for r in range(N):
                close(ws[r].numpy(), w.numpy(), 1e-12, f"{label} step {step}: rank {r}'s weights")
            close(w.numpy(), torch.cat([t.reshape(-1) for t in want]).numpy(), 1e-9,
                  f"{label} step {step}: the combined change of the weights")
        by_grads = torch.cat([p.detach().reshape(-1) for p in grad_model.parameters()])
        expect((by_grads - w).abs().max() > 1e-6,
               f"{label}: combining the gradients gave the same weights, the check shows nothing")
    try:
        hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                 named_parameters=model.named_parameters(), op=hvd.Adasum,
                                 compression=hvd.Compression.fp16)
    except kolo.InvalidArgumentError as e:
        expect("Adasum" in str(e) and "compression" in str(e), str(e))
    else:
        raise AssertionError("op=Adasum with fp16 compression did not raise")


@check
def tensorflow_allreduce():
    import tensorflow as tf
    import kolo.tensorflow as hvd

    hvd.init()
    ranks = [operand(r, (7,)) for r in range(N)]
    got = hvd.allreduce(tf.constant(ranks[R], tf.float32), op=hvd.Adasum)
    close(got.numpy(), tree(ranks), 1e-5)
    got = hvd.grouped_allreduce([tf.constant(ranks[R]), tf.constant(ranks[R][:3])], op=hvd.Adasum)
    close(got[0].numpy(), tree(ranks), 1e-12)
    close(got[1].numpy(), tree([t[:3] for t in ranks]), 1e-12)


run(kolo.rank)
