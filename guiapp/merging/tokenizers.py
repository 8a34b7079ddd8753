"""The result's vocabulary: which tokenizer it gets, and which embedding / output-head row each of its tokens takes.

mergekit's semantics (tokenizer/build.py and tokenizer/embed.py of mergekit 0.1.5), with the `tokenizers`
library instead of transformers:
- the output tokenizer is the tokenizer source's (`base`: the base model's, or the first model's; a model: that
  model's, which need not be one of the merged models), or for `union` the base's with every token of the other
  models that it lacks appended, in model order;
- a model's tokens at or past its number of embedding rows are dropped (padded vocabularies such as Qwen2's), so
  the result has exactly one row per token, `pad_to_multiple_of` rounding up (the extra rows are the mean row);
- each model's embedding matrix is re-ordered into the output vocabulary before merging: a token the model has
  keeps its own row; a token it lacks takes a default row — that of the only model that has it, else the base's,
  else the mean over the models that have it, else zeros — or what `tokenizer.tokens` says (`force: true` uses it
  for every model).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from guiapp.errors import CheckpointError, IncompatibleModelsError, RecipeError
from guiapp.hub.references import ModelRef
from guiapp.merging.chat_template_names import BUILT_IN_CHAT_TEMPLATES, TEMPLATE_FOLDER
from guiapp.merging.recipe import TokenizerSettings, TokenSource
from guiapp.system.bounded import JSON_BYTES, TOKENIZER_JSON_BYTES, load_json_limited, read_text_limited

TOKENIZER_FILE = "tokenizer.json"
CONFIG_FILE = "tokenizer_config.json"


@dataclass
class ModelVocabulary:
    """One model's tokens (text → row), limited to the rows its embedding matrix has."""

    ref: ModelRef
    tokens: dict[str, int]


@dataclass(frozen=True)
class RowSource:
    """Where the row of one output token comes from for a model that lacks it (or for all, when forced):
    "zero", "average" (of the models that have the token), or row `row` of model `model`."""

    kind: str
    model: int | None = None
    row: int | None = None


@dataclass
class VocabularyAlignment:
    """How every merged model's embedding rows are laid out in the output vocabulary.

    `rows_of[m][i]` is model m's row for output token i (-1: the model lacks it); `overrides[i]` is the row
    source `tokenizer.tokens` sets for token i; `forced` holds the tokens whose source replaces every model's
    own row.
    """

    tokens: list[str]
    rows: int
    rows_of: dict[int, list[int]]
    overrides: dict[int, RowSource]
    forced: set[int]
    base_model: int | None

    def align(self, tensors: dict[int, torch.Tensor]) -> dict[int, torch.Tensor]:
        """Re-order each model's vocabulary tensor (keyed by model index) into the output vocabulary.

        Raises RecipeError when a `tokenizer.tokens` source names a model that is not an input of this tensor.
        """
        first = next(iter(tensors.values()))
        width, dtype, device = first.shape[1:], first.dtype, first.device
        default_rows = {token: self._row(token, source, tensors, width, dtype, device)
                        for token, source in self._sources_for(tensors).items()}
        aligned = {}
        count = len(self.tokens)
        for model, tensor in tensors.items():
            own = torch.tensor(self.rows_of[model], dtype=torch.long, device=device)
            keep = own >= 0
            if self.forced:
                keep[list(self.forced)] = False
            result = torch.zeros((self.rows, *width), dtype=dtype, device=device)
            result[:count][keep] = tensor[own[keep]]
            for token, row in default_rows.items():
                if not keep[token]:
                    result[token] = row
            if self.rows > count:
                result[count:] = result[:count].mean(dim=0)  # mergekit: padding rows are the mean embedding
            aligned[model] = result
        return aligned

    def _sources_for(self, tensors: dict[int, torch.Tensor]) -> dict[int, RowSource]:
        """The row source of every token that some of these models lack or that the recipe sets (mergekit's
        choice: the only model that has it, else the base, else the mean of those that have it, else zeros)."""
        sources = dict(self.overrides)
        for token in range(len(self.tokens)):
            if token in sources:
                continue
            having = [m for m in tensors if self.rows_of[m][token] >= 0]
            if len(having) == len(tensors):
                continue
            if len(having) == 1:
                sources[token] = RowSource("row", having[0], self.rows_of[having[0]][token])
            elif not having:
                sources[token] = RowSource("zero")
            elif self.base_model in having:
                sources[token] = RowSource("row", self.base_model, self.rows_of[self.base_model][token])
            else:
                sources[token] = RowSource("average")
        return sources

    def _row(self, token: int, source: RowSource, tensors, width, dtype, device) -> torch.Tensor:
        if source.kind == "zero":
            return torch.zeros(width, dtype=dtype, device=device)
        if source.kind == "average":
            having = [tensors[m][self.rows_of[m][token]] for m in tensors if self.rows_of[m][token] >= 0]
            return torch.stack(having).mean(dim=0) if having else torch.zeros(width, dtype=dtype, device=device)
        if source.model not in tensors:
            raise RecipeError(
                f"The row of token {self.tokens[token]!r} is to come from a model that is not an input of this "
                "tensor.", why="A token's row can only be copied from a model whose tensor is merged here.",
                hint="Name in `tokenizer.tokens` one of the models this tensor is merged from.",
                key=("tokenizer", "tokens", self.tokens[token]),
            )
        return tensors[source.model][source.row]


