"""What a Hub server sends is checked before anything uses it: values that become paths, and answer sizes.

huggingface_hub builds cache paths from what the server says: the ETag names the blob file, X-Repo-Commit the
snapshot folder (and the `.no_exist` marker), a model's `sha` becomes a revision and so a `refs` file, sibling
names become file names in the snapshot. A hostile or compromised mirror (HF_ENDPOINT) could use `../` in any
of them to write outside the cache, e.g. a `.pth` file that another Python runs at start. So:

- every HTTP answer huggingface_hub receives passes `_check_answer` (a response hook on its shared client) before
  huggingface_hub reads a header: ETag / X-Linked-Etag of a file must be a git SHA-1 or a SHA-256, X-Repo-Commit
  a 40-hex commit;
- the JSON answers (search, model info, tree, paths-info, anything under `/api/`), error bodies and header-only
  range reads are read through `_BoundedBody`, which stops after a fixed number of bytes *after* decompression
  (a gzip bomb of a few megabytes would otherwise expand to gigabytes);
- the values Mergesmith takes from JSON (commit, file names) and from the user (revisions) go through the
  `checked_*` functions below before they reach huggingface_hub;
- the answers to uploads (the LFS batch, verify, commit: every request that is not a GET) are bounded like JSON
  answers, and the access token only ever goes to the Hub's own address: a request carrying it to any other
  server (an LFS verify URL a hostile Hub names) is refused before it is sent.

Each refusal is a HubResponseError naming the endpoint; nothing has been written at that point.
"""

from __future__ import annotations

import functools
import re
import threading
import zlib
from collections.abc import Iterator
from typing import TYPE_CHECKING

from guiapp.errors import HubResponseError
from guiapp.facts.hub import hub_endpoint
from guiapp.facts.wording import join, say
from guiapp.system.bounded import describe_value

if TYPE_CHECKING:
    import httpx2

# JSON answers: the largest real ones (model info with every file's metadata of a repo with tens of thousands
# of files, a 1,000-result search page) stay far below this.
JSON_ANSWER_BYTES = 64 * 1024 * 1024
# Error bodies only feed a message.
ERROR_ANSWER_BYTES = 1024 * 1024
# Decompressed in steps of this size, so one compressed chunk never expands to more in memory at once.
DECOMPRESS_STEP = 1024 * 1024

_ETAG = re.compile(r"[0-9a-fA-F]{40}|[0-9a-fA-F]{64}")  # git blob SHA-1 (small files) or SHA-256 (LFS / Xet)
_COMMIT = re.compile(r"[0-9a-fA-F]{40}")
_CLOSED_RANGE = re.compile(r"bytes=(\d{1,18})-(\d{1,18})")
_WHY = ("Values the server sends become file and folder names in the Hugging Face cache; a value like this one "
        "could place a file outside the cache, for example where Python would run it at its next start.")
_CHECK_THE_HUB = say("Check that {hub_address}{aside:if set} points to the Hub or a mirror you trust; unset it to "
                     "use huggingface.co.")
_HINT = join(_CHECK_THE_HUB, "Nothing was written.")

_install_lock = threading.Lock()
_installed = False


def check_hub_answers() -> None:
    """Make huggingface_hub's shared HTTP client check every answer (idempotent; cheap after the first call).

    Raises nothing itself; the checks raise HubResponseError while a request runs.
    """
    global _installed
    if _installed:
        return
    from huggingface_hub import set_client_factory  # keeps `import guiapp.hub.*` light

    with _install_lock:
        if not _installed:
            set_client_factory(_checked_client)
            _installed = True


def checked_commit(value: object, endpoint: str, what: str = "a commit id") -> str:
    """`value` when it is a 40-hex commit id; HubResponseError naming `endpoint` otherwise."""
    if isinstance(value, str) and _COMMIT.fullmatch(value):
        return value
    raise _refusal(endpoint, what, value, "commit id (40 hexadecimal characters)")


def checked_filename(value: object, endpoint: str, repo_id: str) -> str:
    """`value` when it is a relative file name inside a repo (no `..`, `.`, empty, absolute, backslash or NUL
    parts); HubResponseError naming `endpoint` otherwise."""
    if isinstance(value, str) and _is_relative_name(value):
        return value
    raise _refusal(endpoint, f"a file name in {repo_id}", value, "file name inside the repository")


