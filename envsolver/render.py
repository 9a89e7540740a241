"""Terminal rendering with rich: the plan for `explain`, the GPU table for `gpus`. Printing only."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from envsolver.kb.model import Gpu
from envsolver.plan import Plan


def _yes(value: bool | None) -> str:
    return "?" if value is None else ("yes" if value else "no")


def gpu_rows(gpus: tuple[Gpu, ...]) -> list[dict[str, object]]:
    return [
        {
            "name": g.name,
            "aliases": [g.key, *g.aliases, *g.smi_names],
            "compute_capability": str(g.compute_capability),
            "architecture": g.architecture,
            "memory_gb": list(g.memory_gb) if g.memory_gb is not None else None,
            "bf16": g.bf16,
            "fp8": g.fp8,
        }
        for g in gpus
    ]


def gpu_table(console: Console, gpus: tuple[Gpu, ...]) -> None:
    table = Table(title="GPUs in the knowledge base", show_lines=False)
    for column in ("key", "name", "CC", "architecture", "memory (GB)", "bf16", "fp8", "platform"):
        table.add_column(column)
    for g in sorted(gpus, key=lambda g: (g.compute_capability, g.key)):
        memory = "/".join(str(m) for m in g.memory_gb) if g.memory_gb else "?"
        table.add_row(
            g.key, g.name, str(g.compute_capability), g.architecture, memory, _yes(g.bf16), _yes(g.fp8), g.platform
        )
    console.print(table)


def plan(console: Console, p: Plan, detected: dict[str, str]) -> None:
    gpus = ", ".join(f"{g.name} (sm_{g.compute_capability.sm})" for g in p.gpus)
    console.print(f"[bold]Target[/]: {gpus}; driver {p.driver or 'not given'}; {p.platform}")
    for value, origin in detected.items():
        console.print(f"  detected {value} (from {origin})")
    console.print(
        f"[bold]Stack[/]: torch {p.torch_version} (CUDA {p.torch_cuda} build) + CUDA {p.cuda_version} "
        f"toolkit, Python {p.python_version}, source {p.source}; compatibility [bold]{p.compatibility}[/]"
    )
    if p.snapshot_date:
        console.print(
            f"Planned within the bundled snapshot of {p.snapshot_date}: the plan `envsolver make --offline` locks.",
            highlight=False,
        )
    console.print(f"[bold]TORCH_CUDA_ARCH_LIST[/]={p.torch_cuda_arch_list}")
    console.print(f"[bold]Channels[/]: {', '.join(p.channels)}")
    console.print("[bold]Specs[/]: " + "  ".join(str(s) for s in p.specs))
    if p.pip:
        console.print("[bold]pip[/]: " + "  ".join(p.pip))
    console.print("[bold]Virtual packages[/]: " + "  ".join(f"{k}={v}" for k, v in p.virtual_packages.items()))
    console.print("[bold]Decisions[/]:")
    for r in p.reasons:
        console.print(f"  - [bold]{escape(r.decision)}[/]: {escape(r.because)}", highlight=False)
        console.print(f"      [dim]source: {', '.join(r.source)}[/]", highlight=False)
    if p.rejected:
        console.print("[bold]Rejected newer candidates[/]:")
        for rej in p.rejected:
            console.print(f"  - {rej.candidate}: {rej.because}")
    for w in p.warnings:
        console.print(f"[yellow]warning[/]: {w}")
