"""A real Slurm cluster on this one host, for the tests: munged, slurmctld and one slurmd per node (Debian's
slurmd is built with multiple-slurmd support, so `slurmd -N NODE` runs several nodes on one host), all in a
private directory, on free ports, stopped by PID at the end.

The nodes have typed GPU GRES backed by plain files (gres.conf `File=`), so Slurm schedules and reports them
as it would real GPUs. The GPU facts on a node come from a stand-in `nvidia-smi` (the one stand-in: there is
no GPU here) that a TaskProlog puts on the PATH of the steps on GPU nodes only; it answers any
`--query-gpu=FIELDS --format=csv[,noheader]` of the fields a lab `Gpu` holds, with the rows written for that node,
in nvidia-smi's own format (real captures: tests/data/slurm/nvidia-smi-h200-*.txt), and refuses a field the node's
driver does not know (`Gpu.refuses`: compute_cap before R510) as nvidia-smi does; where a node has no rows it
prints nvidia-smi's message for a driver that does not answer and exits 9 (NVML's ERROR_DRIVER_NOT_LOADED).
`SlurmLab.node_gpus` changes what a node's nvidia-smi says while the lab runs.

A node given a `machine` (aarch64: a GH200 node's) is that architecture's stand-in: the TaskProlog puts on its
steps' PATH a `uname` that answers `-m` (and `-p`, `-i`) with it, which is what envsolver's cluster probe reads
(`uname -m`), so `cluster init` records the partition as linux-aarch64.

`write_env` writes a stand-in environment prefix for `envsolver verify` on the lab's nodes (there is no CUDA
torch here): its python runs verify's real probe (as a file, or as source: `python -I -c PROBE ...`, what
`verify --cluster` runs on a node) with a venv of the interpreter it is given (standard library only), and answers
torch's part from the prefix's lock metadata, and the machine from the node's `uname -m`.

Run it by hand: `python -m tests.slurmlab` starts a lab, prints the SLURM_CONF to export, and stops it on Enter.
"""

from __future__ import annotations

import os
import pwd
import re
import selectors
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

BINARIES = ("munged", "slurmctld", "slurmd", "sinfo", "scontrol", "srun")
START_TIMEOUT_S = 90.0  # a loaded 2-core machine took up to about 10 s
COMMAND_TIMEOUT_S = 30.0
JOB_TIMEOUT_S = 300.0  # a batch job's whole run (SlurmLab.batch)
JOB_POLL_S = 0.2  # how often SlurmLab.batch looks at its job (`scontrol show job`: about 3 ms of CPU a look)
# A job record's JobState once the job has ended for good (scontrol; COMPLETING is not one: the job ended and its
# nodes are still being cleaned up)
ENDED = frozenset(
    {"COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL", "DEADLINE", "OUT_OF_MEMORY"}
)


@dataclass(frozen=True)
class Gpu:
    """One row of the node's nvidia-smi answer, each value as nvidia-smi prints it ("[N/A]" where it has none)."""

    name: str
    driver: str
    compute_cap: str
    memory: str = "[N/A]"  # memory.total ("81920 MiB")
    device_id: str = "[N/A]"  # pci.device_id: the device ID, then NVIDIA's vendor ID ("0x233510DE")
    refuses: tuple[str, ...] = ()  # fields the node's driver does not know: ("compute_cap",) before R510
    FIELDS: ClassVar[tuple[str, ...]] = ("name", "pci.device_id", "compute_cap", "driver_version", "memory.total")

    def cells(self) -> dict[str, str]:
        """The value of each field the node's driver knows, by field name."""
        cells = {
            "name": self.name,
            "pci.device_id": self.device_id,
            "compute_cap": self.compute_cap,
            "driver_version": self.driver,
            "memory.total": self.memory,
        }
        return {k: v for k, v in cells.items() if k not in self.refuses}


@dataclass(frozen=True)
class Node:
    """A lab node: its GPU GRES as (type or None for an untyped one, count) pairs, what its nvidia-smi says
    (() = no answer), gres.conf's Cores= (which makes sinfo print `(S:...)` after the count), the machine
    its `uname -m` answers (None: this host's own), and its features (slurm.conf's Features=, which --constraint
    selects)."""

    name: str
    gres: tuple[tuple[str | None, int], ...] = ()
    gpus: tuple[Gpu, ...] = ()
    cores: str | None = None
    machine: str | None = None
    features: tuple[str, ...] = ()

    @property
    def gres_text(self) -> str | None:
        items = [f"gpu:{kind}:{count}" if kind else f"gpu:{count}" for kind, count in self.gres]
        return ",".join(items) or None


