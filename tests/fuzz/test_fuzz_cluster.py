"""Property-based fuzzing of the cluster code: the Slurm/nvidia-smi/ldd parsers never raise; the Slurm value
grammars raise only GrammarError and accept only what is one shell word once quoted; the cluster file loader
gives a Cluster or one BadInputError; the draft gives a Draft or a BadInputError; `cluster init` with fuzzed
options exits 0, 1 or 2 with a message, never a traceback."""

from __future__ import annotations

import copy
import shlex
from pathlib import Path
from typing import Any

import yaml
from hypothesis import strategies as st

from envsolver.cluster import draft, grammar, parse
from envsolver.cluster import file as cluster_file
from envsolver.core.errors import BadInputError, UnknownGpuError
from envsolver.kb import default_kb
from tests.cluster.test_file import VALID
from tests.fuzz import strategies as fs
from tests.fuzz.harness import Tally, check_cli, check_function, modes, run_property

SLURM = Path(__file__).resolve().parents[1] / "data" / "slurm"
CAPTURED = {p.name: p.read_text(encoding="utf-8") for p in sorted(SLURM.glob("*.txt"))}
LINES = sorted({line for text in CAPTURED.values() for line in text.splitlines() if line.strip()})
SEPARATORS = ["|", ",", ":", "=", " ", "(", ")", "(S:0-1)", "(null)", "\n", "== envsolver-probe: ", "  "]


@st.composite
def slurm_text(draw: st.DrawFn) -> str:
    """A captured output, cut, with lines dropped, repeated or spliced with junk and separators."""
    base = draw(st.sampled_from(sorted(CAPTURED.values())))
    lines = base.splitlines()
    for _ in range(draw(st.integers(0, 4))):
        action = draw(st.sampled_from(["drop", "dup", "junk", "line", "cut", "sep"]))
        if not lines:
            break
        i = draw(st.integers(0, len(lines) - 1))
        if action == "drop":
            del lines[i]
        elif action == "dup":
            lines.insert(i, lines[i])
        elif action == "junk":
            lines[i] = draw(fs.file_junk)
        elif action == "line":
            lines.insert(i, draw(st.sampled_from(LINES)))
        elif action == "cut":
            lines[i] = lines[i][: draw(st.integers(0, len(lines[i])))]
        else:
            at = draw(st.integers(0, len(lines[i])))
            lines[i] = lines[i][:at] + draw(st.sampled_from(SEPARATORS)) + lines[i][at:]
    return "\n".join(lines)


any_text = st.one_of(slurm_text(), fs.file_junk, st.sampled_from(LINES))
PARSERS = (
    parse.parse_gres,
    parse.parse_sinfo,
    parse.parse_key_values,
    parse.parse_scontrol_nodes,
    parse.parse_config,
    parse.parse_smi_rows,
    parse.parse_ldd_version,
    parse.parse_probe,
)


@modes(150)
def test_parsers_never_raise(seed_value: int | None, count: int) -> None:
    tally = Tally("cluster parsers")

    def check(text: str) -> None:
        for parser in PARSERS:
            check_function(tally, (parser.__name__, text), lambda p=parser: p(text), ())

    run_property(any_text, check, count, seed_value)
    tally.check()


GRAMMARS = (grammar.name, grammar.gres, grammar.gpus, grammar.constraint)
grammar_text = st.one_of(
    fs.junk,
    st.sampled_from(["gpu:a100:1", "a100&[ib|eth]", "a100:2", "(a|b)*2", "gpu:1,nvme:1", "x" * 130]),
    st.text(st.sampled_from("ab1:,&|[]()*-._ ;$`'\"\n"), max_size=40),
)


@modes(300)
def test_grammars_accept_only_single_shell_words(seed_value: int | None, count: int) -> None:
    tally = Tally("cluster grammars")

    def use(check: Any, text: str) -> None:
        value = check(text)
        assert shlex.split(shlex.quote(value)) == [value]
        assert not set(value) & set(" \t\n;$`'\"\\<>"), value

    def check(text: str) -> None:
        for g in GRAMMARS:
            check_function(tally, (g.__name__, text), lambda g=g: use(g, text), (grammar.GrammarError,))

    run_property(grammar_text, check, count, seed_value)
    tally.check()


KEYS = ["name", "gpus", "driver", "platform", "glibc", "slurm", "provenance", "partition", "gres", "constraint"]


