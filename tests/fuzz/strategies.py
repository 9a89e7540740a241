"""Hypothesis strategies for every input envsolver reads: CLI values, ENVSOLVER_* variables, profiles, both lock
formats, lock-metadata.json, the KB files and the detection outputs. Each mixes valid values (to reach deep
code), near misses (the grammar's edges) and junk."""

from __future__ import annotations

import json
from typing import Any

import yaml
from hypothesis import strategies as st

# Real argv and environment values cannot hold NUL; files can, so file strategies keep it. Bytes that are not UTF-8
# reach a program as Python decodes them (PEP 383): U+DC80..U+DCFF, one for each undecodable byte (`$'\xff'`).
UNDECODABLE = st.characters(min_codepoint=0xDC80, max_codepoint=0xDCFF)
_ARG_CHARS = st.one_of(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), UNDECODABLE)
junk = st.text(_ARG_CHARS, max_size=30)
file_junk = st.text(st.characters(blacklist_categories=("Cs",)), max_size=200)
# What a compute node, a server, Slurm or nvidia-smi could send to take a terminal over (issue 20): escape
# sequences (title set, clear screen, cursor moves, colours; 7-bit and 8-bit CSI/OSC), other control characters,
# bidi overrides and line separators, rich markup and emoji codes; spliced with junk.
TERMINAL_ATTACKS = [
    "\x1b]0;pwned\x07", "\x1b]2;t\x1b\\", "\x1b[2J", "\x1b[H", "\x1b[1A\x1b[2K", "\x1b[31m", "\x1bc", "\x9b2J",
    "\x9d0;t\x9c", "\r", "\x08", "\x07", "\x7f", "\x85", "\u202e", "\u2028", "[bold]", "[/]", "[link=x]", ":warning:",
]  # fmt: skip
terminal_junk = st.lists(
    st.one_of(st.sampled_from(TERMINAL_ATTACKS), junk, st.text(st.characters(categories=("Cc",)), max_size=3)),
    max_size=6,
).map("".join)
# Past Python's 4300-digit int() limit, and unicode digits that int() and \d accept.
huge_number = st.integers(4290, 4400).map(lambda n: "9" * n)
odd_numbers = st.sampled_from(
    ["١٢.٤", "１２.４", "12.4.²", "0x10", "1e3", "-1", "+1.0", "1_0.0", "∞", "12.4\n", " 12 . 4"]
)
version_like = st.from_regex(r"[0-9.x*<>=!~,+ a-]{0,16}", fullmatch=True)


def value(valid: list[str]) -> st.SearchStrategy[str]:
    """A value for an option: one of the valid ones, a near miss, a huge number, or junk."""
    return st.one_of(
        st.sampled_from(valid),
        version_like,
        odd_numbers,
        huge_number,
        huge_number.map(lambda d: f"1.{d}"),
        huge_number.map(lambda d: f">={d}"),
        junk,
    )


GPUS = ["a100", "h100", "v100", "rtx5090", "gh200", "NVIDIA H200", "Tesla V100-SXM2-16GB", "auto", " AUTO ", "t4"]
DRIVERS = ["535.104.05", "580", "570.26", "550.54.14", "450.80.02"]
PYTHONS = ["3.11", "3.12", "3.10", "3.9", "2.7"]
TORCHES = ["2.5", "2.3.1", ">=2.4,<2.6", "2", "2.13", "==2.7.*", "~=2.4", "===2.5.1", "", " "]
CUDAS = ["12.4", "12.9", "13.0", "11.8", "12.4.1"]
GLIBCS = ["2.28", "2.17", "2.35"]

_VALUED = {
    "--gpu": GPUS,
    "--driver": DRIVERS,
    "--python": PYTHONS,
    "--torch": TORCHES,
    "--cuda": CUDAS,
    "--glibc": GLIBCS,
    "--driver-compat": ["full", "minor"],
    "--source": ["conda-forge", "pytorch"],
    "--platform": ["linux-64", "linux-aarch64"],
    "--profile": ["a100", "gh200", "cluster-v100-a100-h100", "../profiles/a100", "missing"],
}
_FLAGS = ["--json", "--no-deepspeed", "--deepspeed"]