def _resolve_override(text: str, source: TokenSource, refs: list[ModelRef], vocabularies: dict[int, ModelVocabulary],
                      rows_of: dict[int, list[int]], position: int, embedding_rows: list[int | None]) -> RowSource:
    """The RowSource a `tokenizer.tokens` entry means. Raises RecipeError naming the entry when it cannot be had."""
    key = ("tokenizer", "tokens", text)
    if source.kind in ("zero", "average"):
        return RowSource(source.kind)
    if source.model not in refs:
        raise RecipeError(f"`tokenizer.tokens` takes {text!r} from {source.model}, which is not one of the merged "
                          "models.", why="Rows can only be copied from a model that is merged.",
                          hint="Name one of the models under `models:` or `slices:`.", key=key)
    model = refs.index(source.model)
    if source.kind == "model":
        row = rows_of[model][position]
        if row < 0:
            raise RecipeError(f"{source.model} has no token {text!r}, so its row cannot be taken from it.",
                              why="A model can only give rows for tokens it has.",
                              hint="Name a model that has the token, or use `{kind: zero}` or `{kind: average}`.",
                              key=key)
        return RowSource("row", model, row)
    row = source.token_id if source.token is None else vocabularies[model].tokens.get(source.token)
    if row is None:
        raise RecipeError(f"{source.model} has no token {source.token!r} (asked for by {text!r}).",
                          why="`model_token` copies the row of a token the model has.",
                          hint="Check the token's text (special tokens include their brackets).", key=key)
    limit = embedding_rows[model]
    if limit is not None and row >= limit:
        raise RecipeError(f"Token id {row} (asked for by {text!r}) is past the last row of {source.model} "
                          f"({limit} rows).", why="The id indexes the model's embedding rows.",
                          hint="Use `token:` with the token's text instead.", key=key)
    return RowSource("row", model, row)


def read_tokenizer(folder: Path | None) -> dict[str, Any] | None:
    """The parsed tokenizer.json of `folder`, or None when it has none. Raises CheckpointError when it is damaged."""
    if folder is None or not (Path(folder) / TOKENIZER_FILE).is_file():
        return None

    document = load_json_limited(Path(folder) / TOKENIZER_FILE, TOKENIZER_JSON_BYTES, CheckpointError,
                                 what="tokenizer file")
    if not isinstance(document, dict) or not isinstance(document.get("model"), dict):
        raise CheckpointError(f"{Path(folder) / TOKENIZER_FILE} is not a tokenizer file.",
                              hint="Download the model again.")
    return document


def vocabulary_of(document: dict[str, Any]) -> dict[str, int]:
    """Token text → id of a tokenizer.json document (model vocabulary and added tokens)."""
    from tokenizers import Tokenizer  # noqa: PLC0415 - the library loads only when a vocabulary is rebuilt

    return Tokenizer.from_str(json.dumps(document)).get_vocab(with_added_tokens=True)


