"""The words that differ between the command line and the window, in one table, and texts written with them.

Advice names what to change or do, and the two audiences do it differently: on the command line with a flag
(`--rank 32`), a command (`hf auth login`) or an environment variable (HF_HUB_OFFLINE); in the window with a
field or a button ("a rank of 32", "Sign in…", "offline mode"). A text is written once with `say`, its
audience-dependent parts as named fields of `TERMS`:

    say("Example: {rank:32}")            # "Example: --rank 32" / "Example: a rank of 32"
    say("Lower {scale}, or check …")     # "Lower --scale, or check …" / "Lower the strength, or check …"
    say("… in bfloat16{aside:{dtype}}.")  # "… in bfloat16 (--dtype)." / "… in bfloat16."

A field's value is written after its colon or given as a keyword (`say("Use {rank} or less.", rank=8)`); a field
that names no term is a plain value given as a keyword (`say("{model} is gated.", model=name)`; a `Said` value
keeps its window words). `{cli_only:…}` and `{window_only:…}` hold words only one audience reads. The result, a
`Said`, is the command line's text (it is a `str`, so every command-line path prints it unchanged) and carries
the window's (`for_window`). Nothing is rewritten afterwards: no pattern reads finished prose.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from string import Formatter
from typing import Any


@dataclass(frozen=True)
class Setting:
    """A job setting as a command's option and as the window names it. `flag` is the option ("--rank"; a switch
    stands alone), `dest` argparse's name for it where a `guiapp.errors.Remedy` may set it (the CLI then
    offers the remedy as this flag), `label` the window's name for the setting ("the rank") and
    `valued` its words with a value ("a rank of {value}")."""

    flag: str
    label: str
    valued: str = "{value}"
    dest: str = ""

    def for_cli(self, value: Any = None) -> str:
        return self.flag if value is None else f"{self.flag} {value}"

    def for_window(self, value: Any = None) -> str:
        return self.label if value is None else self.valued.format(value=value)


@dataclass(frozen=True)
class Phrase:
    """An action or a name said one way on the command line and another in the window; "{value}" stands for
    the field's value where it has one. An empty `window` leaves the part out of the window."""

    cli: str
    window: str

    def for_cli(self, value: Any = None) -> str:
        return self.cli.format(value=value)

    def for_window(self, value: Any = None) -> str:
        return self.window.format(value=value)


