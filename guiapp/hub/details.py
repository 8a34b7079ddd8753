"""What a Hub model is, before a byte of its weights is downloaded: card facts, files, parameters, tensors."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from guiapp.errors import CheckpointError
from guiapp.hub.connection import HubConnection, require_online
from guiapp.hub.failures import hub_errors
from guiapp.hub.header_cache import cached_headers
from guiapp.hub.headers import TensorRecord, index_shards, read_header_at
from guiapp.hub.merge_files import needed_files
from guiapp.hub.references import is_hub_id
from guiapp.hub.server_checks import (
    as_count,
    as_text,
    as_texts,
    checked_commit,
    checked_filename,
    checked_revision,
)
from guiapp.system.bounded import INDEX_JSON_BYTES, load_json_limited

# A header read asks for this much first, as huggingface_hub does: nearly every header fits, so one request
# usually suffices; a longer header costs a second one.
_FIRST_HEADER_BYTES = 100_001
_HEADER_READ_SECONDS = 10.0


@dataclass(frozen=True)
class RepoFile:
    name: str
    size: int


@dataclass(frozen=True)
class ModelDetails:
    """A Hub model at one commit. `download_size` counts only the files a merge needs (see merge_files)."""

    repo_id: str
    revision: str
    commit: str
    author: str | None
    licence: str | None
    gated: bool
    downloads: int
    likes: int
    last_modified: datetime | None
    pipeline_tag: str | None
    library: str | None
    tags: tuple[str, ...]
    base_models: tuple[str, ...]
    files: tuple[RepoFile, ...]
    parameters_by_dtype: dict[str, int]
    page_url: str

    @property
    def parameters(self) -> int | None:
        return sum(self.parameters_by_dtype.values()) if self.parameters_by_dtype else None

    @property
    def needed_files(self) -> tuple[RepoFile, ...]:
        wanted = set(needed_files(f.name for f in self.files))
        return tuple(f for f in self.files if f.name in wanted)

    @property
    def download_size(self) -> int:
        return sum(f.size for f in self.needed_files)

    @property
    def repo_size(self) -> int:
        return sum(f.size for f in self.files)

    def to_json(self) -> dict[str, Any]:
        return {
            "repo_id": self.repo_id,
            "revision": self.revision,
            "commit": self.commit,
            "author": self.author,
            "licence": self.licence,
            "gated": self.gated,
            "downloads": self.downloads,
            "likes": self.likes,
            "last_modified": self.last_modified.isoformat() if self.last_modified else None,
            "pipeline_tag": self.pipeline_tag,
            "library": self.library,
            "tags": list(self.tags),
            "base_models": list(self.base_models),
            "files": [{"name": f.name, "size": f.size} for f in self.files],
            "parameters": self.parameters,
            "parameters_by_dtype": self.parameters_by_dtype,
            "download_size": self.download_size,
            "repo_size": self.repo_size,
            "page_url": self.page_url,
        }


def model_details(
    repo_id: str, revision: str | None = None, *, connection: HubConnection | None = None
) -> ModelDetails:
    """Facts about `repo_id` at `revision` (default main), from one model-info request.

    Raises OfflineError when offline, ModelNotFoundError / RevisionNotFoundError when the model or version does
    not exist, RateLimitedError, HubResponseError when the Hub's answer is unusable (a commit or file name that
    is not one, fields that cannot be read, an answer too large) and HubError for other Hub failures. Odd
    counts and texts (a negative or huge number, a list for a text) are tolerated as unknown.
    """
    require_online(f"Reading the details of {repo_id}")
    connection = connection or HubConnection.current()
    checked_revision(revision, connection.shown_endpoint)
    connection.check_reachable()
    with hub_errors(repo_id, revision):
        info = connection.api().model_info(repo_id, revision=revision, files_metadata=True)
        card = info.card_data.to_dict() if info.card_data is not None else {}
    commit = checked_commit(info.sha, connection.shown_endpoint, f"a commit id (sha) for {repo_id}")
    tags = as_texts(info.tags)
    safetensors = info.safetensors
    parameters = getattr(safetensors, "parameters", None)
    return ModelDetails(
        repo_id=info.id if isinstance(info.id, str) and is_hub_id(info.id) else repo_id,
        revision=revision or "main",
        commit=commit,
        author=as_text(info.author) or repo_id.partition("/")[0] or None,
        licence=as_text(card.get("license"))
        or next((t.removeprefix("license:") for t in tags if t.startswith("license:")), None),
        gated=bool(info.gated),
        downloads=as_count(info.downloads),
        likes=as_count(info.likes),
        last_modified=info.last_modified,
        pipeline_tag=as_text(info.pipeline_tag),
        library=as_text(info.library_name),
        tags=tags,
        base_models=as_texts(card.get("base_model")),
        files=_repo_files(info, repo_id, connection.shown_endpoint),
        parameters_by_dtype={str(k): as_count(v) for k, v in parameters.items()} if isinstance(parameters, dict) else {},
        page_url=connection.model_page(repo_id),
    )


def _repo_files(info: Any, repo_id: str, endpoint: str) -> tuple[RepoFile, ...]:
    """The repo's files as the model info lists them; HubResponseError for a name that is not a relative path."""
    return tuple(RepoFile(checked_filename(s.rfilename, endpoint, repo_id), as_count(s.size))
                 for s in info.siblings or ())


