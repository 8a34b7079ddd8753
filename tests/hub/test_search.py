"""Searching the Hub: text, author, sorts, filters, pages, and a newer search cancelling an older one."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from guiapp.errors import JobCancelled, OfflineError, SettingsError
from guiapp.hub.connection import set_offline
from guiapp.hub.search import ModelSearch, SearchQuery


@pytest.fixture
def catalogue(hub_env, samples):
    """Six models with distinct popularity, dates, tasks and libraries."""
    now = datetime.now(timezone.utc)
    server = hub_env.server
    server.add_model(
        "llama-org/llama-small",
        samples.base,
        downloads=500,
        likes=5,
        trending_score=1,
        last_modified=now - timedelta(days=30),
        card_data={"license": "llama3"},
    )
    server.add_model(
        "llama-org/llama-chat",
        samples.finetune,
        downloads=100,
        likes=50,
        trending_score=9,
        last_modified=now - timedelta(days=1),
    )
    server.add_model(
        "llama-org/llama-gated",
        samples.base,
        gated=True,
        downloads=300,
        likes=1,
        trending_score=3,
        last_modified=now - timedelta(days=10),
    )
    server.add_model("other/llama-big", samples.large, downloads=50, likes=20, trending_score=5, last_modified=now)
    server.add_model(
        "other/mistral-tiny",
        samples.wider,
        downloads=900,
        likes=0,
        trending_score=0,
        last_modified=now - timedelta(days=100),
        pipeline_tag="text-classification",
    )
    server.add_model(
        "other/llama-adapter",
        samples.adapter,
        downloads=10,
        likes=2,
        library_name="peft",
        last_modified=now - timedelta(days=2),
    )
    return server


def _ids(query: SearchQuery, page_size: int = 50) -> list[str]:
    return [r.repo_id for r in ModelSearch(page_size=page_size).start(query).next_page()]


SMALL, CHAT, GATED, BIG, ADAPTER = (
    "llama-org/llama-small",
    "llama-org/llama-chat",
    "llama-org/llama-gated",
    "other/llama-big",
    "other/llama-adapter",
)


@pytest.mark.parametrize(
    ("sort", "expected"),
    [
        ("downloads", [SMALL, GATED, CHAT, BIG, ADAPTER]),
        ("likes", [CHAT, BIG, SMALL, ADAPTER, GATED]),
        ("trending", [CHAT, BIG, GATED, SMALL, ADAPTER]),
        ("updated", [BIG, CHAT, ADAPTER, GATED, SMALL]),
    ],
)
def test_text_search_with_each_sort(catalogue, sort, expected):
    assert _ids(SearchQuery(text="llama", sort=sort)) == expected


def test_results_carry_counts_parameters_and_gating(catalogue):
    results = {r.repo_id: r for r in ModelSearch().start(SearchQuery(text="llama-")).next_page()}
    small = results["llama-org/llama-small"]
    assert (small.downloads, small.likes, small.gated) == (500, 5, False)
    assert results["llama-org/llama-gated"].gated
    assert small.parameters == sum(small.parameters_by_dtype.values()) > 0
    assert set(small.parameters_by_dtype) == {"BF16"}
    assert "license:llama3" in small.tags
    assert small.to_json()["last_modified"].startswith(str(small.last_modified.year))


def test_author_and_filters(catalogue):
    assert set(_ids(SearchQuery(author="other"))) == {"other/llama-big", "other/mistral-tiny", "other/llama-adapter"}
    assert _ids(SearchQuery(pipeline_tag="text-classification")) == ["other/mistral-tiny"]
    assert _ids(SearchQuery(library="peft")) == ["other/llama-adapter"]
    assert _ids(SearchQuery(gated=True)) == ["llama-org/llama-gated"]
    big = catalogue.models["other/llama-big"]
    big_parameters = sum(big.parameters_by_dtype().values())
    assert _ids(SearchQuery(min_parameters=big_parameters)) == ["other/llama-big"]
    assert "other/llama-big" not in _ids(SearchQuery(max_parameters=big_parameters - 1))


def test_pages_follow_the_link_header(catalogue):
    catalogue.page_size = 2
    catalogue.reset_counters()
    results = ModelSearch(page_size=4).start(SearchQuery(sort="downloads", limit=6))
    first, second = results.next_page(), results.next_page()
    assert len(first) == 4 and len(second) == 2 and results.next_page() == [] and results.exhausted
    assert [r.repo_id for r in first + second][:2] == ["other/mistral-tiny", "llama-org/llama-small"]
    pages_requested = [r.path for r in catalogue.requests if r.path.startswith("/api/models?")]
    assert len(pages_requested) == 3 and "p=2" in pages_requested[-1]


def test_a_new_search_cancels_the_old_one(catalogue):
    catalogue.page_size = 1
    search = ModelSearch(page_size=1)
    old = search.start(SearchQuery(text="llama"))
    assert len(old.next_page()) == 1
    requests_before = len(catalogue.requests)
    new = search.start(SearchQuery(text="mistral"))
    assert old.stale and not new.stale
    with pytest.raises(JobCancelled):
        old.next_page()
    assert len(catalogue.requests) == requests_before  # the stale search fetched no further page
    assert [r.repo_id for r in new.next_page()] == ["other/mistral-tiny"]


def test_unknown_sort_and_offline(catalogue):
    with pytest.raises(SettingsError, match="Unknown sort"):
        ModelSearch().start(SearchQuery(sort="stars"))
    set_offline(True)
    with pytest.raises(OfflineError, match="Searching the Hub") as caught:
        ModelSearch().start(SearchQuery(text="llama"))
    assert "offline" in caught.value.hint.lower()


def test_a_brief_rate_limit_is_retried(catalogue):
    catalogue.fail_next(429, path_contains="/api/models")
    assert _ids(SearchQuery(text="mistral")) == ["other/mistral-tiny"]
    assert [r.status for r in catalogue.requests if r.path.startswith("/api/models")] == [429, 200]
