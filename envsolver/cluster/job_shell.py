"""The shell text of a job script around its steps (sbatch.render puts it in place): the clean start every job
begins with, and the relay that passes a batch signal (`--signal B:SIG`) on to the command's step. Fixed text: the
only value that reaches it is a signal name that matched job_options' grammar (letters and digits).
"""

from __future__ import annotations

import shlex

from envsolver.cluster.job_options import JobOptions

# Exported variables the clean start unsets (bash `case` patterns; fixed text, no user value): which Python and
# which packages (PYTHON*: PYTHONPATH, PYTHONHOME, PYTHONSTARTUP, PYTHONUSERBASE, ...; the activation sets
# PYTHONUNBUFFERED again), which libraries the loader takes (LD_*: LD_LIBRARY_PATH, LD_PRELOAD, LD_AUDIT, ...),
# another conda or virtual environment's settings, another toolkit or op cache, a rendezvous set by hand.
CLEANED = (
    "PYTHON*",
    "LD_*",
    "CONDA*",
    "_CE_*",
    "VIRTUAL_ENV",
    "VIRTUAL_ENV_PROMPT",
    "CUDA_HOME",
    "CUDA_PATH",
    "TORCH_CUDA_ARCH_LIST",
    "TORCH_EXTENSIONS_DIR",
    "MASTER_ADDR",
    "MASTER_PORT",
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "NODE_RANK",
    "GROUP_RANK",
)
# The best-known of CLEANED's patterns by name, unset even where bash was built without `compgen` (no
# programmable completion), which the pattern loop needs.
UNSET_BY_NAME = (
    "PYTHONPATH",
    "PYTHONHOME",
    "PYTHONSTARTUP",
    "PYTHONUSERBASE",
    "LD_LIBRARY_PATH",
    "LD_PRELOAD",
    "LD_AUDIT",
    "CONDA_PREFIX",
    "CONDA_DEFAULT_ENV",
    "CONDA_SHLVL",
    "CONDA_EXE",
    "CONDA_PYTHON_EXE",
    *(name for name in CLEANED if "*" not in name),
)


def echo(text: str) -> str:
    """A line that prints `text` on stderr, the text single-quoted."""
    return f"echo {shlex.quote(text)} >&2"


def clean_environment() -> list[str]:
    """The script's first lines: `module purge` where modules exist, then CLEANED unset (fixed text)."""
    patterns = "|".join(CLEANED)
    failed = "envsolver: module purge failed; the job goes on with the modules it has"
    return [
        "# A clean start: no module, and nothing of the submit shell's Python, libraries, conda or rendezvous.",
        "if type module >/dev/null 2>&1; then",
        f"  set +u; module purge >&2 || {echo(failed)}; set -u",
        "fi",
        f"unset {' '.join(UNSET_BY_NAME)}  # by name too, where bash has no compgen",
        "for envsolver_variable in $(compgen -e 2>/dev/null); do",
        f'  case "$envsolver_variable" in {patterns}) unset "$envsolver_variable" ;; esac',
        "done",
        "unset envsolver_variable",
        "export PYTHONNOUSERSITE=1  # no packages from ~/.local",
        "export SLURM_EXPORT_ENV=ALL  # every srun below gets this environment, even under sbatch --export=NONE",
    ]


def batch_signal(options: JobOptions) -> str | None:
    """The signal `--signal B:SIG[@TIME]` sends to the batch shell (without `SIG`), or None."""
    if options.signal is None or not options.signal.startswith("B:"):
        return None
    name = options.signal[2:].partition("@")[0]
    return name[3:] if name.startswith("SIG") else name


def launch_lines(command: str, options: JobOptions) -> list[str]:
    """The command's step (`command`: its shell line). With `--signal B:SIG`, Slurm signals the batch shell,
    which would die of it (no trap) and end the job early: the step then runs in the background and the shell
    passes the signal on to srun, which forwards it to the step's tasks (the ranks, or their launchers)."""
    signal = batch_signal(options)
    if signal is None:
        return [command]
    said = f"envsolver: SIG{signal} before the time limit: passing it to the step of the command"
    return [
        "envsolver_step=",
        f'trap \'echo "{said}" >&2; kill -s {signal} "$envsolver_step" 2>/dev/null || true\' {signal}',
        f"{command} &",
        "envsolver_step=$!",
        "envsolver_status=0",
        'wait "$envsolver_step" || envsolver_status=$?',
        'while kill -0 "$envsolver_step" 2>/dev/null; do  # a trapped signal ended the wait: wait again',
        "  envsolver_status=0",
        '  wait "$envsolver_step" || envsolver_status=$?',
        "done",
        'exit "$envsolver_status"',
    ]
