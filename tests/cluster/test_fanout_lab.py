"""srun's `--label` output against the real Slurm lab, split back per node by fanout.split: the lines of several
tasks interleave, a line longer than srun's message size comes cut into labelled pieces, and a last line without
a newline gets one; what each node printed is recovered exactly."""

from __future__ import annotations

import shlex
import subprocess

from envsolver.cluster import fanout
from tests.slurmlab import SlurmLab

# Each task prints its node, a line of 5000 'é' (10000 bytes, cut by srun between characters), a line of
# exactly CHUNK characters, an empty line, a line of 3000 ASCII characters, a line 'x' + 600 'é' (cut by srun
# in the middle of the 512th 'é'), and a last line without a newline.
SCRIPT = r"""
printf '%s\n' "$SLURMD_NODENAME"
python3 -c 'import sys; sys.stdout.write("\u00e9" * 5000 + "\n" + "c" * 1024 + "\n\n" + "a" * 3000 + "\n")'
python3 -c 'import sys; sys.stdout.write("x" + "\u00e9" * 600 + "\n" + "end")'
"""
# The character srun cut in two decodes as two U+FFFD: the line stays one line, that character is lost. (verify's
# --json report is ASCII, non-ASCII escaped, so a cut never falls inside a character of it.)
CUT = "x" + "é" * 511 + "\ufffd\ufffd" + "é" * 88


def expected(node: str) -> str:
    return "\n".join([node, "é" * 5000, "c" * 1024, "", "a" * 3000, CUT, "end"])


def test_every_nodes_output_is_split_back_whole(lab: SlurmLab) -> None:
    argv = fanout.argv(
        ("--partition=pair", "--gres=gpu:a100:1"), ("gpu05", "gpu06"), 10, 2, "envsolver-test", ("sh", "-c", SCRIPT)
    )
    # Read as slurm.py reads it (envsolver.core.pipes): bytes decoded with U+FFFD for what is not UTF-8.
    done = subprocess.run(list(argv), capture_output=True, timeout=60, env=lab.env, check=False)
    stdout, stderr = done.stdout.decode("utf-8", "replace"), done.stderr.decode("utf-8", "replace")
    assert done.returncode == 0, (shlex.join(argv), stderr)
    lines = done.stdout.split(b"\n")
    assert max(len(line) for line in lines) <= fanout.CHUNK + 8, "srun cuts long lines: the case tested"
    texts, stray = fanout.split(stdout)
    assert stray == "", stray
    by_node = {text.split("\n", 1)[0]: text for text in texts.values()}
    assert sorted(by_node) == ["gpu05", "gpu06"], (texts.keys(), stderr)
    for node, text in by_node.items():
        assert text == expected(node), (node, [len(line) for line in text.split("\n")], stderr)


def test_a_gpus_option_becomes_per_node() -> None:
    words = fanout.argv(("--partition=p", "--gpus=a100:1"), ("n1", "n2"), 5, 2, "x", ("true",))
    assert "--gpus-per-node=a100:1" in words and not any(w.startswith("--gpus=") for w in words), words
    assert words[words.index("--nodes=2") + 1 : words.index("--nodes=2") + 3] == (
        "--ntasks-per-node=1",
        "--nodelist=n1,n2",
    ), words
