"""The only module that runs Slurm's commands (sinfo, scontrol, srun). Every command is an argument list with
a timeout; a missing command, a controller that does not answer, a step Slurm refuses and a timeout each
become a SlurmError (exit 2) whose message ends with the fix. The output is returned as text for parse.py.
What a command prints is read as it arrives and bounded (envsolver.core.pipes): of stdout the first MAX_OUTPUT
bytes and the last MAX_OUTPUT_TAIL, of stderr the first and last MAX_ERRORS, whatever a node prints.

Slurm finds its controller through SLURM_CONF (or its built-in path, or DNS SRV records) exactly as the
user's own sinfo does: these functions pass the environment through unchanged.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from envsolver.cluster import running
from envsolver.cluster.parse import MARK, SINFO_ARGV
from envsolver.core import interrupts, pipes
from envsolver.core.errors import EnvsolverError, Kind
from envsolver.resolve.detect import SMI_FIELDS

QUERY_TIMEOUT_S = 60.0  # sinfo and scontrol answer in well under a second on a healthy controller
# A probe: `--immediate` gives up when no node of the partition is free within that many seconds; the step
# itself (nvidia-smi, ldd) must then end within PROBE_TIMEOUT_S.
IMMEDIATE_S = 30
PROBE_TIMEOUT_S = 120.0
MAX_OUTPUT = 4 << 20  # bytes kept of the start of a command's stdout (a probe's and verify's sections)
MAX_OUTPUT_TAIL = 1 << 20  # ... and of its end (verify's report and exit status, after what a node printed)
MAX_ERRORS = 64 << 10  # bytes kept of the start and of the end of its stderr
STDOUT = pipes.Bound(MAX_OUTPUT, MAX_OUTPUT_TAIL)
STDERR = pipes.Bound(MAX_ERRORS, MAX_ERRORS)
# nvidia-smi's queries, most fields first (detect.SMI_FIELDS): a driver that does not know a field refuses the
# whole query, saying so, with exit 2 (tests/data/slurm/nvidia-smi-h200-bad-field.txt), and is asked the next.
SMI_TRIES = " ".join(",".join(fields) for fields in SMI_FIELDS)
# The script a probe step runs on the node: a constant (nothing of the user's reaches it), so one `sh -c` word.
# Each section starts with a marker line that parse.parse_probe reads.
PROBE_SCRIPT = "\n".join(
    [
        f"printf '{MARK}node %s\\n' \"${{SLURMD_NODENAME:-$(hostname -s)}}\"",
        f"printf '{MARK}nvidia-smi\\n'",
        f"for fields in {SMI_TRIES}; do",
        '  nvidia-smi --query-gpu="$fields" --format=csv 2>&1; status=$?',
        '  [ "$status" -eq 2 ] || break',
        "done",
        f"printf '{MARK}nvidia-smi exit %s\\n' \"$status\"",
        f"printf '{MARK}ldd --version\\n'",
        "ldd --version 2>&1",
        f"printf '{MARK}uname -m\\n'",
        "uname -m",
        f"printf '{MARK}end\\n'",
    ]
)


class SlurmError(EnvsolverError):
    """A Slurm command could not run or was refused (exit 2); the message ends with the fix."""

    exit_code = 2
    kind: Kind = "failed"

    def __init__(self, message: str, said: str | None = None) -> None:
        super().__init__(message)
        self.said = said  # what the command printed about its failure, in a line (None: it did not run)


# Slurm's own words for a controller that cannot be reached, and for a machine without a configuration
# (captured in the lab: tests/data/slurm/).
_DOWN = ("Unable to contact slurm controller", "Socket timed out on send/recv", "Zero Bytes were transmitted")
_NO_CONFIG = (
    "Could not establish a configuration source",
    "Unable to process configuration file",
    "ClusterName needs to be specified",
)


# slurmstepd's line when a step or job is cancelled (src/slurmd/slurmstepd/req.c; the lab, Slurm 22.05):
#   slurmstepd-gpu02: error: *** STEP 18206.0 ON gpu02 CANCELLED AT 2026-12-01T18:33:43 ***
#   ... *** JOB 123 ON gpu02 CANCELLED AT 2026-12-01T18:33:43 DUE TO TIME LIMIT ***
_CANCELLED = re.compile(
    r"\*\*\* (?P<entity>(?:STEP|JOB) [0-9][0-9.+_a-z]*) ON (?P<node>[A-Za-z0-9._-]+) CANCELLED AT [0-9T:-]+"
    r"(?: DUE TO (?P<reason>TIME LIMIT|PREEMPTION|NODE FAILURE|JOB REQUEUE)[^*]*)? \*\*\*"
)


def _tail(text: str, lines: int = 4) -> str:
    """The last lines, each cut to 200 characters, so that a long line does not hide the ones after it."""
    kept = [_cut(line.strip()) for line in text.strip().splitlines() if line.strip()][-lines:]
    return " / ".join(kept)[:600]


def _cut(line: str) -> str:
    return line if len(line) <= 200 else line[:200] + "…"


def run(argv: Sequence[str], timeout: float, what: str, fix: str | None = None) -> str:
    """stdout of `argv` (exit 0). Raises SlurmError: the command is missing, timed out, or failed; `fix` is the
    fix a refusal or a timeout ends with (default: check the request by hand, run again). The command is
    registered while it runs (running.REGISTRY): an interrupt ends it and its step (running.end_all), in
    whichever thread it runs; one past its timeout is ended the same way."""
    command = argv[0]
    try:
        started = running.REGISTRY.start(
            argv,
            lambda: subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=False,
            ),
        )
    except running.Closing:
        raise SlurmError(
            f"`{command}` ({what}) was not started: envsolver is ending its Slurm steps (interrupted). Run the "
            "same command again."
        ) from None
    except FileNotFoundError:
        raise SlurmError(
            f"{command!r} is not on PATH, so envsolver cannot ask Slurm for {what}. Run this on a login node of "
            f"the cluster, where Slurm's commands are installed (`which {command}` finds it), or install Slurm's "
            "client commands (Debian/Ubuntu: apt-get install slurm-client)."
        ) from None
    except OSError as exc:
        raise SlurmError(
            f"cannot run {command!r} for {what}: {exc.strerror or exc}. Check that `{command} --version` runs "
            "in your shell, then run the same command again."
        ) from None
    proc = started.proc
    try:
        out, err = pipes.collect(proc, timeout, STDOUT, STDERR)
    except subprocess.TimeoutExpired:
        running.stop(started)
        raise SlurmError(
            f"`{argv[0]}` ({what}) did not finish within {timeout:.0f} s. "
            + (fix or "Check that the controller answers (`scontrol ping`), then run the same command again."),
            f"no answer within {timeout:.0f} s",
        ) from None
    except KeyboardInterrupt:  # Ctrl-C, SIGTERM, SIGHUP (envsolver.core.interrupts): end every step, this one too
        interrupts.clean_up()
        running.stop(started)
        raise
    except BaseException:
        running.stop(started)
        raise
    finally:
        running.REGISTRY.done(started)
    stdout, stderr = out.text(), err.text()
    if proc.returncode != 0:
        raise _failure(argv, what, proc.returncode, stderr or stdout, fix)
    return stdout


def _failure(argv: Sequence[str], what: str, code: int, stderr: str, fix: str | None) -> SlurmError:
    said = _tail(stderr) or f"exit {code}, no message"
    if any(words in stderr for words in _DOWN):
        return SlurmError(
            f"the Slurm controller does not answer ({said}). Check that slurmctld runs (`scontrol ping`) and that "
            "SLURM_CONF, if set, names this cluster's slurm.conf; then run the same command again.",
            said,
        )
    if any(words in stderr for words in _NO_CONFIG):
        return SlurmError(
            f"Slurm has no usable configuration on this machine ({said}). Run this on a login node of the cluster, "
            "or set SLURM_CONF to the cluster's slurm.conf, then run the same command again.",
            said,
        )
    cancelled = _CANCELLED.search(stderr)
    if cancelled is not None:
        return _cancelled(what, cancelled, fix)
    default = f"Check the same request by hand (`{' '.join(argv[:6])}`), then run the same command again."
    return SlurmError(f"`{argv[0]}` refused {what} (exit {code}: {said}). {fix or default}", said)


def _cancelled(what: str, found: re.Match[str], fix: str | None) -> SlurmError:
    """A step that ran and was cancelled: why, where Slurm says (a time limit, preemption, a node failure, a
    requeue); otherwise a signal to the step (scancel, by the user or an administrator: Slurm's line does not
    say whose), which is no fault of the request."""
    said = _cut(found.group(0).strip())
    entity, node, reason = found.group("entity"), found.group("node"), found.group("reason")
    if reason == "TIME LIMIT":
        return SlurmError(
            f"{what} ran past its time limit and Slurm cancelled {entity} on {node} ({said}). "
            + (fix or "Ask for a longer time limit, then run the same command again."),
            said,
        )
    why = (
        f"because of {reason.lower()}"
        if reason
        else "by a cancel request (scancel, yours or an administrator's, or a signal to its srun)"
    )
    return SlurmError(
        f"{what} was cancelled: Slurm cancelled {entity} on {node} {why} ({said}); the step itself did not fail. "
        "Run the same command again (`squeue --me` shows whether your jobs are being cancelled).",
        said,
    )


def check_conf(environ: Mapping[str, str] = os.environ) -> None:
    """Slurm's commands retry for 60 s when SLURM_CONF names a file that is not there; say so at once.
    Raises SlurmError."""
    value = environ.get("SLURM_CONF")
    if value and not Path(value).is_file():
        raise SlurmError(
            f"SLURM_CONF names {value!r}, which is not a file, so Slurm's commands cannot find the cluster. Set "
            "SLURM_CONF to the cluster's slurm.conf (or unset it on a login node), then run the same command again."
        )


def sinfo() -> str:
    """Partitions x nodes with their GRES, in parse.SINFO_FORMAT."""
    check_conf()
    return run(SINFO_ARGV, QUERY_TIMEOUT_S, "the partitions and their nodes")


def nodes() -> str:
    """`scontrol --oneliner show node`: every node, one line each."""
    check_conf()
    return run(("scontrol", "--oneliner", "show", "node"), QUERY_TIMEOUT_S, "the nodes")


def config() -> str:
    """`scontrol show config`: the cluster's configuration (ClusterName)."""
    check_conf()
    return run(("scontrol", "show", "config"), QUERY_TIMEOUT_S, "the cluster's name")
