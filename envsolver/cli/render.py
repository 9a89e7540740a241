"""Terminal rendering with rich: the consoles, the plan for `explain`, what `make` wrote, the GPU table for
`gpus`. Printing only. Values are never read as markup or emoji codes: they are escaped, or printed with markup
and emoji off; and every control character in them is spelled out (printable.py), so text from outside (a node, a
server, nvidia-smi) never reaches the terminal raw. Each printer here takes one line: a newline is spelled out too.

On a terminal rich styles the output; where the stream is not a terminal (a pipe, a file) `out()` gives a
`Plain` writer instead, which prints the same text without importing rich (rich prints no style there either),
and `gpu_table` prints plain aligned columns. rich is imported only by the functions that use it."""

from __future__ import annotations

import contextlib
import io
import os
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, cast

from envsolver.core.printable import printable
from envsolver.core.redact import redact
from envsolver.lock import howto

if TYPE_CHECKING:  # annotations only: explain and gpus need neither the locker nor rich's status
    from rich.console import Console
    from rich.status import Status

    from envsolver.kb.model import Gpu
    from envsolver.lock.run import LockResult
    from envsolver.lock.writers.files import Outcome
    from envsolver.resolve.plan import Plan

# The width of a console that is not a terminal: wide enough that no table column is squeezed.
UNLIMITED = 100_000


def console(stderr: bool = False) -> Console:
    """A console that never wraps a line: text is soft-wrapped (a long path, URL or command stays whole on one
    line, for the terminal to fold and for copying), and a pipe or a file gets no width limit, so a table is not
    squeezed to 80 columns. stdout is for results, stderr (`stderr=True`) for warnings and progress. No emoji
    codes: `:warning:` in a value prints as it is."""
    from rich.console import Console

    out = Console(stderr=stderr, soft_wrap=True, emoji=False)
    if not out.is_terminal:
        out.width = UNLIMITED
    return out


class Plain:
    """Lines as they are, for a stream that is not a terminal: what rich prints there, without rich (control
    characters spelled out, as everywhere)."""

    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream

    def line(self, segments: Iterable[tuple[str, str]]) -> None:
        self.stream.write(printable("".join(piece for piece, _ in segments)) + "\n")
        self.stream.flush()


def is_terminal(stream: IO[str]) -> bool:
    """Whether rich would treat `stream` as a terminal: TTY_COMPATIBLE=1/0 and FORCE_COLOR (non-empty) decide
    first, as in rich; else isatty()."""
    compatible = os.environ.get("TTY_COMPATIBLE", "")
    if compatible in ("0", "1"):
        return compatible == "1"
    force = os.environ.get("FORCE_COLOR")
    if force is not None:
        return force != ""
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def out(stderr: bool = False) -> Console | Plain:
    """stdout's (or stderr's) printer: a rich console() on a terminal, else Plain."""
    stream = sys.stderr if stderr else sys.stdout
    return console(stderr) if is_terminal(stream) else Plain(stream)


def _line(out: Console | Plain, segments: list[tuple[str, str]], highlight: bool = True) -> None:
    """One line of (text, style) segments: styled by rich on a console (each text escaped, so it is never
    markup), as it is on Plain; control characters spelled out on both."""
    if isinstance(out, Plain):
        out.line(segments)
        return
    from rich.markup import escape

    out.print(
        "".join(
            f"[{style}]{escape(printable(piece))}[/]" if style else escape(printable(piece))
            for piece, style in segments
        ),
        highlight=highlight,
        emoji=False,
    )


def text(out: Console | Plain, line: str) -> None:
    """Print a line as it is: no markup, no highlighting, control characters spelled out."""
    if isinstance(out, Plain):
        out.line([(line, "")])
        return
    out.print(printable(line), markup=False, highlight=False, emoji=False)


def progress(status: Status) -> Callable[[str], None]:
    """The callback that shows a progress message on the spinner's line, as it is (a path is not markup; a
    control character is spelled out)."""
    from rich.text import Text

    return lambda message: status.update(Text(printable(message)))


@contextlib.contextmanager
def spinner(out: Console | Plain, label: str) -> Iterator[Callable[[str], None]]:
    """A spinner with `label` on a terminal, for the time of the block; the block gets the callback that shows a
    progress message on it. Plain shows nothing (rich's status shows nothing off a terminal either)."""
    if isinstance(out, Plain):
        yield lambda _: None
        return
    with out.status(label, spinner="dots") as status:
        yield progress(status)


