"""Capture what `verify --cluster`'s step prints on the Slurm lab's nodes: tests/data/cluster-verify/ (its README
says what each file is). Run from the repository root, as root where the lab runs:

    python -m scripts.capture_cluster_verify tests/data/cluster-verify

It starts a lab (tests/slurmlab.py) under /tmp/cv-lab, drafts its cluster file, makes the offline lock, writes
the stand-in prefix /tmp/cv-lab/work/env (its python: this interpreter's base binary), runs each step as
`verify --cluster` writes it (envsolver/cluster/step.py) and keeps its stdout unedited, with the prefix's lock
metadata (env/etc/envsolver/lock-metadata.json) the tests judge the facts against."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml
from click.testing import CliRunner

from envsolver.cli.main import main
from envsolver.cluster import file as cluster_file
from envsolver.cluster import step
from envsolver.install.prefixmeta import METADATA
from envsolver.kb import default_kb
from tests.slurmlab import V100, Gpu, SlurmLab, write_env

ROOT = Path("/tmp/cv-lab")


def capture(out: Path) -> None:
    shutil.rmtree(ROOT, ignore_errors=True)
    lab = SlurmLab(ROOT / "lab")
    lab.start()
    try:
        work = ROOT / "work"
        work.mkdir()
        env = {"SLURM_CONF": str(lab.conf), "ENVSOLVER_GPUS": None, "ENVSOLVER_DRIVER": None}
        drafted = CliRunner(env=env).invoke(main, ["cluster", "init", "--out", str(work / "cluster.yaml")])
        assert drafted.exit_code == 0, drafted.output
        made = CliRunner(env=env).invoke(
            main, ["make", "--cluster", str(work / "cluster.yaml"), "--offline", "--out", str(work / "envs")]
        )
        assert made.exit_code == 0, made.output
        lock = yaml.safe_load((work / "envs" / "linux-64" / "conda-lock.yml").read_text())
        write_env(work / "env", "linux-64", lock["metadata"]["custom_metadata"], os.path.realpath(sys.executable))
        (out / "env" / METADATA).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(work / "env" / METADATA, out / "env" / METADATA)
        kb = default_kb()
        cluster = cluster_file.load(work / "cluster.yaml", kb)

        def one(name: str, partition_name: str, prefix: Path) -> None:
            partition = cluster.partition(partition_name)
            assert partition is not None, partition_name
            argv = step.argv(step.options(partition), step.node_command(str(prefix), kb, None, False), 30)
            done = subprocess.run(argv, capture_output=True, text=True, timeout=600, env=lab.env, check=False)
            assert done.returncode == 0, done.stderr
            (out / f"step-{name}.txt").write_text(done.stdout)
            print(f"step-{name}.txt: {' '.join(step.options(partition))} -p {prefix}")

        one("tesla-gpu04-pass", "tesla", work / "env")
        old = Gpu(V100.name, "450.80.02", V100.compute_cap, V100.memory)
        with lab.node_gpus("gpu01", (old, old)):
            one("v100-gpu01-old-driver", "v100", work / "env")
        one("h100-no-python", "h100", work / "nope")
        shutil.copytree(work / "env", work / "noexec")
        (work / "noexec" / "bin" / "python").chmod(0o644)
        one("h100-not-executable", "h100", work / "noexec")
    finally:
        lab.stop()


if __name__ == "__main__":
    capture(Path(sys.argv[1]))
