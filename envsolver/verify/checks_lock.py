"""Checks against the lock the environment came from."""

from __future__ import annotations

from envsolver.core.versions import DriverVersion, leading_major_minor
from envsolver.resolve import driver as driver_rules
from envsolver.verify import demands, gate
from envsolver.verify.checks_base import Check, Context, conda_env, driver_version, new_env_fix, prefix_of, remake_fix


def check_lock_drift(ctx: Context) -> Check:
    if not ctx.lock_entries:
        return Check("lock_drift", "skip", "no lock (pass --lock, or install with envsolver install)")
    have = {m["name"]: (m["version"], m["build"]) for m in ctx.facts.get("conda_meta") or []}
    want = {e.name: (e.version, e.build) for e in ctx.lock_entries}
    missing = sorted(set(want) - set(have))
    extra = sorted(set(have) - set(want))
    changed = sorted(n for n in set(want) & set(have) if want[n] != have[n])
    dists = ctx.facts.get("distributions") or {}
    others, unproven = [], []  # PyPI files of the lock's version that are not the lock's files / not known to be
    for record in ctx.lock_pip:
        held = dists.get(record.name)
        standing, why = ctx.pip_files.get(record.name, ("in place", ""))
        if held is None:
            missing.append(f"{record.name} (PyPI)")
        elif held != record.version:
            have[record.name], want[record.name] = (str(held), "pypi"), (record.version, "pypi")
            changed.append(record.name)
        elif standing == "other":
            others.append(why)
        elif standing == "unrecorded":
            unproven.append(why)
    total = len(ctx.lock_entries) + len(ctx.lock_pip)
    if not (missing or extra or changed or others):
        pypi = f", {len(ctx.lock_pip)} of them from PyPI" if ctx.lock_pip else ""
        if unproven:
            return Check(
                "lock_drift",
                "warn",
                f"the {total} packages match the lock by version{pypi}; not proven to be the lock's files: "
                + "; ".join(unproven),
                f"envsolver install conda-lock.yml -p {prefix_of(ctx)} (it installs the lock's PyPI files again "
                "and records them)",
            )
        return Check("lock_drift", "pass", f"the {total} packages match the lock{pypi}")
    parts = [f"PyPI files not the lock's: {'; '.join(others)}"] if others else []
    if missing:
        parts.append(f"missing: {', '.join(missing[:8])}{' …' if len(missing) > 8 else ''}")
    if extra:
        parts.append(f"extra: {', '.join(extra[:8])}{' …' if len(extra) > 8 else ''}")
    if changed:
        parts.append("changed: " + ", ".join(f"{n} {have[n][0]} (lock {want[n][0]})" for n in changed[:8]))
    return Check(
        "lock_drift",
        "fail",
        "; ".join(parts),
        f"envsolver install conda-lock.yml -p {prefix_of(ctx)} (it brings the prefix back to the lock)"
        if conda_env(ctx)
        else new_env_fix(ctx, "the lock's packages"),
    )


def check_host_vs_lock(ctx: Context) -> Check:
    meta = ctx.lock_meta
    if not meta:
        return Check("host_vs_lock", "skip", "no lock metadata")
    kept = demands.promise(meta)  # what the lock promises: the one reading of its metadata (the job's gate's too)
    problems, unknown, looked = [], [], []
    version = driver_version(ctx)
    if version is not None and kept.solved_cuda is not None:
        looked.append(f"driver {version}")
        wanted = kept.solved_cuda
        have = driver_rules.newest_full_cuda(ctx.kb, version)
        wanted_toolkit = ctx.kb.toolkit(wanted)
        if kept.driver is not None and version < kept.driver:
            problems.append(f"driver {version} is older than the lock's floor {kept.driver}")
        elif have and have.version < wanted and wanted_toolkit and wanted_toolkit.driver is None:
            unknown.append(
                f"the lock was solved for __cuda={wanted}, and the knowledge base does not know which driver fully "
                f"supports CUDA {wanted} (NVIDIA publishes no minimum); driver {version} fully supports CUDA <= "
                f"{have.version} and runs {wanted} at least through minor-version compatibility"
            )
        elif have and have.version < wanted:
            problems.append(
                f"the lock was solved for __cuda={wanted}; driver {version} fully supports CUDA <= {have.version}"
            )
    host_glibc = leading_major_minor(ctx.facts.get("glibc"))
    if host_glibc and kept.glibc:
        looked.append(f"glibc {host_glibc}")
        if host_glibc < kept.glibc:
            problems.append(f"host glibc {host_glibc} is older than the lock's {kept.glibc}")
    gpus = (ctx.facts.get("driver") or {}).get("gpus") or []
    if gpus and kept.archs:
        looked.append(f"{len(gpus)} GPU(s)")
    for g in gpus if kept.archs else []:
        cc = leading_major_minor(g.get("compute_capability"))
        how = gate.covering(kept.archs, (cc.major, cc.minor)) if cc is not None else None
        if cc is None:
            unknown.append(f"{g['name']}: its compute capability could not be read")
        elif how is None:
            problems.append(
                f"{g['name']} (CC {g.get('compute_capability')}) is not a target of the lock ({', '.join(kept.archs)})"
            )
        elif how[0] == "ptx":
            unknown.append(
                f"{g['name']} (CC {g.get('compute_capability')}) has no kernels in the lock's arch list, only the PTX "
                f"of {how[1]}, compiled at first launch (slow, and PTX JIT fails on a driver older than the toolkit)"
            )
    if problems or unknown:
        return Check(
            "host_vs_lock",
            "fail" if problems else "warn",
            "; ".join(problems + unknown),
            remake_fix(ctx),
        )
    if not looked:
        return Check("host_vs_lock", "skip", "nothing to compare with the lock: " + _unseen(ctx, kept, version))
    unseen = _unseen(ctx, kept, version)
    said = f"this host meets the lock's assumptions for its {', '.join(looked)}"
    return Check("host_vs_lock", "pass", said + (f"; not checked: {unseen}" if unseen else ""))


def _unseen(ctx: Context, kept: demands.Promise, version: DriverVersion | None) -> str:
    """What host_vs_lock could not compare, and why."""
    out = []
    if version is None:
        out.append("the driver (none found)")
    elif kept.solved_cuda is None:
        out.append("the driver (the lock records no __cuda)")
    if not leading_major_minor(ctx.facts.get("glibc")):
        out.append("glibc (its version is unknown)")
    elif not kept.glibc:
        out.append("glibc (the lock records none)")
    if not (ctx.facts.get("driver") or {}).get("gpus"):
        out.append("the GPUs (none visible)")
    elif not kept.archs:
        out.append("the GPUs (the lock records no compute capabilities)")
    return ", ".join(out)