def checked_revision(value: str | None, endpoint: str) -> str | None:
    """`value` (a branch, tag or commit; None = main) when it cannot name a path outside the cache's `refs`
    folder; HubResponseError otherwise. Branches may hold "/" (refs/pr/1), never `..` or an absolute path."""
    if value is None or (len(value) <= 256 and _is_relative_name(value)):
        return value
    raise HubResponseError(
        f"{describe_value(value)} is not a branch, tag or commit name Mergesmith can use with {endpoint}.",
        why="A version name becomes a file name in the Hugging Face cache; this one would point outside it.",
        hint="Give a branch, tag or commit id after '@' (for example main, v1.0 or a 40-character commit id).",
    )


def _is_relative_name(value: str) -> bool:
    if not value or len(value) > 4096 or "\\" in value or "\0" in value or value.startswith("/"):
        return False
    if re.match(r"[A-Za-z]:", value):  # a Windows drive
        return False
    return all(part not in ("", ".", "..") for part in value.split("/"))


def _refusal(endpoint: str, what: str, value: object, expected: str) -> HubResponseError:
    return HubResponseError(
        f"The Hub at {endpoint} sent {what} that is not a valid {expected}: {describe_value(value)}. "
        "Mergesmith refused to use it.",
        why=_WHY,
        hint=_HINT,
    )


# --- the HTTP client huggingface_hub uses ------------------------------------------------------------------


def _checked_client() -> httpx2.Client:
    from huggingface_hub.utils import _http  # its default client carries the Hub's request hook

    client = _http.default_client_factory()
    client.event_hooks["request"].append(_ask_for_known_encodings)
    client.event_hooks["request"].append(_token_only_to_the_hub)
    client.event_hooks["response"].append(_check_answer)
    return client


def _ask_for_known_encodings(request: httpx2.Request) -> None:
    # _BoundedBody decompresses gzip and deflate itself; a server that answers in another encoding is refused.
    request.headers["Accept-Encoding"] = "gzip, deflate"


def _token_only_to_the_hub(request: httpx2.Request) -> None:
    """Refuse to send the Authorization header anywhere but the Hub's own scheme, host and port.

    huggingface_hub itself drops it for file downloads from a CDN and for upload URLs, but sends it to whatever
    address an LFS batch answer names for the verify step."""
    if "Authorization" not in request.headers:
        return
    import httpx2

    hub = _endpoint_of(httpx2.URL(hub_endpoint()))
    elsewhere = _endpoint_of(request.url)
    if elsewhere != hub:
        raise HubResponseError(
            f"The Hub at {hub} asked Mergesmith to send your access token to another server ({elsewhere}). "
            "Mergesmith refused: nothing was sent there.",
            why="An access token lets whoever holds it act as you on the Hub; the Hub never asks to send it to "
            "another address.",
            hint=join(_CHECK_THE_HUB, "Then try again."),
        )


def _check_answer(response: httpx2.Response) -> None:
    """Refuse path-bound headers that are not what the Hub sends; bound the body of JSON and error answers."""
    endpoint = _endpoint_of(response.request.url)
    headers = response.headers
    if "X-Repo-Commit" in headers:
        checked_commit(headers["X-Repo-Commit"], endpoint, "a commit id (X-Repo-Commit)")
    if "X-Linked-Etag" in headers:
        _check_etag(headers["X-Linked-Etag"], endpoint)
    elif "/resolve/" in response.request.url.path and "ETag" in headers:
        _check_etag(headers["ETag"], endpoint)
    limit = _body_limit(response)
    if limit is not None:
        encodings = [e.strip().lower() for e in headers.get_list("Content-Encoding", split_commas=True)]
        encodings = [e for e in encodings if e not in ("", "identity")]
        if len(encodings) > 1 or (encodings and encodings[0] not in ("gzip", "x-gzip", "deflate")):
            raise HubResponseError(
                f"The Hub at {endpoint} answered in a compression Mergesmith does not read "
                f"({describe_value(', '.join(encodings))}).",
                hint=_HINT,
            )
        response.stream = _bounded_body_class()(response.stream, bool(encodings), limit, endpoint)
        if encodings:  # decompressed by the body itself from now on
            del response.headers["Content-Encoding"]