def warnings(err: Console | Plain, found: Iterable[str]) -> None:
    for w in found:
        _line(err, [("warning", "yellow"), (f": {w}", "")], highlight=False)


def _yes(value: bool | None) -> str:
    return "?" if value is None else ("yes" if value else "no")


def _other_names(g: Gpu) -> list[str]:
    """The names besides key and display name that `--gpu` accepts: aliases, then what nvidia-smi prints."""
    return [n for n in dict.fromkeys((*g.aliases, *g.smi_names)) if n not in (g.key, g.name)]


def gpu_rows(gpus: tuple[Gpu, ...]) -> list[dict[str, object]]:
    """The GPU table as JSON: every column `gpu_table` shows. `aliases` holds the key, the aliases and the names
    nvidia-smi prints; with `name`, every name `--gpu` accepts."""
    return [
        {
            "key": g.key,
            "name": g.name,
            "aliases": list(dict.fromkeys((g.key, *g.aliases, *g.smi_names))),
            "compute_capability": str(g.compute_capability),
            "architecture": g.architecture,
            "memory_gb": list(g.memory_gb) if g.memory_gb is not None else None,
            "bf16": g.bf16,
            "fp8": g.fp8,
            "platform": g.platform,
        }
        for g in gpus
    ]


GPU_COLUMNS = ("key", "name", "aliases", "CC", "architecture", "memory (GB)", "bf16", "fp8", "platform")
GAP = "  "  # between the columns of the plain table


def gpu_cells(gpus: tuple[Gpu, ...]) -> list[tuple[str, ...]]:
    """The GPU table's rows, one cell per GPU_COLUMNS entry, by compute capability then key."""
    rows: list[tuple[str, ...]] = []
    for g in sorted(gpus, key=lambda g: (g.compute_capability, g.key)):
        memory = "/".join(str(m) for m in g.memory_gb) if g.memory_gb else "?"
        aliases = ", ".join(_other_names(g))
        rows.append(
            (
                g.key,
                g.name,
                aliases,
                str(g.compute_capability),
                g.architecture,
                memory,
                _yes(g.bf16),
                _yes(g.fp8),
                g.platform or "?",
            )
        )
    return rows


def gpu_table(out: Console | IO[str], gpus: tuple[Gpu, ...]) -> None:
    """The GPU table: laid out by rich on a console (a terminal), or as plain aligned text on a stream (a pipe
    or a file): a header line, then one line per GPU, each column starting where its header does (plain_table)."""
    cells = [tuple(printable(cell) for cell in row) for row in gpu_cells(gpus)]
    if isinstance(out, io.IOBase):  # a stream: no rich import
        cast("IO[str]", out).write(plain_table(GPU_COLUMNS, cells))
        return
    from rich.markup import escape
    from rich.table import Table

    console = cast("Console", out)
    widths = gpu_widths(cells, console.width)
    if widths is None:  # too narrow for a box even around key and CC: the plain lines, for the terminal to fold
        console.file.write(plain_table(GPU_COLUMNS, cells))
        return
    title = "GPUs in the knowledge base"
    left_out = [c for c in GPU_COLUMNS if c not in widths]
    if left_out:
        title += f" ({', '.join(left_out)} left out to fit {console.width} columns: `envsolver gpus --json` has all)"
    table = Table(title=title, show_lines=False)
    shown = [i for i, c in enumerate(GPU_COLUMNS) if c in widths]
    for i in shown:
        # Every column is as wide as its widest cell, but name and aliases, which wrap (folding a long word, never
        # cutting it with an ellipsis): no cell a user types is ever cut.
        table.add_column(GPU_COLUMNS[i], width=widths[GPU_COLUMNS[i]], overflow="fold")
    for row in cells:
        table.add_row(*(escape(row[i]) for i in shown))
    console.print(table)


# The columns left out, in this order, when the terminal is too narrow for every column at its width; key and CC
# always stay. The narrowest widths name and aliases wrap to.
GPU_DROP_ORDER = ("aliases", "platform", "architecture", "memory (GB)", "fp8", "bf16", "name")
WRAPPED_MIN = {"name": 10, "aliases": 12}


