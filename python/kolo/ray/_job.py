"""What RayExecutor and KoloConfig share: the settings, and a job's kolods
and environment on a set of Ray nodes."""

import dataclasses
import ipaddress
import secrets

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from kolo.ray._daemon import KoloDaemon


@dataclasses.dataclass
class Settings:
    """What RayExecutor.create_settings returns."""
    timeout_s: float = 30.0              # placement, a kolod's start
    placement_group_timeout_s: float = 100.0
    peer_tls_ca: str = ""
    peer_tls_cert: str = ""
    peer_tls_key: str = ""
    kolod_args: tuple = ()               # more flags for the kolods the executor starts


def _one_machine(ips):
    return len(set(ips)) == 1 or all(ipaddress.ip_address(ip).is_loopback for ip in ips)


def job_env(nodes, settings, job_id, extra_env_vars=None):
    """For workers on `nodes` ((node id, ip), in rank order): the daemon
    actors (one per node; a kolod started where the node has none) and each
    worker's environment."""
    order = list(dict.fromkeys(node_id for node_id, _ in nodes))
    ips = dict(nodes)
    s = settings
    tls = (s.peer_tls_ca, s.peer_tls_cert, s.peer_tls_key)
    local = _one_machine(list(ips.values()))
    daemons = [KoloDaemon.options(
        num_cpus=0, scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False)
    ).remote() for node_id in order]
    try:
        sockets = ray.get([d.attach.remote() for d in daemons], timeout=s.timeout_s)
        if not local and not all(tls) and any(sock is None for sock in sockets):
            raise ValueError(
                "the job spans machines and a node has no kolod: the kolods kolo.ray starts "
                "need peer_tls_ca, peer_tls_cert and peer_tls_key in the settings "
                "(the Peer plane runs plaintext only when every node is on one machine)")
        args = list(s.kolod_args)
        if local:
            args.append("--peer_plaintext")
        else:
            args += [f"--peer_tls_ca={tls[0]}", f"--peer_tls_cert={tls[1]}",
                     f"--peer_tls_key={tls[2]}"]
        started = ray.get(
            [d.start.remote(job_id, "127.0.0.1" if local else ips[node_id], args,
                            s.timeout_s) if sock is None else d.existing.remote()
             for d, node_id, sock in zip(daemons, order, sockets)],
            timeout=s.timeout_s + 30)
    except BaseException:
        stop_daemons(daemons)
        raise
    daemon_of = dict(zip(order, started))     # node id -> (socket, peer address)
    token = secrets.token_hex(16)
    local_sizes = {n: sum(1 for m, _ in nodes if m == n) for n in order}
    seen = dict.fromkeys(order, 0)
    envs = []
    for rank, (node_id, _) in enumerate(nodes):
        env = {"KOLO_SOCKET": daemon_of[node_id][0], "KOLO_JOB_ID": job_id,
               "KOLO_JOB_TOKEN": token, "KOLO_RANK": str(rank), "KOLO_SIZE": str(len(nodes)),
               "KOLO_LOCAL_RANK": str(seen[node_id]),
               "KOLO_LOCAL_SIZE": str(local_sizes[node_id])}
        seen[node_id] += 1
        if len(order) > 1:
            env["KOLO_COORDINATOR"] = daemon_of[order[0]][1]
        env.update({str(k): str(v) for k, v in (extra_env_vars or {}).items()})
        envs.append(env)
    return daemons, envs


def stop_daemons(daemons):
    """Stops the kolods the daemon actors started, then the actors."""
    try:
        ray.get([d.stop.remote() for d in daemons], timeout=60)
    finally:
        for d in daemons:
            ray.kill(d)
