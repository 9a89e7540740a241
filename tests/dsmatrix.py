"""The DeepSpeed release matrix (issue 19): real releases from PyPI's sdists, each built into a wheel without ops,
installed into its own venv with the CPU torch 2.13.0 and the release's own requirements, and checked on DeepSpeed's
CPU accelerator (DS_ACCELERATOR=cpu) through:
  - sdist:  PyPI's sha256 is the KB's (pypi_sdists), the file is that hash;
  - wheel:  its Requires-Dist is the KB's pypi_requirements row, and a build on the CUDA accelerator adds what the
            row's cuda_build_adds says;
  - probe:  verify's probe reads the release's facts (version, accelerator, installed_ops, compatible_ops from where
            the release keeps them, nothing missing), with no error;
  - hook:   the hook's ops stage (envsolver/hook/ops.py: op_runner.py key/install in the venv's python, the shared
            registry, the proof through DeepSpeed's own load()) builds cpu_adam and fused_adam, registers them, and
            DeepSpeed's load() imports the registered libraries; the probe then sees them installed;
  - verify: `envsolver verify --python VENV/bin/python --check deepspeed_ops --json` fails for the one right reason
            here: torch is a CPU build (exit 1, the CPU-torch detail with the release's version and accelerator).
Used by tests/test_ds_matrix.py (marker deepspeed_matrix) and bench/ds_matrix.py (the table). The GPU machine's half
is bench/gpu_ds_matrix.sh.

Network: PyPI's simple index, the sdists (by hash), DeepSpeed's requirements through pip. torch comes from this
machine's disk. Cache: ENVSOLVER_DS_MATRIX_CACHE, else ~/.cache/envsolver-ds-matrix (sdists/, wheels/, wheels-cuda/,
venvs/, ext/).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import zipfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.version import Version

from envsolver.core.procrun import run, run_build
from envsolver.hook import ops, register
from envsolver.kb import KnowledgeBase
from envsolver.resolve import deepspeed as ds_rules

ROOT = Path(__file__).resolve().parent.parent
PROBE = ROOT / "envsolver" / "verify" / "probe.py"
# The newest patch of each minor from 0.14 (PyPI's simple index, 2026-12-01), which includes the newest, 0.19.8.
RELEASES = ("0.14.5", "0.15.4", "0.16.9", "0.17.6", "0.18.9", "0.19.8")
GPU_RELEASES = RELEASES[-3:]
INDEX = "https://pypi.org/simple/deepspeed/"
TORCH = "torch==2.13.0"  # the CPU build on this machine's disk
TORCH_VERSION = "2.13.0+cpu"
OPS = ("cpu_adam", "fused_adam")
MAX_INDEX = 16 << 20
MAX_SDIST = 64 << 20
COLUMNS = ("sdist", "wheel", "probe", "hook", "probe after hook", "verify")


class Unreachable(Exception):
    """PyPI could not be reached: the matrix cannot run here."""


def cache_dir() -> Path:
    given = os.environ.get("ENVSOLVER_DS_MATRIX_CACHE")
    return Path(given) if given else Path.home() / ".cache" / "envsolver-ds-matrix"


def _read(url: str, limit: int, accept: str | None = None, timeout: float = 60.0) -> bytes:
    request = urllib.request.Request(url, headers={"Accept": accept} if accept else {})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            data: bytes = response.read(limit + 1)
    except (urllib.error.URLError, OSError) as exc:
        raise Unreachable(f"{url}: {exc}") from None
    if len(data) > limit:
        raise Unreachable(f"{url}: more than {limit} bytes")
    return data


def index() -> dict[str, tuple[str, str]]:
    """PyPI's sdists of DeepSpeed: version -> (URL, sha256). Raises Unreachable."""
    doc = json.loads(_read(INDEX, MAX_INDEX, "application/vnd.pypi.simple.v1+json"))
    found = {}
    for item in doc.get("files", []):
        name = str(item.get("filename", ""))
        if name.startswith("deepspeed-") and name.endswith(".tar.gz") and not item.get("yanked"):
            found[name[len("deepspeed-") : -len(".tar.gz")]] = (str(item["url"]), str(item["hashes"]["sha256"]))
    return found


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def fetch_sdist(version: str, files: Mapping[str, tuple[str, str]], cache: Path) -> Path:
    """The release's sdist in the cache, proven by PyPI's sha256 (downloaded when missing or different)."""
    url, sha256 = files[version]
    path = cache / "sdists" / f"deepspeed-{version}.tar.gz"
    if path.is_file() and sha256_of(path) == sha256:
        return path
    data = _read(url, MAX_SDIST, timeout=300.0)
    if hashlib.sha256(data).hexdigest() != sha256:
        raise RuntimeError(f"{url}: sha256 {hashlib.sha256(data).hexdigest()} is not PyPI's {sha256}")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".part")
    tmp.write_bytes(data)
    os.replace(tmp, path)
    return path


