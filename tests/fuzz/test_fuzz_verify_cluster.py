"""Property-based fuzzing of `verify --cluster`: whatever a node prints (the captured step outputs cut and
spliced, a verify section holding any facts or any JSON, junk, escape sequences), reading it back, verify's
checks over the facts on the login node, judging why it gave no facts, the checks across partitions and the
report's rendering never raise, the report's lines hold no raw control character (one line each), and the JSON
document is strict JSON; the command with fuzzed options exits 0, 1 or 2 with a message, never a traceback."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import strategies as st

from envsolver.cluster import compare, fanout, step, verify_report
from envsolver.cluster.file import parse
from envsolver.cluster.verify import NodeOutcome, Outcome, Report, status_of
from envsolver.kb import default_kb
from tests.cluster import captures
from tests.fuzz import strategies as fs
from tests.fuzz.harness import Tally, check_cli, check_function, modes, run_property
from tests.hostile import RAW

DATA = Path(__file__).resolve().parents[1] / "data" / "cluster-verify"
CAPTURED = sorted(p.read_text() for p in DATA.glob("step-*.txt"))
LINES = sorted({line for text in CAPTURED for line in text.splitlines() if line.strip()})
MARKS = ["== envsolver-verify: begin", "== envsolver-verify: exit 0", "== envsolver-verify: exit 999", "{", "}"]
FILE = """\
cluster: lab
partitions:
  - {name: v100, gpus: [v100], driver: '535.104.05', platform: linux-64, glibc: '2.36'}
  - {name: h100, gpus: [h100], driver: null, platform: linux-64, glibc: null, slurm: {gpus: 'h100:1'}}
