"""Turn huggingface_hub and network exceptions into Mergesmith's HubError subclasses with a message and a fix."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager

from huggingface_hub import errors as hf

from guiapp.errors import (
    CheckpointError,
    ConnectionLostError,
    GatedModelError,
    HubError,
    HubResponseError,
    HubUnreachableError,
    InvalidTokenError,
    MergesmithError,
    ModelNotFoundError,
    OfflineError,
    RateLimitedError,
    RevisionNotFoundError,
    UploadFailedError,
)
from guiapp.facts.wording import each, say
from guiapp.hub.connection import HubConnection
from guiapp.system.bounded import describe_value
from guiapp.system.error_catalogue import catalogue_entry, on_hub_in_use

# Matched by class name so the mapping holds whichever HTTP library huggingface_hub uses (requests, httpx, httpx2).
_UNREACHABLE = {"ConnectError", "ConnectionError", "ConnectTimeout", "NameResolutionError"}
_INTERRUPTED = {"RemoteProtocolError", "ReadError", "ReadTimeout", "TimeoutException", "ChunkedEncodingError"}
_REDIRECT_LOOP = {"TooManyRedirects"}
_NOT_A_WEB_ADDRESS = {"UnsupportedProtocol", "InvalidSchema", "MissingSchema"}  # httpx's, then requests' names
# What huggingface_hub raises when an answer's JSON is not what it expects (a date it cannot parse, a string
# where a list belongs, a body that is not JSON at all): inside a block of Hub calls, the answer is at fault.
# The answers whose words the catalogue has (HTTP status → the error raised, the catalogue's entry).
_CATALOGUED = {401: (InvalidTokenError, "invalid_token"), 429: (RateLimitedError, "rate_limited")}
_UNREADABLE_ANSWER = (ValueError, TypeError, KeyError, AttributeError, IndexError, OverflowError, RecursionError)


@contextmanager
def hub_errors(repo_id: str | None = None, revision: str | None = None, *, uploading: bool = False) -> Iterator[None]:
    """Run a block of Hub calls; any failure leaves it as a HubError (or CheckpointError) naming the model,
    worded for an upload to it when `uploading`."""
    try:
        yield
    except MergesmithError:
        raise
    except Exception as error:
        translated = translate(error, repo_id, revision, uploading=uploading)
        if translated is error:
            raise
        raise translated from error


def translate(
    error: BaseException, repo_id: str | None, revision: str | None = None, *, uploading: bool = False
) -> BaseException:
    """The Mergesmith error for `error`, or `error` itself when it is not a Hub or network failure."""
    if uploading and isinstance(error, RuntimeError) and isinstance(error.__cause__, hf.HfHubHTTPError):
        error = error.__cause__  # huggingface_hub wraps a failed large-file upload ("Error while uploading …")
    model = repo_id or "the model"
    connection = HubConnection.current()
    page = connection.model_page(repo_id) if repo_id else connection.shown_endpoint
    if isinstance(error, hf.GatedRepoError):
        status = _status(error)
        if status == 401:
            hint = say("Open {page}, accept the licence there, then sign in with an access token "
                       "{sign_in_at:Mergesmith's Hub sign-in}.", page=page)
        else:
            hint = f"Open {page} and accept the licence with the account of your token; access can take a while."
        return GatedModelError(
            f"{model} is gated: its files can only be downloaded after its licence is accepted.", hint=hint
        )
    if isinstance(error, hf.RevisionNotFoundError):
        return RevisionNotFoundError(
            f"{model} has no branch, tag or commit named '{revision}'.",
            hint=f"Check the version after '@' (see {page} › Files and versions), or leave it out to use 'main'.",
        )
    if isinstance(error, hf.RepositoryNotFoundError):
        return ModelNotFoundError(
            f"There is no model named '{model}' on the Hub, or it is private and your token cannot see it.",
            hint="Check the spelling (organisation/name). For a private model, sign in with a token that can read it.",
        )
    if isinstance(error, hf.HFValidationError):
        return ModelNotFoundError(
            f"'{model}' is not a model id or version the Hub accepts: {_first_line(error)}",
            hint="A Hub id looks like 'organisation/name', optionally followed by '@' and a branch, tag or commit.",
        )
    if isinstance(error, hf.OfflineModeIsEnabled):
        return OfflineError(
            say("{model} is needed from the Hub, but huggingface_hub is in offline mode{aside:{offline_variable}}.",
                model=model),
            hint=say("{go_online}, or use a model that is already downloaded."),
        )
    if isinstance(error, hf.LocalEntryNotFoundError):
        if _caused_by(error, _UNREACHABLE) or _caused_by_type(error, hf.OfflineModeIsEnabled):
            return _unreachable(model, connection.shown_endpoint)
        return OfflineError(
            f"{model} is not fully downloaded, and the Hub cannot be used right now.",
            hint="Go online and download it once; afterwards it works offline.",
        )
    if isinstance(error, hf.EntryNotFoundError):
        return ModelNotFoundError(
            f"{model} does not contain a file that is needed ({_first_line(error)}).",
            hint=f"Check the model's files on {page}; it may not be a model in transformers format.",
        )
    if isinstance(error, hf.NotASafetensorsRepoError):
        return CheckpointError(
            f"{model} has no safetensors weights, so its tensors cannot be listed without downloading them.",
            hint="Choose a version of the model published in safetensors format.",
        )
    if isinstance(error, hf.SafetensorsParsingError):
        return CheckpointError(
            f"A safetensors header of {model} cannot be read: {_first_line(error)}", hint="Try again later."
        )
    if isinstance(error, hf.HfHubHTTPError):
        status = _status(error)
        if uploading and status is not None and status >= 500:
            return UploadFailedError(
                f"The Hub answered with an error (HTTP {status}) while saving the upload to {model}.",
                hint="This is on the Hub's side: try again in a few minutes; the files already sent are not sent "
                "again.",
            )
        if uploading and status not in (None, 401, 429):
            return UploadFailedError(
                f"The Hub refused the upload to {model}: {_first_line(error)}",
                hint=f"Check that your access token may write to {model} ({connection.shown_endpoint}"
                "/settings/tokens), then publish again; the files already sent are not sent again.",
            )
        if status in _CATALOGUED:
            kind, key = _CATALOGUED[status]
            return _in_catalogue_words(kind, key, f"while {'uploading to' if uploading else 'reading'} {model}")
        if status is not None and status >= 500:
            return HubError(
                f"The Hub answered with a server error (HTTP {status}) while reading {model}.",
                hint="This is on the Hub's side; try again in a few minutes.",
            )
        return HubError(f"The Hub refused the request for {model}: {_first_line(error)}", hint="Try again later.")
    if _caused_by(error, _REDIRECT_LOOP | _NOT_A_WEB_ADDRESS):
        return _redirected(error, model, connection.shown_endpoint)
    if _caused_by(error, _UNREACHABLE):
        return _unreachable(model, connection.shown_endpoint)
    if uploading and _caused_by(error, _INTERRUPTED | _UNREACHABLE):
        return ConnectionLostError(
            f"The connection to the Hub broke while uploading to {model}.",
            hint="Check the network and publish again: the files already sent are not sent again.",
        )
    if _caused_by(error, _INTERRUPTED) or "Consistency check failed" in str(error):
        return ConnectionLostError(
            f"The connection broke while downloading {model}, and resuming failed.",
            hint="Check the network and start the download again; finished files are kept.",
        )
    if isinstance(error, _UNREADABLE_ANSWER):
        return HubResponseError(
            f"The Hub at {connection.shown_endpoint} sent an answer about {model} that Mergesmith cannot read "
            f"({type(error).__name__}: {_first_line(error)}).",
            why="Its fields are not of the kinds the Hugging Face Hub sends (for example a date that is not a date, "
            "or text where a list belongs).",
            hint=say("Try again later. If {mirror}, check that it is up to date and trustworthy."),
        )
    return error


def _redirected(error: BaseException, model: str, endpoint: str) -> HubResponseError:
    """What the server did with its redirects: sent the request round in a loop, or to an address that is not on
    the web (file://, ftp://)."""
    address = describe_value(_requested_address(error) or "", limit=200).strip("'")
    if _caused_by(error, _REDIRECT_LOOP):
        return HubResponseError(
            f"The Hub at {endpoint} kept redirecting the request for {model}"
            + (f" (last to {address})" if address else "") + " and never answered: its redirects go round in a loop.",
            why="A server whose redirects lead back to where they started is misconfigured, often a mirror or a "
            "proxy set up wrongly.",
            hint=say("Try again later. If {mirror}, tell whoever runs it, or unset {hub_address} to use "
                     "huggingface.co."),
        )
    return HubResponseError(
        f"The Hub at {endpoint} redirected the request for {model} to "
        + (f"{address}, which is not" if address else "an address that is not")
        + " a web address (http or https); Mergesmith does not follow it.",
        why="A Hub never sends a client to a file on this computer or another protocol; a server that does is "
        "misconfigured or hostile.",
        hint=say("If {mirror}, check that it is trustworthy, or unset {hub_address} to use huggingface.co."),
    )


def _requested_address(error: BaseException) -> str | None:
    """The address the failing request went to (the redirect's target), from the first exception in the chain
    that holds its request (httpx, requests), else quoted in its message (requests' InvalidSchema)."""
    for link in _chain(error):
        try:
            url = getattr(getattr(link, "request", None), "url", None)
        except RuntimeError:  # httpx: an error raised before its request was attached
            url = None
        if url:
            return str(url)
    for link in _chain(error):
        quoted = re.search(r"'([a-zA-Z][\w+.-]*://[^']{0,500})'", str(link)[:2000])
        if quoted:
            return quoted.group(1)
    return None


def _in_catalogue_words(kind: type[HubError], key: str, where: str) -> HubError:
    """A `kind` error in the words of the catalogue's entry `key` (the one wording of that failure, whether the
    Hub client met it or it was pasted), saying `where` it happened and naming the Hub in use."""
    words = catalogue_entry(key)
    return kind(each(words.what, lambda what: f"{what.removesuffix('.')} {where}."), why=each(words.why, on_hub_in_use),
                hint=each(words.fix, on_hub_in_use))


def _unreachable(model: str, endpoint: str) -> HubUnreachableError:
    return HubUnreachableError(
        f"Can't reach the Hugging Face Hub at {endpoint}, so {model} cannot be read from it.",
        hint="Check your connection (and any proxy), or switch to offline mode: the models already downloaded "
        "and your local folders keep working.",
    )


def _status(error: BaseException) -> int | None:
    response = getattr(error, "response", None)
    return getattr(response, "status_code", None)


def _chain(error: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _caused_by(error: BaseException, class_names: set[str]) -> bool:
    return any(cls.__name__ in class_names for link in _chain(error) for cls in type(link).__mro__)


def _caused_by_type(error: BaseException, kind: type[BaseException]) -> bool:
    return any(isinstance(link, kind) for link in _chain(error))


def _first_line(error: BaseException) -> str:
    """The error's first line, at most 300 characters (a server's text can be anything)."""
    text = str(error).strip()
    if not text:
        return type(error).__name__
    line = text.splitlines()[0]
    return line if len(line) <= 300 else line[:299] + "…"