def build_alignment(
    settings: TokenizerSettings,
    refs: list[ModelRef],
    folders: list[Path],
    embedding_rows: list[int | None],
    base_model: int | None,
    donor_folder: Path | None,
) -> tuple[VocabularyAlignment, dict[str, Any]]:
    """The output vocabulary and tokenizer.json document for a recipe's tokenizer settings.

    `refs`/`folders`/`embedding_rows` describe the merged models (rows: of their embedding matrix, None when it
    has none). Raises IncompatibleModelsError when the tokenizer the settings need has no tokenizer.json.
    """
    reference = base_model if base_model is not None else 0
    documents = [read_tokenizer(folder) for folder in folders]
    if settings.model is None:  # union or base
        out_document = documents[reference]
        out_label = refs[reference]
    else:
        ref = settings.model
        index = refs.index(ref) if ref in refs else None
        out_document = documents[index] if index is not None else read_tokenizer(donor_folder)
        out_label = ref
    if out_document is None:
        raise IncompatibleModelsError(
            f"{out_label} has no tokenizer.json, so the result's vocabulary cannot be built from it.",
            why="Mergesmith reads vocabularies from tokenizer.json (the fast-tokenizer file most models ship).",
            hint="Choose a tokenizer source that has tokenizer.json, or remove the tokenizer setting.",
        )
    if documents[reference] is None:
        raise IncompatibleModelsError(
            f"{refs[reference]} has no tokenizer.json, so the vocabularies cannot be matched token by token.",
            why="The base model's vocabulary stands in for every model without a tokenizer of its own.",
            hint="Use models that ship tokenizer.json.",
        )
    vocabularies = {}
    for index, (ref, document, rows) in enumerate(zip(refs, documents, embedding_rows)):
        tokens = vocabulary_of(document if document is not None else documents[reference])
        limit = rows if rows is not None else len(tokens)
        vocabularies[index] = ModelVocabulary(ref, {t: i for t, i in tokens.items() if i < limit})
    out_rows = embedding_rows[refs.index(out_label)] if out_label in refs else None
    out_document = _stripped(out_document, out_rows)
    if settings.source == "union":
        out_document = _union(out_document, [(vocabularies[i], documents[i]) for i in vocabularies if i != reference])
    tokens = _tokens_by_id(vocabulary_of(out_document))
    rows = len(tokens)
    if settings.pad_to_multiple_of and rows % settings.pad_to_multiple_of:
        rows += settings.pad_to_multiple_of - rows % settings.pad_to_multiple_of
    position = {token: i for i, token in enumerate(tokens)}
    rows_of = {m: [v.tokens.get(token, -1) for token in tokens] for m, v in vocabularies.items()}
    overrides: dict[int, RowSource] = {}
    forced: set[int] = set()
    for text, override in settings.tokens.items():
        if text not in position:
            raise RecipeError(f"`tokenizer.tokens` sets {text!r}, which is not in the result's vocabulary.",
                              why="Only tokens of the output tokenizer have rows in the result.",
                              hint="Check the token's text, or use `source: union` to include other models' tokens.",
                              key=("tokenizer", "tokens", text))
        if override.source is not None:
            overrides[position[text]] = _resolve_override(text, override.source, refs, vocabularies, rows_of,
                                                          position[text], embedding_rows)
        if override.force:
            forced.add(position[text])
    return VocabularyAlignment(tokens, rows, rows_of, overrides, forced, base_model), out_document


def _tokens_by_id(vocabulary: dict[str, int]) -> list[str]:
    tokens = sorted(vocabulary, key=vocabulary.get)
    if [vocabulary[t] for t in tokens] != list(range(len(tokens))):
        raise IncompatibleModelsError("The tokenizer's token ids have gaps, so they cannot be embedding rows.",
                                      why="Each token id must be one row of the embedding matrix.",
                                      hint="Use another tokenizer source.")
    return tokens


def _stripped(document: dict[str, Any], rows: int | None) -> dict[str, Any]:
    """`document` without the tokens at or past `rows` (mergekit's get_stripped_tokenizer)."""
    vocabulary = vocabulary_of(document)
    if rows is None or max(vocabulary.values(), default=-1) < rows:
        return document
    document = json.loads(json.dumps(document))
    dropped = {token for token, index in vocabulary.items() if index >= rows}
    document["added_tokens"] = [entry for entry in document.get("added_tokens", []) if entry["id"] < rows]
    model = document["model"]
    if isinstance(model.get("vocab"), dict):
        model["vocab"] = {t: i for t, i in model["vocab"].items() if i < rows}
        if isinstance(model.get("merges"), list):
            model["merges"] = [m for m in model["merges"] if not set(m.split(" ") if isinstance(m, str) else m) & dropped]
    else:
        raise IncompatibleModelsError(
            "The tokenizer has more tokens than the model has embedding rows, and its kind of vocabulary "
            f"({model.get('type')}) cannot be trimmed.", why="Every token needs a row.",
            hint="Use a model whose tokenizer fits its embeddings as the tokenizer source.")
    return document


def _union(document: dict[str, Any], others: list[tuple[ModelVocabulary, dict[str, Any] | None]]) -> dict[str, Any]:
    """`document` with every token of `others` it lacks appended: their ordinary tokens, in id order, then their
    added (special) tokens with their own settings."""
    from tokenizers import AddedToken, Tokenizer  # noqa: PLC0415 - the library loads only when a vocabulary is rebuilt

    tokenizer = Tokenizer.from_str(json.dumps(document))
    known = set(tokenizer.get_vocab(with_added_tokens=True))
    new_tokens: list[AddedToken] = []
    added_settings: dict[str, dict[str, Any]] = {}
    for vocabulary, other in others:
        added = {entry["content"]: entry for entry in (other or {}).get("added_tokens", [])}
        for token in sorted(vocabulary.tokens, key=vocabulary.tokens.get):
            if token in added:
                added_settings.setdefault(token, added[token])
            elif token not in known:
                new_tokens.append(AddedToken(token, normalized=False))
                known.add(token)
    for token, entry in added_settings.items():
        if token not in known:
            flags = {key: entry[key] for key in ("single_word", "lstrip", "rstrip", "normalized", "special") if key in entry}
            new_tokens.append(AddedToken(token, **flags))
            known.add(token)
    tokenizer.add_tokens(new_tokens)  # at once: one by one rebuilds the added-token matcher every time
    return json.loads(tokenizer.to_str())


