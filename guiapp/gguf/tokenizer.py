"""The tokenizer tables of a GGUF file, read from the model's tokenizer.json.

llama.cpp tokenizes by itself, from tables in the file: the tokenizer model ("gpt2" for byte-level BPE as in
Llama 3 and Qwen, "llama" for SentencePiece-style BPE with byte fallback as in Gemma and Llama 2), a
pre-tokenizer name it knows (`llama-bpe`, `qwen2`, `gpt-2`), the tokens with their types (and scores for
"llama"), the merges, the special tokens and whether BOS/EOS are added. llama.cpp's own converter recognises
pre-tokenizers by hashing the token ids of a test text, which changes with every added token; here the
pre-tokenizer is named from its splitting regex instead, so fine-tunes with added tokens export too. Whether BOS
is added is measured by tokenizing a word with the tokenizer itself: Llama-3-style tokenizers say it only in
their post-processor.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gguf

from guiapp.errors import CheckpointError, UnsupportedModelError

_LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                 r"|\s*[\r\n]+|\s+(?!\S)|\s+")
_QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                r"|\s*[\r\n]+|\s+(?!\S)|\s+")
_GPT2_SPLIT = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
# The splitting regexes of byte-level BPE tokenizers and the names llama.cpp knows them by.
PRE_TOKENIZERS = {_LLAMA3_SPLIT: "llama-bpe", _QWEN2_SPLIT: "qwen2", _GPT2_SPLIT: "gpt-2"}
_SPM_SPACE = "\u2581"
_NEVER_MERGED = "\u4e00 \u4e00"
_BYTE_TOKEN = re.compile(r"<0x[0-9A-Fa-f]{2}>")
# gguf-py's vocabulary reader logs notes meant for llama.cpp's converter script, not for the user's terminal.
logging.getLogger("gguf").setLevel(logging.ERROR)
_LOOKS_SPECIAL = re.compile(r"<\|.*\|>|<｜.*｜>|<unused.*>|<pad>|<mask>")
# llama.cpp applies the Phi-3 tokenizer's strip rules to a model whose name contains "phi-3" or "phi3" (any case),
# looking these tokens up by text, and refuses the file when one is missing.
_PHI3_NAME = re.compile(r"(phi)-?(3)", re.IGNORECASE)
_PHI3_NAMED_TOKENS = ("</s>", "<unk>", "<s>", "<|endoftext|>")


@dataclass
class Vocabulary:
    """Everything the file says about tokenization."""

    model: str  # "gpt2" or "llama"
    pre: str
    tokens: list[str]
    types: list[int]
    scores: list[float] | None
    merges: list[str]
    special_ids: dict[str, int] = field(default_factory=dict)
    add_special: dict[str, bool] = field(default_factory=dict)
    chat_template: str | list | None = None
    add_space_prefix: bool | None = None


def read_vocabulary(folder: Path, rows: int, label: str) -> Vocabulary:
    """The tokenizer tables of the model in `folder`, padded to `rows` tokens (the embedding's rows).

    Raises CheckpointError when tokenizer.json is missing or unreadable, UnsupportedModelError for a tokenizer
    llama.cpp cannot reproduce (an unknown splitting rule, a WordPiece or Unigram model) or one with more
    tokens than the model has embedding rows.
    """
    document = _read_document(folder, label)
    model = document.get("model") or {}
    vocab = model.get("vocab")
    if model.get("type") != "BPE" or not isinstance(vocab, dict):
        raise UnsupportedModelError(
            f"The tokenizer of {label} is a {model.get('type') or 'unknown'} tokenizer; GGUF export handles the "
            "BPE tokenizers of Llama, Mistral, Qwen, Gemma and Phi-3.",
            why="llama.cpp tokenizes by itself, and only from tables it knows how to use.")
    by_id = {int(token_id): str(text) for text, token_id in vocab.items()}
    added = {int(entry["id"]): entry for entry in document.get("added_tokens") or []}
    by_id.update({token_id: str(entry["content"]) for token_id, entry in added.items()})
    if by_id and max(by_id) >= rows:
        raise UnsupportedModelError(
            f"The tokenizer of {label} has token ids up to {max(by_id)}, but the model has only {rows} embedding "
            "rows.", why="Every token needs a row in the embedding; llama.cpp refuses such a file.",
            hint="Use the tokenizer that came with the model.")
    spm = bool(model.get("byte_fallback")) and _uses_spm_spaces(document)
    if spm:
        vocabulary = _spm_tables(document, by_id, added, rows)
    else:
        vocabulary = _bpe_tables(document, by_id, added, rows, label)
    _read_specials(vocabulary, folder, document)
    return vocabulary


def _read_document(folder: Path, label: str) -> dict[str, Any]:
    path = folder / "tokenizer.json"
    if not path.is_file():
        raise CheckpointError(
            f"{label} has no tokenizer.json, which a GGUF file needs to carry the tokenizer.",
            hint="Add the tokenizer files of the model it was made from (tokenizer.json, tokenizer_config.json).")
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise CheckpointError(f"The tokenizer.json of {label} cannot be read: {error}.",
                              hint="Copy the tokenizer files again from the model it was made from.") from None
    if not isinstance(document, dict):
        raise CheckpointError(f"The tokenizer.json of {label} is not a tokenizer.")
    return document


def _uses_spm_spaces(document: dict[str, Any]) -> bool:
    """Whether spaces become "▁" (SentencePiece style) rather than byte-level characters."""
    return _SPM_SPACE in json.dumps([document.get("normalizer"), document.get("pre_tokenizer"),
                                     document.get("decoder")], ensure_ascii=False)


def _bpe_tables(document: dict[str, Any], by_id: dict[int, str], added: dict[int, dict], rows: int,
                label: str) -> Vocabulary:
    """Byte-level BPE ("gpt2"), as llama.cpp's converter lays it out."""
    tokens, types = [], []
    for token_id in range(rows):
        text = by_id.get(token_id)
        if text is None:
            tokens.append(f"[PAD{token_id}]")
            types.append(gguf.TokenType.UNUSED)
        elif token_id in added:
            special = added[token_id].get("special") or _LOOKS_SPECIAL.fullmatch(text)
            tokens.append(text if special else text.replace(_SPM_SPACE, " "))
            types.append(gguf.TokenType.CONTROL if special else gguf.TokenType.USER_DEFINED)
        else:
            tokens.append(text)
            types.append(gguf.TokenType.NORMAL)
    # llama.cpp refuses a BPE file without merges, and gguf-py cannot write an empty list: a tokenizer that has
    # none (single bytes only) gets one between two characters byte-level text never holds, which never applies.
    merges = [_merge_text(merge) for merge in document["model"].get("merges") or []] or [_NEVER_MERGED]
    return Vocabulary("gpt2", pre_tokenizer_name(document, label), tokens, [int(t) for t in types], None, merges)


def _merge_text(merge: str | list[str]) -> str:
    """A merge as llama.cpp stores it ("a b"; a space inside a part is written as U+0120, as the converter does)."""
    if isinstance(merge, str):
        return merge
    return " ".join("".join(chr(ord(c) + 256) if c == " " else c for c in part) for part in merge)


def pre_tokenizer_name(document: dict[str, Any], label: str) -> str:
    """The llama.cpp name of a byte-level tokenizer's splitting rule. Raises UnsupportedModelError for one
    llama.cpp does not know."""
    pre = document.get("pre_tokenizer") or {}
    parts = pre.get("pretokenizers", [pre]) if pre.get("type") == "Sequence" else [pre]
    patterns = [part.get("pattern", {}).get("Regex") for part in parts if part.get("type") == "Split"]
    if not patterns and any(part.get("type") == "ByteLevel" and part.get("use_regex", True) for part in parts):
        patterns = [_GPT2_SPLIT]
    for pattern in patterns:
        if pattern in PRE_TOKENIZERS:
            return PRE_TOKENIZERS[pattern]
    raise UnsupportedModelError(
        f"The tokenizer of {label} splits text in a way Mergesmith cannot name for llama.cpp.",
        why="llama.cpp splits text itself before tokenizing and must be told which of its known rules to use; "
        "with a wrong one the model would read text differently from how it was trained.",
        hint="GGUF export knows the tokenizers of Llama 3, Qwen 2/3, GPT-2 and SentencePiece-style models.")


def _spm_tables(document: dict[str, Any], by_id: dict[int, str], added: dict[int, dict], rows: int) -> Vocabulary:
    """SentencePiece-style BPE ("llama"): the merge order becomes the scores llama.cpp merges by."""
    merges = document["model"].get("merges") or []
    vocab = document["model"]["vocab"]
    scores_by_id: dict[int, float] = {}
    for rank, merge in enumerate(merges):
        left, right = merge.split(" ", 1) if isinstance(merge, str) else merge
        merged = vocab.get(left + right)
        if merged is not None:
            scores_by_id.setdefault(int(merged), -float(rank))
    unknown = document["model"].get("unk_token")
    tokens, types, scores = [], [], []
    for token_id in range(rows):
        text = by_id.get(token_id)
        if text is None:
            tokens.append(f"[PAD{token_id}]")
            types.append(gguf.TokenType.UNUSED)
        else:
            tokens.append(text)
            types.append(_spm_type(text, token_id, added, unknown))
        default = 0.0 if text is None or len(text) == 1 else -float(len(merges) + token_id)
        scores.append(scores_by_id.get(token_id, default))
    normalizer = json.dumps(document.get("normalizer"), ensure_ascii=False)
    pre = document.get("pre_tokenizer") or {}
    prefix = '"Prepend"' in normalizer or (pre.get("type") == "Metaspace" and (
        pre.get("prepend_scheme") in ("first", "always") or pre.get("add_prefix_space") is True))
    return Vocabulary("llama", "default", tokens, [int(t) for t in types], scores, [], add_space_prefix=prefix)


def _spm_type(text: str, token_id: int, added: dict[int, dict], unknown: str | None) -> gguf.TokenType:
    if text == unknown:
        return gguf.TokenType.UNKNOWN
    if _BYTE_TOKEN.fullmatch(text):  # llama.cpp's byte fallback finds them by this type, added or not
        return gguf.TokenType.BYTE
    if token_id in added:
        return gguf.TokenType.CONTROL if added[token_id].get("special") else gguf.TokenType.USER_DEFINED
    return gguf.TokenType.NORMAL


def _read_specials(vocabulary: Vocabulary, folder: Path, document: dict[str, Any]) -> None:
    """Special token ids, the chat template and whether BOS/EOS are added (measured with the tokenizer)."""
    special = gguf.SpecialVocab(folder, load_merges=False, n_vocab=len(vocabulary.tokens))
    vocabulary.special_ids = dict(special.special_token_ids)
    vocabulary.add_special = dict(special.add_special_token)
    vocabulary.chat_template = special.chat_template
    measured = _added_by_tokenizer(document)
    if measured is not None:
        first, last = measured
        for kind, position in (("bos", first), ("eos", last)):
            token_id = vocabulary.special_ids.get(kind)
            if token_id is not None:
                vocabulary.add_special[kind] = position == token_id


def _added_by_tokenizer(document: dict[str, Any]) -> tuple[int | None, int | None] | None:
    """The first and last ids the tokenizer puts around a word with its special tokens (None each when it
    adds nothing at that end), or None when the tokenizer cannot be built here."""
    from tokenizers import Tokenizer  # noqa: PLC0415 - the tokenizers library loads with an export only

    try:
        tokenizer = Tokenizer.from_str(json.dumps(document))
        plain = tokenizer.encode("hello", add_special_tokens=False).ids
        framed = tokenizer.encode("hello", add_special_tokens=True).ids
    except Exception:  # noqa: BLE001 - a tokenizer the library cannot build keeps what its files say
        return None
    if not plain:
        return None
    start = framed.index(plain[0]) if plain[0] in framed else 0
    first = framed[0] if start > 0 else None
    last = framed[-1] if len(framed) > start + len(plain) else None
    return first, last


def loadable_name(name: str, vocabulary: Vocabulary | None) -> str:
    """The model's name as written in the file: "phi3" and "phi-3" become "phi 3" when the tokenizer lacks a token
    llama.cpp looks up for models so named (a Phi-4-mini-style tokenizer); otherwise llama.cpp would refuse it."""
    if vocabulary is None or set(_PHI3_NAMED_TOKENS) <= set(vocabulary.tokens):
        return name
    return _PHI3_NAME.sub(r"\1 \2", name)


def write_vocabulary(writer: gguf.GGUFWriter, vocabulary: Vocabulary) -> None:
    """The tokenizer tables into `writer`'s metadata."""
    writer.add_tokenizer_model(vocabulary.model)
    writer.add_tokenizer_pre(vocabulary.pre)
    writer.add_token_list(vocabulary.tokens)
    if vocabulary.scores is not None:
        writer.add_token_scores(vocabulary.scores)
    writer.add_token_types(vocabulary.types)
    if vocabulary.merges:
        writer.add_token_merges(vocabulary.merges)
    for kind, token_id in vocabulary.special_ids.items():
        add = getattr(writer, f"add_{kind}_token_id", None)
        if add is not None:
            add(token_id)
    for kind, value in vocabulary.add_special.items():
        add = getattr(writer, f"add_add_{kind}_token", None)
        if add is not None:
            add(value)
    if vocabulary.add_space_prefix is not None:
        writer.add_add_space_prefix(vocabulary.add_space_prefix)
    if vocabulary.chat_template is not None:
        writer.add_chat_template(vocabulary.chat_template)
