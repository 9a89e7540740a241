"""How `envsolver cluster init` and `envsolver verify --cluster` grow with the nodes of a cluster: a Slurm lab
(tests/slurmlab.py: munged, slurmctld, one slurmd per node, all on this host) of N GPU nodes over 6 partitions
for each N asked, then the public CLI in whole fresh processes, timed around `subprocess.run`:

  cluster init -> (make --cluster --offline, untimed) -> verify --cluster -p PREFIX --check ... --json

The prefix is the lab's stand-in environment (tests/slurmlab.write_env: verify's real probe on every node, torch's
facts from the lock), checked for the checks it answers, as tests/cluster/test_verify_cluster.py does. Its python
(what each node runs the probe with) is, with `--nodes-python this`, this interpreter, so every node's probe
imports this machine's CPU torch (about 1.5 CPU-s a node, every node on these same cores); with `--nodes-python
bare` (the default), a venv without packages, so each node's probe costs what the probe itself costs and the
figures show how envsolver's fan-out grows rather than 32 torch imports sharing 2 cores.

    python bench/cluster_scale.py [--nodes 8,16,32] [--repeat 3] [--nodes-python bare|this]

Prints one markdown row per N (median and range over the repeats; "its CPU" is the user + sys seconds of the
command's own process and its children, envsolver and srun, not the steps slurmd runs for the nodes) and the
machine's load before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import yaml  # noqa: E402

from tests.slurmlab import SlurmLab, missing_binaries, scale_layout, write_env  # noqa: E402

CHECKS = ("driver", "gpus", "torch_import", "torch_cuda_build", "driver_supports_torch_cuda", "cuda_available")
ENVSOLVER = str(Path(sys.executable).parent / "envsolver")


CPU: list[float] = []  # the CPU seconds (user + sys) of each timed command and its children: envsolver and srun


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, subprocess.CompletedProcess[str]]:
    """Wall seconds of the whole process; its CPU time (envsolver, srun; not the nodes' steps, which slurmd
    runs) appended to CPU."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600, check=False)
    seconds = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    CPU.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return seconds, done


def daemons_rss_mib(lab: SlurmLab) -> float:
    total = 0
    for proc in lab.processes.values():
        try:
            status = Path(f"/proc/{proc.pid}/status").read_text()
        except OSError:
            continue
        total += int(status.split("VmRSS:")[1].split()[0])
    return total / 1024


def uptime() -> str:
    return Path("/proc/loadavg").read_text().split(" ")[:3].__str__()


def one(count: int, repeat: int, work: Path, nodes_python: str) -> dict[str, object]:
    nodes, partitions = scale_layout(count)
    lab = SlurmLab(work / f"lab{count}", nodes=nodes, partitions=partitions)
    started = time.perf_counter()
    lab.start()
    startup = time.perf_counter() - started
    try:
        env = {**os.environ, "SLURM_CONF": str(lab.conf)}
        file = work / f"cluster{count}.yaml"
        inits: list[float] = []
        for _ in range(repeat):
            seconds, done = timed([ENVSOLVER, "cluster", "init", "--out", str(file), "--force"], env)
            if done.returncode != 0:
                raise SystemExit(f"cluster init failed at {count} nodes:\n{done.stderr}")
            inits.append(seconds)
        init_cpu = CPU[-repeat:]
        made = subprocess.run(
            [ENVSOLVER, "make", "--cluster", str(file), "--offline", "--out", str(work / f"envs{count}")],
            capture_output=True,
            text=True,
            env={k: v for k, v in env.items() if k not in ("ENVSOLVER_GPUS", "ENVSOLVER_DRIVER")},
            check=False,
        )
        if made.returncode != 0:
            raise SystemExit(f"make --cluster failed at {count} nodes:\n{made.stderr}")
        lock = yaml.safe_load((work / f"envs{count}" / "linux-64" / "conda-lock.yml").read_text())
        prefix = work / f"env{count}"
        write_env(prefix, "linux-64", lock["metadata"]["custom_metadata"], nodes_python)
        verifies: list[float] = []
        checked = 0
        for _ in range(repeat):
            argv = [ENVSOLVER, "verify", "--cluster", str(file), "-p", str(prefix), "--json"]
            argv += [w for c in CHECKS for w in ("--check", c)]
            seconds, done = timed(argv, env)
            doc = json.loads(done.stdout) if done.stdout.strip().startswith("{") else {}
            if done.returncode not in (0, 1) or "partitions" not in doc:
                raise SystemExit(f"verify --cluster failed at {count} nodes (exit {done.returncode}):\n{done.stderr}")
            checked = sum(len(p["nodes"]) for p in doc["partitions"])
            verifies.append(seconds)
        verify_cpu = CPU[-repeat:]
        rss = daemons_rss_mib(lab)
    finally:
        lab.stop()
    return {
        "nodes": count,
        "partitions": len(partitions) - 1,
        "lab_start_s": round(startup, 1),
        "daemons_rss_mib": round(rss),
        "init_s": inits,
        "init_cpu_s": init_cpu,
        "verify_s": verifies,
        "verify_cpu_s": verify_cpu,
        "verified_nodes": checked,
    }


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} s ({min(values):.2f}-{max(values):.2f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", default="8,16,32", help="GPU node counts, comma-separated")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--nodes-python", choices=("bare", "this"), default="bare")
    args = parser.parse_args()
    if missing_binaries():
        raise SystemExit(f"Slurm is not installed here (missing {', '.join(missing_binaries())})")
    counts = [int(n) for n in args.nodes.split(",")]
    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {platform.machine()}, {os.cpu_count()} cores, ")
    print(f"# load before {uptime()}")
    rows = []
    print(f"# the nodes' python: {args.nodes_python}")
    with tempfile.TemporaryDirectory(prefix="cluster-scale-") as tmp:
        nodes_python = sys.executable
        if args.nodes_python == "bare":  # a venv without packages: the probe finds no torch to import
            subprocess.run([sys.executable, "-m", "venv", "--without-pip", f"{tmp}/bare"], check=True)
            nodes_python = f"{tmp}/bare/bin/python"
        for count in counts:
            row = one(count, args.repeat, Path(tmp), nodes_python)
            rows.append(row)
            print(json.dumps(row), flush=True)
    print(f"# load after {uptime()}")
    header = ("GPU nodes", "partitions", "lab start", "slurm daemons RSS", "cluster init", "its CPU")
    header += ("verify --cluster", "its CPU", "nodes verified")
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for row in rows:
        cells = [f"{row['nodes']}", f"{row['partitions']}", f"{row['lab_start_s']} s", f"{row['daemons_rss_mib']} MiB"]
        for key in ("init_s", "init_cpu_s", "verify_s", "verify_cpu_s"):
            cells.append(spread(row[key]))  # type: ignore[arg-type]
        cells.append(f"{row['verified_nodes']}")
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
