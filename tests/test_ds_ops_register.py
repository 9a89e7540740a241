"""Registering the hook's ops (envsolver/hook/register.py, ds_ops_site.py) so that DeepSpeed's own load() imports
them: the files written, and what a fresh Python of that environment then sees.

No DeepSpeed here, and `python -S`, so the only site directory is the test's: it holds a stand-in `deepspeed`
package with DeepSpeed's layout for the names the finder serves (git_version_info.py that imports
git_version_info_installed, as DeepSpeed's does), a stand-in `torch` with a version, and a real C extension compiled
here whose init function is named as DeepSpeed's module for the op (PyInit_fused_adam_op). The real DeepSpeed is
exercised on the GPU machine (bench/gpu_ops_load.py).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from envsolver.hook import build, ds_ops_site, register

C_SOURCE = """
#include <Python.h>
static struct PyModuleDef def = {PyModuleDef_HEAD_INIT, "fused_adam_op", "stand-in op", -1, NULL};
PyMODINIT_FUNC PyInit_fused_adam_op(void) {
    PyObject *m = PyModule_Create(&def);
    if (m) PyModule_AddStringConstant(m, "built_by", "the test");
    return m;
}
"""

GIT_VERSION_INFO = """
try:
    from .git_version_info_installed import *  # noqa
except ModuleNotFoundError:
    version = "0.0.0"
    installed_ops = {"fused_adam": False}
    accelerator_name = ""
    torch_info = {"version": "0.0", "cuda_version": "0.0", "nccl_version": "0.0", "hip_version": "0.0"}
"""
INSTALLED = (
    "version='0.19.8'\ngit_hash='unknown'\ngit_branch='unknown'\n"
    "installed_ops={'cpu_adam': False, 'fused_adam': False, 'async_io': False}\naccelerator_name='cpu'\n"
    "torch_info={'version': '2.13', 'bf16_support': False, 'cuda_version': '0.0', 'nccl_version': '0.0', "
    "'hip_version': '0.0'}\n"
)
BUILT = register.Built(
    "0.19.8",
    "2.11.0+cu130",
    {"version": "2.11", "bf16_support": False, "cuda_version": "13.0", "nccl_version": "0.0", "hip_version": "0.0"},
)

SHOW = """
import json, site, sys
site.addsitedir(sys.argv[1])
import torch, deepspeed
from deepspeed.git_version_info import installed_ops, accelerator_name, torch_info, version
out = {"installed": sorted(k for k, v in installed_ops.items() if v), "accelerator": accelerator_name,
       "torch_info": torch_info, "version": version}
try:
    import deepspeed.ops.adam.fused_adam_op as op
    out["op"] = [op.__name__, op.built_by, op.__file__]
except ImportError as exc:
    out["op"] = type(exc).__name__
