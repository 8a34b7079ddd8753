"""Reading untrusted files and values with bounds: only regular files, at most N bytes, bounded YAML, bounded regexes.

Every file a user or a download hands to Mergesmith (weights, configs, recipes, adapters, tokenizer files) is
opened with `open_regular_file`, so a named pipe never blocks and a device (`/dev/zero`) is never read without
end. Text documents are read with `read_text_limited` (at most a stated number of bytes, and a message that says
what the file seems to be when it is too large or not text); YAML goes through a safe loader that refuses alias
expansion past `MAX_YAML_NODES` ("billion laughs"); JSON through `load_json_limited`. Regexes written by a user
or read from a file run in `BoundedPattern`, which stops a match after a time bound. Messages show values through
`describe_value`, which never walks or prints more than a few dozen characters of them.

Nothing here imports torch or Qt.
"""

from __future__ import annotations

import codecs
import errno
import itertools
import json
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

import regex
import yaml

from guiapp.errors import MergesmithError
from guiapp.system.units import format_bytes

# Limits on what a document may be. A recipe is a few kilobytes; 1 MB leaves room for any real one.
RECIPE_BYTES = 1_000_000
# config.json, generation_config.json, adapter_config.json, tokenizer_config.json: kilobytes in practice.
JSON_BYTES = 16_000_000
# model.safetensors.index.json lists every tensor (about 100 bytes each): 64 MB is more than 500,000 tensors.
INDEX_JSON_BYTES = 64_000_000
# tokenizer.json of large-vocabulary models reaches ~35 MB (Gemma 3); 128 MB leaves room.
TOKENIZER_JSON_BYTES = 128_000_000
# A YAML document may expand (aliases counted each time they are used) to at most this many nodes.
MAX_YAML_NODES = 100_000
# A regex from a user or a file: longer patterns are refused, and one match may take at most this long.
MAX_PATTERN_CHARACTERS = 2_000
PATTERN_MATCH_SECONDS = 1.0

ErrorClass = type[MergesmithError]


def open_regular_file(path: Path | str, error: ErrorClass, *, what: str = "file") -> BinaryIO:
    """Open `path` for binary reading if, and only if, it is a regular file.

    The file is opened non-blocking first, so a named pipe (FIFO) does not wait for a writer, then checked with
    fstat on the open descriptor (no check-then-open race), then switched back to blocking reads. Raises `error`
    naming the file when it is missing, unreadable, or a folder, pipe, device or socket.
    """
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0)
    flags |= getattr(os, "O_BINARY", 0)
    try:
        descriptor = os.open(path, flags)
    except OSError as failure:
        raise _open_failure(path, failure, error, what) from None
    try:
        mode = os.fstat(descriptor).st_mode
        if not stat.S_ISREG(mode):
            raise error(
                f"{path} is {_kind_of(mode)}, not a regular file, so Mergesmith did not read it as a {what}.",
                hint=f"Choose the {what} itself (a regular file), not a pipe, device or folder.",
                why=_folder_given(what) if stat.S_ISDIR(mode) else
                "Only regular files are read: a pipe or a device may never end, or wait for a writer forever.",
            )
        if hasattr(os, "set_blocking"):
            os.set_blocking(descriptor, True)
        return os.fdopen(descriptor, "rb")
    except BaseException:
        os.close(descriptor)
        raise


def read_text_limited(path: Path | str, limit: int, error: ErrorClass, *, what: str = "file") -> str:
    """The UTF-8 text of the regular file `path`, which may hold at most `limit` bytes.

    Raises `error` when the file cannot be opened (see `open_regular_file`), is larger than `limit` (the message
    says what the file seems to be, e.g. model weights), or is not UTF-8 text. Never reads more than `limit` + 1
    bytes.
    """
    with open_regular_file(path, error, what=what) as stream:
        data = _read_at_most(stream, limit + 1, path, error, what)
    if len(data) > limit:
        seems = describe_file_content(data[:4096])
        raise error(
            f"{path} is larger than the {format_bytes(limit)} a {what} can be"
            + (f"; it seems to be {seems}." if seems else "."),
            hint=f"Check that you chose the right file as the {what}.",
        )
    return _decode_text(data, path, error, what)


# Byte-order marks of the encodings other than UTF-8 that editors save text in (UTF-32's first: its
# little-endian mark begins with UTF-16's).
_MARKED_ENCODINGS = ((codecs.BOM_UTF32_LE, "UTF-32"), (codecs.BOM_UTF32_BE, "UTF-32"),
                     (codecs.BOM_UTF16_LE, "UTF-16"), (codecs.BOM_UTF16_BE, "UTF-16"))


