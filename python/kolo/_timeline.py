"""horovod's start_timeline / stop_timeline over kolod's per-job timeline
(shared by kolo.tensorflow and kolo.torch), and KOLO_TIMELINE.

Each kolod records the collectives of the job's ranks attached to it (one
thread row per rank, the phases QUEUED, NEGOTIATED, FUSED, REDUCED and DONE
of every tensor) and hands the trace to the job when asked; it never writes
a file itself. So on each node the first rank (local rank 0) starts and
stops its daemon's recording and writes the file, with its own permissions:
rank 0 writes `file_path`, the first rank of node k > 0 writes
`file_path + ".node<k>"`. The other ranks may call the functions too, as
Horovod allows; they only check the arguments.

A timeline still recording at shutdown(), or at interpreter exit without
one, is stopped and written then: so KOLO_TIMELINE=<path>, read when init()
runs, records the whole run into <path>.
"""

import atexit
import os
import secrets
import threading
import warnings

from kolo._native import core
from kolo._topology import cross_rank

ENV = "KOLO_TIMELINE"


class _Recording:
    """This process's view of the job timeline it started (the state that
    start_timeline, stop_timeline, shutdown and the exit hook share)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.path = None  # where it will be written; None: not recording
        self.exit_hook = False


_recording = _Recording()


def _writes():
    """Whether this rank talks to kolod and writes a file (local rank 0)."""
    return core.local_rank() == 0


def _file_of(path):
    """The file this rank writes for `path`: rank 0's node writes `path`
    itself, node k the suffix .node<k>."""
    node = cross_rank()
    return path if node == 0 else f"{path}.node{node}"


def _checked_path(file_path):
    if file_path is None or (isinstance(file_path, (str, bytes)) and not file_path):
        raise ValueError("start_timeline needs a file path (file_path is empty)")
    path = os.fspath(file_path)
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    # Absolute now: a chdir before the stop does not move the file.
    return os.path.abspath(path)


def start_timeline(file_path, mark_cycles=False):
    """Starts recording a timeline of this job's collectives, to be written
    to `file_path` (Chrome trace JSON; open it in Perfetto or
    chrome://tracing) by stop_timeline(), shutdown() or interpreter exit.

    Every rank may call it (Horovod's contract). Each node's daemon records
    that node's ranks: rank 0 writes `file_path`, the first rank of node k > 0
    writes `file_path + ".node<k>"`. Calling it again while recording
    restarts the recording, to be written to the new path (what was recorded
    so far is dropped). ValueError when `file_path` is empty, or when this
    rank writes the file and its directory does not exist or is not writable.

    `mark_cycles` is accepted for compatibility: kolod negotiates each
    request as it comes, not in background cycles, so there are no cycles to
    mark; True only warns so.
    """
    path = _checked_path(file_path)
    if mark_cycles:
        warnings.warn("kolo: mark_cycles is ignored: kolod negotiates each request as it "
                      "comes, not in background cycles, so there are no cycles to mark",
                      stacklevel=2)
    writes = _writes()
    if writes:
        directory = os.path.dirname(_file_of(path))
        if not os.path.isdir(directory) or not os.access(directory, os.W_OK | os.X_OK):
            raise ValueError(f"start_timeline: cannot write the timeline into {directory} "
                             "(no such directory, or not writable)")
    with _recording.lock:
        if writes:
            core.timeline_start(0)
        _recording.path = path
        if not _recording.exit_hook:
            atexit.register(_stop_at_exit)
            _recording.exit_hook = True


def stop_timeline():
    """Stops the timeline start_timeline() began and writes it (on local
    rank 0 of each node; see start_timeline). The file is replaced at once
    (written beside it, then renamed), never left half written. ValueError
    when no timeline was started. OSError when no file can be made there:
    the recording then goes on, so a later stop may try again; once kolod
    has handed the trace over, an error (KoloError, OSError) loses it."""
    with _recording.lock:
        if _recording.path is None:
            raise ValueError("stop_timeline: no timeline is being recorded "
                             "(call start_timeline(file_path) first)")
        if not _writes():
            _recording.path = None
            return
        target = _file_of(_recording.path)
        tmp, fd = _open_beside(target)
        _recording.path = None
        _write_trace(tmp, fd, target)


def _open_beside(target):
    """A new file next to `target` to write the trace into, with the
    caller's permissions (0666 less the umask, as open() gives)."""
    tmp = f"{target}.{secrets.token_hex(6)}.tmp"
    return tmp, os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)


def _write_trace(tmp, fd, target):
    """Stops kolod's recording, writes it into `tmp` (open as `fd`) and
    renames that to `target`."""
    try:
        with os.fdopen(fd, "wb") as f:
            trace, _events, dropped = core.timeline_stop()
            f.write(trace.encode("utf-8"))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    if dropped:
        warnings.warn(f"kolo: the timeline in {target} is missing {dropped} events: kolod keeps "
                      "a bounded number per job; record a shorter span", stacklevel=3)


def _finish(why):
    """Stops and writes a timeline still recording, warning instead of
    raising (shutdown and exit must go on)."""
    with _recording.lock:
        if _recording.path is None:
            return
        path, _recording.path = _recording.path, None
        try:
            if core.is_initialized() and _writes():
                target = _file_of(path)
                _write_trace(*_open_beside(target), target)
        except Exception as e:  # noqa: BLE001 - reported, shutdown goes on
            warnings.warn(f"kolo: the timeline for {path} was not written at {why}: {e}",
                          stacklevel=3)


def at_init(environ):
    """Called by init: starts the timeline KOLO_TIMELINE (else Horovod's
    HOROVOD_TIMELINE) names, if set and
    none is recording yet (init may run twice)."""
    path = environ.get(ENV) or environ.get("HOROVOD_TIMELINE")
    if not path:
        return
    with _recording.lock:
        if _recording.path is not None:
            return
    start_timeline(path)


def at_shutdown():
    """Called by shutdown before it detaches."""
    _finish("shutdown")


def _stop_at_exit():
    _finish("exit")
