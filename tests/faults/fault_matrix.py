#!/usr/bin/env python3
"""Kolo's fault matrix: every fault of issue 13 against real kolod and rank
processes, one row each, printed as a table.

Each row, in order:
  1. samples the surviving daemons (fds, threads, RSS) and /dev/shm;
  2. starts a job of fault_rank processes that loop on checked allreduces
     and waits until every rank has finished its first step;
  3. injects the fault and notes the time (CLOCK_MONOTONIC, as the ranks);
  4. waits, bounded, for the ranks that must see an error, and reads the
     status code, the message and the time each one printed;
  5. ends what is left of the job, undoes the fault (restarts a killed
     daemon, raises the link, removes the filter), samples again;
  6. runs a short job of the same shape ("next job served").
A row passes when every observing rank saw the expected code, its message
names the lost rank or node, it came within the row's bound, the daemons
that were not the victim are alive, the next job succeeded and nothing
leaked. Cross-node rows run two daemons in network namespaces joined by a
veth pair; they are skipped, with the reason, where that is not possible.

Python standard library only. Exit status 0 when no row failed.
"""

import argparse
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile

# The sibling module (Bazel runs this file from its runfiles, beside it).
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fault_processes import (  # noqa: E402
    ADDR_A, ADDR_B, PEER_PORT, Job, Kolod, Namespaces, monotonic, wait_until,
)
from fault_sharing import cross_sharing_rows, single_node_sharing_rows  # noqa: E402

# An elastic job's collectives that a membership change ended (common/membership.h).
MEMBERSHIP_CHANGED = "^MEMBERSHIP_CHANGED: "
ELASTIC_FAULTS = ("elastic: member kolod SIGKILL", "elastic: member kolod SIGSTOP",
                  "elastic: member link cut", "elastic: UCX transfer stalls, heartbeats go on")
RSS_TOLERANCE_KIB = 8 * 1024  # allocator caches and gRPC buffers settle at this scale
# gRPC starts a few threads lazily (its timer threads, the first time a job is
# aborted by a timeout): one more thread than before a row is not a leak; a
# leak grows every row and shows on the next one.
THREAD_TOLERANCE = 1


class Row:
    def __init__(self, fault, where, expected):
        self.fault, self.where, self.expected = fault, where, expected
        self.observed, self.seconds, self.alive, self.next_job, self.leaks = "-", "-", "-", "-", "-"
        self.problems, self.notes, self.skipped = [], [], None

    @property
    def result(self):
        if self.skipped:
            return "SKIP"
        return "FAIL" if self.problems else "PASS"


SHM_PREFIX = ""  # --shm_prefix: count only the /dev/shm entries with this prefix


def shm_entries():
    try:
        return len([n for n in os.listdir("/dev/shm") if n.startswith(SHM_PREFIX)])
    except OSError:
        return 0


class Context:
    def __init__(self, args):
        self.args = args
        self.kolod_binary = os.path.abspath(args.kolod)
        self.rank_binary = os.path.abspath(args.rank)
        # Under /tmp, not a test runner's private temporary folder: the
        # sharing rows' other user must reach the sockets in it.
        self.workdir = tempfile.mkdtemp(prefix="kolo-faults-", dir="/tmp")
        self.token = secrets.token_hex(16)
        self.jobs = 0

    def job_name(self, what):
        self.jobs += 1
        return f"fm-{self.jobs}-{what.strip(':')}"


def check_observers(row, ranks, t0, code, names, bound, timing):
    """Checks that each of `ranks` ended with `code` (one code or a tuple of
    them) naming one of `names` within `bound` seconds of `t0`; fills the
    row's observed columns."""
    codes = (code,) if isinstance(code, str) else tuple(code)
    worst = 0.0
    for k in ranks:
        ev = k.events()
        err = ev.get("error")
        if err is None:
            what = "finished" if "done" in ev else ("no error (hang)" if not k.ended()
                                                    else f"exit {k.proc.returncode}, no error")
            row.problems.append(f"rank {k.rank}: {what}")
            continue
        if row.observed == "-":
            row.observed = f"{err.get('code')}: {err.get('msg', '')}"
        if err.get("code") not in codes:
            row.problems.append(f"rank {k.rank}: {err.get('code')} instead of {'/'.join(codes)}")
        if names and not any(re.search(n, err.get("msg", "")) for n in names):
            row.problems.append(f"rank {k.rank}: message names none of {names}")
        worst = max(worst, float(err["t"]) - t0)
    if worst > 0:
        row.seconds = f"{worst:.2f}"
        if timing and worst > bound:
            row.problems.append(f"took {worst:.2f} s, bound {bound:g} s")


