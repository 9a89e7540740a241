"""GPU name lookup, as users type names and as nvidia-smi prints them; unknown names get the 3 closest.

A name is reduced to its words (case, spaces, dashes, underscores, slashes and brackets ignored). Words that
never change the product are dropped: the vendor words nvidia-smi puts in front ("NVIDIA", "GeForce",
"Tesla"), memory sizes ("80GB", "80 GB", "144G"), form factors ("PCIe", "SXM4", "HBM3", "NVL"), "Generation", "GPU",
"with Max-Q Design"; "mobile" and "notebook" mean "laptop". Words that do change the product stay: "Ti",
"SUPER", "D", "v2", "A", "Laptop", "Ada", "Quadro", and every letter of a model ("A10G", "H20"). A second,
looser form also drops a leading "RTX"/"GTX" ("3080 ti", "a6000"); it is used only when the first finds
nothing, and the knowledge base test proves that neither form gives two rows the same name.
"""

from __future__ import annotations

import difflib
import re
from collections import Counter
from collections.abc import Callable
from functools import lru_cache
from typing import Literal

from envsolver.core.errors import BadInputError, UnknownGpuError
from envsolver.kb import pci
from envsolver.kb.model import Gpu, KnowledgeBase, PciDevice

_VENDOR = frozenset({"nvidia", "geforce", "tesla"})
_SERIES = frozenset({"rtx", "gtx"})
_DROP = frozenset({"generation", "gpu", "with", "maxq", "design"})
_LAPTOP = frozenset({"laptop", "mobile", "notebook"})
_MEMORY = re.compile(r"\d+gb?")
_SIZE = re.compile(r"\d{1,3}")
_FORM = re.compile(r"pcie|sxm\d*|hbm\d*e?|nvl\d*")
_SPLIT = re.compile(r"[\s\-_/,()\[\]]+")
_MODEL = re.compile(r"([a-z]*)(\d+)")
Identity = Literal["name", "device", "compute_cap"]  # what identified a detected GPU (see `identified`)
# Why a name given as a PCI device ID is unknown: no name is close to an ID, so no close names are searched for.
_ID_NOT_IN_TABLE = "a PCI device ID the driver's table does not name"


def _words(name: str) -> list[str]:
    words = [w for w in _SPLIT.split(name.lower().replace("max-q", "maxq")) if w]
    words = _join_sizes(words)
    while words and words[0] in _VENDOR:
        words = words[1:]
    kept = words[:1]
    for word in words[1:]:
        if word in _LAPTOP:
            word = "laptop"
        if word in _DROP or _MEMORY.fullmatch(word) or _FORM.fullmatch(word):
            continue
        kept.append(word)
    return kept


def _join_sizes(words: list[str]) -> list[str]:
    """A memory size typed as two words is one: ["80", "gb"] -> ["80gb"]. Only up to three digits, so a model
    number ("RTX 4090 GB") never becomes a size."""
    joined: list[str] = []
    for word in words:
        if word == "gb" and joined and _SIZE.fullmatch(joined[-1]):
            joined[-1] += word
        else:
            joined.append(word)
    return joined


@lru_cache(maxsize=4096)
def normalize(name: str) -> str:
    """The form names are matched in: "NVIDIA A100-SXM4-80GB" and "a100 80gb" are both "a100"."""
    return "".join(_words(name))


@lru_cache(maxsize=4096)
def loose(name: str) -> str:
    """`normalize` without a leading RTX/GTX: "RTX 3080 Ti" and "3080ti" are both "3080ti"."""
    words = _words(name)
    if words and words[0] in _SERIES:
        words = words[1:]
    elif words and words[0][:3] in _SERIES and words[0][3:]:
        words = [words[0][3:], *words[1:]]
    return "".join(words)


def index(kb: KnowledgeBase, form: Callable[[str], str] = normalize) -> dict[str, Gpu]:
    """Every name of every row in one form (`normalize` or `loose`), to its row; the first row wins, and the
    knowledge base test proves there is never a second."""
    return _index(kb.gpus, form)


@lru_cache(maxsize=8)
def _index(gpus: tuple[Gpu, ...], form: Callable[[str], str]) -> dict[str, Gpu]:
    table: dict[str, Gpu] = {}
    for gpu in gpus:
        for name in gpu.all_names:
            table.setdefault(form(name), gpu)
    return table


def lookup(kb: KnowledgeBase, name: str) -> Gpu:
    """The GPU for a key, alias, name or nvidia-smi name; else for a PCI device ID ("0x2233") or a name the
    driver's table gives a device (the row of that name, else one from the device's chip); else for `sm_XY`.
    Raises UnknownGpuError with the 3 closest names (or the device and chip whose CC is unknown)."""
    found, why = _find(kb, name)
    if found is None:
        raise _unknown(kb, name, why)
    return found


def identify(kb: KnowledgeBase, name: str, device_id: str | None = None, compute_cap: str | None = None) -> Gpu:
    """A detected GPU: by its name (see `lookup`), else by the PCI device ID the driver reports, else by the
    compute capability it reports. Raises UnknownGpuError (about the name) when none of them is known."""
    return identified(kb, name, device_id, compute_cap)[0]


