"""The job's verify step on one node: verify's probe's facts held against what the login node derived (the
demands), run by the ENVIRONMENT's python inside a Slurm job, where envsolver itself cannot run (no PyYAML in the
environment, and a node of another architecture than the login node).

    srun --nodes=N --ntasks-per-node=1 --label PREFIX/bin/python -I gate.py --python PREFIX/bin/python
        --probe .../verify/probe.py --demands JSON [--check ID]... -- PROBE_OPTIONS...

It runs the probe (verify/probe.py, a file beside this one) with PYTHON, then judges this node's facts, one line
per rule, each failure naming the node and its fix, and exits 1 when a rule failed (2 when it could not judge at
all: the probe did not run, or the demands are not readable), else 0.

The demands (envsolver/verify/demands.py: derive, on the login node, from the knowledge base and the lock) hold
every number a rule needs: which driver each CUDA release needs (fully, and through minor-version
compatibility), and what the lock promised (its driver floor, glibc, target compute capabilities). The rules
here compare; what each number is comes from there. The rules' ids are verify's check ids of the same meaning;
`covering` is the one rule for how an arch list runs on a compute capability (verify's arch_coverage and
host_vs_lock, and verify --cluster's lock_arch, ask it too).

Standard library only, no file of envsolver's imported: any python 3.8+ runs it as a file. What the node's
probe says is printed with its control characters spelled out.
"""

from __future__ import annotations

import collections
import json
import os
import platform
import re
import shlex
import subprocess
import sys
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

PROG = "envsolver-gate"
DEMANDS_VERSION = 1
PROBE_LIMIT_S = 600.0  # the probe's own children give up after --timeout each; this bounds the whole
MAX_OUTPUT = 4 << 20
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
if TYPE_CHECKING:  # (a python 3.8 cannot subscript collections.abc.Callable at run time)
    Rule = Callable[[Mapping[str, Any], Mapping[str, Any], str], tuple[str, str, str]]