print(json.dumps(out))
"""


@pytest.fixture(scope="session")
def extension(tmp_path_factory: pytest.TempPathFactory) -> Path:
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler")
    work = tmp_path_factory.mktemp("ext")
    (work / "op.c").write_text(C_SOURCE)
    out = work / "fused_adam_op.so"
    include = sysconfig.get_paths()["include"]
    subprocess.run([compiler, "-shared", "-fPIC", f"-I{include}", str(work / "op.c"), "-o", str(out)], check=True)
    return out


def make_site(
    tmp_path: Path, torch_version: str = "2.11.0+cu130", installed: str | None = INSTALLED, version_txt: bool = True
) -> Path:
    site = tmp_path / "site-packages"
    (site / "torch").mkdir(parents=True)
    (site / "torch" / "__init__.py").write_text(f"__version__ = {torch_version!r}\n")
    ds = site / "deepspeed"
    (ds / "ops" / "adam").mkdir(parents=True)
    (ds / "__init__.py").write_text("import torch\nfrom .git_version_info import version as __version__\n")
    (ds / "ops" / "__init__.py").write_text("")
    (ds / "ops" / "adam" / "__init__.py").write_text("")
    (ds / "git_version_info.py").write_text(GIT_VERSION_INFO)
    if version_txt:  # a source checkout's; a wheel has only git_version_info_installed.py
        (ds / "version.txt").write_text("0.19.8\n")
    if installed is not None:
        (ds / "git_version_info_installed.py").write_text(installed)
    return site


def show(site: Path) -> tuple[dict[str, object], str]:
    done = subprocess.run([sys.executable, "-S", "-c", SHOW, str(site)], capture_output=True, text=True, check=True)
    return json.loads(done.stdout), done.stderr


def registered_op(extension: Path, tmp_path: Path) -> register.Registered:
    lib = tmp_path / "prefix" / "lib" / "envsolver-ops" / "fused_adam_op.so"
    lib.parent.mkdir(parents=True)
    shutil.copyfile(extension, lib)
    return register.Registered("fused_adam", "deepspeed.ops.adam.fused_adam_op", lib)


def test_without_registration_deepspeed_sees_its_own_install(tmp_path: Path, extension: Path) -> None:
    seen, _ = show(make_site(tmp_path))
    assert seen["installed"] == [] and seen["accelerator"] == "cpu" and seen["op"] == "ModuleNotFoundError"


def test_registered_ops_are_installed_ops_and_import_from_the_prefix(tmp_path: Path, extension: Path) -> None:
    site = make_site(tmp_path)
    op = registered_op(extension, tmp_path)
    written = register.write(site, [op], BUILT)
    assert [p.name for p in written] == ["envsolver_ds_ops.py", "envsolver_ds_ops.json", "envsolver_ds_ops.pth"]
    assert (site / "envsolver_ds_ops.pth").read_text() == "import envsolver_ds_ops\n"
    assert (site / "envsolver_ds_ops.py").read_bytes() == Path(ds_ops_site.__file__).read_bytes()
    seen, err = show(site)
    assert seen == {
        "installed": ["fused_adam"],
        "accelerator": "cuda",
        "torch_info": dict(BUILT.torch_info),
        "version": "0.19.8",
        "op": ["deepspeed.ops.adam.fused_adam_op", "the test", str(op.file)],
    }
    assert err == ""
    # DeepSpeed's own files are untouched
    assert (site / "deepspeed" / "git_version_info_installed.py").read_text() == INSTALLED


def test_a_deepspeed_without_an_installed_info_module_is_registered_too(tmp_path: Path, extension: Path) -> None:
    """A source checkout of DeepSpeed has no git_version_info_installed: the registry supplies one."""
    site = make_site(tmp_path, installed=None)
    register.write(site, [registered_op(extension, tmp_path)], BUILT)
    seen, _ = show(site)
    assert seen["installed"] == ["fused_adam"] and seen["version"] == "0.19.8"
    assert isinstance(seen["op"], list)


def test_another_torch_registers_nothing_and_says_how_to_register_again(tmp_path: Path, extension: Path) -> None:
    site = make_site(tmp_path, torch_version="2.12.0+cu130")
    register.write(site, [registered_op(extension, tmp_path)], BUILT)
    seen, err = show(site)
    assert seen["installed"] == [] and seen["accelerator"] == "cpu" and seen["op"] == "ModuleNotFoundError"
    assert "built for DeepSpeed 0.19.8 and torch 2.11.0+cu130, not DeepSpeed 0.19.8 and torch 2.12.0+cu130" in err
    assert 'Run `envsolver hook -p "$CONDA_PREFIX"`' in err


def test_a_missing_library_is_not_served(tmp_path: Path, extension: Path) -> None:
    site = make_site(tmp_path)
    op = registered_op(extension, tmp_path)
    register.write(site, [op], BUILT)
    op.file.unlink()
    seen, _ = show(site)
    assert seen["op"] == "ModuleNotFoundError"


def test_a_damaged_registry_registers_nothing(tmp_path: Path, extension: Path) -> None:
    site = make_site(tmp_path)
    register.write(site, [registered_op(extension, tmp_path)], BUILT)
    (site / "envsolver_ds_ops.json").write_text("{broken")
    seen, err = show(site)
    assert seen["installed"] == [] and seen["op"] == "ModuleNotFoundError" and err == ""


def test_writing_no_ops_unregisters(tmp_path: Path, extension: Path) -> None:
    site = make_site(tmp_path)
    register.write(site, [registered_op(extension, tmp_path)], BUILT)
    register.write(site, [], BUILT)
    assert sorted(p.name for p in site.iterdir()) == ["deepspeed", "torch"]
    seen, _ = show(site)
    assert seen["installed"] == []


def test_the_registry_reads_back_as_written(tmp_path: Path, extension: Path) -> None:
    site = make_site(tmp_path)
    op = registered_op(extension, tmp_path)
    register.write(site, [op], BUILT)
    assert register.read(site) == register.registry([op], BUILT)


@pytest.mark.parametrize(
    ("module", "file", "built"),
    [
        ("os.path", "/p/x.so", BUILT),
        ("deepspeed.ops.adam.fused_adam_op; import os", "/p/x.so", BUILT),
        ("deepspeed.ops.adam.fused_adam_op", "relative/x.so", BUILT),
        ("deepspeed.ops.adam.fused_adam_op", "/p/x.so", register.Built("0.19.8'\nimport os", "2.11.0", {})),
        ("deepspeed.ops.adam.fused_adam_op", "/p/x.so", register.Built("0.19.8", "2.11.0", {"version": "2.11';"})),
    ],
)
def test_values_outside_their_grammar_are_never_written(tmp_path: Path, module: str, file: str, built: object) -> None:
    with pytest.raises(ValueError):
        register.write(tmp_path, [register.Registered("fused_adam", module, Path(file))], built)  # type: ignore[arg-type]
    assert list(tmp_path.iterdir()) == []


def _set(path: tuple[str, ...], value: object) -> Callable[[dict[str, Any]], None]:
    def change(doc: dict[str, Any]) -> None:
        for key in path[:-1]:
            doc = doc[key]
        doc[path[-1]] = value

    return change


def _rename_op(doc: dict[str, Any]) -> None:
    doc["ops"]["fused adam"] = doc["ops"].pop("fused_adam")


# Each value of a registry, edited outside its grammar after the hook wrote it (SECURITY.md: every value in the
# registry matches a grammar, when written and when read).
EDITS = {
    "module-outside-deepspeed": _set(("ops", "fused_adam", "module"), "colorsys"),
    "module-with-a-newline": _set(("ops", "fused_adam", "module"), "deepspeed.ops.adam.fused_adam_op\nimport os"),
    "module-with-an-empty-part": _set(("ops", "fused_adam", "module"), "deepspeed..adam"),
    "op-name": _rename_op,
    "file-relative": _set(("ops", "fused_adam", "file"), "lib/x.so"),
    "file-with-a-newline": _set(("ops", "fused_adam", "file"), "/p/x.so\n"),
    "file-with-a-nul": _set(("ops", "fused_adam", "file"), "/p/x\x00.so"),
    "deepspeed-version": _set(("deepspeed",), "0.19.8'\nimport os"),
    "torch-version": _set(("torch",), "2.11.0 \x1b]0;title\x07"),
    "accelerator": _set(("accelerator",), "cuda; rm"),
    "torch-info-version": _set(("torch_info", "version"), "2.11';"),
    "torch-info-bf16": _set(("torch_info", "bf16_support"), "yes"),
    "torch-info-extra-key": _set(("torch_info", "evil"), "x"),
    "extra-key": _set(("evil",), 1),
}


@pytest.mark.parametrize("edit", list(EDITS.values()), ids=list(EDITS))
def test_a_registry_value_outside_its_grammar_is_refused_when_read(
    tmp_path: Path, extension: Path, edit: Callable[[dict[str, Any]], None]
) -> None:
    """Issue 20, finding 8: the .pth finder rechecks every value it reads against the grammar the hook wrote it
    with, and registers nothing when one is outside it."""
    site = make_site(tmp_path)
    register.write(site, [registered_op(extension, tmp_path)], BUILT)
    path = site / "envsolver_ds_ops.json"
    doc = json.loads(path.read_text())
    edit(doc)
    path.write_text(json.dumps(doc))
    assert ds_ops_site.read_registry(str(path)) is None, doc


COLORSYS = """
import json, site, sys
site.addsitedir(sys.argv[1])
import torch, deepspeed
from deepspeed.git_version_info import installed_ops
try:
    import colorsys
    print(json.dumps({"colorsys": colorsys.__file__}))
