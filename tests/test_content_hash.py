"""conda-lock.yml's `content_hash` is the one conda-lock computes (issue 19, item 5).

`make` writes, beside the lock, the virtual packages it was solved for in conda-lock's `--virtual-package-spec`
format (virtual-packages.yml), and sets `metadata.content_hash` per platform to what conda-lock's own
`compute_content_hashes` gives for the written environment.yml with that file. Every test here calls
conda-lock's functions on the written files; envsolver computes the digest without importing conda-lock.

conda-lock maps the PyPI name `pip` (the conda `pip` it adds for a `pip:` section) to a conda name through a
mapping it downloads from GitHub, which this machine cannot reach: the tests give it a local mapping with no
entry, so the name maps to itself (conda-lock's fallback), which is what the published mapping gives for pip.
"""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from conda_lock.content_hash import backwards_compatible_content_hashes, compute_content_hashes
from conda_lock.src_parser import make_lock_spec
from conda_lock.virtual_package import virtual_package_repo_from_specification

from envsolver.cli.main import main
from envsolver.kb import KnowledgeBase
from envsolver.lock import outputs
from envsolver.lock import run as lock
from envsolver.lock.writers import environment, fileset, inputhash, virtualpkgs
from envsolver.resolve.inputs import Options, build_target
from envsolver.resolve.run import resolve

ENV = {"ENVSOLVER_GPUS": None, "ENVSOLVER_DRIVER": None}
CLUSTER = Path(__file__).parent / "data" / "cluster" / "mixed.yaml"
VPKG = "virtual-packages.yml"


def _mapping(tmp: Path) -> Path:
    path = tmp / "pypi-mapping.json"
    path.write_text("{}", encoding="utf-8")
    return path


def conda_locks_hashes(out: Path, platforms: list[str], tmp: Path) -> dict[str, str]:
    """conda-lock's compute_content_hashes for OUT/environment.yml with OUT/virtual-packages.yml, as
    `conda-lock lock -f environment.yml --virtual-package-spec virtual-packages.yml -p PLATFORM` builds them."""
    spec = make_lock_spec(
        src_files=[out / "environment.yml"], platform_overrides=platforms, mapping_url=str(_mapping(tmp))
    )
    repo = virtual_package_repo_from_specification(out / VPKG)
    hashes = compute_content_hashes(spec, repo)
    for platform, digest in hashes.items():  # what --check-input-hash compares a lock against
        assert digest in backwards_compatible_content_hashes(spec, repo, platform)
    return dict(hashes)


def _lock_doc(out: Path) -> dict[str, object]:
    doc: dict[str, object] = yaml.safe_load((out / "conda-lock.yml").read_text(encoding="utf-8"))
    return doc


def _make(args: list[str], out: Path) -> None:
    result = CliRunner(env=ENV).invoke(main, ["make", *args, "--out", str(out)])
    assert result.exit_code == 0, result.output


def _check(out: Path, tmp: Path) -> dict[str, str]:
    meta = _lock_doc(out)["metadata"]
    assert isinstance(meta, dict)
    written = meta["content_hash"]
    assert written == conda_locks_hashes(out, list(meta["platforms"]), tmp), (out / "environment.yml").read_text()
    assert isinstance(written, dict)
    return written


MADE = {
    "a100 (conda-forge)": ["--gpu", "a100", "--offline"],
    "gh200 (linux-aarch64, deepspeed from PyPI)": ["--profile", "gh200", "--offline"],
    "h100 torch 2.7 (conda-forge)": ["--gpu", "h100", "--torch", "2.7", "--offline"],
    "v100 old driver": ["--gpu", "v100", "--driver", "535.104.05", "--offline"],
}


@pytest.mark.parametrize("args", MADE.values(), ids=MADE.keys())
def test_make_writes_conda_locks_content_hash(args: list[str], tmp_path: Path) -> None:
    out = tmp_path / "out"
    _make(args, out)
    _check(out, tmp_path)


