"""`envsolver gpus` (issue 13): rich lays the table out on a terminal only; a pipe gets plain aligned columns
(the same columns and cells), parsed back here; --json is not affected."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys

from click.testing import CliRunner

from envsolver import render
from envsolver.cli import main
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
    leader, follower = pty.openpty()
    env = {**os.environ, "COLUMNS": "400", "LINES": "50", "TERM": "xterm"}
    env.pop("NO_COLOR", None)
    child = subprocess.Popen(
        [sys.executable, "-m", "envsolver", "gpus"], stdout=follower, stderr=subprocess.PIPE, env=env
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
    assert child.wait(timeout=120) == 0
    out = b"".join(chunks).decode("utf-8", "replace")
    assert "GPUs in the knowledge base" in out and "┃" in out
    assert all(g.key in out for g in default_kb().gpus)
