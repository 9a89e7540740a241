from __future__ import annotations

import os
import shutil
import signal
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from envsolver.core.errors import EnvsolverError
from envsolver.kb import KnowledgeBase, default_kb
from envsolver.resolve.inputs import Options, build_target
from envsolver.resolve.plan import Plan
from envsolver.resolve.run import resolve

# Property-based tests are judged on what they find, not on how fast an example runs: CI runs on a loaded 2-core
# machine, where hypothesis's default 200 ms deadline and its too_slow health check failed passing tests (a
# 2026-12-02 run of tests/test_writers.py at load 26). A test that means to bound time asserts it itself.
settings.register_profile("envsolver", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("envsolver")

DATA = Path(__file__).parent / "data"
KB_DATA = Path(__file__).parent.parent / "envsolver" / "kb" / "data"


# The fast tier (README: `python3 -m pytest -n auto --maxprocesses 4 -m "not heavy"`) leaves out the tests marked
# `heavy`: those of the long markers, those that use the Slurm lab, the property-based tests (tests/fuzz, and a fixed
# seed and a fresh one elsewhere), and the modules below, whose tests start envsolver, rattler's worker, pip,
# torchrun or a server in processes of their own (each took 8 s or more of a whole run, 2026-12-01; `--durations`
# shows them).
LONG_MARKERS = ("fuzz", "slow", "deepspeed_matrix", "scale", "sweep")  # addopts leaves them out (test_packaging)
HEAVY_MODULES = frozenset(
    {
        "test_suggestions.py",
        "test_pypi_over_conda_install.py",
        "test_project_lock.py",
        "test_readme_project.py",
        "test_clash.py",
        "test_pypi_project.py",
        "test_lock.py",
        "test_downloads.py",
        "test_hostile_text.py",
        "test_nccl_run.py",
        "test_cli_imports.py",
        "test_json.py",
        "test_kb.py",
        "test_lock_plan.py",
        "test_install_signals.py",
        "test_hook.py",
        "test_closed_stdout.py",
        "test_rattler_abort.py",
        "test_kb_audit.py",
        "test_install_safety.py",
        "test_cli_flags.py",
        "test_content_hash.py",
        "test_completion.py",
        "test_writers.py",
        "test_download_limits.py",
        "test_http.py",
        "test_pip_part.py",
        "test_pip_records.py",
        "test_isolation_canaries.py",
        "test_locks_dir.py",
        "test_install.py",
        "test_mutate.py",
        "test_inputhash.py",
        "test_snapshot.py",
        "test_redact.py",
        "test_gpus_table.py",
        "test_tmux.py",
        "test_worker_bounds.py",
        "test_verify_cluster_arch.py",  # a lab of its own (an aarch64 node)
        "test_verify_cluster_step.py",
        "test_sbatch_launch.py",
        "test_slurm_output.py",
        "test_slurmlab.py",
    }
)
SEED_IDS = ("fixed-seed", "fresh-seed")


def is_heavy(item: pytest.Item) -> bool:
    """Whether the fast tier leaves `item` out (see HEAVY_MODULES)."""
    path = Path(str(item.path))
    return (
        any(marker in item.keywords for marker in LONG_MARKERS)
        or "slurm_lab" in getattr(item, "fixturenames", ())
        or "fuzz" in path.parts
        or path.name in HEAVY_MODULES
        or any(seed in item.name for seed in SEED_IDS)
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every heavy test is marked `heavy` (the fast tier leaves them out). GPU tests run only where an NVIDIA driver
    answers (the GPU machine)."""
    for item in items:
        if is_heavy(item):
            item.add_marker(pytest.mark.heavy)
    if shutil.which("nvidia-smi") and Path("/proc/driver/nvidia/version").exists():
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU and driver")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def pytest_sessionstart(session: pytest.Session) -> None:
    """Tests never read PyPI's index through make: a closed port stands for it (every process the tests start
    inherits this), so a lock's PyPI part comes from the bundled snapshot, as on a machine without network.
    tests/test_pins.py serves a real simple page from a local index to test the live path."""
    os.environ.setdefault("ENVSOLVER_PYPI_INDEX", "http://127.0.0.1:9/simple")


def pytest_configure(config: pytest.Config) -> None:
    """The Ctrl-C tests send SIGINT to this process and to processes it starts. A runner started as a background
    job of a script (`pytest &`) inherits SIGINT ignored, and so would every process the tests start (an ignored
    signal stays ignored across exec), so none of them would be interrupted: give this process Python's handler
    back. Processes it starts then get the default disposition, and Python's handler, as from a terminal.

    Then envsolver's modules are byte-compiled, once per run (by the runner that starts pytest-xdist's workers, or
    the one process without them), as pip compiles an installed envsolver for its users."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if not hasattr(config, "workerinput"):
        compile_envsolver()


@pytest.hookimpl(wrapper=True)
def pytest_collection(session: pytest.Session) -> object:
    """Collection keeps pytest's own cache of the test modules it rewrote (tests/__pycache__, one file a module,
    used while its source is unchanged), as it does wherever PYTHONDONTWRITEBYTECODE is not set: rewriting them
    took 4 to 6 s of each worker's CPU on every run (pytest rewrites every assert into code that explains it). The
    variable is honoured again once the tests are collected."""
    kept = sys.dont_write_bytecode
    sys.dont_write_bytecode = False
    try:
        return (yield)
    finally:
        sys.dont_write_bytecode = kept


def compile_envsolver() -> None:
    """Write the bytecode of envsolver's modules where it is missing or stale. An editable install (the README's)
    leaves the tree uncompiled, and where PYTHONDONTWRITEBYTECODE is set (this development machine sets it) nothing
    writes it later, so every envsolver process a test starts (about 235 in a run) compiled each module it imported
    from source: `make --gpu a100 --offline` took 0.31 s of CPU so, 0.25 s compiled (2026-12-02, medians of 4 on
    the loaded 2-core machine). py_compile writes whatever that variable says; a tree it cannot write (an installed
    copy) is left as it is."""
    import compileall

    import envsolver

    compileall.compile_dir(Path(envsolver.__file__).parent, quiet=2)


@pytest.fixture(scope="session")
def kb() -> KnowledgeBase:
    return default_kb()


def plan_for(kb: KnowledgeBase, **options: object) -> Plan:
    inputs = build_target(Options(**options), kb)  # type: ignore[arg-type]
    return resolve(inputs.target, kb)


def error_for(kb: KnowledgeBase, **options: object) -> EnvsolverError:
    with pytest.raises(EnvsolverError) as info:
        plan_for(kb, **options)
    return info.value
