"""Property-based fuzzing of the job glue: `sbatch.render` gives a script or one BadInputError for any values, and
every script it gives reads back, word for word, as the values it was given (the shell sees each path and command
word as one word; #SBATCH lines hold one option word each; no line holds a control character); the GPU request
always matches the --gres/--gpus grammar; the Slurm launcher reads any environment into a Step or a LaunchError,
and parses any argv or exits 2; `cluster sbatch` with fuzzed options exits 0, 1 or 2 with a message."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from envsolver.cluster import grammar, job_shell, limits, parse, sbatch, slurm_launch
from envsolver.cluster.job_options import JobOptions
from envsolver.cluster.model import Partition, SlurmOptions
from envsolver.core.errors import BadInputError
from envsolver.kb import default_kb
from tests.cluster.test_sbatch import CLUSTER
from tests.fuzz import strategies as fs
from tests.fuzz.harness import Tally, check_cli, check_function, modes, run_property

KB = default_kb()
A100 = next(g for g in KB.gpus if g.key == "a100")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def mostly(valid: st.SearchStrategy[Any], odd: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Nine times in ten a valid value (so about a third of the jobs render and are read back), else an odd one."""
    return st.integers(0, 9).flatmap(lambda n: odd if n == 0 else valid)


valid_paths = st.one_of(
    st.sampled_from(["/shared/envs/train", "/shared/my envs/it's", "/a/$(id)/`id`/b;c|d&e", "/"]),
    st.text(st.characters(blacklist_categories=("Cs", "Cc")), max_size=20).map(lambda text: "/" + text),
)
paths = mostly(valid_paths, st.one_of(st.sampled_from(["relative", "", "/a\nb"]), fs.junk))
valid_words = st.one_of(
    st.sampled_from(["python", "train.py", "--lr", "3e-4", "$(id)", "'", '"', "a b", "*", ";", "\\", "!", "~"]),
    st.text(st.characters(blacklist_categories=("Cs", "Cc")), min_size=1, max_size=12),
)
words = mostly(valid_words, fs.junk)
slurm_values = {
    "partition": mostly(st.sampled_from(["gpu", "a100"]), fs.value(["a b", "-p", "$(id)"])),
    "gres": mostly(
        st.sampled_from(["gpu:a100:1", "gpu:1", "gpu", "gpu:1g.10gb:1,nvme:1", "nvme:1"]), fs.value(["gpu:a100:x"])
    ),
    "gpus": mostly(st.sampled_from(["a100:1", "2"]), fs.value(["a100:", ":1"])),
    "account": mostly(st.sampled_from(["ml-team"]), fs.value(["x;y"])),
    "constraint": mostly(st.sampled_from(["a100&ib", "[r1|r2]", "(a|b)&c*2"]), fs.value(["a100)", "a&&b"])),
}


@st.composite
def partitions(draw: st.DrawFn) -> Partition:
    chosen = {k: draw(v) for k, v in slurm_values.items() if draw(st.booleans())}
    if "gres" in chosen and "gpus" in chosen:
        del chosen["gpus" if draw(st.booleans()) else "gres"]
    name = draw(mostly(st.sampled_from(["a100", "gpu-h100.v2"]), fs.value(["x y"])))
    return Partition(name, ("a100",), (A100,), None, "linux-64", None, SlurmOptions(**chosen))


def maybe(valid: list[str], odd: list[str]) -> st.SearchStrategy[Any]:
    return st.one_of(st.none(), mostly(st.sampled_from(valid), fs.value(odd)))