def shown(value: object) -> str:
    """A value from the node as one printable line: control characters spelled out (\\x1b, \\n)."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group(0)):02x}", str(value))[:300]


def numbers(text: object) -> tuple[int, ...] | None:
    """'550.54.15' -> (550, 54, 15); '2.36' -> (2, 36); None when it does not start with a number."""
    match = re.match(r"\s*([0-9]{1,9}(?:\.[0-9]{1,9}){0,3})", str(text)) if text is not None else None
    return tuple(int(p) for p in match.group(1).split(".")) if match else None


def major_minor(text: object) -> tuple[int, int] | None:
    found = numbers(text)
    return (found[0], found[1] if len(found) > 1 else 0) if found else None


# One entry of an arch list, as torch spells it (sm_80, sm_90a, compute_90) or as TORCH_CUDA_ARCH_LIST does
# (8.0, 9.0a, 10.0f, 9.0+PTX); group 1/2: torch's kind and SM, group 3-6: the list's major, minor, suffix, +PTX.
_ENTRY = re.compile(r"(sm|compute)_([0-9]{1,3}[0-9][af]?)|([0-9]{1,3})\.([0-9]{1,3})([af]?)(\+PTX)?")


def _code(entry: str) -> list[tuple[str, int, int, str]]:
    """(kind: sass or ptx, major, minor, suffix) for what one arch-list entry builds; [] for anything else."""
    match = _ENTRY.fullmatch(str(entry))
    if not match:
        return []
    if match.group(1):
        sm = match.group(2)
        suffix = sm[-1] if sm[-1] in "af" else ""
        digits = sm.rstrip("af")
        kind = "sass" if match.group(1) == "sm" else "ptx"
        return [(kind, int(digits[:-1]), int(digits[-1]), suffix)]
    major, minor, suffix = int(match.group(3)), int(match.group(4)), match.group(5)
    return [("sass", major, minor, suffix)] + ([("ptx", major, minor, suffix)] if match.group(6) else [])


def covering(arch_list: Iterable[str], cc: tuple[int, int]) -> tuple[str, str] | None:
    """How a GPU of compute capability `cc` runs code built for `arch_list`: ("sass", entry) when an entry is
    machine code it runs (its major at a minor no higher than its own; an arch-specific one, 9.0a, of exactly its
    own), else ("ptx", entry) when an entry is PTX of a capability no higher than its own (not arch- or
    family-specific: that PTX runs nowhere else), compiled at first launch; None when neither. The newest such
    entry is named. The one coverage rule: verify's arch_coverage and host_vs_lock, this gate, and `verify
    --cluster`'s lock_arch (cluster/compare) all ask it."""
    codes = sorted(
        ((code, entry) for entry in arch_list for code in _code(entry)), key=lambda c: (c[0][1], c[0][2]), reverse=True
    )
    for (kind, major, minor, suffix), entry in codes:
        if kind == "sass" and major == cc[0] and (minor == cc[1] if suffix == "a" else minor <= cc[1]):
            return ("sass", str(entry))
    for (kind, major, minor, suffix), entry in codes:
        if kind == "ptx" and not suffix and (major, minor) <= cc:
            return ("ptx", str(entry))
    return None


def covers(arch_list: Iterable[str], cc: tuple[int, int]) -> bool:
    """Whether anything in `arch_list` runs on compute capability `cc` (covering: machine code or PTX)."""
    return covering(arch_list, cc) is not None


def _torch(facts: Mapping[str, Any]) -> Mapping[str, Any]:
    value = facts.get("torch")
    return value if isinstance(value, dict) else {}


def _driver(facts: Mapping[str, Any]) -> Mapping[str, Any]:
    value = facts.get("driver")
    return value if isinstance(value, dict) else {}


def _gpus(facts: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    gpus = _driver(facts).get("gpus")
    return [g for g in gpus if isinstance(g, dict)] if isinstance(gpus, list) else []


def _prefix(demands: Mapping[str, Any]) -> str:
    """The environment's prefix as a fix names it (the gate's --python less bin/python), shell-quoted."""
    return shlex.quote(str(demands.get("prefix") or "PREFIX"))


def _exclude(node: str) -> str:
    return f"or leave {node} out of the job (sbatch --exclude={node})"


def rule_driver(facts: Mapping[str, Any], demands: Mapping[str, Any], node: str) -> tuple[str, str, str]:
    version = _driver(facts).get("version")
    if numbers(version) is None:
        return (
            "fail",
            f"{node}: no NVIDIA driver answers (nvidia-smi)",
            f"check the driver on {node} (nvidia-smi), " + _exclude(node),
        )
    return ("pass", f"{node}: driver {shown(version)} (from {shown(_driver(facts).get('source'))})", "")


def rule_torch_import(facts: Mapping[str, Any], demands: Mapping[str, Any], node: str) -> tuple[str, str, str]:
    torch = _torch(facts)
    if not torch.get("version"):
        why = torch.get("error") or facts.get("torch_error") or "no version"
        return (
            "fail",
            f"{node}: torch does not import: {shown(why)}",
            "install the environment from its lock: envsolver install conda-lock.yml -p " + _prefix(demands),
        )
    return ("pass", f"{node}: torch {shown(torch['version'])} at {shown(torch.get('file'))}", "")


def rule_torch_cuda_build(facts: Mapping[str, Any], demands: Mapping[str, Any], node: str) -> tuple[str, str, str]:
    torch = _torch(facts)
    if not torch.get("version"):
        return ("skip", "needs torch", "")
    if not torch.get("cuda"):
        return (
            "fail",
            f"{node}: torch {shown(torch['version'])} is a CPU-only build (torch.version.cuda is None)",
            "install the environment from its lock (it pins a CUDA build): envsolver install conda-lock.yml -p "
            + _prefix(demands),
        )
    wanted = (demands.get("lock") or {}).get("torch_cuda")
    if wanted and major_minor(wanted) != major_minor(torch["cuda"]):
        return (
            "fail",
            f"{node}: torch is a CUDA {shown(torch['cuda'])} build; the lock's is CUDA {wanted}",
            "install the environment from its lock: envsolver install conda-lock.yml -p " + _prefix(demands),
        )
    return ("pass", f"{node}: torch is a CUDA {shown(torch['cuda'])} build", "")


def rule_driver_supports_torch_cuda(
    facts: Mapping[str, Any], demands: Mapping[str, Any], node: str
) -> tuple[str, str, str]:
    version, built = numbers(_driver(facts).get("version")), major_minor(_torch(facts).get("cuda"))
    if version is None or built is None:
        return ("skip", "needs the driver and torch's CUDA version", "")
    cuda = f"{built[0]}.{built[1]}"
    have = shown(_driver(facts).get("version"))
    row = (demands.get("cuda_drivers") or {}).get(cuda)
    if not isinstance(row, dict):
        return ("skip", f"the knowledge base has no driver minimum for CUDA {cuda}", "")
    full, minor = numbers(row.get("full")), numbers(row.get("minor"))
    need = f"{row['full']} or newer" if full else f"one that fully supports CUDA {cuda}"
    if full is not None and version >= full:
        return ("pass", f"{node}: driver {have} fully supports CUDA {cuda}", "")
    if minor is not None and version >= minor:
        return (
            "warn",
            f"{node}: driver {have} runs CUDA {cuda} only through minor-version "
            "compatibility: PTX JIT of code built with a newer toolkit fails",
            f"upgrade the driver on {node} to {need}",
        )
    floor = f" (>= {row['minor']} through minor-version compatibility)" if minor else ""
    return (
        "fail",
        f"{node}: driver {have} is too old for torch's CUDA {cuda}, which needs {need}{floor}",
        f"upgrade the driver on {node} to {need}, " + _exclude(node),
    )


def rule_cuda_available(facts: Mapping[str, Any], demands: Mapping[str, Any], node: str) -> tuple[str, str, str]:
    torch = _torch(facts)
    if not torch.get("cuda"):
        return ("skip", "needs a CUDA torch", "")
    if torch.get("available"):
        return ("pass", f"{node}: torch.cuda.is_available(): True, {shown(torch.get('device_count'))} device(s)", "")
    why = torch.get("cuda_error") or "torch.cuda.is_available() is False"
    return ("fail", f"{node}: {shown(why)}", f"check the driver on {node} (nvidia-smi) and CUDA_VISIBLE_DEVICES")


def rule_arch_coverage(facts: Mapping[str, Any], demands: Mapping[str, Any], node: str) -> tuple[str, str, str]:
    arch_list = _torch(facts).get("arch_list")
    gpus = _gpus(facts)
    if not gpus or not isinstance(arch_list, list) or not arch_list:
        return ("skip", "needs visible GPUs and torch's arch list", "")
    bad = []
    for gpu in gpus:
        cc = major_minor(gpu.get("compute_capability"))
        if cc is not None and not covers(arch_list, cc):
            bad.append(f"{shown(gpu.get('name'))} (sm_{cc[0]}{cc[1]})")
    if bad:
        return (
            "fail",
            f"{node}: torch has no kernel for {', '.join(bad)} (its archs: "
            f"{shown(' '.join(str(a) for a in arch_list))})",
            "make the lock for these GPUs (envsolver make --cluster with this partition), " + _exclude(node),
        )
    return ("pass", f"{node}: every GPU has machine code or PTX in torch's arch list", "")


def rule_host_vs_lock(facts: Mapping[str, Any], demands: Mapping[str, Any], node: str) -> tuple[str, str, str]:
    lock = demands.get("lock")
    if not isinstance(lock, dict):
        return ("skip", "no lock metadata in the prefix", "")
    problems, unknown, fixes, looked = [], [], [], []
    version, floor = numbers(_driver(facts).get("version")), numbers(lock.get("driver"))
    solved = major_minor(lock.get("solved_cuda"))
    shown_version = shown(_driver(facts).get("version"))
    if version is not None and solved is not None:  # as verify's host_vs_lock: the CUDA the lock was solved for
        looked.append("driver")
        table = demands.get("cuda_drivers") or {}
        have = newest_full_cuda(table, version)
        row = table.get(f"{solved[0]}.{solved[1]}")
        cuda = f"{solved[0]}.{solved[1]}"
        if floor is not None and version < floor:
            problems.append(f"driver {shown_version} is older than the lock's floor {lock['driver']}")
            fixes.append(f"upgrade the driver on {node} (driver >= {lock['driver']})")
        elif have is not None and have < solved and isinstance(row, dict) and row.get("full") is None:
            unknown.append(
                f"the lock was solved for __cuda={cuda}, and the knowledge base does not know which driver fully "
                f"supports CUDA {cuda} (NVIDIA publishes no minimum); driver {shown_version} fully supports CUDA <= "
                f"{have[0]}.{have[1]} and runs {cuda} at least through minor-version compatibility"
            )
            fixes.append(f"upgrade the driver on {node} to one that fully supports CUDA {cuda}")
        elif have is not None and have < solved:
            problems.append(
                f"the lock was solved for __cuda={cuda}; driver {shown_version} fully supports CUDA <= "
                f"{have[0]}.{have[1]}"
            )
            need = row.get("full") if isinstance(row, dict) else None
            fixes.append(f"upgrade the driver on {node} (driver >= {need})" if need else "remake the lock")
    glibc, wanted = major_minor(facts.get("glibc")), major_minor(lock.get("glibc"))
    if glibc is not None and wanted is not None:
        looked.append("glibc")
    if glibc is not None and wanted is not None and glibc < wanted:
        problems.append(f"glibc {glibc[0]}.{glibc[1]} is older than the lock's {lock['glibc']}")
        fixes.append(f"run the job on nodes with glibc >= {lock['glibc']}")
    archs = [str(a) for a in lock.get("archs") or lock.get("ccs") or []]
    if archs and _gpus(facts):
        looked.append("GPU targets")
    for gpu in _gpus(facts) if archs else []:
        cc = major_minor(gpu.get("compute_capability"))
        how = covering(archs, cc) if cc is not None else None
        if cc is None:
            unknown.append(f"{shown(gpu.get('name'))}: its compute capability could not be read")
        elif how is None:
            problems.append(
                f"{shown(gpu.get('name'))} (CC {shown(gpu.get('compute_capability'))}) is not a target "
                f"of the lock ({shown(', '.join(archs))})"
            )
            fixes.append("make the lock with this partition in the cluster file (envsolver make --cluster)")
        elif how[0] == "ptx":
            unknown.append(
                f"{shown(gpu.get('name'))} (CC {shown(gpu.get('compute_capability'))}) has no kernels in the "
                f"lock's arch list, only the PTX of {shown(how[1])}, compiled at first launch"
            )
            fixes.append("make the lock with this partition in the cluster file (envsolver make --cluster)")
    if problems or unknown:
        status = "fail" if problems else "warn"
        return (
            status,
            f"{node}: " + "; ".join(problems + unknown),
            f"{'; '.join(dict.fromkeys(fixes))}, {_exclude(node)}" if fixes else _exclude(node).removeprefix("or "),
        )
    unseen = [what for what in ("driver", "glibc", "GPU targets") if what not in looked]
    if not looked:  # nothing seen on the node (no driver answering, no GPU) or nothing the lock records
        return (
            "skip",
            f"{node}: nothing to compare with the lock (its {_listed(unseen)} not seen on the node, or not "
            "recorded in the lock)",
            "",
        )
    not_checked = (
        f"; not checked: {_listed(unseen)} (not seen on the node, or not recorded in the lock)" if unseen else ""
    )
    return ("pass", f"{node}: meets the lock's {_listed(looked)}{not_checked}", "")


def _listed(words: list[str]) -> str:
    """'driver, glibc and GPU targets'."""
    return " and ".join([", ".join(words[:-1]), words[-1]]) if len(words) > 1 else words[0]


def newest_full_cuda(table: Mapping[str, Any], version: tuple[int, ...]) -> tuple[int, int] | None:
    """The newest CUDA release the demands' table says this driver fully supports (what nvidia-smi calls its
    'CUDA Version'); None when none."""
    fitting = []
    for cuda, row in table.items():
        full = numbers(row.get("full")) if isinstance(row, dict) else None
        cc = major_minor(cuda)
        if full is not None and cc is not None and full <= version:
            fitting.append(cc)
    return max(fitting) if fitting else None


# verify's order (envsolver/verify/checks.py CHECKS), with each rule's prerequisites.
RULES: tuple[tuple[str, Rule, tuple[str, ...]], ...] = (
    ("driver", rule_driver, ()),
    ("torch_import", rule_torch_import, ()),
    ("torch_cuda_build", rule_torch_cuda_build, ("torch_import",)),
    ("driver_supports_torch_cuda", rule_driver_supports_torch_cuda, ("driver", "torch_cuda_build")),
    ("cuda_available", rule_cuda_available, ("driver", "torch_cuda_build")),
    ("arch_coverage", rule_arch_coverage, ("cuda_available",)),
    ("host_vs_lock", rule_host_vs_lock, ()),
)
IDS = tuple(r[0] for r in RULES)


def judge(
    facts: Mapping[str, Any], demands: Mapping[str, Any], node: str, only: Iterable[str] = ()
) -> list[tuple[str, str, str, str]]:
    """(id, status, detail, fix) for each rule (or only those named); a failed or skipped prerequisite skips."""
    wanted = set(only)
    done: dict[str, tuple[str, str, str, str]] = {}
    for rule_id, rule, needs in RULES:
        blocked = [n for n in needs if n in done and done[n][1] in ("fail", "skip")]
        if blocked:
            done[rule_id] = (rule_id, "skip", f"skipped: {', '.join(blocked)} did not pass", "")
            continue
        try:
            status, detail, fix = rule(facts, demands, node)
        except Exception as exc:  # odd facts: say so rather than stop the job's check
            status, detail, fix = "fail", f"{node}: the rule failed on these facts: {type(exc).__name__}", ""
        done[rule_id] = (rule_id, status, detail, fix)
    return [done[i] for i in IDS if not wanted or i in wanted]


# How the gate starts a python: envsolver/core/pystart.py's rule (FLAGS), copied here because the gate runs where
# envsolver cannot be imported; tests/test_isolation.py holds the copies equal.
FLAGS = ("-I",)


def _isolated(python: str, *args: str) -> list[str]:
    """`PYTHON -I ARGS...`: neither the working directory nor the script's directory on sys.path, no PYTHON*."""
    return [python, *FLAGS, *args]


def probe(python: str, probe_file: str, options: list[str]) -> dict[str, Any]:
    """The probe's facts (its last JSON object), the probe run isolated from a private directory. Raises
    RuntimeError saying why there are none."""
    import tempfile

    try:
        with tempfile.TemporaryDirectory(prefix="envsolver-gate-") as where:
            return _probe(python, _isolated(python, probe_file, *options), where)
    except OSError as exc:
        raise RuntimeError(f"cannot run {python}: {exc.strerror or exc}") from None


def _probe(python: str, argv: list[str], where: str) -> dict[str, Any]:
    try:
        proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=where
        )
    except OSError as exc:
        raise RuntimeError(f"cannot run {python}: {exc.strerror or exc}") from None
    tail: collections.deque[bytes] = collections.deque()  # the last chunks, MAX_OUTPUT bytes and one chunk at most
    kept = [0]

    def drain() -> None:
        assert proc.stdout is not None
        for chunk in iter(lambda: proc.stdout.read(1 << 16) if proc.stdout else b"", b""):
            tail.append(chunk)
            kept[0] += len(chunk)
            while kept[0] - len(tail[0]) >= MAX_OUTPUT:  # the facts are the last thing the probe prints
                kept[0] -= len(tail.popleft())

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        proc.wait(timeout=PROBE_LIMIT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise RuntimeError(f"the probe did not finish in {PROBE_LIMIT_S:.0f} s") from None
    reader.join(timeout=30)
    text = b"".join(tail)[-MAX_OUTPUT:].decode("utf-8", "replace")
    start = text.rfind("\n{")
    try:
        facts = json.loads(text[start + 1 if start >= 0 else 0 :])
    except ValueError:
        facts = None
    if not isinstance(facts, dict) or "probe_version" not in facts:
        raise RuntimeError(f"the probe printed no facts (exit {proc.returncode}): {shown(text.strip()[-400:])}")
    return facts


def _option(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv and argv.index(name) + 1 < len(argv) else None


def main(argv: list[str]) -> int:
    head, options = (argv[: argv.index("--")], argv[argv.index("--") + 1 :]) if "--" in argv else (argv, [])
    node = shown(os.environ.get("SLURMD_NODENAME") or os.uname().nodename)
    only = [head[i + 1] for i, word in enumerate(head[:-1]) if word == "--check"]
    python = _option(head, "--python") or sys.executable
    probe_file = _option(head, "--probe") or os.path.join(os.path.dirname(os.path.abspath(__file__)), "probe.py")
    try:
        demands = json.loads(_option(head, "--demands") or "")
        if not isinstance(demands, dict) or demands.get("version") != DEMANDS_VERSION:
            raise ValueError("not this gate's demands")
        facts = probe(python, probe_file, options)
    except (ValueError, RuntimeError) as exc:
        by_hand = shlex.join(_isolated(python, probe_file))
        print(
            f"{PROG}: {node}: cannot check this node: {shown(exc)}. Run `{shown(by_hand)}` on {node} to see what "
            "it prints, then submit the job again.",
            file=sys.stderr,
        )
        return 2
    demands = dict(demands, prefix=os.path.dirname(os.path.dirname(python)))
    results = judge(facts, demands, node, only)
    print(f"{PROG}: {node} ({shown(platform.machine())}): {shown(python)} on verify's probe")
    for _rule_id, status, detail, fix in results:
        print(f"  {'FAIL' if status == 'fail' else status} {_rule_id}: {detail}")
        if fix and status in ("fail", "warn"):
            print(f"       fix: {fix}")
    left = [i for i in only if i not in IDS]
    if left:
        others = ", ".join(shown(i) for i in left)
        print(f"  (not checked in the job: {others}; envsolver verify --cluster checks them)")
    counts = {s: sum(1 for r in results if r[1] == s) for s in ("pass", "warn", "fail", "skip")}
    print(", ".join(f"{n} {s}" for s, n in counts.items()))
    return 1 if counts["fail"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