def gpu_widths(cells: list[tuple[str, ...]], width: int) -> dict[str, int] | None:
    """The GPU table's columns on a terminal `width` wide, each with its width (a box table spends 3 characters
    a column and 1 more on borders and padding). A column that does not wrap is as wide as its widest cell (and
    its header's longest word); name and aliases share what is left, and columns are left out (GPU_DROP_ORDER)
    until that is at least WRAPPED_MIN. None when even key and CC do not fit."""
    natural = {
        column: max([len(row[i]) for row in cells] + [max(len(w) for w in column.split())])
        for i, column in enumerate(GPU_COLUMNS)
    }
    kept = list(GPU_COLUMNS)
    dropping = list(GPU_DROP_ORDER)

    def needed() -> int:
        return 3 * len(kept) + 1 + sum(WRAPPED_MIN.get(c, natural[c]) for c in kept)

    while needed() > width and dropping:
        kept.remove(dropping.pop(0))
    if needed() > width:
        return None
    widths = {c: natural[c] for c in kept if c not in WRAPPED_MIN}
    room = width - 3 * len(kept) - 1 - sum(widths.values())
    wrapped = [c for c in kept if c in WRAPPED_MIN]
    for n, column in enumerate(wrapped):
        rest = sum(WRAPPED_MIN[c] for c in wrapped[n + 1 :])  # kept for the wrapped columns after this one
        widths[column] = max(WRAPPED_MIN[column], min(natural[column], room - rest))
        room -= widths[column]
    return {c: widths[c] for c in kept}


def plain_table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> str:
    """rich's layout of a table without a box: each cell padded by one space on either side (so a line starts
    with one space and GAP separates the columns), each column as wide as its widest cell, lines without
    trailing spaces."""
    widths = [max(len(cell) for cell in column) for column in zip(header, *rows, strict=True)]
    lines = [
        (" " + GAP.join(cell.ljust(width) for cell, width in zip(line, widths, strict=True))).rstrip()
        for line in (header, *rows)
    ]
    return "".join(f"{line}\n" for line in lines)


def plan(out: Console | Plain, p: Plan, detected: dict[str, str]) -> None:
    """The plan, without its warnings (they are diagnostics: `warnings` prints them on stderr)."""
    gpus = ", ".join(f"{g.name} (sm_{g.compute_capability.sm})" for g in p.gpus)
    _line(out, [("Target", "bold"), (f": {gpus}; driver {p.driver or 'not given'}; {p.platform}", "")])
    for value, origin in detected.items():
        text(out, f"  detected {value} (from {origin})")
    _line(
        out,
        [
            ("Stack", "bold"),
            (
                f": torch {p.torch_version} (CUDA {p.torch_cuda} build) + CUDA {p.cuda_version} toolkit, Python "
                f"{p.python_version}, source {p.source}; compatibility ",
                "",
            ),
            (str(p.compatibility), "bold"),
        ],
    )
    if p.snapshot_date:
        locks = "the plan `envsolver make --offline` locks"
        text(out, f"Planned within the bundled snapshot of {p.snapshot_date}: {locks}.")
    _line(out, [("TORCH_CUDA_ARCH_LIST", "bold"), (f"={p.torch_cuda_arch_list}", "")])
    _line(out, [("Channels", "bold"), (f": {', '.join(p.channels)}", "")])
    _line(out, [("Specs", "bold"), (": " + "  ".join(str(s) for s in p.specs), "")])
    if p.pip:
        _line(out, [("pip", "bold"), (": " + "  ".join(p.pip), "")])
    project(out, p)
    virtual = "  ".join(f"{k}={v}" for k, v in p.virtual_packages.items())
    _line(out, [("Virtual packages", "bold"), (f": {virtual}", "")])
    _line(out, [("Decisions", "bold"), (":", "")])
    for r in p.reasons:
        _line(out, [("  - ", ""), (r.decision, "bold"), (f": {r.because}", "")], highlight=False)
        _line(out, [("      ", ""), (f"source: {', '.join(r.source)}", "dim")], highlight=False)
    if p.rejected:
        _line(out, [("Rejected newer candidates", "bold"), (":", "")])
        for rej in p.rejected:
            text(out, f"  - {rej.candidate}: {rej.because}")


def project(out: Console | Plain, p: Plan) -> None:
    """The user's project as the plan takes it: its conda specs and PyPI requirements, each with its origin."""
    if p.project.conda:
        specs = "  ".join(f"{w.spec} ({w.origin})" for w in p.project.conda)
        _line(out, [("Project conda", "bold"), (f": {specs}", "")], highlight=False)
    if p.project.pip:
        reqs = "  ".join(f"{w.text} ({w.origin})" for w in p.project.pip)
        _line(out, [("Project pip", "bold"), (f": {reqs}", "")], highlight=False)
    if p.project.channels:
        _line(out, [("Project channels", "bold"), (f": {', '.join(p.project.channels)}", "")])


