#!/usr/bin/env python3
"""Check the knowledge base against channel records, or derive the row keys the records determine.

    python scripts/kb_audit.py                                   # against the bundled snapshot (partial data)
    python scripts/kb_audit.py --repodata conda-forge=DIR        # DIR/<subdir>/repodata.json, e.g. a download
    python scripts/kb_audit.py --repodata conda-forge=linux-64/repodata.json --repodata pytorch=pt/linux-64
    python scripts/kb_audit.py ... --partial                     # the data holds a subset of the channel
    python scripts/kb_audit.py ... --derive                      # print the rows the records determine, as YAML
    python scripts/kb_audit.py --upstream tests/data/kb_audit/upstream.json   # recorded PyPI/wheel/sdist facts
    python scripts/kb_audit.py --live [--record FILE] [--cache DIR]           # read PyPI, the wheels, the sdists now
    python scripts/kb_audit.py --driver-table README.md   # NVIDIA's driver table against pci_devices.yaml

Prints the diff ('-' what the KB says, '+' what the records say) and exits 0 when the KB agrees with the data,
1 when it contradicts it, 2 on bad input (unreadable repodata or recording, an invalid KB, a source that cannot
be read) and 130 on Ctrl-C. --json prints one JSON document instead. What counts as a contradiction:
envsolver/kb/audit.py (conda records), envsolver/kb/upstream/compare.py (--upstream, --live),
envsolver/kb/upstream/drivertable.py (--driver-table: each row added, removed or renamed).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from envsolver.core.errors import (
    INTERRUPTED,
    INTERRUPTED_EXIT,
    INTERRUPTED_FIX,
    BadInputError,
    EnvsolverError,
    Kind,
    failure,
    split_fix,
)
from envsolver.core.printable import printable
from envsolver.kb import load_kb
from envsolver.kb.audit import audit
from envsolver.kb.derive import as_yaml, derive
from envsolver.kb.findings import diff, render, to_json
from envsolver.kb.repodata import RepoData, combine, read_channel
from envsolver.kb.upstream import collect, drivertable
from envsolver.kb.upstream import facts as upstream_facts
from envsolver.kb.upstream import render as upstream_render
from envsolver.kb.upstream.collect import CACHE_ENV
from envsolver.kb.upstream.compare import compare
from envsolver.lock.snapshot import snapshot_data

FIX_USAGE = "Run `python scripts/kb_audit.py --help` to see the options."


class UsageError(Exception):
    """The command line itself is wrong (exit 2)."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message}. {FIX_USAGE}")


def parser() -> argparse.ArgumentParser:
    p = _Parser(prog="kb_audit.py", description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--repodata",
        action="append",
        default=[],
        metavar="CHANNEL=PATH",
        help="a channel's records: a repodata.json (or .json.bz2), a subdir folder, or a channel folder with "
        "<subdir>/repodata.json (repeatable); default: the bundled snapshot",
    )
    p.add_argument("--partial", action="store_true", help="the --repodata data holds only a subset of the channel")
    p.add_argument("--kb", type=Path, metavar="DIR", help="a knowledge base data folder (default: envsolver's)")
    p.add_argument("--derive", action="store_true", help="print the row keys the records determine, as YAML")
    p.add_argument("--quiet", action="store_true", help="leave the notes out of the diff (they are still counted)")
    p.add_argument("--json", dest="as_json", action="store_true", help="one JSON document on stdout")
    up = p.add_mutually_exclusive_group()
    up.add_argument(
        "--upstream",
        type=Path,
        metavar="FILE",
        help="compare the KB with recorded upstream facts (PyPI, nvcc wheels, DeepSpeed sdists) instead of records",
    )
    up.add_argument(
        "--live",
        action="store_true",
        help="read PyPI's torch, deepspeed and NVIDIA CUDA indexes, torch's wheel metadata, DeepSpeed's sdists and "
        "every nvcc wheel now and compare the KB with them",
    )
    up.add_argument(
        "--driver-table",
        type=Path,
        metavar="README",
        help="compare pci_devices.yaml with the 'Compatible GPUs' table of NVIDIA/open-gpu-kernel-modules' "
        "README.md (a saved copy: GitHub is not reachable from every machine), row by row",
    )
    p.add_argument("--record", type=Path, metavar="FILE", help="with --live: write what was read (the CI recording)")
    p.add_argument(
        "--cache",
        type=Path,
        metavar="DIR",
        help=f"with --live: where DeepSpeed's sdists are kept (default ${CACHE_ENV}, else ~/.cache/envsolver-kb-audit)",
    )
    return p


def _data(specs: Sequence[str], partial: bool) -> RepoData:
    if not specs:
        return snapshot_data()
    parts = []
    for spec in specs:
        channel, sep, path = spec.partition("=")
        if not sep or not channel.strip() or not path:
            raise UsageError(
                f"--repodata {spec!r}: expected CHANNEL=PATH, e.g. conda-forge=linux-64/repodata.json. {FIX_USAGE}"
            )
        parts.append(read_channel(channel.strip(), Path(path), complete=not partial))
    return combine(parts)


