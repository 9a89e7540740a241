"""The sbatch options a user sets on `envsolver cluster sbatch`, each checked against an exact grammar before any
text is written, and the site's own `#SBATCH` lines.

The values reach `#SBATCH` lines only. bash reads those lines as comments; sbatch reads them, splitting each at
white space, so no grammar here admits a space, a quote, `#`, `$`, a backslash or a control character (the
script's words that bash does read are shell-quoted in sbatch.py). Every pattern has bounded repeats.

Sources: sbatch(1) of Slurm 22.05 (the version in the lab and Debian 12): --mem/--mem-per-gpu `<size>[units]`
(K, M, G, T; 0 asks for all of a node's memory with --mem); --output/--error `<filename pattern>` (%j, %x, %A,
%a, %N, %u ...); --exclude `<node_name_list>` (a hostlist: `gpu[01-04],gpu07`); --signal `[{R|B}:]<sig_num>
[@sig_time]` (sig_time 0 to 65535 s); --array `<indexes>` (`0-15`, `1,3,5-7`, `0-15:4`, a `%N` limit of tasks
at once); --qos a QOS name; --constraint as grammar.constraint.

A site line (`--sbatch-line`, repeatable) is ONE long option as sbatch(1) spells it, `--NAME` or `--NAME=VALUE`:
NAME one of SITE_OPTIONS (the long options of sbatch(1), 22.05, less those envsolver writes itself or that
would undo the script: RESERVED says which option of envsolver to use instead); VALUE 1 to 512 of the
characters `A-Za-z0-9_.,:%/@+=-[]*&|()`. No short options (`-N 2`), no `#SBATCH` prefix, one option per line.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from envsolver.cluster import grammar
from envsolver.core.errors import BadInputError

_MEM = re.compile(r"0|[1-9][0-9]{0,8}[KMGT]?")
_MEM_PER_GPU = re.compile(r"[1-9][0-9]{0,8}[KMGT]?")
_FILE_PATTERN = re.compile(r"[A-Za-z0-9_.,%/@+=:~][A-Za-z0-9_.,%/@+=:~\-]{0,1023}")
_HOST = r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}(?:\[[0-9]{1,6}(?:-[0-9]{1,6})?(?:,[0-9]{1,6}(?:-[0-9]{1,6})?){0,63}\])?"
_HOSTLIST = re.compile(rf"{_HOST}(?:,{_HOST}){{0,255}}")
_SIGNALS = "HUP|INT|QUIT|USR1|USR2|TERM|ALRM|CONT|URG|XCPU|KILL|STOP"
_SIGNAL = re.compile(rf"(?:[RB]:)?(?:SIG)?(?:{_SIGNALS}|[1-9]|[1-5][0-9]|6[0-4])(?:@(?P<time>[0-9]{{1,5}}))?")
_ARRAY_ITEM = r"[0-9]{1,7}(?:-[0-9]{1,7}(?::[1-9][0-9]{0,6})?)?"
_ARRAY = re.compile(rf"{_ARRAY_ITEM}(?:,{_ARRAY_ITEM}){{0,63}}(?:%[1-9][0-9]{{0,5}})?")
_SITE_LINE = re.compile(r"--(?P<name>[a-z][a-z0-9\-]{0,39})(?:=(?P<value>[A-Za-z0-9_.,:%/@+=\[\]*&|()\-]{1,512}))?")

# The long options of sbatch(1), Slurm 22.05, that a site line may carry.
SITE_OPTIONS = frozenset(
    {
        "acctg-freq",
        "bb",
        "bbf",
        "begin",
        "chdir",
        "cluster-constraint",
        "clusters",
        "comment",
        "container",
        "contiguous",
        "core-spec",
        "cores-per-socket",
        "cpu-freq",
        "deadline",
        "delay-boot",
        "dependency",
        "extra-node-info",
        "gpu-freq",
        "gres-flags",
        "hint",
        "hold",
        "kill-on-invalid-dep",
        "licenses",
        "mail-type",
        "mail-user",
        "mcs-label",
        "mem-bind",
        "mem-per-cpu",
        "mincpus",
        "network",
        "nice",
        "no-kill",
        "no-requeue",
        "nodelist",
        "ntasks-per-core",
        "ntasks-per-socket",
        "open-mode",
        "overcommit",
        "oversubscribe",
        "power",
        "prefer",
        "priority",
        "profile",
        "propagate",
        "reboot",
        "reservation",
        "sockets-per-node",
        "spread-job",
        "switches",
        "thread-spec",
        "threads-per-core",
        "time-min",
        "tmp",
        "use-min-nodes",
        "wait-all-nodes",
        "wckey",
    }
)
# Options envsolver writes itself, or that would undo what the script does: the fix, as a sentence.
_CLEAN = "Leave it out: the script starts from a clean environment itself (module purge, then the env's activation)"
RESERVED = {
    **{
        name: f"Use envsolver's --{name} instead"
        for name in (
            "job-name",
            "nodes",
            "cpus-per-task",
            "time",
            "qos",
            "mem",
            "mem-per-gpu",
            "exclusive",
            "output",
            "error",
            "exclude",
            "signal",
            "requeue",
            "array",
            "constraint",
            "gpus-per-node",
            "cpus-per-gpu",
        )
    },
    **{
        name: "Use --partition, --gpus-per-node and --launch: envsolver writes it from them"
        for name in ("partition", "ntasks", "ntasks-per-node", "gres", "gpus", "gpus-per-task", "gpus-per-socket")
    },
    "ntasks-per-gpu": "Use --launch: envsolver writes the tasks from it",
    "gpu-bind": "Leave it out: envsolver binds the GPUs for --launch (per-gpu: none, so LOCAL_RANK indexes them)",
    "account": "Set slurm.account for the partition in the cluster file",
    "export": _CLEAN,
    "export-file": _CLEAN,
    "get-user-env": _CLEAN,
    "uid": "Leave it out: the job runs as the user who submits it",
    "gid": "Leave it out: the job runs as the user who submits it",
    "wrap": "Leave it out: the script is the job",
    "input": "Leave it out: the job reads no standard input",
    "batch": "Leave it out: the batch step's node is Slurm's choice here",
}
MAX_SITE_LINES = 64


@dataclass(frozen=True)
class JobOptions:
    """The job's own sbatch options; None or False: not set (Slurm's and the site's defaults apply)."""

    constraint: str | None = None
    qos: str | None = None
    mem: str | None = None
    mem_per_gpu: str | None = None
    exclusive: bool = False
    output: str | None = None
    error: str | None = None
    exclude: str | None = None
    signal: str | None = None
    requeue: bool = False
    array: str | None = None
    site_lines: tuple[str, ...] = ()