def exit_time(victim):
    """For rows whose victim exits by itself: the time it said it exits."""
    def t0(job):
        t = job.ranks[victim].events().get("exiting", {}).get("t")
        return float(t) if t else None
    return t0


def rank_named(r):
    """A pattern for a message naming rank `r` ("rank 3", "ranks 1, 3")."""
    return rf"\branks? ([0-9]+, )*{r}\b"


class Matrix:
    def __init__(self, ctx):
        self.ctx = ctx
        self.rows = []
        self.single = None
        self.ns = None
        self.ns_reason = None
        self.a = self.b = None
        self.shm_entries = shm_entries

    # --- daemons -------------------------------------------------------
    def start_single(self):
        # Any local user may reach the socket: the sharing rows' attacker is
        # another user (kolod's per-uid shares are what they test), and
        # with fewer sessions its totals are within the attacker's reach.
        self.single = Kolod(self.ctx.kolod_binary, self.ctx.workdir, "node1",
                            args=[f"--stall_timeout_s={self.ctx.args.stall_timeout_s}",
                                  "--socket_mode=0666", "--max_sessions=64"])
        self.single.start()
        self.warm([self.single])

    def start_pair(self):
        self.ns = Namespaces(str(os.getpid() % 100000))
        self.ns_reason = self.ns.create()
        if self.ns_reason:
            return
        cross_args = [f"--peer_timeout_s={self.ctx.args.peer_timeout_s}",
                      f"--stall_timeout_s={self.ctx.args.cross_stall_timeout_s}",
                      f"--transfer_timeout_s={self.ctx.args.transfer_timeout_s}"]
        self.a = Kolod(self.ctx.kolod_binary, self.ctx.workdir, "nodeA", self.ns.a, ADDR_A,
                       cross_args)
        self.b = Kolod(self.ctx.kolod_binary, self.ctx.workdir, "nodeB", self.ns.b, ADDR_B,
                       cross_args)
        self.a.start()
        self.b.start()
        self.warm([self.a, self.b])

    def warm(self, daemons):
        """One job first, so that lazily made resources are not counted as leaks."""
        if not self.next_job(daemons):
            raise RuntimeError("the first job on fresh daemons failed")

    def next_job(self, daemons, steps=20, env=None):
        job = Job(self.ctx, self.ctx.job_name("next"), daemons, 2, [f"--steps={steps}"],
                  extra_env=env)
        ok = job.wait_ended(job.ranks, 60)
        job.end()
        return ok and all(k.proc.returncode == 0 for k in job.ranks)

    def ensure(self, daemons):
        for d in daemons:
            if not d.alive():
                d.kill()
                d.start()

    # --- the row skeleton ----------------------------------------------
    def run_row(self, row, daemons, victims, inject, observers_of, code, names, bound,
                undo=None, job_args=(), after=None, t0_from=None, job_env=None):
        """The common lifecycle; `inject(job)` faults, `observers_of(job)` are the
        ranks that must report `code` naming one of `names` within `bound`."""
        survivors = [d for d in daemons if d not in victims]
        before = {d.name: d.sample() for d in survivors}
        shm_before = shm_entries()
        job = Job(self.ctx, self.ctx.job_name(row.fault.split()[0]), daemons, 2,
                  ["--steps=0"] + list(job_args), extra_env=job_env)
        try:
            if not job.wait_ready():
                row.problems.append("job did not start")
                row.notes.append(job.output())
                return
            t0 = monotonic()
            inject(job)
            observers = observers_of(job)
            job.wait_ended(observers, bound + 15)
            if t0_from:
                t0 = t0_from(job) or t0
            check_observers(row, observers, t0, code, names, bound, self.ctx.args.timing)
            if after:
                after(job, t0)
        finally:
            if undo:
                undo()
            job.end()
        self.finish_row(row, daemons, survivors, before, shm_before, job_env)

    def finish_row(self, row, daemons, survivors, before, shm_before, job_env=None):
        row.alive = "yes" if all(d.alive() for d in survivors) else "NO"
        if row.alive != "yes":
            row.problems.append("a daemon that was not the victim died")
        row.leaks = self.leaks(survivors, before, shm_before)
        if row.leaks != "none":
            row.problems.append(f"leak: {row.leaks}")
        self.ensure(daemons)
        row.next_job = "yes" if self.next_job(daemons, env=job_env) else "NO"
        if row.next_job != "yes":
            row.problems.append("the next job failed")

    def leaks(self, survivors, before, shm_before):
        found = []

        def settled():
            for d in survivors:
                if not d.alive():
                    continue
                fds, threads, rss = d.sample()
                b = before[d.name]
                if fds > b[0] or threads > b[1] + THREAD_TOLERANCE or \
                        rss > b[2] + RSS_TOLERANCE_KIB:
                    return False
            return shm_entries() <= shm_before

        wait_until(settled, 10, period=0.2)
        for d in survivors:
            if not d.alive():
                continue
            (f0, t0, r0), (f1, t1, r1) = before[d.name], d.sample()
            if f1 > f0:
                found.append(f"{d.name} fds {f0}->{f1}")
            if t1 > t0 + THREAD_TOLERANCE:
                found.append(f"{d.name} threads {t0}->{t1}")
            if r1 > r0 + RSS_TOLERANCE_KIB:
                found.append(f"{d.name} rss {r0 // 1024}->{r1 // 1024} MiB")
        if shm_entries() > shm_before:
            found.append(f"/dev/shm {shm_before}->{shm_entries()}")
        return ", ".join(found) or "none"

    # --- rows on one node ----------------------------------------------
    def single_node_rows(self):
        d = self.single
        stall = self.ctx.args.stall_timeout_s
        for fault, sig in (("trainer SIGKILL", signal.SIGKILL), ("trainer SIGTERM", signal.SIGTERM)):
            row = Row(fault, "1 node", "rank 0: ABORTED naming rank 1, <= 2 s")
            self.run_row(row, [d], [], lambda job, s=sig: os.kill(job.ranks[1].proc.pid, s),
                         lambda job: job.ranks[:1], "ABORTED", [rank_named(1)], 2)
            self.rows.append(row)
        row = Row("trainer SIGSTOP", "1 node",
                  f"rank 0: DEADLINE_EXCEEDED naming rank 1, <= stall timeout {stall:g} s + 2 s")
        self.run_row(row, [d], [], lambda job: os.kill(job.ranks[1].proc.pid, signal.SIGSTOP),
                     lambda job: job.ranks[:1], "DEADLINE_EXCEEDED", [rank_named(1)], stall + 2)
        self.rows.append(row)
        row = Row("trainer exit(3)", "1 node", "rank 0: ABORTED naming rank 1, <= 2 s")
        self.run_row(row, [d], [], lambda job: None, lambda job: job.ranks[:1], "ABORTED",
                     [rank_named(1)], 2, job_args=["--exit_rank=1", "--exit_at=50", "--exit_code=3"],
                     t0_from=exit_time(1))
        self.rows.append(row)
        self.rows.append(self.no_drain_row())
        self.rows += single_node_sharing_rows(self, Row)
        self.rows.append(self.restart_row())

    def no_drain_row(self):
        d = self.single
        row = Row("client never drains its completion ring", "1 node",
                  "that client: INVALID_ARGUMENT naming rank 0, <= 2 s; a job beside it finishes")
        before = {d.name: d.sample()}
        shm_before = shm_entries()
        bystander = Job(self.ctx, self.ctx.job_name("bystander"), [d], 2,
                        ["--steps=100", "--step_ms=40"])
        bystander.wait_ready()
        rogue = Job(self.ctx, self.ctx.job_name("nodrain"), [d], 1, [], mode="no_drain")
        try:
            rogue.wait_ended(rogue.ranks, 30)
            t0 = float(rogue.ranks[0].events().get("ready", {}).get("t", monotonic()))
            check_observers(row, rogue.ranks, t0, "INVALID_ARGUMENT", ["rank 0"], 2,
                            self.ctx.args.timing)
            bystander.wait_ended(bystander.ranks, 60)
            if not all(k.proc.returncode == 0 for k in bystander.ranks):
                row.problems.append("the job beside it failed")
                row.notes.append(bystander.output())
        finally:
            rogue.end()
            bystander.end()
        self.finish_row(row, [d], [d], before, shm_before)
        return row

    def restart_row(self):
        d = self.single
        row = Row("kolod SIGKILL + restart", "1 node",
                  "ranks: UNAVAILABLE, <= 2 s; a new kolod starts on the stale socket")
        shm_before = shm_entries()
        job = Job(self.ctx, self.ctx.job_name("restart"), [d], 2, ["--steps=0"])
        try:
            job.wait_ready()
            t0 = monotonic()
            d.kill()
            job.wait_ended(job.ranks, 17)
            check_observers(row, job.ranks, t0, "UNAVAILABLE", [], 2, self.ctx.args.timing)
        finally:
            job.end()
        stale = [p for p in (d.socket, d.socket + ".handoff") if os.path.exists(p)]
        row.notes.append(f"left by the dead kolod: {', '.join(stale) or 'nothing'}")
        try:
            d.start()
        except RuntimeError as e:
            row.problems.append(f"restart failed: {e}")
        row.alive = "restarted" if d.alive() else "NO"
        row.leaks = "none" if shm_entries() <= shm_before else \
            f"/dev/shm {shm_before}->{shm_entries()}"
        if row.leaks != "none":
            row.problems.append(f"leak: {row.leaks}")
        row.next_job = "yes" if d.alive() and self.next_job([d]) else "NO"
        if row.next_job != "yes":
            row.problems.append("the next job failed")
        return row

    # --- rows across nodes ---------------------------------------------
    def cross_rows(self):
        where = "2 nodes"
        if self.ns_reason:
            for fault in ("trainer SIGKILL", "trainer SIGTERM", "trainer SIGSTOP",
                          "trainer exit(3)", "member kolod SIGKILL", "member kolod SIGSTOP",
                          "coordinator kolod SIGKILL", "coordinator kolod SIGSTOP",
                          "coordinator link cut", "link 1% loss + 50 ms delay",
                          "UCX transfer stalls, heartbeats go on") + ELASTIC_FAULTS:
                row = Row(fault, where, "-")
                row.skipped = self.ns_reason
                self.rows.append(row)
            self.rows += cross_sharing_rows(self, Row)
            return
        a, b = self.a, self.b
        pt = self.ctx.args.peer_timeout_s
        st = self.ctx.args.cross_stall_timeout_s
        others = lambda job: job.ranks[:3]  # noqa: E731 -- ranks 0, 1 on A, 2 on B
        for fault, sig in (("trainer SIGKILL", signal.SIGKILL), ("trainer SIGTERM", signal.SIGTERM)):
            row = Row(fault, where, f"ranks 0-2: ABORTED naming rank 3, <= peer timeout {pt:g} s")
            self.run_row(row, [a, b], [], lambda job, s=sig: os.kill(job.ranks[3].proc.pid, s),
                         others, "ABORTED", [rank_named(3)], pt)
            self.rows.append(row)
        row = Row("trainer SIGSTOP", where,
                  f"ranks 0-2: DEADLINE_EXCEEDED naming rank 3, <= stall {st:g} s + {pt:g} s")
        self.run_row(row, [a, b], [], lambda job: os.kill(job.ranks[3].proc.pid, signal.SIGSTOP),
                     others, "DEADLINE_EXCEEDED", [rank_named(3)], st + pt)
        self.rows.append(row)
        row = Row("trainer exit(3)", where, f"ranks 0-2: ABORTED naming rank 3, <= {pt:g} s")
        self.run_row(row, [a, b], [], lambda job: None, others, "ABORTED", [rank_named(3)], pt,
                     job_args=["--exit_rank=3", "--exit_at=50", "--exit_code=3"],
                     t0_from=exit_time(3))
        self.rows.append(row)
        self.daemon_rows(a, b, pt)
        self.rows.append(self.link_cut_row(pt))
        self.rows.append(self.netem_row())
        self.rows.append(self.ucx_stall_row())
        self.elastic_rows(pt)
        self.rows += cross_sharing_rows(self, Row)

    def elastic_rows(self, pt):
        """The member node lost from an elastic job, each way a node can go: its
        survivors' collectives fail with MEMBERSHIP_CHANGED (ABORTED with that
        prefix), whichever plane (the Peer plane's loss report, or a UCX
        transfer to the node) notices first. The ranks do not reset, so the
        epoch that would follow never forms; the leader forgets the job once
        they are gone (the leak check)."""
        where = "2 nodes, elastic"
        a, b = self.a, self.b
        elastic = {"KOLO_ELASTIC": "1", "KOLO_ELASTIC_MIN_SIZE": "2"}
        lost_b = [MEMBERSHIP_CHANGED + r".*(nodeB|\bnode 1\b|\branks? 2)"]
        # The first elastic job makes what kolod keeps for the next ones (its
        # bounded cache of Rendezvous channels): not a leak of the rows.
        if not self.next_job([a, b], env=elastic):
            raise RuntimeError("an elastic job on fresh daemons failed")
        on_a = lambda job: job.ranks[:2]  # noqa: E731
        row = Row("elastic: member kolod SIGKILL", where,
                  f"ranks on nodeA: MEMBERSHIP_CHANGED naming nodeB, <= {pt:g} s")
        self.run_row(row, [a, b], [b], lambda job: b.kill(), on_a, "ABORTED", lost_b, pt,
                     job_env=elastic, job_args=["--floats=65536"])
        self.rows.append(row)
        row = Row("elastic: member kolod SIGSTOP", where,
                  f"ranks on nodeA: MEMBERSHIP_CHANGED naming nodeB, <= {pt:g} s + 2 s")
        self.run_row(row, [a, b], [b], lambda job: b.signal(signal.SIGSTOP), on_a, "ABORTED",
                     lost_b, pt + 2, undo=lambda: b.signal(signal.SIGCONT), job_env=elastic)
        self.rows.append(row)
        ns = self.ns
        row = Row("elastic: member link cut", where,
                  f"ranks on nodeA: MEMBERSHIP_CHANGED naming nodeB, <= {pt:g} s + 2 s")

        def up():
            ns.run("ip", "-n", ns.b, "link", "set", ns.dev_b, "up")
            wait_until(lambda: "LOWER_UP" in ns.run("ip", "-n", ns.b, "link", "show",
                                                    ns.dev_b).stdout, 5)

        self.run_row(row, [a, b], [],
                     lambda job: ns.run("ip", "-n", ns.b, "link", "set", ns.dev_b, "down"),
                     on_a, "ABORTED", lost_b, pt + 2, undo=up, job_env=elastic)
        self.rows.append(row)
        # The data link stalls while the Peer plane's heartbeats flow: the
        # transport's stall watch ends the link, a loss of the node like any
        # other (both sides see the other as lost).
        bound = self.ctx.args.ucx_stall_bound_s
        row = Row("elastic: UCX transfer stalls, heartbeats go on", where,
                  f"all ranks: MEMBERSHIP_CHANGED naming a node or rank, <= {bound:g} s")
        self.run_row(row, [a, b], [], self.stall_ucx, lambda job: job.ranks, "ABORTED",
                     [MEMBERSHIP_CHANGED + r".*\b(node|ranks?) \d"], bound,
                     undo=ns.clear_qdiscs, job_args=["--floats=262144"], job_env=elastic)
        self.rows.append(row)

    def daemon_rows(self, a, b, pt):
        where = "2 nodes"
        # A node is named by its name, its index in the job ("node 1") or, for
        # the coordinator, the address the ranks were given (KOLO_COORDINATOR).
        for role, victim, other, lost, names in (
                ("member", b, a, "nodeB", ["nodeB", r"\bnode 1\b"]),
                ("coordinator", a, b, "nodeA", ["nodeA", r"\bnode 0\b", re.escape(ADDR_A)])):
            own = (lambda job: job.ranks[2:]) if victim is b else (lambda job: job.ranks[:2])
            rest = (lambda job: job.ranks[:2]) if victim is b else (lambda job: job.ranks[2:])
            row = Row(f"{role} kolod SIGKILL", where,
                      f"ranks on {other.name}: ABORTED naming {lost}, <= {pt:g} s; "
                      f"its own ranks: UNAVAILABLE")

            def own_unavailable(job, t0, row=row, own=own):
                job.wait_ended(own(job), 5)
                probe = Row("", "", "")
                check_observers(probe, own(job), t0, "UNAVAILABLE", [], 2, False)
                row.problems += [f"own ranks: {p}" for p in probe.problems]

            self.run_row(row, [a, b], [victim], lambda job, v=victim: v.kill(), rest, "ABORTED",
                         names, pt, after=own_unavailable)
            self.rows.append(row)
            row = Row(f"{role} kolod SIGSTOP", where,
                      f"ranks on {other.name}: ABORTED naming {lost}, <= {pt:g} s + 2 s; "
                      f"after SIGCONT its own ranks end")

            def own_end(job, t0, row=row, own=own, victim=victim):
                victim.signal(signal.SIGCONT)
                if not job.wait_ended(own(job), pt + 10):
                    row.problems.append(f"after SIGCONT the ranks on {victim.name} hang")
                else:
                    ev = own(job)[0].events().get("error", {})
                    row.notes.append(f"after SIGCONT {victim.name}'s ranks saw "
                                     f"{ev.get('code')}: {ev.get('msg')}")

            self.run_row(row, [a, b], [victim], lambda job, v=victim: v.signal(signal.SIGSTOP),
                         rest, "ABORTED", names, pt + 2, after=own_end,
                         undo=lambda v=victim: v.signal(signal.SIGCONT))
            self.rows.append(row)

    def link_cut_row(self, pt):
        row = Row("coordinator link cut", "2 nodes",
                  f"A's ranks: ABORTED naming nodeB, B's naming nodeA, <= {pt:g} s + 2 s")
        ns = self.ns
        down = lambda job: ns.run("ip", "-n", ns.a, "link", "set", ns.dev_a, "down")  # noqa: E731

        def up():
            ns.run("ip", "-n", ns.a, "link", "set", ns.dev_a, "up")
            wait_until(lambda: "LOWER_UP" in ns.run("ip", "-n", ns.a, "link", "show",
                                                    ns.dev_a).stdout, 5)

        def b_side(job, t0):
            # A's ranks may end first (a stalled transfer): give B's theirs.
            job.wait_ended(job.ranks[2:], max(0.0, t0 + pt + 5 - monotonic()))
            probe = Row("", "", "")
            check_observers(probe, job.ranks[2:], t0, "ABORTED",
                            ["nodeA", r"\bnode 0\b", re.escape(ADDR_A)], pt + 2,
                            self.ctx.args.timing)
            row.problems += [f"B's ranks: {p}" for p in probe.problems]

        self.run_row(row, [self.a, self.b], [], down, lambda job: job.ranks[:2], "ABORTED",
                     ["nodeB", r"\bnode 1\b"], pt + 2, undo=up, after=b_side)
        return row

    def lossy_slow_link(self):
        """1% loss and 50 ms delay each way on the veth: with tc netem, or where
        the kernel has none, with iptables (statistic match for the loss) and
        an NFQUEUE that nfq_delay holds for 50 ms. Returns (how, undo) or
        (None, why not)."""
        ns = self.ns
        for n, dev in ns.sides():
            r = ns.tc(n, "qdisc", "add", "dev", dev, "root", "netem", "delay", "50ms", "loss",
                      "1%", check=False)
            if r.returncode != 0:
                break
        else:
            return "tc netem", ns.clear_qdiscs
        ns.clear_qdiscs()
        netem_error = r.stderr.strip()
        delay = self.ctx.args.nfq_delay
        if not delay or not shutil.which("iptables"):
            return None, (f"tc netem is unavailable in this kernel ({netem_error}), and the "
                          "fallback needs iptables and the nfq_delay helper "
                          "(scripts/fault_matrix.sh builds it where libnetfilter-queue-dev is "
                          "installed)")
        delayers = []

        def undo():
            for d in delayers:
                d.terminate()
            for d in delayers:
                try:
                    d.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    d.kill()
            for n, _ in ns.sides():
                ns.run("ip", "netns", "exec", n, "iptables", "-F", "INPUT", check=False)

        # On the receiving side: held packets then do not count against the
        # sender's socket (TCP small queues would throttle it to a trickle).
        for n, dev in ns.sides():
            for rule in (["-m", "statistic", "--mode", "random", "--probability", "0.01", "-j",
                          "DROP"],
                         ["-j", "NFQUEUE", "--queue-num", "7", "--queue-bypass"]):
                r = ns.run("ip", "netns", "exec", n, "iptables", "-A", "INPUT", "-i", dev, *rule,
                           check=False)
                if r.returncode != 0:
                    undo()
                    return None, (f"tc netem is unavailable ({netem_error}) and iptables "
                                  f"failed: {r.stderr.strip()}")
            delayers.append(subprocess.Popen(["ip", "netns", "exec", n, delay, "7", "50", "600"],
                                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        return "iptables statistic + NFQUEUE delay", undo

    def netem_row(self):
        row = Row("link 1% loss + 50 ms delay", "2 nodes",
                  "all ranks finish 30 checked steps (exit 0)")
        how, undo = self.lossy_slow_link()
        if how is None:
            row.skipped = undo
            return row
        row.notes.append(f"loss and delay made with {how}")
        before = {d.name: d.sample() for d in (self.a, self.b)}
        shm_before = shm_entries()
        job = Job(self.ctx, self.ctx.job_name("netem"), [self.a, self.b], 2, ["--steps=30"])
        t0 = monotonic()
        try:
            if not job.wait_ended(job.ranks, 180):
                row.problems.append("not finished in 180 s")
            bad = [k.rank for k in job.ranks if k.proc.returncode != 0]
            row.observed = "all finished" if not bad else f"ranks {bad} failed"
            row.seconds = f"{monotonic() - t0:.1f} (run)"
            if bad:
                row.problems.append(row.observed)
                row.notes.append(job.output())
        finally:
            job.end()
            undo()
        self.finish_row(row, [self.a, self.b], [self.a, self.b], before, shm_before)
        return row

    def ucx_stall_row(self):
        """Every TCP packet that is not Peer-plane traffic goes to an htb class of
        8 bit/s on both veths: UCX's TCP connections stall while the daemons'
        heartbeats (to and from the peer port) flow."""
        bound = self.ctx.args.ucx_stall_bound_s
        row = Row("UCX transfer stalls, heartbeats go on", "2 nodes",
                  f"all ranks: ABORTED/DEADLINE_EXCEEDED naming a node or rank, <= {bound:g} s; "
                  "kolod alive")
        # 1 MiB per step, so every step moves data over UCX.
        self.run_row(row, [self.a, self.b], [], self.stall_ucx, lambda job: job.ranks,
                     ("ABORTED", "DEADLINE_EXCEEDED"), ["node", "rank"], bound,
                     undo=self.ns.clear_qdiscs,
                     job_args=["--floats=262144"])
        return row

    def stall_ucx(self, job=None):
        """Every TCP packet that is not Peer-plane traffic goes to an htb class of
        8 bit/s on both veths."""
        ns = self.ns
        for n, dev in ns.sides():
            ns.tc(n, "qdisc", "add", "dev", dev, "root", "handle", "1:", "htb", "default", "10")
            ns.tc(n, "class", "add", "dev", dev, "parent", "1:", "classid", "1:10", "htb",
                  "rate", "1gbit")
            ns.tc(n, "class", "add", "dev", dev, "parent", "1:", "classid", "1:20", "htb",
                  "rate", "8bit", "ceil", "8bit")
            for match in ("sport", "dport"):
                ns.tc(n, "filter", "add", "dev", dev, "parent", "1:", "protocol", "ip",
                      "prio", "1", "u32", "match", "ip", match, str(PEER_PORT), "0xffff",
                      "flowid", "1:10")
            ns.tc(n, "filter", "add", "dev", dev, "parent", "1:", "protocol", "ip", "prio",
                  "2", "u32", "match", "ip", "protocol", "6", "0xff", "flowid", "1:20")


def print_table(rows, out):
    cols = ("fault", "where", "expected", "observed error", "s to error", "daemon alive",
            "next job", "leaks", "result")
    cells = [(r.fault, r.where, r.expected, r.observed[:90], r.seconds, r.alive, r.next_job,
              r.leaks, r.result) for r in rows]
    out.write("| " + " | ".join(cols) + " |\n")
    out.write("|" + "|".join("---" for _ in cols) + "|\n")
    for c in cells:
        out.write("| " + " | ".join(str(x).replace("|", "/") for x in c) + " |\n")
    out.write("\n")
    for r in rows:
        for p in r.problems:
            out.write(f"FAIL {r.fault} ({r.where}): {p}\n")
        if r.skipped:
            out.write(f"SKIP {r.fault} ({r.where}): {r.skipped}\n")
        for n in r.notes:
            out.write(f"note {r.fault} ({r.where}): {n}\n")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--kolod", required=True)
    p.add_argument("--rank", required=True, help="the fault_rank binary")
    p.add_argument("--single_node_only", action="store_true")
    p.add_argument("--only", choices=("elastic", "sharing"),
                   help="only the elastic rows across nodes, or only the sharing rows (root)")
    p.add_argument("--no_timing", dest="timing", action="store_false",
                   help="report seconds but do not fail rows on them (loaded machines)")
    p.add_argument("--stall_timeout_s", type=float, default=3)
    p.add_argument("--peer_timeout_s", type=float, default=5)
    p.add_argument("--cross_stall_timeout_s", type=float, default=8)
    p.add_argument("--transfer_timeout_s", type=float, default=4,
                   help="kolod's --transfer_timeout_s across nodes (a stalled data link)")
    p.add_argument("--ucx_stall_bound_s", type=float, default=15)
    p.add_argument("--keep", action="store_true", help="keep the logs' folder")
    p.add_argument("--attacker", default="",
                   help="the fault_attacker binary, for the sharing rows (skipped without it)")
    p.add_argument("--nfq_delay", default="",
                   help="the nfq_delay helper, for loss and delay where tc netem is missing")
    p.add_argument("--shm_prefix", default="",
                   help="count only these /dev/shm entries (a machine with other users)")
    args = p.parse_args()
    global SHM_PREFIX
    SHM_PREFIX = args.shm_prefix
    ctx = Context(args)
    m = Matrix(ctx)
    try:
        if args.only == "elastic":
            m.start_pair()
            if m.ns_reason:
                raise SystemExit(f"the elastic rows need network namespaces: {m.ns_reason}")
            m.elastic_rows(args.peer_timeout_s)
        elif args.only == "sharing":
            m.start_single()
            m.rows += single_node_sharing_rows(m, Row)
            if not args.single_node_only:
                m.start_pair()
                m.rows += cross_sharing_rows(m, Row)
        else:
            m.start_single()
            m.single_node_rows()
        if not args.single_node_only and not args.only:
            m.start_pair()
            m.cross_rows()
    finally:
        for d in (m.single, m.a, m.b):
            if d is not None:
                d.signal(signal.SIGCONT)
                d.kill()
        if m.ns is not None:
            m.ns.close()
        print_table(m.rows, sys.stdout)
        if args.keep:
            print(f"logs: {ctx.workdir}")
        else:
            shutil.rmtree(ctx.workdir, ignore_errors=True)
    return 1 if any(r.result == "FAIL" for r in m.rows) else 0


if __name__ == "__main__":
    sys.exit(main())
