"""Turn any failure into an `Explanation`: what happened, why, what to do, and optionally a setting to retry with.

Mergesmith's own errors (`guiapp.errors`) carry their message and hint and map directly. Anything else (a live
exception from torch, safetensors, huggingface_hub, the OS, or a traceback pasted from PEFT, transformers,
mergekit or Unsloth) is looked up in `guiapp.system.error_catalogue`. An error the catalogue does not know is
said to be unknown (`recognised=False`) rather than guessed at. This module must not import torch: the CLI's
`explain` command uses it.
"""

from __future__ import annotations

import re
import textwrap
import traceback
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from guiapp.errors import MergesmithError, Remedy
from guiapp.facts.wording import each, for_window
from guiapp.system.error_catalogue import CATALOGUE, Entry, on_hub_in_use
from guiapp.system.scrub import shown

RENDER_WIDTH = 100
_PACKAGE_FOLDER = Path(__file__).resolve().parent.parent
# Names in pasted text that look like exception classes: "torch.OutOfMemoryError", "GatedRepoError: ...". Dotted
# words are found first and split after (no nested repetition), so the search is linear in the text's length.
_DOTTED_WORD = re.compile(r"(?<![\w.])[A-Za-z_][\w.]*")
EXCEPTION_NAME = re.compile(r"[A-Za-z_]\w*(?:Error|Exception|Enabled|Interrupt|Exit)")
# Pasted text is explained from its last this many characters: a traceback names its error at the end.
MAX_TEXT_CHARACTERS = 64_000
CONTEXT_WORDS = (("job", "job"), ("model", "model"), ("tensor", "tensor"), ("file", "file"), ("device", "device"),
                 ("dtype", "dtype"), ("destination", "output folder"))


@dataclass(frozen=True)
class Explanation:
    """A failure in the user's terms. `raw` is the original message and traceback, shown behind "Details".

    `kind` names what was recognised, for actions beyond retrying (a token dialog for "gated_repo" or
    "invalid_token"): the catalogue entry's key, the class name of a Mergesmith error, or "" when unrecognised.
    `remedy` is the setting change that fixes it (a `guiapp.errors.Remedy`), `replace_with` the one that replaces
    an existing output: a separate, explicit choice. Saved as dicts in the job history (`asdict`).

    what, why and fix are the command line's words; `window` holds the window's where they differ
    (`guiapp.facts.wording`), kept beside them so that the job history shows each audience its own.
    """

    title: str
    what: str
    why: str
    fix: str
    remedy: Remedy | None = None
    raw: str = ""
    recognised: bool = True
    kind: str = ""
    replace_with: Remedy | None = None
    window: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # Whatever built it, an explanation shown or saved carries no token or password, nor a server's escape
        # sequences (guiapp.system.scrub).
        for name in ("title", "what", "why", "fix", "raw"):
            object.__setattr__(self, name, each(getattr(self, name), shown))
        window = dict(self.window)
        for name in ("what", "why", "fix"):
            text = getattr(self, name)
            if for_window(text) != text:
                window[name] = for_window(text)
        object.__setattr__(self, "window", window)

    def render_text(self, width: int = RENDER_WIDTH, details: bool = True,
                    retry: Callable[[Remedy], str | None] | None = None) -> str:
        """Plain text for a terminal: title, what happened, why, what to do, the remedy, then the details
        (the raw error and traceback) unless `details` is False.

        `retry` words the remedy for where the text is shown (the CLI's flag), None to leave it out; without it
        it reads "Retry with: setting=value"."""
        sections = [self.title, ""]
        for label, text in (("What happened", self.what), ("Why", self.why), ("What to do", self.fix)):
            if text:
                sections.append(_wrap(f"{label}: {text}", width))
        if self.remedy:
            line = (retry(self.remedy) if retry is not None else
                    f"Retry with: {self.remedy.setting}={self.remedy.value}")
            if line:
                sections.append(line)
        if details and self.raw.strip():
            sections += ["", "Details:", textwrap.indent(self.raw.rstrip(), "  ")]
        return "\n".join(sections)


