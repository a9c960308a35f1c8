"""kolo.lightning: a PyTorch Lightning 2.x strategy over kolo.torch, for
programs that used Lightning's Horovod strategy (gone since Lightning 2.0).

    import lightning.pytorch as pl
    from kolo.lightning import KoloStrategy
    trainer = pl.Trainer(strategy=KoloStrategy(), accelerator="cpu", devices=1)
    # or, once kolo.lightning is imported: pl.Trainer(strategy="kolo", ...)

Launch one process per rank with `kolorun -np N -- python train.py`; each
process drives one device (the CPU, or with accelerator="gpu" the GPU of its
local rank). Gradients are averaged during backward by kolo.torch's
DistributedOptimizer, which wraps each optimizer the LightningModule
configures; the model's parameters and buffers (and any optimizer state)
start from rank 0's. The learning rate is not scaled by the number of ranks.
"""

from contextlib import ExitStack
from typing import Any, Callable, Optional, Union

import torch
from torch import Tensor

import lightning.pytorch as pl
from lightning.fabric.utilities.optimizer import _optimizers_to_device
from lightning.pytorch.strategies import ParallelStrategy, StrategyRegistry
from lightning.pytorch.trainer.states import TrainerFn
from lightning.pytorch.utilities.rank_zero import rank_zero_only

import kolo.torch as hvd

# Lightning's reduce_op: its strings, or torch.distributed.ReduceOp members
# (compared by name, so torch.distributed need not be available).
_OPS = {"mean": hvd.Average, "avg": hvd.Average, "average": hvd.Average, "sum": hvd.Sum,
        "max": hvd.Max, "min": hvd.Min, "product": hvd.Product, "prod": hvd.Product}


def _kolo_op(reduce_op):
    if reduce_op is None:
        return hvd.Average
    if isinstance(reduce_op, hvd.ReduceOp):
        return reduce_op
    key = reduce_op if isinstance(reduce_op, str) else getattr(reduce_op, "name", str(reduce_op))
    key = key.rpartition(".")[2].lower()  # "RedOpType.SUM" -> "sum"
    if key not in _OPS:
        raise ValueError(f"KoloStrategy.reduce: unsupported reduce_op {reduce_op!r} "
                         f"(one of {', '.join(sorted(_OPS))})")
    return _OPS[key]


def _process_set(group):
    if group is None:
        return hvd.global_process_set
    if isinstance(group, hvd.ProcessSet):
        return group
    raise TypeError(f"KoloStrategy: group must be None or a kolo.torch.ProcessSet, not "
                    f"{type(group).__name__}")


