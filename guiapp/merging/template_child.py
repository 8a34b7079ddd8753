"""Rendering one chat template, in a child process: `python -m guiapp.merging.template_child` (a JSON request on
stdin, a JSON answer on stdout).

A chat template is a program that comes with a model. transformers renders it in jinja2's immutable sandbox, which
keeps it away from Python's internals but not from running for hours or building a string of gigabytes. Here it
runs in a process of its own, under an address-space limit (where the system has one), which the caller kills
after a time bound: whatever the template does, it ends within that time and that memory. The renderer is
transformers' own (`render_jinja_template`, what `apply_chat_template` calls), so the text is the one the
model's authors meant.

The child first writes a line "ready" once its imports are done (so the caller's time bound counts the template,
not a slow start), then answers requests, one JSON object a line, until its input ends or a render left it more
than GROWN_BYTES larger: the caller keeps a child that rendered a text in time and kills one that did not.
Request: {"template", "messages", "variables" (the special tokens), "max_characters", "memory_bytes"}.
Answer: {"text"} or {"problem": "internals" | "raised" | "syntax" | "too_large" | "failed", "message"}.
The memory bound is counted from what the child used before its first request, so renders do not raise it.
"""

from __future__ import annotations

import json
import sys
from typing import Any

# A child that grew this much over its start ends after answering, rather than be kept.
GROWN_BYTES = 64 * 1024 * 1024


def _address_space_used() -> int | None:
    """The address space this process uses now (Linux), or None."""
    try:
        import resource  # noqa: PLC0415 - POSIX only

        with open("/proc/self/statm", encoding="ascii") as statm:
            return int(statm.read().split()[0]) * resource.getpagesize()
    except (ImportError, OSError, ValueError):
        return None


def _limit_memory(used: int | None, extra_bytes: int) -> None:
    """Allow this process `extra_bytes` of address space beyond `used` (Linux; elsewhere the caller's time bound
    is the only bound)."""
    if used is None:
        return
    try:
        import resource  # noqa: PLC0415 - POSIX only

        resource.setrlimit(resource.RLIMIT_AS, (used + extra_bytes, resource.getrlimit(resource.RLIMIT_AS)[1]))
    except (ImportError, OSError, ValueError):
        pass


def render(request: dict[str, Any], used: int | None = None) -> dict[str, Any]:
    """The answer for one request, within `request["memory_bytes"]` beyond `used` bytes of address space (beyond
    what the process uses now when None); never raises for anything the template does."""
    import jinja2  # noqa: PLC0415 - imported by main() before the memory limit is set
    from transformers.utils.chat_template_utils import render_jinja_template  # noqa: PLC0415 - as jinja2

    _limit_memory(_address_space_used() if used is None else used, request["memory_bytes"])
    try:
        rendered, _ = render_jinja_template(conversations=[request["messages"]], chat_template=request["template"],
                                            add_generation_prompt=True, **request["variables"])
        text = rendered[0]
    except jinja2.exceptions.SecurityError as error:
        return {"problem": "internals", "message": str(error)}
    except jinja2.exceptions.TemplateSyntaxError as error:
        return {"problem": "syntax", "message": f"line {error.lineno}: {error.message}"}
    except jinja2.exceptions.TemplateError as error:  # the template's own raise_exception('...')
        return {"problem": "raised", "message": str(error.message or error)[:500]}
    except (MemoryError, OverflowError):
        return {"problem": "too_large", "message": ""}
    except Exception as error:  # whatever else a template provokes is reported, not a crash of the child
        return {"problem": "failed", "message": f"{type(error).__name__}: {str(error)[:500]}"}
    if len(text) > request["max_characters"]:
        return {"problem": "too_large", "message": f"{len(text):,} characters"}
    return {"text": text}


def main() -> int:
    import transformers.utils.chat_template_utils  # noqa: F401, PLC0415 - the slow part of starting, done first

    used = _address_space_used()
    sys.stdout.buffer.write(b"ready\n")
    sys.stdout.buffer.flush()
    for line in sys.stdin.buffer:
        answer = render(json.loads(line), used)
        sys.stdout.buffer.write(json.dumps(answer).encode("ascii") + b"\n")  # ensure_ascii: one line, no bad bytes
        sys.stdout.buffer.flush()
        now = _address_space_used()
        if used is not None and now is not None and now > used + GROWN_BYTES:
            break  # what a render left behind would count against the next model's bound: the caller starts anew
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
