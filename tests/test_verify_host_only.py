"""verify asks its probe only for what the checks it runs read (verify/checks.READS, the one list): a selection of
host-only checks (`--check driver`, the job's `--check driver --check host_vs_lock`) starts no torch child and no
DeepSpeed child, in `envsolver verify`, in `verify --cluster`'s node probe and in the job's verify step; and a
selection is never too small: what each check (and each of the job gate's rules), with its prerequisites, reads of
the late facts is recorded over the captured facts and their variants and held to what the probe is asked for."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from envsolver.cli.main import main
from envsolver.cluster import gate_step, step
from envsolver.cluster import verify as cluster_verify
from envsolver.cluster.parse import SINFO_ARGV
from envsolver.kb import KnowledgeBase
from envsolver.lock.lockfile import LockEntry
from envsolver.verify import checks, demands, gate, probe, run
from envsolver.verify.checks_base import Check, Context
from tests.conftest import DATA

CAPTURES = sorted((DATA / "verify").glob("*-facts.json"))
LATE = frozenset(checks.LATE_FACTS)
PROBE_SOURCE = run.PROBE.read_text(encoding="utf-8")
# A lock's promise, as `envsolver install` keeps it (host_vs_lock, the unset arch list's fix, deepspeed_ops).
LOCK_META = {
    "envsolver_compute_capabilities": "9.0",
    "envsolver_driver_min_minor_compat": "580",
    "envsolver_virtual_linux-64_cuda": "13.0",
    "envsolver_virtual_linux-64_glibc": "2.28",
    "envsolver_torch_cuda_arch_list": "8.0;9.0+PTX",
}
LOCK = (LockEntry("deepspeed", "0.19.5", "py_0", "linux-64", "linux-64", "u", None, None),)


class Recording(Mapping[str, Any]):
    """A probe's facts that note every key read (get, [], in; a walk over all of them reads all)."""

    def __init__(self, facts: Mapping[str, Any], read: set[str]) -> None:
        self._facts, self._read = facts, read

    def __getitem__(self, key: str) -> Any:
        self._read.add(key)
        return self._facts[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._facts)

    def __len__(self) -> int:
        return len(self._facts)