@st.composite
def cluster_text(draw: st.DrawFn) -> str:
    """The valid example with 1-3 changes (a value replaced, a key removed or added, a partition replaced),
    dumped; or cut; or junk."""
    doc: Any = copy.deepcopy(VALID)
    for _ in range(draw(st.integers(1, 3))):
        parts = doc.get("partitions") if isinstance(doc, dict) else None
        targets: list[Any] = [doc] + ([p for p in parts if isinstance(p, dict)] if isinstance(parts, list) else [])
        target = draw(st.sampled_from(targets))
        slurm = target.get("slurm")
        if isinstance(slurm, dict) and draw(st.booleans()):
            target = slurm
        action = draw(st.sampled_from(["set", "set", "delete", "add", "partition"]))
        if action == "set" and target:
            target[draw(st.sampled_from(sorted(target, key=str)))] = draw(
                st.one_of(fs.yaml_values, fs.value(["535.104.05", "2.28", "gpu:a100:1", "a100&ib", "linux-64"]))
            )
        elif action == "delete" and target:
            del target[draw(st.sampled_from(sorted(target, key=str)))]
        elif action == "add":
            target[draw(st.one_of(st.sampled_from(KEYS), fs.junk))] = draw(fs.yaml_values)
        elif action == "partition" and isinstance(parts, list) and parts:
            parts[draw(st.integers(0, len(parts) - 1))] = draw(fs.yaml_values)
    text = yaml.safe_dump(doc, allow_unicode=True)
    return draw(st.one_of(st.just(text), st.integers(0, len(text)).map(lambda n: text[:n]), fs.file_junk))


@modes(60)
def test_cluster_file_loader(seed_value: int | None, count: int) -> None:
    tally = Tally("cluster file loader")
    kb = default_kb()

    def check(text: str) -> None:
        def load_and_round_trip() -> None:
            cluster = cluster_file.parse(text, kb, "cluster.yaml")
            assert cluster_file.parse(cluster_file.render(cluster, "envsolver cluster init"), kb, "c.yaml") == cluster

        check_function(tally, text, load_and_round_trip, (BadInputError,))

    run_property(cluster_text(), check, count, seed_value)
    tally.check()


@st.composite
def slurm_facts(draw: st.DrawFn) -> tuple[str, str, tuple[str, ...], tuple[str, ...], bool]:
    sinfo = draw(
        st.one_of(st.just(CAPTURED["sinfo-node.txt"]), st.just(CAPTURED["sinfo-node-variants.txt"]), slurm_text())
    )
    nodes = draw(st.one_of(st.just(CAPTURED["scontrol-show-node-oneliner.txt"]), slurm_text()))
    partitions = st.sampled_from(["a100", "tesla", "mixed", "untyped", "site", "cpu", "x"])
    only = tuple(draw(st.one_of(st.just([]), st.lists(partitions, max_size=2))))
    values = st.sampled_from(["tesla=v100", "1g.10gb=h100", "a100=h100", "x=y", "gpu"])
    maps = tuple(draw(st.one_of(st.just(["tesla=v100"]), st.just([]), st.lists(values, max_size=2))))
    return sinfo, nodes, only, maps, draw(st.booleans())


@modes(60)
def test_draft_from_fuzzed_slurm_output(seed_value: int | None, count: int) -> None:
    tally = Tally("cluster draft")
    kb = default_kb()
    probes: dict[tuple[str, str | None], parse.Probe | str] = {
        ("a100", "a100"): parse.parse_probe(CAPTURED["probe-a100-gpu02.txt"]),
        ("v100", "v100"): parse.parse_probe(CAPTURED["probe-cpu-cpu01.txt"]),
        ("mixed", "h100"): "srun: error: Unable to allocate resources: Requested nodes are busy",
    }

    def check(value: tuple[str, str, tuple[str, ...], tuple[str, ...], bool]) -> None:
        sinfo, nodes, only, maps, probed = value

        def run() -> None:
            found = draft.facts(sinfo, nodes, CAPTURED["scontrol-show-config.txt"])
            surveyed = draft.survey(found, only)
            result = draft.build(surveyed, probes if probed else None, draft.parse_maps(maps, kb), kb, ("envsolver",))
            cluster_file.parse(cluster_file.render(result.cluster, "envsolver cluster init"), kb, "c.yaml")

        check_function(tally, value, run, (BadInputError, UnknownGpuError))

    run_property(slurm_facts(), check, count, seed_value)
    tally.check()


init_args = st.lists(
    st.one_of(
        st.tuples(st.just("--partition"), fs.value(["a100", "tesla", "x y", "a,b"])).map(list),
        st.tuples(st.just("--map"), fs.value(["tesla=v100", "tesla=", "=v100", "a=b=c", "tesla=v1000"])).map(list),
        st.tuples(st.just("--wait"), fs.value(["0", "1", "-1", "3601", "x"])).map(list),
        st.tuples(st.just("--out"), fs.value(["cluster.yaml", "", "/", "a/b.yaml"])).map(list),
        st.sampled_from([["--no-probe"], ["--json"], ["--force"], ["--bogus"]]),
    ),
    max_size=5,
).map(lambda parts: [w for part in parts for w in part])


@modes(40)
def test_cluster_init_options(seed_value: int | None, count: int, tmp_path: Path) -> None:
    """SLURM_CONF names a missing file, so every run ends before Slurm is asked (exit 2) or at an option."""
    tally = Tally("cluster init options")
    env = {"SLURM_CONF": str(tmp_path / "missing.conf")}
    run_property(init_args, lambda args: check_cli(tally, ["cluster", "init", *args], env), count, seed_value)
    tally.check()