def identified(
    kb: KnowledgeBase, name: str, device_id: str | None = None, compute_cap: str | None = None
) -> tuple[Gpu, Identity]:
    """`identify`, and by which of the three: "name", "device" (the PCI device ID) or "compute_cap". The closest
    names (a fuzzy search of every name) are only looked for when none of the three is known."""
    found, why = _find(kb, name)
    if found is not None:
        return found, "name"
    wanted = pci.device_id(device_id)
    if wanted and (rows := pci.devices(kb, wanted)):
        by_device, _ = _by_device(kb, rows)
        if by_device is not None:
            return by_device, "device"
    cc = pci.compute_capability(compute_cap)
    if cc is not None:
        return pci.reported_row(kb, cc), "compute_cap"
    raise _unknown(kb, name, why)


def _find(kb: KnowledgeBase, name: str) -> tuple[Gpu | None, str]:
    """`lookup`'s search: (the GPU, "") or (None, why not where there is more to say than "unknown")."""
    found = _by_name(kb, name)
    if found is not None:
        return found, ""
    wanted = pci.device_id(name)
    rows = pci.devices(kb, wanted) if wanted else _driver_names(kb.pci_devices).get(normalize(name), ())
    if rows:
        return _by_device(kb, rows)
    if wanted:
        return None, _ID_NOT_IN_TABLE
    cc = pci.compute_capability(name) if name.strip().lower().startswith("sm_") else None
    return (pci.reported_row(kb, cc), "") if cc is not None else (None, "")


def _unknown(kb: KnowledgeBase, name: str, why: str) -> UnknownGpuError:
    """The error for a GPU nothing identifies: what is known of it where anything is, else the closest names."""
    return UnknownGpuError(name, [] if why == _ID_NOT_IN_TABLE else closest(kb, name), why)


def _by_name(kb: KnowledgeBase, name: str) -> Gpu | None:
    for form in (normalize, loose):
        key = form(name)
        if key and key in (table := index(kb, form)):
            return table[key]
    return None


def _by_device(kb: KnowledgeBase, rows: tuple[PciDevice, ...]) -> tuple[Gpu | None, str]:
    """The GPU row one of the device's driver names resolves to, else the row of its chip: (row, ""), or (None, the
    device and chip whose compute capability is not known)."""
    for row in rows:
        if (found := _by_name(kb, row.name)) is not None:
            return found, ""
    # the device's own row (no subsystem) names it, so a name and the ID give the same row
    derived = pci.chip_row(kb, pci.devices(kb, rows[0].device_id)[0])
    if derived is None:
        device = f"PCI device 0x{rows[0].device_id}, {rows[0].name}, chip {rows[0].chip}"
        return None, f"{device}, whose compute capability is not known"
    return derived, ""


@lru_cache(maxsize=8)
def _driver_names(devices: tuple[PciDevice, ...]) -> dict[str, tuple[PciDevice, ...]]:
    """Every name of the driver's table, normalized, to its first row and the other rows of that device ID."""
    table: dict[str, tuple[PciDevice, ...]] = {}
    for device in devices:
        key = normalize(device.name)
        if key not in table:
            table[key] = (device, *(d for d in devices if d.device_id == device.device_id and d != device))
    return table


@lru_cache(maxsize=4096)
def _model(form: str) -> tuple[str, str, int | None]:
    """The model letters, generation and number of a loose form: "3080ti" -> ("", "3", 3080), "1660ti" ->
    ("", "16", 1660), "h100" -> ("h", "h", None), "a6000" -> ("a", "a", None). Only four-digit numbers without
    letters (GeForce) say the generation (in front) and compare as tiers; a letter names a data center or
    workstation family whose numbers do not."""
    match = _MODEL.match(form)
    if match is None:
        return form, form, None
    letters, digits = match.groups()
    if letters or len(digits) != 4:
        return letters, letters, None
    return letters, digits[:2] if digits.startswith("1") else digits[0], int(digits)


def _extends(longer: str, shorter: str) -> bool:
    """`longer` is `shorter` and more words ("4070ultra" of "4070"), not a longer number ("a1000" of "a10")."""
    rest = longer[len(shorter) :]
    return longer.startswith(shorter) and not rest[:1].isdigit()


def _near(target: str, spelled: str) -> tuple[bool, bool, int, bool]:
    """How near a known spelling is to what was typed, before spelling is compared (lower is nearer): the same
    model letters, the same generation, the nearest model number, one name extending the other by words ("4070"
    for "4070 ultra", "titanxp" for "titan x")."""
    form = loose(spelled)
    letters, generation, number = _model(target)
    other = _model(form)
    distance = abs(number - other[2]) if number is not None and other[2] is not None else 0
    related = _extends(form, target) or _extends(target, form)
    return other[0] != letters, other[1] != generation, distance, not related


