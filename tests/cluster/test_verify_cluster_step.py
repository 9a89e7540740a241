"""The step `verify --cluster` runs on a node of each partition (envsolver/cluster/step.py): its argv (the
prefix's python on verify's probe as source; hostile values stay single words, never shell), the probe run that
way (no __file__, isolated), and what one node printed read back and judged: real step outputs captured in the lab
(tests/data/cluster-verify/, see its README), and broken ones."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from envsolver.cluster import fanout, step
from envsolver.cluster.file import parse
from envsolver.kb import KnowledgeBase, default_kb
from envsolver.lock.lockfile import read as read_lock
from envsolver.verify import run
from tests.cluster.captures import ONLY, PREFIX, captured, read
from tests.dist import needs_torch

LOCKS = Path(__file__).resolve().parents[2] / "locks"

FILE = """\
cluster: lab
partitions:
  - name: v100
    gpus: [v100]
    driver: '535.104.05'
    platform: linux-64
    glibc: '2.36'
    slurm: {gres: 'gpu:v100:1', account: ml-team}
  - name: h100
    gpus: [h100]
    driver: null
    platform: linux-64
    glibc: null
"""


@pytest.fixture(scope="module")
def kb() -> KnowledgeBase:
    return default_kb()


def test_the_node_runs_the_prefixs_python_on_the_probes_source_and_nothing_else(kb: KnowledgeBase) -> None:
    cluster = parse(FILE, kb, "cluster.yaml")
    v100, h100 = cluster.partitions
    command = step.node_command("/shared/envs/train", kb, None, True)
    assert not any(word.startswith("-m") or word == sys.executable for word in command), command[:4]
    assert command[:4] == ("/shared/envs/train/bin/python", "-I", "-c", step.PROBE_SOURCE)
    assert run.PROBE.read_text() == step.PROBE_SOURCE
    # The probe's options are verify's (run.probe_options), the GPU test's runner envsolver's op_runner.py.
    headers = ",".join(run.headers_of(kb))
    assert command[4:] == (
        "--timeout", "120.0", "--headers", headers, "--deepspeed", "--gpu-test", "--op-runner",
        str(run.PROBE.parents[1] / "hook" / "op_runner.py"),
    ), command[4:]  # fmt: skip
    argv = fanout.argv(step.options(v100), ("gpu01",), 30, step.TIME_MIN, step.NAME, step.words(command))
    assert argv == (
        "srun", "--partition=v100", "--gres=gpu:v100:1", "--account=ml-team", "--nodes=1", "--ntasks-per-node=1",
        "--nodelist=gpu01", "--label", "--immediate=30", "--time=10", "--quit-on-interrupt",
        "--job-name=envsolver-verify", "sh", "-c", step.SCRIPT, "envsolver-verify", *command,
    )  # fmt: skip
    assert step.shown(argv)[-len(command) + 3] == f"<the source of {run.PROBE}>"
    # A partition whose file names no GPU option still gets a GPU: the step must see one.
    assert step.options(h100) == ("--partition=h100", "--gres=gpu:1")


def test_the_node_asks_for_the_locks_pypi_distributions(kb: KnowledgeBase) -> None:
    lock = read_lock(LOCKS / "a100" / "conda-lock.yml", None)
    command = step.node_command("/shared/envs/train", kb, lock, False)
    assert "--gpu-test" not in command and "--op-runner" not in command
    dists = command[command.index("--dists") + 1].split(",") if lock.pip else []
    assert dists == [r.name for r in lock.pip], command[4:]


@needs_torch  # its torch child must import this venv's real torch
def test_the_probe_runs_as_source_isolated_from_the_submit_shell(tmp_path: Path, kb: KnowledgeBase) -> None:
    """As the node runs it (here, without srun): `python -I -c SOURCE`, no __file__, in a directory holding a
    json.py that would shadow the standard library's, with PYTHONPATH and PYTHONHOME pointing at junk: the
    probe prints its facts, and its torch child was isolated too (it did not import the junk torch)."""
    junk = tmp_path / "junk"
    junk.mkdir()
    (junk / "torch.py").write_text("raise SystemExit('the junk torch on PYTHONPATH was imported')\n")
    (tmp_path / "json.py").write_text("raise SystemExit('the json.py in the working directory was imported')\n")
    command = step.node_command(sys.prefix, kb, None, False)
    env = {**os.environ, "PYTHONPATH": str(junk), "PYTHONHOME": str(junk)}
    done = subprocess.run(
        [sys.executable, *command[1:]], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    facts = json.loads(done.stdout)
    assert facts["probe_version"] == 2 and facts["python"]["executable"] == sys.executable, done.stdout[:2000]
    # The child imported the environment's torch (this venv's CPU torch), not the junk one, and started at all
    # (a PYTHONHOME of junk stops a python that reads it before its first line).
    assert facts["torch"].get("version") and "error" not in facts["torch"], facts["torch"]


HOSTILE = ["/tmp/a b/p", "$(touch pwned)", "`touch pwned`", "'; touch pwned; '", "-p", "a\nb", "*"]


def test_hostile_values_reach_the_node_verbatim_and_run_nothing(tmp_path: Path, kb: KnowledgeBase) -> None:
    """The script after `sh -c` is run for real (here, without srun): what it runs is "$@", word for word."""
    command = ("printf", "<%s>\\n", *HOSTILE)
    argv = fanout.argv(("--partition=x",), ("n1",), 30, step.TIME_MIN, step.NAME, step.words(command))
    script_at = argv.index("-c") + 1
    assert argv[script_at] == step.SCRIPT and argv[script_at + 2 :] == command
    done = subprocess.run(["sh", *argv[script_at - 1 :]], capture_output=True, text=True, cwd=tmp_path, timeout=60)
    reply = read(kb, done.stdout)
    assert reply.started and reply.exit == 0
    assert reply.said == "\n".join(f"<{value}>" for value in HOSTILE)
    assert not (tmp_path / "pwned").exists()


def test_a_passing_node(kb: KnowledgeBase) -> None:
    reply = read(kb, captured("tesla-gpu04-pass"))
    assert reply.probe.node == "gpu04" and reply.probe.glibc is not None
    assert [r.name for r in reply.probe.gpus] == ["Tesla V100-SXM2-32GB"] * 2
    assert reply.exit == 0 and reply.facts is not None and reply.facts["probe_version"] == 2
    assert [c.id for c in reply.checks] == list(ONLY)
    assert {c.status for c in reply.checks} == {"pass", "warn"}, reply.checks
    assert reply.document is not None and reply.document["ok"] is True
    assert reply.document["target"] == {"python": f"{PREFIX}/bin/python", "prefix": PREFIX}
    assert reply.said == "" and step.trouble(reply, PREFIX) is None


def test_a_node_whose_checks_fail_is_a_report_not_trouble(kb: KnowledgeBase) -> None:
    reply = read(kb, captured("v100-gpu01-old-driver"))
    assert reply.exit == 0 and reply.probe.node == "gpu01"
    failed = {c.id: c for c in reply.checks if c.status == "fail"}
    assert set(failed) == {"driver_supports_torch_cuda", "host_vs_lock"}, reply.checks
    assert "older than the lock's floor 525.60.13" in failed["host_vs_lock"].detail
    assert reply.document is not None and reply.document["ok"] is False
    assert step.trouble(reply, PREFIX) is None


@pytest.mark.parametrize(
    ("name", "prefix", "message"),
    [
        ("h100-no-python", "/tmp/cv-lab/work/nope", "(exit 127: envsolver-verify: 11: {}: not found)"),
        ("h100-not-executable", "/tmp/cv-lab/work/noexec", "(exit 126: envsolver-verify: 11: {}: Permission denied)"),
    ],
)  # fmt: skip
def test_a_node_that_cannot_run_the_prefixs_python_says_why_with_the_fix(
    kb: KnowledgeBase, name: str, prefix: str, message: str
) -> None:
    reply = step.read(captured(name), prefix, lambda facts: pytest.fail(f"judged facts of a failed python: {facts}"))
    assert reply.checks == () and reply.facts is None
    said = step.trouble(reply, prefix)
    assert said is not None and f"gpu03 (x86_64) cannot run the environment's python {prefix}/bin/python" in said
    assert message.format(f"{prefix}/bin/python") in said and "every node mounts at the same path" in said, said
    assert said.endswith("then run the same command again."), said
    assert f"{prefix}/bin/python -I -c" in said, said  # the command to try by hand


@pytest.mark.parametrize(
    ("text", "phrase"),
    [
        ("", "printed no verify section"),
        ("srun: error: task 0 launch failed\n", "printed no verify section"),
        ('== envsolver-verify: begin\n{"ok": true, "checks": []}\n== envsolver-verify: exit 0\n', "printed no facts"),
        ('== envsolver-verify: begin\n{"probe_version": NaN}\n', "printed no facts"),
        ('== envsolver-verify: begin\n"probe_version"\n== envsolver-verify: exit 1\n', "(exit 1:"),
        ("== envsolver-verify: begin\n[1, 2]\nTraceback (most recent call last):\n", "Traceback"),
    ],
)
def test_output_that_holds_no_facts_is_trouble(kb: KnowledgeBase, text: str, phrase: str) -> None:
    reply = read(kb, text)
    said = step.trouble(reply, PREFIX)
    assert said is not None and phrase in said, said
    assert said.rstrip().endswith("then run the same command again."), said


def test_facts_of_any_shape_are_judged_without_raising(kb: KnowledgeBase) -> None:
    """Facts whose values are of the wrong types (a node's python is the user's): each check that cannot read
    them fails saying so; the reply is still read."""
    text = '== envsolver-verify: begin\n{"probe_version": 2, "driver": "x", "torch": [1], "python": 3}\n'
    reply = read(kb, text)
    assert [c.id for c in reply.checks] == list(ONLY), reply.checks
    assert step.trouble(reply, PREFIX) is None and reply.document is not None and reply.document["ok"] is False


def test_facts_amid_other_lines_are_found(kb: KnowledgeBase) -> None:
    facts = '{\n "probe_version": 2,\n "shm": {"bytes": 8589934592}\n}'
    text = f"== envsolver-verify: begin\nwarning: something\n{facts}\nmore noise\n== envsolver-verify: exit 0\n"
    reply = read(kb, text)
    assert reply.facts == {"probe_version": 2, "shm": {"bytes": 8589934592}}
    assert reply.said == "warning: something\nmore noise"


@pytest.mark.parametrize("noise", ["{\n", '{"a":\n', "{" * 40 + "\n"], ids=["open-brace", "open-key", "forty-braces"])
def test_reading_5_mb_of_lines_that_start_like_json_takes_seconds(noise: str) -> None:
    """Lines that start with `{` before the facts (as much as slurm.run keeps of a step's output): each try to
    decode one is bounded, and the facts after them are found. In a fresh process, stopped at 60 s: the reader
    used to copy the rest of the text for every such line (5 MB of `{` lines: hours)."""
    facts = '{\n "probe_version": 2,\n "shm": {"bytes": 8589934592}\n}'
    count = (5 << 20) // len(noise)
    script = (
        "import sys, time\nfrom envsolver.cluster import step\n"
        f"text = {step.MARK!r} + 'begin\\n' + {noise!r} * {count} + {facts!r} + '\\n' + {step.MARK!r} + 'exit 0\\n'\n"
        "started = time.monotonic()\n"
        "reply = step.read(text, '/p', lambda facts: [])\n"
        "print(sorted(reply.facts or {}), reply.exit, round(time.monotonic() - started, 2))\n"
    )
    try:
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False)
    except subprocess.TimeoutExpired:
        pytest.fail(f"step.read of {count} lines {noise!r} and the facts took more than 60 s")
    assert done.returncode == 0, done.stderr
    keys, exit_status, seconds = done.stdout.rsplit(" ", 2)
    assert (keys, exit_status) == ("['probe_version', 'shm']", "0"), done.stdout
    assert float(seconds) < 15, done.stdout


@pytest.mark.parametrize("noise", ["{", '{"a":', "x"], ids=["open-brace", "open-key", "letter"])
def test_5_mb_of_short_lines_from_a_node_are_read_in_a_few_times_their_size(noise: str) -> None:
    """fanout.split and step.read keep offsets and one buffer per task, not a list per line: 5 MB of `0: {` lines
    (what slurm.run keeps of a step's output) took 208 MB before (176 MB over the text, measured the same way);
    now about 11-21 MB over it. In a fresh process, its peak RSS measured around the read."""
    facts = '{\n "probe_version": 2,\n "shm": {"bytes": 8589934592}\n}'
    script = (
        "import resource\nfrom envsolver.cluster import fanout, step\n"
        f"lines = [step.MARK + 'begin'] + [{noise!r}] * {(5 << 20) // (len(noise) + 4)}\n"
        f"lines += {facts!r}.split('\\n') + [step.MARK + 'exit 0']\n"
        "text = ''.join(f'0: {line}\\n' for line in lines)\n"
        "del lines\n"
        "import gc; gc.collect()\n"
        "before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        "texts, _ = fanout.split(text)\n"
        "reply = step.read(texts[0], '/p', lambda facts: [])\n"
        "grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before\n"
        "print(sorted(reply.facts or {}), reply.exit, len(text), grown // 1024)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    keys, exit_status, size, grown = done.stdout.rsplit(" ", 3)
    assert (keys, exit_status) == ("['probe_version', 'shm']", "0"), done.stdout
    assert int(size) > 5_000_000 and int(grown) < 60, f"{grown.strip()} MB more to read {size} characters"


def _old_split(text: str) -> tuple[dict[int, str], str]:
    """fanout.split as it was, a list per line: what the new one must give."""
    parts: dict[int, list[list[str]]] = {}
    sizes: dict[int, int] = {}
    cut: set[int] = set()
    stray: list[str] = []
    for line in text.split("\n"):
        match = fanout._LABEL.match(line)
        if match is None:
            if line:
                stray.append(line)
            continue
        task = int(match.group(1))
        payload = line[match.end() :]
        lines = parts.setdefault(task, [])
        if sizes.get(task, 0) < fanout.MAX_TASK_TEXT:
            if task in cut and lines:
                lines[-1].append(payload)
            else:
                lines.append([payload])
            sizes[task] = sizes.get(task, 0) + len(payload) + 1
        if len(payload.encode("utf-8", "surrogatepass")) >= fanout.CHUNK:
            cut.add(task)
        else:
            cut.discard(task)
    texts = {task: "\n".join("".join(chunks) for chunks in lines) for task, lines in sorted(parts.items())}
    return texts, "\n".join(stray)


_LINE = st.one_of(
    st.builds(lambda task, text: f"{task}: {text}", st.integers(0, 3), st.text(st.sampled_from("a{}\r é"), max_size=9)),
    st.builds(lambda task, n: f"{task}: " + "x" * n, st.integers(0, 2), st.sampled_from([1023, 1024, 1030])),
    st.text(st.sampled_from("ab: 0\r"), max_size=6),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(_LINE, max_size=20), st.booleans())
def test_split_gives_what_the_list_per_line_split_gave(lines: list[str], newline_at_end: bool) -> None:
    text = "\n".join(lines) + ("\n" if newline_at_end else "")
    assert fanout.split(text) == _old_split(text), text


def _old_read(text: str) -> tuple[bool, int | None, object, str]:
    """step.read as it was, over lists of lines: (started, exit, facts, said)."""
    lines = text.splitlines()
    begin = next((i for i, line in enumerate(lines) if line.rstrip() == f"{step.MARK}begin"), None)
    if begin is None:
        return False, None, None, step._trim(text)
    section = lines[begin + 1 :]
    status = None
    for i in range(len(section) - 1, -1, -1):
        match = step._EXIT.fullmatch(section[i].rstrip())
        if match:
            status, section = int(match.group(1)), section[:i]
            break
    decoder = json.JSONDecoder()
    starts, at = [], 0
    for i, line in enumerate(section):
        if line.startswith("{"):
            starts.append((i, at))
        at += len(line) + 1
    joined = "\n".join(section)
    for i, here in reversed(starts[-step.MAX_TRIES :]):
        try:
            doc, end = decoder.raw_decode(joined[here : here + step.MAX_REPORT])
        except ValueError:
            continue
        if isinstance(doc, dict) and "probe_version" in doc:
            after = joined[here + end :].split("\n")
            rest = [*section[:i], *(line for line in after if line.strip())]
            return True, status, doc, step._trim("\n".join(rest))
    return True, status, None, step._trim("\n".join(section))


_NODE_LINE = st.sampled_from(
    [f"{step.MARK}begin", f"{step.MARK}exit 0", f"{step.MARK}exit 3", "{", "}", '{"probe_version": 1}',
     '{"probe_version": 2, "a": [1,', '2]}', "noise", "", "  ", f"{step.MARK}node n1"]
)  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(st.lists(_NODE_LINE, max_size=14))
def test_read_gives_what_the_list_of_lines_read_gave(lines: list[str]) -> None:
    text = "\n".join(lines) + "\n"
    reply = step.read(text, "/p", lambda facts: [])
    assert (reply.started, reply.exit, reply.facts, reply.said) == _old_read(text), text
