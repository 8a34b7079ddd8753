"""A dead Hub is reported at once, in words, as one the window can offer offline mode for.

huggingface_hub retries a failed listing with back-off (1 + 2 + 4 + 8 + 8 s: the window said "Searching…" for
25 s). Against the test Hub, started and then stopped so nothing listens at its address, the interactive calls
make one connection attempt and no retry: no back-off is logged. The seconds are printed, not asserted.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator

import pytest

from guiapp.errors import HubUnreachableError, OfflineError
from guiapp.hub.details import model_details, remote_tensors
from guiapp.hub.search import ModelSearch, SearchQuery
from guiapp.system.explain import explain


class Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@pytest.fixture
def dead_hub(hub_env) -> Iterator[tuple[str, Records]]:
    """The test Hub's address after it stopped, and huggingface_hub's log lines from then on."""
    endpoint = hub_env.server.url  # noted while it runs
    hub_env.server.stop()
    records = Records()
    hub_log = logging.getLogger("huggingface_hub")
    hub_log.addHandler(records)
    try:
        yield endpoint, records
    finally:
        hub_log.removeHandler(records)


@pytest.mark.parametrize("call", ["search", "details", "tensors"])
def test_a_dead_hub_is_reported_at_once_in_words(dead_hub, call):
    endpoint, records = dead_hub
    started = time.monotonic()
    with pytest.raises(HubUnreachableError) as caught:
        if call == "search":
            ModelSearch().start(SearchQuery("tiny")).next_page()
        elif call == "details":
            model_details("org/model")
        else:
            remote_tensors("org/model")
    print(f"{call}: reported in {time.monotonic() - started:.2f} s")
    assert not [m for m in records.messages if "Retry" in m], records.messages  # no back-off
    assert isinstance(caught.value, OfflineError)  # what every caller already handles
    explanation = explain(caught.value)
    assert f"Can't reach the Hugging Face Hub at {endpoint}" in explanation.what
    assert "offline mode" in explanation.fix
    assert explanation.kind == "HubUnreachableError"  # the window offers its offline switch for this kind