@st.composite
def job_options(draw: st.DrawFn) -> JobOptions:
    """The job's sbatch options: mostly valid values (job_options.py's grammars), now and then a hostile one."""
    return JobOptions(
        constraint=draw(maybe(["ib", "a100&ib", "[r1|r2]"], ["a b", "ib;id"])),
        qos=draw(maybe(["high", "normal"], ["a b", "$(id)"])),
        mem=draw(maybe(["200G", "0", "64000M"], ["1 G", "-1"])),
        mem_per_gpu=draw(maybe(["80G"], ["0"])),
        exclusive=draw(st.booleans()),
        output=draw(maybe(["logs/%x-%j.out", "out"], ["a b", "x\n#SBATCH --uid=0", "'q'"])),
        error=draw(maybe(["logs/%x-%j.err"], ["$(id)"])),
        exclude=draw(maybe(["gpu07", "gpu[01-03,07],login1"], ["gpu[", "a b"])),
        signal=draw(maybe(["USR1@300", "B:USR1@300", "B:10@60", "R:TERM"], ["USR3", "B:USR1;id"])),
        requeue=draw(st.booleans()),
        array=draw(maybe(["0-15%4", "1,3,5-7"], ["15-0", "0-3;id"])),
        site_lines=tuple(
            draw(
                st.lists(
                    mostly(
                        st.sampled_from(["--mail-type=END", "--hold", "--comment=x"]), fs.value(["--uid=0", "-N 2"])
                    ),
                    max_size=2,
                )
            )
        ),
    )


@st.composite
def jobs(draw: st.DrawFn) -> sbatch.Job:
    return sbatch.Job(
        cluster="hpc",
        partition=draw(partitions()),
        prefix=draw(paths),
        command=tuple(draw(st.lists(words, min_size=draw(mostly(st.just(1), st.just(0))), max_size=6))),
        nodes=draw(mostly(st.integers(1, 4), st.integers(-2, 5000))),
        gpus_per_node=draw(mostly(st.integers(1, 8), st.integers(-2, 100))),
        time=draw(st.one_of(st.none(), mostly(st.sampled_from(["30", "04:00:00", "1-12", "0"]), fs.value(["1-"])))),
        job_name=draw(st.one_of(st.none(), mostly(st.just("train"), fs.value(["a b", "$(id)"])))),
        cpus_per_task=draw(st.one_of(st.none(), mostly(st.integers(1, 64), st.integers(-1, 5000)))),
        verify=draw(st.booleans()),
        checks=tuple(draw(st.lists(st.sampled_from(["driver", "gpus", "torch_import"]), max_size=2))),
        launcher=draw(mostly(st.just("/shared/envsolver/envsolver/cluster/slurm_launch.py"), paths)),
        launch=draw(st.sampled_from(sbatch.LAUNCHES)),
        options=draw(job_options()),
        cpus_per_gpu=draw(st.one_of(st.none(), mostly(st.integers(1, 64), st.integers(-1, 5000)))),
    )


def read_back(job: sbatch.Job, script: str) -> None:
    """The script says exactly what the job holds, as bash will read it (lines end at \\n only: a path may hold
    U+2028, which str.splitlines would also split at)."""
    lines = script.split("\n")[:-1]
    assert script.endswith("\n") and not any(_CONTROL.search(line) for line in lines), "a control character"
    directives = [line for line in lines if line.startswith("#SBATCH ")]
    assert all(len(line.split()) == 2 for line in directives), directives
    assert [line.split()[1] for line in directives] == sbatch.directives(job)
    body = [line for line in lines if line and not line.startswith("#")]
    for line in body:
        shlex.split(line)  # every line is complete shell text (no quote left open)
    [launch_line] = [line for line in body if line.startswith("srun ") and "--kill-on-bad-exit=1" in line]
    launch = shlex.split(launch_line.removesuffix(" &"))
    assert launch == sbatch.launch_argv(job) and launch[launch.index("--") + 1 :] == list(job.command)
    assert launch_line.endswith(" &") == (job_shell.batch_signal(job.options) is not None), launch_line
    verify = [shlex.split(line[5:-6]) for line in body if line.startswith("if ! srun")]
    assert verify == ([sbatch.verify_argv(job)] if job.verify else [])
    exports = [line for line in body if line.startswith("export CONDA_PREFIX=")]
    prefix = shlex.split(exports[0])[1].removeprefix("CONDA_PREFIX=")
    assert prefix == str(Path(job.prefix)), prefix  # the prefix as Path names it (no trailing or doubled /)
    # both steps run the prefix's bin/python, named alike: the prefix less its trailing slashes, then /bin/python
    # (a prefix "//" gave the verify step /bin/python and the command //bin/python, one file named two ways)
    want = prefix.rstrip("/") + "/bin/python"
    assert verify == [] or verify[0][verify[0].index("--python") + 1] == want, (verify, want)
    python = next(word for word in launch[1:] if not word.startswith("--"))  # the first word after srun's options
    assert python == want, launch


