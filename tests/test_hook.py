"""The post-install hook: activation scripts sourced in bash, the pre-flight (verify's build checks over the
probe's facts) on fake prefixes with fake nvcc scripts and a fake torch, op build bookkeeping, and the report of
the real GPU-machine run (tests/data/gpu_runs)."""

from __future__ import annotations

import json
import platform
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from envsolver.core import procrun, pystart
from envsolver.hook import activation, build, buildenv, register
from envsolver.hook import run as hook_run
from envsolver.install import prefixmeta
from envsolver.kb import KnowledgeBase, default_kb
from envsolver.resolve import toolchain
from envsolver.verify import checks
from envsolver.verify.checks import Check
from tests.conftest import DATA

# The headers the hook's pre-flight looks for: every fake prefix below has them unless a test removes some.
HEADERS = tuple(h.header for h in default_kb().op_headers)


def _env_after(script: str, prefix: Path, before: dict[str, str]) -> dict[str, str]:
    out = subprocess.run(
        ["bash", "-c", f"{script}; env -0"],
        env={**before, "CONDA_PREFIX": str(prefix)},
        capture_output=True,
        check=True,
    )
    pairs = [item.split("=", 1) for item in out.stdout.decode().split("\0") if "=" in item]
    return {k: v for k, v in pairs if k not in ("_", "SHLVL", "PWD", "OLDPWD")}


@pytest.mark.parametrize(
    "before",
    [
        {"PATH": "/usr/bin:/bin"},
        {"PATH": "/usr/bin:/bin", "CPATH": "/opt/include", "CUDA_HOME": "/usr/local/cuda", "TORCH_CUDA_ARCH_LIST": ""},
    ],
    ids=["unset", "set-and-empty"],
)
def test_activate_then_deactivate_restores_the_environment(tmp_path: Path, before: dict[str, str]) -> None:
    activation.write(tmp_path, "8.0;9.0+PTX", "x86_64-linux")
    on = tmp_path / "etc/conda/activate.d/envsolver.sh"
    off = tmp_path / "etc/conda/deactivate.d/envsolver.sh"
    active = _env_after(f". {on}", tmp_path, before)
    assert active["CUDA_HOME"] == str(tmp_path)
    assert active["TORCH_CUDA_ARCH_LIST"] == "8.0;9.0+PTX"
    assert active["DS_ACCELERATOR"] == "cuda"
    assert active["TORCH_EXTENSIONS_DIR"] == f"{tmp_path}/var/cache/torch_extensions"
    expected_cpath = f"{tmp_path}/targets/x86_64-linux/include"
    assert active["CPATH"] == (expected_cpath + ":/opt/include" if "CPATH" in before else expected_cpath)
    restored = _env_after(f". {on}; . {off}", tmp_path, before)
    baseline = _env_after("true", tmp_path, before)
    assert restored == baseline