"""
META = {
    "envsolver_cluster": "lab",
    "envsolver_cluster_partitions": "v100",
    "envsolver_driver_min_minor_compat": "525.60.13",
    "envsolver_torch_cuda_arch_list": "7.0;8.0;9.0+PTX",
    "envsolver_virtual_linux-64_cuda": "12.2",
    "envsolver_virtual_linux-64_glibc": "2.28",
}

# Facts whose strings hold lone surrogates, as JSON can spell them.
LONE = '{"probe_version": 2, "driver": {"version": "5\\ud800", "gpus": [{"name": "\\udfff"}]}, "glibc": "\\ud800"}'
json_values = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.floats(allow_nan=False, allow_infinity=False),
        fs.junk,
        fs.terminal_junk,
        st.sampled_from(["535.104.05", "12.9", "2.36", "7.0", "x86_64", "aarch64", "nvidia-smi", ""]),
    ),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(fs.junk, inner, max_size=4)),
    max_leaves=12,
)
gpu_rows = st.lists(
    st.fixed_dictionaries(
        {},
        optional={
            "name": st.one_of(st.sampled_from(["Tesla V100-SXM2-16GB", "NVIDIA GH200 480GB"]), json_values),
            "compute_capability": st.one_of(st.sampled_from(["7.0", "9.0", "9"]), json_values),
            "memory": json_values,
        },
    ),
    max_size=3,
)
# The probe's facts (verify/probe.py), each fact of its own shape or any JSON at all.
facts_documents = st.fixed_dictionaries(
    {"probe_version": st.one_of(st.just(2), json_values)},
    optional={
        "driver": st.one_of(
            st.fixed_dictionaries(
                {"version": st.one_of(st.sampled_from(["450.80.02", "570.133.20"]), json_values), "gpus": gpu_rows}
            ),
            json_values,
        ),
        "torch": st.one_of(
            st.fixed_dictionaries(
                {
                    "version": st.one_of(st.just("2.7.1"), json_values),
                    "cuda": st.one_of(st.just("12.9"), json_values),
                    "arch_list": st.one_of(st.just(["sm_70", "compute_90"]), json_values),
                    "available": json_values,
                }
            ),
            json_values,
        ),
        "python": json_values,
        "glibc": json_values,
        "conda_meta": json_values,
        "nvcc": json_values,
        "env": json_values,
        "shm": json_values,
        "headers": json_values,
    },
)


@st.composite
def step_text(draw: st.DrawFn) -> str:
    """A captured step output, cut and spliced; or a probe with a verify section holding any facts, or any JSON;
    or junk."""
    kind = draw(st.sampled_from(["captured", "document", "junk"]))
    if kind == "junk":
        return draw(fs.file_junk)
    base = draw(st.sampled_from(CAPTURED))
    lines = base.splitlines()
    if kind == "document":
        begin = lines.index("== envsolver-verify: begin")
        indent = draw(st.sampled_from([None, 2]))
        body = json.dumps(draw(st.one_of(facts_documents, json_values)), indent=indent)
        raw = draw(
            st.sampled_from(
                ["", "NaN", '{"probe_version": Infinity}', "{" * 3000, '{"probe_version": ' + "9" * 5000 + "}", LONE]
            )
        )
        lines = [*lines[: begin + 1], *body.splitlines(), raw, draw(st.sampled_from(MARKS))]
    for _ in range(draw(st.integers(0, 4))):
        if not lines:
            break
        i = draw(st.integers(0, len(lines) - 1))
        action = draw(st.sampled_from(["drop", "dup", "junk", "line", "cut"]))
        if action == "drop":
            del lines[i]
        elif action == "dup":
            lines.insert(i, lines[i])
        elif action == "junk":
            lines[i] = draw(st.one_of(fs.file_junk, fs.terminal_junk))
        elif action == "line":
            lines.insert(i, draw(st.sampled_from([*LINES, *MARKS])))
        else:
            lines[i] = lines[i][: draw(st.integers(0, len(lines[i])))]
    return "\n".join(lines)


@modes(150)
def test_whatever_a_node_prints_is_read_judged_and_rendered(seed_value: int | None, count: int) -> None:
    tally = Tally("verify --cluster step output")
    kb = default_kb()
    cluster = parse(FILE, kb, "cluster.yaml")
    scope = compare.Scope(cluster, "cluster.yaml", "/shared/env", META)
    judge = captures.judge(kb, ())  # every check, the captured prefix's lock metadata

    def check(text: str) -> None:
        def run() -> None:
            labelled = "\n".join(f"{i % 3}: {line}" for i, line in enumerate(text.split("\n")))
            texts, _ = fanout.split(labelled)  # srun --label's lines, split back per task: never raises
            assert set(texts) <= {0, 1, 2}, texts.keys()
            reply = step.read(text, "/shared/env", judge)
            trouble = step.trouble(reply, "/shared/env")
            assert (trouble is None) == bool(reply.checks), (trouble, reply.checks)
            outcomes = []
            for partition in cluster.partitions:
                cross = compare.compare(kb, scope, partition, reply.probe)
                assert [c.id for c in cross] == list(compare.IDS)
                status = status_of((*reply.checks, *cross)) if trouble is None else "error"
                node = NodeOutcome(reply.probe.node or "?", status, reply.checks, cross, reply, trouble)
                outcomes.append(Outcome(partition, status, ("srun",), (node,)))
            report = Report(cluster, "cluster.yaml", "/shared/env", "python", "linux-64", "x", META, tuple(outcomes))
            for line in verify_report.lines(report):
                line.encode("utf-8")  # printable as it is
                assert "\n" not in line and not RAW.search(line), line  # what a node said, spelled out
            problem = verify_report.error_text(report)
            assert problem is None or not RAW.search(problem), problem
            json.dumps(verify_report.document(report), allow_nan=False)

        check_function(tally, text, run, ())

    run_property(step_text(), check, count, seed_value)
    tally.check()


def _args(tmp: Path) -> st.SearchStrategy[list[str]]:
    files = fs.value([str(tmp / "cluster.yaml"), str(tmp / "missing.yaml"), str(tmp), ""])
    prefixes = fs.value([str(tmp / "env"), str(tmp / "none"), "", "-"])
    return st.lists(
        st.one_of(
            st.tuples(st.just("--cluster"), files).map(list),
            st.tuples(st.just("-p"), prefixes).map(list),
            st.tuples(st.just("--python"), fs.value(["/usr/bin/python3", ""])).map(list),
            st.tuples(st.just("--check"), fs.value(["driver", "lock_driver", "x"])).map(list),
            st.tuples(st.just("--lock"), fs.value([str(tmp / "cluster.yaml"), str(tmp / "none.yml")])).map(list),
            st.sampled_from([["--json"], ["--gpu-test"], ["--bogus"]]),
        ),
        max_size=5,
    ).map(lambda parts: ["verify", "--cluster", str(tmp / "cluster.yaml"), *(w for part in parts for w in part)])


@modes(30)
def test_verify_cluster_options(seed_value: int | None, count: int, tmp_path: Path) -> None:
    """SLURM_CONF names a missing file, so every run ends before Slurm is asked (exit 2) or at an option."""
    tally = Tally("verify --cluster options")
    (tmp_path / "cluster.yaml").write_text(FILE)
    (tmp_path / "env" / "bin").mkdir(parents=True)
    (tmp_path / "env" / "bin" / "python").write_text("#!/bin/sh\nexit 3\n")
    env = {"SLURM_CONF": str(tmp_path / "missing.conf")}

    def check(args: list[str]) -> None:
        outcome = check_cli(tally, args, env)
        assert outcome.exit_code != 0 or outcome.problem is not None, outcome  # Slurm is never reached

    run_property(_args(tmp_path), check, count, seed_value)
    tally.check()
