"""The one YAML loader and the one JSON loader for the project's data, refusing what a plain
load cannot hold, each refusal one line naming the file (and the line where it is known):

- YAML: a key given twice; a list or mapping as a mapping key (PyYAML would fail building it
  with a TypeError), and a key that is not text (a number, true, null: it would reach sorted()
  beside text keys); a number that is not finite (.inf, .nan, 1.0e400) or an integer past the
  float range (every number of the data is used as a float somewhere); nesting deeper than MAX_DEPTH, and aliases that expand past
  MAX_EXPANDED_NODES (a "billion laughs" file). Both are found while the parser's events stream
  by (an iterative state machine, EventGuard), before anything is composed: a file 10,000
  levels deep never reaches the composer. libyaml parses and composes where PyYAML has it.
- JSON: nesting deeper than MAX_DEPTH (counted over the text iteratively before json.loads,
  whose C scanner recurses), a key given twice, NaN and Infinity (not JSON: json.loads takes
  them by default), integers longer than Python converts.
Files are read through forge.files with the cap of their kind."""
from __future__ import annotations

import copy
import functools
import json
import math
import re
import sys
from pathlib import Path
from typing import Any

import yaml

from forge import files
from forge.errors import ForgeError

MAX_DEPTH = 64                    # levels of lists/mappings; the project's data uses under 10
MAX_EXPANDED_NODES = 1_000_000    # nodes once every alias is expanded


class DataError(ForgeError):
    """A data file that is not what the project can hold."""


class DuplicateKeyError(yaml.constructor.ConstructorError):
    """A mapping names one key twice: PyYAML would keep the last value without a word."""