def remote_tensors(
    repo_id: str, revision: str | None = None, *, connection: HubConnection | None = None
) -> dict[str, TensorRecord]:
    """Every tensor of `repo_id` (name, shape, dtype, file) read from the safetensors headers over HTTP range
    requests: a few hundred kilobytes per file, never the weights. LoRA adapter repos are read too.

    Raises CheckpointError when the repo has no safetensors weights, GatedModelError when its licence has not
    been accepted, OfflineError, ModelNotFoundError, RevisionNotFoundError, HubResponseError (see
    `model_details`) and other HubErrors.
    """
    require_online(f"Reading the tensor list of {repo_id}")
    connection = connection or HubConnection.current()
    checked_revision(revision, connection.shown_endpoint)
    connection.check_reachable()
    api = connection.api()
    with hub_errors(repo_id, revision):
        info = api.model_info(repo_id, revision=revision)
    checked_commit(info.sha, connection.shown_endpoint, f"a commit id (sha) for {repo_id}")  # it names cache paths below
    return cached_headers(("hub", connection.endpoint, repo_id, info.sha),
                          lambda: _read_remote_headers(repo_id, info, connection))


def _read_remote_headers(repo_id: str, info: Any, connection: HubConnection) -> dict[str, TensorRecord]:
    """The headers of every weight file of `repo_id` at the commit `info` describes, over range requests."""
    with hub_errors(repo_id, info.sha):
        names = [f.name for f in _repo_files(info, repo_id, connection.shown_endpoint)]
        weights = [n for n in needed_files(names) if n.endswith(".safetensors")]
        if not weights:
            raise CheckpointError(
                f"{repo_id} has no safetensors weights, so its tensors cannot be listed without downloading them.",
                hint="Choose a version of the model published in safetensors format.",
            )
        if "model.safetensors.index.json" in names:
            # Read the index here rather than through get_safetensors_metadata, which would request whatever its
            # weight_map names (`../…` included): only shards the repo lists are read.
            shards = _indexed_shards(repo_id, info.sha, weights, connection)
        elif "model.safetensors" in names:
            shards = ["model.safetensors"]
        else:  # adapters and checkpoints with other file names
            shards = weights
        records: dict[str, TensorRecord] = {}
        for name in shards:
            records.update(_file_header(repo_id, name, info.sha, connection))
    return records


def _file_header(repo_id: str, filename: str, commit: str, connection: HubConnection) -> dict[str, TensorRecord]:
    """The records of one weight file's header, read over range requests (its first 100,000 bytes, then the rest
    of the header if it is longer) and checked by the reader local files go through (`read_header_at`), with
    the file's size from the answer's Content-Range: the same refusals, in the same words, naming the file."""
    from huggingface_hub import hf_hub_url
    from huggingface_hub.utils import build_hf_headers, get_session, hf_raise_for_status

    url = hf_hub_url(repo_id, filename, revision=commit, endpoint=connection.endpoint)

    def fetch(offset: int, count: int) -> tuple[bytes, int]:
        headers = {**build_hf_headers(), "range": f"bytes={offset}-{offset + count - 1}"}
        response = get_session().get(url, headers=headers, timeout=_HEADER_READ_SECONDS)
        hf_raise_for_status(response)
        whole = re.fullmatch(r"bytes \d+-\d+/(\d+)", response.headers.get("content-range", "").strip())
        if response.status_code == 206 and whole is not None:
            return response.content, int(whole.group(1))
        return response.content[offset:offset + count], len(response.content)  # the server sent the whole file

    first, size = fetch(0, _FIRST_HEADER_BYTES)

    def read(offset: int, count: int) -> bytes:
        if offset + count <= len(first):
            return first[offset:offset + count]
        return fetch(offset, count)[0]

    return read_header_at(read, size, f"{repo_id}/{filename}", filename)[0]


def _indexed_shards(repo_id: str, commit: str, listed: list[str], connection: HubConnection) -> list[str]:
    """The shard files `repo_id`'s index names (downloaded into the cache: a merge needs it anyway).

    Raises CheckpointError when the index names a file the repo does not list at its top level.
    """
    from huggingface_hub import hf_hub_download

    index = hf_hub_download(repo_id, "model.safetensors.index.json", revision=commit,
                            cache_dir=connection.cache_dir, endpoint=connection.endpoint)
    hint = "Tell the model's authors; choose another version of the model."
    document = load_json_limited(index, INDEX_JSON_BYTES, CheckpointError, what="index file", hint=hint)
    shards = index_shards(document, f"{repo_id}/model.safetensors.index.json", hint)
    strangers = [name for name in shards if name not in listed]
    if strangers:
        raise CheckpointError(
            f"The index of {repo_id} names {', '.join(strangers)}, which is not one of the repo's weight files "
            "(a name outside the model folder, or a file that is missing).",
            why="Mergesmith reads and writes only the files a repo lists, so a damaged or hostile index cannot "
            "make it touch anything else.",
            hint="Tell the model's authors; until it is fixed, choose another version of the model.",
        )
    return shards

