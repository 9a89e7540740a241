"""The post-install hook: activation scripts sourced in bash, pre-flight rules on fake prefixes with fake nvcc
scripts, op build bookkeeping, and the report of the real GPU-machine run (tests/data/gpu_runs)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from envsolver import prefixmeta
from envsolver.hook import activation, build, facts, preflight
from envsolver.hook import run as hook_run
from envsolver.kb import KnowledgeBase, default_kb
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
    prefix = tmp_path / "env"
    (prefix / "bin").mkdir(parents=True)
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
    doc = json.dumps({"torch": "2.11.0", "cuda": torch_cuda})
    (prefix / "bin" / "python").write_text(f"#!/bin/sh\necho '{doc}'\n")
    (prefix / "bin" / "python").chmod(0o755)
    (prefix / "bin" / "x86_64-conda-linux-gnu-c++").write_text(f"#!/bin/sh\necho 'g++ (conda-forge gcc) {gcc}.3.0'\n")
    (prefix / "bin" / "x86_64-conda-linux-gnu-c++").chmod(0o755)
    return prefix


def gather(prefix: Path, arch: str = "8.0;9.0+PTX") -> facts.Facts:
    env = facts.environ_for_build(prefix, arch, "x86_64-linux", {"PATH": os.environ["PATH"]})
    return facts.gather(prefix, prefix / "bin" / "python", HEADERS, "x86_64-linux", env)


def statuses(findings: list[preflight.Finding]) -> dict[str, str]:
    return {f.id: f.status for f in findings}


def test_healthy_prefix_passes(kb: KnowledgeBase, tmp_path: Path) -> None:
    prefix = fake_prefix(tmp_path)
    findings, fixed = preflight.run_all(gather(prefix), kb, "8.0;9.0+PTX", str(prefix))
    assert set(statuses(findings).values()) == {"ok"}, findings
    assert fixed == "8.0;9.0+PTX"


def test_missing_headers_are_named_with_their_packages(kb: KnowledgeBase, tmp_path: Path) -> None:
    prefix = fake_prefix(
        tmp_path, headers=("cuda_runtime_api.h", "cublas_v2.h", "cublasLt.h", "curand.h", "cuda_profiler_api.h")
    )
    findings, _ = preflight.run_all(gather(prefix), kb, "9.0", str(prefix))
    failed = {f.id: f for f in findings if f.status == "fail"}
    assert set(failed) == {"header:cusparse.h", "header:cusolverDn.h"}
    assert "libcusparse-dev cuda-version=13.0" in failed["header:cusparse.h"].fix
    assert "libcusolver-dev" in failed["header:cusolverDn.h"].fix


def test_missing_nvcc(kb: KnowledgeBase, tmp_path: Path) -> None:
    prefix = fake_prefix(tmp_path, nvcc=None)
    env = {"PATH": os.environ["PATH"], "CUDA_HOME": str(tmp_path / "nowhere")}
    f = facts.gather(prefix, prefix / "bin" / "python", HEADERS, "x86_64-linux", env)
    finding = preflight.check_nvcc(f, str(prefix))
    assert finding.status == "fail" and "cuda-nvcc cuda-version=13.0" in finding.fix


@pytest.mark.parametrize(
    ("nvcc", "torch_cuda", "status", "phrase", "fix"),
    [
        ("13.0", "13.0", "ok", "=", ""),
        ("12.9", "12.8", "warn", "allow-list", "cuda-nvcc cuda-version=12.8"),
        ("13.2", "13.0", "fail", "no CUDA 13 minor-version allow-list", "cuda-version=13.0 (or DS_SKIP_CUDA_CHECK=1)"),
        ("12.4", "13.0", "fail", "differ in the major", "-c conda-forge cuda-nvcc cuda-version=13.0"),
    ],
)
def test_cuda_version_rules(
    kb: KnowledgeBase, tmp_path: Path, nvcc: str, torch_cuda: str, status: str, phrase: str, fix: str
) -> None:
    prefix = fake_prefix(tmp_path, nvcc=nvcc, torch_cuda=torch_cuda)
    finding = preflight.check_cuda_match(gather(prefix), kb, str(prefix))
    assert finding.status == status and phrase in finding.detail
    assert (finding.fix == "") if not fix else (fix in finding.fix and f"-p {prefix}" in finding.fix)
    assert "DS_SKIP_CUDA_CHECK" not in finding.fix or nvcc.split(".")[0] == torch_cuda.split(".")[0]


def test_cpu_only_torch_fails(kb: KnowledgeBase, tmp_path: Path) -> None:
    prefix = fake_prefix(tmp_path, torch_cuda=None)
    finding = preflight.check_torch(gather(prefix))
    assert finding.status == "fail" and "CPU-only" in finding.detail


@pytest.mark.parametrize(("gcc", "status"), [(15, "ok"), (16, "fail")])
def test_host_compiler_range(kb: KnowledgeBase, tmp_path: Path, gcc: int, status: str) -> None:
    prefix = fake_prefix(tmp_path, gcc=gcc)
    finding = preflight.check_host_compiler(gather(prefix), kb)
    assert finding.status == status
    if status == "fail":
        assert "accepts GCC <= 15" in finding.detail and "gxx<16" in finding.fix


def test_guides_arch_list_is_corrected_on_cuda13(kb: KnowledgeBase, tmp_path: Path) -> None:
    prefix = fake_prefix(tmp_path, archs="75 80 86 87 88 89 90 100 103 110 120 121")
    finding, fixed = preflight.check_arch_list(gather(prefix), kb, "7.0;7.5;8.0;8.6;8.9;9.0")
    assert finding.status == "warn" and "dropped 7.0" in finding.detail
    assert fixed == "7.5;8.0;8.6;8.9;9.0+PTX"


def test_only_unbuildable_archs_is_an_error(kb: KnowledgeBase, tmp_path: Path) -> None:
    prefix = fake_prefix(tmp_path, archs="75 80 90")
    finding, _ = preflight.check_arch_list(gather(prefix), kb, "6.0;7.0")
    assert finding.status == "fail" and "builds none of" in finding.detail


def test_arch_support_falls_back_to_the_kb(kb: KnowledgeBase, tmp_path: Path) -> None:
    prefix = fake_prefix(tmp_path, nvcc="12.9", archs="")  # nvcc --list-gpu-arch gives nothing
    f = gather(prefix)
    assert f.nvcc_archs is None
    finding, fixed = preflight.check_arch_list(f, kb, "7.0;9.0")
    assert finding.status == "ok" and fixed == "7.0;9.0+PTX"


def test_hook_stops_before_compiling_when_preflight_fails(kb: KnowledgeBase, tmp_path: Path) -> None:
    prefix = fake_prefix(tmp_path, headers=("cuda_runtime_api.h",))
    calls: list[list[str]] = []

    def runner(argv: list[str], env: dict[str, str]) -> tuple[int, str]:
        calls.append(argv)
        return facts.run(argv, env)

    report = hook_run.hook(
        prefix, kb, None, "9.0", build.DEFAULT_OPS, 4, False, None, {"PATH": os.environ["PATH"]}, lambda _: None, runner
    )
    assert not report.ok and report.ops == []
    assert not any(str(build.RUNNER) in " ".join(c) for c in calls)
    assert (prefix / "etc/conda/activate.d/envsolver.sh").exists()


def test_hook_needs_an_arch_list(kb: KnowledgeBase, tmp_path: Path) -> None:
    from envsolver.errors import BadInputError

    with pytest.raises(BadInputError, match="--arch-list"):
        hook_run.arch_list_and_platform(tmp_path, None, None, default_kb())


def test_hook_with_an_explicit_lock_asks_for_the_arch_list(tmp_path: Path) -> None:
    """An explicit lock carries no envsolver metadata: the hook says so instead of failing inside conda-lock."""
    from envsolver.errors import BadInputError

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


def test_build_bookkeeping_skips_what_is_built(tmp_path: Path) -> None:
    so = tmp_path / "fused_adam.so"
    so.write_text("x")
    key = {"arch_list": "9.0+PTX", "torch": "2.11.0", "torch_cuda": "13.0", "nvcc": "13.0"}
    build.save_state(tmp_path / "state.json", key, [build.OpResult("fused_adam", True, 48.1, str(so), None, (90,))])
    assert set(build.load_state(tmp_path / "state.json", key)) == {"fused_adam"}
    assert build.load_state(tmp_path / "state.json", {**key, "arch_list": "8.0+PTX"}) == {}
    so.unlink()
    assert build.load_state(tmp_path / "state.json", key) == {}


def test_parsers() -> None:
    assert facts.parse_nvcc_version("Cuda compilation tools, release 13.0, V13.0.88") == "13.0"
    assert facts.parse_gcc_major("g++ (Ubuntu 13.3.0-6ubuntu2~24.04.1) 13.3.0\nCopyright") == 13
    assert facts.parse_gpu_archs("compute_75\ncompute_80\ncompute_90\n") == (75, 80, 90)
    elf = "ELF file    1: fused_adam.1.sm_75.cubin\nELF file    2: fused_adam.2.sm_90.cubin\n"
    assert build.parse_elf_list(elf) == (75, 90)
    log = "In file included from x.cu:1:\n/env/include/ATen/cuda/CUDAContextLight.h:8:10: fatal error: cusparse.h: No"
    assert "fatal error: cusparse.h" in build.compiler_line(log)


def test_this_machine_preflight_names_cusparse(kb: KnowledgeBase, tmp_path: Path) -> None:
    """The dev/CI machine's /usr/local/cuda has nvcc 13.0 and cuda.h but no cusparse.h."""
    home = Path("/usr/local/cuda")
    if not (home / "bin" / "nvcc").exists() or (home / "include" / "cusparse.h").exists():
        pytest.skip("needs a /usr/local/cuda with nvcc and without cusparse.h")
    prefix = tmp_path / "venv"
    prefix.mkdir()
    env = {"PATH": os.environ["PATH"]}
    f = facts.gather(prefix, Path("/nonexistent/python"), HEADERS, "x86_64-linux", env)
    failed = {x.id: x for x in preflight.check_headers(f, kb, str(prefix)) if x.status == "fail"}
    assert "header:cusparse.h" in failed and "libcusparse-dev" in failed["header:cusparse.h"].fix


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