def test_print_env_exports(tmp_path: Path) -> None:
    text = activation.exports(tmp_path, "9.0+PTX", "sbsa-linux")
    out = subprocess.run(
        ["bash", "-c", f"{text}\necho $CUDA_HOME $CPATH $TORCH_CUDA_ARCH_LIST"],
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert out.stdout.split() == [str(tmp_path), f"{tmp_path}/targets/sbsa-linux/include", "9.0+PTX"]


def fake_prefix(
    tmp_path: Path,
    nvcc: str | None = "13.0",
    archs: str = "75 80 86 90 100 120",
    headers: tuple[str, ...] = HEADERS,
    gcc: int = 13,
    torch_cuda: str | None = "13.0",
) -> Path:
    """A conda-like prefix whose bin/python is a real interpreter (a venv: sys.prefix is the prefix) with a fake
    torch, a fake nvcc script, the op headers in targets/x86_64-linux/include and a conda g++ script."""
    prefix = tmp_path / "env"
    (prefix / "bin").mkdir(parents=True)
    (prefix / "conda-meta").mkdir()
    base = Path(getattr(sys, "_base_executable", sys.executable)).resolve()
    (prefix / "pyvenv.cfg").write_text(f"home = {base.parent}\ninclude-system-site-packages = false\n")
    (prefix / "bin" / "python").symlink_to(base)
    site = prefix / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages" / "torch"
    site.mkdir(parents=True)
    (site / "__init__.py").write_text(
        f"__version__ = '2.11.0'\nclass version:\n    cuda = {torch_cuda!r}\n"
        "class cuda:\n    get_arch_list = staticmethod(lambda: [])\n    is_available = staticmethod(lambda: False)\n"
    )
    if nvcc:
        arch_text = " ".join(f"compute_{a}" for a in archs.split())
        script = (
            f'#!/bin/sh\nif [ "$1" = "--list-gpu-arch" ]; then for a in {arch_text}; do echo $a; done; '
            f'else echo "Cuda compilation tools, release {nvcc}, V{nvcc}.1"; fi\n'
        )
        (prefix / "bin" / "nvcc").write_text(script)
        (prefix / "bin" / "nvcc").chmod(0o755)
    include = prefix / "targets" / "x86_64-linux" / "include"
    include.mkdir(parents=True)
    for header in headers:
        (include / header).write_text("/* test */\n")
    cxx = prefix / "bin" / f"{platform.machine()}-conda-linux-gnu-c++"
    cxx.write_text(f"#!/bin/sh\necho 'g++ (conda-forge gcc) {gcc}.3.0'\n")
    cxx.chmod(0o755)
    return prefix


BASE = {"PATH": "/usr/bin:/bin"}  # no CUDA_HOME: the build finds nvcc where activation and PATH put it


def probed(prefix: Path, arch: str = "8.0;9.0+PTX", base: dict[str, str] = BASE) -> dict[str, Any]:
    """The hook's probe of `prefix`, as the hook runs it."""
    env = buildenv.environ_for_build(prefix, arch, "x86_64-linux", base, toolkit=False)
    return hook_run.probe(
        prefix, prefix / "bin" / "python", hook_run.Where(arch, "linux-64", "x86_64-linux"), default_kb(), env
    )


def preflight(prefix: Path, arch: str = "8.0;9.0+PTX", base: dict[str, str] = BASE) -> dict[str, Check]:
    """The hook's pre-flight findings on `prefix`, by id (with --no-build: nothing is compiled)."""
    report = hook_run.hook(prefix, default_kb(), None, arch, ("fused_adam",), 1, True, None, base, lambda _: None)
    return {f.id: f for f in report.findings}


def test_healthy_prefix_passes_verifys_build_checks(tmp_path: Path) -> None:
    prefix = fake_prefix(tmp_path)
    findings = preflight(prefix)
    assert list(findings) == list(checks.BUILD)
    assert {i: f.status for i, f in findings.items()} == dict.fromkeys(checks.BUILD, "pass") | {
        "op_libraries": "skip"  # no DeepSpeed in the fake prefix, so its version (and its libraries) are unknown
    }, findings


def test_the_probe_gathers_what_the_build_needs(tmp_path: Path) -> None:
    """Moved from facts.gather: nvcc and its version and archs, torch and its CUDA, headers, the conda g++,
    CUDA_HOME, all from the probe run in the env's python."""
    prefix = fake_prefix(tmp_path, nvcc="12.9", archs="75 80 90", gcc=14)
    facts = probed(prefix)
    assert facts["torch"]["version"] == "2.11.0" and facts["torch"]["cuda"] == "13.0"
    assert facts["nvcc"] == {"path": f"{prefix}/bin/nvcc", "exists": True, "version": "12.9", "archs": [75, 80, 90]}
    assert facts["cuda_home"] == {"path": str(prefix), "how": "CUDA_HOME"}
    assert facts["compiler"]["path"].startswith(f"{prefix}/bin/") and facts["compiler"]["major"] == 14
    include = f"{prefix}/targets/x86_64-linux/include"
    assert facts["headers"] == {h: f"{include}/{h}" for h in HEADERS}
    assert facts["prefix_toolkit"]["complete"] is True and facts["prefix_toolkit"]["activated"] is True
    assert facts["env"]["CPATH"] == include and facts["env"]["TORCH_CUDA_ARCH_LIST"] == "8.0;9.0+PTX"


def test_the_probe_sets_what_the_activation_scripts_set(tmp_path: Path) -> None:
    """The probe's --activate and activation.py agree on CUDA_HOME and CPATH, with and without a CPATH before."""
    prefix = fake_prefix(tmp_path)
    for base in (BASE, {**BASE, "CPATH": "/opt/include", "CUDA_HOME": "/usr/local/cuda"}):
        env = probed(prefix, base=base)["env"]
        scripted = buildenv.environ_for_build(prefix, "8.0;9.0+PTX", "x86_64-linux", base, toolkit=True)
        assert (env["CUDA_HOME"], env["CPATH"]) == (scripted["CUDA_HOME"], scripted["CPATH"])


def test_missing_headers_are_named_with_their_packages(tmp_path: Path) -> None:
    prefix = fake_prefix(
        tmp_path, headers=("cuda_runtime_api.h", "cublas_v2.h", "cublasLt.h", "curand.h", "cuda_profiler_api.h")
    )
    findings = preflight(prefix, "9.0")  # nvcc found on PATH (PREFIX/bin): torch's order without CUDA_HOME
    failed = {i: f for i, f in findings.items() if f.status == "fail"}
    assert set(failed) == {"headers"}
    assert "cusparse.h" in failed["headers"].detail and "cusolverDn.h" in failed["headers"].detail
    assert f"-c conda-forge libcusolver-dev libcusparse-dev cuda-version=13.0, then envsolver hook -p {prefix}" in (
        failed["headers"].fix
    )
    assert findings["prefix_toolkit"].status == "warn"


def test_missing_nvcc(tmp_path: Path) -> None:
    prefix = fake_prefix(tmp_path, nvcc=None)
    finding = preflight(prefix, "9.0", {**BASE, "CUDA_HOME": str(tmp_path / "nowhere")})["nvcc"]
    assert finding.status == "fail" and f"cuda-nvcc cuda-version=13.0, then envsolver hook -p {prefix}" in finding.fix


@pytest.mark.parametrize(
    ("nvcc", "torch_cuda", "status", "phrase", "fix"),
    [
        ("13.0", "13.0", "pass", "=", ""),
        ("12.9", "12.8", "warn", "allow-list", "cuda-nvcc cuda-version=12.8"),
        ("13.2", "13.0", "fail", "no CUDA 13 minor-version allow-list", "cuda-version=13.0 (or DS_SKIP_CUDA_CHECK=1)"),
        ("12.4", "13.0", "fail", "differ in the major", "-c conda-forge cuda-nvcc cuda-version=13.0"),
    ],
)
def test_cuda_version_rules(tmp_path: Path, nvcc: str, torch_cuda: str, status: str, phrase: str, fix: str) -> None:
    prefix = fake_prefix(tmp_path, nvcc=nvcc, torch_cuda=torch_cuda)
    finding = preflight(prefix)["cuda_version_match"]
    assert finding.status == status and phrase in finding.detail
    assert (finding.fix == "") if not fix else (fix in finding.fix and f"-p {prefix}" in finding.fix)
    assert "DS_SKIP_CUDA_CHECK" not in finding.fix or nvcc.split(".")[0] == torch_cuda.split(".")[0]


def test_cpu_only_torch_fails(tmp_path: Path) -> None:
    prefix = fake_prefix(tmp_path, torch_cuda=None)
    finding = preflight(prefix)["torch_cuda_build"]
    assert finding.status == "fail" and "CPU-only" in finding.detail


@pytest.mark.parametrize(("gcc", "status"), [(15, "pass"), (16, "fail")])
def test_host_compiler_range(tmp_path: Path, gcc: int, status: str) -> None:
    prefix = fake_prefix(tmp_path, gcc=gcc)
    finding = preflight(prefix)["host_compiler"]
    assert finding.status == status
    if status == "fail":
        assert "accepts GCC <= 15" in finding.detail and "gxx<16" in finding.fix


def test_no_compiler_fix_is_one_shell_command(kb: KnowledgeBase) -> None:
    """The old pre-flight's `gxx<16` was a shell redirection; the fix quotes it and names the prefix."""
    ctx = checks.Context({"nvcc": {"version": "13.0"}, "python": {"prefix": "/e v", "machine": "aarch64"}}, kb)
    finding = checks.run(ctx, ("host_compiler",))[0]
    assert finding.status == "fail"
    assert finding.fix == "conda install -p '/e v' -c conda-forge 'gxx<16' 'gxx_linux-aarch64<16'"


def test_guides_arch_list_is_corrected_on_cuda13(tmp_path: Path) -> None:
    prefix = fake_prefix(tmp_path, archs="75 80 86 87 88 89 90 100 103 110 120 121")
    report = hook_run.hook(
        prefix, default_kb(), None, "7.0;7.5;8.0;8.6;8.9;9.0", ("fused_adam",), 1, True, None, BASE, lambda _: None
    )
    finding = next(f for f in report.findings if f.id == "torch_cuda_arch_list")
    assert finding.status == "warn" and "without 7.0" in finding.detail
    assert report.arch_list == "7.5;8.0;8.6;8.9;9.0+PTX"
    activate = (prefix / "etc/conda/activate.d/envsolver.sh").read_text()
    assert "export TORCH_CUDA_ARCH_LIST='7.5;8.0;8.6;8.9;9.0+PTX'" in activate  # activation builds what was built


def test_only_unbuildable_archs_is_an_error(tmp_path: Path) -> None:
    prefix = fake_prefix(tmp_path, archs="75 80 90")
    finding = preflight(prefix, "6.0;7.0")["torch_cuda_arch_list"]
    assert finding.status == "fail" and "nvcc cannot build 6.0, 7.0" in finding.detail
    assert "sm_75 to sm_90" in finding.detail and "envsolver make" in finding.fix


def test_arch_support_falls_back_to_the_kb(tmp_path: Path) -> None:
    prefix = fake_prefix(tmp_path, nvcc="12.9", archs="")  # nvcc --list-gpu-arch gives nothing
    assert probed(prefix)["nvcc"]["archs"] is None
    report = hook_run.hook(prefix, default_kb(), None, "7.0;9.0", ("fused_adam",), 1, True, None, BASE, lambda _: None)
    finding = next(f for f in report.findings if f.id == "torch_cuda_arch_list")
    assert finding.status == "pass" and report.arch_list == "7.0;9.0+PTX"


def test_hook_stops_before_compiling_when_preflight_fails(kb: KnowledgeBase, tmp_path: Path) -> None:
    prefix = fake_prefix(tmp_path, headers=("cuda_runtime_api.h",))
    calls: list[list[str]] = []

    def runner(argv: list[str], env: Mapping[str, str]) -> tuple[int, str]:
        calls.append(argv)
        return procrun.run(argv, env)

    report = hook_run.hook(prefix, kb, None, "9.0", build.DEFAULT_OPS, 4, False, None, BASE, lambda _: None, runner)
    assert not report.ok and report.ops == []
    assert not any(str(build.RUNNER) in " ".join(c) for c in calls)
    assert (prefix / "etc/conda/activate.d/envsolver.sh").exists()


def test_a_python_that_cannot_run_the_probe_fails_torch_import(tmp_path: Path) -> None:
    """A python in the prefix that cannot run the probe: torch_import says why, the other build checks skip, the
    hook fails (exit 1)."""
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "python").write_text("#!/bin/sh\necho broken >&2\nexit 3\n")
    (tmp_path / "bin" / "python").chmod(0o755)
    findings = preflight(tmp_path)
    assert findings["torch_import"].status == "fail" and "probe crashed" in findings["torch_import"].detail
    assert "envsolver install conda-lock.yml" in findings["torch_import"].fix
    assert {f.status for i, f in findings.items() if i != "torch_import"} == {"skip"}


