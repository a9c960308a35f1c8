"""kolo.ray.ElasticRayExecutor: an elastic Kolo job on Ray actors (the API of
horovod.ray.ElasticRayExecutor).

    settings = ElasticRayExecutor.create_settings(min_np=2, max_np=4)
    executor = ElasticRayExecutor(settings, cpus_per_slot=1)
    executor.start()
    results = executor.run(train)     # the final epoch's results, in rank order
    executor.shutdown()

`train` runs on every worker and is an elastic training function in the
usual form (docs/elastic.md): it calls kolo.init() (or kolo.torch's), makes
a state (kolo.elastic.ObjectState, kolo.torch.elastic.TorchState, ...) and
runs its loop under kolo.elastic.run (or the framework's), committing the
state as it goes.

Slots: every alive Ray node offers floor(CPU / cpus_per_slot) slots (and
with use_gpu, at most floor(GPU / gpus_per_slot)), counted from the node's
total resources. Each worker is an actor pinned to its node; one that cannot
get its resources yet waits, pending, until it can (or its node goes away).
run() starts min(max_np, slots) workers (at least min_np, waiting up to
elastic_timeout for them) as the first epoch, then, every
discovery_interval_s:

- a worker actor that died (ray.kill, its process crashed, its Ray node was
  lost) is dropped; kolod ends the epoch at once, the survivors'
  collectives fail with MembershipChangedError and kolo.elastic.run restores
  the last commit and resets them into the next epoch (ranks renumbered:
  survivors first, in their old order);
- while fewer than max_np workers run and no worker has finished, the
  executor asks for a new worker on each node with a free slot (a
  replacement on the slot a dead worker left, or a slot on a node Ray
  added). It starts as a joiner (KOLO_ELASTIC_JOINER=1); kolo.init() waits
  in it until the running workers reach a commit, where their state's
  check_host_updates() raises HostsUpdatedInterrupt on all of them alike:
  they reset without restoring, and the new epoch syncs the state from rank
  0 to everyone, the joiner included;
- once any worker returns, the job is finishing: nothing is added, pending
  workers are cancelled, and run() waits for the others.

So an epoch ends, and the state goes back to its last commit, when a worker
is lost; it ends at a commit (nothing lost) when workers join. run() raises
when a worker's function raises (any error but a membership change, which
kolo.elastic.run handles inside the worker), when fewer than min_np workers
have run for longer than elastic_timeout, when a node failed
max_failures_per_host times (it gets no more workers), or when the job has
changed size more than reset_limit times.

Every node that gets workers needs a kolod, found or started as by
RayExecutor (kolo.ray's docstring), from start() on, and stopped at
shutdown(). The Peer plane runs plaintext on loopback when every Ray node
is on one machine, else over mutual TLS (peer_tls_* in the settings); a
node added later that would break that rule gets no workers. Every worker
gets KOLO_COORDINATOR (the peer address of the first node's kolod while it
runs the job, else of another node that does), so a job may grow onto
nodes it did not start on.

Workers are given KOLO_ELASTIC=1, KOLO_ELASTIC_MIN_SIZE and
KOLO_ELASTIC_MAX_SIZE besides a RayExecutor worker's variables; each run()
is a job of its own (a new KOLO_JOB_ID and token).

callbacks: functions called in the driver, in order, with each value rank 0
passes to kolo.ray.elastic.report(value) (e.g. a dict of metrics); other
ranks' reports are dropped.
"""

import dataclasses
import logging
import os
import secrets
import shutil
import time
import uuid

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from kolo.ray._daemon import KoloDaemon, _answers
from kolo.ray._job import Settings, _one_machine, stop_daemons

__all__ = ["ElasticRayExecutor", "ElasticSettings", "report"]

_log = logging.getLogger("kolo.ray.elastic")

# The queue rank 0's report() puts values on (set in a worker by run()).
_reports = None


def report(value):
    """In a worker: hands `value` to run()'s callbacks, from rank 0 only
    (the others' values are dropped). Does nothing without callbacks."""
    if _reports is None:
        return
    import kolo
    if kolo.rank() == 0:
        try:
            _reports.put(value)
        except ray.exceptions.RayError as e:   # the driver is going away: training goes on
            _log.warning("report() dropped a value: %s", type(e).__name__)


