"""`horovodrun`: runs kolorun with the same command line.

kolorun itself takes horovodrun's flags (docs/horovodrun.md says what each
means under Kolo). This entry point adds the two things kolorun cannot do:

- `--config-file FILE`, Horovod's YAML config: its keys become the matching
  flags, put before the command line's own flags so that those win (as in
  Horovod). PyYAML reads the file when it is installed; otherwise a small
  reader of Horovod's layout (`section:` lines, then indented `key: value`
  lines, `#` comments, plain or quoted scalars).
- `--check-build`: which frameworks this Python package has, then what
  kolorun reports.

kolorun is $KOLO_KOLORUN, else `kolorun` on PATH, else the Bazel-built one
when this package runs from a Kolo checkout.
"""

import importlib.util
import os
import subprocess
import sys

from kolo._binaries import find_binary

# Flags that take no value: horovodrun's and kolorun's own. Every other flag
# without "=" takes the next word; the command starts at the first other word.
_BOOL_FLAGS = {
    "verbose", "timeline_mark_cycles", "hierarchical_allreduce", "hierarchical_allgather",
    "autotune", "no_stall_check", "gloo", "mpi", "check_build", "private_daemon",
    "help", "helpfull", "helpshort", "version",
}

# (section, key) -> how the value becomes flags: ("value", FLAG) for FLAG VALUE,
# ("true", FLAG) for FLAG when the value is true, ("false", FLAG) for FLAG when
# it is false, ("note", WHY) for a note that the key changes nothing here.
_CONFIG_KEYS = {
    ("params", "fusion_threshold_mb"): ("value", "--fusion-threshold-mb"),
    ("params", "cycle_time_ms"): ("value", "--cycle-time-ms"),
    ("params", "cache_capacity"): ("value", "--cache-capacity"),
    ("params", "hierarchical_allreduce"): ("true", "--hierarchical-allreduce"),
    ("params", "hierarchical_allgather"): ("true", "--hierarchical-allgather"),
    ("autotune", "enabled"): ("true", "--autotune"),
    ("autotune", "log_file"): ("value", "--autotune-log-file"),
    ("autotune", "warmup_samples"): ("value", "--autotune-warmup-samples"),
    ("autotune", "steps_per_sample"): ("value", "--autotune-steps-per-sample"),
    ("autotune", "bayes_opt_max_samples"): ("value", "--autotune-bayes-opt-max-samples"),
    ("autotune", "gaussian_process_noise"): ("value", "--autotune-gaussian-process-noise"),
    ("timeline", "filename"): ("value", "--timeline-filename"),
    ("timeline", "mark_cycles"): ("true", "--timeline-mark-cycles"),
    ("stall_check", "enabled"): ("false", "--no-stall-check"),
    ("stall_check", "warning_time_seconds"): ("value", "--stall-check-warning-time-seconds"),
    ("stall_check", "shutdown_time_seconds"): ("value", "--stall-check-shutdown-time-seconds"),
    ("library_options", "mpi_threads_disable"): ("note", "Kolo uses no MPI"),
    ("library_options", "num_nccl_streams"): ("note", "kolod chooses its NCCL streams"),
    ("library_options", "ccl_bgt_affinity"): ("note", "Kolo has no oneCCL backend"),
    ("library_options", "gloo_timeout_seconds"): ("note", "Kolo uses no Gloo"),
    ("logging", "level"): ("value", "--log-level"),
    ("logging", "hide_timestamp"): ("note", "kolod's log lines always carry a timestamp"),
}


class UsageError(Exception):
    """A command line or config file horovodrun refuses."""


def _scalar(text):
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    lowered = text.lower()
    if lowered in ("true", "yes", "on"):
        return True
    if lowered in ("false", "no", "off"):
        return False
    return text


def _strip_comment(line):
    quote = None
    for i, c in enumerate(line):
        if quote:
            if c == quote:
                quote = None
        elif c in "'\"":
            quote = c
        elif c == "#" and (i == 0 or line[i - 1] in " \t"):
            return line[:i]
    return line


def parse_config(text):
    """Horovod's YAML config as {section: {key: value}} (top-level scalars
    such as `controller: gloo` as {key: value})."""
    try:
        import yaml  # noqa: F401
    except ImportError:
        yaml = None
    if yaml is not None:
        data = yaml.safe_load(text) or {}
        if not isinstance(data, dict):
            raise UsageError("--config-file: the file is not a mapping of sections")
        return data
    data, section = {}, None
    for number, raw in enumerate(text.splitlines(), 1):
        line = _strip_comment(raw).rstrip()
        if not line.strip() or line.strip() == "---":
            continue
        key, sep, value = line.strip().partition(":")
        if not sep or not key:
            raise UsageError(f"--config-file line {number}: want `key: value`, got {raw!r}")
        if line[0] in " \t":
            if section is None:
                raise UsageError(f"--config-file line {number}: indented key outside a section")
            data[section][key.strip()] = _scalar(value)
        elif value.strip():
            data[key.strip()], section = _scalar(value), None
        else:
            section = key.strip()
            data[section] = {}
    return data