def test_hook_needs_an_arch_list(kb: KnowledgeBase, tmp_path: Path) -> None:
    from envsolver.core.errors import BadInputError

    with pytest.raises(BadInputError, match="--arch-list"):
        hook_run.arch_list_and_platform(tmp_path, None, None, default_kb())


def test_hook_with_an_explicit_lock_asks_for_the_arch_list(tmp_path: Path) -> None:
    """An explicit lock carries no envsolver metadata: the hook says so instead of failing inside conda-lock."""
    from envsolver.core.errors import BadInputError

    lock = tmp_path / "conda-linux-64.lock"
    lock.write_text("# platform: linux-64\n@EXPLICIT\nhttps://h/c/linux-64/pkg-1.0-h1_0.conda#" + "a" * 32 + "\n")
    with pytest.raises(BadInputError, match="--arch-list"):
        hook_run.arch_list_and_platform(tmp_path, lock, None, default_kb())
    assert hook_run.arch_list_and_platform(tmp_path, lock, "8.0", default_kb()) == hook_run.Where(
        "8.0", "linux-64", "x86_64-linux"
    )


def test_hook_reads_the_metadata_install_kept(tmp_path: Path) -> None:
    prefixmeta.save(tmp_path, "linux-aarch64", {"envsolver_torch_cuda_arch_list": "9.0+PTX"})
    assert hook_run.arch_list_and_platform(tmp_path, None, None, default_kb()) == hook_run.Where(
        "9.0+PTX", "linux-aarch64", "sbsa-linux"
    )


