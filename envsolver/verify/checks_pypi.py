"""pip_conda_mix: no PyPI distribution over or beside what the environment's conda part provides (torch, triton,
numpy, the CUDA libraries). The rule is install/shadowing's (the one install undoes); this module reads the probe's
facts into it and says what it found, who asked for it and how to undo it."""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from envsolver.install.shadowing import PYPI_INSTALLERS, Dist, Package, Shadow, Where, dist_name, find, provides
from envsolver.verify.checks_base import Check, Context, prefix_of

ID = "pip_conda_mix"
SHOWN = 6  # shadows named in the detail at most; the fix names them all
# What a shadowing directory outside the prefix is, and how it leaves the environment's sys.path.
PLACES = {
    "user": ("the user site-packages", "export PYTHONNOUSERSITE=1 before running the environment's python"),
    "pythonpath": ("on PYTHONPATH", "unset PYTHONPATH (or take {dir} out of it)"),
    "other": ("on sys.path", "take {dir} out of sys.path (a .pth file or sitecustomize puts it there)"),
}


def check_pip_conda_mix(ctx: Context) -> Check:
    meta = [m for m in ctx.facts.get("conda_meta") or [] if isinstance(m, dict)]
    if not meta:
        return Check(ID, "pass", "not a conda environment (no conda-meta records): nothing of conda's to replace")
    raw = ctx.facts.get("foreign_dists")
    if not isinstance(raw, list):
        return Check(ID, "skip", "the probe did not list the distributions no conda package installed (an older probe)")
    dists = [d for d in map(_dist, raw) if d is not None]
    packages = _packages(ctx, meta)
    found = find(ctx.kb, packages, dists)
    if not found:
        names = provides(ctx.kb, packages)
        first = [n for n in ("torch", "triton", "numpy") if n in names]
        shown = first + [n for n in names if n not in first][: 3 - len(first)]
        listed = ", ".join(shown) + (", …" if len(names) > len(shown) else "")
        what = f" (its {len(names)} Python distribution{'s' if len(names) != 1 else ''}: {listed})" if names else ""
        return Check(
            ID, "pass", f"no PyPI copy of what the conda part provides{what}; {len(dists)} from PyPI beside it"
        )
    whose = "the lock's conda" if ctx.lock_entries else "conda's"
    said = [_said(s, whose, dists) for s in found[:SHOWN]]
    more = f"; … and {len(found) - SHOWN} more" if len(found) > SHOWN else ""
    return Check(ID, "fail", "; ".join(said) + more, _fix(ctx, found, dists, whose))


def _dist(raw: Any) -> Dist | None:
    """One foreign distribution of the probe's facts; None for a malformed entry."""
    if not isinstance(raw, dict) or not isinstance(raw.get("name"), str) or not isinstance(raw.get("path"), str):
        return None
    where: Where = raw["where"] if raw.get("where") in ("prefix", "user", "pythonpath", "other") else "other"
    listed = raw.get("requires")
    requires = tuple(r for r in listed if isinstance(r, str)) if isinstance(listed, list) else ()
    version, installer = raw.get("version"), raw.get("installer")
    return Dist(
        str(canonicalize_name(raw["name"])),
        version if isinstance(version, str) else None,
        installer if isinstance(installer, str) else None,
        raw["path"],
        where,
        bool(raw.get("requested")),
        requires,
    )


def _packages(ctx: Context, meta: Sequence[Mapping[str, Any]]) -> list[Package]:
    """The conda part: the lock's entries when there is a lock, else conda-meta's records; each with the
    distributions its installed record lists."""
    listed = {str(m.get("name")): frozenset(dist_name(i) for i in _strings(m.get("dist_infos"))) for m in meta}
    if ctx.lock_entries:
        return [Package(e.name, e.version, e.build, listed.get(e.name, frozenset())) for e in ctx.lock_entries]
    return [Package(str(m.get("name")), str(m.get("version")), str(m.get("build")), listed[str(m.get("name"))])
            for m in meta]  # fmt: skip


def _strings(value: Any) -> list[str]:
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def _origin(dist: Dist) -> str:
    if dist.installer in PYPI_INSTALLERS:
        how = f"from PyPI (installed by {dist.installer}"
    elif dist.installer:
        how = f"(installed by {dist.installer}, listed by no conda record"
    else:
        how = "(listed by no conda record"
    return how + (", asked for by name)" if dist.requested else ")")