# memory.total as real cards report it: 16384 MiB for a V100-SXM2-16GB (nvidia-smi table in 1CatAI/1Cat-vLLM
# issue #85), 32768 MiB for a V100-SXM2 32GB (Wan-Video/Wan2.1 issue #5), 81920 MiB for an A100 80GB and 81559 MiB
# for an H100 (the list in modal-labs/modal-client pull request #2797).
# Device IDs from pci.ids (tests/data/driver_table/pci-ids-nvidia-c1c1254.txt: 20b2 A100 SXM4 80GB, 2330 H100
# SXM5 80GB, 2342 GH200 120GB / 480GB); that recording holds no V100 (Volta), so their rows leave it [N/A].
V100 = Gpu("Tesla V100-SXM2-16GB", "535.104.05", "7.0", "16384 MiB")
A100 = Gpu("NVIDIA A100-SXM4-80GB", "550.54.15", "8.0", "81920 MiB", "0x20B210DE")
H100 = Gpu("NVIDIA H100 80GB HBM3", "570.133.20", "9.0", "81559 MiB", "0x233010DE")
V100_32 = Gpu("Tesla V100-SXM2-32GB", "535.104.05", "7.0", "32768 MiB")
# A GH200 as nvidia-smi names it with driver 550.54.15 and 97871 MiB (the nvidia-smi table in NVIDIA/apex issue
# #1833); compute capability 9.0 (the knowledge base's gpus.yaml row).
GH200 = Gpu("NVIDIA GH200 480GB", "550.54.15", "9.0", "97871 MiB", "0x234210DE")

# gpu04's GRES type is a site's own word ('tesla'), which names no GPU: `cluster init --no-probe` must ask for
# --map tesla=v100. The `mixed` partition holds two GPU models (its nodes differ, which init reports). The `pair`
# partition holds two nodes of one GRES type, so every probe and verify step reaches several nodes at once.
NODES = (
    Node("gpu01", (("v100", 2),), (V100, V100)),
    Node("gpu02", (("a100", 2),), (A100, A100), cores="0-1", features=("ib", "rack1")),
    Node("gpu03", (("h100", 2),), (H100, H100)),
    Node("gpu04", (("tesla", 2),), (V100_32, V100_32)),
    Node("gpu05", (("a100", 2),), (A100, A100)),
    Node("gpu06", (("a100", 2),), (A100, A100)),
    Node("cpu01"),
)
PARTITIONS = {
    "v100": ("gpu01",),
    "a100": ("gpu02",),
    "h100": ("gpu03",),
    "tesla": ("gpu04",),
    "mixed": ("gpu02", "gpu03"),
    "pair": ("gpu05", "gpu06"),
    "cpu": ("cpu01",),
}
DEFAULT_PARTITION = "cpu"
SCALE_MODELS = (("a100", A100), ("h100", H100), ("v100", V100))


def scale_layout(count: int, partitions: int = 6) -> tuple[tuple[Node, ...], dict[str, tuple[str, ...]]]:
    """A bigger lab: `count` GPU nodes n001... dealt round robin over `partitions` partitions s1..., each
    partition one GPU model (A100, H100, V100 in turn, two GPUs a node), and cpu01 alone in the default `cpu`
    partition. For the scale test and bench/cluster_scale.py."""
    if count < partitions:
        raise ValueError(f"{count} nodes cannot fill {partitions} partitions")
    nodes: list[Node] = []
    members: dict[str, list[str]] = {f"s{p + 1}": [] for p in range(partitions)}
    for i in range(count):
        part = i % partitions
        kind, gpu = SCALE_MODELS[part % len(SCALE_MODELS)]
        name = f"n{i + 1:03d}"
        nodes.append(Node(name, ((kind, 2),), (gpu, gpu)))
        members[f"s{part + 1}"].append(name)
    nodes.append(Node("cpu01"))
    return tuple(nodes), {**{k: tuple(v) for k, v in members.items()}, "cpu": ("cpu01",)}