def _flatten(parts: list[list[str]]) -> list[str]:
    return [item for part in parts for item in part]


target_option = st.one_of(
    *(st.tuples(st.just(flag), value(valid)).map(list) for flag, valid in _VALUED.items()),
    st.sampled_from(_FLAGS).map(lambda f: [f]),
)
# Half of the runs start from a valid GPU so the later options reach the resolver.
target_args = st.tuples(
    st.sampled_from([[], ["--gpu", "a100"], ["--gpu", "h100", "--driver", "535.104.05"]]),
    st.lists(target_option, max_size=5).map(_flatten),
).map(lambda t: t[0] + t[1])

envsolver_env = st.fixed_dictionaries(
    {},
    optional={
        "ENVSOLVER_GPUS": st.one_of(st.sampled_from(["a100", "a100,h100", ",", " , a100 ,", "auto"]), value(GPUS)),
        "ENVSOLVER_DRIVER": value(DRIVERS),
    },
)

channel_urls = st.one_of(
    st.sampled_from(
        [
            "https://conda.anaconda.org/conda-forge",
            "https://user:secret@mirror.example.org/conda-forge",
            "https://mirror.example.org/t/tk-123/conda-forge",
            "http://[::1",
            "http://[::1]:8080/c",
            "file:///nonexistent/channel",
            "",
        ]
    ),
    junk,
)

# --- YAML values and profiles -------------------------------------------------------------------------------

yaml_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
    st.sampled_from(["a100", "3.11", "535.104.05", "linux-64", "conda-forge", "minor"]),
)
yaml_values = st.recursive(
    yaml_scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(st.one_of(st.text(max_size=8), st.integers()), children, max_size=4),
    ),
    max_leaves=12,
)
PROFILE_KEYS = ["description", "gpus", "driver", "python", "torch", "cuda", "source", "platform", "deepspeed",
                "driver_compat", "glibc"]  # fmt: skip
_profile_key = st.one_of(
    st.sampled_from(PROFILE_KEYS), st.integers(), st.booleans(), st.none(), st.floats(allow_nan=False), junk
)
_profile_doc = st.dictionaries(_profile_key, st.one_of(yaml_values, st.sampled_from([["a100"], ["h100", "v100"]])))


def _safe_dump(doc: Any) -> str:
    return yaml.safe_dump(doc, allow_unicode=True)


# Small documents with anchors and aliases (the expansion stays small here; the memory bombs run in a subprocess).
ALIAS_DOCS = [
    "gpus: &g [a100]\ndescription: *g\n",
    "gpus: &a [*a]\n",
    "x: &x {gpus: [a100]}\n<<: *x\n",
    "a: &a [a100, a100]\nb: &b [*a, *a, *a]\nc: &c [*b, *b, *b]\ngpus: [a100]\ndescription: [*c, *c, *c]\n",
    "gpus: [*undefined]\n",
    "gpus: !!python/object:os.system [a100]\n",
    "gpus: !!binary aGVsbG8=\n",
    "driver: 2024-13-45\ngpus: [a100]\n",
    "gpus: [a100]\ndriver: 1e400\n",
    "? [a, b]\n: c\ngpus: [a100]\n",
    "gpus: [a100]\ngpus: [h100]\n",
    "%YAML 1.1\n---\ngpus: [a100]\n---\ngpus: [h100]\n",
    "gpus: [a100]\npython: 3.10\n",
    "gpus: [a100]\ndeepspeed: 'no'\n",
    "gpus: [a100]\n1: x\ncolour: red\n",
]

# Nine levels of nine aliases: 9**9 (387 million) strings once expanded, in 400-odd bytes.
BOMB_LIST = "".join(
    [
        'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n',
        *(
            f"{n}: &{n} [*{p},*{p},*{p},*{p},*{p},*{p},*{p},*{p},*{p}]\n"
            for p, n in zip("abcdefgh", "bcdefghi", strict=True)
        ),
    ]
)
# Merge keys copy the merged mapping: nine levels of nine merges each.
BOMB_MERGE = "".join(
    [
        "a0: &a0 {k0: v, k1: v, k2: v, k3: v, k4: v, k5: v, k6: v, k7: v, k8: v}\n",
        *(f"a{i}: &a{i} {{" + ", ".join(f"m{j}: {{<<: *a{i - 1}}}" for j in range(9)) + "}\n" for i in range(1, 9)),
    ]
)