def _refuse(option: str, value: str, expected: str) -> BadInputError:
    return BadInputError(f"{option} {value!r}: expected {expected}. Pass {option} in that form.")


def _array(text: str) -> str:
    if not _ARRAY.fullmatch(text):
        raise ValueError("an array of indexes such as '0-15', '1,3,5-7', '0-15:4' or '0-99%10'")
    for item in text.partition("%")[0].split(","):
        low, _, rest = item.partition("-")
        if rest and int(rest.partition(":")[0]) < int(low):
            raise ValueError(f"a range from low to high (not {item!r})")
    return text


def _signal(text: str) -> str:
    match = _SIGNAL.fullmatch(text)
    if match is None or (match.group("time") and int(match.group("time")) > 65535):
        raise ValueError("[R:|B:]SIGNAL[@SECONDS] such as 'USR1@120' or 'B:TERM@300' (seconds 0 to 65535)")
    return text


def _fullmatch(pattern: re.Pattern[str], expected: str) -> Callable[[str], str]:
    def check(text: str) -> str:
        if not pattern.fullmatch(text):
            raise ValueError(expected)
        return text

    return check


_CHECKS: dict[str, Callable[[str], str]] = {
    "--qos": lambda text: grammar.name(text, "QOS name"),
    "--mem": _fullmatch(_MEM, "a size such as '200G', '64000M' or '0' (all of a node's memory)"),
    "--mem-per-gpu": _fullmatch(_MEM_PER_GPU, "a size such as '80G' or '40000M'"),
    "--output": _fullmatch(_FILE_PATTERN, "a file name pattern without spaces or quotes, such as 'logs/%x-%j.out'"),
    "--error": _fullmatch(_FILE_PATTERN, "a file name pattern without spaces or quotes, such as 'logs/%x-%j.err'"),
    "--exclude": _fullmatch(_HOSTLIST, "node names or a Slurm hostlist such as 'gpu07' or 'gpu[01-03],gpu09'"),
    "--signal": _signal,
    "--array": _array,
    "--constraint": grammar.constraint,
}