def build_wheel(sdist: Path, out: Path, accelerator: str | None = None) -> Path:
    """`DS_BUILD_OPS=0 pip wheel --no-deps --no-build-isolation SDIST` with this python (torch 2.13.0+cpu), on
    DeepSpeed's accelerator `accelerator` (DS_ACCELERATOR; None: its own detection, the CPU one here)."""
    sdist, out = sdist.resolve(), out.resolve()
    version = sdist.name[len("deepspeed-") : -len(".tar.gz")]
    wheel = out / f"deepspeed-{version}-py3-none-any.whl"
    stamp = out / f"deepspeed-{version}.sdist-sha256"
    sdist_sha = sha256_of(sdist)
    if wheel.is_file() and stamp.is_file() and stamp.read_text().strip() == sdist_sha:
        return wheel
    out.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k != "DS_ACCELERATOR"}
    env.update(DS_BUILD_OPS="0", **({"DS_ACCELERATOR": accelerator} if accelerator else {}))
    argv = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(out), str(sdist)]
    with tempfile.TemporaryDirectory() as work:
        done = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=work, timeout=900, check=False)
    if done.returncode != 0 or not wheel.is_file():
        raise RuntimeError(f"pip wheel {sdist.name} failed ({done.returncode}): {(done.stdout + done.stderr)[-2000:]}")
    stamp.write_text(sdist_sha + "\n")
    return wheel


def wheel_requires(wheel: Path) -> list[str]:
    """The wheel's Requires-Dist, extras left out, as written."""
    version = wheel.name.split("-")[1]
    with zipfile.ZipFile(wheel) as archive:
        text = archive.read(f"deepspeed-{version}.dist-info/METADATA").decode()
    return [
        line.split(":", 1)[1].strip()
        for line in text.splitlines()
        if line.startswith("Requires-Dist:") and "extra ==" not in line
    ]


def make_venv(version: str, wheel: Path, cache: Path) -> Path:
    """A venv with torch 2.13.0 (from disk) and the wheel with its requirements (pip, from PyPI); reused while it
    was made from the same wheel."""
    venv = cache / "venvs" / f"ds-{version}"
    stamp = venv / "envsolver-matrix.txt"
    want = f"{TORCH} {sha256_of(wheel)}\n"
    if (venv / "bin" / "python").exists() and stamp.is_file() and stamp.read_text() == want:
        return venv
    shutil.rmtree(venv, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True, timeout=300)
    argv = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", TORCH, str(wheel)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=1800, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"pip install into {venv} failed: {(done.stdout + done.stderr)[-2000:]}")
    stamp.write_text(want)
    return venv


def environ(cache: Path, version: str, accelerator: str | None = "cpu") -> dict[str, str]:
    """This process's environment for the venv's processes: DeepSpeed's CPU accelerator, an extensions dir of the
    release's own (emptied by `fresh_state`)."""
    env = {k: v for k, v in os.environ.items() if k not in ("DS_ACCELERATOR", "TORCH_CUDA_ARCH_LIST")}
    if accelerator:
        env["DS_ACCELERATOR"] = accelerator
    env["TORCH_EXTENSIONS_DIR"] = str(cache / "ext" / version)
    return env


def probe(venv: Path, env: Mapping[str, str]) -> dict[str, Any]:
    """verify's probe in the venv's python (DeepSpeed on, no GPU queries): its `deepspeed` facts."""
    argv = [str(venv / "bin" / "python"), str(PROBE), "--deepspeed", "--no-devices", "--timeout", "300"]
    done = subprocess.run(argv, capture_output=True, text=True, env=dict(env), timeout=900, check=False)
    doc = json.loads(done.stdout)
    facts: dict[str, Any] = doc.get("deepspeed") or {"error": f"no deepspeed facts: {done.stderr[-500:]}"}
    return facts


def site_packages(venv: Path) -> Path:
    return next((venv / "lib").glob("python3*/site-packages"))


def fresh_state(venv: Path, env: Mapping[str, str]) -> None:
    """No registration, no op of an earlier run: the matrix builds and registers from scratch each time."""
    register.write(site_packages(venv), [], register.Built("0", "0", {}))
    shutil.rmtree(venv / ops.OPS_DIR, ignore_errors=True)
    shutil.rmtree(env["TORCH_EXTENSIONS_DIR"], ignore_errors=True)