profile_text = st.one_of(
    _profile_doc.map(_safe_dump),
    st.fixed_dictionaries(
        {"gpus": st.sampled_from([["a100"], ["a100", "h100"]])},
        optional={k: yaml_values for k in PROFILE_KEYS if k != "gpus"},
    ).map(_safe_dump),
    st.sampled_from(ALIAS_DOCS),
    huge_number.map(lambda d: f"gpus: [a100]\ndriver: {d}\n"),
    st.integers(60, 3000).map(lambda n: "[" * n + "]" * n),
    st.integers(60, 3000).map(lambda n: "gpus: " + "[" * n + "a100" + "]" * n + "\n"),
    file_junk,
)
profile_bytes = st.one_of(
    profile_text.map(lambda t: t.encode("utf-8", "surrogatepass")),
    st.binary(max_size=100),
    st.just(b"gpus: [a100]\ndescription: \xff\xfe\n"),
)

# --- Locks --------------------------------------------------------------------------------------------------

HEX32, HEX64 = "0123456789abcdef" * 2, "0123456789abcdef" * 4
names = st.one_of(
    st.sampled_from(["pytorch", "_openmp_mutex", "cuda-nvcc", "tiny-app", "python_abi"]),
    st.sampled_from(["", "Py-Torch", "a/b", "..", "a b", "-x", "x'y", "$(id)"]),
    junk,
)
versions = st.one_of(
    st.sampled_from(["2.5.1", "1.0", "4.5", "1!2.0", "3.0+local", "2025.1.31"]),
    st.sampled_from(["..", "1..2", "", "1-2", "1 2", ".1", "1.", "1/2", "1.0;rm"]),
    huge_number,
    junk,
)
builds = st.one_of(
    st.sampled_from(["h0_0", "cuda129_mkl_py313_h623d66f_303", "pyhd8ed1ab_1", "7_kmp_llvm"]),
    st.sampled_from(["h0/0", "", "a b", "x-y", "h0_0\n"]),
    junk,
)
subdirs = st.sampled_from(["linux-64", "linux-aarch64", "noarch", "win-64", "osx-arm64", "", "..", "linux-64/../x"])
platforms = st.one_of(st.sampled_from(["linux-64", "linux-aarch64", "win-64", "osx-arm64", "noarch", "", "x"]), junk)
bases = st.one_of(
    st.sampled_from(
        [
            "https://conda.anaconda.org/conda-forge",
            "file:///nonexistent/channel",
            "http://[::1",
            "https://user:secret@host.example/ch",
            "https://host.example/t/tk-123/ch",
            "ftp://host.example/ch",
            "https:",
            "https://",
            "/local/path",
            "",
        ]
    ),
    junk,
)
exts = st.sampled_from([".conda", ".tar.bz2", ".zip", "", ".conda?x=1", ".conda#frag"])
md5s = st.one_of(st.sampled_from([HEX32, "not-hex", HEX32.upper(), HEX32[:31], "", "g" * 32]), junk)
sha256s = st.one_of(st.sampled_from([HEX64, "not-hex", HEX64[:63], HEX64.upper(), ""]), st.none(), junk)


@st.composite
def package_urls(draw: st.DrawFn) -> tuple[str, str, str, str, str]:
    """(url, name, version, build, subdir): a URL built from parts, most of them plausible."""
    name, version, build, subdir = draw(names), draw(versions), draw(builds), draw(subdirs)
    url = f"{draw(bases)}/{subdir}/{name}-{version}-{build}{draw(exts)}"
    return draw(st.one_of(st.just(url), st.just(url), junk)), name, version, build, subdir