def _wrap(text: str, width: int) -> str:
    """Wrap each line of `text` on its own (messages may hold a summary table), continuations indented."""
    # Never broken inside a word: a link cut at a hyphen cannot be clicked or copied.
    return "\n".join(textwrap.fill(line, width=width, subsequent_indent="    " if line.startswith(" ") else "  ",
                                   break_long_words=False, break_on_hyphens=False)
                     for line in text.splitlines())


def explain(error: BaseException | str, context: Mapping[str, Any] | None = None) -> Explanation:
    """Explain an exception, or error text pasted by the user (a message or a whole traceback).

    `context` names what the job was doing: {"job", "model", "tensor", "file", "device", "dtype",
    "destination", "needed_bytes"}; known keys are woven into "what happened". Never raises.
    """
    context = dict(context or {})
    if isinstance(error, MergesmithError):
        cause = error.__cause__ or (None if error.__suppress_context__ else error.__context__)
        known_cause = _from_catalogue(list(_clues_from_chain(cause)), context, "") if cause else None
        explanation = _own(type(error), error.message, error.hint, error.remedy, known_cause, context,
                           _traceback(error), error.why)
        replace_with = getattr(error, "replace_with", None)
        return replace(explanation, replace_with=replace_with) if replace_with else explanation
    if isinstance(error, str):
        error = error[-MAX_TEXT_CHARACTERS:]
        clues = _clues_from_text(error)
        own = _own_error_in_text(error)
        if own is not None:  # a Mergesmith error pasted from a log: its class, and the catalogue for the cause
            return _own(*own, None, None, _from_catalogue(clues, context, error), context, error)
    else:
        clues = list(_clues_from_chain(error))
    raw = error if isinstance(error, str) else _traceback(error)
    known = _from_catalogue(clues, context, raw)
    if known is None and not isinstance(error, str) and _raised_by_mergesmith(error):
        return _internal(_summary(error), context, raw)
    return known or _unrecognised(_summary(error), context, raw)


def _traceback(error: BaseException) -> str:
    return "".join(traceback.format_exception(error)).strip()


def _from_catalogue(clues: list[tuple[set[str], str]], context: dict[str, Any], raw: str) -> Explanation | None:
    for entry in CATALOGUE:
        for type_names, message in clues:
            matched, match = entry.matches(type_names, message)
            if matched:
                return _from_entry(entry, match, context, raw)
    return None


def _own(
    error_class: type[MergesmithError],
    message: str,
    hint: str | None,
    remedy: Remedy | None,
    known_cause: Explanation | None,
    context: dict[str, Any],
    raw: str,
    why: str | None = None,
) -> Explanation:
    """Mergesmith's errors say what happened themselves; a cause the catalogue knows can still say why."""
    return Explanation(
        title=error_class.title,
        what=_with_context(message, context),
        why=why or (known_cause.why if known_cause else _first_paragraph(error_class.__doc__)),
        fix=hint or (known_cause.fix if known_cause else ""),
        remedy=remedy or (known_cause.remedy if known_cause else None),
        raw=raw,
        kind=error_class.__name__,
    )


def _own_error_in_text(text: str) -> tuple[type[MergesmithError], str] | None:
    """The last "guiapp.errors.Name: message" (or bare "Name: message") line naming a Mergesmith error."""
    classes = {cls.__name__: cls for cls in _subclasses(MergesmithError)}
    found = None
    for line in re.finditer(r"^(?:guiapp\.errors\.)?(\w+): (.+)$", text, re.MULTILINE):
        if line.group(1) in classes:
            found = (classes[line.group(1)], line.group(2).strip())
    return found


def _subclasses(cls: type) -> Iterator[type]:
    yield cls
    for subclass in cls.__subclasses__():
        yield from _subclasses(subclass)


