"""Shell completion (click's _ENVSOLVER_COMPLETE), driven as a shell drives it: a new process with COMP_WORDS
and COMP_CWORD set. GPU keys and aliases, profile names, check ids and a cluster file's partitions complete;
a broken cluster file completes to nothing; no completion ever prints a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from envsolver.cli import completion
from envsolver.kb import default_kb
from envsolver.resolve import profile
from envsolver.verify.checks import IDS

CLUSTER = Path(__file__).parent / "data" / "cluster" / "mixed.yaml"
# The console script a user's shell runs (its name gives the variable, _ENVSOLVER_COMPLETE); argv[0] set the
# same way where the script is not installed beside this interpreter.
SCRIPT = Path(sys.executable).parent / "envsolver"
COMMAND = (
    [str(SCRIPT)]
    if SCRIPT.exists()
    else [sys.executable, "-c", "import sys; sys.argv[0] = 'envsolver'; from envsolver.__main__ import run; run()"]
)


def complete(line: str, shell: str = "bash") -> tuple[list[str], str]:
    """The values completion offers for the last word of `line` (a trailing space: a new, empty word)."""
    words = line.split(" ")
    env = {
        **os.environ,
        "_ENVSOLVER_COMPLETE": f"{shell}_complete",
        "COMP_WORDS": line,
        "COMP_CWORD": str(len(words) - 1),
    }
    run = subprocess.run(COMMAND, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert run.returncode == 0, run.stderr
    assert "Traceback" not in run.stderr + run.stdout
    return [row.split(",", 1)[1] for row in run.stdout.splitlines() if "," in row], run.stderr


def test_gpu_keys_and_aliases_complete() -> None:
    values, _ = complete("envsolver make --gpu h10")
    assert "h100" in values and all(v.lower().startswith("h10") for v in values)
    everything, _ = complete("envsolver explain --gpu ")
    kb = default_kb()
    assert set(everything) == {"auto"} | {g.key for g in kb.gpus} | {a for g in kb.gpus for a in g.aliases}


def test_profiles_complete() -> None:
    values, _ = complete("envsolver make --profile ")
    assert values == profile.available()


def test_check_ids_complete() -> None:
    values, _ = complete("envsolver verify --check ")
    assert values == list(IDS)
    values, _ = complete("envsolver verify --check dr")
    assert values == [i for i in IDS if i.startswith("dr")]


def test_partitions_of_the_cluster_file_on_the_line_complete() -> None:
    values, _ = complete(f"envsolver make --cluster {CLUSTER} --partition ")
    assert values == ["v100", "a100", "h100", "gh200"]
    values, _ = complete(f"envsolver cluster sbatch --cluster {CLUSTER} --partition g")
    assert values == ["gh200"]
    assert complete("envsolver make --partition ")[0] == []  # no cluster file yet: nothing to offer


@pytest.mark.parametrize(
    "text", ["partitions: [", "partitions: 7", "- a\n- b\n", "\x00\xff", "partitions:\n  - name: [x]\n", "a: &a [*a]"]
)
def test_a_broken_cluster_file_completes_to_nothing(tmp_path: Path, text: str) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_bytes(text.encode("utf-8", "surrogateescape") if isinstance(text, str) else text)
    values, stderr = complete(f"envsolver make --cluster {path} --partition ")
    assert values == [] and stderr == ""
    missing, stderr = complete(f"envsolver make --cluster {tmp_path / 'none.yaml'} --partition ")
    assert missing == [] and stderr == ""


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_every_shell_gets_its_script(shell: str) -> None:
    env = {**os.environ, "_ENVSOLVER_COMPLETE": f"{shell}_source"}
    run = subprocess.run(COMMAND, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert run.returncode == 0 and "_ENVSOLVER_COMPLETE" in run.stdout and "Traceback" not in run.stderr, run.stderr


def test_completion_functions_never_raise(monkeypatch: pytest.MonkeyPatch) -> None:
    """An unreadable knowledge base or profile directory completes to nothing."""

    def broken() -> list[str]:
        raise OSError("gone")

    monkeypatch.setattr(completion, "gpu_names", broken)
    monkeypatch.setattr(profile, "available", broken)
    assert completion.complete_gpu(None, None, "a") == []  # type: ignore[arg-type]
    assert completion.complete_profile(None, None, "a") == []  # type: ignore[arg-type]


def test_main_help_shows_each_shell_line_and_each_works() -> None:
    """The lines `envsolver --help` documents are the ones that produce a completion script."""
    from click.testing import CliRunner

    from envsolver.cli.main import main

    text = CliRunner().invoke(main, ["--help"]).stdout
    for shell in ("bash", "zsh", "fish"):
        assert f"_ENVSOLVER_COMPLETE={shell}_source envsolver" in text
