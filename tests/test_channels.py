"""`make -c NAME` as conda takes it (conda-forge, nvidia: https://conda.anaconda.org/NAME), URLs and file://
channels as before, anything else refused with a fix that works; and one meaning per short flag across commands."""

from __future__ import annotations

from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from envsolver.cli.main import main
from envsolver.core.errors import BadInputError
from envsolver.kb import load_kb
from envsolver.lock import run as lock
from envsolver.lock import snapshot
from envsolver.net import channels
from envsolver.resolve.inputs import Options, build_target

SNAPSHOT_CF = "https://conda.anaconda.org/conda-forge"


def _snapshot_alias() -> str:
    """The bundled snapshot's directory as a file:// URL that holds conda-forge/, nvidia/, pytorch/: the stand-in
    for https://conda.anaconda.org, so a name is resolved through the alias without the network."""
    local = snapshot.channels()[SNAPSHOT_CF]
    assert local.startswith("file://") and local.endswith("/conda-forge"), local
    return local.rsplit("/", 1)[0]


@pytest.mark.parametrize("value", ["conda-forge", "nvidia", "pytorch", "conda-forge/label/broken", "rapidsai"])
def test_conda_channel_names_are_accepted(value: str) -> None:
    assert channels.is_name(value), value
    assert channels.name(value) == value
    channels.check(value)


@pytest.mark.parametrize(
    "value",
    ["https://mirror.example.org/conda-forge", "file:///srv/channels/conda-forge", "http://10.0.0.1:8080/cf/"],
)
def test_urls_still_pass(value: str) -> None:
    assert not channels.is_name(value), value
    channels.check(value)


@pytest.mark.parametrize(
    "value",
    ["", "a b", "x/y", "x/label/", "..", "-c", "conda-forge/../nvidia", ".hidden", "cf;rm", "cf$(id)", "é", "a/b/c"],
)
def test_what_is_not_a_name_or_url_is_refused(value: str) -> None:
    with pytest.raises(BadInputError) as info:
        channels.check(value)
    assert "neither a channel name nor a URL" in str(info.value), str(info.value)


def test_a_path_is_refused_with_a_file_url_that_then_works(tmp_path: Path) -> None:
    local = snapshot.channels()[SNAPSHOT_CF]
    path = local.removeprefix("file://")
    args = ["make", "--gpu", "a100", "--driver", "580.65.06", "--no-lock", "--dry-run", "-o", str(tmp_path / "o")]
    refused = CliRunner().invoke(main, [*args, "-c", path])
    assert refused.exit_code == 2, refused.output
    assert f"--channel {local}." in refused.output, refused.output
    accepted = CliRunner().invoke(main, [*args, "--channel", local])
    assert accepted.exit_code == 0, accepted.output


def test_make_dash_c_conda_forge_locks_through_the_alias(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lock, "LIVE_LOCATION", _snapshot_alias())
    out = tmp_path / "env"
    result = CliRunner().invoke(
        main,
        [
            "make",
            "--gpu",
            "a100",
            "--driver",
            "580.65.06",
            "--deepspeed-from",
            "conda-forge",
            "-c",
            "conda-forge",
            "-o",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    assert f"against {SNAPSHOT_CF}" in result.output, result.output
    urls = [line for line in (out / "conda-linux-64.lock").read_text().splitlines() if "://" in line]
    assert urls and all(u.startswith(f"{SNAPSHOT_CF}/") for u in urls), urls[:3]  # the public URL, not file://
    assert "--channel conda-forge" in (out / "environment.yml").read_text()  # "Regenerate with", as given


def test_a_name_is_named_by_its_public_url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lock, "LIVE_LOCATION", _snapshot_alias())
    kb = load_kb()
    target = build_target(Options(gpus=("a100",), deepspeed_from="conda-forge"), kb).target
    result = lock.lock(target, kb, "custom", ("conda-forge",), tmp_path / "cache", lambda _: None)
    assert result.used == "custom" and result.channels == (SNAPSHOT_CF,), result.channels


def _short_flags(command: click.Command, path: str, seen: dict[str, dict[str, str]]) -> None:
    for param in command.params:
        if isinstance(param, click.Option):
            for flag in param.opts + param.secondary_opts:
                if flag.startswith("-") and not flag.startswith("--"):
                    seen.setdefault(flag, {})[path] = max(param.opts, key=len)
    if isinstance(command, click.Group):
        ctx = click.Context(command)
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            assert sub is not None, name
            _short_flags(sub, f"{path} {name}", seen)


def test_each_short_flag_means_one_long_option_in_every_command() -> None:
    seen: dict[str, dict[str, str]] = {}
    _short_flags(main, "envsolver", seen)
    clashes = {flag: uses for flag, uses in seen.items() if len(set(uses.values())) > 1}
    assert not clashes, f"short flags with more than one meaning: {clashes}"
