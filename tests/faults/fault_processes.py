"""The fault matrix's processes: kolod daemons (on this host or in network
namespaces joined by a veth pair), fault_rank processes and the jobs they
make up, each started, watched and ended by the matrix (fault_matrix.py).

Python standard library only.
"""

import os
import re
import shutil
import signal
import socket
import subprocess
import time

ADDR_A, ADDR_B = "10.254.78.1", "10.254.78.2"  # a private /30 inside our namespaces
PEER_PORT = 7371
LINE = re.compile(r"^FAULT_RANK (\w+) (.*)$")


def monotonic():
    return time.clock_gettime(time.CLOCK_MONOTONIC)


def wait_until(predicate, timeout, period=0.05):
    """Polls `predicate` until it holds or `timeout` seconds pass."""
    end = monotonic() + timeout
    while monotonic() < end:
        if predicate():
            return True
        time.sleep(period)
    return predicate()


class Namespaces:
    """Two network namespaces joined by a veth pair; removed on close."""

    def __init__(self, tag):
        self.a, self.b = f"kfm-{tag}-a", f"kfm-{tag}-b"
        self.dev_a, self.dev_b = f"kfm{tag}a"[:15], f"kfm{tag}b"[:15]
        self.made = False

    @staticmethod
    def run(*args, check=True):
        return subprocess.run(list(args), capture_output=True, text=True, check=check)

    def create(self):
        """None on success, else why namespaces cannot be used here."""
        if os.geteuid() != 0:
            return "network namespaces need root"
        if shutil.which("ip") is None:
            return "ip (iproute2) is not installed"
        r = self.run("ip", "netns", "add", self.a, check=False)
        if r.returncode != 0:
            return f"cannot create network namespaces: {r.stderr.strip()}"
        self.made = True
        self.run("ip", "netns", "add", self.b)
        self.run("ip", "link", "add", self.dev_a, "type", "veth", "peer", "name", self.dev_b)
        for ns, dev, addr in ((self.a, self.dev_a, ADDR_A), (self.b, self.dev_b, ADDR_B)):
            self.run("ip", "link", "set", dev, "netns", ns)
            self.run("ip", "-n", ns, "addr", "add", f"{addr}/30", "dev", dev)
            self.run("ip", "-n", ns, "link", "set", "lo", "up")
            self.run("ip", "-n", ns, "link", "set", dev, "up")
        return None

    def sides(self):
        return ((self.a, self.dev_a), (self.b, self.dev_b))

    def tc(self, ns, *args, check=True):
        return self.run("ip", "netns", "exec", ns, "tc", *args, check=check)

    def clear_qdiscs(self):
        for ns, dev in self.sides():
            self.tc(ns, "qdisc", "del", "dev", dev, "root", check=False)

    def close(self):
        if self.made:
            self.run("ip", "netns", "del", self.a, check=False)
            self.run("ip", "netns", "del", self.b, check=False)


