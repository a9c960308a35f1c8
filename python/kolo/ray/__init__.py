"""Kolo jobs on a Ray cluster: `RayExecutor` (the API of horovod.ray's).

    executor = RayExecutor(RayExecutor.create_settings(timeout_s=60), num_hosts=2,
                           num_workers_per_host=2)
    executor.start()
    results = executor.run(train)      # train() on every rank, results in rank order
    executor.shutdown()

One Ray actor per rank, placed by a placement group (STRICT_SPREAD, one bundle
per host, for num_hosts x num_workers_per_host; PACK, one bundle per worker,
for num_workers). Ranks are ordered by node (the node of the first worker
first), then by their index on the node.

Every node that holds workers needs a kolod. When one answers on the node's
socket (KOLO_SOCKET in the Ray worker's environment, else
/run/kolo/kolod.sock) the job uses it. Otherwise the executor starts one for
the job on that node, from a daemon actor (no CPU), on a private socket under
a temporary folder, and stops it at shutdown(). Its binary is $KOLO_KOLOD, else
`kolod` on PATH, else the checkout's bazel-bin/daemon/kolod.

The Peer plane of the kolods the executor starts: when all the job's nodes are
on one machine (every node address loopback, or all the same address) they
listen on 127.0.0.1 with `--peer_plaintext`; otherwise they listen on the
node's address with mutual TLS, and the settings must name the files
(peer_tls_ca, peer_tls_cert, peer_tls_key: paths valid on every node); without
them start() raises ValueError rather than run the Peer plane in plaintext.

Each worker gets, in its os.environ before any user code runs: KOLO_SOCKET,
KOLO_JOB_ID (new at each start()), KOLO_JOB_TOKEN (128 random bits, passed to
the actors only), KOLO_RANK, KOLO_SIZE, KOLO_LOCAL_RANK, KOLO_LOCAL_SIZE,
KOLO_COORDINATOR (the peer address of rank 0's kolod) when the job spans
nodes, and start()'s extra_env_vars.

ElasticRayExecutor (kolo.ray.elastic) runs an elastic job the same way,
replacing lost workers and adding workers as slots appear.
"""

import os
import uuid

import ray
from ray.util.placement_group import placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from kolo.ray._job import Settings, job_env, stop_daemons
from kolo.ray.elastic import ElasticRayExecutor

__all__ = ["RayExecutor", "ElasticRayExecutor", "Settings", "KoloConfig"]


@ray.remote
class _Worker:
    """One rank."""

    def __init__(self):
        self.executable = None

    def node(self):
        return ray.get_runtime_context().get_node_id(), ray.util.get_node_ip_address()

    def update_env(self, env):
        os.environ.update(env)

    def start_executable(self, cls, args, kwargs):
        if cls is not None:
            self.executable = cls(*(args or ()), **(kwargs or {}))

    def execute(self, fn):
        return fn(self.executable)

    def run(self, fn, args, kwargs):
        return fn(*(args or ()), **(kwargs or {}))


def __getattr__(name):
    if name == "KoloConfig":   # needs ray[train]'s packages: imported on use
        from kolo.ray.train import KoloConfig
        return KoloConfig
    raise AttributeError(name)