@modes(150)
def test_render_gives_a_script_that_reads_back_or_one_bad_input_error(seed_value: int | None, count: int) -> None:
    tally = Tally("cluster sbatch render")

    def check(job: sbatch.Job) -> None:
        def call() -> None:
            script = sbatch.render(job)
            read_back(job, script)

        check_function(tally, job, call, (BadInputError,))

    run_property(jobs(), check, count, seed_value)
    tally.check()


@modes(150)
def test_the_gpu_request_matches_the_grammars(seed_value: int | None, count: int) -> None:
    """Whatever the file's valid options, the request is --gres/--gpus-per-node words that match their grammar."""
    tally = Tally("cluster sbatch gpu_request")
    valid_gres = st.sampled_from(["gpu:a100:1", "gpu:1", "gpu", "gpu:1g.10gb:1,nvme:1", "nvme:1", "gpu:a:1,gpu:b:2"])
    options = st.one_of(
        valid_gres.map(lambda g: SlurmOptions(gres=g)),
        st.sampled_from(["a100:1", "2", "h100_x.y:8"]).map(lambda g: SlurmOptions(gpus=g)),
        st.just(SlurmOptions()),
    )

    def check(args: tuple[SlurmOptions, int]) -> None:
        def call() -> None:
            request = sbatch.gpu_request(args[0], args[1])
            for word in request:
                flag, _, value = word.partition("=")
                assert flag in ("--gres", "--gpus-per-node"), word
                (grammar.gres if flag == "--gres" else grammar.gpus)(value)
            counts = [
                w for w in request if w.endswith(f":{args[1]}") or w.endswith(f"={args[1]}") or f":{args[1]}," in w
            ]
            assert counts, request  # some word asks for the GPUs per node

        check_function(tally, args, call, ())

    run_property(st.tuples(options, st.integers(1, 64)), check, count, seed_value)
    tally.check()


@modes(150)
def test_gpus_from_sinfo_never_raises(seed_value: int | None, count: int) -> None:
    tally = Tally("cluster sbatch gpus_from_sinfo")
    sinfo = st.one_of(
        st.just("a100|gpu02|up|idle|gpu:a100:2(S:0)\nmixed|gpu03|up|idle|gpu:h100:2"),
        fs.file_junk,
        st.lists(st.sampled_from(["a100", "gpu02", "|", "gpu:a100:2", "(S:0)", ",", ":", "9" * 30, "\n"])).map("".join),
    )

    def check(args: tuple[str, str | None]) -> None:
        rows, _ = parse.parse_sinfo(args[0])
        check_function(tally, args, lambda: sbatch.gpus_from_sinfo(rows, "a100", args[1]), ())

    run_property(st.tuples(sinfo, st.one_of(st.none(), st.just("a100"), fs.junk)), check, count, seed_value)
    tally.check()


slurm_env = st.dictionaries(
    st.sampled_from(
        [
            "SLURM_JOB_NODELIST",
            "SLURM_STEP_NODELIST",
            "SLURM_NODEID",
            "SLURM_NNODES",
            "SLURM_STEP_NUM_NODES",
            "SLURM_STEP_TASKS_PER_NODE",
            "SLURM_TASKS_PER_NODE",
            "SLURM_JOB_ID",
            "SLURM_STEP_ID",
            "SLURMD_NODENAME",
        ]
    ),
    st.one_of(st.sampled_from(["0", "1", "2", "1(x2)", "2(x2),1", "gpu[01-02]", "", "9" * 40]), fs.junk),
)