def _decode_text(data: bytes, path: Path | str, error: ErrorClass, what: str) -> str:
    """`data` as text: UTF-8, or UTF-16/UTF-32 when it starts with their byte-order mark (Windows editors save
    text so). Raises `error` for anything else, naming the encoding when it looks like UTF-16 or UTF-32 text
    without a mark, else what the file seems to be."""
    for mark, encoding in _MARKED_ENCODINGS:
        if data.startswith(mark):
            try:
                return data.decode(encoding.lower())
            except UnicodeDecodeError:
                raise error(f"{path} starts as {encoding} text but is not valid {encoding}.",
                            hint=f"Save the {what} as UTF-8 text and try again.") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if text is not None and "\x00" not in text:
        return text
    encoding = _unmarked_wide_encoding(data[:4096])
    if encoding is not None:
        raise error(f"{path} seems to be {encoding} text without a byte-order mark; a {what} is read as UTF-8 "
                    "(UTF-16 and UTF-32 only with their mark).", hint=f"Save the {what} as UTF-8 text and try again.")
    seems = describe_file_content(data[:4096]) or "binary data"
    raise error(
        f"{path} is not a text file as a {what} must be; it seems to be {seems}.",
        hint=f"Check that you chose the right file as the {what}.",
    )


def _unmarked_wide_encoding(head: bytes) -> str | None:
    """"UTF-16" or "UTF-32" when `head` looks like mostly-ASCII text in that encoding (its zero bytes fall where
    those encodings put them), else None."""
    for encoding, width in (("UTF-32", 4), ("UTF-16", 2)):
        if len(head) < 2 * width:
            continue
        columns = [head[offset::width] for offset in range(width)]
        zero_columns = [column.count(0) > 0.9 * len(column) for column in columns]
        if zero_columns.count(False) == 1 and zero_columns[0] != zero_columns[-1]:  # the text at one end
            return encoding
    return None


def load_json_limited(path: Path | str, limit: int, error: ErrorClass, *, what: str = "JSON file",
                      hint: str | None = None) -> Any:
    """The JSON document in the regular file `path` (at most `limit` bytes).

    Raises `error` (with `hint`) when the file cannot be read (see `read_text_limited`), is not valid JSON, holds
    a number too long to convert (more than 4,300 digits), or nests too deeply to parse.
    """
    text = read_text_limited(path, limit, error, what=what)
    try:
        return json.loads(text)
    except json.JSONDecodeError as failure:
        raise error(f"{path} is not valid JSON (line {failure.lineno}: {failure.msg}).", hint=hint) from None
    except ValueError as failure:  # Python refuses to convert integers of more than 4,300 digits
        raise error(f"{path} is not valid JSON for a {what}: {str(failure).split(':')[0]}.", hint=hint) from None
    except RecursionError:
        raise error(f"{path} nests its JSON too deeply to be a {what}.", hint=hint) from None


def load_yaml_limited(path: Path | str, limit: int, error: ErrorClass, *, what: str = "YAML file",
                      hint: str | None = None) -> Any:
    """The YAML document in the regular file `path` (at most `limit` bytes), parsed by `parse_yaml_bounded`.

    Raises `error` as `read_text_limited` and `parse_yaml_bounded` do.
    """
    return parse_yaml_bounded(read_text_limited(path, limit, error, what=what), str(path), error, hint=hint)


def parse_yaml_bounded(text: str, label: str, error: ErrorClass, *, hint: str | None = None,
                       max_nodes: int = MAX_YAML_NODES) -> Any:
    """Parse YAML `text` with the safe loader, refusing documents that expand past `max_nodes` nodes.

    Aliases count once per use, so a "billion laughs" document is refused after composing (cheap) and before
    anything walks the expanded value. Raises `error` naming `label` for invalid YAML (with the line), for
    Python tags (safe loader), for recursive aliases, for too many nodes, and for nesting too deep to parse.
    """
    loader = _BoundedSafeLoader(text)
    loader.max_nodes = max_nodes
    try:
        return loader.get_single_data()
    except _ExpansionError as failure:
        raise error(f"{label} {failure}", hint=hint or "Write the values out instead of repeating aliases "
                    "(*name) of aliases.") from None
    except yaml.YAMLError as failure:
        where = getattr(failure, "problem_mark", None)
        line = f" (line {where.line + 1})" if where is not None else ""
        problem = getattr(failure, "problem", None) or str(failure).splitlines()[0]
        raise error(
            f"{label} is not valid YAML{line}: {problem}.",
            hint=hint or "Check the indentation and the quotes around that line. Custom YAML tags (!!python/...) "
            "are not allowed.",
        ) from None
    except RecursionError:
        raise error(f"{label} nests its YAML too deeply to be read.", hint=hint) from None
    finally:
        loader.dispose()