@st.composite
def explicit_locks(draw: st.DrawFn) -> str:
    header = draw(st.sampled_from(["# platform: linux-64\n", "# platform: linux-aarch64\n", "", "# platform: \n"]))
    header = draw(st.one_of(st.just(header), platforms.map(lambda p: f"# platform: {p}\n")))
    lines = []
    for _ in range(draw(st.integers(0, 3))):
        url = draw(package_urls())[0]
        fragment = draw(
            st.one_of(
                md5s.map(lambda m: f"#{m}"),
                sha256s.map(lambda s: f"#sha256={s}"),
                sha256s.map(lambda s: f"#sha256:{s}"),
                st.just(""),
            )
        )
        lines.append(url + fragment)
    body = draw(st.sampled_from(["@EXPLICIT\n", "@EXPLICIT\n", "", "  @EXPLICIT  \n"]))
    return header + body + "\n".join(lines) + "\n"


@st.composite
def lock_packages(draw: st.DrawFn, platform: str) -> dict[str, Any]:
    url, name, version, build, _ = draw(package_urls())
    package: dict[str, Any] = {
        "name": draw(st.one_of(st.just(name), names)),
        "version": draw(st.one_of(st.just(version), versions)),
        "manager": draw(st.sampled_from(["conda", "conda", "pip", "npm"])),
        "platform": draw(st.one_of(st.just(platform), platforms)),
        "dependencies": draw(
            st.dictionaries(names, st.one_of(st.sampled_from([">=1", "*", "3.13.* *_cp313", ""]), junk), max_size=2)
        ),
        "url": url,
        "hash": draw(st.fixed_dictionaries({}, optional={"md5": md5s, "sha256": sha256s})),
        "build": draw(st.one_of(st.just(build), builds, st.none())),
        "category": "main",
        "optional": False,
    }
    for key in draw(st.lists(st.sampled_from(sorted(package)), max_size=2)):
        package[key] = draw(yaml_values)  # a field replaced by any YAML value, or removed
        if draw(st.booleans()):
            del package[key]
    return package


ARCH_LISTS = ["8.0+PTX", "7.0;8.0;9.0+PTX", "9.0a", "", "8.0; rm -rf ~", "$(id)", '8.0"', "8.0\nexport X=1"]


@st.composite
def conda_lock_docs(draw: st.DrawFn) -> dict[str, Any]:
    plats = draw(st.one_of(st.just(["linux-64"]), st.lists(platforms, max_size=3)))
    first = plats[0] if plats else "linux-64"
    custom = draw(
        st.one_of(
            st.none(),
            st.dictionaries(
                st.one_of(st.just("envsolver_torch_cuda_arch_list"), junk),
                st.one_of(st.sampled_from(ARCH_LISTS), junk, terminal_junk),
                max_size=3,
            ),
            yaml_values,
        )
    )
    doc: dict[str, Any] = {
        "version": draw(st.sampled_from([1, 1, 1, 2, 3, None, "1"])),
        "metadata": {
            "content_hash": {p: "0" * 64 for p in plats if isinstance(p, str)},
            "channels": [{"url": "https://conda.anaconda.org/conda-forge", "used_env_vars": []}],
            "platforms": plats,
            "sources": ["environment.yml"],
            "custom_metadata": custom,
        },
        "package": draw(st.lists(lock_packages(first), max_size=3)),
    }
    if draw(st.integers(0, 5)) == 0:
        doc["metadata"] = draw(yaml_values)
    return doc


conda_lock_text = st.one_of(
    conda_lock_docs().map(_safe_dump),
    conda_lock_docs().map(_safe_dump).flatmap(lambda t: st.integers(0, len(t)).map(lambda n: t[:n])),
    st.sampled_from(["version: 1\n", "version: 1\npackage: [\n", "[]\n", "version: 1\nmetadata: *a\n", "@EXPLICIT"]),
    file_junk,
)
lock_text = st.one_of(explicit_locks(), conda_lock_text, st.deferred(lambda: valid_locks().map(lambda v: v[0])))

# --- The hook's lock-metadata.json ---------------------------------------------------------------------------

lock_metadata_text = st.one_of(
    st.fixed_dictionaries(
        {
            "platform": st.one_of(platforms, st.none(), st.integers()),
            "custom_metadata": st.one_of(
                st.fixed_dictionaries(
                    {}, optional={"envsolver_torch_cuda_arch_list": st.one_of(st.sampled_from(ARCH_LISTS), junk)}
                ),
                yaml_values,
            ),
        }
    ).map(lambda d: "# envsolver: the lock this prefix was installed from\n" + json.dumps(d)),
    st.sampled_from(["{", '{"platform": "linux-64", "custom_metadata": {"envsolver_torch_cuda_arch_list": "8.0', "[]"]),
    file_junk,
)