def _alike(target: str, spellings: list[str]) -> float:
    """The highest similarity of `target` to one of `spellings` (difflib's ratio)."""
    matcher = difflib.SequenceMatcher(None, target)
    best = 0.0
    for spelled in spellings:
        matcher.set_seq2(loose(spelled))
        # ratio() <= quick_ratio() <= real_quick_ratio(): a spelling whose bound cannot beat the best is skipped,
        # as difflib.get_close_matches skips it (the ratio is the slow part).
        if matcher.real_quick_ratio() > best and matcher.quick_ratio() > best:
            best = max(best, matcher.ratio())
    return best


def _bound(target: Counter[str], size: int, spellings: list[str]) -> float:
    """A value `_alike` never exceeds for these spellings: difflib's quick_ratio (the characters in common, in any
    order, as its ratio is computed: 2 * matches / both lengths), counting the target's characters once."""
    best = 0.0
    for spelled in spellings:
        form, form_size = _counted(spelled)
        common = sum(min(count, target[char]) for char, count in form)
        length = size + form_size
        best = max(best, 2.0 * common / length if length else 1.0)
    return best


@lru_cache(maxsize=4096)
def _counted(spelled: str) -> tuple[tuple[tuple[str, int], ...], int]:
    """The characters of a known spelling's loose form with their counts, and its length."""
    form = loose(spelled)
    return tuple(Counter(form).items()), len(form)


def _most_alike(target: str, group: list[tuple[int, list[str]]], n: int) -> list[tuple[float, int]]:
    """The n rows of `group` (row index, its spellings in the running) most alike `target`, as (-ratio, index),
    in order: the ranking of sorting every row by (-ratio, index), without computing the ratio of a row whose
    upper bound shows it cannot enter the first n."""
    counted = Counter(target)
    bounds = sorted((-_bound(counted, len(target), spellings), i, spellings) for i, spellings in group)
    found: list[tuple[float, int]] = []
    for bound, i, spellings in bounds:
        if len(found) >= n and bound > found[n - 1][0]:  # ratio <= bound < the n-th best ratio: the rest too
            break
        found.append((-_alike(target, spellings), i))
        found.sort()
    return found[:n]


def closest(kb: KnowledgeBase, name: str, n: int = 3) -> list[str]:
    """The n known GPUs nearest to `name` by any of their names (see `_near`, then the most alike spelling; ties
    in the knowledge base's order), each shown by its key or alias (as written in the KB) spelled most like
    `name`. Spellings are compared only for the GPUs that `_near` leaves in the running, and only while an upper
    bound of their likeness can still place them (the slow part)."""
    target, exact = loose(name), normalize(name)
    near = [[(_near(target, s), s) for s in gpu.all_names] for gpu in kb.gpus]
    best = [min(rank for rank, _ in spellings) for spellings in near]
    if n < 1 or not best:
        return []
    ranked: list[tuple[float, int]] = []
    for rank in sorted(set(best)):
        if len(ranked) >= n:
            break
        group = [(i, [s for r, s in near[i] if r == rank]) for i in range(len(kb.gpus)) if best[i] == rank]
        ranked += _most_alike(target, group, n - len(ranked))
    shown = []
    for _, i in ranked[:n]:
        spelled = (kb.gpus[i].key, *kb.gpus[i].aliases)
        shown.append(max(spelled, key=lambda s: difflib.SequenceMatcher(None, exact, normalize(s)).ratio()))
    return shown


_ALNUM = re.compile(r"[^a-z0-9]+")


def _plain(text: str) -> str:
    return _ALNUM.sub("", text.lower())


def search(kb: KnowledgeBase, words: tuple[str, ...]) -> tuple[Gpu, ...]:
    """`envsolver gpus WORD...`: the rows one of whose names (key, name, aliases, nvidia-smi names) holds every
    word, case, spaces and punctuation ignored ("4090" finds rtx4090, rtx4090d and the laptop; "rtx 4090" the
    same). No words: every row. Raises BadInputError when no row matches, with the closest keys as the fix."""
    wanted = [w for w in (_plain(word) for word in words) if w]
    if not wanted:
        if any(words):
            raise BadInputError(
                f"{' '.join(words)!r} holds no letter or digit to look for. Pass part of a GPU name, "
                "e.g. envsolver gpus 4090."
            )
        return kb.gpus
    found = tuple(gpu for gpu in kb.gpus if any(all(w in _plain(name) for w in wanted) for name in gpu.all_names))
    if found:
        return found
    text = " ".join(words)
    keys = list(dict.fromkeys(_key_of(kb, spelled) for spelled in closest(kb, text)))
    hint = ", ".join(keys) if keys else "none"
    fix = (
        f"Run `envsolver gpus {keys[0]}`, or `envsolver gpus` for the whole table."
        if keys
        else ("Run `envsolver gpus` for the whole table.")
    )
    raise BadInputError(f"no GPU in the knowledge base matches {text!r}. Closest keys: {hint}. {fix}")


def _key_of(kb: KnowledgeBase, spelled: str) -> str:
    """The key of the row `closest` showed by its key or an alias."""
    return next((g.key for g in kb.gpus if spelled in (g.key, *g.aliases)), spelled)