def test_parsers() -> None:
    elf = "ELF file    1: fused_adam.1.sm_75.cubin\nELF file    2: fused_adam.2.sm_90.cubin\n"
    assert build.parse_elf_list(elf) == (75, 90)
    log = "In file included from x.cu:1:\n/env/include/ATen/cuda/CUDAContextLight.h:8:10: fatal error: cusparse.h: No"
    assert "fatal error: cusparse.h" in toolchain.compiler_line(log)


def test_gpu_machine_run_report() -> None:
    """The H200 run recorded in tests/data/gpu_runs (bench/gpu_hook_run.sh): ops proven, AdamW matched."""
    for name, archs in (("hook-9.0.json", [90]), ("hook-7.0_7.5_8.0_8.6_8.9_9.0.json", [75, 80, 86, 89, 90])):
        doc = json.loads((DATA / "gpu_runs" / name).read_text())
        assert doc["ok"] is True
        ops = {o["op"]: o for o in doc["ops"]}
        assert set(ops) == {"fused_adam", "cpu_adam", "fused_lamb"}
        assert ops["fused_adam"]["sass"] == archs and ops["fused_lamb"]["sass"] == archs
        assert doc["gpu_check"]["ok"] is True and doc["gpu_check"]["max_abs_diff"] <= 1e-5
    guides = json.loads((DATA / "gpu_runs" / "hook-7.0_7.5_8.0_8.6_8.9_9.0.json").read_text())
    assert guides["torch_cuda_arch_list"] == "7.5;8.0;8.6;8.9;9.0+PTX"
    rerun = json.loads((DATA / "gpu_runs" / "hook-9.0-rerun.json").read_text())
    assert rerun["unchanged"] == ["fused_adam", "cpu_adam", "fused_lamb"]