class RayExecutor:
    """Runs a Kolo job on Ray actors; see the module's docstring."""

    @classmethod
    def create_settings(cls, timeout_s=30, placement_group_timeout_s=100, peer_tls_ca="",
                        peer_tls_cert="", peer_tls_key="", kolod_args=()):
        return Settings(timeout_s, placement_group_timeout_s, peer_tls_ca, peer_tls_cert,
                        peer_tls_key, tuple(kolod_args))

    def __init__(self, settings=None, num_workers=None, num_hosts=None, num_workers_per_host=1,
                 cpus_per_worker=1, use_gpu=False, gpus_per_worker=None):
        if (num_workers is None) == (num_hosts is None):
            raise ValueError("give either num_workers or num_hosts (with num_workers_per_host)")
        if gpus_per_worker and not use_gpu:
            raise ValueError("gpus_per_worker needs use_gpu=True")
        self.settings = settings or Settings()
        self.num_workers = num_workers
        self.num_hosts = num_hosts
        self.num_workers_per_host = num_workers_per_host
        self.cpus_per_worker = cpus_per_worker
        self.gpus_per_worker = (gpus_per_worker or 1) if use_gpu else 0
        self.workers = []        # in rank order
        self.job_id = None
        self._daemons = []
        self._pg = None

    def _place(self):
        """The placement group and each worker's bundle index."""
        per = {"CPU": self.cpus_per_worker}
        if self.gpus_per_worker:
            per["GPU"] = self.gpus_per_worker
        if self.num_hosts is not None:
            n = self.num_workers_per_host
            bundles = [{k: v * n for k, v in per.items()} for _ in range(self.num_hosts)]
            pg, index = placement_group(bundles, strategy="STRICT_SPREAD"), \
                [h for h in range(self.num_hosts) for _ in range(n)]
        else:
            pg = placement_group([dict(per) for _ in range(self.num_workers)], strategy="PACK")
            index = list(range(self.num_workers))
        try:
            ray.get(pg.ready(), timeout=self.settings.placement_group_timeout_s)
        except Exception:
            remove_placement_group(pg)
            raise
        return pg, index

    def start(self, executable_cls=None, executable_args=None, executable_kwargs=None,
              extra_env_vars=None):
        """Places the workers, starts the kolods the nodes lack, gives every
        worker its environment and then its executable_cls(*args, **kwargs)."""
        if self.workers:
            raise RuntimeError("RayExecutor already started")
        self.job_id = "ray-" + uuid.uuid4().hex[:16]
        self._pg, index = self._place()
        try:
            self._start(index, executable_cls, executable_args, executable_kwargs,
                        extra_env_vars)
        except BaseException:
            self.shutdown()
            raise

    def _start(self, index, executable_cls, executable_args, executable_kwargs, extra_env_vars):
        workers = [_Worker.options(
            num_cpus=self.cpus_per_worker, num_gpus=self.gpus_per_worker,
            scheduling_strategy=PlacementGroupSchedulingStrategy(
                self._pg, placement_group_bundle_index=b)).remote() for b in index]
        self.workers = workers
        nodes = ray.get([w.node.remote() for w in workers], timeout=self.settings.timeout_s)
        order = list(dict.fromkeys(node_id for node_id, _ in nodes))
        by_rank = sorted(range(len(workers)),
                         key=lambda i: (order.index(nodes[i][0]), i))
        self.workers = [workers[i] for i in by_rank]
        nodes = [nodes[i] for i in by_rank]

        self._daemons, envs = job_env(nodes, self.settings, self.job_id, extra_env_vars)
        calls = [w.update_env.remote(env) for w, env in zip(self.workers, envs)]
        ray.get(calls)
        ray.get([w.start_executable.remote(executable_cls, executable_args, executable_kwargs)
                 for w in self.workers])

    def run_remote(self, fn, args=None, kwargs=None):
        """fn(*args, **kwargs) on every worker; the object refs, in rank order."""
        self._check()
        return [w.run.remote(fn, args, kwargs) for w in self.workers]

    def run(self, fn, args=None, kwargs=None):
        """fn(*args, **kwargs) on every worker; the results, in rank order."""
        return ray.get(self.run_remote(fn, args, kwargs))

    def execute(self, fn):
        """fn(executable) on every worker; the results, in rank order."""
        self._check()
        return ray.get([w.execute.remote(fn) for w in self.workers])

    def execute_single(self, fn):
        """fn(executable) on rank 0; its result."""
        self._check()
        return ray.get(self.workers[0].execute.remote(fn))

    def _check(self):
        if not self.workers:
            raise RuntimeError("RayExecutor is not started")

    def shutdown(self):
        """Ends the workers, then the kolods the executor started."""
        for w in self.workers:
            ray.kill(w)
        self.workers = []
        try:
            stop_daemons(self._daemons)
        finally:
            self._daemons = []
            if self._pg is not None:
                remove_placement_group(self._pg)
                self._pg = None