def test_a_pip_section_is_hashed_as_conda_lock_hashes_it(tmp_path: Path) -> None:
    """gh200's plan takes DeepSpeed from PyPI: environment.yml has `- pip` and a `pip:` section."""
    out = tmp_path / "out"
    _make(["--profile", "gh200", "--offline"], out)
    env = yaml.safe_load((out / "environment.yml").read_text())
    assert any(isinstance(d, dict) and d.get("pip") for d in env["dependencies"]), env
    _check(out, tmp_path)


def test_a_cluster_make_writes_conda_locks_hash_for_each_platform(tmp_path: Path) -> None:
    _make(["--cluster", str(CLUSTER), "--offline"], tmp_path / "out")
    for platform in ("linux-64", "linux-aarch64"):
        assert list(_check(tmp_path / "out" / platform, tmp_path)) == [platform]


def _render(kb: KnowledgeBase, tmp: Path, **options: object) -> Path:
    """The files render_all gives for the plan explain shows (records need not exist for the hash), written."""
    plan = resolve(build_target(Options(**options), kb).target, kb)  # type: ignore[arg-type]
    result = lock.LockResult(
        plan, {plan.platform: ()}, (), "live", None, {plan.platform: lock.virtual_packages(kb, plan)}
    )
    out = tmp / "rendered"
    out.mkdir()
    for name, text in outputs.render_all(result, kb, "envsolver make", None).items():
        (out / name).write_text(text, encoding="utf-8")
    return out


def test_the_legacy_pytorch_channel_plan_with_its_pip_section(kb: KnowledgeBase, tmp_path: Path) -> None:
    """The seeds' recipe (pytorch, nvidia, conda-forge; DeepSpeed from PyPI). The snapshot cannot lock it
    coherently (tests/test_lock_plan.py), so its files are rendered for the plan the live channels would lock."""
    out = _render(kb, tmp_path, gpus=("rtx4090",), driver="550.54.15", torch="2.3", source="pytorch", python="3.10")
    env = yaml.safe_load((out / "environment.yml").read_text())
    assert env["channels"] == ["pytorch", "nvidia", "conda-forge"]
    assert {"pip": ["deepspeed==0.19.8"]} in env["dependencies"], env
    _check(out, tmp_path)


def test_pip_requirements_of_every_form_envsolver_accepts_hash_as_conda_lock_does(
    kb: KnowledgeBase, tmp_path: Path
) -> None:
    """A plan whose pip section holds more than DeepSpeed (as the PyPI part of a lock may): names are
    canonicalised and each `==` pin kept, as conda-lock's parser does."""
    plan = resolve(build_target(Options(gpus=("a100",)), kb).target, kb)
    plan = replace(plan, pip=("deepspeed==0.19.8", "Py_CpuInfo==9.0.0", "nvidia-ml-py==12.575.51"))
    result = lock.LockResult(
        plan, {plan.platform: ()}, (), "live", None, {plan.platform: lock.virtual_packages(kb, plan)}
    )
    out = tmp_path / "out"
    out.mkdir()
    for name, text in outputs.render_all(result, kb, "envsolver make", None).items():
        (out / name).write_text(text, encoding="utf-8")
    _check(out, tmp_path)


def test_the_hash_moves_with_each_input_as_conda_locks_does(kb: KnowledgeBase, tmp_path: Path) -> None:
    """A changed spec, channel or virtual package changes both digests alike (the digest is not a constant)."""
    plan = resolve(build_target(Options(gpus=("a100",)), kb).target, kb)
    base = inputhash.content_hashes(environment.entries(plan), {plan.platform: lock.virtual_packages(kb, plan)})[
        plan.platform
    ]
    variants = {
        "spec": replace(plan, specs=plan.specs[:-1]),
        "channel": replace(plan, channels=("conda-forge", "nvidia")),
        "virtual": replace(plan, virtual_packages={**plan.virtual_packages, "__cuda": "12.2"}),
    }
    for what, changed in variants.items():
        result = lock.LockResult(
            changed, {changed.platform: ()}, (), "live", None, {changed.platform: lock.virtual_packages(kb, changed)}
        )
        out = tmp_path / what
        out.mkdir()
        for name, text in outputs.render_all(result, kb, "envsolver make", None).items():
            (out / name).write_text(text, encoding="utf-8")
        digest = _check(out, tmp_path)[plan.platform]
        assert digest != base, what