def run(args: argparse.Namespace) -> int:
    if args.driver_table is not None:
        return _driver_table(args)
    if args.live or args.upstream is not None:
        return _upstream(args)
    if args.record is not None or args.cache is not None:
        raise UsageError(f"--record and --cache go with --live. {FIX_USAGE}")
    kb = load_kb(args.kb) if args.kb is not None else load_kb()
    data = _data(args.repodata, args.partial)
    if args.derive:
        rows = derive(kb, data)
        if args.as_json:
            doc = {
                "ok": True,
                "exit_code": 0,
                "data": data.name,
                "rows": [{"table": r.table, **r.as_dict()} for r in rows],
            }
            print(json.dumps(doc, indent=2))
        else:
            kind = "complete data" if data.complete == data.present else "partial data: only the builds it holds"
            print("\n".join(as_yaml(rows, f"Derived from {data.name}, {kind}.\nPaste into envsolver/kb/data/.")))
        return 0
    report = audit(kb, data)
    if args.as_json:
        print(json.dumps(to_json(report), indent=2))
    else:
        print("\n".join(render(report, notes=not args.quiet)))
    return 0 if report.ok else 1


def _upstream(args: argparse.Namespace) -> int:
    if args.repodata or args.derive or args.partial:
        raise UsageError(f"--upstream and --live compare PyPI's facts, not conda records (no --repodata). {FIX_USAGE}")
    if args.upstream is not None:
        if args.record is not None or args.cache is not None:
            raise UsageError(f"--record and --cache go with --live. {FIX_USAGE}")
        try:
            facts = upstream_facts.load(args.upstream)
        except ValueError as exc:
            raise BadInputError(
                f"{printable(str(exc))}. Record it again: python scripts/kb_audit.py --live --record "
                f"{shlex.quote(str(args.upstream))}"
            ) from None
    kb = load_kb(args.kb) if args.kb is not None else load_kb()
    if args.upstream is None:
        cache = args.cache if args.cache is not None else collect.cache_dir(os.environ)
        facts = collect.collect(kb, cache, progress=lambda text: print(printable(text), file=sys.stderr))
        if args.record is not None:
            upstream_facts.dump(facts, args.record)
            print(f"recorded what was read in {str(args.record)!r}", file=sys.stderr)
    report = compare(kb, facts)
    if args.as_json:
        print(json.dumps(upstream_render.as_json(report, facts), indent=2))
    else:
        print("\n".join(upstream_render.render(report, facts, notes=not args.quiet)))
    return 0 if report.ok else 1


def _driver_table(args: argparse.Namespace) -> int:
    if args.repodata or args.derive or args.partial or args.record is not None or args.cache is not None:
        raise UsageError(
            f"--driver-table compares a README with the KB; it takes only --kb, --quiet and --json. {FIX_USAGE}"
        )
    rows = drivertable.read(args.driver_table)
    kb = load_kb(args.kb) if args.kb is not None else load_kb()
    report = drivertable.compare(kb, rows, repr(str(args.driver_table)))
    if args.as_json:
        print(json.dumps(to_json(report), indent=2))
    else:
        print("\n".join([*map(printable, drivertable.render_lines(report, kb)), *diff(report, notes=not args.quiet)]))
    return 0 if report.ok else 1


def _fail(code: int, kind: Kind, text: str, as_json: bool) -> int:
    print(f"error: {printable(text)}", file=sys.stderr)
    if as_json:
        print(json.dumps(failure(code, kind, *split_fix(text)), indent=2))
    return code


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    as_json = "--json" in (words[: words.index("--")] if "--" in words else words)
    try:
        args = parser().parse_args(words)
        return run(args)
    except SystemExit as exc:  # --help
        return exc.code if isinstance(exc.code, int) else 0
    except UsageError as exc:
        return _fail(2, "usage", str(exc), as_json)
    except KeyboardInterrupt:
        return _fail(INTERRUPTED_EXIT, "interrupted", f"{INTERRUPTED} {INTERRUPTED_FIX}", as_json)
    except EnvsolverError as exc:
        return _fail(exc.exit_code, exc.kind, str(exc), as_json)
    except OSError as exc:
        where = f" ({str(exc.filename)!r})" if exc.filename else ""
        return _fail(2, "io", f"{exc.strerror or exc}{where}. Check that the path exists and is readable.", as_json)
    except Exception as exc:
        if os.environ.get("ENVSOLVER_DEBUG"):
            raise
        text = (
            f"internal error ({type(exc).__name__}: {str(exc)[:500]}). This is a bug in envsolver, not in your input."
        )
        return _fail(2, "internal", text, as_json)


if __name__ == "__main__":
    sys.exit(main())