@modes(200)
def test_the_launcher_reads_any_environment(seed_value: int | None, count: int) -> None:
    tally = Tally("slurm_launch read_step / node_addr")
    hosts = st.lists(st.sampled_from(["gpu01", "gpu02", "10.0.0.1"]), max_size=3)

    def check(args: tuple[dict[str, str], list[str], str]) -> None:
        environ, names, text = args
        check_function(
            tally, args, lambda: slurm_launch.read_step(environ, lambda _: names), (slurm_launch.LaunchError,)
        )
        found = slurm_launch.node_addr(text)
        assert found is None or re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9.\-]*", found), found

    line = st.one_of(fs.file_junk, fs.junk.map(lambda t: f"NodeName=x NodeAddr={t} Port=1"))
    run_property(st.tuples(slurm_env, hosts, line), check, count, seed_value)
    tally.check()


@modes(100)
def test_the_launchers_options_parse_or_exit_2(seed_value: int | None, count: int) -> None:
    tally = Tally("slurm_launch options")
    argv = st.lists(
        st.one_of(
            st.sampled_from(["--nproc-per-node=2", "--nproc-per-node", "0", "--port=80", "--port=29600", "--"]),
            st.sampled_from(["--dry-run", "python", "-x", "--bogus"]),
            fs.junk,
        ),
        max_size=6,
    )

    def check(args: list[str]) -> None:
        def call() -> None:
            try:
                slurm_launch._parse(args)
            except SystemExit as exc:
                assert exc.code == 2, exc.code

        check_function(tally, args, call, ())

    run_property(argv, check, count, seed_value)
    tally.check()


sbatch_args = st.lists(
    st.one_of(
        st.tuples(st.just("--partition"), fs.value(["v100", "a100", "h100", "gh200", "x y", "$(id)"])).map(list),
        st.tuples(st.just("--nodes"), fs.value(["1", "2", "0", "4097", "x"])).map(list),
        st.tuples(st.just("--gpus-per-node"), fs.value(["1", "8", "0", "65"])).map(list),
        st.tuples(st.just("--cpus-per-task"), fs.value(["1", "16", "0"])).map(list),
        st.tuples(st.just("--time"), fs.value(["30", "04:00:00", "1-12", "10;id"])).map(list),
        st.tuples(st.just("--job-name"), fs.value(["train", "a b", "$(id)"])).map(list),
        st.tuples(st.just("--check"), fs.value(["driver", "torch_import", "nope"])).map(list),
        st.tuples(st.just("--launch"), fs.value(["torchrun", "per-gpu", "deepspeed", "mpi"])).map(list),
        st.tuples(st.just("--cpus-per-gpu"), fs.value(["1", "8", "0"])).map(list),
        st.tuples(st.just("--qos"), fs.value(["high", "a b"])).map(list),
        st.tuples(st.just("--mem"), fs.value(["200G", "0", "1 G"])).map(list),
        st.tuples(st.just("--signal"), fs.value(["B:USR1@300", "USR1", "USR3"])).map(list),
        st.tuples(st.just("--array"), fs.value(["0-3", "3-0"])).map(list),
        st.tuples(st.just("--exclude"), fs.value(["gpu[01-02]", "gpu["])).map(list),
        st.tuples(st.just("--sbatch-line"), fs.value(["--mail-type=END", "--export=ALL", "-N 2"])).map(list),
        st.sampled_from([["--exclusive"], ["--requeue"], ["--no-slurm-check"]]),
        st.sampled_from([["--no-verify"], ["--json"], ["--force"], ["--bogus"], ["-p", "relative"], ["-p", "/"]]),
    ),
    max_size=6,
).map(lambda parts: [w for part in parts for w in part])


