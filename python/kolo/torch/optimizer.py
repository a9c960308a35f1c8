"""DistributedOptimizer: horovod.torch's optimizer wrapper.

A hook on each parameter fires as soon as backward has accumulated the
parameter's gradient and submits that gradient's allreduce at once (kolod
negotiates by name and fuses what is ready), so communication overlaps the
rest of the backward pass; step() waits for the results and then applies the
wrapped optimizer's update.

With op=Adasum the gradients stay local, as in Horovod's torch optimizer:
step() takes each rank's own step with the wrapped optimizer, allreduces
each parameter's change of the weights (new - old) with Adasum, one named
collective per parameter (or group), and sets the weights to old plus the
combined change. The hooks then only count backward passes.
"""

import contextlib
import warnings

import torch

from kolo import _shared
from kolo._api import Average, ReduceOp, global_process_set
from kolo._native import core
from kolo.errors import InvalidArgumentError
from kolo.torch import mpi_ops
from kolo.torch.compression import Compression, prepare, prepare_group


# Mark a gradient allreduced in its arena buffer (see _in_arena), and a
# sparse gradient allgathered (mpi_ops.sparse_allreduce_async).
_ARENA = object()
_SPARSE = object()


class _DistributedOptimizer(torch.optim.Optimizer):
    # The methods below are copied into a subclass of the wrapped optimizer's
    # class (see DistributedOptimizer), so `super(self.__class__, self)` is
    # that class.

    def __init__(self, params, named_parameters, compression, backward_passes_per_step, op,
                 gradient_predivide_factor, groups, sparse_as_dense, process_set):
        super(self.__class__, self).__init__(params)
        self._compression = compression
        self.backward_passes_per_step = int(backward_passes_per_step)
        if self.backward_passes_per_step < 1:
            raise ValueError("backward_passes_per_step must be at least 1")
        self.op = ReduceOp(int(op))
        if gradient_predivide_factor != 1.0 and self.op != ReduceOp.AVERAGE:
            raise ValueError("gradient_predivide_factor applies to op=Average only")
        self.gradient_predivide_factor = float(gradient_predivide_factor)
        self.sparse_as_dense = bool(sparse_as_dense)
        self.process_set = process_set
        # op=Adasum combines the weights' change of each rank's own step.
        self._adasum = self.op == ReduceOp.ADASUM
        if self._adasum and compression not in (None, Compression.none):
            raise InvalidArgumentError(
                "DistributedOptimizer(op=Adasum) takes no compression: Adasum combines the "
                "weights' change at full precision (use compression=Compression.none)")
        self._in_step = False   # the wrapped step (and its closure) is running
        self._deltas = {}       # id(p) -> p's change of weights in an Adasum step

        all_params = [p for group in self.param_groups for p in group["params"]]
        if named_parameters is not None:
            named = list(named_parameters)
            if named and not all(isinstance(n, tuple) and len(n) == 2 for n in named):
                raise ValueError("named_parameters must be (name, parameter) pairs, as "
                                 "model.named_parameters() gives")
            names = [n for n, _ in named]
            dups = sorted({n for n in names if names.count(n) > 1})
            if dups:
                raise ValueError(f"named_parameters has duplicate names: {', '.join(dups)}")
            known = {id(p) for _, p in named}
            unnamed = [p for p in all_params if id(p) not in known]
            if unnamed:
                raise ValueError("named_parameters was given, but "
                                 f"{len(unnamed)} of the optimizer's parameters are not in it")
            self._names = {id(p): f"allreduce.{n}" for n, p in named}
        else:
            self._names = {id(p): f"allreduce.noname.{i}" for i, p in enumerate(all_params)}

        self._groups = self._make_groups(groups, all_params)
        self._params = [p for p in all_params if p.requires_grad]
        self._delay = {id(p): self.backward_passes_per_step for p in self._params}
        self._handles = {}      # id(p) -> (handle, ctx, p)
        self._group_ready = {}  # group index -> ids of its ready parameters
        self._synchronized = False
        self._should_synchronize = True
        self._hook_handles = []
        self._arena = {}        # id(p) -> p's gradient buffer in the arena
        # An elastic job may grow from one rank: its hooks go in from the
        # start (an allreduce over one rank returns the gradient as it is).
        elastic = core.epoch() > 0
        if (_shared.ps_size(process_set) > 1 or elastic) and self._included():
            self._register_hooks()

    # ------------------------------------------------------------ setup

    @staticmethod
    def _make_groups(groups, params):
        """{id(p): group index} for `groups` (a number of groups, or lists
        of parameters allreduced as one group each)."""
        if groups is None:
            return {}
        if isinstance(groups, int):
            if groups < 1:
                raise ValueError("groups must be a positive number or lists of parameters")
            trainable = [p for p in params if p.requires_grad]
            per = -(-len(trainable) // groups)
            return {id(p): i // per for i, p in enumerate(trainable)}
        out = {}
        for gi, group in enumerate(groups):
            for p in group:
                if id(p) in out:
                    raise ValueError("a parameter appears in two groups")
                out[id(p)] = gi
        return out

    def _included(self):
        ps = self.process_set
        return ps is None or not hasattr(ps, "included") or ps.included()

    def _register_hooks(self):
        for p in self._params:
            if hasattr(p, "register_post_accumulate_grad_hook"):
                self._hook_handles.append(
                    p.register_post_accumulate_grad_hook(self._make_hook(p)))
            else:  # older torch: the hook of the gradient accumulator node
                acc = p.expand_as(p).grad_fn.next_functions[0][0]
                self._hook_handles.append(acc.register_hook(self._make_hook(p)))
                self._hook_handles.append(acc)  # keeps the node alive

    def remove_hooks(self):
        """Takes this optimizer's gradient hooks off its parameters, so a
        later backward pass of the same model no longer submits allreduces
        (for a framework that wraps one model in a new optimizer per fit).
        The optimizer then steps on local gradients only."""
        for handle in self._hook_handles:
            if hasattr(handle, "remove"):
                handle.remove()
        self._hook_handles = []

    def _make_hook(self, p):
        key = id(p)

        def hook(*_):
            if self._in_step:  # a closure's backward inside the Adasum step
                return
            entry = self._handles.get(key)
            if (entry is not None and (entry[0] is not None or self._adasum)
                    and self._delay[key] <= 0):
                raise AssertionError(
                    "gradients were computed more than backward_passes_per_step times "
                    "before step(): raise backward_passes_per_step to accumulate more "
                    "backward passes locally")
            self._delay[key] -= 1
            handle = ctx = None
            if self._delay[key] == 0 and not self._adasum:
                if key in self._groups:
                    self._group_member_ready(p)
                    return
                handle, ctx = self._allreduce_grad_async(p)
            self._handles[key] = (handle, ctx, p)
        return hook

    def _group_member_ready(self, p):
        gi = self._groups[id(p)]
        ready = self._group_ready.setdefault(gi, [])
        ready.append(p)
        members = [q for q in self._params if self._groups.get(id(q)) == gi]
        self._handles[id(p)] = (None, None, p)
        if len(ready) == len(members):
            self._submit_group(gi, sorted(ready, key=lambda q: self._names[id(q)]))

    def _submit_group(self, gi, params):
        grads = []
        for p in params:
            if self._adasum:
                grads.append(self._deltas[id(p)])
                continue
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            grads.append(p.grad.to_dense() if p.grad.is_sparse else p.grad)
        prepared, wire = prepare_group(self._compression, grads)
        tensors, ctxs = [t for t, _ in prepared], [c for _, c in prepared]
        prescale, postscale = self._scales()
        group = mpi_ops._grouped_allreduce_start(
            tensors, tensors, f"allreduce.group.{gi}", int(self.op), prescale, postscale, wire,
            self.process_set)
        for p, part, ctx in zip(params, group.parts, ctxs):
            self._handles[id(p)] = (part, ctx, p)
        self._group_ready.pop(gi, None)

    def _scales(self):
        if self.op == ReduceOp.AVERAGE:
            # kolod divides by the number of ranks after the sum; the factor
            # splits that division around it.
            return 1.0 / self.gradient_predivide_factor, self.gradient_predivide_factor
        return 1.0, 1.0

    # ------------------------------------------------------------ allreduce

    def _allreduce_grad_async(self, p):
        name = self._names[id(p)]
        if self._adasum:  # the change of p's weights, in its own tensor
            delta = self._deltas[id(p)]
            return mpi_ops._allreduce_start(delta, delta, name, int(self.op), 1.0, 1.0, 0,
                                            self.process_set), None
        if p.grad is None:
            # No gradient this step (an unused parameter): other ranks may
            # have one, so a zero gradient takes part.
            p.grad = torch.zeros_like(p)
        grad = p.grad
        if grad.is_sparse:
            if not self.sparse_as_dense:
                return mpi_ops.sparse_allreduce_async(grad, name, self.op,
                                                      self.process_set), _SPARSE
            grad = grad.to_dense()
        compressed, ctx, wire = prepare(self._compression, grad)
        if compressed is not p.grad:
            ctx = (ctx, compressed)
        elif grad.device.type == "cpu":
            staged = self._in_arena(p, grad)
            if staged is not None:
                compressed, ctx = staged, (_ARENA, ctx)
        prescale, postscale = self._scales()
        handle = mpi_ops._allreduce_start(compressed, compressed, name, int(self.op), prescale,
                                          postscale, wire, self.process_set)
        return handle, ctx

    def _in_arena(self, p, grad):
        """`grad` in p's tensor in the session's arena (allocated at p's
        first step; None if the arena has no room): the allreduce then
        copies nothing between this process and kolod, and synchronize()
        points p.grad at it, so where gradients are zeroed rather than set
        to None the next backward accumulates into the arena directly."""
        buf = self._arena.get(id(p))
        if buf is None or buf.shape != grad.shape or buf.dtype != grad.dtype:
            buf = mpi_ops._arena_tensor(grad.shape, grad.dtype)
            if buf is None:
                return None
            self._arena[id(p)] = buf
        if grad.data_ptr() != buf.data_ptr():
            buf.copy_(grad)
        return buf

    def _allreduce_all(self, errors):
        """Submits every parameter's allreduce not yet submitted (a zero
        gradient where backward produced none), waits for all of them and
        yields (key, output, ctx, p) of each that finished; the others'
        exceptions go to `errors`. The pass counts start over."""
        for p in self._params:
            if id(p) not in self._handles:
                self._handles[id(p)] = (None, None, p)
        pending_groups = {self._groups[k] for k, (h, _, _) in self._handles.items()
                          if h is None and k in self._groups}
        for gi in sorted(pending_groups):
            members = [q for q in self._params if self._groups.get(id(q)) == gi]
            self._submit_group(gi, sorted(members, key=lambda q: self._names[id(q)]))
        for key, (handle, ctx, p) in list(self._handles.items()):
            if handle is None:
                handle, ctx = self._allreduce_grad_async(p)
                self._handles[key] = (handle, ctx, p)
        for key, (handle, ctx, p) in self._handles.items():
            try:
                output = handle.wait()
            except Exception as e:  # noqa: BLE001 - raised after all finished
                errors.append(e)
                continue
            finally:
                self._delay[key] = self.backward_passes_per_step
            yield key, output, ctx, p
        self._handles.clear()
        self._group_ready.clear()

    def synchronize(self):
        """Waits for every gradient's allreduce (submitting those backward did
        not produce) and writes the results into the parameters' .grad.
        With op=Adasum the gradients stay local and step() combines the
        weights' change, so there is nothing to wait for here."""
        if not self._hook_handles or self._adasum:  # one rank, not elastic, or outside the set
            self._synchronized = True
            return
        errors = []
        for _, output, ctx, p in self._allreduce_all(errors):
            if ctx is _SPARSE:
                p.grad = output
                continue
            if isinstance(ctx, tuple) and ctx[0] is _ARENA:
                if p.grad.data_ptr() != output.data_ptr():
                    with torch.no_grad():
                        p.grad.set_(output)
                continue
            if isinstance(ctx, tuple):  # compressed into a new tensor
                ctx, _ = ctx
            result = self._compression.decompress(output, ctx)
            if result is not p.grad:
                if p.grad.is_sparse:  # sparse_as_dense: back to the gradient's layout
                    p.grad = result.to(p.grad.dtype).to_sparse().coalesce()
                else:
                    p.grad.copy_(result)
        if errors:
            raise errors[0]
        self._synchronized = True

    def _adasum_step(self, closure):
        """Each rank's own step from its local gradients, then the weights
        are set to old + Adasum(new - old) over the ranks."""
        old = {id(p): p.detach().clone() for p in self._params}
        self._in_step = True
        try:
            loss = super(self.__class__, self).step(closure)
        finally:
            self._in_step = False
        errors = []
        with torch.no_grad():
            self._deltas = {id(p): p.detach() - old[id(p)] for p in self._params}
            try:
                for key, output, _, p in self._allreduce_all(errors):
                    p.copy_(old[key] + output)
            finally:
                self._deltas = {}
            if errors:  # every rank keeps the weights it had before the step
                for p in self._params:
                    p.copy_(old[id(p)])
                raise errors[0]
        return loss

    def set_backward_passes_per_step(self, passes):
        """Changes how many local backward passes each allreduce covers."""
        if int(passes) < 1:
            raise ValueError("backward_passes_per_step must be at least 1")
        self.backward_passes_per_step = int(passes)
        for key in self._delay:
            self._delay[key] = self.backward_passes_per_step

    def load_state_dict(self, *args, **kwargs):
        """The wrapped optimizer's load_state_dict; pending allreduces are
        forgotten and the pass counts start over."""
        self._handles.clear()
        self._group_ready.clear()
        self._synchronized = False
        for key in self._delay:
            self._delay[key] = self.backward_passes_per_step
        return super(self.__class__, self).load_state_dict(*args, **kwargs)

    @contextlib.contextmanager
    def skip_synchronize(self):
        """Within it, step() does not synchronize (call synchronize() first,
        e.g. to clip the averaged gradients). With op=Adasum the gradients
        stay local either way and step() still combines the weights' change."""
        self._should_synchronize = False
        try:
            yield
        finally:
            self._should_synchronize = True

    def step(self, closure=None):
        if self._adasum:
            self._synchronized = False
            if not self._hook_handles:  # one rank, not elastic, or outside the set
                return super(self.__class__, self).step(closure)
            return self._adasum_step(closure)
        if self._should_synchronize:
            if self._synchronized:
                warnings.warn("optimizer.step() was called after optimizer.synchronize() "
                              "without the optimizer.skip_synchronize() context: the "
                              "gradients were allreduced twice")
            self.synchronize()
        self._synchronized = False
        return super(self.__class__, self).step(closure)

    def zero_grad(self, *args, **kwargs):
        if any(h is not None for h, _, _ in self._handles.values()):
            raise AssertionError(
                "optimizer.zero_grad() was called after loss.backward() but before "
                "optimizer.step() or optimizer.synchronize(): the pending allreduces "
                "still write the gradients")
        return super(self.__class__, self).zero_grad(*args, **kwargs)


def DistributedOptimizer(optimizer, named_parameters=None, compression=Compression.none,
                         backward_passes_per_step=1, op=Average, gradient_predivide_factor=1.0,
                         num_groups=0, groups=None, sparse_as_dense=False,
                         process_set=global_process_set):
    """Wraps a torch.optim optimizer so each step applies gradients averaged
    (op=Average; Sum and the others too) over the ranks of `process_set`.
    With op=Adasum each rank steps on its own gradients and the steps'
    changes of the weights are combined by Adasum (no compression then).

    named_parameters: model.named_parameters(), naming each allreduce (needed
    when ranks could produce gradients in different orders).
    compression: Compression.none / fp16 / bf16 for the gradients on the wire.
    backward_passes_per_step: local backward passes accumulated per allreduce.
    gradient_predivide_factor: with op=Average, gradients are scaled by
    1/factor before the sum and factor/size after it.
    groups / num_groups: allreduce the parameters of a group as one
    negotiated unit (a number of groups, or lists of parameters).
    sparse_as_dense: send sparse gradients as dense tensors (else each rank's
    indices and values are allgathered)."""
    if num_groups and groups is None:
        groups = int(num_groups)
    cls = type(optimizer.__class__.__name__, (optimizer.__class__,),
               {k: v for k, v in _DistributedOptimizer.__dict__.items()
                if k not in ("__dict__", "__weakref__")})
    return cls(optimizer.param_groups, named_parameters, compression, backward_passes_per_step,
               op, gradient_predivide_factor, groups, sparse_as_dense, process_set)