def site_line(text: str) -> str:
    """One site `#SBATCH` option, unchanged. Raises BadInputError naming what to do."""
    match = _SITE_LINE.fullmatch(text) if isinstance(text, str) else None
    if match is None:
        raise BadInputError(
            f"--sbatch-line {text!r}: expected one long sbatch option, '--NAME' or '--NAME=VALUE', VALUE without "
            "spaces, quotes, '#', '$' or '\\' (such as '--mail-type=END' or '--reservation=maint'). Pass one "
            "--sbatch-line per option, without '#SBATCH'."
        )
    name = match.group("name")
    if name in RESERVED:
        raise BadInputError(f"--sbatch-line {text!r}: --{name} is not a site line. {RESERVED[name]}.")
    if name not in SITE_OPTIONS:
        raise BadInputError(
            f"--sbatch-line {text!r}: --{name} is not an option of sbatch (Slurm 22.05), which would reject the "
            "script. Check the option's name in `man sbatch`."
        )
    return text


def validate(options: JobOptions) -> None:
    """Every value against its grammar, and the pairs sbatch refuses together. Raises BadInputError."""
    for option, value in _values(options):
        check = _CHECKS[option]
        try:
            check(value)
        except ValueError as exc:
            raise _refuse(option, value, str(exc).removeprefix("expected ")) from None
    if options.mem is not None and options.mem_per_gpu is not None:
        raise BadInputError("--mem and --mem-per-gpu exclude each other (sbatch refuses both). Pass one of them.")
    if len(options.site_lines) > MAX_SITE_LINES:
        raise BadInputError(f"more than {MAX_SITE_LINES} --sbatch-line options. Pass at most {MAX_SITE_LINES}.")
    names = []
    for line in options.site_lines:
        site_line(line)
        names.append(line.partition("=")[0])
    if len(set(names)) != len(names):
        raise BadInputError("an option is given twice in --sbatch-line. Pass each option once.")
    if options.requeue and "--no-requeue" in names:
        raise BadInputError("--requeue and --sbatch-line --no-requeue contradict each other. Pass one of them.")
    if "--mem-per-cpu" in names and (options.mem or options.mem_per_gpu):
        raise BadInputError("--mem-per-cpu excludes --mem and --mem-per-gpu (sbatch refuses them together). Pass one.")


def _values(options: JobOptions) -> list[tuple[str, str]]:
    pairs = (
        ("--constraint", options.constraint),
        ("--qos", options.qos),
        ("--mem", options.mem),
        ("--mem-per-gpu", options.mem_per_gpu),
        ("--output", options.output),
        ("--error", options.error),
        ("--exclude", options.exclude),
        ("--signal", options.signal),
        ("--array", options.array),
    )
    return [(option, value) for option, value in pairs if value is not None]


def directives(options: JobOptions) -> list[str]:
    """The options as `--name=value` words, in a fixed order, the site lines last (the constraint is sbatch.py's:
    it replaces the cluster file's)."""
    words = [f"{option}={value}" for option, value in _values(options) if option != "--constraint"]
    words += ["--exclusive"] if options.exclusive else []
    words += ["--requeue"] if options.requeue else []
    return [*words, *options.site_lines]


def excluded_nodes(text: str) -> set[str]:
    """The node names of an --exclude hostlist (already matched its grammar): `gpu[01-02],x` -> {gpu01, gpu02, x}."""
    names: set[str] = set()
    for match in re.finditer(rf"({_HOST})(?:,|$)", text):
        host = match.group(1)
        head, _, ranges = host.partition("[")
        if not ranges:
            names.add(head)
            continue
        for item in ranges.rstrip("]").split(","):
            low, _, high = item.partition("-")
            width = len(low)
            for number in range(int(low), int(high or low) + 1):
                names.add(f"{head}{number:0{width}d}")
                if len(names) > 100_000:
                    return names
    return names
