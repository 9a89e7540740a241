"""Bounded input: read a file up to a size limit, and load YAML with limits on size, nesting and alias expansion.

Shared by everything that reads a YAML file a user can hand us (profiles, the knowledge base, locks). PyYAML's
safe loader builds aliases as shared references, but anything that walks the result (str(), a merge key `<<`,
a pydantic model) expands them: nine levels of nine aliases are 387 million strings in 400 bytes. So the
events are checked first (nesting depth, alias count, and the node count once every alias is expanded) and
only a document within the limits is built.
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

# The C parser when PyYAML has it (about ten times faster); the events and the result are the same.
_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class SafeYamlError(ValueError):
    """The input is too large, not UTF-8, not valid YAML, or expands past the limits. The message says which."""


@dataclass(frozen=True)
class Limits:
    """chars: text length; depth: nesting, aliases included; aliases: alias uses; nodes: nodes once expanded."""

    chars: int = 1 << 20
    depth: int = 64
    aliases: int = 1000
    nodes: int = 200_000


def read_text(path: Path, limit: int) -> str:
    """The UTF-8 text of the regular file `path`, at most `limit` bytes (core.boundedread: a FIFO, a device such
    as /dev/zero or a socket is refused at once, before anything waits on it). Raises OSError, SafeYamlError."""
    from envsolver.core import boundedread

    try:
        data = boundedread.read_regular(path, limit)
    except boundedread.Refused as exc:
        if path.is_dir():  # an OSError, as open() gives it: the callers' "cannot read ... Pass an existing file"
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path)) from None
        raise SafeYamlError(str(exc)) from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SafeYamlError(f"not UTF-8 text (byte {exc.start})") from None


def load(text: str, limits: Limits = Limits()) -> Any:
    """The YAML document in `text` (None when empty). Raises SafeYamlError."""
    if len(text) > limits.chars:
        raise SafeYamlError(f"larger than {limits.chars} characters")
    try:
        _check_events(text, limits)
        return yaml.load(text, Loader=_LOADER)  # a safe loader: plain data only
    except yaml.YAMLError as exc:
        raise SafeYamlError(f"not valid YAML: {_one_line(exc)}") from None
    except (ValueError, OverflowError) as exc:  # an int past 4300 digits, a date such as 2024-13-45
        raise SafeYamlError(f"not valid YAML: {exc}") from None


def top_level_scalars(text: str, limits: Limits = Limits()) -> dict[str, str]:
    """The source text of each plain scalar value of a top-level mapping, by key (`python: 3.10` -> '3.10',
    which `load` gives as the float 3.1), so that a message can quote what the user wrote. Empty for a
    document that is not such a mapping. Raises SafeYamlError."""
    if len(text) > limits.chars:
        raise SafeYamlError(f"larger than {limits.chars} characters")
    try:
        _check_events(text, limits)
        node = yaml.compose(text, Loader=_LOADER)
    except yaml.YAMLError as exc:
        raise SafeYamlError(f"not valid YAML: {_one_line(exc)}") from None
    if not isinstance(node, yaml.MappingNode):
        return {}
    return {
        str(key.value): str(value.value)
        for key, value in node.value
        if isinstance(key, yaml.ScalarNode)
        and isinstance(value, yaml.ScalarNode)
        and not value.style  # plain: None, or "" from libyaml
    }


def _one_line(exc: yaml.YAMLError) -> str:
    return " ".join(str(exc).split())


@dataclass
class _Open:
    """A collection being read: its anchor, and its node count and depth so far (aliases expanded)."""

    anchor: str | None
    nodes: int = 1
    depth: int = 1


def _check_events(text: str, limits: Limits) -> None:
    """Walk the parser's events once, measuring the document as it would be with every alias expanded."""
    done: dict[str, tuple[int, int]] = {}  # anchor -> (nodes, depth) of its finished node
    stack: list[_Open] = [_Open(None)]  # the bottom one stands for the stream
    total = aliases = 0

    def add(nodes: int, depth: int) -> None:
        nonlocal total
        total += nodes
        if total > limits.nodes:
            raise SafeYamlError(f"would expand to more than {limits.nodes} nodes (each alias *name repeats its node)")
        if len(stack) - 1 + depth > limits.depth:
            raise SafeYamlError(f"nested deeper than {limits.depth} levels")
        stack[-1].nodes += nodes
        stack[-1].depth = max(stack[-1].depth, depth + 1)

    for event in yaml.parse(text, Loader=_LOADER):
        if isinstance(event, yaml.AliasEvent):
            aliases += 1
            if aliases > limits.aliases:
                raise SafeYamlError(f"uses more than {limits.aliases} aliases")
            if any(o.anchor == event.anchor for o in stack):
                raise SafeYamlError(f"alias *{event.anchor} refers to itself")
            if event.anchor in done:  # an undefined one is reported by the loader, with its line
                add(*done[event.anchor])
        elif isinstance(event, yaml.ScalarEvent):
            if event.anchor is not None:
                done[event.anchor] = (1, 1)
            add(1, 1)
        elif isinstance(event, (yaml.SequenceStartEvent, yaml.MappingStartEvent)):
            add(1, 1)
            stack.append(_Open(event.anchor))
        elif isinstance(event, (yaml.SequenceEndEvent, yaml.MappingEndEvent)):
            finished = stack.pop()
            if finished.anchor is not None:
                done[finished.anchor] = (finished.nodes, finished.depth)
            stack[-1].nodes += finished.nodes - 1  # the 1 was counted at the start
            stack[-1].depth = max(stack[-1].depth, finished.depth + 1)