def _check_etag(value: str, endpoint: str) -> None:
    # huggingface_hub's own normalisation: W/ prefix and quotes stripped, the rest is the blob's file name.
    normalised = value.lstrip("W/").strip('"')
    if not _ETAG.fullmatch(normalised):
        raise _refusal(endpoint, "a file version (ETag)", value, "SHA-1 or SHA-256 hash")


def _body_limit(response: httpx2.Response) -> int | None:
    """How many decompressed bytes the answer may hold; None for file downloads (streamed to disk)."""
    if response.status_code >= 400:
        return ERROR_ANSWER_BYTES
    # Also under a mirror's path prefix; uploads (POST, PUT) are answered with JSON or nothing, never a file.
    if "/api/" in response.request.url.path or response.request.method not in ("GET", "HEAD"):
        return JSON_ANSWER_BYTES
    requested = _CLOSED_RANGE.fullmatch(response.request.headers.get("Range", "").strip())
    if requested and int(requested.group(2)) - int(requested.group(1)) < JSON_ANSWER_BYTES:
        return JSON_ANSWER_BYTES  # a header read (safetensors metadata), never a whole file
    return None


def _endpoint_of(url: httpx2.URL) -> str:
    """scheme://host[:port], without any user:password the URL carries."""
    port = f":{url.port}" if url.port else ""
    return f"{url.scheme}://{url.host}{port}"


@functools.cache
def _bounded_body_class() -> type:
    """_BoundedBody as the httpx2 stream type responses must hold (made on first use: httpx2 is heavy)."""
    import httpx2

    return type("BoundedBody", (_BoundedBody, httpx2.SyncByteStream), {})


class _BoundedBody:
    """A response body that decompresses itself (gzip/deflate) in bounded steps and stops at `limit` bytes."""

    def __init__(self, raw: object, compressed: bool, limit: int, endpoint: str) -> None:
        self._raw = raw
        self._compressed = compressed
        self._limit = limit
        self._endpoint = endpoint

    def __iter__(self) -> Iterator[bytes]:
        # 32 + MAX_WBITS: zlib recognises a gzip or a zlib header by itself.
        decompressor = zlib.decompressobj(32 + zlib.MAX_WBITS) if self._compressed else None
        total = 0
        for chunk in self._raw:  # type: ignore[attr-defined]
            pending = chunk
            while pending:
                if decompressor is None:
                    out, pending = pending, b""
                else:
                    try:
                        out = decompressor.decompress(pending, DECOMPRESS_STEP)
                    except zlib.error:
                        raise HubResponseError(
                            f"The Hub at {self._endpoint} sent a compressed answer that cannot be decompressed.",
                            hint=say("Try again later; if it persists, check {hub_address}."),
                        ) from None
                    pending = decompressor.unconsumed_tail
                total += len(out)
                if total > self._limit:
                    raise self._too_big()
                if out:
                    yield out
                if decompressor is not None and decompressor.eof:
                    pending = b""

    def close(self) -> None:
        self._raw.close()  # type: ignore[attr-defined]

    def _too_big(self) -> HubResponseError:
        return HubResponseError(
            f"The Hub at {self._endpoint} sent an answer larger than {self._limit // (1024 * 1024)} MiB once "
            "decompressed, more than any real Hub answer; Mergesmith stopped reading it.",
            why="Reading an answer of unbounded size could use all the memory of this machine.",
            hint=_CHECK_THE_HUB,
        )


# --- fields of JSON answers, tolerated when of the wrong kind ------------------------------------------------

COUNT_CEILING = 10**15  # more downloads, likes or parameters than any real model has


def as_count(value: object) -> int:
    """A count (downloads, likes, sizes, parameters) from a JSON field: 0 unless a whole number in 0..10^15."""
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= COUNT_CEILING else 0


def as_text(value: object, limit: int = 1000) -> str | None:
    """A short text field (author, library, licence): None unless a string of at most `limit` characters."""
    return value if isinstance(value, str) and len(value) <= limit else None


def as_texts(value: object) -> tuple[str, ...]:
    """A list of short texts (tags, base models): a lone string counts as one; other items are left out."""
    items = [value] if isinstance(value, str) else value if isinstance(value, (list, tuple)) else []
    return tuple(item for item in items[:10_000] if as_text(item) is not None)