# --- Detection outputs ---------------------------------------------------------------------------------------

SMI_CSV = [
    "name, driver_version\nNVIDIA H200, 580.159.04\n",
    "driver_version\n580.159.04\n",
    "name\nNVIDIA H200\n",
    "name, driver_version\n",
    "name, name\nA, B\n",
    "NVIDIA H200, 580.159.04\n",
    "name, driver_version\nNVIDIA H200\n",
    "index, uuid\n0, GPU-1\n",
]
detection_text = st.one_of(
    st.sampled_from(SMI_CSV),
    terminal_junk.map(lambda name: f"name, driver_version\n{name}, 580.159.04\n"),  # a hostile GPU name
    terminal_junk.map(lambda driver: f"name, driver_version\nNVIDIA H200, {driver}\n"),
    file_junk,
    terminal_junk,
    st.none(),
)


# --- Grammatical locks: every field valid, generated from the grammar rather than picked from samples --------

_hex = "0123456789abcdef"
valid_names = st.from_regex(r"[a-z0-9_][a-z0-9_.\-]{0,20}", fullmatch=True)
valid_versions = st.from_regex(
    r"([0-9]{1,3}!)?[0-9a-z]{1,4}([._][0-9A-Za-z]{1,4}){0,3}(\+[0-9a-z]{1,4})?", fullmatch=True
)
valid_builds = st.from_regex(r"[A-Za-z0-9_.+]{1,20}", fullmatch=True)
valid_md5 = st.text(_hex, min_size=32, max_size=32)
valid_sha256 = st.text(_hex, min_size=64, max_size=64)
valid_bases = st.sampled_from(
    [
        "https://conda.anaconda.org/conda-forge",
        "http://mirror.example.org:8080/conda/t/tk-123/c",
        "https://user:pass@mirror.example.org/c",
        "file:///nonexistent/channel",
    ]
)


@st.composite
def valid_entries(draw: st.DrawFn, platform: str) -> dict[str, str]:
    name, version, build = draw(valid_names), draw(valid_versions), draw(valid_builds)
    subdir = draw(st.sampled_from([platform, "noarch"]))
    ext = draw(st.sampled_from([".conda", ".tar.bz2"]))
    url = f"{draw(valid_bases)}/{subdir}/{name}-{version}-{build}{ext}"
    return {"name": name, "version": version, "build": build, "subdir": subdir, "url": url,
            "md5": draw(valid_md5), "sha256": draw(valid_sha256)}  # fmt: skip


@st.composite
def valid_locks(draw: st.DrawFn) -> tuple[str, str, list[dict[str, str]]]:
    """(text, platform, entries) of an explicit or conda-lock.yml lock whose every field is grammatical."""
    platform = draw(st.sampled_from(["linux-64", "linux-aarch64"]))
    entries = draw(st.lists(valid_entries(platform), min_size=1, max_size=4, unique_by=lambda e: e["name"]))
    if draw(st.booleans()):
        lines = [
            f"{e['url']}#{e['md5']}" if draw(st.booleans()) else f"{e['url']}#sha256={e['sha256']}" for e in entries
        ]
        return f"# platform: {platform}\n@EXPLICIT\n" + "\n".join(lines) + "\n", platform, entries
    doc = {
        "version": 1,
        "metadata": {
            "content_hash": {platform: "0" * 64},
            "channels": [{"url": "https://conda.anaconda.org/conda-forge", "used_env_vars": []}],
            "platforms": [platform],
            "sources": ["environment.yml"],
            "custom_metadata": {"envsolver_torch_cuda_arch_list": draw(st.sampled_from(["8.0+PTX", "9.0a"]))},
        },
        "package": [
            {"name": e["name"], "version": e["version"], "build": e["build"], "manager": "conda",
             "platform": platform, "dependencies": {}, "url": e["url"],
             "hash": {"md5": e["md5"], "sha256": e["sha256"]}, "category": "main", "optional": False}
            for e in entries
        ],
    }  # fmt: skip
    return _safe_dump(doc), platform, entries
