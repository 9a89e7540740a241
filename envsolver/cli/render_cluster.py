"""What `make --cluster` wrote, per platform: the files, the stack, how each partition runs it. Printing only."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from rich.console import Console

from envsolver.cli import render

if TYPE_CHECKING:  # annotations only
    from envsolver.cluster.make import Made
    from envsolver.cluster.model import Cluster


def made(out: Console, cluster: Cluster, results: Sequence[Made], name: str | None) -> None:
    for result in results:
        names = ", ".join(p.name for p in result.group.partitions)
        render.text(out, f"{result.group.platform} (cluster {cluster.name}: partitions {names})")
        render.made(out, result.written, result.plan, result.locked, result.out_dir, name)
        for fit in result.fits:
            render.text(out, f"  partition {fit.partition}: {fit.text}")


def made_json(cluster: Cluster, results: Sequence[Made]) -> dict[str, Any]:
    platforms = []
    for result in results:
        doc = render.made_json(result.written, result.plan, result.locked)
        del doc["ok"]
        platforms.append(
            {
                "platform": result.group.platform,
                "out_dir": str(result.out_dir),
                "partitions": [{"name": f.partition, "driver_support": f.kind, "text": f.text} for f in result.fits],
                **doc,
            }
        )
    return {"ok": True, "cluster": cluster.name, "platforms": platforms}