except ImportError as exc:
    print(json.dumps({"colorsys": f"{type(exc).__name__}: {exc}"}))
"""


def test_a_registry_naming_a_module_outside_deepspeed_serves_nothing(tmp_path: Path, extension: Path) -> None:
    """A registry edited to name `colorsys` would have the finder (first on sys.meta_path) serve the op's library
    for the standard library's module."""
    site = make_site(tmp_path)
    register.write(site, [registered_op(extension, tmp_path)], BUILT)
    path = site / "envsolver_ds_ops.json"
    doc = json.loads(path.read_text())
    doc["ops"]["fused_adam"]["module"] = "colorsys"
    path.write_text(json.dumps(doc))
    done = subprocess.run(
        [sys.executable, "-S", "-c", COLORSYS, str(site)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)["colorsys"]
    assert seen.endswith("colorsys.py"), f"colorsys came from {seen}: {done.stderr}"


def test_a_registry_larger_than_its_bound_is_not_read(tmp_path: Path, extension: Path) -> None:
    site = make_site(tmp_path)
    register.write(site, [registered_op(extension, tmp_path)], BUILT)
    path = site / "envsolver_ds_ops.json"
    path.write_text(path.read_text() + " " * ds_ops_site.MAX_REGISTRY)  # still valid JSON, past the bound
    assert ds_ops_site.read_registry(str(path)) is None


@settings(max_examples=80, deadline=None)
@given(st.one_of(st.text(max_size=80), st.dictionaries(st.text(max_size=8), st.text(max_size=8), max_size=4)))
def test_read_registry_of_anything_is_none_or_a_registry(tmp_path_factory: pytest.TempPathFactory, doc: object) -> None:
    path = tmp_path_factory.mktemp("reg") / "r.json"
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    got = ds_ops_site.read_registry(str(path))
    assert got is None or (got["format"] == 1 and isinstance(got["ops"], dict))


BUILDERS_ONLY = """
import importlib.util, json, sys
sys.path.insert(0, sys.argv[1])
spec = importlib.util.spec_from_file_location("op_runner", sys.argv[2])
runner = importlib.util.module_from_spec(spec)
spec.loader.exec_module(runner)
version = runner._builders_only()
import deepspeed
import deepspeed.ops.op_builder as op_builder
print(json.dumps({"version": version, "package": deepspeed.__version__, "accelerator": op_builder.ACCELERATOR}))
"""


def test_the_builds_import_deepspeeds_builders_without_its_package_init(tmp_path: Path) -> None:
    """The hook's build processes import deepspeed.ops.op_builder and deepspeed.accelerator, not DeepSpeed's
    package init (which imports transformers and torch._dynamo: ~10 s on the GPU machine's image)."""
    site = make_site(tmp_path, version_txt=False)
    ds = site / "deepspeed"
    (ds / "__init__.py").write_text("raise ImportError('DeepSpeed\\'s package init ran')\n")
    (ds / "ops" / "__init__.py").write_text("raise ImportError('deepspeed.ops\\' init ran')\n")
    (ds / "ops" / "op_builder").mkdir()
    (ds / "ops" / "op_builder" / "__init__.py").write_text("from deepspeed.accelerator import NAME as ACCELERATOR\n")
    (ds / "accelerator").mkdir()
    (ds / "accelerator" / "__init__.py").write_text("NAME = 'cuda'\n")
    done = subprocess.run(
        [sys.executable, "-S", "-c", BUILDERS_ONLY, str(site), str(build.RUNNER)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"version": "0.19.8", "package": "0.19.8", "accelerator": "cuda"}


COMPAT = """
import json, site, sys
site.addsitedir(sys.argv[1])
import torch, deepspeed
import deepspeed.git_version_info as info
print(json.dumps({"installed": sorted(k for k, v in info.installed_ops.items() if v),
                  "compatible": getattr(info, "compatible_ops", "absent"),
                  "accelerator": getattr(info, "accelerator_name", "absent")}))
"""
# DeepSpeed 0.14.0 writes compatible_ops into git_version_info_installed (setup.py) and no accelerator_name; 0.14.1
# to 0.19.7 compute compatible_ops in git_version_info at import; 0.19.8 keeps them in deepspeed.ops (lazily).
INSTALLED_0140 = (
    "version='0.14.0'\ngit_hash='unknown'\ngit_branch='unknown'\ninstalled_ops={'fused_adam': False}\n"
    "compatible_ops={'fused_adam': True, 'async_io': False}\n"
    "torch_info={'version': '2.13', 'cuda_version': '0.0', 'hip_version': '0.0'}\n"
)
INFO_0197 = GIT_VERSION_INFO + "compatible_ops = {'fused_adam': True, 'from': 'git_version_info'}\n"


@pytest.mark.parametrize(
    ("installed", "info", "compatible"),
    [
        (INSTALLED_0140, GIT_VERSION_INFO, {"fused_adam": True, "async_io": False}),
        (INSTALLED, INFO_0197, {"fused_adam": True, "from": "git_version_info"}),
        (INSTALLED, GIT_VERSION_INFO, "absent"),
    ],
    ids=["0.14.0", "0.14.1-0.19.7", "0.19.8"],
)
def test_registration_leaves_compatible_ops_where_each_release_keeps_them(
    tmp_path: Path, extension: Path, installed: str, info: str, compatible: object
) -> None:
    """The registry adds the ops and the accelerator to DeepSpeed's installed info and touches nothing else: the
    compatible_ops a release keeps in its installed info (0.14.0) or computes in git_version_info (0.14.1-0.19.7)
    are as DeepSpeed made them, and 0.19.8's git_version_info still has none (verify's probe reads them from
    deepspeed.ops there)."""
    site = make_site(tmp_path, installed=installed)
    (site / "deepspeed" / "git_version_info.py").write_text(info)
    version = "0.14.0" if installed is INSTALLED_0140 else "0.19.8"
    built = register.Built(version, BUILT.torch, BUILT.torch_info)
    register.write(site, [registered_op(extension, tmp_path)], built)
    done = subprocess.run([sys.executable, "-S", "-c", COMPAT, str(site)], capture_output=True, text=True, check=True)
    assert done.stderr == ""
    seen = json.loads(done.stdout)
    assert seen == {"installed": ["fused_adam"], "compatible": compatible, "accelerator": "cuda"}
