"""`envsolver gpus` (issue 13): rich lays the table out on a terminal only; a pipe gets plain aligned columns
(the same columns and cells), parsed back here; --json is not affected."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys

import pytest
from click.testing import CliRunner

from envsolver.cli import render
from envsolver.cli.main import main
from envsolver.kb import default_kb


def parse_plain(text: str) -> tuple[list[str], list[list[str]]]:
    """Columns start where their header does: each cell is the text between two starts, stripped."""
    lines = text.splitlines()
    header = lines[0]
    assert header.startswith(" key ")  # one space of padding before the first column, as rich pads a cell
    starts = [i for i, ch in enumerate(header) if ch != " " and (i == 1 or header[i - 2 : i] == "  ")]
    bounds = list(zip(starts, [*starts[1:], None], strict=True))
    cells = [[line[a:b].strip() for a, b in bounds] for line in lines]
    return cells[0], cells[1:]


def test_on_a_pipe_gpus_prints_a_plain_table_with_every_cell() -> None:
    result = CliRunner().invoke(main, ["gpus"])
    assert result.exit_code == 0, result.output
    assert "┃" not in result.stdout and "GPUs in the knowledge base" not in result.stdout
    header, rows = parse_plain(result.stdout)
    assert tuple(header) == render.GPU_COLUMNS
    expected = [list(cells) for cells in render.gpu_cells(default_kb().gpus)]
    assert rows == expected
    assert len(rows) == len(default_kb().gpus) > 100
    assert all(line == line.rstrip() and line.startswith(" ") for line in result.stdout.splitlines())


def test_the_plain_table_agrees_with_the_json() -> None:
    runner = CliRunner()
    _, rows = parse_plain(runner.invoke(main, ["gpus"]).stdout)
    doc = json.loads(runner.invoke(main, ["gpus", "--json"]).stdout)
    by_key = {row[0]: row for row in rows}
    assert set(by_key) == {d["key"] for d in doc}
    for d in doc:
        row = by_key[d["key"]]
        assert row[1] == d["name"] and row[3] == d["compute_capability"] and row[4] == d["architecture"]
        assert row[8] == d["platform"]
        assert row[6] == {True: "yes", False: "no", None: "?"}[d["bf16"]]
        aliases = [a for a in row[2].split(", ") if a]
        assert set(aliases) == set(d["aliases"]) - {d["key"], d["name"]}  # the table leaves out key and name


def test_gpus_json_is_the_rows_of_the_kb() -> None:
    result = CliRunner().invoke(main, ["gpus", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == render.gpu_rows(default_kb().gpus)


def test_on_a_terminal_gpus_is_laid_out_by_rich() -> None:
    code, out, err = on_a_terminal(400)
    assert code == 0, err
    assert "GPUs in the knowledge base" in out and "┃" in out, out[:2000]
    assert all(g.key in out for g in default_kb().gpus), out[:2000]


def on_a_terminal(columns: int, *args: str) -> tuple[int, str, str]:
    """`envsolver gpus ARGS` in a real subprocess on a pseudo-terminal COLUMNS wide: exit code, what the
    terminal showed (escape sequences removed) and stderr."""
    import re

    leader, follower = pty.openpty()
    env = {**os.environ, "COLUMNS": str(columns), "LINES": "50", "TERM": "xterm"}
    child = subprocess.Popen(
        [sys.executable, "-m", "envsolver", "gpus", *args], stdout=follower, stderr=subprocess.PIPE, env=env
    )
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO: the child closed its end
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    code = child.wait(timeout=120)
    assert child.stderr is not None
    err = child.stderr.read().decode("utf-8", "replace")
    out = re.sub(r"\x1b\[[0-9;]*m", "", b"".join(chunks).decode("utf-8", "replace")).replace("\r\n", "\n")
    return code, out, err


@pytest.mark.parametrize("columns", [80, 100])
def test_on_a_narrow_terminal_every_key_is_whole(columns: int) -> None:
    """Issue 22: at 80-100 columns rich cut the key column ("quadro...", "gtx105..."), the name users type. Now
    no cell is cut: the key column is as wide as the longest key, other columns wrap or are left out (the title
    names them), and every line fits the terminal."""
    code, out, err = on_a_terminal(columns)
    assert code == 0, err
    assert "…" not in out, out[:2000]
    rows = [line for line in out.splitlines() if line.startswith("│")]
    firsts = [line.split("│")[1].strip() for line in rows]
    assert [k for k in firsts if k] == [row[0] for row in render.gpu_cells(default_kb().gpus)], out[:2000]
    assert all(len(line) <= columns for line in out.splitlines() if line[:1] in "│┏┡└┃"), out[:2000]
    assert "left out to fit" in out.splitlines()[0] and "--json" in out.splitlines()[0], out[:400]


def test_the_widths_fit_every_terminal_and_never_narrow_the_key() -> None:
    cells = render.gpu_cells(default_kb().gpus)
    longest = max(len(row[0]) for row in cells)
    for width in range(20, 400):
        widths = render.gpu_widths(cells, width)
        if widths is None:  # the plain lines, for the terminal to fold
            assert width < longest + 4 + 7, width
            continue
        assert 3 * len(widths) + 1 + sum(widths.values()) <= width, (width, widths)
        assert widths["key"] == longest and "CC" in widths, (width, widths)
    assert list(render.gpu_widths(cells, 400) or {}) == list(render.GPU_COLUMNS)


def _named(word: str) -> list[str]:
    return [g.key for g in default_kb().gpus if any(word in n.lower().replace(" ", "") for n in g.all_names)]


def test_gpus_filters_by_words_in_text_and_json() -> None:
    expected = _named("4090")
    assert "rtx4090" in expected and len(expected) < 10
    result = CliRunner().invoke(main, ["gpus", "4090"])
    assert result.exit_code == 0, result.output
    _, rows = parse_plain(result.stdout)
    assert [row[0] for row in rows] == [k for k in (r[0] for r in render.gpu_cells(default_kb().gpus)) if k in expected]
    doc = json.loads(CliRunner().invoke(main, ["gpus", "4090", "--json"]).stdout)
    assert sorted(d["key"] for d in doc) == sorted(expected), doc
    words = json.loads(CliRunner().invoke(main, ["gpus", "RTX", "4090", "--json"]).stdout)
    assert sorted(d["key"] for d in words) == sorted(expected), words
    code, out, err = on_a_terminal(100, "4090")
    assert code == 0 and all(k in out for k in expected) and "rtx3090" not in out, (out, err)


def test_gpus_without_a_match_names_the_closest_keys_and_the_fix_works() -> None:
    result = CliRunner().invoke(main, ["gpus", "rtx9090"])
    assert result.exit_code == 2 and result.stdout == "", result.output
    assert "no GPU in the knowledge base matches 'rtx9090'" in result.stderr, result.stderr
    keys = {g.key for g in default_kb().gpus}
    named = result.stderr.split("Closest keys: ")[1].split(".")[0].split(", ")
    assert named and set(named) <= keys, result.stderr
    fix = result.stderr.split("Run `")[1].split("`")[0].split()
    assert fix[:2] == ["envsolver", "gpus"], result.stderr
    again = CliRunner().invoke(main, fix[1:])
    assert again.exit_code == 0 and fix[2] in again.stdout, again.output
    doc = json.loads(CliRunner().invoke(main, ["gpus", "rtx9090", "--json"]).stdout)
    assert doc["ok"] is False and doc["exit_code"] == 2 and "envsolver gpus" in doc["error"]["fix"], doc