@dataclasses.dataclass
class ElasticSettings(Settings):
    """What ElasticRayExecutor.create_settings returns: Settings's fields
    (timeout_s, placement_group_timeout_s, peer_tls_*, kolod_args) and the
    elastic ones."""
    min_np: int = 1
    max_np: int = 0                  # 0: no bound but the slots
    reset_limit: int = 0             # 0: no limit
    elastic_timeout: float = 600.0
    discovery_interval_s: float = 1.0
    max_failures_per_host: int = 3


@ray.remote(max_restarts=0, max_concurrency=2)
class _ElasticWorker:
    """One worker process of an elastic job. Threaded (two calls at once), so
    that joined() answers while run() runs."""

    def node(self):
        return ray.get_runtime_context().get_node_id(), ray.util.get_node_ip_address()

    def run(self, env, fn, args, kwargs, reports):
        import os
        # By module: Ray may ship this class by value, with globals of its own.
        import kolo.ray.elastic as this
        os.environ.update(env)
        this._reports = reports
        result = fn(*(args or ()), **(kwargs or {}))
        try:
            import kolo
            rank = kolo.rank()
        except Exception:  # noqa: BLE001 — the function may have shut kolo down
            rank = None
        return rank, result

    def joined(self):
        """Whether this worker's kolo session is attached to an epoch (a
        joiner's kolo.init() returns once an epoch admits it)."""
        import sys
        kolo = sys.modules.get("kolo")
        return bool(kolo is not None and kolo.is_initialized())


def _is_lost(error):
    """A worker gone with its process or node (not an error of its code)."""
    lost = (ray.exceptions.RayActorError, ray.exceptions.WorkerCrashedError,
            ray.exceptions.NodeDiedError, ray.exceptions.ActorUnschedulableError,
            ray.exceptions.OutOfMemoryError)
    return isinstance(error, lost) and not isinstance(error, ray.exceptions.RayTaskError)


class _Member:
    """A worker actor: pending (waiting for its resources) until placed, then
    running its function."""

    def __init__(self, actor, node_id, ready):
        self.actor = actor
        self.node_id = node_id
        self.ready = ready          # node() ref: resolves once placed
        self.ref = None             # run() ref once running
        self.rank = None            # the KOLO_RANK hint it was given
        self.local_rank = None
        self.joiner = False


