"""One srun step on every usable node of a partition, one task per node, and its output split back per node.
Pure: builds the argv, splits the text.

The step runs `--nodes=N --ntasks-per-node=1 --nodelist=A,B,...` with `--label`, so srun prefixes every line
with its task's number (`0: `, or ` 0: ` padded to the widest number). srun relays a task's output in messages
of at most CHUNK bytes: a line longer than that comes as several labelled lines, each CHUNK bytes but the last,
possibly with other tasks' lines between them (seen in the lab, Slurm 22.05; tests/cluster/test_fanout_lab.py
holds it). `split` joins them back: a labelled line of CHUNK bytes or more was cut, and goes on in that task's
next line. (A byte sequence srun cut in the middle of a UTF-8 character decodes to U+FFFD, which re-encodes
longer, never shorter: a cut line still counts as cut.)

Which node a task ran on is what the task itself says (the probe's first line names SLURMD_NODENAME); a task
that printed nothing names no node, and the node is then among those that gave no answer.
"""

from __future__ import annotations

import io
import re
from collections.abc import Sequence

CHUNK = 1024  # bytes of a task's output srun relays as one message (Slurm's MAX_MSG_LEN, src/common/io_hdr.h)
MAX_TASK_TEXT = 8 << 20  # characters kept of one task's text (the step's whole output is bounded by slurm.py)
_LABEL = re.compile(r" {0,8}([0-9]{1,7}): ?")


def argv(
    options: Sequence[str],
    nodes: Sequence[str],
    wait_s: int,
    time_min: int,
    job_name: str,
    command: Sequence[str],
) -> tuple[str, ...]:
    """srun on every node of `nodes` (already checked names), one task each, lines labelled, giving up when they
    are not all free within `wait_s` seconds; srun ends the step at once on Ctrl-C (--quit-on-interrupt).
    A `--gpus=X` among `options` (a total for the job) becomes `--gpus-per-node=X`."""
    per_node = tuple(f"--gpus-per-node={w.removeprefix('--gpus=')}" if w.startswith("--gpus=") else w for w in options)
    return (
        "srun",
        *per_node,
        f"--nodes={len(nodes)}",
        "--ntasks-per-node=1",
        f"--nodelist={','.join(nodes)}",
        "--label",
        f"--immediate={wait_s}",
        f"--time={time_min}",
        "--quit-on-interrupt",
        f"--job-name={job_name}",
        *command,
    )


def split(text: str) -> tuple[dict[int, str], str]:
    """({task number: its text}, the lines that carry no label). Never raises. The text is read a line at a time
    into one buffer per task, so the memory stays a few times the text's whatever its lines are (5 MB of short
    lines took 208 MB as a list per line), and each task keeps at most MAX_TASK_TEXT characters."""
    parts: dict[int, io.StringIO] = {}
    sizes: dict[int, int] = {}
    cut: set[int] = set()  # tasks whose last line was cut by srun: their next labelled line goes on with it
    stray = io.StringIO()
    at = 0
    while at <= len(text):
        end = text.find("\n", at)
        end = len(text) if end < 0 else end
        line, at = text[at:end], end + 1
        match = _LABEL.match(line)
        if match is None:
            if line:
                stray.write(("\n" if stray.tell() else "") + line)
            continue
        task = int(match.group(1))
        payload = line[match.end() :]
        kept = parts.setdefault(task, io.StringIO())
        size = sizes.get(task, 0)
        if size < MAX_TASK_TEXT:
            kept.write(payload if task in cut or not size else "\n" + payload)
            sizes[task] = size + len(payload) + 1
        if len(payload.encode("utf-8", "surrogatepass")) >= CHUNK:
            cut.add(task)
        else:
            cut.discard(task)
    return {task: parts[task].getvalue() for task in sorted(parts)}, stray.getvalue()
