"""A project's own packages (make/explain -f FILE, --add, --add-pypi): read with exact grammars, merged into the
plan by one set of rules (resolve/projectmerge.py), every refusal naming the entry and a spelling that is read."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from envsolver.core.errors import BadInputError
from envsolver.kb import KnowledgeBase
from envsolver.resolve import projectmerge
from envsolver.resolve.inputs import Options, build_target
from envsolver.resolve.project import CondaWant, Project, conda_want, pip_want, read
from envsolver.resolve.run import resolve


def _file(tmp_path: Path, text: str, name: str = "env.yml") -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


@pytest.mark.parametrize(
    ("text", "name", "version", "build"),
    [
        ("jupyterlab", "jupyterlab", None, None),
        ("numpy>=1.26,<2", "numpy", ">=1.26,<2", None),
        ("numpy >=1.26,<2", "numpy", ">=1.26,<2", None),
        ("numpy >= 1.26", "numpy", ">=1.26", None),
        ("python=3.12", "python", "3.12.*", None),
        ("python=3.12.*", "python", "3.12.*", None),
        ("numpy==1.26.4", "numpy", "==1.26.4", None),
        ("numpy==1.26.*", "numpy", "1.26.*", None),
        ("numpy=1.26.4=py312h*", "numpy", "1.26.4", "py312h*"),
        ("numpy 1.26.* py312*", "numpy", "1.26.*", "py312*"),
        ("numpy * py312*", "numpy", "*", "py312*"),
        ("numpy *", "numpy", None, None),
        ("Tzdata 2024A", "tzdata", "2024a", None),
        ("backports.zoneinfo", "backports.zoneinfo", None, None),
        ("gxx_linux-64 <15", "gxx_linux-64", "<15", None),
    ],
)
def test_conda_specs_in_the_forms_environment_files_write(
    text: str, name: str, version: str | None, build: str | None
) -> None:
    assert conda_want(text, "env.yml") == CondaWant(name, version, build, "env.yml")


@pytest.mark.parametrize(
    ("text", "fix"),
    [
        ("conda-forge::numpy", "List the channel under `channels:` and write 'numpy'"),
        ("numpy[version='>=1.26']", "Write it as `name version build`"),
        ("numpy >=1.26|<1.20", "Write the range with ','"),
        ("numpy ~=1.26", "Write the range with ','"),
        ("numpy 1.26 py312 extra", "Write it as e.g."),
        ("numpy $(id)", "Write it as e.g."),
        ("num;py", "Write it as e.g."),
        ("numpy 1.26 py3.12", "Write it as e.g."),
        ("numpy >=1.26.*", "Write it as e.g."),
        ("-numpy", "Write it as e.g."),
        ("", "Write a package name"),
    ],
)
def test_conda_specs_envsolver_does_not_read_are_refused_with_a_form_it_reads(text: str, fix: str) -> None:
    with pytest.raises(BadInputError, match=r"env\.yml") as caught:
        conda_want(text, "env.yml")
    assert fix in str(caught.value), str(caught.value)


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        ("accelerate", "accelerate"),
        ("Peft >= 0.10", "Peft>=0.10"),
        ("transformers[torch]>=4.40,<5", "transformers[torch]<5,>=4.40"),
        ("wandb; python_version < '3.14'", 'wandb; python_version < "3.14"'),
    ],
)
def test_pypi_requirements_are_read_as_pep_508(text: str, canonical: str) -> None:
    want = pip_want(text, "--add-pypi")
    assert want.text == canonical
    assert want.name == want.name.lower()


@pytest.mark.parametrize(
    ("text", "fix"),
    [
        ("peft @ https://example.org/peft-0.13.0.tar.gz", "direct reference"),
        ("-r other.txt", "pip option (-r)"),
        ("accelerate --hash=sha256:00", "pip option (--hash)"),
        ("--index-url https://example.org/simple", "pip option (--index-url)"),
        ("accelerate>=", "not a PEP 508 requirement"),
        ("acc elerate", "not a PEP 508 requirement"),
    ],
)
def test_pypi_requirements_envsolver_does_not_lock_are_refused(text: str, fix: str) -> None:
    with pytest.raises(BadInputError) as caught:
        pip_want(text, "reqs.txt")
    assert fix in str(caught.value), str(caught.value)


def test_an_environment_file_gives_channels_conda_specs_and_a_pip_list(tmp_path: Path) -> None:
    path = _file(
        tmp_path,
        "name: myproject\nchannels:\n  - conda-forge\n  - bioconda\n  - nodefaults\ndependencies:\n"
        "  - python=3.12\n  - transformers >=4.40\n  - jupyterlab\n  - pip:\n    - accelerate\n    - peft>=0.10\n",
    )
    project = read([path])
    assert project.channels == ("conda-forge", "bioconda"), "nodefaults is conda's word for no defaults channel"
    assert [w.spec for w in project.conda] == ["python 3.12.*", "transformers >=4.40", "jupyterlab"]
    assert {w.origin for w in project.conda} == {path}
    assert [w.text for w in project.pip] == ["accelerate", "peft>=0.10"]
    assert project.files == (path,)
    assert not project.notes


def test_variables_are_read_and_said_not_to_be_carried(tmp_path: Path) -> None:
    project = read([_file(tmp_path, "dependencies: [jupyterlab]\nvariables:\n  WANDB_MODE: offline\n")])
    assert any("variables: are not carried" in n for n in project.notes), project.notes


def test_a_requirements_file_reads_comments_and_continuations(tmp_path: Path) -> None:
    path = _file(tmp_path, "# the project's PyPI part\naccelerate  # trainer\npeft>=0.10,\\\n  <1\n\n", "reqs.txt")
    assert [w.text for w in read([path]).pip] == ["accelerate", "peft<1,>=0.10"]


@pytest.mark.parametrize(
    ("text", "fix"),
    [
        ("- jupyterlab\n", "must be a mapping"),
        ("dependencies: jupyterlab\n", "dependencies: must be a list"),
        ("dependencies:\n  - conda: [x]\n", "may only be `pip:`"),
        ("dependencies:\n  - pip: accelerate\n", "pip: must be a list of strings"),
        ("channels: [conda-forge]\ndepends: [x]\n", "unknown key(s) 'depends'"),
        ("channels:\n  - 'conda forge'\n", "neither a channel name nor a URL"),
        ("channels: ['https://user:tok@mirror.example.org/cf']\n", "Lock against a site mirror with make's --channel"),
        ("dependencies: [[x]]\n", "is not a conda spec"),
        ("dependencies: [1.5]\n", "is not a conda spec"),
        ("dependencies: [x\n", "not valid YAML"),
    ],
)
def test_a_malformed_environment_file_is_refused_naming_it(tmp_path: Path, text: str, fix: str) -> None:
    path = _file(tmp_path, text)
    with pytest.raises(BadInputError) as caught:
        read([path])
    assert fix in str(caught.value) and "env.yml" in str(caught.value), str(caught.value)
    assert "tok" not in str(caught.value), "a credential reached a message"


def test_files_that_are_not_project_files_are_refused_at_once(tmp_path: Path) -> None:
    fifo = tmp_path / "env.yml"
    os.mkfifo(fifo)
    with pytest.raises(BadInputError, match="FIFO"):
        read([str(fifo)])
    with pytest.raises(BadInputError, match=r"cannot read the project file .*missing\.yml"):
        read([str(tmp_path / "missing.yml")])
    with pytest.raises(BadInputError, match=r"neither an environment file .* nor a requirements file"):
        read([_file(tmp_path, "[project]\n", "pyproject.toml")])
    with pytest.raises(BadInputError, match="larger than"):
        read([_file(tmp_path, "#" * (2 << 20), "big.yml")])


def test_constraints_on_one_name_from_several_places_hold_together(tmp_path: Path) -> None:
    project = read([_file(tmp_path, "dependencies: ['numpy >=1.26']\n")], add=["numpy<2"])
    (numpy,) = project.conda
    assert numpy.spec == "numpy >=1.26,<2"
    assert numpy.origin.endswith("env.yml, --add"), numpy.origin
    assert project.added == ("numpy <2",), "the regenerate command repeats --add as given, not merged"


def test_two_builds_or_two_pypi_requirements_of_one_name_are_refused(tmp_path: Path) -> None:
    with pytest.raises(BadInputError, match=r"given the build 'a\*'.*and 'b\*'"):
        read(add=["numpy * a*", "numpy * b*"])
    with pytest.raises(BadInputError, match="given twice"):
        read(add_pypi=["peft>=0.10", "peft<1"])


def test_names_the_stack_holds_elsewhere_are_refused_with_the_spelling_that_works(kb: KnowledgeBase) -> None:
    with pytest.raises(BadInputError, match=r"its conda name is 'pytorch'.*Write 'pytorch >=2\.5'"):
        projectmerge.check(read(add=["torch>=2.5"]))
    with pytest.raises(BadInputError, match="pins pytorch's build"):
        projectmerge.check(read(add=["pytorch * cuda*"]))
    for name in ("torch", "triton", "deepspeed", "nvidia-cublas-cu12", "nvidia-nccl-cu13"):
        with pytest.raises(BadInputError, match=f"would install {name} from PyPI"):
            projectmerge.check(read(add_pypi=[name]))
    projectmerge.check(read(add_pypi=["pydantic>=2", "nvidia-ml-py"]))  # held by the conda part: constraints
    # The KB's rows of NVIDIA's wheels beside conda's CUDA libraries (verify's pip_conda_mix names the conda package
    # each sits beside) are all in the one list of CUDA wheels.
    from envsolver.kb import cuda_wheels

    rows = {r.pypi for r in kb.pypi_conda_names if not r.provides_dist and r.pypi.startswith("nvidia-")}
    assert rows and rows <= set(cuda_wheels.names()), sorted(rows - set(cuda_wheels.names()))
    # The fix the torch refusal names plans: the conda spec it suggests, in place of the PyPI requirement.
    assert resolve(build_target(Options(gpus=("a100",), add=("pytorch >=2.5",)), kb).target, kb).torch_version


@pytest.mark.parametrize(
    ("spec", "key", "value"),
    [
        ("pytorch>=2.5", "torch", ">=2.5"),
        ("pytorch=2.5", "torch", "2.5"),
        ("pytorch 2.5.1", "torch", "==2.5.1"),
        ("pytorch >=2.5,<2.8", "torch", ">=2.5,<2.8"),
        ("python=3.12", "python", "3.12"),
        ("python 3.12.4", "python", "3.12"),
        ("cuda-version=12.9", "cuda", "12.9"),
    ],
)
def test_specs_of_planned_packages_are_the_options_that_plan_them(spec: str, key: str, value: str) -> None:
    found = projectmerge.stack_values(read(add=[spec]))
    assert found.values == {key: value}
    assert found.origins[key].endswith("from --add"), found.origins


@pytest.mark.parametrize(("spec", "fix"), [("python>=3.10", "python=3.12"), ("cuda-version>=12", "cuda-version=12.9")])
def test_a_range_of_a_package_the_planner_picks_one_of_is_refused(spec: str, fix: str) -> None:
    with pytest.raises(BadInputError, match=f"is a range.*Write e.g. '{fix}'"):
        projectmerge.stack_values(read(add=[spec]))


def test_the_plan_takes_the_projects_constraints_and_packages(kb: KnowledgeBase, tmp_path: Path) -> None:
    path = _file(
        tmp_path,
        "channels: [conda-forge, bioconda]\ndependencies:\n  - python=3.12\n  - pytorch >=2.5\n  - numpy <3\n"
        "  - jupyterlab\n  - pip: [accelerate]\n",
    )
    inputs = build_target(Options(gpus=("a100",), files=(path,)), kb)
    plan = resolve(inputs.target, kb)
    assert str(plan.python_version) == "3.12"
    specs = {s.name: s for s in plan.specs}
    assert str(specs["numpy"]) == "numpy <3" and specs["numpy"].origin == path, "merged into the stack's numpy"
    assert str(specs["jupyterlab"]) == "jupyterlab" and list(specs)[-1] == "jupyterlab", "added after the stack's"
    assert plan.channels == ("conda-forge", "bioconda")
    assert [w.text for w in plan.project.pip] == ["accelerate"]
    assert f"-f {path}" in inputs.command
    assert any(f"from {path}" in r.decision for r in plan.reasons), [r.decision for r in plan.reasons]


def test_the_command_line_replaces_a_projects_value_and_says_so(kb: KnowledgeBase) -> None:
    inputs = build_target(Options(gpus=("a100",), torch="2.7.1", add=("pytorch<2.4",)), kb)
    assert str(inputs.target.torch) == "==2.7.1"
    assert "--torch 2.7.1 replaces pytorch <2.4 from --add" in inputs.warnings


def test_a_torch_the_gpu_cannot_run_is_refused_naming_the_project_and_the_gpu(kb: KnowledgeBase) -> None:
    """The issue's example: `pytorch<2.4` for a B200 (sm_100 needs torch 2.7+) names both, and every way out it
    offers plans when run with the project as it is."""
    target = build_target(Options(gpus=("b200",), add=("pytorch<2.4",)), kb).target
    with pytest.raises(BadInputError.__mro__[1]) as caught:  # ConflictError
        resolve(target, kb)
    message = str(caught.value)
    assert message.startswith("pytorch <2.4 from --add: no conda-forge torch build fits NVIDIA B200"), message
    assert "--torch replaces pytorch <2.4 from --add" in message, message
    import re

    for way in re.findall(r"`(--torch [^`]+)`", message):
        fixed = build_target(Options(gpus=("b200",), torch=way.split()[1], add=("pytorch<2.4",)), kb).target
        assert resolve(fixed, kb).torch_version == way.split()[1], way


def test_an_empty_project_changes_nothing(kb: KnowledgeBase) -> None:
    plain = resolve(build_target(Options(gpus=("h100",)), kb).target, kb)
    assert not Project()
    assert plain.project == Project() and not any(s.origin for s in plain.specs)