def _value_word(value):
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


def config_flags(data):
    """The flags (and notes) a parsed config stands for."""
    flags, notes = [], []
    for section, body in data.items():
        if section == "controller":
            if str(body).lower() not in ("gloo", "mpi"):
                raise UsageError(f"--config-file: controller {body!r}: want gloo or mpi")
            flags.append("--" + str(body).lower())
            continue
        if not isinstance(body, dict):
            raise UsageError(f"--config-file: {section}: want a section of keys")
        for key, value in body.items():
            rule = _CONFIG_KEYS.get((section, key))
            if rule is None:
                raise UsageError(f"--config-file: {section}.{key} is not a Horovod setting "
                                 "Kolo knows (docs/horovodrun.md lists them)")
            kind, what = rule
            if kind == "value":
                flags += [what, _value_word(value)]
            elif kind == "true":
                if value is True:
                    flags.append(what)
            elif kind == "false":
                if value is False:
                    flags.append(what)
            else:
                notes.append(f"--config-file: {section}.{key} changes nothing here: {what}")
    return flags, notes


def translate(argv, read_file=None):
    """horovodrun's argv (without argv[0]) as kolorun's, and the notes to
    print, and whether --check-build was given: --config-file is replaced by
    the flags it stands for; everything else, the command included, is kept
    as it is."""
    read_file = read_file or (lambda path: open(path).read())
    out, config, notes = [], [], []
    check_build = False
    i = 0
    while i < len(argv):
        word = argv[i]
        if word == "--" or not word.startswith("-") or word == "-":
            out += argv[i:]
            break
        name, eq, value = word.lstrip("-").partition("=")
        name = name.replace("-", "_")
        if name == "config_file":
            if not eq:
                if i + 1 >= len(argv):
                    raise UsageError("--config-file needs a value")
                i += 1
                value = argv[i]
            try:
                text = read_file(value)
            except OSError as e:
                raise UsageError(f"--config-file {value}: {e.strerror or e}") from None
            flags, config_notes = config_flags(parse_config(text))
            config += flags
            notes += config_notes
        else:
            check_build = check_build or name == "check_build"
            out.append(word)
            if not eq and name not in _BOOL_FLAGS and i + 1 < len(argv) and argv[i + 1] != "--":
                i += 1
                out.append(argv[i])
        i += 1
    return config + out, notes, check_build


def find_kolorun():
    return find_binary("KOLO_KOLORUN", "kolorun", "client", "kolorun", "kolorun")


def frameworks():
    """(name, available) for each framework binding this package has."""
    package = os.path.dirname(os.path.abspath(__file__))

    def found(module):
        try:
            return importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):
            return False

    tf_ops = os.path.exists(os.path.join(package, "tensorflow", "_kolo_tf_ops.so"))
    return [
        ("TensorFlow", tf_ops and found("tensorflow")),
        ("PyTorch", os.path.isdir(os.path.join(package, "torch")) and found("torch")),
        ("MXNet", False),
    ]


def _check_build(kolorun, args):
    """kolorun's --check-build report, with its frameworks stanza (kolorun
    cannot see this package) replaced by the frameworks this package has."""
    proc = subprocess.run([kolorun] + args, stdout=subprocess.PIPE, text=True)
    ours = ["Available Frameworks:"] + [f"    [{'X' if ok else ' '}] {name}"
                                        for name, ok in frameworks()]
    lines, skipping = [], False
    for line in proc.stdout.splitlines():
        if line == "Available Frameworks:":
            lines += ours
            skipping = True
        elif skipping and line.startswith(" "):
            continue
        else:
            skipping = False
            lines.append(line)
    print("\n".join(lines))
    return proc.returncode


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args, notes, check_build = translate(argv)
    except UsageError as e:
        print(f"horovodrun: {e}", file=sys.stderr)
        return 2
    for note in notes:
        print(f"horovodrun: {note}", file=sys.stderr)
    kolorun = find_kolorun()
    if kolorun is None:
        print("horovodrun: kolorun not found: set KOLO_KOLORUN, or put kolorun on PATH "
              "(bazel build //client/kolorun:kolorun)", file=sys.stderr)
        return 127
    if check_build:
        return _check_build(kolorun, args)
    sys.stdout.flush()
    os.execv(kolorun, [kolorun] + args)


if __name__ == "__main__":
    sys.exit(main())
