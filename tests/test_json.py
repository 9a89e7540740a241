"""--json on every outcome: each command prints exactly one JSON document on stdout, on success and on failure
(its own error, a bug, click's usage errors, Ctrl-C), and exits 0, 1, 2 or 130. Also how an error's text splits
into its message and its fix."""

from __future__ import annotations

import importlib
import importlib.abc
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from hypothesis import given, settings
from hypothesis import strategies as st

from envsolver.cli import main as cli
from envsolver.cli import render
from envsolver.cli.main import main
from envsolver.core.errors import KINDS, ConflictError, KnowledgeBaseError, split_fix
from envsolver.hook import run as hook_run
from envsolver.install import run as installer
from envsolver.lock import run as lock
from envsolver.verify import run as verify_run
from tests.conda_packages import build_channel
from tests.fuzz import strategies as fs
from tests.test_install import write_lock
from tests.test_verify import healthy

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("ENVSOLVER_GPUS", "ENVSOLVER_DRIVER", "ENVSOLVER_DEBUG"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("ENVSOLVER_CACHE_DIR", str(tmp_path / "cache"))


def run_json(args: list[str]) -> tuple[Result, Any]:
    """Invoke; stdout must be exactly one JSON document (json.loads refuses anything around it)."""
    result = CliRunner().invoke(main, args)
    assert result.exit_code in (0, 1, 2, 130), (result.exit_code, result.output)
    assert isinstance(result.exception, (SystemExit, type(None))), repr(result.exception)
    assert result.stdout.strip(), f"nothing on stdout; stderr: {result.stderr!r}"
    return result, json.loads(result.stdout)


def assert_failure(result: Result, doc: Any, code: int, kind: str) -> dict[str, Any]:
    assert result.exit_code == code, result.output
    assert set(doc) == {"ok", "exit_code", "error"} and doc["ok"] is False and doc["exit_code"] == code
    error: dict[str, Any] = doc["error"]
    rejected = {"rejected"} if kind == "conflict" else set()  # a conflict's builds by reason (test_refusals.py)
    assert set(error) == {"kind", "message", "fix", *rejected} and error["kind"] == kind
    assert error["message"] and "Traceback" not in result.output
    return error


# --- success: each command's own document, with "ok": true --------------------------------------------------


def test_explain_success(tmp_path: Path) -> None:
    result, doc = run_json(["explain", "--gpu", "a100", "--json"])
    assert result.exit_code == 0 and doc["ok"] is True, result.output
    assert doc["torch_cuda_arch_list"] == "8.0+PTX" and "detected" in doc and doc["warnings"]


def test_make_success(tmp_path: Path) -> None:
    result, doc = run_json(["make", "--gpu", "a100", "--no-lock", "--out", str(tmp_path), "--json"])
    assert result.exit_code == 0 and doc["ok"] is True, result.output
    assert doc["files"] == {str(tmp_path / "environment.yml"): "written"} and doc["plan"]["torch_version"]


def test_gpus_success() -> None:
    """gpus --json stays the list it always was (`envsolver gpus --json | jq '.[]'`)."""
    result, doc = run_json(["gpus", "--json"])
    assert result.exit_code == 0 and isinstance(doc, list) and any(g["name"] == "NVIDIA H200" for g in doc)


def test_install_success(tmp_path: Path) -> None:
    lock_path = write_lock(build_channel(tmp_path), tmp_path)
    result, doc = run_json(["install", str(lock_path), "-p", str(tmp_path / "env"), "--no-hook", "--json"])
    assert result.exit_code == 0 and doc["ok"] is True and doc["packages"] == 3 and doc["changed"] is True, (
        result.output
    )


def test_install_with_a_failing_hook_is_ok_false_and_exit_1(tmp_path: Path) -> None:
    lock_path = write_lock(build_channel(tmp_path), tmp_path, custom={"envsolver_torch_cuda_arch_list": "9.0+PTX"})
    result, doc = run_json(["install", str(lock_path), "-p", str(tmp_path / "env"), "--json"])
    assert result.exit_code == 1 and doc["ok"] is False and doc["hook"]["ok"] is False, result.output


def test_hook_report_and_print_env(tmp_path: Path) -> None:
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "python").write_text("#!/bin/sh\nexit 3\n")  # a python the probe cannot run: a FAIL
    (tmp_path / "bin" / "python").chmod(0o755)
    result, doc = run_json(["hook", "-p", str(tmp_path), "--arch-list", "8.0", "--no-build", "--json"])
    assert result.exit_code == 1 and doc["ok"] is False and doc["torch_cuda_arch_list"].startswith("8.0"), result.output
    result, doc = run_json(["hook", "-p", str(tmp_path), "--arch-list", "9.0+PTX", "--print-env", "--json"])
    assert result.exit_code == 0 and doc["ok"] is True and doc["torch_cuda_arch_list"] == "9.0+PTX", result.output
    assert "export TORCH_CUDA_ARCH_LIST=9.0+PTX\n" in doc["exports"]