class KoloStrategy(ParallelStrategy):
    """Data-parallel training with one process per rank, launched by kolorun:
    kolo.torch's collectives for gradients, metrics and objects."""

    strategy_name = "kolo"

    def __init__(self, accelerator: Optional["pl.accelerators.Accelerator"] = None,
                 parallel_devices: Optional[list[torch.device]] = None,
                 checkpoint_io=None, precision_plugin=None,
                 compression=hvd.Compression.none, op=hvd.Average) -> None:
        """compression and op are DistributedOptimizer's (the gradients'
        wire format and reduction)."""
        super().__init__(accelerator=accelerator, parallel_devices=parallel_devices,
                         cluster_environment=None, checkpoint_io=checkpoint_io,
                         precision_plugin=precision_plugin)
        self._compression = compression
        self._op = op
        self._initialized_kolo = False

    # ------------------------------------------------------------ ranks

    def _init_kolo(self) -> None:
        if not hvd.is_initialized():
            hvd.init()
            self._initialized_kolo = True

    @property
    def global_rank(self) -> int:
        self._init_kolo()
        return hvd.rank()

    @property
    def local_rank(self) -> int:
        self._init_kolo()
        return hvd.local_rank()

    @property
    def node_rank(self) -> int:
        self._init_kolo()
        return hvd.cross_rank()

    @property
    def world_size(self) -> int:
        self._init_kolo()
        return hvd.size()

    @property
    def is_distributed(self) -> bool:
        # Lightning adds a DistributedSampler to the dataloaders when true.
        return True

    @property
    def root_device(self) -> torch.device:
        devices = self.parallel_devices
        if devices and devices[0].type == "cuda":
            count = torch.cuda.device_count()
            return torch.device("cuda", self.local_rank % count if count else 0)
        if devices:
            return devices[0]
        return torch.device("cpu")

    @property
    def distributed_sampler_kwargs(self) -> dict[str, Any]:
        return {"num_replicas": self.world_size, "rank": self.global_rank}

    def set_world_ranks(self) -> None:
        """Called when the Trainer is built: attaches to kolod and makes
        Lightning's rank-zero-only logging follow Kolo's rank."""
        self._init_kolo()
        rank_zero_only.rank = self.global_rank
        try:
            from lightning.fabric.utilities.rank_zero import rank_zero_only as fabric_rank_zero_only
            fabric_rank_zero_only.rank = self.global_rank
        except ImportError:  # pragma: no cover - older Lightning
            pass

    def setup_environment(self) -> None:
        self.set_world_ranks()
        super().setup_environment()

    # ------------------------------------------------------------ setup

    def model_to_device(self) -> None:
        assert self.model is not None
        self.model.to(self.root_device)

    def setup(self, trainer: "pl.Trainer") -> None:
        assert self.accelerator is not None and self.model is not None
        self.accelerator.setup(trainer)
        self.model = self.precision_plugin.convert_module(self.model)
        self.model_to_device()
        # Every rank starts from rank 0's parameters and buffers.
        hvd.broadcast_parameters(self.model.state_dict(), root_rank=0)
        fitting = trainer.state.fn == TrainerFn.FITTING
        if fitting:
            self.setup_optimizers(trainer)
        self.setup_precision_plugin()
        if fitting:
            _optimizers_to_device(self.optimizers, self.root_device)

    def setup_optimizers(self, trainer: "pl.Trainer") -> None:
        """The LightningModule's optimizers, each wrapped in kolo.torch's
        DistributedOptimizer (its hooks allreduce each gradient as backward
        produces it), with rank 0's hyper-parameters and state."""
        super().setup_optimizers(trainer)
        assert self.lightning_module is not None
        names = {id(p): n for n, p in self.lightning_module.named_parameters()}
        wrapped = []
        for i, opt in enumerate(self.optimizers):
            params = [p for g in opt.param_groups for p in g["params"]]
            named = [(f"opt{i}.{names.get(id(p), f'param{j}')}", p) for j, p in enumerate(params)]
            dist = hvd.DistributedOptimizer(opt, named_parameters=named,
                                            compression=self._compression, op=self._op)
            if opt.state_dict()["state"]:  # its param_groups are opt's, not its state
                dist.load_state_dict(opt.state_dict())
            self._broadcast_optimizer(dist, i)
            for config in self.lr_scheduler_configs:
                if getattr(config.scheduler, "optimizer", None) is opt:
                    config.scheduler.optimizer = dist
            wrapped.append(dist)
        self.optimizers = wrapped

    @staticmethod
    def _broadcast_optimizer(opt, index) -> None:
        hyper = [{k: v for k, v in g.items() if k != "params"} for g in opt.param_groups]
        has_state = bool(opt.state_dict()["state"])
        hyper, root_has_state = hvd.broadcast_object(
            (hyper, has_state), root_rank=0, name=f"kolo.lightning.optimizer{index}")
        for group, values in zip(opt.param_groups, hyper):
            group.update(values)
        if root_has_state:
            # A fresh optimizer elsewhere gets its state created and replaced.
            hvd.broadcast_optimizer_state(opt, root_rank=0)

    # ------------------------------------------------------------ training

    def post_backward(self, closure_loss: Tensor) -> None:
        # The allreduces the hooks started are waited for here, so the
        # gradients are averaged before clipping and the optimizer's step.
        for opt in self.optimizers:
            if hasattr(opt, "synchronize"):
                opt.synchronize()

    def optimizer_step(self, optimizer, closure: Callable[[], Any],
                       model: Optional[Union["pl.LightningModule", torch.nn.Module]] = None,
                       **kwargs: Any) -> Any:
        # Lightning runs the closure (forward and backward) inside step();
        # post_backward has synchronized by the time the update is applied.
        inner = getattr(optimizer, "_optimizer", optimizer)  # a LightningOptimizer's
        with ExitStack() as stack:
            if hasattr(inner, "skip_synchronize"):
                stack.enter_context(inner.skip_synchronize())
            return super().optimizer_step(optimizer, closure, model, **kwargs)

    # ------------------------------------------------------------ collectives

    def reduce(self, tensor: Union[Tensor, Any], group: Optional[Any] = None,
               reduce_op: Optional[Union[Any, str]] = "mean") -> Union[Tensor, Any]:
        """The tensor reduced over the ranks ("mean" by default, or "sum",
        "max", "min", "product"); anything but a tensor comes back as it is."""
        if not isinstance(tensor, Tensor):
            return tensor
        op = _kolo_op(reduce_op)
        if op == hvd.Average and not (tensor.is_floating_point() or tensor.is_complex()):
            tensor = tensor.to(torch.get_default_dtype())
        return hvd.allreduce(tensor.detach(), op=op, process_set=_process_set(group))

    def all_gather(self, tensor: Tensor, group: Optional[Any] = None,
                   sync_grads: bool = False) -> Tensor:
        """Every rank's tensor stacked along a new first dimension, in rank
        order (shape (world_size, *tensor.shape)). With sync_grads the result
        is differentiable: each rank's input gets the sum over the ranks of
        the gradients of its part, as Lightning's DDP strategy gives."""
        ps = _process_set(group)
        if not sync_grads:
            return hvd.allgather(tensor.detach().unsqueeze(0), process_set=ps)
        # kolo.torch's allgather averages the gradients: scaling the
        # gradient (not the value) by the set's size makes that the sum.
        scaled = tensor + (tensor - tensor.detach()) * (ps.size() - 1)
        return hvd.allgather(scaled.unsqueeze(0), process_set=ps)

    def broadcast(self, obj: Any, src: int = 0) -> Any:
        return hvd.broadcast_object(obj, root_rank=src)

    def barrier(self, name: Optional[str] = None) -> None:
        hvd.barrier()

    # ------------------------------------------------------------ the end

    def teardown(self) -> None:
        # The wrapped optimizers' gradient hooks go with them, so that a
        # later fit of the same module does not allreduce into them.
        for opt in self.optimizers:
            if hasattr(opt, "remove_hooks"):
                opt.remove_hooks()
        super().teardown()

    def shutdown(self) -> None:
        """Detaches from kolod if this strategy attached (Trainer.fit and
        .test may follow one another, so teardown leaves kolo running)."""
        if self._initialized_kolo and hvd.is_initialized():
            hvd.shutdown()
        self._initialized_kolo = False

    @classmethod
    def register_strategies(cls, strategy_registry) -> None:
        strategy_registry.register(cls.strategy_name, cls,
                                   description="Kolo collectives (kolo.torch), one process per "
                                               "rank launched by kolorun")


if KoloStrategy.strategy_name not in StrategyRegistry:
    KoloStrategy.register_strategies(StrategyRegistry)