@pytest.mark.parametrize("run", ["run4", "run5"])
def test_gpu_machine_run_of_the_ops_stage(run: str) -> None:
    """The H200 runs of bench/gpu_hook_ops.sh (tests/data/gpu_runs/hook-ops): the cold hook built and proved the
    ops through DeepSpeed's load() from the prefix, the re-run changed nothing, the second env took every op from
    the op cache; DeepSpeed's own op tests passed against them with nothing JIT-built."""
    base = DATA / "gpu_runs" / "hook-ops" / run
    cold, rerun, cached = (json.loads((base / f"hook-{n}.json").read_text()) for n in ("cold", "rerun", "cached"))
    wanted = ["fused_adam", "cpu_adam", "fused_lamb"]
    assert [o["op"] for o in cold["ops"]] == wanted and cold["ok"] and cold["torch_cuda_arch_list"] == "9.0+PTX"
    for doc, source in ((cold, "built"), (cached, "cache")):
        assert all(o["ok"] and o["source"] == source for o in doc["ops"])
        assert all(o["file"].startswith(doc["prefix"] + "/lib/envsolver-ops/") for o in doc["ops"])
        assert [o["sass"] for o in doc["ops"]] == [[90], None, [90]]
        assert all(o["load_seconds"] < 0.05 for o in doc["ops"])
    assert cold["gpu_check"]["ok"] and cold["gpu_check"]["max_abs_diff"] <= 1e-5
    assert rerun["unchanged"] == wanted and rerun["ok"]
    if run == "run5":  # since the all-cached path: nothing compiles, so no pre-flight
        assert cached["checks"] == []
    times = dict(line.split(" ", 1) for line in (base / "times.txt").read_text().splitlines())
    assert times["hook_rerun"].startswith("rc=0") and float(times["hook_rerun"].split("wall=")[1]) <= 1.0
    if run == "run4":
        tests = (base / "deepspeed-tests.txt").read_text()
        assert "80 passed, 7 skipped" in tests and " failed" not in tests
        assert times["deepspeed_tests"].endswith("empty_t files after: 0")
        constructs = [json.loads(line) for line in (base / "construct-hook.jsonl").read_text().splitlines()]
        assert all(set(r["libraries"]) == set(wanted) for r in constructs)
        assert all(
            path.startswith("/tmp/envA/lib/envsolver-ops/") for r in constructs for path in r["libraries"].values()
        )


