"""The DeepSpeed release matrix (issue 19): every release a plan can pick works through verify's probe, the hook's
registration and `verify --check deepspeed_ops` (what each column checks: tests/dsmatrix.py), and verify's fixes for
a DeepSpeed that does not import work when run.

Marker deepspeed_matrix: it needs PyPI (skipped, with the reason, when PyPI cannot be reached) and takes 12 to 26
minutes on this 2-core machine, by its load; `python3 -m pytest -m deepspeed_matrix tests/test_ds_matrix.py`. The
same matrix prints its table with `python bench/ds_matrix.py`; the GPU machine's half is bench/gpu_ds_matrix.sh.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from packaging.version import Version

from envsolver.kb import KnowledgeBase
from envsolver.verify import checks
from envsolver.verify import run as verify_run
from tests import dsmatrix

pytestmark = pytest.mark.deepspeed_matrix
NEWEST = dsmatrix.RELEASES[-1]


@pytest.fixture(scope="module")
def files() -> dict[str, tuple[str, str]]:
    try:
        return dsmatrix.index()
    except dsmatrix.Unreachable as exc:
        pytest.skip(f"PyPI cannot be reached ({exc}): the DeepSpeed matrix downloads the releases from it")


@pytest.fixture(scope="module")
def cache() -> Path:
    return dsmatrix.cache_dir().resolve()


def test_the_kb_records_every_release_pypi_has_from_0_14(kb: KnowledgeBase, files: dict[str, tuple[str, str]]) -> None:
    """PyPI's sdists 0.14.0 and newer are exactly the KB's pypi_sdists (URL and sha256), so each has its requirements
    row (tests/test_kb.py); a release newer than the KB has read fails here until its sdist is read."""
    on_pypi = {v: f for v, f in files.items() if Version(v) >= Version("0.14.0")}
    recorded = {str(s.version): (s.url, s.sha256) for s in kb.deepspeed_sdists}
    assert on_pypi == recorded, sorted(set(on_pypi) ^ set(recorded))


@pytest.mark.parametrize("version", dsmatrix.RELEASES)
def test_release(kb: KnowledgeBase, files: dict[str, tuple[str, str]], cache: Path, version: str) -> None:
    result = dsmatrix.run_release(kb, version, files, cache)
    assert result.ok, dsmatrix.table([result]) + "\n" + json.dumps(result.problems, indent=1)


@pytest.fixture
def newest(kb: KnowledgeBase, files: dict[str, tuple[str, str]], cache: Path) -> Iterator[tuple[Path, dict[str, str]]]:
    """The newest release's venv as the matrix makes it, with DeepSpeed's CPU accelerator; put back afterwards."""
    wheel = dsmatrix.build_wheel(dsmatrix.fetch_sdist(NEWEST, files, cache), cache / "wheels")
    venv = dsmatrix.make_venv(NEWEST, wheel, cache)
    yield venv, dsmatrix.environ(cache, NEWEST)
    pip(venv, "install", "-q", "--no-deps", "--force-reinstall", str(wheel))
    pip(venv, "install", "-q", str(wheel))  # its requirements, should a test have left one out


def pip(venv: Path, *args: str) -> None:
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", *args], check=True, capture_output=True, timeout=1800)


def run_fix(fix: str, env: Mapping[str, str]) -> list[subprocess.CompletedProcess[str]]:
    """Each command of a fix (`A && B (why)`), as argv without a shell, stopping at the first that fails."""
    done = []
    for command in fix.split(" (", 1)[0].split(" && "):
        done.append(subprocess.run(shlex.split(command), capture_output=True, text=True, env=dict(env), timeout=1800))
        if done[-1].returncode != 0:
            break
    return done


def deepspeed_ops(venv: Path, env: Mapping[str, str]) -> dict[str, Any]:
    rc, report = dsmatrix.verify(venv, env)
    check: dict[str, Any] = next(c for c in report["checks"] if c["id"] == "deepspeed_ops")
    return {"exit": rc, **check}


CPU_TORCH = dsmatrix.cpu_torch_detail(NEWEST)


def test_the_fix_for_a_requirement_pip_left_out_works(newest: tuple[Path, dict[str, str]]) -> None:
    """DeepSpeed installed without one of its requirements (pip --no-deps): verify names it, and its fix installs it."""
    venv, env = newest
    pip(venv, "uninstall", "-y", "hjson")
    check = deepspeed_ops(venv, env)
    assert check["status"] == "warn", check
    assert check["detail"] == (
        f"DeepSpeed {NEWEST} does not import: ModuleNotFoundError: No module named 'hjson'; "
        "its requirements hjson are not installed"
    )
    assert check["fix"] == f"{venv}/bin/python -m pip install hjson"
    ran = run_fix(check["fix"], env)
    assert all(r.returncode == 0 for r in ran), [r.stderr[-1000:] for r in ran]
    assert deepspeed_ops(venv, env)["detail"] == CPU_TORCH  # it imports again


def test_the_fix_for_a_deepspeed_the_lock_takes_from_pypi_works(
    kb: KnowledgeBase, newest: tuple[Path, dict[str, str]]
) -> None:
    """DeepSpeed missing from an env whose lock takes it from PyPI: the fix's pip command installs that release
    (built from PyPI's sdist, without ops), and its hook command is one the hook runs (here its pre-flight stops at
    the CPU torch; the GPU machine's run builds the ops)."""
    venv, env = newest
    pip(venv, "uninstall", "-y", "deepspeed")
    python = venv / "bin" / "python"
    facts = verify_run.probe(python, True, False, 300.0, env)
    meta = {"envsolver_pip_not_locked": f"deepspeed=={NEWEST}", "envsolver_torch_cuda_arch_list": "9.0"}
    ctx = checks.Context(facts, kb, meta, (), deepspeed_wanted=True)
    (check,) = checks.run(ctx, ("deepspeed_ops",))
    assert check.status == "fail", check
    assert check.fix.startswith(
        f"{python} -m pip install --no-deps deepspeed=={NEWEST} && envsolver hook -p {venv} --arch-list 9.0 ("
    ), check.fix
    install, hook = check.fix.split(" (", 1)[0].split(" && ")
    done = subprocess.run(shlex.split(install), capture_output=True, text=True, env=env, timeout=1800)
    assert done.returncode == 0, done.stderr[-2000:]
    again = verify_run.probe(python, True, False, 300.0, env)["deepspeed"]
    assert "error" not in again and again["version"] == NEWEST, again
    argv = [sys.executable, "-m", "envsolver", *shlex.split(hook)[1:]]
    ran = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=900)
    assert ran.returncode == 1 and "CPU-only build" in ran.stdout + ran.stderr, ran.stdout + ran.stderr


def test_the_kb_agrees_with_every_sdist_from_0_14(files: dict[str, tuple[str, str]], cache: Path) -> None:
    """scripts/ds_sdist_facts.py reads all of them (requirements.txt, what setup.py appends for a CUDA build,
    builder.py's mismatch lists): pypi_requirements and the releases' mismatch lists are what they say."""
    script = Path(__file__).parent.parent / "scripts" / "ds_sdist_facts.py"
    done = subprocess.run([sys.executable, str(script), "--cache", str(cache)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("the KB agrees with the 47 sdists 0.14.0..0.19.8"), done.stdout