def hook_ops(venv: Path, env: Mapping[str, str], progress: Callable[[str], None]) -> ops.Provided:
    """The hook's ops stage for the venv (its site-packages is inside it, so the ops are registered there)."""
    python = venv / "bin" / "python"
    facts = ops.read_key_facts(python, env, run)
    jobs = max(1, os.cpu_count() or 1)
    return ops.provide(
        venv,
        python,
        OPS,
        "9.0",
        "9.0",
        "linux-64",
        facts,
        env,
        jobs,
        None,
        Path("/nonexistent"),
        (),
        progress,
        run,
        build_runner=run_build,
    )


def verify(venv: Path, env: Mapping[str, str]) -> tuple[int, dict[str, Any]]:
    """`envsolver verify --python VENV/bin/python --check deepspeed_ops --json` (this checkout's envsolver)."""
    argv = [sys.executable, "-m", "envsolver", "verify", "--python", str(venv / "bin" / "python")]
    argv += ["--check", "deepspeed_ops", "--json"]
    done = subprocess.run(argv, capture_output=True, text=True, env=dict(env), cwd=ROOT, timeout=900, check=False)
    try:
        doc: dict[str, Any] = json.loads(done.stdout)
    except ValueError:
        doc = {"error": (done.stdout + done.stderr)[-1000:]}
    return done.returncode, doc


@dataclass
class Result:
    release: str
    cells: dict[str, str] = field(default_factory=dict)  # column -> what was seen, in a few words
    problems: dict[str, list[str]] = field(default_factory=dict)  # column -> what is wrong
    seconds: float = 0.0
    facts: dict[str, Any] = field(default_factory=dict)  # the raw documents, for the record

    @property
    def ok(self) -> bool:
        return not any(self.problems.values()) and all(c in self.cells for c in COLUMNS)

    def note(self, column: str, seen: str, problems: list[str]) -> None:
        self.cells[column] = seen
        self.problems[column] = problems


def cpu_torch_detail(version: str) -> str:
    """verify's deepspeed_ops detail here: DeepSpeed imports, on its CPU accelerator, beside the CPU torch."""
    return (
        f"DeepSpeed {version} ('cpu' accelerator) cannot build or use its CUDA ops: torch {TORCH_VERSION} is a "
        "CPU-only build"
    )


def expect_probe(version: str, ds: Mapping[str, Any]) -> list[str]:
    """What the probe must read from this release before any registration."""
    new = Version(version) >= Version("0.19.8")
    where = "deepspeed.ops.__compatible_ops__" if new else "deepspeed.git_version_info"
    problems = [f"{k}: {ds[k]}" for k in ds if k == "error" or k.endswith("_error")]
    wanted = {"version": version, "distribution": version, "accelerator": "cpu", "compatible_ops_from": where}
    problems += [f"{k} is {ds.get(k)!r}, not {v!r}" for k, v in wanted.items() if ds.get(k) != v]
    installed, compatible = ds.get("installed_ops"), ds.get("compatible_ops")
    if not isinstance(installed, dict) or any(installed.values()):
        problems.append(f"installed_ops {installed!r}: expected every op False (built without ops)")
    if not isinstance(compatible, dict) or not compatible.get("cpu_adam"):
        problems.append(f"compatible_ops {compatible!r}: expected cpu_adam compatible on the CPU accelerator")
    if ds.get("requires_missing") != [] or ds.get("fused_adam_built") is not False:
        missing, built = ds.get("requires_missing"), ds.get("fused_adam_built")
        problems.append(f"requires_missing {missing!r}, fused_adam_built {built!r}: expected [] and False")
    return problems


def run_release(
    kb: KnowledgeBase,
    version: str,
    files: Mapping[str, tuple[str, str]],
    cache: Path,
    progress: Callable[[str], None] = lambda _: None,
) -> Result:
    """Every column for one release; a step that cannot run leaves its column and the later ones out."""
    started = time.perf_counter()
    result = Result(version)
    try:
        _run(kb, version, files, cache, progress, result)
    except Exception as exc:  # a step that broke is the release's result, not the matrix's end
        column = next((c for c in COLUMNS if c not in result.cells), COLUMNS[-1])
        result.note(column, "did not run", [f"{type(exc).__name__}: {exc}"])
    result.seconds = time.perf_counter() - started
    return result