class _RefusesDuplicateKeys:
    """A SafeLoader's constructor that refuses a key given twice in one mapping."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen = set()
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue  # keys merged in by `<<: *anchor` may be overridden: not duplicates
                key = self.construct_object(key_node, deep=True)  # type: ignore[attr-defined]
                if key in seen:
                    raise DuplicateKeyError(None, None, f"duplicate key {key!r}",
                                            key_node.start_mark)
                seen.add(key)
        return super().construct_mapping(node, deep=deep)  # type: ignore[misc]


class StrictLoader(_RefusesDuplicateKeys, yaml.SafeLoader):
    """yaml.SafeLoader that refuses a key given twice in one mapping."""


# libyaml's parser (PyYAML's C extension, in every PyYAML wheel): an order of magnitude faster
# than the pure-Python one, which the suite and every command spent much of their time in.
_C_LOADER = getattr(yaml, "CSafeLoader", None)
StrictCLoader = (type("StrictCLoader", (_RefusesDuplicateKeys, _C_LOADER), {})
                 if _C_LOADER is not None else None)


class _Frame:
    """An open list or mapping while its events stream by."""
    __slots__ = ("is_mapping", "expects_key", "anchor", "height", "size")

    def __init__(self, is_mapping: bool, anchor: str | None):
        self.is_mapping, self.expects_key, self.anchor = is_mapping, True, anchor
        self.height, self.size = 1, 1


class EventGuard:
    """Checks every parser event as it streams by: the depth of the open collections, what
    stands in key position, and the expanded size. Nothing is composed before it has seen the
    whole stream (the C composer recurses; this never does)."""

    def __init__(self, source: str):
        self.source = source
        self._open: list[_Frame] = []
        self._anchors: dict[str, tuple[int, int]] = {}   # anchor -> (height, expanded size)
        self._scalar_tags: dict[str, str] = {}           # a scalar's anchor -> its tag
        self._expanded = 0

    def see(self, event) -> None:
        if isinstance(event, yaml.CollectionStartEvent):
            self._start(event)
        elif isinstance(event, yaml.CollectionEndEvent):
            frame = self._open.pop()
            self._node_done(frame.height, frame.size, frame.anchor)
        elif isinstance(event, yaml.ScalarEvent):
            self._scalar(event)
            self._node_done(0, 1, event.anchor)
        elif isinstance(event, yaml.AliasEvent):
            self._alias(event)

    def _fail(self, event, problem: str):
        raise DataError(f"{self.source}: line {event.start_mark.line + 1}: {problem}")

    def _in_key_position(self) -> bool:
        return bool(self._open) and self._open[-1].is_mapping and self._open[-1].expects_key

    def _start(self, event) -> None:
        if self._in_key_position():
            kind = "mapping" if isinstance(event, yaml.MappingStartEvent) else "list"
            self._fail(event, f"a {kind} as a mapping key (keys must be plain values: text, "
                              "numbers)")
        if len(self._open) + 1 > MAX_DEPTH:
            self._fail(event, f"nested deeper than {MAX_DEPTH} levels")
        self._open.append(_Frame(isinstance(event, yaml.MappingStartEvent), event.anchor))

    def _scalar(self, event) -> None:
        """A key that is not text, a number that is not finite or past the float range."""
        tag = _scalar_tag(event)
        if event.anchor is not None:
            self._scalar_tags[event.anchor] = tag
        if tag in (_STR, _MERGE):
            return
        if self._in_key_position():
            kind = _TAG_NAMES.get(tag, tag)
            self._fail(event, f"the key {_excerpt(event.value)} is read as {kind}, not text "
                              "(keys must be text: quote it)")
        if tag == _FLOAT:
            value = _CONSTRUCTOR.construct_yaml_float(yaml.ScalarNode(tag, event.value))
            if not math.isfinite(value):
                self._fail(event, f"{_excerpt(event.value)} is not a finite number (write a "
                                  "number within about ±1.8e308)")
        elif tag == _INT:
            value = _CONSTRUCTOR.construct_yaml_int(yaml.ScalarNode(tag, event.value))
            if abs(value) > sys.float_info.max:
                self._fail(event, f"{_excerpt(event.value)} is past the range of a number "
                                  "(about ±1.8e308)")

    def _alias(self, event) -> None:
        if any(frame.anchor == event.anchor for frame in self._open):
            self._fail(event, f"*{event.anchor} names a list or mapping that holds it (a cycle)")
        height, size = self._anchors.get(event.anchor, (0, 1))
        if height and self._in_key_position():
            self._fail(event, f"*{event.anchor} as a mapping key names a list or mapping "
                              "(keys must be plain values)")
        tag = self._scalar_tags.get(event.anchor, _STR)
        if tag != _STR and self._in_key_position():
            self._fail(event, f"*{event.anchor} as a mapping key names "
                              f"{_TAG_NAMES.get(tag, tag)}, not text (keys must be text)")
        if len(self._open) + height > MAX_DEPTH:
            self._fail(event, f"*{event.anchor} nests the data deeper than {MAX_DEPTH} levels")
        self._expanded += size
        if self._expanded > MAX_EXPANDED_NODES:
            self._fail(event, f"aliases expand the data past {MAX_EXPANDED_NODES} nodes")
        self._node_done(height, size, None)

    def _node_done(self, height: int, size: int, anchor: str | None) -> None:
        if anchor is not None:
            self._anchors[anchor] = (height, size)
        if self._open:
            parent = self._open[-1]
            parent.height = max(parent.height, height + 1)
            parent.size += size
            if parent.is_mapping:
                parent.expects_key = not parent.expects_key


_STR, _INT, _FLOAT = "tag:yaml.org,2002:str", "tag:yaml.org,2002:int", "tag:yaml.org,2002:float"
_MERGE = "tag:yaml.org,2002:merge"       # `<<: *anchor`
_TAG_NAMES = {_INT: "a number", _FLOAT: "a number", "tag:yaml.org,2002:bool": "true or false",
              "tag:yaml.org,2002:null": "null", "tag:yaml.org,2002:timestamp": "a date"}
_RESOLVER = yaml.resolver.Resolver()
_CONSTRUCTOR = yaml.constructor.SafeConstructor()


def _scalar_tag(event) -> str:
    """The tag a SafeLoader gives a scalar: its own (!!int), or the one its plain text resolves
    to (a quoted scalar is text)."""
    if event.tag not in (None, "!"):
        return event.tag
    return _RESOLVER.resolve(yaml.ScalarNode, event.value, event.implicit)


def _excerpt(text: str) -> str:
    return repr(text if len(text) <= 40 else text[:40] + "...")


class GuardedLoader(StrictLoader):
    """The pure-Python StrictLoader with the EventGuard on every event the composer takes (where
    PyYAML has no C extension)."""

    def __init__(self, stream, source: str):
        super().__init__(stream)
        self.guard = EventGuard(source)

    def get_event(self):
        event = super().get_event()
        self.guard.see(event)
        return event


def _parse_guarded(text: str, source: str) -> Any:
    if StrictCLoader is None or _C_LOADER is None:
        loader = GuardedLoader(text, source)
        try:
            return loader.get_single_data()
        finally:
            loader.dispose()
    guard = EventGuard(source)
    for event in yaml.parse(text, Loader=_C_LOADER):
        guard.see(event)
    return yaml.load(text, Loader=StrictCLoader)  # a SafeLoader's constructor


# A command reads the same few files (the series, the targets, the model families) again for
# every recipe it loads; a parse is milliseconds of Python, a deep copy of its result a twentieth
# of that. What a small text parses to is kept (a refusal is not: it raises, and names the source).
_KEPT_TEXT_MAX = 64 << 10
_KEPT_TEXTS = 128


def parse_yaml(text: str, source: str) -> Any:
    """Every YAML file of the project goes through here (see the module's docstring)."""
    if len(text) > _KEPT_TEXT_MAX:
        return _parse_yaml_once(text, source)
    return copy.deepcopy(_parsed_yaml(text, source))   # the caller may change what it gets


@functools.lru_cache(maxsize=_KEPT_TEXTS)
def _parsed_yaml(text: str, source: str) -> Any:
    return _parse_yaml_once(text, source)


def _parse_yaml_once(text: str, source: str) -> Any:
    try:
        return _parse_guarded(text, source)
    except yaml.YAMLError as exc:
        where = _yaml_line(exc, text)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        if isinstance(exc, DuplicateKeyError):
            raise DataError(f"{source}:{where} {problem} (each key may appear once)") from exc
        raise DataError(f"{source}:{where} not valid YAML: {problem}") from exc
    except (ValueError, OverflowError) as exc:
        # a value the YAML resolver matched but Python cannot build: 2026-13-45, 5000 digits
        raise DataError(f"{source}: not valid YAML: a value Python cannot hold ({exc})") from exc


def _yaml_line(exc: yaml.YAMLError, text: str) -> str:
    """' line N:' where the fault is, or '' where PyYAML does not say."""
    mark = getattr(exc, "problem_mark", None)
    if mark is not None:
        return f" line {mark.line + 1}:"
    if isinstance(exc, yaml.reader.ReaderError):
        return f" line {text.count(chr(10), 0, exc.position) + 1}:"
    return ""


def load_yaml(path: Path | str, kind: files.FileKind = files.DATA_YAML) -> Any:
    text = files.read_text(path, kind)
    return parse_yaml(text, str(path))


# --- JSON --------------------------------------------------------------------------------------

# A JSON string (escapes included) or one bracket: strings are skipped whole, so a bracket
# inside one is not counted.
_JSON_TOKENS = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]')