def test_verify_success(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(verify_run, "probe", lambda *a, **k: healthy())
    result, doc = run_json(["verify", "--python", sys.executable, "--check", "shm", "--check", "nvcc", "--json"])
    assert result.exit_code == 0 and doc["ok"] is True and [c["id"] for c in doc["checks"]] == ["nvcc", "shm"]


# --- failure: {"ok": false, "exit_code", "error": {"kind", "message", "fix"}} -----------------------------------


def test_explain_unknown_gpu() -> None:
    result, doc = run_json(["explain", "--gpu", "a1000", "--json"])
    error = assert_failure(result, doc, 2, "unknown_gpu")
    assert error["message"] == "unknown GPU 'a1000'. Closest known names: 'a100', 'a6000', 'a5000'."
    assert error["fix"] == "Run `envsolver gpus` for the full table and pass one of its names or aliases to --gpu."
    assert "error: unknown GPU 'a1000'" in result.stderr  # the human line stays on stderr


def test_explain_conflict_exits_1() -> None:
    result, doc = run_json(["explain", "--gpu", "rtx5090", "--driver", "550.54.14", "--json"])
    error = assert_failure(result, doc, 1, "conflict")
    assert (
        error["fix"]
        == "upgrade the driver to 570.26 or newer (`--driver 570.26` gives torch 2.13.0 cu129 with CUDA 12.9)."
    )
    assert error["message"].endswith("driver 550.54.14 supports CUDA <= 12.4.")


def test_make_bad_input(tmp_path: Path) -> None:
    args = ["make", "--gpu", "a100", "--offline", "--channel", "file:///x", "--out", str(tmp_path), "--json"]
    result, doc = run_json(args)
    error = assert_failure(result, doc, 2, "bad_input")
    assert error == {
        "kind": "bad_input",
        "message": "--offline and --channel exclude each other.",
        "fix": "Pass one of them.",
    }


def test_make_refuses_hand_edits(tmp_path: Path) -> None:
    assert CliRunner().invoke(main, ["make", "--gpu", "a100", "--no-lock", "--out", str(tmp_path)]).exit_code == 0
    (tmp_path / "environment.yml").write_text("# mine\n")
    result, doc = run_json(["make", "--gpu", "a100", "--no-lock", "--out", str(tmp_path), "--json"])
    error = assert_failure(result, doc, 2, "bad_input")
    assert error["fix"] == "Move your changes elsewhere, or pass --force to overwrite it."


def test_make_solve_conflict_names_the_snapshot(tmp_path: Path) -> None:
    """torch 2.13.0 cu129 (Python 3.12 only in the snapshot) does not solve there: no msgpack-python for 3.12."""
    out = tmp_path / "out"
    result, doc = run_json(["make", "--gpu", "a100", "--torch", "2.13", "--offline", "--out", str(out), "--json"])
    error = assert_failure(result, doc, 1, "conflict")
    assert "bundled snapshot" in error["message"] and "msgpack-python for Python 3.12" in error["message"], error
    assert error["fix"] == (
        "`--torch 2.12.0` gives torch 2.12.0 cu129 with CUDA 12.9; `--no-deepspeed` gives torch 2.13.0 cu129 with "
        "CUDA 12.9."
    ), error
    assert not out.exists()


def test_gpus_knowledge_base_error(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken() -> None:
        raise KnowledgeBaseError(["gpus.yaml row 3: missing key 'source'"])

    monkeypatch.setattr(cli, "default_kb", broken)
    result, doc = run_json(["gpus", "--json"])
    error = assert_failure(result, doc, 2, "knowledge_base")
    assert error["fix"] is not None and error["fix"].startswith("Fix the rows above in envsolver/kb/data/")


def test_install_missing_lock(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yml"
    result, doc = run_json(["install", str(missing), "-p", str(tmp_path / "env"), "--json"])
    error = assert_failure(result, doc, 2, "bad_input")
    assert error["message"] == f"cannot read lock {str(missing)!r}: No such file or directory."
    assert error["fix"] == "Pass the path of a conda-lock.yml or conda-<platform>.lock written by envsolver make."


def test_install_tampered_archive_is_integrity(tmp_path: Path) -> None:
    channel = build_channel(tmp_path)
    lock_path = write_lock(channel, tmp_path)
    archive = channel / "linux-64" / "tiny-app-0.3-h0_0.tar.bz2"
    archive.write_bytes(archive.read_bytes() + b"extra")
    result, doc = run_json(["install", str(lock_path), "-p", str(tmp_path / "env"), "--json"])
    error = assert_failure(result, doc, 2, "integrity")
    assert error["fix"] == "Fetch it again from the original channel or index, or check the mirror."


def test_hook_without_an_arch_list(tmp_path: Path) -> None:
    result, doc = run_json(["hook", "-p", str(tmp_path), "--json"])
    error = assert_failure(result, doc, 2, "bad_input")
    assert error["fix"] is not None and "--arch-list" in error["fix"]


def test_verify_without_python(tmp_path: Path) -> None:
    result, doc = run_json(["verify", "-p", str(tmp_path / "nope"), "--json"])
    error = assert_failure(result, doc, 2, "verify")
    assert error["fix"] == "Pass an environment prefix (-p) or --python PATH."


@pytest.mark.parametrize(
    ("raised", "code", "kind", "phrase"),
    [
        (RuntimeError("boom at http://alice:S3CRET@host/t/S3CRET/x"), 2, "internal", "internal error (RuntimeError"),
        (PermissionError(13, "Permission denied", "/srv/t/x"), 2, "io", "Permission denied ('/srv/t/x')"),
        (ConflictError("no stack, see https://bob:S3CRET@mirror/c"), 1, "conflict", "https://***@mirror/c"),
    ],
    ids=["bug", "oserror", "envsolver-error"],
)
def test_every_failure_is_a_document(
    monkeypatch: pytest.MonkeyPatch, raised: Exception, code: int, kind: str, phrase: str
) -> None:
    def explode(*_: object, **__: object) -> None:
        raise raised

    monkeypatch.setattr(cli, "resolve", explode)
    result, doc = run_json(["explain", "--gpu", "a100", "--json"])
    error = assert_failure(result, doc, code, kind)
    assert phrase in error["message"] and "S3CRET" not in result.output


def test_a_bug_under_envsolver_debug_still_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fuzz harness relies on ENVSOLVER_DEBUG=1 re-raising a bug, --json or not."""

    def explode(*_: object, **__: object) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(cli, "resolve", explode)
    result = CliRunner().invoke(main, ["explain", "--gpu", "a100", "--json"], env={"ENVSOLVER_DEBUG": "1"})
    assert isinstance(result.exception, RuntimeError)


# --- fuzzed target options: whatever they are, one document --------------------------------------------------


def check_document(result: Result) -> None:
    """The --json invariant: one document on stdout; a failure is the failure document, with a fix."""
    assert result.exit_code in (0, 1, 2), result.output
    try:
        doc = json.loads(result.stdout)
    except ValueError as exc:
        raise AssertionError(f"stdout is not one JSON document ({exc}): {result.output}") from None
    if result.exit_code == 0:
        assert doc["ok"] is True
        return
    assert doc["ok"] is False and doc["exit_code"] == result.exit_code and set(doc) == {"ok", "exit_code", "error"}
    error = doc["error"]
    assert error["kind"] in KINDS and error["kind"] not in ("internal", "interrupted")
    assert error["message"] and error["fix"], error
    assert result.stderr.startswith("error: "), result.stderr  # click's usage errors too (cli_base.UsageError)


@settings(max_examples=60, deadline=None)
@given(fs.target_args, fs.envsolver_env)
def test_fuzzed_explain_prints_one_document(args: list[str], env: dict[str, str]) -> None:
    full_env: dict[str, str | None] = {"ENVSOLVER_GPUS": None, "ENVSOLVER_DRIVER": None, **env}
    check_document(CliRunner().invoke(main, ["explain", *args, "--json"], env=full_env))


@settings(max_examples=30, deadline=None)
@given(fs.target_args)
def test_fuzzed_make_prints_one_document(args: list[str]) -> None:
    with tempfile.TemporaryDirectory() as out:
        check_document(CliRunner().invoke(main, ["make", "--no-lock", "--out", out, *args, "--json"]))


# --- click's usage errors, with --json on the command line ---------------------------------------------------


@pytest.mark.parametrize(
    ("args", "phrase"),
    [
        (["explain", "--gpu", "a100", "--platform", "win-64", "--json"], "Invalid value for '--platform'"),
        (["make", "--json", "--driver-compat", "some"], "Invalid value for '--driver-compat'"),
        (["gpus", "--json", "--bogus"], "No such option '--bogus'"),
        (["install", "--json"], "Missing option '-p' / '--prefix'"),
        (["hook", "-p", "x", "--jobs", "many", "--json"], "Invalid value for '--jobs'"),
        (["verify", "--check", "nope", "--json"], "Invalid value for '--check'"),
        (["make", "--json", "--gpu"], "Option '--gpu' requires an argument"),
        (["nope", "--json"], "No such command 'nope'"),
    ],
    ids=["explain-choice", "make-choice", "gpus-option", "install-missing", "hook-int", "verify-choice",
         "make-argument", "command"],
)  # fmt: skip
def test_usage_errors(args: list[str], phrase: str) -> None:
    result, doc = run_json(args)
    error = assert_failure(result, doc, 2, "usage")
    assert phrase in error["message"] and "Usage:" not in error["message"]
    assert error["fix"].startswith("Run `main ") and error["fix"].endswith(" --help` to see the options.")
    assert result.stderr.startswith(f"error: {error['message']} {error['fix']}\nusage: main "), result.stderr


def test_the_usage_fix_works() -> None:
    """The fix names the command's own help, and running it shows the option that was wrong."""
    _, doc = run_json(["explain", "--gpu", "a100", "--platform", "win-64", "--json"])
    command = doc["error"]["fix"].split("`")[1].split()[1:]
    shown = CliRunner().invoke(main, command)
    assert shown.exit_code == 0 and "--platform" in shown.stdout, shown.output


def test_a_json_looking_option_value_is_not_the_flag() -> None:
    """`--torch --json` passes '--json' as the torch version: the outcome is a human message, not a document."""
    result = CliRunner().invoke(main, ["explain", "--gpu", "a100", "--torch", "--json"])
    assert result.exit_code == 2 and result.stdout == "", result.output
    assert result.stderr.startswith("error: malformed torch version '--json'")


def test_without_json_usage_errors_are_shown_as_envsolvers() -> None:
    result = CliRunner().invoke(main, ["explain", "--gpu", "a100", "--platform", "win-64"])
    assert result.exit_code == 2 and result.stdout == "", result.output
    assert result.stderr.startswith("error: Invalid value for '--platform'"), result.stderr


# --- Ctrl-C ----------------------------------------------------------------------------------------------------


def _interrupt(*_: object, **__: object) -> None:
    raise KeyboardInterrupt


INTERRUPTED = "error: interrupted (Ctrl-C). Run the same command again.\n"


@pytest.mark.parametrize(
    ("target", "name", "args"),
    [
        (cli, "resolve", ["explain", "--gpu", "a100"]),
        (lock, "lock", ["make", "--gpu", "a100", "--offline", "--out", "{tmp}"]),
        (render, "gpu_rows", ["gpus"]),
        (installer, "install", ["install", "x.lock", "-p", "{tmp}"]),
        (hook_run, "hook", ["hook", "-p", "{tmp}", "--arch-list", "8.0"]),
        (verify_run, "verify", ["verify", "--python", sys.executable]),
    ],
    ids=["explain", "make", "gpus", "install", "hook", "verify"],
)
@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
def test_ctrl_c_exits_130_with_one_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, target: Any, name: str, args: list[str], as_json: bool
) -> None:
    monkeypatch.setattr(target, name, _interrupt)
    if name == "gpu_rows":
        monkeypatch.setattr(render, "gpu_table", _interrupt)
    argv = [a.replace("{tmp}", str(tmp_path)) for a in args] + (["--json"] if as_json else [])
    result = CliRunner().invoke(main, argv)
    assert result.exit_code == 130, result.output
    assert result.stderr == INTERRUPTED and "Aborted" not in result.output
    if as_json:
        doc = json.loads(result.stdout)
        assert doc == {
            "ok": False,
            "exit_code": 130,
            "error": {"kind": "interrupted", "message": "interrupted (Ctrl-C).", "fix": "Run the same command again."},
        }
    else:
        assert "error" not in result.stdout  # results printed before the interrupt may stay


def test_after_ctrl_c_the_same_command_works(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The interrupt's fix, run: the same make again writes the files."""
    args = ["make", "--profile", "v100", "--driver", "580.65.06", "--offline", "--out", str(tmp_path)]
    with monkeypatch.context() as patch:
        patch.setattr(lock, "lock", _interrupt)
        assert CliRunner().invoke(main, args).exit_code == 130
    again = CliRunner().invoke(main, args)
    assert again.exit_code == 0, again.output
    assert (tmp_path / "conda-lock.yml").exists()


def test_sigint_to_a_real_process(tmp_path: Path) -> None:
    """SIGINT to `python -m envsolver explain --gpu auto --json` while it waits for nvidia-smi: exit 130, one line on
    stderr, one document on stdout."""
    started = tmp_path / "started"
    smi = tmp_path / "bin" / "nvidia-smi"
    smi.parent.mkdir()
    smi.write_text(f"#!/bin/sh\ntouch '{started}'\nexec sleep 30\n")
    smi.chmod(0o755)
    hidden = tmp_path / "site"
    hidden.mkdir()
    (hidden / "pynvml.py").write_text("raise ImportError('NVML hidden, so detection asks nvidia-smi')\n")
    env = {
        "PATH": f"{smi.parent}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": f"{hidden}{os.pathsep}{ROOT}",
        "ENVSOLVER_CACHE_DIR": str(tmp_path / "cache"),
        "HOME": str(tmp_path),
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "envsolver", "explain", "--gpu", "auto", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    deadline = time.monotonic() + 60
    while not started.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert started.exists(), proc.communicate(timeout=30)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 130, (stdout, stderr)
    assert stderr == INTERRUPTED
    assert json.loads(stdout)["error"]["kind"] == "interrupted"


class _InterruptingFinder(importlib.abc.MetaPathFinder):
    """Raises KeyboardInterrupt when envsolver.cli.main is imported: a Ctrl-C while the CLI is still loading."""

    def find_spec(self, name: str, path: object = None, target: object = None) -> None:
        if name == "envsolver.cli.main":
            raise KeyboardInterrupt
        return None


@pytest.mark.parametrize("argv", [["explain", "--gpu", "a100"], ["explain", "--gpu", "a100", "--json"]])
def test_ctrl_c_while_loading(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    from envsolver import __main__

    monkeypatch.delitem(sys.modules, "envsolver.cli.main")
    monkeypatch.setattr(sys, "meta_path", [_InterruptingFinder(), *sys.meta_path])
    monkeypatch.setattr(sys, "argv", ["envsolver", *argv])
    with pytest.raises(SystemExit) as exited:
        __main__.run()
    assert exited.value.code == 130
    out, err = capsys.readouterr()
    assert err == INTERRUPTED
    if "--json" in argv:
        assert json.loads(out)["error"] == {
            "kind": "interrupted",
            "message": "interrupted (Ctrl-C).",
            "fix": "Run the same command again.",
        }
    else:
        assert out == ""


# --- message and fix -------------------------------------------------------------------------------------------

# Real messages the suite produces (one per raise site's shape), and where each one's fix starts.
SPLITS = [
    (
        "malformed driver version '5.x': expected the form nvidia-smi prints, such as '535.104.05'. "
        "Pass --driver 535.104.05 (or --gpu auto on a GPU node).",
        "Pass --driver 535.104.05 (or --gpu auto on a GPU node).",
    ),
    (
        "no target GPU: pass --gpu NAME (repeatable), --profile NAME, or --gpu auto on a GPU node. "
        "Example: envsolver make --gpu a100.",
        "pass --gpu NAME (repeatable), --profile NAME, or --gpu auto on a GPU node. "
        "Example: envsolver make --gpu a100.",
    ),
    (
        "the knowledge base has 1 invalid row(s):\n  - gpus.yaml row 3: missing key 'source'\n"
        "Fix the rows above in envsolver/kb/data/ (every row needs its keys and a known source id).",
        "Fix the rows above in envsolver/kb/data/ (every row needs its keys and a known source id).",
    ),
    (
        "no conda-forge torch build fits NVIDIA T4 on linux-64: CUDA 12.9 needs driver >= 575.51.03; driver "
        "470.82.01 supports CUDA <= 11.4. Fix: upgrade the driver to 525.60.13 or newer. Alternatively, --source "
        "pytorch works on this target: torch 2.5.1 cu118 (pytorch channel) with CUDA 11.8 (compatibility minor).",
        "upgrade the driver to 525.60.13 or newer. Alternatively, --source pytorch works on this target: torch "
        "2.5.1 cu118 (pytorch channel) with CUDA 11.8 (compatibility minor).",
    ),
    (
        "cannot fetch 'file:///srv/c/x.conda': No such file or directory. Check the path exists and is readable. "
        "If the channel moved, rewrite its URLs with --mirror FROM=TO.",
        "Check the path exists and is readable. If the channel moved, rewrite its URLs with --mirror FROM=TO.",
    ),
    (
        "cannot fetch 'http://h/truncated': the connection closed after 14000 of 28000 bytes. Run the same command "
        "again; if it keeps failing, check the server or use another mirror.",
        "Run the same command again; if it keeps failing, check the server or use another mirror.",
    ),
    (
        "profile 'site.yaml': not valid YAML: Exceeds the limit (4300 digits) for integer string conversion: value "
        "has 4400 digits; use sys.set_int_max_str_digits() to increase the limit. Fix the file.",
        "Fix the file.",
    ),
    (
        "profile 'site.yaml': 'python' must be a quoted string, not 3.10 (which YAML reads as the number 3.1); "
        "write python: '3.10'. Fix the file.",
        "write python: '3.10'. Fix the file.",
    ),
    (
        "refusing to install into '/e': linking these archives would not be safe, so nothing was linked:\n  - w: "
        "'lib/x' would be written through the symbolic link 'lib' (linker)\nThe lock pins archives that are not what "
        "they claim; regenerate it with envsolver make from channels you trust.",
        "regenerate it with envsolver make from channels you trust.",
    ),
    (
        "'/o/.envsolver-commit' is not a journal envsolver wrote (bad); nothing was changed. Look at it, then remove "
        "it: rm /o/.envsolver-commit",
        "Look at it, then remove it: rm /o/.envsolver-commit",
    ),
    (
        "--channel 'http://h/c?token=***' is not usable: it has a query or fragment. Put a token in the path "
        "(https://HOST/t/TOKEN/...) instead. Pass a URL such as https://mirror.example.org/conda-forge.",
        "Put a token in the path (https://HOST/t/TOKEN/...) instead. Pass a URL such as "
        "https://mirror.example.org/conda-forge.",
    ),
    ("p-1-b.conda has no info-*.tar.zst section", None),
    (
        "no solution for linux-64:\nCannot solve the request because of: pytorch ==2.10.0 cuda129* cannot be "
        "installed\nThe plan's decisions:\n  - torch: newest",
        None,
    ),
]


@pytest.mark.parametrize(("text", "fix"), SPLITS, ids=[s[0][:30] for s in SPLITS])
def test_split_fix(text: str, fix: str | None) -> None:
    message, found = split_fix(text)
    assert found == fix
    if fix is None:
        assert message == text
    else:
        rest = text[: len(text) - len(fix)].rstrip()
        rest = rest.removesuffix("Fix:").removesuffix("Ways out:").rstrip().rstrip(":;").rstrip()
        assert text.endswith(fix) and rest == message


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.sampled_from(["a", "b", " ", "Pass", "pass", "Fix: ", "Ways out: ", ";", ".", "\n", "'"]), max_size=30)
)
def test_split_fix_loses_no_text(words: list[str]) -> None:
    text = "".join(words)
    message, fix = split_fix(text)
    if fix is None:
        assert message == text
    else:
        middle = text[len(message) : len(text) - len(fix)].replace("Fix: ", "").replace("Ways out: ", "")
        assert text.startswith(message) and text.endswith(fix) and fix and set(middle) <= set(" \t\n:;")


def test_every_error_class_has_its_own_kind() -> None:
    """A new error class names its kind on the class instead of inheriting one silently."""
    import pkgutil

    import envsolver
    from envsolver.core.errors import EnvsolverError

    for module in pkgutil.walk_packages(envsolver.__path__, "envsolver."):
        if not module.name.endswith("__main__"):
            importlib.import_module(module.name)
    classes: list[type[EnvsolverError]] = []
    todo = [EnvsolverError]
    while todo:
        cls = todo.pop()
        classes.append(cls)
        todo.extend(cls.__subclasses__())
    ours = [c for c in classes if c.__module__.startswith("envsolver.")]
    unnamed = [c.__qualname__ for c in ours if "kind" not in vars(c)]
    assert not unnamed
    assert len(ours) >= 13


def test_kinds_are_documented() -> None:
    import envsolver.core.errors as errors

    assert errors.__doc__ is not None
    documented = [line.split()[0] for line in errors.__doc__.splitlines() if line.startswith("  ") and line.split()]
    assert set(KINDS) <= set(documented)