def check_value_size(value: Any, label: str, error: ErrorClass, *, max_nodes: int = MAX_YAML_NODES) -> None:
    """Raise `error` naming `label` when `value` (nested dicts, lists and tuples) would hold more than `max_nodes`
    values once written out, counting a list shared in several places once per place, or contains itself.

    Documents built in memory (the window's forms, a job's saved settings) get the same bound as parsed YAML;
    the check costs time linear in the distinct containers, never in the expanded size.
    """
    try:
        _check_expanded_size(value, max_nodes, _value_children)
    except _ExpansionError as failure:
        raise error(f"{label} {failure}", hint="Write the values out instead of repeating shared lists.") from None


class BoundedPattern:
    """A regular expression from a user or a file, matched with a time bound per match.

    Uses the `regex` module (the same syntax and meaning as Python's `re` for these patterns) because it can stop
    a match after `timeout` seconds, whatever the pattern: a catastrophically backtracking pattern such as
    `(.|.)*!` costs at most that once, then is refused. Patterns longer than `MAX_PATTERN_CHARACTERS` are refused.
    """

    def __init__(self, pattern: str, label: str, error: ErrorClass, *, flags: int = 0,
                 timeout: float = PATTERN_MATCH_SECONDS):
        """Compile `pattern`; `label` names it in messages ("--include", "rank_pattern of …").

        Raises `error` when the pattern is too long or is not a valid regular expression.
        """
        if not isinstance(pattern, str):
            raise error(f"{label} must be text, not {describe_value(pattern)}.")
        if len(pattern) > MAX_PATTERN_CHARACTERS:
            raise error(
                f"{label} is a pattern of {len(pattern):,} characters; at most {MAX_PATTERN_CHARACTERS:,} are allowed.",
                hint="Use a shorter pattern (tensor and module names are short).",
            )
        try:
            self._compiled = regex.compile(pattern, flags | regex.VERSION0)
        except (regex.error, OverflowError, RecursionError) as failure:
            raise error(f"{label} is not a valid regular expression ({failure}): {describe_value(pattern)}.",
                        hint="Check the pattern's brackets and special characters.") from None
        self.pattern = pattern
        self._label = label
        self._error = error
        self._timeout = timeout

    def search(self, text: str) -> regex.Match[str] | None:
        """`regex.search` within the time bound. Raises the pattern's error class when the bound is reached."""
        return self._bounded(self._compiled.search, text)

    def match(self, text: str) -> regex.Match[str] | None:
        """`regex.match` within the time bound. Raises the pattern's error class when the bound is reached."""
        return self._bounded(self._compiled.match, text)

    def fullmatch(self, text: str) -> regex.Match[str] | None:
        """`regex.fullmatch` within the time bound. Raises the pattern's error class when the bound is reached."""
        return self._bounded(self._compiled.fullmatch, text)

    def _bounded(self, method: Callable[..., regex.Match[str] | None], text: str) -> regex.Match[str] | None:
        try:
            return method(text, timeout=self._timeout)
        except TimeoutError:
            raise self._error(
                f"{self._label} ({describe_value(self.pattern)}) took more than {self._timeout:g} s to match one "
                f"name ({describe_value(text)}), so Mergesmith stopped using it.",
                why="Patterns with nested repetition, such as (.|.)* or (a+)+, can take exponential time to fail.",
                hint="Simplify the pattern: avoid repeating a group that can itself repeat or match the same text "
                "in two ways.",
            ) from None


def describe_value(value: Any, limit: int = 80) -> str:
    """A short, bounded description of `value` for messages: like `repr`, but at most `limit` characters.

    Only the first few items of containers, two levels deep, and the first `limit` characters of strings are
    looked at, so a huge or alias-expanded value costs nothing to describe. Never raises.
    """
    try:
        text = _describe(value, depth=2, limit=limit)
    except Exception:  # a value's own __repr__ may fail; the message must not
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[: max(limit - 1, 1)] + "…"


def describe_file_content(head: bytes) -> str | None:
    """Say what a file seems to be from its first bytes (weights, an archive, binary data…); None for plain text."""
    stripped = head.lstrip()
    if len(head) >= 10 and head[8:10] in (b'{"', b"{'", b"{ ") and int.from_bytes(head[:8], "little") < 100_000_000:
        return "a safetensors weights file"
    if head.startswith(b"PK\x03\x04"):
        return "a zip archive (a PyTorch checkpoint is one)"
    if head[:1] == b"\x80" and len(head) > 1 and head[1] <= 5:
        return "a Python pickle (PyTorch weights)"
    if head.startswith(b"\x1f\x8b"):
        return "a gzip-compressed file"
    if head.startswith(b"GGUF"):
        return "a GGUF model file"
    if stripped.startswith(b"version https://git-lfs"):
        return "a Git LFS pointer"
    if stripped[:15].lower().startswith((b"<!doctype", b"<html", b"<?xml", b"<head")):
        return "an HTML page"
    if b"\x00" in head:
        return "binary data"
    return None