def _check_json_depth(text: str, source: str) -> None:
    depth = 0
    for match in _JSON_TOKENS.finditer(text):
        token = match.group()
        if token in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                line = text.count("\n", 0, match.start()) + 1
                raise DataError(f"{source}: line {line}: nested deeper than {MAX_DEPTH} levels")
        elif token in "]}":
            depth -= 1


def _pairs_once(source: str):
    def hook(pairs: list[tuple[str, Any]]) -> dict:
        found: dict[str, Any] = {}
        for key, value in pairs:
            if key in found:
                raise DataError(f"{source}: duplicate key {key!r} (each key may appear once)")
            found[key] = value
        return found
    return hook


def _no_constant(source: str):
    def refuse(name: str):
        raise DataError(f"{source}: {name} is not a JSON number (write a finite number or null)")
    return refuse


def parse_json(text: str | bytes, source: str) -> Any:
    """JSON as the project reads it: depth-limited, duplicate keys and NaN/Infinity refused."""
    if isinstance(text, bytes):
        text = files.decode_utf8(text, source)
    _check_json_depth(text, source)
    try:
        return json.loads(text, object_pairs_hook=_pairs_once(source),
                          parse_constant=_no_constant(source))
    except json.JSONDecodeError as exc:
        raise DataError(f"{source}: line {exc.lineno}: not valid JSON: {exc.msg}") from exc
    except (ValueError, RecursionError) as exc:
        raise DataError(f"{source}: not valid JSON: {exc}") from exc


def load_json(path: Path | str, kind: files.FileKind) -> Any:
    return parse_json(files.read_bytes(path, kind), str(path))


def load_json_entry(path: Path | str, kind: files.FileKind) -> Any:
    """A cache entry's JSON (forge.files.read_entry: no link followed), or None when there is
    none or it is no regular file or no valid JSON: a damaged entry is one to make again. Its
    reader checks the shape against what it writes."""
    data = files.read_entry(path, kind)
    if data is None:
        return None
    try:
        return parse_json(data, str(path))
    except ForgeError:       # not JSON, not UTF-8
        return None
