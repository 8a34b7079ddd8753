"""Long texts for perplexity in bounded pieces: tokenized a piece at a time and cut into windows as they come.

A tokenizer asked for the ids of a whole 26 MB text holds every token, offset and string at once (gigabytes);
here at most one piece of text (`PIECE_CHARACTERS`) is tokenized at a time and at most one window of ids is
kept beyond it. A text that fits in one piece is tokenized exactly as before, in one call; a longer one is cut at
line ends (else at spaces) so that the tokens differ from the whole text's, if at all, only where pieces meet.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

# About 15,000 tokens of English: the tokenizer's working memory for it is a few megabytes.
PIECE_CHARACTERS = 64 * 1024


def text_pieces(text: str, size: int = PIECE_CHARACTERS) -> Iterator[str]:
    """`text` in consecutive pieces of at most `size` characters, each ending after a line end when one is in
    reach, else after a space, else at `size`. Joined, the pieces are `text`."""
    start = 0
    while len(text) - start > size:
        end = start + size
        cut = text.rfind("\n", start, end)
        if cut < 0:
            cut = max(text.rfind(" ", start, end), text.rfind("\t", start, end))
        end = cut + 1 if cut >= 0 else end
        yield text[start:end]
        start = end
    yield text[start:]


def token_pieces(tokenizer: Any, text: str, size: int = PIECE_CHARACTERS) -> Iterator[tuple[list[int], int]]:
    """The token ids of `text` a piece at a time, each with the piece's length in characters. The tokenizer's
    own special tokens (a start token, say) come before the first piece's ids and those it puts at the end after
    the last piece's, as for the whole text."""
    pieces = text_pieces(text, size)
    first = next(pieces)
    following = next(pieces, None)
    if following is None:
        yield tokenizer(first)["input_ids"], len(first)
        return
    with_specials = tokenizer(first)["input_ids"]
    plain = tokenizer(first, add_special_tokens=False)["input_ids"]
    prefix, suffix = _specials_around(with_specials, plain)
    yield prefix + plain, len(first)
    while following is not None:
        piece, following = following, next(pieces, None)
        ids = tokenizer(piece, add_special_tokens=False)["input_ids"]
        yield (ids + suffix if following is None else ids), len(piece)


def windows(pieces: Iterable[list[int]], window: int) -> Iterator[list[int]]:
    """Windows of at most `window` ids over the concatenated `pieces`, consecutive windows sharing one id, so
    every id after the first is in exactly one window after its predecessor: the same windows as cutting the
    whole list at 0, window-1, 2(window-1)… A last window of a single id (nothing to predict) is left out."""
    buffer: list[int] = []
    for ids in pieces:
        buffer.extend(ids)
        while len(buffer) > window:
            yield buffer[:window]
            del buffer[:window - 1]
    if len(buffer) >= 2:
        yield buffer


def _specials_around(with_specials: list[int], plain: list[int]) -> tuple[list[int], list[int]]:
    """The ids a tokenizer adds before and after `plain` (found within `with_specials`); none when it is not
    there as one run."""
    for start in range(len(with_specials) - len(plain) + 1):
        if with_specials[start:start + len(plain)] == plain:
            return with_specials[:start], with_specials[start + len(plain):]
    return [], []