def late(keys: set[str]) -> set[str]:
    """The late facts among the keys read: `torch`, or the probe's error beside it, `torch_error`, is torch's."""
    return {k.removesuffix("_error") for k in keys if k.removesuffix("_error") in LATE}


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def apply(doc: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        target = doc
        for key in parents:
            target = target[key]
        target[last] = value

    return apply


def _drop(*keys: str) -> Callable[[dict[str, Any]], None]:
    def apply(doc: dict[str, Any]) -> None:
        for key in keys:
            doc.pop(key, None)

    return apply


def _built(doc: dict[str, Any]) -> None:
    """DeepSpeed imported with FusedAdam built and loading (the H200 capture's), and the GPU test run."""
    ds = json.loads((DATA / "verify" / "h200-deepspeed-facts.json").read_text())["deepspeed"]
    doc["deepspeed"] = {**ds, "fused_adam_built": True, "fused_adam_loads": True}
    doc["gpu_test"] = {"max_abs_diff": 1.9e-6}


def _no_prefix_toolkit(doc: dict[str, Any]) -> None:
    doc["prefix_toolkit"] = {"prefix": "/p", "conda": True, "nvcc": {"exists": False}, "include_dir": None}
    doc["prefix_toolkit"] |= {"missing": ["cuda.h"], "complete": False}
    doc["conda_meta"] = [{"name": "python", "version": "3.12.3", "build": "h0"}]


# Each changes a captured document so that the checks take their other ways (fail, warn, skip, the fixes).
VARIANTS: dict[str, Sequence[Callable[[dict[str, Any]], None]]] = {
    "as captured": (),
    "DeepSpeed built, the GPU test run": (_built,),
    "the GPU test differs": (_built, _set("gpu_test", {"max_abs_diff": 0.5})),
    "torch does not import": (_set("torch", {"error": "ModuleNotFoundError: No module named 'torch'"}),),
    "torch's child timed out": (_drop("torch"), _set("torch_error", "timed out after 120s")),
    "a CPU torch": (_set("torch.cuda", None),),
    "no DeepSpeed": (_set("deepspeed", {"error": "ModuleNotFoundError: No module named 'deepspeed'"}),),
    "DeepSpeed not probed": (_drop("deepspeed"),),
    "no arch list": (_set("env.TORCH_CUDA_ARCH_LIST", None),),
    "an arch list": (_set("env.TORCH_CUDA_ARCH_LIST", "9.0a"),),
    "no nvcc": (_set("nvcc", {"path": "/x/bin/nvcc", "exists": False, "version": None, "archs": None}),),
    "a prefix without the toolkit": (_no_prefix_toolkit,),
    "no driver": (_set("driver", {"source": None, "version": None, "cuda": None, "gpus": []}),),
    "stale op caches": (_set("extensions_cache", {"root": "/c", "entries": ["py312_cu126", "py39_cpu"]}),),
}


def documents() -> Iterator[tuple[str, dict[str, Any]]]:
    for capture in CAPTURES:
        found = json.loads(capture.read_text())
        for name, changes in VARIANTS.items():
            doc = copy.deepcopy(found)
            for change in changes:
                change(doc)
            yield f"{capture.stem}, {name}", doc


def contexts(kb: KnowledgeBase, facts: Mapping[str, Any]) -> Iterator[Context]:
    yield Context(facts, kb)
    yield Context(facts, kb, gpu_test=True)
    yield Context(facts, kb, dict(LOCK_META), LOCK, deepspeed_wanted=True, gpu_test=True)


@pytest.fixture(scope="module")
def recorded(kb: KnowledgeBase) -> dict[str, set[str]]:
    """The late facts each check read, called directly (not through run(), which hides the others) on every
    document and context."""
    out: dict[str, set[str]] = {check_id: set() for check_id in checks.IDS}
    for _, doc in documents():
        for check_id, function, _ in checks.CHECKS:
            read: set[str] = set()
            for ctx in contexts(kb, Recording(doc, read)):
                function(ctx)
            out[check_id] |= late(read)
    return out


def closure(ids: Sequence[str], table: Sequence[tuple[str, Any, tuple[str, ...]]]) -> set[str]:
    """The ids and their prerequisites', by the table's (verify's CHECKS, the gate's RULES)."""
    needs = {row[0]: row[2] for row in table}
    found: set[str] = set()
    todo = list(ids)
    while todo:
        check_id = todo.pop()
        if check_id not in found:
            found.add(check_id)
            todo.extend(needs[check_id])
    return found


def learned(options: Sequence[str]) -> set[str]:
    """The late facts a probe run with these options prints (probe.main: torch unless --no-torch, DeepSpeed's with
    --deepspeed, the GPU test's with --gpu-test; tests below hold the probe to it)."""
    return (
        ({"torch"} if "--no-torch" not in options else set())
        | ({"deepspeed"} if "--deepspeed" in options else set())
        | ({"gpu_test"} if "--gpu-test" in options else set())
    )


def test_reads_names_each_check_once_with_late_facts_only() -> None:
    assert list(checks.READS) == list(checks.IDS), "READS must list every check, in CHECKS' order"
    for check_id, reads in checks.READS.items():
        assert set(reads) <= LATE and len(set(reads)) == len(reads), f"{check_id}: {reads}"
    assert tuple(i for i in checks.IDS if not checks.READS[i]) == checks.HOST_ONLY
    assert {"driver", "gpus", "host_vs_lock", "shm"} <= set(checks.HOST_ONLY), checks.HOST_ONLY


def test_each_check_reads_exactly_the_late_facts_its_row_declares(recorded: dict[str, set[str]]) -> None:
    """Recorded over 5 captures x 14 variants x 3 contexts: a check that reads a late fact READS does not name would
    see none of it (run() hides it); one that names a fact it never reads makes the probe start a child for
    nothing."""
    wrong = {
        i: (sorted(recorded[i]), sorted(checks.READS[i])) for i in checks.IDS if recorded[i] != set(checks.READS[i])
    }
    assert not wrong, f"check: (late facts read, READS): {wrong}"


@pytest.mark.parametrize("check_id", checks.IDS)
def test_each_check_alone_gets_every_late_fact_it_and_its_prerequisites_read(
    check_id: str, recorded: dict[str, set[str]], kb: KnowledgeBase
) -> None:
    """What `envsolver verify --check ID [--gpu-test]` asks the probe for (run.children_for, through the options
    probe_options writes) against what the check and its prerequisites were seen to read: never too small."""
    for gpu_test in (False, True):
        asked = run.children_for((check_id,), gpu_test)
        options = run.probe_options(asked.deepspeed, asked.gpu_test, 60.0, torch=asked.torch)
        needed = {fact for i in closure((check_id,), checks.CHECKS) for fact in recorded[i]}
        if not gpu_test:
            needed.discard("gpu_test")  # the GPU test runs only when asked for (ctx.gpu_test)
        assert needed <= learned(options), f"--check {check_id} (gpu_test={gpu_test}): {options}, reads {needed}"
    if check_id in checks.HOST_ONLY:
        assert run.children_for((check_id,), True) == run.Children(False, False, False), check_id


def test_every_check_asks_for_every_child_as_before() -> None:
    assert run.children_for(None, True) == run.Children(True, True, True)
    assert run.children_for(checks.IDS, False) == run.Children(True, True, False)
    assert run.children_for((), True) == run.Children(False, False, False)
    assert run.children_for(("cuda_available",), True) == run.Children(True, False, False)
    assert run.children_for(("no_such_check",), False) == run.Children(True, True, False)  # unknown: everything


def test_a_check_gets_what_its_prerequisites_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """A failed prerequisite skips a check, so the prerequisite's facts are needed too: were cuda_available to
    read nothing late, its prerequisite torch_cuda_build (after torch_import) still reads torch."""
    monkeypatch.setitem(checks.READS, "cuda_available", ())
    assert checks.probe_needs(("cuda_available",)) == {"torch"}
    assert checks.probe_needs(("gpus",)) == frozenset()


def test_run_hands_each_check_only_the_late_facts_it_reads(kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, set[str]] = {}

    def looking(check_id: str) -> Callable[[Context], Check]:
        def function(ctx: Context) -> Check:
            seen[check_id] = late(set(ctx.facts))
            return Check(check_id, "pass", "seen")

        return function

    monkeypatch.setattr(checks, "CHECKS", tuple((i, looking(i), n) for i, _, n in checks.CHECKS))
    doc = json.loads((DATA / "verify" / "h200-deepspeed-facts.json").read_text()) | {"torch_error": "x"}
    checks.run(Context(doc, kb))
    assert seen == {i: set(checks.READS[i]) for i in checks.IDS}, seen


def _probe_main(argv: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Any:
    """probe.main in this process, each child it starts noted and answered by a python that prints a stand-in
    document (nothing imports torch): (the children's code, the facts printed)."""
    started: list[str] = []

    def start(code: str, *args: str) -> subprocess.Popen[bytes]:
        started.append(code)
        return subprocess.Popen(
            [sys.executable, "-I", "-c", "print('{\"stand_in\": true}')"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )

    monkeypatch.setattr(probe, "_start", start)
    capsys.readouterr()
    assert probe.main(argv) == 0
    return started, json.loads(capsys.readouterr().out)


def test_the_probe_with_no_torch_starts_no_torch_child(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    started, facts = _probe_main(["--timeout", "30", "--no-torch"], capsys, monkeypatch)
    assert started == [] and not LATE & set(facts), (started, sorted(facts))
    started, facts = _probe_main(["--timeout", "30", "--no-torch", "--deepspeed"], capsys, monkeypatch)
    assert started == [probe.DS_CHILD] and LATE & set(facts) == {"deepspeed"}, (len(started), sorted(facts))
    started, facts = _probe_main(["--timeout", "30"], capsys, monkeypatch)
    assert started == [probe.TORCH_CHILD] and facts["torch"] == {"stand_in": True}, (len(started), sorted(facts))


def test_the_probe_as_source_with_no_torch_prints_the_host_facts_twice(tmp_path: Path) -> None:
    """As a node runs it (`python -I -c SOURCE`): with --no-torch the last document is the first line's host
    facts, which a full probe streams before torch's, exactly."""
    done = subprocess.run(
        [sys.executable, "-I", "-c", PROBE_SOURCE, "--timeout", "30", "--stream", "--no-torch"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        check=False,
    )
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    assert done.returncode == 0 and len(lines) == 2, done.stdout + done.stderr
    assert lines[1] == lines[0]["partial"] and lines[1]["probe_version"] == 2, done.stdout
    assert "driver" in lines[1] and "glibc" in lines[1] and not LATE & set(lines[1]), sorted(lines[1])


def _python(tmp_path: Path, doc: Mapping[str, Any], name: str) -> Path:
    """A stand-in interpreter: notes the probe's options (argv), prints `doc` as the probe streams it."""
    host = {k: v for k, v in doc.items() if k not in LATE}
    script = tmp_path / name
    said = tmp_path / f"{name}.argv"
    lines = [json.dumps({"partial": host}), json.dumps(dict(doc))]
    script.write_text(f"#!/bin/sh\nprintf '%s\\n' \"$@\" > '{said}'\n" + "".join(f"echo '{line}'\n" for line in lines))
    script.chmod(0o755)
    return script


def _verify(python: Path, *args: str) -> tuple[str, list[str]]:
    done = CliRunner().invoke(main, ["verify", "--python", str(python), *args])
    assert done.exit_code in (0, 1), done.output
    return done.output, Path(f"{python}.argv").read_text().splitlines()


@pytest.mark.parametrize(
    ("args", "torch", "deepspeed", "gpu_test"),
    [
        (["--check", "driver"], False, False, False),
        (["--check", "driver", "--check", "host_vs_lock", "--gpu-test"], False, False, False),
        (["--check", "torch_import"], True, False, False),
        (["--check", "torch_cuda_arch_list"], False, True, False),
        (["--check", "deepspeed_ops", "--gpu-test"], True, True, True),
        ([], True, True, False),
        (["--gpu-test"], True, True, True),
    ],
)
def test_verify_asks_the_probe_for_the_children_its_checks_read(
    tmp_path: Path, args: list[str], torch: bool, deepspeed: bool, gpu_test: bool
) -> None:
    doc = json.loads((DATA / "verify" / "h200-deepspeed-facts.json").read_text())
    _, argv = _verify(_python(tmp_path, doc, "python"), *args)
    assert ("--no-torch" not in argv, "--deepspeed" in argv, "--gpu-test" in argv) == (torch, deepspeed, gpu_test), argv


@pytest.mark.parametrize("only", [(check_id,) for check_id in checks.HOST_ONLY] + [checks.HOST_ONLY])
def test_host_only_checks_print_the_same_with_the_host_facts_alone(tmp_path: Path, only: tuple[str, ...]) -> None:
    """What a probe with --no-torch prints (the host facts) against a full probe's facts: the same text and JSON."""
    doc = json.loads((DATA / "verify" / "h200-image-facts.json").read_text())
    full = _python(tmp_path, doc, "full")
    host = _python(tmp_path, {k: v for k, v in doc.items() if k not in LATE}, "host")
    words = [w for check_id in only for w in ("--check", check_id)]
    for more in ([], ["--json"]):
        with_all, _ = _verify(full, *words, *more)
        alone, argv = _verify(host, *words, *more)
        assert alone.replace(str(host), "PY") == with_all.replace(str(full), "PY"), (alone, with_all)
        assert "--no-torch" in argv, argv


def test_the_cluster_nodes_probe_asks_for_what_the_checks_read(kb: KnowledgeBase) -> None:
    host = step.node_command("/shared/envs/train", kb, None, True, only=("driver", "gpus", "host_vs_lock"))
    assert "--no-torch" in host and "--deepspeed" not in host and "--gpu-test" not in host, host[4:]
    assert "--op-runner" not in host, host[4:]
    torch = step.node_command("/shared/envs/train", kb, None, True, only=("driver", "arch_coverage"))
    assert "--no-torch" not in torch and "--deepspeed" not in torch and "--gpu-test" not in torch, torch[4:]
    every = step.node_command("/shared/envs/train", kb, None, True)
    assert "--no-torch" not in every and {"--deepspeed", "--gpu-test"} <= set(every), every[4:]


def test_verify_cluster_runs_the_node_probe_without_torch_for_host_checks(tmp_path: Path, kb: KnowledgeBase) -> None:
    """cluster/verify.verify hands --check to the node's command: the step's argv, as srun would get it."""
    prefix = tmp_path / "env"
    (prefix / "bin").mkdir(parents=True)
    (prefix / "bin" / "python").write_text("")
    steps: list[Sequence[str]] = []
    slurm = DATA / "slurm"

    def runner(argv: Sequence[str], timeout: float, what: str, fix: str) -> str:
        if tuple(argv) == SINFO_ARGV:
            return (slurm / "sinfo-node.txt").read_text()
        if argv[0] == "scontrol":
            return (slurm / "scontrol-show-node-oneliner.txt").read_text()
        steps.append(argv)
        return ""

    for only, torch in ((("driver", "host_vs_lock"), False), (("torch_import",), True)):
        request = cluster_verify.Request(DATA / "cluster" / "mixed.yaml", prefix, only=only, partitions=("v100",))
        cluster_verify.verify(request, kb, runner=runner, environ={})
        argv = list(steps.pop())
        probe_words = argv[argv.index(PROBE_SOURCE) - 3 :]
        assert probe_words[:3] == [f"{prefix}/bin/python", "-I", "-c"], probe_words[:3]
        assert ("--no-torch" not in probe_words) == torch and "--deepspeed" not in probe_words, probe_words[4:]


def _gate_options(checks_asked: Sequence[str]) -> list[str]:
    words = gate_step.argv("/shared/envs/train", 2, checks_asked, {"version": 1}, 15)
    return words[words.index("--") + 1 :]


def test_the_jobs_verify_step_imports_torch_only_for_rules_that_read_it() -> None:
    assert "--no-torch" in _gate_options(["driver", "host_vs_lock"])
    assert "--no-torch" in _gate_options(["gpus", "shm"])  # no rule of the gate's: judged by verify --cluster
    assert "--no-torch" in _gate_options(["driver", "cudnn"])  # cudnn reads torch, but the job does not judge it
    assert "--no-torch" not in _gate_options(["driver", "torch_import"])
    assert "--no-torch" not in _gate_options([])  # every rule
    assert _gate_options([]) == run.probe_options(False, False, run.TIMEOUT_S, stream=False)


def test_each_gate_rule_alone_gets_what_it_reads_and_says_the_same(kb: KnowledgeBase) -> None:
    """The gate is standard library only, so nothing hides a fact from its rules: each rule alone, judged on the
    facts its probe prints (torch's dropped where the step passes --no-torch), says what it says on all of them;
    and what it and its prerequisites read is what the step asks for."""
    wanted = demands.derive(kb, LOCK_META)
    read: dict[str, set[str]] = {rule_id: set() for rule_id in gate.IDS}
    for name, doc in documents():
        for rule_id, rule, _ in gate.RULES:
            keys: set[str] = set()
            rule(Recording(doc, keys), wanted, "gpu07")
            read[rule_id] |= late(keys)
        for rule_id in gate.IDS:
            given = learned(_gate_options([rule_id]))
            printed = {k: v for k, v in doc.items() if k.removesuffix("_error") not in LATE - given}
            alone = gate.judge(printed, wanted, "gpu07", [rule_id])
            assert alone == gate.judge(doc, wanted, "gpu07", [rule_id]), f"{rule_id} on {name}: {alone}"
    for rule_id in gate.IDS:
        needed = {fact for i in closure((rule_id,), gate.RULES) for fact in read[i]}
        assert needed <= learned(_gate_options([rule_id])), f"{rule_id}: reads {needed}"


def test_the_gate_runs_the_real_probe_without_torch(kb: KnowledgeBase, tmp_path: Path) -> None:
    """The job's step as srun runs it on a node, its probe options from gate_step: this python (which has a CPU
    torch) judges driver and host_vs_lock without importing torch."""
    smi = tmp_path / "nvidia-smi"
    smi.write_text('#!/bin/sh\necho "NVIDIA H100 80GB HBM3, 0x233010DE, 9.0, 81559 MiB, 580.65.06"\n')
    smi.chmod(0o755)
    wanted = json.dumps(demands.derive(kb, LOCK_META))
    asked = ["--check", "driver", "--check", "host_vs_lock"]
    gate_argv = [sys.executable, "-I", str(gate.__file__), "--probe", str(run.PROBE), "--demands", wanted, *asked]
    env = {**os.environ, "SLURMD_NODENAME": "gpu07", "PATH": f"{tmp_path}:{os.environ['PATH']}"}
    done = subprocess.run(
        [*gate_argv, "--", *_gate_options(["driver", "host_vs_lock"])],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "  pass driver: gpu07: driver 580.65.06 (from nvidia-smi)" in done.stdout.splitlines(), done.stdout
    assert done.stdout.splitlines()[-1] == "2 pass, 0 warn, 0 fail, 0 skip", done.stdout
