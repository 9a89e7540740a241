"""The step `verify --cluster` runs on a node of each partition, and what one node printed, read back. Pure.

The step is one `srun` with the partition's options: `sh -c SCRIPT envsolver-verify PREFIX/bin/python -I -c PROBE
OPTIONS...`. SCRIPT is a constant: the cluster probe (slurm.PROBE_SCRIPT: the node's name, nvidia-smi's GPUs and
driver, `ldd --version`, `uname -m`), then the command it was given ("$@", so every value stays one argv word and
no shell reads it), its output and its exit status between markers. The command runs the ENVIRONMENT's own
interpreter, on the node's architecture, on verify's probe (envsolver/verify/probe.py: standard library only, one
file, no __file__ needed) handed over as source: nothing of envsolver, and never the login node's interpreter,
runs on the node. `-I` (isolated) keeps the submit shell's PYTHONPATH, PYTHONHOME and the user's site-packages
out of the probe and of the children it starts (torch's import). The node prints its facts; the login node
evaluates verify's checks over them with the code `envsolver verify` runs (verify/run.checks_of), the lock read
here. The step's own exit status is then 0 whatever the probe found; a failure of srun is srun's (slurm.py turns
it into a SlurmError).

Sample (a lab node, tests/data/cluster-verify/):
    == envsolver-probe: node gpu04
    ...                                   (the probe, as parse.parse_probe reads it)
    == envsolver-probe: end
    == envsolver-verify: begin
    {                                     (verify's probe's facts, as probe.py prints them)
     "driver": {...}, "probe_version": 2, "python": {...}, "torch": {...}, ...
    }
    == envsolver-verify: exit 0
"""

from __future__ import annotations

import collections
import io
import json
import re
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envsolver.cluster.model import Partition
from envsolver.cluster.parse import Probe, parse_probe
from envsolver.cluster.slurm import PROBE_SCRIPT
from envsolver.core import pystart, textlines
from envsolver.kb.model import KnowledgeBase
from envsolver.lock import lockfile
from envsolver.verify import render, run
from envsolver.verify.checks_base import Check
from envsolver.verify.probe import OP_RUNNER

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
# The node's probe ends within its limit (3 x 120 s + 60 s, as verify/run.py allows it); importing torch from a
# cold shared filesystem is the slow part.
TIMEOUT_S = 480.0
MAX_SAID = 2000  # characters kept of what the node printed besides its facts
MAX_REPORT = 1 << 20  # characters the facts may take (a full probe's are about 10 kB)
MAX_TRIES = 64  # lines that start with `{` tried as the report's first, from the last
PROBE_SOURCE = run.PROBE.read_text(encoding="utf-8")  # verify's probe, handed to the node's python as source
_EXIT = re.compile(re.escape(MARK) + r"exit ([0-9]{1,3})")


def options(partition: Partition) -> tuple[str, ...]:
    """The partition's srun options; `--gres=gpu:1` when they ask for no GPU (a step without one sees none)."""
    words = partition.srun_argv()
    if partition.slurm.gres is None and partition.slurm.gpus is None:
        words = (*words, "--gres=gpu:1")
    return words


def python_of(prefix: str) -> str:
    """The interpreter a node runs: the environment's own (the prefix as every node mounts it)."""
    return f"{prefix.rstrip('/') or ''}/bin/python"


def node_command(
    prefix: str,
    kb: KnowledgeBase,
    lock: lockfile.Lock | None,
    gpu_test: bool,
    timeout: float = run.TIMEOUT_S,
    only: tuple[str, ...] = (),
) -> tuple[str, ...]:
    """`PREFIX/bin/python -I -c PROBE OPTIONS`: verify's probe, as source, asked what `envsolver verify` asks it
    (run.probe_options: the knowledge base's headers, the lock's PyPI distributions; torch, DeepSpeed and the GPU
    test as the checks `only` names, every check when none, read them: run.children_for). The GPU test runs
    envsolver's op_runner.py from envsolver's package directory: with --gpu-test it must be on a filesystem the
    nodes mount."""
    asked = run.children_for(only or None, gpu_test)
    options = run.probe_options(
        asked.deepspeed,
        asked.gpu_test,
        timeout,
        run.headers_of(kb),
        dists=run.dists_of(lock),
        stream=False,
        op_runner=OP_RUNNER,
        torch=asked.torch,
    )
    return tuple(pystart.command(python_of(prefix), "-c", PROBE_SOURCE, *options))


def words(command: Sequence[str]) -> tuple[str, ...]:
    """What each task of the step runs: `sh -c SCRIPT envsolver-verify COMMAND...` (the command as argv words,
    never read by a shell); fanout.argv puts it after srun's options."""
    return ("sh", "-c", SCRIPT, NAME, *command)


Judge = Callable[[Mapping[str, Any]], Sequence[Check]]  # one node's facts -> verify's checks (on the login node)


def shown(argv: Sequence[str]) -> list[str]:
    """The step's argv as a report shows it: the probe's source (about 20 kB) named by its file instead."""
    return [f"<the source of {run.PROBE}>" if word == PROBE_SOURCE else word for word in argv]