def test_cli_hook_print_env_and_bad_input(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from envsolver.cli import main

    out = CliRunner().invoke(main, ["hook", "-p", str(tmp_path), "--arch-list", "9.0+PTX", "--print-env"])
    assert out.exit_code == 0 and "export TORCH_CUDA_ARCH_LIST=9.0+PTX\n" in out.output
    missing = CliRunner().invoke(main, ["hook", "-p", str(tmp_path)])
    assert missing.exit_code == 2 and "--arch-list" in missing.output
    bad_op = CliRunner().invoke(main, ["hook", "-p", str(tmp_path), "--arch-list", "9.0", "--ops", "warp_drive"])
    assert bad_op.exit_code == 2 and "unknown op" in bad_op.output


def _fake_ops_runner(sass_by_mode: dict[str, str], calls: list[list[str]]) -> facts.Runner:
    """Answers op_runner and cuobjdump calls like a prefix whose DeepSpeed shipped prebuilt ops."""

    def runner(argv: list[str], env: dict[str, str]) -> tuple[int, str]:
        calls.append(argv)
        if len(argv) >= 3 and argv[1] == str(build.RUNNER):
            mode, op = argv[2], argv[3] if len(argv) > 3 else ""
            if mode in ("build", "jit"):
                doc = {
                    "op": op,
                    "ok": True,
                    "seconds": 0.1 if mode == "build" else 40.0,
                    "file": f"/x/{mode}/{op}.so",
                    "prebuilt": mode == "build",
                }
                return 0, json.dumps(doc)
            if mode == "load":
                return 0, json.dumps({"op": op, "ok": True, "load_seconds": 0.01})
            return 0, json.dumps({"ok": True, "max_abs_diff": 0.0})
        if argv[0].endswith("cuobjdump"):
            mode = argv[-1].split("/")[2]
            return 0, sass_by_mode[mode]
        return facts.run(argv, env)

    return runner


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
    prefix = fake_prefix(tmp_path)
    (prefix / "bin" / "cuobjdump").write_text("#!/bin/sh\n")
    (prefix / "bin" / "cuobjdump").chmod(0o755)
    calls: list[list[str]] = []
    runner = _fake_ops_runner({"build": prebuilt_sass, "jit": "ELF file    1: fused_adam.1.sm_90.cubin\n"}, calls)
    report = hook_run.hook(
        prefix,
        kb,
        None,
        "9.0",
        ("fused_adam",),
        4,
        False,
        None,
        {"PATH": os.environ["PATH"], "CUDA_VISIBLE_DEVICES": ""},
        lambda _: None,
        runner,
    )
    assert report.ok
    op = report.ops[0]
    assert op.sass == (90,)
    jit_calls = [c for c in calls if len(c) > 2 and c[1] == str(build.RUNNER) and c[2] == "jit"]
    assert bool(jit_calls) == rebuilt
    assert op.prebuilt is (not rebuilt)


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
