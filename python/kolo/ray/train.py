"""kolo.ray.KoloConfig: a Ray Train backend that makes a trainer's workers
the ranks of one Kolo job.

    trainer = DataParallelTrainer(train_loop, backend_config=KoloConfig(),
                                  scaling_config=ScalingConfig(num_workers=2))

Before the training function runs, every worker gets the environment a
RayExecutor gives its workers (kolo.ray's docstring), ranks in Ray Train's
worker order, and each node's kolod is found or started the same way; the
kolods started for the trainer stop when its workers shut down. Needs
ray[train]'s packages (pandas, pyarrow, pydantic).
"""

import dataclasses
import os
import uuid

import ray
from ray.train.backend import Backend, BackendConfig

from kolo.ray._job import Settings, job_env, stop_daemons


def _node():
    return ray.get_runtime_context().get_node_id(), ray.util.get_node_ip_address()


def _update_env(env):
    os.environ.update(env)


@dataclasses.dataclass
class KoloConfig(BackendConfig, Settings):
    """Settings's fields (timeout_s, peer_tls_ca/cert/key, kolod_args) and
    extra_env_vars for every worker."""
    extra_env_vars: dict = dataclasses.field(default_factory=dict)

    @property
    def backend_cls(self):
        return _KoloBackend


class _KoloBackend(Backend):
    def on_start(self, worker_group, backend_config):
        nodes = worker_group.execute(_node)
        job_id = "ray-train-" + uuid.uuid4().hex[:16]
        self._daemons, envs = job_env(nodes, backend_config, job_id,
                                       backend_config.extra_env_vars)
        for i, env in enumerate(envs):
            worker_group.execute_single(i, _update_env, env)

    def on_shutdown(self, worker_group, backend_config):
        daemons, self._daemons = getattr(self, "_daemons", []), []
        stop_daemons(daemons)