class _ExpansionError(Exception):
    """Raised inside the loader; `parse_yaml_bounded` turns it into the caller's error class."""


class _BoundedSafeLoader(yaml.SafeLoader):
    """The safe loader, checking each composed document's expanded size before constructing any value."""

    max_nodes = MAX_YAML_NODES

    def compose_document(self) -> yaml.Node:
        node = super().compose_document()
        _check_expanded_size(node, self.max_nodes, _node_children)
        return node


def _check_expanded_size(root: Any, max_nodes: int, children: Callable[[Any], list[Any]]) -> None:
    """Raise _ExpansionError when `root` expands to more than `max_nodes` nodes or refers to itself.

    Iterative and memoised by identity, so its cost is linear in the graph as stored, not as expanded.
    """
    sizes: dict[int, int] = {}
    in_progress: set[int] = set()
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        if children_done:
            in_progress.discard(key)
            total = 1 + sum(sizes[id(child)] for child in children(node))
            if total > max_nodes:
                raise _ExpansionError(
                    f"expands to more than {max_nodes:,} values through aliases (*name), which is far more than "
                    "any recipe or configuration needs; Mergesmith refused to expand it."
                )
            sizes[key] = total
        elif key not in sizes:
            if key in in_progress:
                raise _ExpansionError("contains an alias (*name) that refers to itself, so its value never ends.")
            in_progress.add(key)
            stack.append((node, True))
            stack.extend((child, False) for child in children(node) if id(child) not in sizes)


def _value_children(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return [part for pair in value.items() for part in pair]
    if isinstance(value, (list, tuple)):
        return list(value)
    return []


def _node_children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def _describe(value: Any, depth: int, limit: int) -> str:
    if isinstance(value, (str, bytes, bytearray)):
        shown = repr(value[:limit])
        return shown + ("…" if len(value) > limit else "")
    if isinstance(value, bool) or value is None or isinstance(value, float):
        return repr(value)
    if isinstance(value, int):
        if value.bit_length() > 128:
            return f"an integer of about {int(value.bit_length() * 0.30103):,} digits"
        return repr(value)
    if isinstance(value, dict):
        if depth == 0:
            return "{…}"
        items = [f"{_describe(k, depth - 1, limit)}: {_describe(v, depth - 1, limit)}"
                 for k, v in itertools.islice(value.items(), 4)]
        return "{" + ", ".join(items) + (", …" if len(value) > 4 else "") + "}"
    if isinstance(value, (list, tuple, set, frozenset)):
        opening, closing = ("[", "]") if isinstance(value, list) else ("(", ")") if isinstance(value, tuple) else ("{", "}")
        if depth == 0:
            return opening + "…" + closing
        items = [_describe(item, depth - 1, limit) for item in itertools.islice(value, 4)]
        return opening + ", ".join(items) + (", …" if len(value) > 4 else "") + closing
    return f"<{type(value).__name__}>"


def _read_at_most(stream: BinaryIO, count: int, path: Path | str, error: ErrorClass, what: str) -> bytes:
    try:
        return stream.read(count)
    except OSError as failure:
        raise _open_failure(path, failure, error, what) from None


def _open_failure(path: Path | str, failure: OSError, error: ErrorClass, what: str) -> MergesmithError:
    # The why is about the file: the error class's own (say, "the recipe is invalid") would blame its contents.
    if failure.errno == errno.ENOENT:
        return error(f"{path} does not exist.", hint=f"Check the {what}'s name and folder.",
                     why="There is no file at that path: a typo in its name or folder, or it was moved or deleted.")
    if failure.errno in (errno.EACCES, errno.EPERM):
        return error(f"{path} cannot be read: permission denied.", hint=f"Give your user read access to the {what}.",
                     why="The file's permissions do not let your user account read it.")
    if failure.errno == errno.EISDIR:
        return error(f"{path} is a folder, not a {what}.", hint=f"Choose the {what} itself.",
                     why=_folder_given(what))
    return error(f"{path} cannot be read: {failure.strerror or failure}.", hint=f"Check the {what} and its disk.",
                 why="The system could not open the file (the message above is its own words).")


def _folder_given(what: str) -> str:
    return f"A folder was given where a {what} (one file) was expected."


def _kind_of(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a named pipe (FIFO)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"