FAKE_SMI = """#!/bin/sh
# A stand-in for nvidia-smi on the Slurm lab's nodes (there is no GPU here). It answers
# `--query-gpu=FIELDS --format=csv[,noheader]` from the table the lab wrote for this node (a first line of the
# fields the node's driver knows, then a line per GPU; tab-separated) as nvidia-smi prints it: cells joined by ", ",
# a header line unless noheader. A field the driver does not know is refused as nvidia-smi refuses one (on stdout,
# exit 2: tests/data/slurm/nvidia-smi-h200-bad-field.txt); without GPUs, it fails as nvidia-smi does when the
# driver does not answer.
table="{rows}/$SLURMD_NODENAME.tsv"
fields=""
header=1
case "$#:$1" in 2:--query-gpu=?*) fields="${1#--query-gpu=}" ;; esac
case "$2" in --format=csv) ;; --format=csv,noheader) header=0 ;; *) fields="" ;; esac
if [ -z "$fields" ] || [ ! -f "$table" ]; then
  echo "the lab's nvidia-smi answers only --query-gpu=FIELDS --format=csv or --format=csv,noheader" >&2
  exit 2
fi
exec awk -F '\\t' -v fields="$fields" -v header="$header" '
function row(values,    line, i) {
  for (i = 1; i <= n; i++) line = line (i > 1 ? ", " : "") values[i]
  print line
}
NR == 1 {
  for (i = 1; i <= NF; i++) known[$i] = i
  n = split(fields, want, ",")
  for (i = 1; i <= n; i++) {
    if (!(want[i] in known)) {
      printf "Field \\"%s\\" is not a valid field to query.\\n\\n", want[i]
      refused = 1
      exit 2
    }
    title[i] = want[i] (want[i] == "memory.total" ? " [MiB]" : "")
  }
  next
}
{ gpus[++count] = $0 }
END {
  if (refused) exit 2
  if (!count) {
    print "NVIDIA-SMI has failed because it couldn'"'"'t communicate with the NVIDIA driver. " \\
      "Make sure that the latest NVIDIA driver is installed and running."
    exit 9
  }
  if (header) row(title)
  for (g = 1; g <= count; g++) {
    split(gpus[g], cell, "\\t")
    for (i = 1; i <= n; i++) value[i] = cell[known[want[i]]]
    row(value)
  }
}' "$table"
"""

# TaskProlog: lines `export NAME=value` on its stdout set the task's environment. GPU nodes get the nvidia-smi
# stand-in; a node of another machine gets that machine's uname (FAKE_UNAME) before it.
TASK_PROLOG = """#!/bin/sh
dirs=""
case "$SLURMD_NODENAME" in
  {gpu_nodes}) dirs="{bin}" ;;
esac
{machines}
if [ -n "$dirs" ]; then echo "export PATH=$dirs:$PATH"; fi
"""
MACHINE_CASE = """case "$SLURMD_NODENAME" in
  {nodes}) dirs="{dir}${{dirs:+:$dirs}}" ;;
esac"""
FAKE_UNAME = """#!/bin/sh
# The lab's stand-in for the uname of a {machine} node: the machine (-m, -p, -i) is {machine}; anything else is
# the real uname's answer.
if [ "$#" -eq 1 ]; then
  case "$1" in
    -m|-p|-i) echo {machine}; exit 0 ;;
  esac
fi
exec {uname} "$@"
"""


# The stand-in python of `write_env`'s prefix: verify runs it as `python PROBE ARGS...` (envsolver verify, and the
# job's gate) or `python -I -c PROBE_SOURCE ARGS...` (verify --cluster, on a node); it runs the same with the
# interpreter it was written for (so the driver and GPUs come from the node's nvidia-smi, glibc from the node),
# verify's probe under that interpreter's venv without site-packages (write_env says why), then answers torch's
# facts as the torch the lock pins would: its version and CUDA, the lock's arch list (standing for torch's), the
# node's GPUs as its devices; and the machine as the node's `uname -m` says it. Anything else (a job's command
# under torchrun, which needs torch) runs under the interpreter itself and passes through. It needs only the
# standard library: -IS (isolated, no site) starts it 10 ms sooner, once per node of every verify --cluster step.
STAND_IN = """#!{python} -IS
import json
import os
import shutil
import subprocess
import sys

TORCH = json.loads({torch})
PREFIX = {prefix}
PROBE, PROBE_PYTHON = {probe}, {probe_python}


def is_probe(args):
    words = [a for a in args if a != "-I"]
    if words[:1] == [PROBE]:
        return True
    if words[:1] == ["-c"] and len(words) > 1:
        with open(PROBE, encoding="utf-8") as source:
            return words[1] == source.read()
    return False


python = PROBE_PYTHON if is_probe(sys.argv[1:]) else sys.executable
done = subprocess.run([python, *sys.argv[1:]], stdout=subprocess.PIPE, text=True, timeout=900)
try:
    docs, streamed = [json.loads(done.stdout)], False
except ValueError:
    try:
        docs, streamed = [json.loads(line) for line in done.stdout.splitlines() if line.strip()], True
    except ValueError:
        docs, streamed = [], False
if not docs or not all(isinstance(doc, dict) for doc in docs):
    sys.stdout.write(done.stdout)
    sys.exit(done.returncode)
uname = shutil.which("uname")
machine = subprocess.run([uname, "-m"], stdout=subprocess.PIPE, text=True).stdout.strip() if uname else ""
for doc in docs:
    facts = doc.get("partial", doc)
    if "probe_version" not in facts:
        continue
    python = dict(facts.get("python") or {{}}, prefix=PREFIX, executable=PREFIX + "/bin/python")
    # what the probe reads of the environment's own prefix (a conda environment: install leaves conda-meta/)
    python.update(conda_meta=os.path.isdir(PREFIX + "/conda-meta"), pyvenv_cfg=os.path.isfile(PREFIX + "/pyvenv.cfg"))
    facts["python"] = dict(python, machine=machine or python.get("machine"))
    if "partial" not in doc and "--no-torch" not in sys.argv:  # a probe asked for no torch prints none
        gpus = (facts.get("driver") or {{}}).get("gpus") or []
        devices = [{{"name": g["name"], "capability": g["compute_capability"]}} for g in gpus]
        facts["torch"] = dict(TORCH, available=bool(devices), device_count=len(devices), devices=devices)
for doc in docs if streamed else []:
    print(json.dumps(doc, sort_keys=True), flush=True)
if not streamed:
    print(json.dumps(docs[0], indent=1, sort_keys=True))
sys.exit(done.returncode)
"""