@modes(40)
def test_cluster_sbatch_options(seed_value: int | None, count: int, tmp_path: Path) -> None:
    """A real cluster file and prefix; SLURM_CONF names a missing file, so a run without --gpus-per-node, or
    without --no-slurm-check (most runs have it), ends before Slurm is asked (exit 2)."""
    tally = Tally("cluster sbatch options")
    (tmp_path / "cluster.yaml").write_text(CLUSTER)
    (tmp_path / "env" / "bin").mkdir(parents=True)
    (tmp_path / "env" / "bin" / "python").write_text("#!/bin/sh\n")
    env = {"SLURM_CONF": str(tmp_path / "missing.conf")}
    base = ["cluster", "sbatch", "--cluster", str(tmp_path / "cluster.yaml"), "-p", str(tmp_path / "env")]
    base += ["--gpus-per-node", "2", "--no-slurm-check"]  # a later --gpus-per-node, or none valid, changes it

    def check(args: tuple[list[str], list[str]]) -> None:
        options, command = args
        out = ["--out", str(tmp_path / "job.sh")] if "--force" in options else []
        check_cli(tally, [*base, "--partition", "v100", *options, *out, "--", *command], env)

    run_property(st.tuples(sbatch_args, st.lists(words, max_size=4)), check, count, seed_value)
    tally.check()


limits_text = st.one_of(
    st.sampled_from(
        [
            "gpu02|idle|2|ib,rack1|gpu:a100:2(S:0)\ngpu03|down*|2|(null)|gpu:h100:2",
            "PartitionName=p MaxNodes=UNLIMITED MaxTime=1-00:00:00 State=UP MaxCPUsPerNode=16",
            "n1|mixed~|9999999999|x|gpu:a100:8\nn2|drained@|0||gpu:8",
        ]
    ),
    fs.file_junk,
    st.lists(st.sampled_from(["n1", "|", "idle", "*", "2", "gpu:a100:2", ",", "=", "MaxTime", "9" * 30, "\n"])).map(
        "".join
    ),
)


@modes(150)
def test_the_partition_readers_and_the_judge_never_raise(seed_value: int | None, count: int) -> None:
    """limits.parse_nodes / parse_partition / seconds read any text; judge takes any facts and any request and
    gives a verdict (no exception, CPUs per GPU None or >= 1)."""
    tally = Tally("limits readers / judge")
    requests = st.builds(
        limits.Request,
        st.integers(1, 5000),
        st.integers(1, 64),
        st.one_of(st.none(), st.sampled_from(["a100", "h100"])),
        st.one_of(st.none(), st.sampled_from(["30", "1-00:00:00", "99999"])),
        st.one_of(st.none(), st.sampled_from(["ib", "ib&rack1", "[r1|r2]*2", "(a|b)"])),
        st.frozensets(st.sampled_from(["n1", "gpu02"])),
        st.one_of(st.none(), st.integers(1, 10000)),
    )

    def check(args: tuple[str, str, limits.Request]) -> None:
        def call() -> None:
            nodes = limits.parse_nodes(args[0])
            limits.seconds(args[1])
            facts = limits.parse_partition(args[1], "p", nodes)
            verdict = limits.judge(facts, args[2])
            assert verdict.cpus_per_gpu is None or verdict.cpus_per_gpu >= 1, verdict

        check_function(tally, args, call, ())

    run_property(st.tuples(limits_text, limits_text, requests), check, count, seed_value)
    tally.check()


@modes(150)
def test_the_per_task_launcher_reads_any_environment(seed_value: int | None, count: int) -> None:
    tally = Tally("slurm_launch read_task")
    task_env = st.dictionaries(
        st.sampled_from(["SLURM_PROCID", "SLURM_LOCALID", "SLURM_STEP_NUM_TASKS", "SLURM_NTASKS"]),
        st.one_of(st.sampled_from(["0", "1", "3", "4", "9" * 40]), fs.junk),
    )

    def check(args: tuple[dict[str, str], dict[str, str]]) -> None:
        environ = {**args[0], **args[1]}

        def call() -> None:
            step = slurm_launch.read_step(environ, lambda _: ["gpu01", "gpu02"], one_task_per_node=False)
            task = slurm_launch.read_task(environ, step)
            assert 0 <= task.rank < task.world_size and 0 <= task.local_rank < task.local_world_size, task

        check_function(tally, environ, call, (slurm_launch.LaunchError,))

    run_property(st.tuples(slurm_env, task_env), check, count, seed_value)
    tally.check()
