"""The job's sbatch options (envsolver/cluster/job_options.py): each value against its exact grammar, the pairs
sbatch refuses together, the site `#SBATCH` lines, and the node names an --exclude hostlist names."""

from __future__ import annotations

import pytest

from envsolver.cluster import job_options
from envsolver.cluster.job_options import JobOptions
from envsolver.core.errors import BadInputError

ACCEPTED = [
    JobOptions(constraint="a100&ib", qos="high", mem="200G", exclusive=True),
    JobOptions(mem="0", output="logs/%x-%j.out", error="logs/%x-%j.err"),
    JobOptions(mem_per_gpu="80G", exclude="gpu[01-03,07],gpu-x9", signal="B:USR1@300", requeue=True),
    JobOptions(signal="SIGTERM", array="0-15%4"),
    JobOptions(signal="R:10@65535", array="1,3,5-7,0-15:4"),
    JobOptions(site_lines=("--mail-type=END", "--reservation=maint", "--contiguous", "--comment=run-7")),
]


@pytest.mark.parametrize("options", ACCEPTED, ids=[repr(o) for o in ACCEPTED])
def test_values_in_their_grammar_are_accepted(options: JobOptions) -> None:
    job_options.validate(options)


REFUSED = [
    (JobOptions(qos="high;id"), "--qos"),
    (JobOptions(qos="a b"), "--qos"),
    (JobOptions(mem="200 G"), "--mem"),
    (JobOptions(mem="-1"), "--mem"),
    (JobOptions(mem="200GB"), "--mem"),
    (JobOptions(mem_per_gpu="0"), "--mem-per-gpu"),
    (JobOptions(mem="1G", mem_per_gpu="1G"), "exclude each other"),
    (JobOptions(output="logs/a b.out"), "--output"),
    (JobOptions(output="-x"), "--output"),
    (JobOptions(error="$(id).err"), "--error"),
    (JobOptions(error="x\n#SBATCH --uid=0"), "--error"),
    (JobOptions(exclude="gpu[01-"), "--exclude"),
    (JobOptions(exclude="gpu01 gpu02"), "--exclude"),
    (JobOptions(signal="USR3"), "--signal"),
    (JobOptions(signal="USR1@70000"), "--signal"),
    (JobOptions(signal="RB:USR1"), "--signal"),
    (JobOptions(array="15-0"), "--array"),
    (JobOptions(array="0-15%0"), "--array"),
    (JobOptions(array="a-b"), "--array"),
    (JobOptions(constraint="a100&"), "--constraint"),
    (JobOptions(site_lines=("-N 2",)), "one long sbatch option"),
    (JobOptions(site_lines=("#SBATCH --mail-type=END",)), "one long sbatch option"),
    (JobOptions(site_lines=("--mail-type=END --uid=0",)), "one long sbatch option"),
    (JobOptions(site_lines=("--comment='x'",)), "one long sbatch option"),
    (JobOptions(site_lines=("--comment=$HOME",)), "one long sbatch option"),
    (JobOptions(site_lines=("--export=ALL",)), "clean environment"),
    (JobOptions(site_lines=("--uid=0",)), "runs as the user who submits it"),
    (JobOptions(site_lines=("--nodes=4",)), "Use envsolver's --nodes"),
    (JobOptions(site_lines=("--gres=gpu:8",)), "--partition, --gpus-per-node and --launch"),
    (JobOptions(site_lines=("--account=x",)), "slurm.account"),
    (JobOptions(site_lines=("--no-such-option",)), "not an option of sbatch"),
    (JobOptions(site_lines=("--comment=a", "--comment=b")), "given twice"),
    (JobOptions(requeue=True, site_lines=("--no-requeue",)), "contradict"),
    (JobOptions(mem="1G", site_lines=("--mem-per-cpu=1G",)), "--mem-per-cpu excludes"),
]


@pytest.mark.parametrize(("options", "word"), REFUSED, ids=[f"{w}:{o!r}" for o, w in REFUSED])
def test_values_outside_their_grammar_are_refused_with_the_form(options: JobOptions, word: str) -> None:
    with pytest.raises(BadInputError) as info:
        job_options.validate(options)
    assert word in str(info.value), str(info.value)
    assert ". " in str(info.value), str(info.value)  # the problem, then what to pass


def test_directives_in_a_fixed_order_site_lines_last() -> None:
    options = JobOptions(
        constraint="ib",
        qos="high",
        mem_per_gpu="80G",
        exclusive=True,
        output="o-%j",
        error="e-%j",
        exclude="gpu07",
        signal="B:USR1@300",
        requeue=True,
        array="0-3",
        site_lines=("--mail-type=END",),
    )
    assert job_options.directives(options) == [
        "--qos=high",
        "--mem-per-gpu=80G",
        "--output=o-%j",
        "--error=e-%j",
        "--exclude=gpu07",
        "--signal=B:USR1@300",
        "--array=0-3",
        "--exclusive",
        "--requeue",
        "--mail-type=END",
    ]
    assert job_options.directives(JobOptions()) == []


def test_excluded_nodes_expand_the_hostlist() -> None:
    assert job_options.excluded_nodes("gpu[01-03,07],login1") == {"gpu01", "gpu02", "gpu03", "gpu07", "login1"}
    assert job_options.excluded_nodes("n[8-10]") == {"n8", "n9", "n10"}
    assert job_options.excluded_nodes("gpu07") == {"gpu07"}