def torch_facts(meta: Mapping[str, str], prefix: Path) -> dict[str, object]:
    """What verify's probe would report of the torch a lock pins (from its metadata), before the devices."""
    from envsolver.core.archlist import parse_arch_list

    archs = parse_arch_list(meta["envsolver_torch_cuda_arch_list"])
    arch_list = [f"sm_{a.cc.sm}{a.suffix}" for a in archs] + [f"compute_{a.cc.sm}" for a in archs if a.ptx]
    return {
        "version": meta["envsolver_torch"].split()[0],
        "cuda": meta["envsolver_cuda_version"],
        "arch_list": arch_list,
        "file": str(prefix / "lib" / "python3" / "site-packages" / "torch" / "__init__.py"),
    }


STAND_IN_VENV = "stand-in-venv"  # under the prefix: the venv of `python` that STAND_IN runs on


def write_env(prefix: Path, platform: str, meta: Mapping[str, str], python: str) -> None:
    """A stand-in environment at `prefix` for `envsolver verify -p PREFIX` on the lab's nodes: the lock metadata
    `envsolver install` keeps (etc/envsolver/lock-metadata.json), its conda-meta/ (a conda environment, as install
    leaves it), and bin/python (STAND_IN) run by `python`, which runs verify's probe under a venv of `python`
    (PREFIX/stand-in-venv, no site-packages).

    The venv is the point: the probe imports torch in a child of the interpreter it runs under, and STAND_IN
    replaces torch's facts with the lock's. Under an interpreter that has this machine's CPU torch, every node of
    every step imported it for nothing (a `verify --cluster` over the lab's 8 nodes took 15-27 s on the loaded
    2-core machine, 2 s without); in the venv the import fails at once, as the probe's child of a prefix without
    torch does."""
    import json

    from envsolver.install import prefixmeta
    from envsolver.verify.run import PROBE

    prefixmeta.save(prefix, platform, meta)
    (prefix / "conda-meta").mkdir(exist_ok=True)
    venv = prefix / STAND_IN_VENV
    made = subprocess.run(
        [python, "-m", "venv", "--without-pip", "--clear", str(venv)], capture_output=True, text=True, check=False
    )
    if made.returncode != 0:
        raise LabError(f"{python} -m venv {venv} failed (exit {made.returncode}): {made.stderr}")
    stand_in = prefix / "bin" / "python"
    stand_in.parent.mkdir(parents=True, exist_ok=True)
    stand_in.write_text(
        STAND_IN.format(
            python=python,
            torch=repr(json.dumps(torch_facts(meta, prefix))),
            prefix=repr(str(prefix)),
            probe=repr(str(PROBE)),
            probe_python=repr(str(venv / "bin" / "python")),
        )
    )
    stand_in.chmod(0o755)


# A stand-in environment's python that hangs (write_hanging_python): it marks that a node started it (touches
# STARTED/NODE), then waits while its parent (the step's shell) lives, 300 s at most. Not `exec sleep 300`: the
# lab finds a step's processes by their parents (proctrack/linuxproc), and a step cancelled while its shell was
# forking this one now and then missed it (2026-12-02, verify --cluster interrupted 0.2 s after a step began):
# the orphan held the step's output open, which kept its node COMPLETING for 60 s (slurmstepd's IO wait), past
# the test and into the next one's probe. A cluster's proctrack/cgroup kills it with its step; here it goes
# with its parent (and a step left running keeps its shell, so it keeps hanging: a test still sees the step).
HANGING_PYTHON = """#!/bin/sh
touch "{started}/$SLURMD_NODENAME"
parent=$PPID
i=0
while [ "$i" -lt 1500 ] && kill -0 "$parent" 2>/dev/null; do sleep 0.2; i=$((i + 1)); done
"""


def write_hanging_python(prefix: Path, started: Path) -> None:
    """PREFIX/bin/python: HANGING_PYTHON, marking its starts in the directory `started`."""
    (prefix / "bin").mkdir(parents=True, exist_ok=True)
    (prefix / "bin" / "python").write_text(HANGING_PYTHON.format(started=started))
    (prefix / "bin" / "python").chmod(0o755)