def _run(
    kb: KnowledgeBase,
    version: str,
    files: Mapping[str, tuple[str, str]],
    cache: Path,
    progress: Callable[[str], None],
    result: Result,
) -> None:
    # sdist: PyPI's hash is the KB's, and the file is that hash
    known = ds_rules.sdist_of(kb, Version(version))
    sdist = fetch_sdist(version, files, cache)
    url, sha256 = files[version]
    same = known is not None and (known.sha256, known.url) == (sha256, url)
    wrong = [] if same else [f"the KB's {known!r} is not PyPI's {url} {sha256}"]
    result.note("sdist", f"sha256 {sha256[:12]}…", wrong)
    # wheel: Requires-Dist as the KB says, on the CPU accelerator and on the CUDA one
    progress(f"{version}: building the wheels")
    wheel = build_wheel(sdist, cache / "wheels")
    cpu_req = wheel_requires(wheel)
    kb_cpu = [str(r) for r in ds_rules.requirements_of(kb, Version(version), cuda_build=False) or ()]
    kb_cuda = [str(r) for r in ds_rules.requirements_of(kb, Version(version), cuda_build=True) or ()]
    wrong = [f"Requires-Dist {cpu_req} is not the KB's {kb_cpu}"] if cpu_req != kb_cpu else []
    try:
        cuda_req: list[str] | None = wheel_requires(build_wheel(sdist, cache / "wheels-cuda", accelerator="cuda"))
    except RuntimeError as exc:
        # up to 0.19.7 setup.py asks nvcc's version (installed_cuda_version) on the CUDA accelerator, through
        # torch's CUDA_HOME, which a CPU torch does not set: that build needs a CUDA torch (the GPU machine's run)
        if "MissingCUDAException" not in str(exc):
            raise
        cuda_req = None
    if cuda_req is not None and cuda_req != kb_cuda:
        wrong.append(f"CUDA build's Requires-Dist {cuda_req} is not the KB's {kb_cuda}")
    added = ", ".join(r for r in cuda_req if r not in cpu_req) or "nothing" if cuda_req is not None else None
    cuda = f"CUDA build adds {added}" if added else "CUDA build needs a CUDA torch (setup.py asks nvcc)"
    result.note("wheel", f"{len(cpu_req)} requirements as the KB; {cuda}", wrong)
    # probe: the facts of a fresh venv
    progress(f"{version}: the venv")
    venv = make_venv(version, wheel, cache)
    env = environ(cache, version)
    fresh_state(venv, env)
    ds = probe(venv, env)
    result.facts["probe"] = ds
    seen_probe = f"{ds.get('version')} on {ds.get('accelerator')!r}, {ds.get('compatible_ops_from')}"
    result.note("probe", seen_probe, expect_probe(version, ds))
    # hook: built, registered, proven through DeepSpeed's own load()
    progress(f"{version}: the hook's ops")
    provided = hook_ops(venv, env, progress)
    doc = register.read(site_packages(venv)) or {}
    result.facts["hook"] = [r.__dict__ for r in provided.results]
    wrong = [f"{r.op}: {r.error}" for r in provided.results if not r.ok]
    wrong += [] if provided.registered else ["not registered"]
    wrong += [
        f"registry {k} {doc.get(k)!r}, expected {v!r}"
        for k, v in (("deepspeed", version), ("torch", TORCH_VERSION), ("accelerator", "cpu"))
        if doc.get(k) != v
    ]
    seconds = "; ".join(f"{r.op} {r.seconds or 0:.0f} s" for r in provided.results)
    result.note("hook", f"built, registered, load() ok: {seconds}" if not wrong else "failed", wrong)
    # the probe again: the registered ops are DeepSpeed's installed ops
    after = probe(venv, env)
    result.facts["probe_after_hook"] = after
    installed = sorted(k for k, v in (after.get("installed_ops") or {}).items() if v)
    wrong = [] if installed == sorted(OPS) else [f"installed_ops {installed}, expected {sorted(OPS)}"]
    wrong += [] if after.get("fused_adam_built") is True else ["fused_adam_built is not true"]
    result.note("probe after hook", f"installed: {', '.join(installed) or 'none'}", wrong)
    # verify --check deepspeed_ops: fails because torch is a CPU build, naming this release and its accelerator
    rc, report = verify(venv, env)
    result.facts["verify"] = report
    check = next((c for c in report.get("checks", []) if c.get("id") == "deepspeed_ops"), {})
    want = cpu_torch_detail(version)
    seen = (rc, check.get("status"), check.get("detail"))
    wrong = [] if seen == (1, "fail", want) else [f"exit {rc}: {check or report}"]
    result.note("verify", f"exit {rc}, {check.get('status')}: CPU torch", wrong)


def table(results: list[Result]) -> str:
    """A markdown table: release x column, each cell what was seen (and the problems where any)."""
    lines = ["| release | " + " | ".join(COLUMNS) + " | seconds |", "|---" * (len(COLUMNS) + 2) + "|"]
    for result in results:
        cells = []
        for column in COLUMNS:
            problems = result.problems.get(column) or []
            seen = result.cells.get(column, "not run")
            text = "**FAIL** " + "; ".join(p[-300:] for p in problems) if problems else "ok: " + seen
            cells.append(" ".join(text.replace("|", "/").split()))
        lines.append(f"| {result.release} | " + " | ".join(cells) + f" | {result.seconds:.0f} |")
    return "\n".join(lines)