class Kolod:
    """One kolod process, optionally inside a network namespace."""

    def __init__(self, binary, workdir, name, netns=None, peer=None, args=()):
        self.binary, self.name, self.netns, self.peer = binary, name, netns, peer
        self.socket = os.path.join(workdir, f"{name}.sock")
        self.log = os.path.join(workdir, f"{name}.log")
        self.args = list(args)
        self.proc = None

    def command(self):
        cmd = [self.binary, f"--socket={self.socket}", "--status_address=", "--workers=1",
               f"--node_name={self.name}"] + self.args
        cmd.append(f"--peer_address={self.peer}:{PEER_PORT}" if self.peer else "--peer_address=")
        if self.peer:
            cmd.append("--peer_plaintext")
        return (["ip", "netns", "exec", self.netns] if self.netns else []) + cmd

    def start(self):
        env = dict(os.environ, UCX_TLS="tcp")
        with open(self.log, "a") as log:
            self.proc = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT,
                                         env=env)
        if not wait_until(lambda: self.serving() or self.proc.poll() is not None, 15):
            raise RuntimeError(f"kolod {self.name} did not create its socket")
        if self.proc.poll() is not None:
            raise RuntimeError(f"kolod {self.name} exited {self.proc.returncode}: "
                               + open(self.log).read()[-400:])

    def serving(self):
        """Whether something accepts connections on the socket (a stale file does not)."""
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            try:
                s.connect(self.socket)
                return True
            except OSError:
                return False

    def alive(self):
        if self.proc is None or self.proc.poll() is not None:
            return False
        try:
            with open(f"/proc/{self.proc.pid}/stat") as f:
                return f.read().split(") ")[1][0] not in "ZX"
        except OSError:
            return False

    def signal(self, sig):
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, sig)

    def kill(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def sample(self):
        """(fds, threads, rss KiB) of the live process."""
        pid = self.proc.pid
        fds = len(os.listdir(f"/proc/{pid}/fd"))
        threads = len(os.listdir(f"/proc/{pid}/task"))
        rss = 0
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    rss = int(line.split()[1])
        return fds, threads, rss


class Rank:
    """One fault_rank process and what it printed."""

    def __init__(self, rank, daemon, proc, log):
        self.rank, self.daemon, self.proc, self.log = rank, daemon, proc, log

    def events(self):
        out = {}
        try:
            text = open(self.log).read()
        except OSError:
            return out
        for line in text.splitlines():
            m = LINE.match(line)
            if not m:
                continue
            kind, rest = m.groups()
            fields = {}
            msg = rest.split(" msg=", 1)
            for part in msg[0].split():
                if "=" in part:
                    k, v = part.split("=", 1)
                    fields[k] = v
            if len(msg) == 2:
                fields["msg"] = msg[1]
            out.setdefault(kind, fields)
        return out

    def ended(self):
        return self.proc.poll() is not None

    def end(self):
        if self.proc.poll() is None:
            try:
                os.kill(self.proc.pid, signal.SIGCONT)
            except OSError:
                pass
            self.proc.kill()
        self.proc.wait(10)


class Job:
    """The ranks of one job, spread over daemons (rank order follows `daemons`)."""

    def __init__(self, ctx, name, daemons, ranks_per_daemon, args, mode="loop", extra_env=None):
        """`extra_env` goes to every rank's environment (an elastic job's KOLO_ELASTIC*)."""
        self.ranks = []
        size = len(daemons) * ranks_per_daemon
        coordinator = f"{daemons[0].peer}:{PEER_PORT}" if len(daemons) > 1 else ""
        r = 0
        for d in daemons:
            for local in range(ranks_per_daemon):
                env = dict(os.environ, UCX_TLS="tcp", KOLO_SOCKET=d.socket, KOLO_JOB_ID=name,
                           KOLO_JOB_TOKEN=ctx.token, KOLO_RANK=str(r), KOLO_SIZE=str(size),
                           KOLO_LOCAL_RANK=str(local), KOLO_LOCAL_SIZE=str(ranks_per_daemon))
                if coordinator:
                    env["KOLO_COORDINATOR"] = coordinator
                env.update(extra_env or {})
                log = os.path.join(ctx.workdir, f"{name}.{r}.log")
                cmd = (["ip", "netns", "exec", d.netns] if d.netns else []) + \
                      [ctx.rank_binary, mode] + list(args)
                with open(log, "w") as f:
                    proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=env)
                self.ranks.append(Rank(r, d, proc, log))
                r += 1

    def wait_ready(self, timeout=30):
        return wait_until(lambda: all("ready" in k.events() or k.ended() for k in self.ranks)
                          and all("ready" in k.events() for k in self.ranks), timeout)

    def wait_ended(self, ranks, timeout):
        return wait_until(lambda: all(k.ended() for k in ranks), timeout)

    def end(self):
        for k in self.ranks:
            k.end()

    def output(self):
        return "\n".join(f"--- rank {k.rank}:\n" + open(k.log).read()[-600:] for k in self.ranks)