JOB_ID_BLOCKS = 90  # blocks of JOB_ID_BLOCK ids from 1000: job ids up to 18999, rendezvous ports up to 48499
JOB_ID_BLOCK = 200  # job ids a lab may use; a whole default run submits well under 100


def first_job_id(environ: Mapping[str, str] = os.environ, pid: int | None = None) -> int:
    """The first job id of a lab: a block of its own. Under pytest-xdist, worker gwN of W takes a block whose
    number is N modulo W, after an offset shared by the run (PYTEST_XDIST_TESTRUNUID), so the labs of one run never
    share a block; otherwise (one process, or a copy of the suite beside it) the block follows the process id."""
    worker, count, run = (
        environ.get(k, "") for k in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID")
    )
    number = worker.removeprefix("gw")
    if (
        number.isascii()
        and number.isdigit()
        and count.isascii()
        and count.isdigit()
        and 0 < int(count) <= JOB_ID_BLOCKS
    ):
        slots = JOB_ID_BLOCKS // int(count)
        offset = int.from_bytes(run.encode(), "big") % slots if run else 0
        block = offset * int(count) + int(number) % int(count)
    else:
        block = (os.getpid() if pid is None else pid) % JOB_ID_BLOCKS
    return 1000 + block * JOB_ID_BLOCK


def missing_binaries() -> list[str]:
    return [b for b in BINARIES if shutil.which(b) is None]


def free_ports(count: int) -> list[int]:
    """Ports the kernel hands out for port 0, held open together so they differ."""
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


class LabError(RuntimeError):
    """The lab did not start; the message holds the tail of every log."""