def test_the_virtual_package_file_is_conda_locks_format_and_holds_what_was_solved(tmp_path: Path) -> None:
    out = tmp_path / "out"
    _make(["--gpu", "a100", "--offline"], out)
    text = (out / VPKG).read_text(encoding="utf-8")
    meta = _lock_doc(out)["metadata"]
    assert isinstance(meta, dict)
    custom = meta["custom_metadata"]
    doc = yaml.safe_load(text)
    packages = doc["subdirs"]["linux-64"]["packages"]
    # The same values conda-lock.yml records (envsolver_virtual_linux-64_*) and the solve used.
    assert packages == {
        "__" + key.removeprefix("envsolver_virtual_linux-64_"): value
        for key, value in custom.items()
        if key.startswith("envsolver_virtual_linux-64_")
    }, text
    assert all(isinstance(v, str) for v in packages.values()), text  # "12.9", never the float 12.9
    repo = virtual_package_repo_from_specification(out / VPKG)
    names = {p["name"] for p in repo.all_repodata["linux-64"]["packages"].values()}  # type: ignore[index]
    assert names == set(packages)
    # Stamped like every file make writes, with a header naming the tool and the check command.
    assert text.startswith("# Generated by envsolver")
    assert "conda-lock lock -f environment.yml --virtual-package-spec virtual-packages.yml" in text
    assert "# envsolver-sha256: " in text


def test_the_lock_header_names_the_virtual_package_file(tmp_path: Path) -> None:
    out = tmp_path / "out"
    _make(["--gpu", "a100", "--offline"], out)
    header = [line for line in (out / "conda-lock.yml").read_text().splitlines() if line.startswith("#")]
    assert any(VPKG in line and "--check-input-hash" in line for line in header), header


def test_the_virtual_package_file_is_part_of_makes_set(tmp_path: Path) -> None:
    out = tmp_path / "out"
    _make(["--gpu", "a100", "--offline"], out)
    first = (out / VPKG).read_bytes()
    _make(["--gpu", "a100", "--offline"], out)
    assert (out / VPKG).read_bytes() == first  # deterministic
    assert fileset.MEMBER.fullmatch(VPKG)
    # A hand edit refuses the whole set, as for the other members.
    (out / VPKG).write_text((out / VPKG).read_text().replace('"2.28"', '"2.17"'), encoding="utf-8")
    refused = CliRunner(env=ENV).invoke(main, ["make", "--gpu", "a100", "--offline", "--out", str(out)])
    assert refused.exit_code == 2 and VPKG in refused.output, refused.output
    # --no-lock writes environment.yml alone: the lock's companions go with the lock.
    _make(["--gpu", "a100", "--offline", "--no-lock", "--force"], out)
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith(".")) == ["environment.yml"]


def test_make_json_lists_the_virtual_package_file(tmp_path: Path) -> None:
    result = CliRunner(env=ENV).invoke(main, ["make", "--gpu", "a100", "--offline", "--out", str(tmp_path), "--json"])
    assert result.exit_code == 0, result.output
    assert str(tmp_path / VPKG) in json.loads(result.stdout)["files"]


def test_virtualpkgs_renders_every_platform_sorted() -> None:
    text = virtualpkgs.render(
        {"linux-aarch64": {"__unix": "0", "__archspec": "1 aarch64"}, "linux-64": {"__glibc": "2.28", "__unix": "0"}},
        "envsolver make --cluster c.yaml",
        "2026-07-02",
    )
    doc = yaml.safe_load(text)
    assert list(doc["subdirs"]) == ["linux-64", "linux-aarch64"]
    assert list(doc["subdirs"]["linux-aarch64"]["packages"]) == ["__archspec", "__unix"]
    assert doc["subdirs"]["linux-aarch64"]["packages"]["__archspec"] == "1 aarch64"


