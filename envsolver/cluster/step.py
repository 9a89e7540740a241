"""The step `verify --cluster` runs on one node of each partition, and what it printed, read back. Pure.

The step is one `srun` with the partition's options: `sh -c SCRIPT envsolver-verify PYTHON -m envsolver verify
-p PREFIX --json ...`. SCRIPT is a constant: the cluster probe (slurm.PROBE_SCRIPT: the node's name, nvidia-smi's
GPUs and driver, `ldd --version`, `uname -m`), then the command it was given ("$@", so every value stays one
argv word and no shell reads it), its output and its exit status between markers. The step's own exit status
is then 0 whatever verify found; a failure of srun is srun's (slurm.py turns it into a SlurmError).

Sample (a lab node, tests/data/cluster-verify/):
    == envsolver-probe: node gpu04
    ...                                   (the probe, as parse.parse_probe reads it)
    == envsolver-probe: end
    == envsolver-verify: begin
    {"ok": true, "target": {...}, "checks": [{"id": "driver", "status": "pass", ...}, ...]}
    == envsolver-verify: exit 0
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, get_args

from envsolver.cluster.model import Partition
from envsolver.cluster.parse import Probe, parse_probe
from envsolver.cluster.slurm import PROBE_SCRIPT
from envsolver.verify.checks_base import Check, Status

NAME = "envsolver-verify"  # the script's $0 and the job's name
MARK = "== envsolver-verify: "
SCRIPT = "\n".join(
    [
        PROBE_SCRIPT,
        f"printf '{MARK}begin\\n'",
        '"$@" 2>&1',
        f"printf '{MARK}exit %s\\n' \"$?\"",
    ]
)
WAIT_S = 30  # how long a step waits for a free node of its partition (srun --immediate)
TIME_MIN = 10  # the step's time limit in minutes (srun --time), within the usual partition limits
# The node's verify ends within its probe's limit (3 x 120 s + 60 s, verify/run.py); importing torch from a
# cold shared filesystem is the slow part.
TIMEOUT_S = 480.0
MAX_SAID = 2000  # characters kept of what the node printed besides its report
MAX_REPORT = 1 << 20  # characters a report may take (a full verify report is about 10 kB)
MAX_TRIES = 64  # lines that start with `{` tried as the report's first, from the last
_STATUSES: frozenset[Status] = frozenset(get_args(Status))
_EXIT = re.compile(re.escape(MARK) + r"exit ([0-9]{1,3})")


def options(partition: Partition) -> tuple[str, ...]:
    """The partition's srun options; `--gres=gpu:1` when they ask for no GPU (a step without one sees none)."""
    words = partition.srun_argv()
    if partition.slurm.gres is None and partition.slurm.gpus is None:
        words = (*words, "--gres=gpu:1")
    return words


def node_command(python: str, prefix: str, lock: str | None, gpu_test: bool, only: Sequence[str]) -> tuple[str, ...]:
    """`PYTHON -m envsolver verify -p PREFIX --json` and the verify options passed on."""
    words = [python, "-m", "envsolver", "verify", "-p", prefix, "--json"]
    words += ["--lock", lock] if lock is not None else []
    words += ["--gpu-test"] if gpu_test else []
    for check_id in only:
        words += ["--check", check_id]
    return tuple(words)


def argv(partition_options: Sequence[str], command: Sequence[str], wait_s: int = WAIT_S) -> tuple[str, ...]:
    """One task on one node, giving up when no node is free within `wait_s` seconds; srun ends the step at once
    on Ctrl-C (--quit-on-interrupt) rather than printing its status."""
    return (
        "srun",
        *partition_options,
        "--nodes=1",
        "--ntasks=1",
        f"--immediate={wait_s}",
        f"--time={TIME_MIN}",
        "--quit-on-interrupt",
        f"--job-name={NAME}",
        "sh",
        "-c",
        SCRIPT,
        NAME,
        *command,
    )


@dataclass(frozen=True)
class Reply:
    """What one step printed: the probe; whether verify started, its exit status, its JSON document (a report or a
    failure, as printed; None when there was none to read), the report's checks, and the other lines it printed."""

    probe: Probe
    started: bool
    exit: int | None
    document: dict[str, Any] | None
    checks: tuple[Check, ...]
    said: str


def read(text: str) -> Reply:
    """Never raises, whatever the text."""
    lines = text.splitlines()
    begin = next((i for i, line in enumerate(lines) if line.rstrip() == f"{MARK}begin"), None)
    probe = parse_probe("\n".join(lines[:begin]) if begin is not None else text)
    if begin is None:
        return Reply(probe, False, None, None, (), _trim(text))
    section = lines[begin + 1 :]
    status = None
    for i in range(len(section) - 1, -1, -1):
        match = _EXIT.fullmatch(section[i].rstrip())
        if match:
            status, section = int(match.group(1)), section[:i]
            break
    document, rest = _document(section)
    return Reply(probe, True, status, document, _checks(document), _trim("\n".join(rest)))