def _from_entry(entry: Entry, match: re.Match[str] | None, context: dict[str, Any], raw: str) -> Explanation:
    try:
        refined = entry.refine(match, context) if entry.refine is not None else {}
    except Exception:  # noqa: BLE001 - an explanation must never fail; the entry's general words still apply
        refined = {}
    remedy = refined.get("remedy", entry.remedy)
    return Explanation(
        title=entry.title,
        what=_with_context(each(refined.get("what", entry.what), on_hub_in_use), context),
        why=each(refined.get("why", entry.why), on_hub_in_use),
        fix=each(refined.get("fix", entry.fix), on_hub_in_use),
        remedy=remedy,
        raw=raw,
        kind=entry.key,
    )


def _raised_by_mergesmith(error: BaseException) -> bool:
    """Whether Mergesmith's own code raised `error` (its innermost frame is a file of the guiapp package)."""
    frame = error.__traceback__
    while frame is not None and frame.tb_next is not None:
        frame = frame.tb_next
    return frame is not None and Path(frame.tb_frame.f_code.co_filename).is_relative_to(_PACKAGE_FOLDER)


def _internal(summary: str, context: dict[str, Any], raw: str) -> Explanation:
    return Explanation(
        title="Mergesmith stopped on an internal problem",
        what=_with_context(summary or "An internal check failed.", context),
        why="A check inside Mergesmith's own code failed. This is a bug in Mergesmith, not a problem with your "
        "models, files or settings.",
        fix="Please report it with the details below (the CLI saves them as last-error.txt). Trying again with "
        "other settings may avoid it meanwhile.",
        raw=raw,
        kind="internal_error",
    )


def _unrecognised(summary: str, context: dict[str, Any], raw: str) -> Explanation:
    return Explanation(
        title="Mergesmith does not recognise this error",
        what=_with_context(summary or "An error without a message.", context),
        why="It is not one of the problems Mergesmith knows, so rather than guess, it shows the original "
        "message below.",
        fix="Read the details below. If this came from Mergesmith, please report it with these details.",
        raw=raw,
        recognised=False,
    )


def _clues_from_chain(error: BaseException) -> Iterator[tuple[set[str], str]]:
    """(class names in the hierarchy, message) for the error and each exception it was raised from."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        names = {cls.__name__ for cls in type(current).__mro__}
        yield names, f"{type(current).__name__}: {current}"
        # as Python's own traceback does: an explicit cause, else the implicit context unless suppressed
        current = current.__cause__ or (None if current.__suppress_context__ else current.__context__)


def _clues_from_text(text: str) -> list[tuple[set[str], str]]:
    names = {part for word in _DOTTED_WORD.finditer(text) for part in word.group().split(".")
             if EXCEPTION_NAME.fullmatch(part)}
    return [(names, text)]


def _with_context(what: str, context: Mapping[str, Any]) -> str:
    """Append the job's context ("model X, tensor Y") to a sentence, leaving out what it already names."""
    return each(what, lambda sentence: _with_details(sentence, context))


def _with_details(what: str, context: Mapping[str, Any]) -> str:
    details = [f"{words} {context[key]}" for key, words in CONTEXT_WORDS
               if context.get(key) and not _names(what, str(context[key]))]
    if not details:
        return what
    sentence, period = (what[:-1], ".") if what.endswith(".") else (what, "")
    return f"{sentence} ({', '.join(details)}){period}"


def _names(text: str, value: str) -> bool:
    """Whether `text` mentions `value` as a whole name ("cpu" is not named by "linalg_svd_cpu")."""
    return re.search(rf"(?<![\w/.-]){re.escape(value)}(?![\w/-]|\.\w)", text) is not None


def _first_paragraph(doc: str | None) -> str:
    return " ".join((doc or "").strip().split("\n\n")[0].split())


def _summary(error: BaseException | str) -> str:
    """One line: the last line of pasted text (where a traceback names the error), or "Type: first line"."""
    if isinstance(error, str):
        lines = [line.strip() for line in error.strip().splitlines() if line.strip()]
        return lines[-1] if lines else ""
    message = str(error).strip().splitlines()
    return f"{type(error).__name__}: {message[0]}" if message else type(error).__name__