@pytest.mark.parametrize(
    ("entries", "why"),
    [
        ((("conda-forge",), ("python =3.12",), ()), "python =3.12"),
        ((("conda-forge",), ("pytorch ==2.10.* cuda129*",), ()), "pytorch ==2.10.* cuda129*"),
        ((("https://mirror.example.org/conda-forge",), ("python",), ()), "https://mirror.example.org/conda-forge"),
        (
            (("conda-forge",), ("python",), ("deepspeed @ https://example.org/d.tar.gz",)),
            "deepspeed @ https://example.org/d.tar.gz",
        ),
    ],
)
def test_a_form_conda_lock_would_rewrite_is_refused_not_guessed(
    entries: tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]], why: str
) -> None:
    """Only forms whose conda-lock reading is known (tests/test_inputhash.py) are hashed; another is an
    envsolver bug, named, never a digest conda-lock would not give."""
    with pytest.raises(ValueError, match=re.escape(repr(why))):
        inputhash.content_hashes(inputhash.Entries(*entries), {"linux-64": {"__unix": "0"}})


def _stub_conda(tmp: Path) -> tuple[Path, Path]:
    """conda is not installed here and cannot be fetched: conda-lock asks the executable it is given for its
    version before anything else. This one answers that, and records (and fails) any other call, so a run
    that tried to solve would show it."""
    calls = tmp / "conda-calls.log"
    script = tmp / "conda"
    script.write_text(
        "#!/bin/sh\n"
        'if [ "$1" = "--version" ]; then echo "conda 24.11.3"; exit 0; fi\n'
        f'echo "$@" >> "{calls}"\n'
        "exit 3\n",
        encoding="utf-8",
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script, calls


@pytest.mark.parametrize("args", [["--gpu", "a100"], ["--profile", "gh200"]], ids=["a100", "gh200-pip"])
def test_conda_lock_check_input_hash_sees_the_lock_as_current(args: list[str], tmp_path: Path) -> None:
    """`conda-lock lock -f environment.yml --virtual-package-spec virtual-packages.yml -p PLATFORM
    --check-input-hash` (its CLI, in a subprocess, in the output directory) skips the solve for every platform
    and leaves the lock as it is."""
    out = tmp_path / "out"
    _make([*args, "--offline"], out)
    platform = _lock_doc(out)["metadata"]["platforms"][0]  # type: ignore[index]
    before = (out / "conda-lock.yml").read_bytes()
    conda, calls = _stub_conda(tmp_path)
    command = [
        sys.executable, "-m", "conda_lock", "lock",
        "-f", "environment.yml", "--virtual-package-spec", VPKG, "-p", platform, "--check-input-hash",
        "--conda", str(conda), "--no-mamba", "--no-micromamba",
        "--pypi_to_conda_lookup_file", str(_mapping(tmp_path)),
    ]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CONDA_", "PYTEST"))}
    done = subprocess.run(command, cwd=out, capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr
    assert f"Spec hash already locked for ['{platform}']. Skipping solve." in done.stderr, done.stderr
    assert "Locking dependencies" not in done.stderr, done.stderr
    assert not calls.exists(), calls.read_text()
    assert (out / "conda-lock.yml").read_bytes() == before
    # The control: with another glibc in the virtual-package file the hash differs, and conda-lock sets out to
    # solve again (it asks the stand-in conda to, which refuses).
    vpkg = out / VPKG
    vpkg.write_text(vpkg.read_text(encoding="utf-8").replace('__glibc: "2.28"', '__glibc: "2.17"'), encoding="utf-8")
    again = subprocess.run(command, cwd=out, capture_output=True, text=True, timeout=300, env=env)
    assert again.returncode != 0 and f"Locking dependencies for ['{platform}']" in again.stderr, again.stderr
    assert calls.read_text().startswith("create "), calls.read_text()