def pypi_json(locked: LockResult | None) -> dict[str, Any]:
    """explain --offline's PyPI part of a project, for --json: {"pypi": {files, sdists, index}}; {} without one."""
    if locked is None:
        return {}
    files = [
        {"name": r.name, "version": r.version, "file": r.filename} for r in locked.pip.get(locked.plan.platform, ())
    ]
    return {"pypi": {"files": files, "sdists": list(locked.pip_sdists), "index": locked.pip_index}}


def pypi_part(out: Console | Plain, locked: LockResult | None) -> None:
    """explain --offline's PyPI part of a project: the files it takes, and which are sdists (no wheel fits)."""
    part = pypi_json(locked).get("pypi")
    if not part:
        return
    files = "  ".join(f"{f['name']} {f['version']}" for f in part["files"])
    _line(out, [("PyPI part", "bold"), (f" ({part['index']}): {files or 'nothing'}", "")], highlight=False)
    if part["sdists"]:
        _line(out, [("  sdists", "bold"), (f" (no wheel fits the target): {', '.join(part['sdists'])}", "")])


def made(
    out: Console | Plain,
    written: Mapping[Path, Outcome],
    p: Plan,
    locked: LockResult | None,
    out_dir: Path,
    name: str | None,
) -> None:
    """What `make` wrote, the stack, and the command that creates the environment (its words shell-quoted)."""
    from envsolver.lock.writers.environment import default_name

    for path, outcome in written.items():
        text(out, f"{path}: {outcome.value}")
    text(
        out,
        f"torch {p.torch_version} (CUDA {p.torch_cuda} build), CUDA {p.cuda_version}, Python {p.python_version}, "
        f"TORCH_CUDA_ARCH_LIST={p.torch_cuda_arch_list}",
    )
    env_name = name or default_name(p)
    if locked is None:
        text(out, f"Create it with: {howto.environment_steps(str(out_dir / 'environment.yml'), env_name)}")
        text(out, f"  ({howto.HOOK_WHY})")
        return
    where = (
        f"the bundled snapshot of {locked.snapshot_date}" if locked.used == "snapshot" else ", ".join(locked.channels)
    )
    text(out, f"locked {sum(len(r) for r in locked.records.values())} packages against {where}")
    pip = [r for records in locked.pip.values() for r in records]
    if 0 < len(pip) <= 3:
        files = ", ".join(f"{r.name} {r.version} ({r.filename}, sha256 {r.sha256[:12]}…)" for r in pip)
        text(out, f"and from PyPI ({locked.pip_index}): {files}")
    elif pip:
        releases = ", ".join(f"{r.name} {r.version}" for r in pip)
        text(out, f"and {len(pip)} files from PyPI ({locked.pip_index}; each by its sha256): {releases}")
    if locked.pip_sdists:
        text(
            out,
            f"  of them sdists (no wheel fits {p.platform} Python {p.python_version}; `envsolver install` builds them "
            f"with the env's own python): {', '.join(locked.pip_sdists)}",
        )
    envsolver_way, conda_lock_way = howto.conda_lock_steps(str(out_dir / "conda-lock.yml"), env_name)
    text(out, f"Create it with: {envsolver_way}")
    text(out, f"            or: {conda_lock_way}")
    text(out, f"  ({howto.HOOK_WHY})")


def made_json(written: Mapping[Path, Outcome], p: Plan, locked: LockResult | None) -> dict[str, Any]:
    doc: dict[str, Any] = {"ok": True, "files": {str(f): o.value for f, o in written.items()}, "plan": p.to_json()}
    if locked is not None:
        doc["lock"] = {
            "channels": list(locked.channels),
            "used": locked.used,
            "snapshot_date": locked.snapshot_date,
            "packages": {platform: len(r) for platform, r in locked.records.items()},
            "pip": {
                platform: [{"name": r.name, "version": r.version, "url": redact(r.url), "sha256": r.sha256} for r in rs]
                for platform, rs in locked.pip.items()
            },
            "pip_index": locked.pip_index,
            "pip_sdists": list(locked.pip_sdists),
            "warnings": list(locked.warnings),
        }
    return doc
