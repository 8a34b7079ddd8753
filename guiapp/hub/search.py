"""Search the Hub for models: text, author, sort, filters, one page at a time, superseded by the next query.

The huggingface_hub client is synchronous, so cancelling is cooperative: every `ModelSearch.start` makes the
previous `SearchResults` stale, and a stale search stops before its next item/page with JobCancelled. The window
calls `start` on each keystroke and `next_page` on a worker thread; an old worker then ends on its own.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

from guiapp.errors import JobCancelled, SettingsError
from guiapp.hub.connection import HubConnection, require_online
from guiapp.hub.failures import hub_errors
from guiapp.hub.references import is_hub_id
from guiapp.hub.server_checks import as_count, as_text, as_texts

# Our sort names → huggingface_hub's. The Hub always sorts these in descending order.
SORTS = {"trending": "trending_score", "downloads": "downloads", "likes": "likes", "updated": "last_modified"}
_EXPAND = [
    "author", "downloads", "likes", "lastModified", "tags", "pipeline_tag",
    "library_name", "gated", "safetensors", "trendingScore",
]  # fmt: skip


@dataclass(frozen=True)
class SearchQuery:
    """What to look for. `limit` caps the total number of results over all pages."""

    text: str = ""
    author: str | None = None
    sort: str = "trending"
    pipeline_tag: str | None = None
    library: str | None = None
    min_parameters: int | None = None
    max_parameters: int | None = None
    gated: bool | None = None
    limit: int = 100


@dataclass(frozen=True)
class ModelSummary:
    """One search hit, as the results list shows it."""

    repo_id: str
    author: str | None
    downloads: int
    likes: int
    last_modified: datetime | None
    pipeline_tag: str | None
    library: str | None
    gated: bool
    parameters: int | None
    parameters_by_dtype: dict[str, int] = field(default_factory=dict)
    tags: tuple[str, ...] = ()

    @property
    def declared_bases(self) -> tuple[str, ...]:
        """The base models the model's tags name ("base_model:org/name", "base_model:finetune:org/name")."""
        return tuple(dict.fromkeys(tag.rsplit(":", 1)[-1] for tag in self.tags if tag.startswith("base_model:")))

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["last_modified"] = self.last_modified.isoformat() if self.last_modified else None
        data["tags"] = list(self.tags)
        return data


class ModelSearch:
    """A search box: `start(query)` begins a new search and makes every earlier one stale."""

    def __init__(self, connection: HubConnection | None = None, page_size: int = 20) -> None:
        self._connection = connection
        self.page_size = page_size
        self._generation = itertools.count(1)
        self._current = 0
        self._lock = threading.Lock()

    def start(self, query: SearchQuery) -> SearchResults:
        """Begin `query` (no network yet: pages are fetched by `next_page`).

        Raises SettingsError for an unknown sort and OfflineError when offline.
        """
        if query.sort not in SORTS:
            raise SettingsError(f"Unknown sort '{query.sort}'.", hint=f"Use one of: {', '.join(SORTS)}.",
                                key="sort")
        require_online("Searching the Hub")
        with self._lock:
            self._current = generation = next(self._generation)
        return SearchResults(self, generation, query, self._connection or HubConnection.current())

    def is_current(self, generation: int) -> bool:
        with self._lock:
            return generation == self._current


class SearchResults:
    """The pages of one search. Not thread-safe itself: read it from one worker thread at a time."""

    def __init__(self, owner: ModelSearch, generation: int, query: SearchQuery, connection: HubConnection) -> None:
        self._owner = owner
        self._generation = generation
        self.query = query
        self._connection = connection
        self._items: Iterator[Any] | None = None
        self.exhausted = False

    @property
    def stale(self) -> bool:
        """True once a newer search has started."""
        return not self._owner.is_current(self._generation)

    def next_page(self) -> list[ModelSummary]:
        """The next `page_size` results ([] when there are no more).

        Raises JobCancelled when a newer search has started, and HubError subclasses (offline, rate limited…).
        """
        page: list[ModelSummary] = []
        with hub_errors():
            items = self._items if self._items is not None else self._open()
            while len(page) < self._owner.page_size:
                self._raise_if_stale()
                item = next(items, None)  # fetches the next page from the Hub when this one is used up
                if item is None:
                    self.exhausted = True
                    break
                summary = _summary(item)
                if summary is not None:
                    page.append(summary)
        self._raise_if_stale()
        return page

    def _open(self) -> Iterator[Any]:
        self._connection.check_reachable()  # huggingface_hub's listing retries a dead Hub for 25 s
        query = self.query
        options: dict[str, Any] = {}
        parameter_range = _parameter_range(query.min_parameters, query.max_parameters)
        if parameter_range:  # only passed when used: older huggingface_hub versions lack the argument
            options["num_parameters"] = parameter_range
        self._items = iter(
            self._connection.api().list_models(
                search=query.text or None,
                author=query.author or None,
                sort=SORTS[query.sort],  # type: ignore[arg-type]
                pipeline_tag=query.pipeline_tag or None,
                filter=query.library or None,
                gated=query.gated,
                limit=query.limit,
                expand=_EXPAND,  # type: ignore[arg-type]
                **options,
            )
        )
        return self._items

    def _raise_if_stale(self) -> None:
        if self.stale:
            raise JobCancelled("This search was replaced by a newer one.")


def _summary(info: Any) -> ModelSummary | None:
    """The hit as the list shows it; None for an entry whose id is not a Hub id (it could not be opened anyway).
    Counts and texts of the wrong kind are shown as unknown (see server_checks.as_count / as_text)."""
    if not (isinstance(info.id, str) and is_hub_id(info.id)):
        return None
    safetensors = getattr(info, "safetensors", None)
    parameters = getattr(safetensors, "parameters", None)
    total = as_count(getattr(safetensors, "total", None))
    return ModelSummary(
        repo_id=info.id,
        author=as_text(info.author) or info.id.partition("/")[0] or None,
        downloads=as_count(info.downloads),
        likes=as_count(info.likes),
        last_modified=info.last_modified,
        pipeline_tag=as_text(info.pipeline_tag),
        library=as_text(info.library_name),
        gated=bool(info.gated),
        parameters=total or None,
        parameters_by_dtype={str(k): as_count(v) for k, v in parameters.items()} if isinstance(parameters, dict) else {},
        tags=as_texts(info.tags),
    )


def _parameter_range(low: int | None, high: int | None) -> str | None:
    """The Hub's `num_parameters` filter, e.g. "min:1B,max:7B"."""
    parts = [f"{key}:{_count(value)}" for key, value in (("min", low), ("max", high)) if value is not None]
    return ",".join(parts) or None


def _count(value: int) -> str:
    for unit, size in (("T", 10**12), ("B", 10**9), ("M", 10**6), ("K", 10**3)):
        if value >= size:
            return f"{value / size:g}{unit}"
    return str(value)