def test_cli_hook_print_env_and_bad_input(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from envsolver.cli.main import main

    out = CliRunner().invoke(main, ["hook", "-p", str(tmp_path), "--arch-list", "9.0+PTX", "--print-env"])
    assert out.exit_code == 0 and "export TORCH_CUDA_ARCH_LIST=9.0+PTX\n" in out.output, out.output
    missing = CliRunner().invoke(main, ["hook", "-p", str(tmp_path)])
    assert missing.exit_code == 2 and "--arch-list" in missing.output, missing.output
    bad_op = CliRunner().invoke(main, ["hook", "-p", str(tmp_path), "--arch-list", "9.0", "--ops", "warp_drive"])
    assert bad_op.exit_code == 2 and "unknown op" in bad_op.output, bad_op.output


def _fake_ops_runner(
    prefix: Path, sass_by_mode: dict[str, str], calls: list[list[str]], installed: tuple[str, ...] = ("fused_adam",)
) -> procrun.Runner:
    """Answers op_runner and cuobjdump calls like a prefix whose DeepSpeed shipped `installed` prebuilt."""
    site = prefix / "lib" / "python3.12" / "site-packages"

    def runner(argv: list[str], env: Mapping[str, str]) -> tuple[int, str]:
        if str(build.RUNNER) in argv:  # the env's python: isolated (core/pystart), the flag left out here
            assert argv[1:2] == list(pystart.FLAGS), f"op_runner.py started without -I: {argv}"
            argv = [argv[0], *argv[2:]]
        calls.append(argv)
        if len(argv) >= 3 and argv[1] == str(build.RUNNER):
            mode, op = argv[2], argv[3] if len(argv) > 3 else ""
            if mode == "key":
                site.mkdir(parents=True, exist_ok=True)
                facts = {
                    "python": "3.12.3",
                    "ext_suffix": ".so",
                    "site": str(site),
                    "torch_version_py": "2.11.0",
                    "deepspeed_info": "installed_ops={'fused_adam': True}",
                    "deepspeed_tree": "d" * 64,
                    "nvcc": "release 13.0",
                    "cxx": "g++ 13",
                    "deepspeed_installed_ops": list(installed),
                }
                return 0, json.dumps(facts)
            if mode == "build":
                doc = {"op": op, "ok": True, "seconds": 0.1, "file": f"/x/build/{op}.so", "prebuilt": True}
                return 0, json.dumps(doc)
            if mode == "install":
                lib = tmp_ext(prefix) / f"{op}_op.so"
                lib.write_bytes(b"rebuilt")
                doc = {
                    "op": op,
                    "ok": True,
                    "seconds": 40.0,
                    "file": str(lib),
                    "module": f"deepspeed.ops.adam.{op}_op",
                    "deepspeed": "0.19.8",
                    "torch": "2.11.0",
                    "torch_info": {"version": "2.11", "cuda_version": "13.0"},
                }
                return 0, json.dumps(doc)
            if mode == "registered":
                doc = register.read(site) or {"ops": {}}
                names = [a for a in argv[3:] if not a.startswith("--")]
                rows = [{"op": o, "ok": True, "file": doc["ops"][o]["file"], "load_seconds": 0.01} for o in names]
                return 0, json.dumps({"ops": rows})
            if mode == "load":
                return 0, json.dumps({"op": op, "ok": True, "load_seconds": 0.01})
            return 0, json.dumps({"ok": True, "max_abs_diff": 0.0})
        if argv[0].endswith("cuobjdump"):
            return 0, sass_by_mode["build" if argv[-1].startswith("/x/build/") else "install"]
        return procrun.run(argv, env)

    return runner


def tmp_ext(prefix: Path) -> Path:
    ext = prefix.parent / "ext"
    ext.mkdir(exist_ok=True)
    return ext


@pytest.mark.parametrize(
    ("prebuilt_sass", "rebuilt"),
    [
        ("ELF file    1: fused_adam_op.1.sm_90.cubin\n", False),
        ("ELF file    1: fused_adam_op.1.sm_80.cubin\n", True),
    ],
    ids=["prebuilt-covers-targets", "prebuilt-misses-a-target"],
)
def test_prebuilt_ops_are_proven_and_rebuilt_only_when_short(
    kb: KnowledgeBase, tmp_path: Path, prebuilt_sass: str, rebuilt: bool
) -> None:
    """DeepSpeed's own prebuilt op (conda-forge's) is kept when it has SASS for every target arch; otherwise the
    hook builds its own and registers it (DeepSpeed's load() then imports the hook's)."""
    prefix = fake_prefix(tmp_path)
    (prefix / "bin" / "cuobjdump").write_text("#!/bin/sh\n")
    (prefix / "bin" / "cuobjdump").chmod(0o755)
    calls: list[list[str]] = []
    runner = _fake_ops_runner(
        prefix, {"build": prebuilt_sass, "install": "ELF file    1: fused_adam_op.1.sm_90.cubin\n"}, calls
    )
    report = hook_run.hook(
        prefix,
        kb,
        None,
        "9.0",
        ("fused_adam",),
        4,
        False,
        None,
        {**BASE, "CUDA_VISIBLE_DEVICES": ""},
        lambda _: None,
        runner,
    )
    assert report.ok, report.ops
    op = report.ops[0]
    assert op.sass == (90,)
    installs = [c for c in calls if len(c) > 2 and c[1] == str(build.RUNNER) and c[2] == "install"]
    assert bool(installs) == rebuilt
    assert op.source == ("built" if rebuilt else "prebuilt")
    registry = register.read(prefix / "lib" / "python3.12" / "site-packages")
    assert (registry is not None) == rebuilt


def test_a_rerun_with_nothing_changed_starts_no_torch_and_builds_nothing(kb: KnowledgeBase, tmp_path: Path) -> None:
    """Issue 12: the no-op re-run is decided from recorded state (op keys, libraries, registry) before torch starts;
    a changed nvcc makes it a real run again."""
    prefix = fake_prefix(tmp_path)
    (prefix / "bin" / "cuobjdump").write_text("#!/bin/sh\n")
    (prefix / "bin" / "cuobjdump").chmod(0o755)
    calls: list[list[str]] = []
    sass = "ELF file    1: fused_adam_op.1.sm_90.cubin\n"
    runner = _fake_ops_runner(prefix, {"build": sass, "install": sass}, calls, installed=())

    def hook() -> hook_run.HookReport:
        env = {**BASE, "CUDA_VISIBLE_DEVICES": ""}
        return hook_run.hook(prefix, kb, None, "9.0", ("fused_adam",), 4, False, None, env, lambda _: None, runner)

    first = hook()
    assert first.ok and first.ops[0].source == "built" and first.unchanged == ()
    torch_init = next(prefix.glob("lib/python*/site-packages/torch/__init__.py"))
    log = tmp_path / "torch-imported"
    torch_init.write_text(f"open({str(log)!r}, 'a').write('x')\n" + torch_init.read_text())
    calls.clear()
    again = hook()
    assert again.ok and again.unchanged == ("fused_adam",) and again.ops[0].source == "unchanged"
    assert again.ops[0].file == first.ops[0].file
    assert [c[2] for c in calls if len(c) > 2 and c[1] == str(build.RUNNER)] == ["key"]
    assert not log.exists()  # torch never imported
    (prefix / "bin" / "nvcc").write_text((prefix / "bin" / "nvcc").read_text())  # same nvcc: still a no-op
    assert hook().unchanged == ("fused_adam",)
    first_lib = Path(str(first.ops[0].file))
    first_lib.write_bytes(b"edited")  # a damaged library: a real run, which restores it
    calls.clear()
    repaired = hook()
    assert repaired.ok and repaired.unchanged == () and log.exists()
    assert any(c[2] == "install" for c in calls if len(c) > 2 and c[1] == str(build.RUNNER))


def test_a_second_env_whose_ops_are_all_cached_starts_no_torch_before_the_proof(
    kb: KnowledgeBase, tmp_path: Path
) -> None:
    """Issue 12: with every op in the shared op cache nothing is compiled, so the pre-flight (which starts torch)
    is skipped; the ops are copied in with their SHA-256 and registered. Issue 20: each entry was written by a
    trusted user (this one) and proven through DeepSpeed's load() when it was stored, so no process loads it
    again: the hook starts nothing after the key facts."""
    sass = "ELF file    1: fused_adam_op.1.sm_90.cubin\n"
    reports, logs, modes = [], [], []
    for name in ("a", "b"):
        prefix = fake_prefix(tmp_path / name)
        (prefix / "bin" / "cuobjdump").write_text("#!/bin/sh\n")
        (prefix / "bin" / "cuobjdump").chmod(0o755)
        torch_init = next(prefix.glob("lib/python*/site-packages/torch/__init__.py"))
        logs.append(tmp_path / f"torch-imported-{name}")
        torch_init.write_text(f"open({str(logs[-1])!r}, 'a').write('x')\n" + torch_init.read_text())
        calls: list[list[str]] = []
        runner = _fake_ops_runner(prefix, {"build": sass, "install": sass}, calls, installed=())
        env = {**BASE, "CUDA_VISIBLE_DEVICES": ""}
        reports.append(
            hook_run.hook(
                prefix,
                kb,
                None,
                "9.0",
                ("fused_adam",),
                4,
                False,
                None,
                env,
                lambda _: None,
                runner,
                op_cache=tmp_path / "cache",
            )
        )
        modes.append([" ".join(c[2:4]) for c in calls if len(c) > 2 and c[1] == str(build.RUNNER)])
    first, second = reports
    assert first.ok and first.ops[0].source == "built" and logs[0].exists()
    assert second.ok and second.ops[0].source == "cache" and second.findings == []
    # no install, no pre-flight probe, no proof process
    assert modes[0] == ["key", "install fused_adam", "registered fused_adam"]
    assert modes[1] == ["key"], modes[1]
    assert not logs[1].exists()  # torch was not started by envsolver (the fake proof does not import it)
    assert second.arch_list == first.arch_list == "9.0+PTX"  # the list the cached ops were built for
    assert (tmp_path / "b" / "env" / "etc" / "conda" / "activate.d" / "envsolver.sh").exists()


def test_a_failed_build_names_the_compiler_line_and_leaves_nothing(tmp_path: Path) -> None:
    ext = tmp_path / "ext"
    (ext / "fused_adam").mkdir(parents=True)
    (ext / "fused_adam" / "multi_tensor_adam.cuda.o").write_text("partial")
    log = (
        "[1/3] nvcc ... -c multi_tensor_adam.cu\nIn file included from x.h:1:\n"
        "/env/include/ATen/cuda/CUDAContextLight.h:8:10: fatal error: cusparse.h: No such file or directory\n"
    )

    def runner(argv: list[str], env: dict[str, str]) -> tuple[int, str]:
        return 1, log + json.dumps({"ok": False, "error": "RuntimeError: Error building extension 'fused_adam'"})

    results = build.build_ops(
        Path("python"), ("fused_adam",), {"TORCH_EXTENSIONS_DIR": str(ext)}, 2, lambda _: None, runner
    )
    assert not results[0].ok
    assert results[0].error is not None and "fatal error: cusparse.h" in results[0].error
    assert not (ext / "fused_adam").exists()


def _files_under(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*"))


def test_cli_hook_refuses_what_it_knows_is_bad_before_writing(tmp_path: Path) -> None:
    """--jobs 0, an arch-suffixed --arch-list (DeepSpeed's builder cannot parse it) and a prefix without python are
    refused with exit 2 before any file is written; the arch list the refusal suggests is then taken."""
    import re

    from click.testing import CliRunner

    from envsolver.cli.main import main

    empty = tmp_path / "empty"
    empty.mkdir()
    no_python = CliRunner().invoke(main, ["hook", "-p", str(empty), "--arch-list", "9.0", "--no-build"])
    assert no_python.exit_code == 2 and "no python at" in no_python.output, no_python.output
    assert "envsolver install conda-lock.yml -p PREFIX" in no_python.output, no_python.output
    assert _files_under(empty) == [], f"the refused hook wrote {_files_under(empty)}"
    prefix = fake_prefix(tmp_path)
    before = _files_under(prefix)
    jobs = CliRunner().invoke(main, ["hook", "-p", str(prefix), "--arch-list", "9.0", "--jobs", "0"])
    assert jobs.exit_code == 2 and "--jobs 0" in jobs.output and "--jobs 1" in jobs.output, jobs.output
    suffixed = CliRunner().invoke(main, ["hook", "-p", str(prefix), "--arch-list", "8.0;9.0a", "--no-build"])
    assert suffixed.exit_code == 2 and "cannot parse arch suffixes (9.0a" in suffixed.output, suffixed.output
    assert _files_under(prefix) == before, "a refused hook wrote files"
    fix = re.search(r"Pass plain major.minor entries: --arch-list '([^']+)'", suffixed.output)
    assert fix is not None and fix.group(1) == "8.0;9.0+PTX", suffixed.output
    taken = CliRunner().invoke(main, ["hook", "-p", str(prefix), "--arch-list", fix.group(1), "--no-build"])
    assert taken.exit_code == 0 and "TORCH_CUDA_ARCH_LIST=8.0;9.0+PTX" in taken.output, taken.output