def write_tokenizer(folder: Path, document: dict[str, Any], config_folder: Path | None) -> None:
    """Write the output tokenizer.json and a tokenizer_config.json (the source's, with the new added tokens)."""
    (Path(folder) / TOKENIZER_FILE).write_text(json.dumps(document, ensure_ascii=False), encoding="utf-8")
    config: dict[str, Any] = {}
    if config_folder is not None and (Path(config_folder) / CONFIG_FILE).is_file():

        config = load_json_limited(Path(config_folder) / CONFIG_FILE, JSON_BYTES, CheckpointError,
                                   what="tokenizer settings file")
    decoder = dict(config.get("added_tokens_decoder") or {})
    for entry in document.get("added_tokens", []):
        decoder.setdefault(str(entry["id"]), {k: v for k, v in entry.items() if k != "id"})
    if decoder:
        config["added_tokens_decoder"] = decoder
    config.setdefault("tokenizer_class", "PreTrainedTokenizerFast")
    (Path(folder) / CONFIG_FILE).write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def write_serialized_tokenizer(folder: Path, source: Path) -> str | None:
    """Give `folder` the tokenizer.json that transformers builds from `source`'s tokenizer when `source` has a
    tokenizer_config.json but neither tokenizer.json nor tokenizer.model (GPT-2's layout: vocab.json +
    merges.txt). mergekit copies the files of a tokenizer that has one of the two, and otherwise loads the
    tokenizer with transformers and saves it, which writes a tokenizer.json; the files copied from `source` stay.

    Returns a note for the user when transformers cannot read the tokenizer (the output then keeps the copied
    files only, as mergekit keeps none); None otherwise.
    """
    if not (source / CONFIG_FILE).is_file() or any((source / n).is_file() for n in (TOKENIZER_FILE, "tokenizer.model")):
        return None
    import transformers  # noqa: PLC0415 - seconds to load; only tokenizers without a tokenizer.json need it

    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(source)  # classes transformers ships, no remote code
        with tempfile.TemporaryDirectory(dir=folder) as scratch:
            tokenizer.save_pretrained(scratch)
            shutil.move(Path(scratch) / TOKENIZER_FILE, Path(folder) / TOKENIZER_FILE)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
        return (f"The tokenizer of {source} was copied as it is: transformers could not turn it into a tokenizer.json "
                f"({error}).")
    return None


def chat_template_text(choice: str, model_folders: list[Path]) -> str | None:
    """The template `chat_template: choice` means: a built-in's text, the inputs' most common template (`auto`;
    None when no input has one), or `choice` itself (Jinja text)."""
    if choice in BUILT_IN_CHAT_TEMPLATES:
        return (TEMPLATE_FOLDER / f"{choice}.jinja").read_text(encoding="utf-8")
    if choice != "auto":
        return choice
    templates = [template.strip() for template in map(_own_chat_template, model_folders) if template]
    return Counter(templates).most_common(1)[0][0] if templates else None


def _own_chat_template(folder: Path) -> str | None:

    if (Path(folder) / "chat_template.jinja").is_file():
        return read_text_limited(Path(folder) / "chat_template.jinja", JSON_BYTES, CheckpointError,
                                 what="chat template")
    if not (Path(folder) / CONFIG_FILE).is_file():
        return None
    template = load_json_limited(Path(folder) / CONFIG_FILE, JSON_BYTES, CheckpointError,
                                 what="tokenizer settings file").get("chat_template")
    if isinstance(template, list):  # several named templates: mergekit takes the default one
        template = next((t.get("template") for t in template if isinstance(t, dict) and t.get("name") == "default"), None)
    return template if isinstance(template, str) else None


def write_chat_template(folder: Path, template: str) -> None:
    """Put `template` into `folder`'s tokenizer_config.json (created if missing), as mergekit's output has it.

    A copied chat_template.jinja is removed: transformers would prefer it over the config's template.
    """
    path = Path(folder) / CONFIG_FILE
    config = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    config["chat_template"] = template
    path.write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    (Path(folder) / "chat_template.jinja").unlink(missing_ok=True)
