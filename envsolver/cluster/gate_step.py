"""The verify step of the job script `envsolver cluster sbatch` writes: on every node of the job, the ENVIRONMENT's
python runs the gate (envsolver/verify/gate.py, standard library only) on verify's probe, against the demands the
login node derived from the knowledge base and the prefix's lock metadata (verify/demands.py). Inside the job no
login node is in the loop and envsolver itself cannot run (the environment has no PyYAML; an aarch64 node cannot
run the login node's x86-64 interpreter); what runs there is the prefix's python on two files of envsolver's
package directory, which must be on a filesystem the nodes mount (as the launcher, slurm_launch.py, is).

    srun --nodes=N --ntasks-per-node=1 --kill-on-bad-exit=0 --label --time=T PREFIX/bin/python -I GATE
        --python PREFIX/bin/python --probe PROBE --demands JSON [--check ID]... -- PROBE_OPTIONS...

Each node prints its rules' lines (srun --label numbers them); a node that fails one exits 1 and srun names it.
Every word is an argv word: the demands are JSON (control characters escaped by json.dumps), and the job script
single-quotes every word (shlex.join)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from envsolver.cluster import step
from envsolver.core import pystart
from envsolver.install import prefixmeta
from envsolver.kb.model import KnowledgeBase
from envsolver.verify import demands, gate, run

GATE = Path(gate.__file__).resolve()
PROBE = run.PROBE.resolve()


def demands_for(prefix: str, kb: KnowledgeBase) -> dict[str, Any]:
    """What every node must show for the environment at `prefix`: from the knowledge base and the lock metadata
    `envsolver install` kept there (none kept: the knowledge base's driver minimums only). Raises BadInputError
    for a kept file that cannot be read."""
    kept = prefixmeta.load(Path(prefix))
    return demands.derive(kb, kept.custom if kept is not None else None)


def argv(prefix: str, nodes: int, checks: Sequence[str], wanted: Mapping[str, Any], minutes: int) -> list[str]:
    """The verify step's srun: every node at once, one task each, labelled; the step's own time limit. `checks`
    narrows the gate to those rules (verify's check ids; others are named as not checked in the job). The probe
    imports torch only when a rule judged reads torch's facts (those of verify's check of the same id:
    run.children_for)."""
    python = step.python_of(prefix)
    head = ["srun", f"--nodes={nodes}", "--ntasks-per-node=1", "--kill-on-bad-exit=0", "--label", f"--time={minutes}"]
    document = json.dumps(dict(wanted), sort_keys=True, separators=(",", ":"))
    words = [*pystart.command(python, str(GATE)), "--python", python, "--probe", str(PROBE), "--demands", document]
    words += [w for check_id in checks for w in ("--check", check_id)]
    judged = [c for c in checks if c in gate.IDS] if checks else list(gate.IDS)
    torch = run.children_for(judged, False).torch
    return [*head, *words, "--", *run.probe_options(False, False, run.TIMEOUT_S, stream=False, torch=torch)]
