"""One scrubber for every text Mergesmith shows or saves: messages, job logs, history, last-error.txt, reports.

It removes the access token in use (HF_TOKEN, or the one huggingface_hub stored), anything shaped like a Hub
token (`hf_` and 30+ letters or digits), the value of an `Authorization: Bearer/Basic …` header a server echoed,
and credentials embedded in URLs (`https://user:pass@host` → `https://***@host`, HF_ENDPOINT included). A server
that echoes what it was sent, or a mirror URL with a password in it, must not put either on screen or on disk.
`shown` also removes control characters from a server's text; `find_credential` tells whether a text (a file
about to be published) holds a credential.
"""

from __future__ import annotations

import logging
import os
import re
from typing import Any

REDACTED = "***"
# Real Hub tokens are "hf_" and 34 letters; identifiers such as hf_hub_download are never 30 characters of
# letters and digits in a row.
_HUB_TOKEN = re.compile(r"(?<![A-Za-z0-9])hf_[A-Za-z0-9]{30,}")
_AUTHORIZATION = re.compile(r"\b(Bearer|Basic)\s+[A-Za-z0-9._~+/=-]+", re.IGNORECASE)
# scheme://user[:password]@ — the scheme is bounded so the search stays linear on long words.
_URL_CREDENTIALS = re.compile(r"(?<![\w+.-])([A-Za-z][\w+.-]{0,30}://)[^/\s@\"'<>]+@")
_TOKEN_VARIABLES = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")
# Credentials that must never be published, by the shapes their issuers give them. Each needs a long run of
# token characters, so that no word, identifier or stretch of weights bytes looks like one by chance. Each
# starts with its literal prefix and checks the character before it afterwards (a lookbehind placed first would
# make the search hundreds of times slower on the megabytes of a file).
_CREDENTIAL_SHAPES = (
    ("a Hugging Face access token", re.compile(r"hf_(?<![A-Za-z0-9]hf_)[A-Za-z0-9]{30,}")),
    ("an AWS access key", re.compile(r"A[KS]IA(?<![A-Z0-9]A[KS]IA)[0-9A-Z]{16}(?![A-Z0-9])")),
    ("an OpenAI or Anthropic API key", re.compile(r"sk-(?<![\w-]sk-)[A-Za-z0-9_-]{32,}")),
    ("a GitHub token", re.compile(r"gh[pousr]_(?<![A-Za-z0-9]gh[pousr]_)[A-Za-z0-9]{36,}")),
    ("a GitHub token", re.compile(r"github_pat_[A-Za-z0-9_]{40,}")),
    ("a Google API key", re.compile(r"AIza(?<![\w-]AIza)[0-9A-Za-z_-]{35}")),
    ("a Slack token", re.compile(r"xox[abprs]-(?<![\w-]xox[abprs]-)[A-Za-z0-9-]{10,}")),
    ("a private key", re.compile(r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----")),
)
# Characters a terminal or a text widget acts on instead of showing: C0/C1 controls (escape sequences, bell,
# carriage return), DEL, and the bidirectional overrides that make text read differently from what it is.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def scrub(text: str) -> str:
    """`text` without tokens, Authorization values or URL credentials. Never raises."""
    if not text:
        return text
    for secret in _secrets_in_use():
        text = text.replace(secret, REDACTED)
    text = _HUB_TOKEN.sub(REDACTED, text)
    text = _AUTHORIZATION.sub(lambda match: f"{match.group(1)} {REDACTED}", text)
    return _URL_CREDENTIALS.sub(lambda match: f"{match.group(1)}{REDACTED}@", text)


def shown(text: str) -> str:
    """`text` from a server, fit to print: scrubbed, and without control characters (an escape sequence could
    rewrite the terminal's title or screen, a carriage return hide what came before). Never raises."""
    return _CONTROL.sub("", scrub(text))


def find_credential(text: str) -> str | None:
    """What credential `text` holds, in words ("a Hugging Face access token", "a private key"…), or None.

    The token huggingface_hub would send now counts whatever its shape. Never raises."""
    if any(secret in text for secret in _secrets_in_use()):
        return "your Hugging Face access token"
    for kind, shape in _CREDENTIAL_SHAPES:
        if shape.search(text):
            return kind
    return None


def _secrets_in_use() -> list[str]:
    """The token huggingface_hub would send now (environment or stored), longest first; [] when there is none."""
    found = {os.environ.get(name, "").strip() for name in _TOKEN_VARIABLES}
    try:
        from huggingface_hub import get_token  # noqa: PLC0415 - only read when there is text to scrub

        found.add((get_token() or "").strip())
    except Exception:  # noqa: BLE001 - an unreadable token file leaves the patterns to do the work
        pass
    # Short values would replace ordinary words; a real token is far longer.
    return sorted((s for s in found if len(s) >= 8), key=len, reverse=True)


def scrub_log_records() -> None:
    """Scrub every log record from now on, whichever library logs it (huggingface_hub's quote URLs and server
    answers). Idempotent. The record's message is formatted once, scrubbed, and kept without its arguments."""
    previous = logging.getLogRecordFactory()
    if getattr(previous, "scrubs", False):
        return

    def make_scrubbed_record(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = previous(*args, **kwargs)
        try:
            record.msg, record.args = scrub(record.getMessage()), None
        except Exception:  # noqa: BLE001 - a record whose arguments do not fit its format stays as logging made it
            pass
        return record

    make_scrubbed_record.scrubs = True  # type: ignore[attr-defined]
    logging.setLogRecordFactory(make_scrubbed_record)