# The one table. Settings are keyed by the name a job's spec uses (a `guiapp.errors.Remedy`'s setting too).
SETTINGS: dict[str, Setting] = {
    "output": Setting("--out", "the output folder", "the output folder {value}", dest="out"),
    "overwrite": Setting("--overwrite", "Replace", dest="overwrite"),
    "force": Setting("--force", "starting anyway", dest="force"),
    "device": Setting("--device", "the device", "the device {value}", dest="device"),
    "dtype": Setting("--dtype", "the dtype", dest="dtype"),
    "compute_dtype": Setting("--compute-dtype", "the compute dtype", dest="compute_dtype"),
    "long_prompt": Setting("--long-prompt", "long prompts", dest="long_prompt"),
    "rank": Setting("--rank", "the rank", "a rank of {value}"),
    "energy": Setting("--energy", "the energy to keep", "an energy of {value}"),
    "threshold": Setting("--threshold", "the threshold", "a threshold of {value}"),
    "max_rank": Setting("--max-rank", "the maximum rank", "a maximum rank of {value}"),
    "scale": Setting("--scale", "the strength", "a strength of {value}"),
    "embeddings": Setting("--embeddings", "the embeddings choice", "“{value}” for the embeddings"),
    "weights": Setting("--weights", "the weights", "weights of {value}"),
    "method": Setting("--method", "the method", "the {value} method"),
    "density": Setting("--density", "the density", "a density of {value}"),
    "engine": Setting("--engine", "where the trials run", "the {value} engine"),
    "port": Setting("--port", "port"),
    "public": Setting("--public", "public"),
}
PHRASES: dict[str, Phrase] = {
    # Parts only the command line has: a parenthesised aside (" (--dtype)") or words in place.
    "aside": Phrase(" ({value})", ""),
    "cli_only": Phrase("{value}", ""),
    "window_only": Phrase("", "{value}"),
    # Signing in, going online or offline, the Hub in use, the cache: huggingface_hub's command and variables
    # on the command line, Mergesmith's settings in the window.
    "hf_login": Phrase("`hf auth login`", "Sign in…"),
    "sign_in_at": Phrase("({value}, or `hf auth login`)", "(Sign in…)"),
    "offline_variable": Phrase("HF_HUB_OFFLINE", "offline mode"),
    "offline_setting": Phrase("HF_HUB_OFFLINE=1 (or Mergesmith's offline setting)", "Offline mode"),
    "go_online": Phrase("Unset HF_HUB_OFFLINE to go online", "Go online"),
    "hub_address": Phrase("HF_ENDPOINT", "the Hub address"),
    "mirror": Phrase("HF_ENDPOINT points to a mirror", "you use a mirror of the Hub"),
    "bigger_cache": Phrase("set HF_HOME to a bigger disk",
                           "choose a Hugging Face cache folder on a bigger disk in Settings"),
    # Settings said together, and commands the window has a page for.
    "rank_modes": Phrase("fixed (--rank), energy or threshold", "fixed rank, keep energy or threshold"),
    "module_filters": Phrase("--include / --exclude", "the module filters"),
    "save_embeddings": Phrase("use --embeddings save", "save the embeddings whole"),
    "svd_rank": Phrase("--method svd --rank {value}", "the svd method with a rank of {value}"),
    "replace_existing": Phrase("allow replacing the existing folder with --overwrite",
                               "allow replacing the existing folder"),
    "apply_lora": Phrase("`mergesmith apply-lora --base BASE --adapter {value} --out FOLDER`", "the Apply LoRA page"),
    "probe_command": Phrase("`mergesmith probe`", "The Hardware page"),
    "cache_list": Phrase("`mergesmith hub cache`", "Models › Downloaded"),
    "merge_and_perplexity": Phrase("`mergesmith merge` and `mergesmith perplexity`", "a merge and its perplexity"),
    "merge_and_compare": Phrase("Merge with `mergesmith merge` and compare the results with `mergesmith perplexity`",
                                "Merge on the Merge page and compare the results' perplexity on the Try page"),
}
TERMS: dict[str, Setting | Phrase] = {**SETTINGS, **PHRASES}


class Said(str):
    """A text as the command line says it (the `str` itself), with the window's words in `window`."""

    window: str

    def __new__(cls, cli: str, window: str) -> Said:
        text = super().__new__(cls, cli)
        text.window = window
        return text

    def __reduce__(self) -> tuple[Any, ...]:  # copies and pickles (a job's error crossing a process) keep both
        return Said, (str(self), self.window)


def say(template: str, **values: Any) -> Said:
    """`template` said for both audiences: each field names a term of `TERMS` (its value after the colon or as
    the keyword of its name) or a plain value given as a keyword. Raises KeyError for a plain field without a
    value: a text that names a term the table lacks fails where it is written."""
    cli: list[str] = []
    window: list[str] = []
    for literal, name, spec, _conversion in Formatter().parse(template):
        cli.append(literal)
        window.append(literal)
        if name is None:
            continue
        term = TERMS.get(name)
        if term is None:
            value = values[name]
            cli.append(str(value))
            window.append(for_window(value))
            continue
        if name in values:
            value = values[name]  # a value is never read as a template: a path may hold braces
        else:  # written after the colon, with fields of its own ("{aside:{dtype}}")
            value = say(spec, **values) if "{" in spec else spec or None
        cli.append(term.for_cli(None if value is None else str(value)))
        window.append(term.for_window(None if value is None else for_window(value)))
    return Said("".join(cli), "".join(window))


def for_window(text: Any) -> str:
    """`text` as the window says it: a `Said`'s window words, any other text as it is."""
    return text.window if isinstance(text, Said) else str(text)


def join(*parts: Any, separator: str = " ") -> str:
    """The parts that are not empty, joined for both audiences (a plain `str` when none is a `Said`)."""
    present = [part for part in parts if part]
    joined = separator.join(str(part) for part in present)
    if not any(isinstance(part, Said) for part in present):
        return joined
    return Said(joined, separator.join(for_window(part) for part in present))


def each(text: Any, change: Callable[[str], str]) -> Any:
    """`change` applied to both renderings of `text` (to the text itself when it is plain)."""
    if isinstance(text, Said):
        return Said(change(str(text)), change(text.window))
    return change(text)