def _trim(text: str) -> str:
    text = text.strip()
    return text if len(text) <= MAX_SAID else "…" + text[-MAX_SAID:]


def _document(lines: list[str]) -> tuple[dict[str, Any] | None, list[str]]:
    """The last JSON object that starts a line and has `ok` (verify prints it indented, `{` alone on its first
    line, as the last thing it prints), and the lines around it. Only the last MAX_TRIES lines that start with
    `{` are tried, each read no further than MAX_REPORT characters, so the time stays bounded whatever a node
    prints (a decode error counts the lines before it: a try over the whole text costs the whole text)."""
    decoder = json.JSONDecoder(parse_constant=_no_constant)  # NaN and Infinity are not JSON: no report
    starts, at = [], 0
    for i, line in enumerate(lines):
        if line.startswith("{"):
            starts.append((i, at))
        at += len(line) + 1
    text = "\n".join(lines)
    for i, here in reversed(starts[-MAX_TRIES:]):
        window = text[here : here + MAX_REPORT]
        try:
            doc, end = decoder.raw_decode(window)
        except (ValueError, RecursionError):
            continue
        if isinstance(doc, dict) and "ok" in doc:
            after = text[here + end :].split("\n")
            return doc, [*lines[:i], *(line for line in after if line.strip())]
    return None, lines


def _no_constant(word: str) -> Any:
    raise ValueError(f"{word} is not JSON")


def _text(value: str) -> str:
    """A string as it can be printed: a lone surrogate (JSON's \\udXXX) becomes '?'."""
    return value.encode("utf-8", "replace").decode("utf-8")


def _checks(document: dict[str, Any] | None) -> tuple[Check, ...]:
    """The report's checks; () when the document is not a report whose every check is readable."""
    items = document.get("checks") if document is not None else None
    if not isinstance(items, list) or not items:
        return ()
    checks = []
    for item in items:
        if not isinstance(item, dict):
            return ()
        check_id, status, detail, fix = (item.get("id"), item.get("status"), item.get("detail"), item.get("fix", ""))
        if not (isinstance(check_id, str) and isinstance(detail, str) and isinstance(fix, str)):
            return ()
        if not isinstance(status, str) or status not in _STATUSES:  # a list or a mapping is not hashable
            return ()
        checks.append(Check(_text(check_id), status, _text(detail), _text(fix)))
    return tuple(checks)


INSTALL = (
    "Install envsolver into a Python that the compute nodes can run, on the shared filesystem (python3 -m venv "
    "/shared/envsolver, then /shared/envsolver/bin/pip install the envsolver you use here), and run verify "
    "--cluster with it (/shared/envsolver/bin/envsolver verify --cluster ...)."
)


def trouble(reply: Reply, python: str, prefix: str) -> str | None:
    """Why the node's verify gave no report, as a message ending with the fix; None when it gave one."""
    if reply.checks:
        return None
    node = reply.probe.node or "the node"
    by_hand = (
        f"Run `{shlex.join([python, '-m', 'envsolver', 'verify', '-p', prefix])}` on {node} to see what it prints, "
        "then run the same command again."
    )
    said = " / ".join(line.strip() for line in reply.said.splitlines() if line.strip())[-600:]
    if not reply.started:
        return f"the step on {node} printed no verify section ({said or 'nothing'}). {by_hand}"
    if reply.exit in (126, 127):
        return f"{node} cannot run {python} (exit {reply.exit}: {said or 'no message'}). {INSTALL}"
    missing = [line.strip() for line in reply.said.splitlines() if "No module named" in line]
    if missing:  # envsolver itself, or a package it needs (a python that sees envsolver's source only)
        return f"{python} on {node} cannot import envsolver or a package it needs ({missing[-1][:300]}). {INSTALL}"
    error = reply.document.get("error") if reply.document is not None else None
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        fix = error.get("fix") if isinstance(error.get("fix"), str) else None
        return (
            f"envsolver verify could not run on {node}: {error['message']} "
            f"{fix or ''} The prefix must be on a filesystem that every node mounts at the same path as here; "
            f"{by_hand[0].lower()}{by_hand[1:]}"
        ).replace("  ", " ")
    status = f"exit {reply.exit}" if reply.exit is not None else "no exit status"
    return f"the verify on {node} printed no report envsolver can read ({status}: {said or 'nothing'}). {by_hand}"