def _said(shadow: Shadow, whose: str, dists: Sequence[Dist]) -> str:
    d, p = shadow.dist, shadow.package
    conda = f"{whose} {p.name} {p.version} {p.build}"
    if d.where != "prefix":
        place = PLACES[d.where][0]
        out = f"{d.name} {d.version} in {d.path.rsplit('/', 1)[0]} ({place}) {_origin(d)} comes first on sys.path: it "
        out += f"shadows {conda}"
    elif shadow.own:
        out = f"{d.name} {d.version} {_origin(d)} over {conda}"
    else:
        out = f"{d.name} {d.version} {_origin(d)}: a second copy of what {conda} holds"
    needs = [_need_text(n) for n in _needs(shadow, dists)]
    return out + (f", required by {', '.join(needs)}" if needs else "")


@dataclass(frozen=True)
class Need:
    """Another foreign distribution whose Requires-Dist names the shadowing one: met is False only where the conda
    package's version is known not to meet it (None: not asked, a library's wheel)."""

    by: Dist
    requirement: str
    shadow: Shadow
    met: bool | None


def _needs(shadow: Shadow, dists: Sequence[Dist]) -> list[Need]:
    out = []
    for other in dists:
        for line in other.requires if other is not shadow.dist else ():
            try:
                req = Requirement(line)
            except InvalidRequirement:
                continue
            if canonicalize_name(req.name) == shadow.dist.name:
                met = _meets(shadow.package.version, str(req.specifier)) if shadow.own else None
                out.append(Need(other, f"{req.name}{req.specifier}", shadow, met))
                break
    return out


def _need_text(need: Need) -> str:
    p = need.shadow.package
    verdict = "" if need.met is None else f", which {p.name} {p.version} {'meets' if need.met else 'does not meet'}"
    return f"{need.by.name} {need.by.version} ({need.requirement}{verdict})"


def _meets(version: str, specifier: str) -> bool | None:
    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    try:
        return SpecifierSet(specifier).contains(Version(version), prereleases=True) if specifier else True
    except (InvalidSpecifier, InvalidVersion):
        return None


def _fix(ctx: Context, found: Sequence[Shadow], dists: Sequence[Dist], whose: str) -> str:
    inside = [s for s in found if s.dist.where == "prefix"]
    outside = [s for s in found if s.dist.where != "prefix"]
    parts = []
    if inside:  # (a conda environment: the probe lists conda-meta's records from its own conda-meta/)
        names = " ".join(sorted({s.dist.name for s in inside}))
        relinked = sorted({s.package.name for s in inside if s.own})
        specs = sorted(
            {shlex.quote(f"{s.package.name}={s.package.version}={s.package.build}") for s in inside if s.own}
        )
        if ctx.lock_entries or "envsolver_version" in ctx.lock_meta:
            again = f" and links {', '.join(relinked)} again" if relinked else ""
            parts.append(
                f"envsolver install conda-lock.yml -p {prefix_of(ctx)} (the lock it was installed from: it removes "
                f"PyPI's {names} with the environment's pip{again})"
            )
        else:
            executable = (ctx.facts.get("python") or {}).get("executable")
            python = shlex.quote(str(executable)) if executable else f"{prefix_of(ctx)}/bin/python"
            uv = any(s.dist.installer == "uv" for s in inside)
            remove = f"uv pip uninstall --python {python} {names}" if uv else f"{python} -m pip uninstall -y {names}"
            reinstall = f", then conda install -p {prefix_of(ctx)} --force-reinstall {' '.join(specs)}"
            again = reinstall if relinked else ""
            parts.append(remove + again)
    for where in sorted({s.dist.where for s in outside}):
        dirs = sorted({s.dist.path.rsplit("/", 1)[0] for s in outside if s.dist.where == where})
        parts.append(PLACES[where][1].format(dir=" ".join(shlex.quote(d) for d in dirs)))
    unmet = [n for s in found for n in _needs(s, dists) if n.met is False]
    for need in unmet[:3]:
        p, name = need.shadow.package, need.shadow.dist.name
        torch = f" (envsolver make --torch '{need.requirement[len(name) :]}' with your other options)"
        parts.append(
            f"{need.by.name} {need.by.version} needs {need.requirement}, which {whose} {p.name} {p.version} does not "
            f"meet: remake the lock with one that meets it{torch if name == 'torch' else ''}"
        )
    return "; ".join(parts)