@dataclass(frozen=True)
class Reply:
    """What one node printed: the cluster probe; whether the environment's python started, its exit status, its
    facts (None when it printed none to read), verify's checks over them and verify's report (the document
    `envsolver verify --json` prints, made here from those checks), and the other lines it printed."""

    probe: Probe
    started: bool
    exit: int | None
    facts: dict[str, Any] | None
    checks: tuple[Check, ...]
    document: dict[str, Any] | None
    said: str


def read(text: str, prefix: str, judge: Judge) -> Reply:
    """One node's text -> its reply, its facts judged by `judge`. Never raises, whatever the text. Its lines are
    read one at a time (core.textlines) and only offsets into it are kept, so the memory stays a few times the
    text's, whatever it holds (5 MB of `{` lines took 208 MB as lists of lines)."""
    begin = next(((at, line) for at, line in textlines.lines(text) if line.rstrip() == f"{MARK}begin"), None)
    probe = parse_probe(text[: begin[0]] if begin is not None else text)
    if begin is None:
        return Reply(probe, False, None, None, (), None, _trim(text))
    section_at = _line_end(text, begin[0] + len(begin[1]))
    status, section_end = None, len(text)
    for at, line in textlines.lines(text, section_at):
        match = _EXIT.fullmatch(line.rstrip())
        if match:
            status, section_end = int(match.group(1)), at
    facts, rest = _document(text[section_at:section_end])
    checks = _judged(facts, judge)
    document = render.as_json(Path(python_of(prefix)), Path(prefix), list(checks)) if checks else None
    return Reply(probe, True, status, facts, checks, document, _trim(rest))


def _line_end(text: str, at: int) -> int:
    """Where the line after the break at AT starts (AT when no break is there)."""
    if text.startswith("\r\n", at):
        return at + 2
    return at + 1 if at < len(text) else at


def _judged(facts: dict[str, Any] | None, judge: Judge) -> tuple[Check, ...]:
    """verify's checks over the facts, each made printable; () without facts. (checks.run keeps a check that
    breaks on odd facts as a failed check: the judge does not raise.)"""
    if facts is None:
        return ()
    return tuple(Check(_text(c.id), c.status, _text(c.detail), _text(c.fix)) for c in judge(facts))


def _trim(text: str) -> str:
    text = text.strip()
    return text if len(text) <= MAX_SAID else "…" + text[-MAX_SAID:]


def _document(text: str) -> tuple[dict[str, Any] | None, str]:
    """The last JSON object that starts a line and holds the probe's `probe_version` (the probe prints it as the
    last thing, `{` alone on its first line), and the text around it (the lines after it that are not blank). Only
    the last MAX_TRIES lines that start with `{` are tried, each read no further than MAX_REPORT characters, so the
    time stays bounded whatever a node prints (a decode error counts the lines before it: a try over the whole
    text costs the whole text), and only their offsets are kept."""
    decoder = json.JSONDecoder(parse_constant=_no_constant)  # NaN and Infinity are not JSON: no facts
    starts: collections.deque[int] = collections.deque(maxlen=MAX_TRIES)
    for at, line in textlines.lines(text):
        if line.startswith("{"):
            starts.append(at)
    for here in reversed(starts):
        window = text[here : here + MAX_REPORT]
        try:
            doc, end = decoder.raw_decode(window)
        except (ValueError, RecursionError):
            continue
        if isinstance(doc, dict) and "probe_version" in doc:
            rest = io.StringIO(text[:here])
            rest.seek(here)
            at = here + end
            while at <= len(text):  # the lines after it, split at "\n" alone, as the probe prints them
                cut = text.find("\n", at)
                line = text[at : cut if cut >= 0 else len(text)]
                if line.strip():
                    rest.write(line + "\n")
                at = cut + 1 if cut >= 0 else len(text) + 1
            return doc, rest.getvalue()
    return None, text


def _no_constant(word: str) -> Any:
    raise ValueError(f"{word} is not JSON")


def _text(value: str) -> str:
    """A string as it can be printed: a lone surrogate (JSON's \\udXXX) becomes '?'."""
    return value.encode("utf-8", "replace").decode("utf-8")


def trouble(reply: Reply, prefix: str) -> str | None:
    """Why the node gave no facts to judge, as a message ending with the fix; None when it gave them."""
    if reply.checks:
        return None
    node = reply.probe.node or "the node"
    python = python_of(prefix)
    machine = f" ({reply.probe.machine})" if reply.probe.machine else ""
    asked = pystart.command(python, "-c", "import json, platform, sys; print(sys.version, platform.machine())")
    by_hand = f"Run `{shlex.join(asked)}` on {node} to see what it prints, then run the same command again."
    said = " / ".join(line.strip() for line in reply.said.splitlines() if line.strip())[-600:]
    if not reply.started:
        return f"the step on {node} printed no verify section ({said or 'nothing'}). {by_hand}"
    if reply.exit in (126, 127):
        return (
            f"{node}{machine} cannot run the environment's python {python} "
            f"(exit {reply.exit}: {said or 'no message'}). "
            f"The prefix must be on a filesystem every node mounts at the same path as here, and installed for the "
            f"node's platform (an aarch64 node needs the linux-aarch64 lock's environment). {by_hand}"
        )
    status = f"exit {reply.exit}" if reply.exit is not None else "no exit status"
    return (
        f"the environment's python on {node} printed no facts envsolver can read ({status}: {said or 'nothing'}). "
        f"{by_hand}"
    )