class ElasticRayExecutor:
    """Runs an elastic Kolo job on Ray actors; see the module's docstring."""

    @classmethod
    def create_settings(cls, min_np=None, max_np=None, reset_limit=None, elastic_timeout=600,
                        timeout_s=30, placement_group_timeout_s=100, discovery_interval_s=1.0,
                        max_failures_per_host=3, peer_tls_ca="", peer_tls_cert="",
                        peer_tls_key="", kolod_args=(), min_workers=None, max_workers=None,
                        min_num_proc=None, max_num_proc=None, **unsupported):
        """min_np (aliases min_workers, min_num_proc; default 1), max_np
        (max_workers, max_num_proc; default: every slot), reset_limit (how
        many times the job may change size; default no limit),
        elastic_timeout (s with fewer than min_np workers before the job
        fails), timeout_s (a kolod's or a worker's start), the Peer plane's
        TLS files and kolod_args as in RayExecutor.create_settings."""
        ssh = {k: v for k, v in unsupported.items()
               if k in ("ssh_identity_file", "ssh_str", "nics", "verbose")}
        other = set(unsupported) - set(ssh)
        if other:
            raise TypeError(f"create_settings: unknown arguments {sorted(other)}")
        if ssh.get("nics"):
            raise NotImplementedError(
                "nics: kolod picks its Peer address itself (the Ray node's address); "
                "it cannot be limited to given interfaces from here")
        lo = _first(min_np, min_workers, min_num_proc, default=1)
        hi = _first(max_np, max_workers, max_num_proc, default=0)
        if lo < 1 or (hi and hi < lo):
            raise ValueError(f"need 1 <= min_np <= max_np (got min_np={lo}, max_np={hi})")
        return ElasticSettings(timeout_s=timeout_s,
                               placement_group_timeout_s=placement_group_timeout_s,
                               peer_tls_ca=peer_tls_ca, peer_tls_cert=peer_tls_cert,
                               peer_tls_key=peer_tls_key, kolod_args=tuple(kolod_args),
                               min_np=lo, max_np=hi, reset_limit=reset_limit or 0,
                               elastic_timeout=elastic_timeout,
                               discovery_interval_s=discovery_interval_s,
                               max_failures_per_host=max_failures_per_host)

    def __init__(self, settings=None, use_gpu=False, cpus_per_slot=1, gpus_per_slot=None,
                 env_vars=None, override_discovery=True, min_workers=None, max_workers=None):
        if not override_discovery:
            raise NotImplementedError(
                "override_discovery=False (a host discovery script): the executor's slots "
                "come from the Ray cluster's nodes; run kolorun --host-discovery-script "
                "outside Ray for script-driven discovery")
        if gpus_per_slot and not use_gpu:
            raise ValueError("gpus_per_slot needs use_gpu=True")
        self.settings = settings or ElasticSettings()
        if min_workers is not None or max_workers is not None:
            self.settings = dataclasses.replace(
                self.settings,
                min_np=min_workers if min_workers is not None else self.settings.min_np,
                max_np=max_workers if max_workers is not None else self.settings.max_np)
        if not isinstance(self.settings, ElasticSettings):
            raise TypeError("settings: use ElasticRayExecutor.create_settings(...)")
        self.cpus_per_slot = cpus_per_slot
        self.gpus_per_slot = (gpus_per_slot or 1) if use_gpu else 0
        self.env_vars = {str(k): str(v) for k, v in (env_vars or {}).items()}
        self._daemons = {}          # node id -> (daemon actor, socket, peer address)
        self._local = None          # the Peer plane runs plaintext on loopback
        self._members = []          # the running run()'s workers, pending ones included
        self._started = False
        self.job_id = None
        self.epochs = 0             # times the last run() changed size (after its start):
                                    # workers lost, or joining, seen in one poll count once

    # ------------------------------------------------------------ slots

    def _nodes(self):
        """{node id: (ip, slots)} of the alive Ray nodes with slots."""
        out = {}
        for n in ray.nodes():
            if not n.get("Alive"):
                continue
            res = n.get("Resources", {})
            slots = int(res.get("CPU", 0) // self.cpus_per_slot) if self.cpus_per_slot else 1 << 30
            if self.gpus_per_slot:
                slots = min(slots, int(res.get("GPU", 0) // self.gpus_per_slot))
            if slots > 0:
                out[n["NodeID"]] = (n["NodeManagerAddress"], slots)
        return out

    def _daemon(self, node_id, ip):
        """(socket, peer address) of the node's kolod for the job, found or
        started; None when the node cannot take part (see the docstring)."""
        if node_id in self._daemons:
            return self._daemons[node_id][1:]
        s = self.settings
        known = [self._ip_of[n] for n in self._daemons] + [ip]
        if self._local and not _one_machine(known):
            _log.warning("Ray node %s (%s) is on another machine than the job's kolods, whose "
                         "Peer plane runs plaintext on loopback: it gets no workers", node_id, ip)
            return None
        d = KoloDaemon.options(num_cpus=0, scheduling_strategy=NodeAffinitySchedulingStrategy(
            node_id, soft=False)).remote()
        try:
            sock = ray.get(d.attach.remote(), timeout=s.timeout_s)
            tls = (s.peer_tls_ca, s.peer_tls_cert, s.peer_tls_key)
            if sock is not None:
                found = ray.get(d.existing.remote(), timeout=s.timeout_s + 30)
            elif self._local:
                found = ray.get(d.start.remote(self._tag, "127.0.0.1",
                                               list(s.kolod_args) + ["--peer_plaintext"],
                                               s.timeout_s), timeout=s.timeout_s + 30)
            elif all(tls):
                found = ray.get(d.start.remote(
                    self._tag, ip, list(s.kolod_args) + [
                        f"--peer_tls_ca={tls[0]}", f"--peer_tls_cert={tls[1]}",
                        f"--peer_tls_key={tls[2]}"], s.timeout_s), timeout=s.timeout_s + 30)
            else:
                raise ValueError(
                    "the Ray cluster spans machines and a node has no kolod: the kolods "
                    "kolo.ray starts need peer_tls_ca, peer_tls_cert and peer_tls_key in the "
                    "settings (the Peer plane runs plaintext only when every node is on one "
                    "machine)")
        except BaseException:
            stop_daemons([d])
            raise
        self._daemons[node_id] = (d, *found)
        self._ip_of[node_id] = ip
        return found

    # ------------------------------------------------------------ lifecycle

    def start(self):
        """Waits (up to elastic_timeout) for min_np slots, and finds or starts
        the kolod of every node with slots."""
        if self._started:
            raise RuntimeError("ElasticRayExecutor already started")
        self._tag = "ray-elastic-" + uuid.uuid4().hex[:12]
        self._ip_of = {}
        deadline = time.monotonic() + self.settings.elastic_timeout
        while True:
            nodes = self._nodes()
            if sum(slots for _, slots in nodes.values()) >= self.settings.min_np:
                break
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"the Ray cluster has {sum(s for _, s in nodes.values())} slot(s) of "
                    f"{self.cpus_per_slot} CPU(s), fewer than min_np {self.settings.min_np}")
            time.sleep(self.settings.discovery_interval_s)
        self._local = _one_machine([ip for ip, _ in nodes.values()])
        self._started = True
        try:
            for node_id, (ip, _) in nodes.items():
                self._daemon(node_id, ip)
        except BaseException:
            self.shutdown()
            raise

    def shutdown(self):
        """Ends the workers of a run in progress, then the kolods the executor
        started."""
        self._kill_members(self._members)
        self._members = []
        for node_id in list(self._daemons):
            self._drop_daemon(node_id)
        self._started = False

    def _drop_daemon(self, node_id):
        """Stops the node's kolod if the executor started it (a daemon actor
        that is gone with its node is let go)."""
        d, sock, _ = self._daemons.pop(node_id)
        try:
            stop_daemons([d])
        except ray.exceptions.RayError as e:
            _log.info("the kolod actor of node %s is gone: %s", node_id[:12], type(e).__name__)
            # Its kolod ended with it (PR_SET_PDEATHSIG). Nodes on one machine
            # share its file system: remove the folder it had started in.
            folder = os.path.dirname(sock)
            if self._local and os.path.basename(folder).startswith(f"kolo-{self._tag}-") \
                    and not _answers(sock):
                shutil.rmtree(folder, ignore_errors=True)

    @property
    def workers(self):
        """The actor handles of the workers running now (not the pending ones)."""
        return [m.actor for m in self._members if m.ref is not None]

    def _kill_members(self, members):
        for m in members:
            ray.kill(m.actor, no_restart=True)

    # ------------------------------------------------------------ run

    def run(self, worker_fn, callbacks=None, args=None, kwargs=None):
        """worker_fn(*args, **kwargs) on every worker of an elastic job; the
        return values of the workers that finished it (the final epoch), in
        their final rank order."""
        if not self._started:
            raise RuntimeError("ElasticRayExecutor is not started")
        if self._members:
            raise RuntimeError("ElasticRayExecutor.run is already running")
        self.job_id = "ray-elastic-" + uuid.uuid4().hex[:16]
        self.epochs = 0
        token = secrets.token_hex(16)
        reports = None
        if callbacks:
            from ray.util.queue import Queue
            # On the driver's node, which the job cannot outlive anyway.
            reports = Queue(actor_options={
                "num_cpus": 0, "scheduling_strategy": NodeAffinitySchedulingStrategy(
                    ray.get_runtime_context().get_node_id(), soft=False)})
        run = _Run(self, worker_fn, args, kwargs, token, reports, list(callbacks or ()))
        try:
            return run.go()
        finally:
            self._kill_members(self._members + run.finished)
            self._members = []
            if reports is not None:
                reports.shutdown()


def _first(*values, default):
    for v in values:
        if v is not None:
            return int(v)
    return default


class _Run:
    """One run() of an ElasticRayExecutor."""

    def __init__(self, ex, fn, args, kwargs, token, reports, callbacks):
        self.ex, self.s = ex, ex.settings
        self.fn, self.args, self.kwargs = fn, args, kwargs
        self.token, self.reports, self.callbacks = token, reports, callbacks
        self.failures = {}          # node id -> failures
        self.results = {}           # index -> (rank, result)
        self.finishing = False
        self.finished = []          # members whose function returned
        self.short_since = None     # when fewer than min_np started to run

    @property
    def members(self):
        return self.ex._members

    def running(self):
        return [m for m in self.members if m.ref is not None]

    def _request(self, node_id):
        actor = _ElasticWorker.options(
            num_cpus=self.ex.cpus_per_slot, num_gpus=self.ex.gpus_per_slot,
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False)).remote()
        m = _Member(actor, node_id, actor.node.remote())
        self.members.append(m)
        return m

    def _want(self):
        """New workers to ask for: {node id: count}, for the free slots of
        nodes that may take workers, up to max_np with the pending ones."""
        nodes = self.ex._nodes()
        cap = (self.s.max_np or 1 << 30) - len(self.members)
        want = {}
        for node_id, (ip, slots) in nodes.items():
            if cap <= 0:
                break
            if self.failures.get(node_id, 0) >= self.s.max_failures_per_host:
                continue
            free = slots - sum(1 for m in self.members if m.node_id == node_id)
            if free <= 0 or self.ex._daemon(node_id, ip) is None:
                continue
            want[node_id] = min(free, cap)
            cap -= want[node_id]
        return want, nodes

    def _env(self, m, size, local_size, joiner):
        sock, _ = self.ex._daemons[m.node_id][1:]
        env = dict(self.ex.env_vars)
        env.update({
            "KOLO_SOCKET": sock, "KOLO_JOB_ID": self.ex.job_id, "KOLO_JOB_TOKEN": self.token,
            "KOLO_RANK": str(m.rank), "KOLO_SIZE": str(size),
            "KOLO_LOCAL_RANK": str(m.local_rank),
            "KOLO_LOCAL_SIZE": str(local_size),
            "KOLO_COORDINATOR": self._coordinator(),
            "KOLO_ELASTIC": "1", "KOLO_ELASTIC_MIN_SIZE": str(self.s.min_np),
            "KOLO_ELASTIC_MAX_SIZE": str(self.s.max_np)})
        if joiner:
            env["KOLO_ELASTIC_JOINER"] = "1"
        return env

    def _coordinator(self):
        """The first node's kolod while it runs workers, else one that does."""
        busy = [m.node_id for m in self.running() if m.node_id in self.ex._daemons]
        if self.first_node in busy or (not busy and self.first_node in self.ex._daemons):
            return self.ex._daemons[self.first_node][2]
        return self.ex._daemons[busy[0] if busy else next(iter(self.ex._daemons))][2]

    def _launch(self, m, size, local_size, joiner):
        env = self._env(m, size, local_size, joiner)
        m.joiner = joiner
        m.ref = m.actor.run.remote(env, self.fn, self.args, self.kwargs, self.reports)

    def go(self):
        s = self.s
        want, _ = self._want()
        for node_id, n in want.items():
            for _ in range(n):
                self._request(node_id)
        # The first epoch: the workers placed within timeout_s (at least
        # min_np, waiting up to elastic_timeout for them).
        t0 = time.monotonic()
        while True:
            placed = self._placed(timeout=1.0)
            if len(placed) >= s.min_np and (len(placed) == len(self.members) or
                                            time.monotonic() - t0 > s.timeout_s):
                break
            if time.monotonic() - t0 > s.elastic_timeout:
                raise TimeoutError(f"{len(placed)} worker(s) placed, fewer than min_np "
                                   f"{s.min_np}, after {s.elastic_timeout} s")
        order = list(dict.fromkeys(node_id for node_id in self.ex._daemons))
        first = sorted(placed, key=lambda m: order.index(m.node_id))
        self.first_node = first[0].node_id
        local = {}
        for rank, m in enumerate(first):
            m.rank, m.local_rank = rank, local.get(m.node_id, 0)
            local[m.node_id] = m.local_rank + 1
        for m in first:
            self._launch(m, len(first), local[m.node_id], joiner=False)
        _log.info("job %s: %d worker(s) started", self.ex.job_id, len(first))
        while True:
            self._drain()
            if self.finishing and not self.running():
                break
            if self.finishing:
                self._end_unjoined()
            else:
                self._grow()
            self._check_size()
            self._watch(timeout=s.discovery_interval_s)
        self._drain()
        ranked = sorted(self.results.values(), key=lambda r: (r[0] is None, r[0] or 0))
        return [result for _, result in ranked]

    def _placed(self, timeout):
        """The members placed on their nodes (pending ones waited for up to
        `timeout`); members whose placement failed are dropped."""
        pending = [m for m in self.members if m.ready is not None]
        if pending:
            ready, _ = ray.wait([m.ready for m in pending], num_returns=len(pending),
                                timeout=timeout)
            done = set(ready)
            for m in pending:
                if m.ready in done:
                    try:
                        ray.get(m.ready)
                        m.ready = None
                    except ray.exceptions.RayError as e:
                        _log.warning("a worker on node %s could not start: %s", m.node_id, e)
                        self.members.remove(m)
                        ray.kill(m.actor, no_restart=True)
        return [m for m in self.members if m.ready is None and m.ref is None]

    def _grow(self):
        """Starts the placed pending workers as joiners and asks for more."""
        joined = []
        for m in self._placed(timeout=0):
            held = {o.rank for o in self.running()}
            local_held = {o.local_rank for o in self.running() if o.node_id == m.node_id}
            m.rank = min(r for r in range(len(held) + 1) if r not in held)
            m.local_rank = min(r for r in range(len(local_held) + 1) if r not in local_held)
            self._launch(m, len(self.running()) + 1, len(local_held) + 1, joiner=True)
            joined.append(m.node_id[:12])
        if joined:
            self._changed(f"{len(joined)} worker(s) join on node(s) {', '.join(joined)}")
        want, nodes = self._want()
        for node_id in [n for n in self.ex._daemons if n not in nodes]:
            _log.warning("job %s: Ray node %s is gone", self.ex.job_id, node_id[:12])
            self.ex._drop_daemon(node_id)
        for m in [m for m in self.members if m.node_id not in nodes]:
            if m.ref is None:       # pending on a node that went away
                self.members.remove(m)
                ray.kill(m.actor, no_restart=True)
        for node_id, n in want.items():
            for _ in range(n):
                self._request(node_id)

    def _check_size(self):
        n = len(self.running())
        if n >= self.s.min_np:
            self.short_since = None
        elif self.short_since is None:
            self.short_since = time.monotonic()
        elif time.monotonic() - self.short_since > self.s.elastic_timeout:
            raise RuntimeError(f"job {self.ex.job_id}: {n} worker(s) running, fewer than "
                               f"min_np {self.s.min_np}, for {self.s.elastic_timeout} s")

    def _end_unjoined(self):
        """Once the job is finishing, ends the joiners no epoch admitted (they
        would wait for a commit that never comes)."""
        joiners = [m for m in self.running() if m.joiner]
        if not joiners:
            return
        refs = [m.actor.joined.remote() for m in joiners]
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=5)
        for m, ref in zip(joiners, refs):
            try:
                joined = ref in ready and ray.get(ref)
            except ray.exceptions.RayError:
                joined = False       # gone: _watch sees it
            if not joined:
                _log.info("job %s: the job finished before worker (rank hint %s) joined it",
                          self.ex.job_id, m.rank)
                self.members.remove(m)
                ray.kill(m.actor, no_restart=True)

    def _changed(self, why):
        self.ex.epochs += 1
        _log.info("job %s: %s (change %d)", self.ex.job_id, why, self.ex.epochs)
        if self.s.reset_limit and self.ex.epochs > self.s.reset_limit:
            raise RuntimeError(f"job {self.ex.job_id} changed size more than reset_limit "
                               f"{self.s.reset_limit} times ({why})")

    def _watch(self, timeout):
        """Waits up to `timeout` for workers to end, and handles those that did."""
        running = self.running()
        if not running:
            time.sleep(timeout)
            return
        done, _ = ray.wait([m.ref for m in running], num_returns=len(running), timeout=timeout)
        done = set(done)
        lost = 0
        for m in running:
            if m.ref not in done:
                continue
            try:
                self.results[id(m)] = ray.get(m.ref)
                self.finishing = True
                self.members.remove(m)
                self.finished.append(m)
            except Exception as e:  # noqa: BLE001
                if not _is_lost(e):
                    raise
                self.failures[m.node_id] = self.failures.get(m.node_id, 0) + 1
                self.members.remove(m)
                ray.kill(m.actor, no_restart=True)
                _log.warning("job %s: worker (rank hint %s) on node %s lost: %s",
                             self.ex.job_id, m.rank, m.node_id[:12], type(e).__name__)
                lost += 1
                if not self.running() and not self.finishing:
                    raise RuntimeError(f"job {self.ex.job_id}: every worker was lost "
                                       "(no state left to go on from)") from e
        if lost:
            self._changed(f"{lost} worker(s) lost")
        if self.finishing:
            pending = [m for m in self.members if m.ref is None]
            for m in pending:
                self.members.remove(m)
            self.ex._kill_members(pending)

    def _drain(self):
        if self.reports is None:
            return
        while not self.reports.empty():
            value = self.reports.get()
            for cb in self.callbacks:
                cb(value)