@dataclass
class SlurmLab:
    root: Path
    nodes: tuple[Node, ...] = NODES
    partitions: Mapping[str, tuple[str, ...]] = field(default_factory=lambda: dict(PARTITIONS))
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    host: str = field(default_factory=lambda: socket.gethostname().split(".")[0])
    user: str = field(default_factory=lambda: pwd.getpwuid(os.getuid()).pw_name)

    @property
    def conf(self) -> Path:
        return self.root / "slurm.conf"

    @property
    def env(self) -> dict[str, str]:
        """The environment a Slurm command needs to reach this lab."""
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def start(self) -> None:
        try:
            self._write()
            self._spawn("munged", self._munged_argv())
            self._wait_for(lambda: (self.root / "munge" / "munge.sock").exists(), "munged's socket")
            self._spawn("slurmctld", ["slurmctld", "-D", "-f", str(self.conf)])
            for node in self.nodes:
                self._spawn(f"slurmd-{node.name}", ["slurmd", "-D", "-f", str(self.conf), "-N", node.name])
            self._wait_for(self._all_idle, "every node idle in sinfo")
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """SIGTERM the daemons by PID in stages, the slurmds, then slurmctld, then munged, each stage reaped (SIGKILL
        for what is left after 10 s) before the next. A slurmd whose node ran a cancelled step reports to the
        controller as it stops: with slurmctld stopped beside it, it waited out its message retries (9 s)."""
        stages = [
            [name for name in self.processes if name.startswith("slurmd-")],
            [name for name in self.processes if name == "slurmctld"],
            [name for name in self.processes if not name.startswith("slurmd-") and name != "slurmctld"],
        ]
        for stage in stages:
            procs = [self.processes[name] for name in stage]
            for proc in procs:
                if proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + 10
            for proc in procs:
                try:
                    proc.wait(timeout=max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        self.processes.clear()

    def run(self, argv: list[str], timeout: float = COMMAND_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
        """A Slurm command against the lab."""
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=self.env, check=False)

    def batch(
        self, argv: list[str], cwd: Path, env: Mapping[str, str] | None = None, timeout: float = JOB_TIMEOUT_S
    ) -> subprocess.CompletedProcess[str]:
        """`sbatch ARGV` from `cwd` (with `env`, default the lab's), waited for as `sbatch --wait` waits but looked
        at every JOB_POLL_S: sbatch --wait sleeps 2 s between looks (src/sbatch/sbatch.c _job_wait), so a job was
        seen ended up to 2 s late. The returncode is sbatch's where it refused the job, else the job's as sbatch
        --wait gives it: the highest exit status of the job's records (an array's tasks), 1 for one ended by a
        signal; stdout and stderr are sbatch's. A job not ended at `timeout` is cancelled (by id) and
        TimeoutExpired raised."""
        environ = dict(env if env is not None else self.env)
        submitted = subprocess.run(
            ["sbatch", "--parsable", *argv],
            cwd=cwd,
            env=environ,
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT_S,
            check=False,
        )
        if submitted.returncode != 0:
            return submitted
        job = submitted.stdout.strip().split(";")[0]
        deadline = time.monotonic() + timeout
        while True:
            shown = subprocess.run(
                ["scontrol", "--oneliner", "show", "job", job],
                env=environ,
                capture_output=True,
                text=True,
                timeout=COMMAND_TIMEOUT_S,
                check=False,
            )
            states = re.findall(r"(?:^|\s)JobState=(\S+)", shown.stdout)
            if "Invalid job id" in shown.stderr:  # the record is kept MinJobAge (5 s) after the end: not looked at
                raise LabError(f"job {job} was forgotten before batch saw it end: {shown.stderr.strip()}")
            if shown.returncode == 0 and states and all(state in ENDED for state in states):
                codes = re.findall(r"(?:^|\s)ExitCode=([0-9]+):([0-9]+)", shown.stdout)
                if not codes:
                    raise LabError(f"job {job} ended without an ExitCode in scontrol's record: {shown.stdout}")
                code = max(1 if int(signal_number) else int(status) for status, signal_number in codes)
                return subprocess.CompletedProcess(submitted.args, code, submitted.stdout, submitted.stderr)
            if time.monotonic() > deadline:
                self.run(["scancel", job])
                raise subprocess.TimeoutExpired(submitted.args, timeout, submitted.stdout, submitted.stderr)
            time.sleep(JOB_POLL_S)

    def dead_conf(self) -> Path:
        """A copy of slurm.conf whose controller port nobody listens on (a controller that is down), with a
        2 s MessageTimeout so the commands give up in about a second instead of nine."""
        port = free_ports(1)[0]
        lines = [
            f"SlurmctldPort={port}" if line.startswith("SlurmctldPort=") else line
            for line in self.conf.read_text().splitlines()
            if not line.startswith("MessageTimeout=")
        ]
        path = self.root / "dead.conf"
        path.write_text("\n".join([*lines, "MessageTimeout=2"]) + "\n")
        return path

    @contextmanager
    def holding(self, options: list[str], name: str = "envsolver-hold") -> Iterator[None]:
        """While inside, a job of the test's own (`srun OPTIONS --job-name=NAME`, a task that says it started,
        then sleeps 60 s) runs and holds what OPTIONS ask for (waited for: the task's word, up to 10 s); then it
        is ended. Not RUNNING in squeue: a job is RUNNING from its allocation, and an srun ended while its step
        was still starting waited 4 s for the step (STEP_ABORT_TIME + KillWait, src/api/step_launch.c) and its
        node stayed busy 2-3 s more (slurmstepd retrying the exit message to the srun that was gone)."""
        hold = subprocess.Popen(
            ["srun", *options, f"--job-name={name}", "sh", "-c", "echo held; exec sleep 60"],
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        try:
            assert hold.stdout is not None
            with selectors.DefaultSelector() as selector:
                selector.register(hold.stdout, selectors.EVENT_READ)
                selector.select(10.0)  # the task's line (or srun's end: EOF)
            yield
        finally:
            hold.terminate()
            hold.communicate(timeout=30)

    @contextmanager
    def node_gpus(self, node: str, gpus: tuple[Gpu, ...]) -> Iterator[None]:
        """While inside, the node's nvidia-smi answers with `gpus` (() : it fails as without a driver); then with
        the node's own rows again."""
        own = next(n.gpus for n in self.nodes if n.name == node)
        self._write_gpus(node, gpus)
        try:
            yield
        finally:
            self._write_gpus(node, own)

    @contextmanager
    def node_down(self, node: str) -> Iterator[None]:
        """While inside, the node is DOWN as a dead node is: its slurmd stopped (by PID) and the node set DOWN
        (`scontrol update ... State=DOWN`); a DOWN node whose slurmd still answers would return to service at
        the controller's next registration request (ReturnToService=2, every ~20 s). Then its slurmd is started
        again, the node RESUMEd, and idle before this returns."""
        name = f"slurmd-{node}"
        proc = self.processes.pop(name)
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        try:
            done = self.run(["scontrol", "update", f"NodeName={node}", "State=DOWN", "Reason=slurmlab node_down"])
            if done.returncode != 0:
                raise LabError(f"scontrol could not take {node} down: {done.stderr}")
            yield
        finally:
            self._spawn(name, ["slurmd", "-D", "-f", str(self.conf), "-N", node])
            self._wait_for(lambda: self._resumed(node), f"{node} idle again after node_down")

    def _resumed(self, node: str) -> bool:
        self.run(["scontrol", "update", f"NodeName={node}", "State=RESUME"])
        return self._node_idle(node)

    def _node_idle(self, node: str) -> bool:
        return self._states().get(node) == "idle"

    def logs_tail(self, lines: int = 15) -> str:
        parts = []
        for log in sorted((self.root / "log").glob("*")):
            text = log.read_text(errors="replace").splitlines()[-lines:]
            parts.append(f"--- {log.name}\n" + "\n".join(text))
        return "\n".join(parts)

    # -- internals -----------------------------------------------------------------------------------------

    def _write(self) -> None:
        root = self.root
        for sub in ("state", "spool", "log", "bin", "gpus"):
            (root / sub).mkdir(parents=True, exist_ok=True)
        munge = root / "munge"
        munge.mkdir(mode=0o700, exist_ok=True)
        key = root / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o600)
        fake = root / "bin" / "nvidia-smi"
        fake.write_text(FAKE_SMI.replace("{rows}", str(root / "gpus")))
        fake.chmod(0o755)
        gpu_nodes = [n.name for n in self.nodes if n.gres]
        machines = []
        for machine in sorted({n.machine for n in self.nodes if n.machine}):
            where = root / f"machine-{machine}"
            where.mkdir(exist_ok=True)
            (where / "uname").write_text(FAKE_UNAME.format(machine=machine, uname=shutil.which("uname")))
            (where / "uname").chmod(0o755)
            nodes = "|".join(n.name for n in self.nodes if n.machine == machine)
            machines.append(MACHINE_CASE.format(nodes=nodes, dir=where))
        prolog = root / "task-prolog.sh"
        prolog.write_text(
            TASK_PROLOG.format(gpu_nodes="|".join(gpu_nodes) or "none", bin=root / "bin", machines="\n".join(machines))
        )
        prolog.chmod(0o755)
        for node in self.nodes:
            self._write_gpus(node.name, node.gpus)
        ctld_port, *node_ports = free_ports(1 + len(self.nodes))
        conf = [
            "ClusterName=lab",
            f"SlurmctldHost={self.host}",
            "AuthType=auth/munge",
            f"AuthInfo=socket={munge / 'munge.sock'}",
            "CredType=cred/munge",
            f"SlurmUser={self.user}",
            f"SlurmdUser={self.user}",
            f"SlurmctldPort={ctld_port}",
            f"StateSaveLocation={root / 'state'}",
            f"SlurmdSpoolDir={root / 'spool'}/%n",
            f"SlurmctldPidFile={root / 'slurmctld.pid'}",
            f"SlurmdPidFile={root / 'spool'}/slurmd-%n.pid",
            f"SlurmctldLogFile={root / 'log' / 'slurmctld.log'}",
            f"SlurmdLogFile={root / 'log'}/slurmd-%n.log",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            f"TaskProlog={prolog}",
            "MpiDefault=none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            "GresTypes=gpu",
            "ReturnToService=2",
            "SlurmctldTimeout=30",
            # Job ids of their own: the launcher's rendezvous port follows the job id (slurm_launch.port_for), and
            # two labs on one host (two copies of the suite side by side, or two pytest-xdist workers of one run)
            # would otherwise both run job 27 on 127.0.0.1:29527 at once. A real cluster's job ids are unique;
            # two labs' need not be.
            f"FirstJobId={first_job_id()}",
            "SlurmdTimeout=60",
            "InactiveLimit=0",
            "KillWait=2",
            # `sbatch --wait` sleeps 2 s between looks at the job, times 4 while the sleep is under MinJobAge / 2
            # (/ 3 in some versions) and under 32 (src/sbatch/sbatch.c _job_wait): 2, 8, 32 at the default (300),
            # so a 15 s job was seen done after 42 s. At 5 it looks every 2 s; a finished job's record is still
            # kept 5 s, past sbatch's next look (and SlurmLab.batch's, every JOB_POLL_S).
            "MinJobAge=5",
            # A batch job is started by the controller's background loop (once a second), at most every
            # batch_sched_delay seconds (default 3: slurm.conf(5), src/slurmctld/controller.c): a job submitted
            # just after the last pass waited 2-2.6 s for its nodes. At 0 it starts at the next pass.
            "SchedulerParameters=batch_sched_delay=0",
        ]
        gres_conf = []
        files = 0
        for node, port in zip(self.nodes, node_ports, strict=True):
            gres = f" Gres={node.gres_text}" if node.gres else ""
            gres += f" Features={','.join(node.features)}" if node.features else ""
            conf.append(f"NodeName={node.name} NodeHostname={self.host} Port={port} CPUs=2 RealMemory=500{gres}")
            for kind, count in node.gres:
                last = files + count - 1
                for i in range(files, last + 1):
                    (root / f"fakegpu{i}").touch()
                typed = f" Type={kind}" if kind else ""
                cores = f" Cores={node.cores}" if node.cores else ""
                gres_conf.append(f"NodeName={node.name} Name=gpu{typed} File={root}/fakegpu[{files}-{last}]{cores}")
                files = last + 1
        for name, members in self.partitions.items():
            default = " Default=YES" if name == DEFAULT_PARTITION else ""
            conf.append(f"PartitionName={name} Nodes={','.join(members)} State=UP MaxTime=10{default}")
        self.conf.write_text("\n".join(conf) + "\n")
        (root / "gres.conf").write_text("\n".join(gres_conf) + "\n")

    def _write_gpus(self, node: str, gpus: tuple[Gpu, ...]) -> None:
        """The table the node's nvidia-smi answers from: the fields its driver knows (those every GPU row holds),
        then each GPU's values (written whole, then renamed into place)."""
        fields = [f for f in Gpu.FIELDS if all(f in g.cells() for g in gpus)]
        lines = [fields, *([g.cells()[f] for f in fields] for g in gpus)]
        path = self.root / "gpus" / f"{node}.tsv"
        part = path.with_name(path.name + ".part")
        part.write_text("".join("\t".join(line) + "\n" for line in lines))
        part.replace(path)

    def _munged_argv(self) -> list[str]:
        munge = self.root / "munge"
        return [
            "munged",
            "-F",
            "-f",
            f"--key-file={self.root / 'munge.key'}",
            f"--socket={munge / 'munge.sock'}",
            f"--pid-file={munge / 'munged.pid'}",
            f"--log-file={self.root / 'log' / 'munged.log'}",
            f"--seed-file={munge / 'munged.seed'}",
        ]

    def _spawn(self, name: str, argv: list[str]) -> None:
        out = (self.root / "log" / f"{name}.out").open("wb")
        with out:
            self.processes[name] = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=self.env, cwd=self.root
            )

    def settle(self) -> None:
        """Wait until every node is in a state a step can run in (envsolver's own rule: nodes.SINFO_USABLE), so a
        test starts from a lab that a test before it left whole: a node that node_down brought back may be marked
        NOT_RESPONDING until its slurmd has registered, and a loaded machine delays that. LabError past
        START_TIMEOUT_S, naming each node's state."""
        from envsolver.cluster.nodes import SINFO_USABLE

        seen: dict[str, str] = {}

        def usable() -> bool:
            seen.clear()
            seen.update(self._states())
            return all(seen.get(n.name) in SINFO_USABLE for n in self.nodes)

        try:
            self._wait_for(usable, "lab with every node usable")
        except LabError as exc:
            raise LabError(f"{exc}\nthe nodes' states as last seen: {seen}") from None

    def _all_idle(self) -> bool:
        states = self._states()
        return all(states.get(n.name) == "idle" for n in self.nodes)

    def _states(self) -> dict[str, str]:
        """Each node's state as sinfo prints it (%T: idle, allocated, idle* for one not responding, ...); {} when
        sinfo fails or takes over 10 s. A node in several partitions is listed once for each, in the same state."""
        try:
            done = self.run(["sinfo", "--noheader", "--Node", "--format=%N %T"], timeout=10)
        except subprocess.TimeoutExpired:
            return {}
        if done.returncode != 0:
            return {}
        return dict(line.split() for line in done.stdout.splitlines() if len(line.split()) == 2)

    def _wait_for(self, ready: object, what: str) -> None:
        check = ready if callable(ready) else (lambda: False)
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            dead = [name for name, proc in self.processes.items() if proc.poll() is not None]
            if dead:
                raise LabError(f"{', '.join(dead)} exited while waiting for {what}:\n{self.logs_tail()}")
            if check():
                return
            time.sleep(0.2)
        raise LabError(f"no {what} after {START_TIMEOUT_S:.0f} s:\n{self.logs_tail()}")


@contextmanager
def running(
    make_dir: Callable[[], Path],
    nodes: tuple[Node, ...] = NODES,
    partitions: Mapping[str, tuple[str, ...]] | None = None,
) -> Iterator[SlurmLab]:
    """A lab started in a directory `make_dir` gives, stopped at the end. A start that fails is tried once more, in
    a fresh directory on fresh ports (a port can be taken between choosing it and binding it)."""
    layout = dict(partitions if partitions is not None else PARTITIONS)
    lab = SlurmLab(make_dir(), nodes=nodes, partitions=layout)
    try:
        lab.start()
    except LabError:
        lab = SlurmLab(make_dir(), nodes=nodes, partitions=layout)
        lab.start()
    try:
        yield lab
    finally:
        lab.stop()


def main() -> None:  # pragma: no cover - a tool for people
    import tempfile

    with tempfile.TemporaryDirectory(prefix="slurmlab-") as tmp:
        lab = SlurmLab(Path(tmp))
        lab.start()
        try:
            print(f"export SLURM_CONF={lab.conf}")
            input("Slurm lab running; press Enter to stop it. ")
        finally:
            lab.stop()


if __name__ == "__main__":  # pragma: no cover
    main()
