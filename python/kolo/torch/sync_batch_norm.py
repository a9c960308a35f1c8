"""SyncBatchNorm: batch normalization whose batch statistics cover every
rank's batch (horovod.torch.SyncBatchNorm).

In training, each rank computes its batch's element count, per-channel mean
and sum of squared deviations; one differentiable allgather exchanges them and
every rank combines them exactly (the parallel form of Welford's update, which
stays accurate where E[x^2] - E[x]^2 would cancel). The gradient flows back
through the allgather (an allreduce of the statistics' gradients), so
backward is the gradient of the whole job's batch. In eval mode it is plain
batch normalization with the running statistics.
"""

import torch
from torch.nn.modules.batchnorm import _BatchNorm

from kolo import _shared
from kolo._api import global_process_set
from kolo.torch import mpi_ops


class SyncBatchNorm(_BatchNorm):
    """BatchNorm1d/2d/3d over the batches of all ranks of `process_set`."""

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True,
                 track_running_stats=True, process_set=global_process_set):
        super().__init__(num_features, eps, momentum, affine, track_running_stats)
        self.process_set = process_set

    def _check_input_dim(self, input):
        if input.dim() < 2:
            raise ValueError(f"expected at least 2D input (got {input.dim()}D input)")

    def forward(self, input):
        self._check_input_dim(input)
        # Eval with running statistics, or a job of one rank: plain batch
        # normalization. (Eval without them normalizes by the whole batch.)
        if (not self.training and self.track_running_stats) or \
                _shared.ps_size(self.process_set) == 1:
            return super().forward(input)
        factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats and self.num_batches_tracked is not None:
            self.num_batches_tracked.add_(1)
            if self.momentum is None:
                factor = 1.0 / float(self.num_batches_tracked)

        channels = input.shape[1]
        dims = [0] + list(range(2, input.dim()))
        count = input.numel() // channels
        stat_dtype = torch.float64 if input.dtype == torch.float64 else torch.float32
        x = input.to(stat_dtype)
        if count > 0:
            mean = x.mean(dims)
            m2 = ((x - mean.reshape(1, -1, *[1] * (input.dim() - 2))) ** 2).sum(dims)
        else:
            mean = torch.zeros(channels, dtype=stat_dtype, device=input.device)
            m2 = torch.zeros(channels, dtype=stat_dtype, device=input.device)
        n = torch.full((1,), float(count), dtype=stat_dtype, device=input.device)
        local = torch.cat([n, mean, m2]).reshape(1, -1)
        # Backward sums the statistics' gradients over the ranks: the
        # gradient of the whole batch's normalization.
        stats = mpi_ops._AllgatherFn.apply(local, None, self.process_set, mpi_ops.Sum)
        counts, means, m2s = stats[:, :1], stats[:, 1:1 + channels], stats[:, 1 + channels:]
        total = counts.sum()
        if float(total.detach()) <= 0:
            raise ValueError("SyncBatchNorm got no elements on any rank")
        g_mean = (counts * means).sum(0) / total
        g_m2 = (m2s + counts * (means - g_mean) ** 2).sum(0)
        var = g_m2 / total

        if self.training and self.track_running_stats and self.running_mean is not None:
            with torch.no_grad():
                n_all = float(total.detach())
                unbiased = var * (n_all / (n_all - 1)) if n_all > 1 else var
                self.running_mean.mul_(1 - factor).add_(g_mean.to(self.running_mean.dtype),
                                                        alpha=factor)
                self.running_var.mul_(1 - factor).add_(unbiased.to(self.running_var.dtype),
                                                       alpha=factor)

        shape = [1, channels] + [1] * (input.dim() - 2)
        out = (x - g_mean.reshape(shape)) * torch.rsqrt(var.reshape(shape) + self.eps)
        out = out.to(input.dtype)
        if self.affine:
            out = out * self.weight.reshape(shape) + self.bias.reshape(shape)
        return out

