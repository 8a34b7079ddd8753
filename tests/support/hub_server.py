"""A small Hugging Face Hub for tests: serves model folders the tests generate, on 127.0.0.1.

It answers what `huggingface_hub` asks (see docs/spec/hub-contract.md): search with `Link` pagination,
model info, the file tree, HEAD/GET `resolve` with ETag / X-Repo-Commit / Content-Length and Range (206),
errors with `X-Error-Code`, gated models behind a token, `whoami-v2`. For the hard cases it can drop the
connection halfway through a file (once or more), send slowly, or answer 429/500; it counts the bytes it sends
per file.

    with HubServer() as hub:
        hub.add_model("org/tiny", folder, gated=True)
        HfApi(endpoint=hub.url).model_info("org/tiny")
        hub.bytes_sent("org/tiny", "model.safetensors")
"""

from __future__ import annotations

import hashlib
import json
import re
import socket
import struct
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlencode, urlsplit

TEST_TOKEN = "hf_mergesmith_test_token"
TEST_USER = "tester"
SEND_BLOCK = 16 * 1024


@dataclass(frozen=True)
class ServedFile:
    path: Path
    size: int
    sha256: str


@dataclass
class ServedModel:
    """A repo on the test Hub. `gated`: False, "auto" or "manual"; `allowed_users` None = every signed-in user."""

    repo_id: str
    folder: Path
    files: dict[str, ServedFile]
    sha: str
    gated: bool | str = False
    allowed_users: set[str] | None = None
    card_data: dict = field(default_factory=dict)
    tags: list[str] = field(default_factory=list)
    downloads: int = 0
    likes: int = 0
    trending_score: int = 0
    pipeline_tag: str | None = "text-generation"
    library_name: str | None = "transformers"
    last_modified: datetime = field(default_factory=lambda: datetime.now(timezone.utc))
    branches: tuple[str, ...] = ("main",)

    def parameters_by_dtype(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for name, served in self.files.items():
            if not name.endswith(".safetensors"):
                continue
            with served.path.open("rb") as handle:
                (length,) = struct.unpack("<Q", handle.read(8))
                try:
                    header = json.loads(handle.read(length))
                except (ValueError, RecursionError):  # a hostile header: the real Hub lists no parameters for it
                    continue
            for key, entry in header.items():
                if key != "__metadata__" and isinstance(entry, dict):
                    numel = 1
                    for dim in entry["shape"]:
                        numel *= dim
                    counts[entry["dtype"]] = counts.get(entry["dtype"], 0) + numel
        return counts


@dataclass(frozen=True)
class RequestRecord:
    method: str
    path: str
    range: str | None
    status: int
    authorized: bool


@dataclass
class _Drop:
    after_bytes: int | None
    times: int


@dataclass
class _Failure:
    status: int
    times: int
    path_contains: str


class HubServer:
    """The test Hub. Start it with `with HubServer() as hub:` (or `.start()` / `.stop()`); its address is `.url`."""

    def __init__(self, *, page_size: int = 50, tokens: dict[str, str] | None = None) -> None:
        self.page_size = page_size
        self.tokens = dict(tokens) if tokens is not None else {TEST_TOKEN: TEST_USER}
        self.models: dict[str, ServedModel] = {}
        self.requests: list[RequestRecord] = []
        self._bytes: dict[tuple[str, str], int] = {}
        self._drops: dict[tuple[str, str], _Drop] = {}
        self._failures: list[_Failure] = []
        self.bytes_per_second: float | None = None
        self._lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # --- lifecycle ---------------------------------------------------------------------------------------

    def start(self) -> HubServer:
        handler = type("BoundHubHandler", (_HubHandler,), {"hub": self})
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="test-hub", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self) -> HubServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        assert self._httpd is not None, "start the server first"
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    # --- content -------------------------------------------------------------------------------------------

    def add_model(
        self,
        repo_id: str,
        folder: Path,
        *,
        gated: bool | str = False,
        allowed_users: set[str] | None = None,
        card_data: dict | None = None,
        tags: list[str] | None = None,
        downloads: int = 0,
        likes: int = 0,
        trending_score: int = 0,
        pipeline_tag: str | None = "text-generation",
        library_name: str | None = "transformers",
        last_modified: datetime | None = None,
        branches: tuple[str, ...] = ("main",),
    ) -> ServedModel:
        """Serve every file under `folder` as the repo `repo_id` ("org/name") at one commit, on `branches`."""
        folder = Path(folder)
        files = {}
        for path in sorted(p for p in folder.rglob("*") if p.is_file()):
            data = path.read_bytes()
            files[path.relative_to(folder).as_posix()] = ServedFile(path, len(data), hashlib.sha256(data).hexdigest())
        digest = hashlib.sha1(repo_id.encode())
        for name, served in files.items():
            digest.update(f"{name}:{served.sha256}".encode())
        model = ServedModel(
            repo_id=repo_id,
            folder=folder,
            files=files,
            sha=digest.hexdigest(),
            gated="manual" if gated is True else gated,
            allowed_users=allowed_users,
            card_data=dict(card_data or {}),
            tags=list(tags or []),
            downloads=downloads,
            likes=likes,
            trending_score=trending_score,
            pipeline_tag=pipeline_tag,
            library_name=library_name,
            last_modified=last_modified or datetime.now(timezone.utc),
            branches=branches,
        )
        self.models[repo_id] = model
        return model

    # --- faults and counters ---------------------------------------------------------------------------------

    def drop_connection(self, repo_id: str, filename: str, *, after_bytes: int | None = None, times: int = 1) -> None:
        """The next `times` GETs of that file stop after `after_bytes` (default: half of what was asked) and hang up."""
        with self._lock:
            self._drops[(repo_id, filename)] = _Drop(after_bytes, times)

    def fail_next(self, status: int, *, times: int = 1, path_contains: str = "") -> None:
        """Answer the next `times` requests whose path contains `path_contains` with `status` (429, 500…)."""
        with self._lock:
            self._failures.append(_Failure(status, times, path_contains))

    def slow_down(self, bytes_per_second: float | None) -> None:
        """Send file bytes at about this rate from now on (None: full speed)."""
        self.bytes_per_second = bytes_per_second

    def bytes_sent(self, repo_id: str, filename: str) -> int:
        """Body bytes of that file sent to clients so far (HEAD and failed requests send none)."""
        with self._lock:
            return self._bytes.get((repo_id, filename), 0)

    def reset_counters(self) -> None:
        with self._lock:
            self._bytes.clear()
            self.requests.clear()

    # --- used by the handler ------------------------------------------------------------------------------------

    def _take_failure(self, path: str) -> int | None:
        with self._lock:
            for failure in self._failures:
                if failure.times > 0 and failure.path_contains in path:
                    failure.times -= 1
                    return failure.status
        return None

    def _take_drop(self, repo_id: str, filename: str) -> tuple[bool, int | None]:
        with self._lock:
            drop = self._drops.get((repo_id, filename))
            if drop is None or drop.times <= 0:
                return False, None
            drop.times -= 1
            return True, drop.after_bytes

    def _count(self, repo_id: str, filename: str, nbytes: int) -> None:
        with self._lock:
            key = (repo_id, filename)
            self._bytes[key] = self._bytes.get(key, 0) + nbytes

    def _record(self, record: RequestRecord) -> None:
        with self._lock:
            self.requests.append(record)


class _HubHandler(BaseHTTPRequestHandler):
    hub: HubServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the stdlib's signature
        pass

    def do_HEAD(self) -> None:
        self._dispatch(head=True)

    def do_GET(self) -> None:
        self._dispatch(head=False)

    # --- routing --------------------------------------------------------------------------------------------

    def _dispatch(self, head: bool) -> None:
        if self.hub._httpd is None:  # stopped: kept-alive connections must not go on being served
            self.close_connection = True
            return
        split = urlsplit(self.path)
        try:
            failure = self.hub._take_failure(split.path)
            if failure is not None:
                self._error(failure, "", f"Simulated HTTP {failure}", retry_after=failure == 429)
            elif self.headers.get("Authorization") and self._user() is None:  # like the Hub: on every endpoint
                self._error(401, "", "Invalid credentials in Authorization header")
            else:
                self._route(split.path, parse_qs(split.query), head)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def send_response(self, code: int, message: str | None = None) -> None:
        # Recorded before the client can see the answer, so a test reading `requests` never races the server.
        self.hub._record(
            RequestRecord(self.command, self.path, self.headers.get("Range"), code, self._user() is not None)
        )
        super().send_response(code, message)

    def _route(self, path: str, query: dict[str, list[str]], head: bool) -> None:
        parts = [unquote(p) for p in path.strip("/").split("/")]
        if parts == ["api", "models"]:
            return self._search(query)
        if parts == ["api", "whoami-v2"]:
            return self._whoami()
        if parts[:2] == ["api", "models"] and len(parts) >= 4:
            model = self._model(f"{parts[2]}/{parts[3]}")
            if model is None:
                return
            rest = parts[4:]
            if not rest:
                return self._json(self._info(model, full=True))
            if rest[0] == "revision" and len(rest) == 2:
                return self._json(self._info(model, full=True)) if self._revision_ok(model, rest[1]) else None
            if rest[0] == "tree" and len(rest) >= 2:
                return self._tree(model, rest[1], "/".join(rest[2:])) if self._revision_ok(model, rest[1]) else None
            if rest == ["auth-check"]:
                return self._json({}) if self._access_ok(model) else None
        if len(parts) >= 5 and parts[2] == "resolve":
            model = self._model(f"{parts[0]}/{parts[1]}")
            if model is not None and self._revision_ok(model, parts[3]) and self._access_ok(model):
                return self._resolve(model, "/".join(parts[4:]), head)
            return None
        return self._error(404, "", "Not found")

    # --- endpoints ------------------------------------------------------------------------------------------------

    def _search(self, query: dict[str, list[str]]) -> None:
        def first(key: str) -> str | None:
            return query.get(key, [None])[0]

        models = list(self.hub.models.values())
        if text := first("search"):
            models = [m for m in models if text.lower() in m.repo_id.lower()]
        if author := first("author"):
            models = [m for m in models if m.repo_id.split("/")[0] == author]
        if pipeline := first("pipeline_tag"):
            models = [m for m in models if m.pipeline_tag == pipeline]
        for wanted in query.get("filter", []):
            models = [m for m in models if wanted in self._tags(m)]
        if (gated := first("gated")) is not None:
            models = [m for m in models if bool(m.gated) == (gated.lower() == "true")]
        if bounds := first("num_parameters"):
            low, high = _parameter_bounds(bounds)
            models = [m for m in models if low <= sum(m.parameters_by_dtype().values()) <= high]
        sort = first("sort")
        keys = {
            "downloads": lambda m: m.downloads,
            "likes": lambda m: m.likes,
            "trendingScore": lambda m: m.trending_score,
            "lastModified": lambda m: m.last_modified,
        }
        if sort in keys:
            models.sort(key=keys[sort], reverse=True)
        page_length = min(int(first("limit") or self.hub.page_size), self.hub.page_size)
        page = int(first("p") or 0)
        chunk = models[page * page_length : (page + 1) * page_length]
        headers = {}
        if (page + 1) * page_length < len(models):
            params = [(k, v) for k, values in query.items() if k != "p" for v in values] + [("p", str(page + 1))]
            headers["Link"] = f'<{self.hub.url}/api/models?{urlencode(params)}>; rel="next"'
        self._json([self._info(m, full=False) for m in chunk], headers)

    def _whoami(self) -> None:
        user = self._user()
        if user is None:
            return self._error(401, "", "Invalid credentials in Authorization header")
        self._json(
            {
                "type": "user",
                "name": user,
                "fullname": user,
                "auth": {"type": "access_token", "accessToken": {"displayName": "mergesmith-test", "role": "read"}},
            }
        )

    def _info(self, model: ServedModel, full: bool) -> dict:
        parameters = model.parameters_by_dtype()
        info = {
            "_id": model.sha[:24],
            "id": model.repo_id,
            "modelId": model.repo_id,
            "author": model.repo_id.split("/")[0],
            "sha": model.sha,
            "lastModified": model.last_modified.strftime("%Y-%m-%dT%H:%M:%S.000Z"),
            "createdAt": model.last_modified.strftime("%Y-%m-%dT%H:%M:%S.000Z"),
            "private": False,
            "gated": model.gated,
            "disabled": False,
            "downloads": model.downloads,
            "likes": model.likes,
            "trendingScore": model.trending_score,
            "tags": self._tags(model),
            "pipeline_tag": model.pipeline_tag,
            "library_name": model.library_name,
        }
        if parameters:
            info["safetensors"] = {"parameters": parameters, "total": sum(parameters.values())}
        if full:
            info["cardData"] = model.card_data
            info["siblings"] = [{"rfilename": name, "size": f.size} for name, f in model.files.items()]
            info["usedStorage"] = sum(f.size for f in model.files.values())
        return info

    def _tree(self, model: ServedModel, revision: str, prefix: str) -> None:
        entries, folders = [], set()
        for name, served in model.files.items():
            if prefix and not name.startswith(prefix.rstrip("/") + "/"):
                continue
            parents = name.split("/")[:-1]
            for depth in range(1, len(parents) + 1):
                folders.add("/".join(parents[:depth]))
            entry = {"type": "file", "path": name, "size": served.size, "oid": served.sha256[:40]}
            if name.endswith((".safetensors", ".bin")):
                entry["lfs"] = {"oid": served.sha256, "size": served.size, "pointerSize": 134}
            entries.append(entry)
        entries += [{"type": "directory", "path": d, "oid": hashlib.sha1(d.encode()).hexdigest()} for d in folders]
        self._json(entries)

    def _resolve(self, model: ServedModel, filename: str, head: bool) -> None:
        served = model.files.get(filename)
        if served is None:
            return self._error(404, "EntryNotFound", f"{filename} does not exist on 'main'")
        start, end = 0, served.size - 1
        status = 200
        requested = self.headers.get("Range")
        if requested and (match := re.fullmatch(r"bytes=(\d+)-(\d*)", requested.strip())):
            start = int(match.group(1))
            end = min(int(match.group(2)), served.size - 1) if match.group(2) else served.size - 1
            if start >= served.size:
                return self._error(416, "", "Requested range not satisfiable")
            status = 206
        length = end - start + 1
        self.send_response(status)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(length))
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("ETag", f'"{served.sha256}"')
        self.send_header("X-Repo-Commit", model.sha)
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{end}/{served.size}")
        self.end_headers()
        if head:
            return
        dropping, drop_after = self.hub._take_drop(model.repo_id, filename)
        limit = (length // 2 if drop_after is None else drop_after) if dropping else length
        with served.path.open("rb") as handle:
            handle.seek(start)
            remaining = limit
            while remaining > 0:
                block = handle.read(min(SEND_BLOCK, remaining))
                self.hub._count(model.repo_id, filename, len(block))  # before sending, like the record above
                self.wfile.write(block)
                self.wfile.flush()
                remaining -= len(block)
                if self.hub.bytes_per_second:
                    time.sleep(len(block) / self.hub.bytes_per_second)
        if dropping:
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)

    # --- access -------------------------------------------------------------------------------------------------

    def _model(self, repo_id: str) -> ServedModel | None:
        model = self.hub.models.get(repo_id)
        if model is None:
            self._error(404, "RepoNotFound", "Repository not found")
        return model

    def _revision_ok(self, model: ServedModel, revision: str) -> bool:
        if revision in model.branches or revision == model.sha:
            return True
        self._error(404, "RevisionNotFound", f"Invalid rev id: {revision}")
        return False

    def _access_ok(self, model: ServedModel) -> bool:
        user = self._user()
        if not model.gated:
            return True
        if user is None:
            self._error(401, "GatedRepo", f"Access to model {model.repo_id} is restricted. Please log in.")
            return False
        if model.allowed_users is not None and user not in model.allowed_users:
            self._error(403, "GatedRepo", f"Access to model {model.repo_id} is restricted: ask for access.")
            return False
        return True

    def _user(self) -> str | None:
        authorization = self.headers.get("Authorization") or ""
        token = authorization.removeprefix("Bearer ").strip()
        return self.hub.tokens.get(token)

    @staticmethod
    def _tags(model: ServedModel) -> list[str]:
        tags = list(model.tags)
        for extra in (model.library_name, model.pipeline_tag, "safetensors"):
            if extra and extra not in tags:
                tags.append(extra)
        if licence := model.card_data.get("license"):
            tags.append(f"license:{licence}")
        return tags

    # --- responses ------------------------------------------------------------------------------------------------

    def _json(self, payload: object, headers: dict[str, str] | None = None) -> None:
        body = json.dumps(payload).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _error(self, status: int, code: str, message: str, *, retry_after: bool = False) -> None:
        body = json.dumps({"error": message}).encode()
        self.send_response(status)
        if code:
            self.send_header("X-Error-Code", code)
        self.send_header("X-Error-Message", message)
        if retry_after:
            self.send_header("Retry-After", "0")
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)


def _parameter_bounds(text: str) -> tuple[float, float]:
    """Parse the Hub's `num_parameters` filter ("min:1M,max:7B")."""
    units = {"": 1, "K": 1e3, "M": 1e6, "B": 1e9, "T": 1e12}
    low, high = 0.0, float("inf")
    for part in text.split(","):
        key, _, value = part.partition(":")
        match = re.fullmatch(r"([\d.]+)([KMBT]?)", value.strip().upper())
        if match:
            number = float(match.group(1)) * units[match.group(2)]
            low, high = (number, high) if key == "min" else (low, number)
    return low, high


# --- a hostile Hub (a compromised mirror), for the fault suite ------------------------------------------------------


@dataclass
class HostileModes:
    """What a hostile Hub does on top of serving its models; change the fields of the object `make_hostile` returns.

    `etag` / `repo_commit`: sent as every file's ETag / X-Repo-Commit (e.g. a `../` path). `info_fields`: replace
    fields of every model-info and search answer (e.g. {"sha": None}). `gzip_bomb_bytes`: search and model-info
    answers are a gzip body that expands to this many zero bytes. `echo_authorization`: error bodies repeat the request's
    Authorization header, as a careless server might. `redirect`: every model-info and file request is answered
    with a 302 to this address; "loop" sends each request back to its own address, for ever.
    """

    etag: str | None = None
    repo_commit: str | None = None
    info_fields: dict = field(default_factory=dict)
    gzip_bomb_bytes: int = 0
    echo_authorization: bool = False
    redirect: str | None = None


def make_hostile(server: HubServer) -> HostileModes:
    """Turn the running `server` hostile from its next request on; returns the modes to set."""
    assert server._httpd is not None, "start the server first"
    modes = HostileModes()
    server._httpd.RequestHandlerClass = type("HostileHubHandler", (_HostileHubHandler,), {"hub": server, "modes": modes})
    return modes


class _HostileHubHandler(_HubHandler):
    modes: HostileModes

    def _route(self, path: str, query: dict[str, list[str]], head: bool) -> None:
        if self.modes.redirect is None or not (path.startswith("/api/models/") or "/resolve/" in path):
            return super()._route(path, query, head)
        self.send_response(302)
        self.send_header("Location", self.path if self.modes.redirect == "loop" else self.modes.redirect)
        self.send_header("Content-Length", "0")
        self.end_headers()
        return None

    def send_header(self, keyword: str, value: str) -> None:
        if keyword == "ETag" and self.modes.etag is not None:
            value = self.modes.etag
        elif keyword == "X-Repo-Commit" and self.modes.repo_commit is not None:
            value = self.modes.repo_commit
        super().send_header(keyword, value)

    def _info(self, model: ServedModel, full: bool) -> dict:
        return {**super()._info(model, full), **self.modes.info_fields}

    def _json(self, payload: object, headers: dict[str, str] | None = None) -> None:
        if not (self.modes.gzip_bomb_bytes and urlsplit(self.path).path.startswith("/api/models")):
            return super()._json(payload, headers)
        first, repeated, count = _zero_bomb_parts(self.modes.gzip_bomb_bytes)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Encoding", "gzip")
        self.send_header("Content-Length", str(len(first) + len(repeated) * (count - 1)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(first)
            for _ in range(count - 1):
                self.wfile.write(repeated)
        return None

    def _error(self, status: int, code: str, message: str, *, retry_after: bool = False) -> None:
        if self.modes.echo_authorization:
            message = f"{message} (your request said Authorization: {self.headers.get('Authorization')})"
        super()._error(status, code, message, retry_after=retry_after)


def _zero_bomb_parts(total: int) -> tuple[bytes, bytes, int]:
    """A gzip stream of `total` zero bytes (MiB steps) as (first block, block repeated, block count), built from
    two compressed MiB: after a full flush the compressor's output for the same input repeats exactly."""
    import zlib  # noqa: PLC0415 - only the bomb needs it

    chunk = bytes(1 << 20)
    compressor = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    first = compressor.compress(chunk) + compressor.flush(zlib.Z_FULL_FLUSH)
    repeated = compressor.compress(chunk) + compressor.flush(zlib.Z_FULL_FLUSH)
    return first, repeated, max(total >> 20, 1)


# --- uploads: the API huggingface_hub's create_repo / preupload_lfs_files / create_commit use ------------------------


@dataclass
class UploadModes:
    """What the uploading Hub accepts; change the fields of the object `enable_uploads` returns.

    `roles`: token → "read" or "write" (tokens not listed get "write"). `drop_lfs_uploads`: the next that many
    LFS PUTs read half the body and hang up. `lfs_bytes_received`: body bytes of LFS PUTs that completed, per
    oid. `created`: repo ids created through the API, and `private`: their visibility now (model info reports
    it; repos not listed are public).

    Misbehaving on purpose: `fine_grained`: token → the `scoped` entries whoami reports for a fine-grained token.
    `upload_mode`: every preupload answer says this mode ("regular" inlines even weights as base64);
    `ignored`: paths the preupload answer marks `shouldIgnore`. `verify_origin`: the LFS batch names this
    server (scheme://host:port) for the verify step. `batch_gzip_bomb_bytes`: the LFS batch answer is gzip that
    expands to this many zero bytes. `commit_url_extra`: appended to the commit URL the commit answer gives
    ("{token}" is replaced with the request's token, as a careless server might echo it). `commit_refusal`: the
    commit is answered 403 with this message.
    """

    roles: dict[str, str] = field(default_factory=dict)
    fine_grained: dict[str, list[dict]] = field(default_factory=dict)
    upload_mode: str | None = None
    ignored: set[str] = field(default_factory=set)
    verify_origin: str | None = None
    batch_gzip_bomb_bytes: int = 0
    commit_url_extra: str = ""
    commit_refusal: str | None = None
    drop_lfs_uploads: int = 0
    lfs_bytes_received: dict[str, int] = field(default_factory=dict)
    created: list[str] = field(default_factory=list)
    private: dict[str, bool] = field(default_factory=dict)
    store: Path | None = None
    lfs_objects: dict[str, bytes] = field(default_factory=dict)


def enable_uploads(server: HubServer, store: Path) -> UploadModes:
    """Let the running `server` accept repo creation and uploads (committed files are kept under `store` and
    served like any other model from then on); returns the modes to set."""
    assert server._httpd is not None, "start the server first"
    modes = UploadModes(store=Path(store))
    server._httpd.RequestHandlerClass = type("UploadHubHandler", (_UploadHubHandler,), {"hub": server, "modes": modes})
    return modes


_LFS_SUFFIXES = (".safetensors", ".bin", ".pt", ".gguf")


class _UploadHubHandler(_HubHandler):
    modes: UploadModes

    def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
        self._dispatch_write()

    def do_PUT(self) -> None:  # noqa: N802
        self._dispatch_write()

    def _dispatch_write(self) -> None:
        split = urlsplit(self.path)
        parts = [unquote(p) for p in split.path.strip("/").split("/")]
        try:
            failure = self.hub._take_failure(split.path)
            if failure is not None:
                self._read_body()
                return self._error(failure, "", f"Simulated HTTP {failure}", retry_after=failure == 429)
            if parts[0] == "__lfs":
                return self._lfs_object(parts[1], verify=parts[2:] == ["verify"])
            if parts == ["api", "validate-yaml"]:  # create_commit checks a README.md's metadata first
                self._read_body()
                return self._json({"errors": [], "warnings": []})
            user = self._user()
            if user is None:
                self._read_body()
                return self._error(401, "", "Invalid credentials in Authorization header")
            if self._role() != "write":
                self._read_body()
                return self._error(403, "", "You don't have the rights to write with this token (read-only token)")
            if parts == ["api", "repos", "create"]:
                return self._create_repo(user, json.loads(self._read_body() or b"{}"))
            if parts[:2] == ["api", "models"] and len(parts) >= 6 and parts[4] in ("preupload", "commit"):
                repo_id = f"{parts[2]}/{parts[3]}"
                if not self._writable(repo_id, user):
                    return None
                body = self._read_body()
                if parts[4] == "preupload":
                    return self._preupload(json.loads(body))
                if self.modes.commit_refusal is not None:
                    return self._error(403, "", self.modes.commit_refusal)
                return self._commit(repo_id, body)
            if parts[:2] == ["api", "models"] and parts[4:] == ["settings"]:
                repo_id = f"{parts[2]}/{parts[3]}"
                if self._writable(repo_id, user):
                    settings = json.loads(self._read_body() or b"{}")
                    if "visibility" in settings:
                        self.modes.private[repo_id] = settings["visibility"] != "public"
                    return self._json({})
                return None
            if len(parts) == 6 and parts[1].endswith(".git") and parts[2:] == ["info", "lfs", "objects", "batch"]:
                repo_id = f"{parts[0]}/{parts[1].removesuffix('.git')}"
                if self._writable(repo_id, user):
                    return self._lfs_batch(json.loads(self._read_body()))
                return None
            self._read_body()
            return self._error(404, "", "Not found")
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def _role(self) -> str:
        token = (self.headers.get("Authorization") or "").removeprefix("Bearer ").strip()
        return self.modes.roles.get(token, "write")

    def _read_body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _writable(self, repo_id: str, user: str) -> bool:
        if repo_id not in self.hub.models:
            self._read_body()
            self._error(404, "RepoNotFound", "Repository not found")
            return False
        if repo_id.split("/")[0] != user:
            self._read_body()
            self._error(403, "", f"You don't have the rights to write to {repo_id}")
            return False
        return True

    def _create_repo(self, user: str, payload: dict) -> None:
        name, namespace = payload.get("name") or "", payload.get("organization") or user
        if not re.fullmatch(r"[A-Za-z0-9][\w.-]{0,95}", name) or ".." in name or name.endswith(".git"):
            return self._error(400, "", f"Invalid repo name: {name!r}")
        if namespace != user:
            return self._error(403, "", f"You don't have the rights to create a model under the namespace {namespace}")
        repo_id = f"{namespace}/{name}"
        if repo_id in self.hub.models:  # the Hub names the existing repo, which create_repo(exist_ok=True) returns
            body = json.dumps({"error": "You already created this model repo", "url": f"{self.hub.url}/{repo_id}"})
            self.send_response(409)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body.encode())
            return None
        folder = self.modes.store / repo_id
        folder.mkdir(parents=True, exist_ok=True)
        self.hub.add_model(repo_id, folder)
        self.modes.created.append(repo_id)
        self.modes.private[repo_id] = payload.get("visibility", "public") != "public"
        self._json({"url": f"{self.hub.url}/{repo_id}", "name": repo_id, "id": repo_id})

    def _preupload(self, payload: dict) -> None:
        def mode(path: str) -> str:
            return self.modes.upload_mode or ("lfs" if path.endswith(_LFS_SUFFIXES) else "regular")

        files = [{"path": f["path"], "uploadMode": mode(f["path"]), "shouldIgnore": f["path"] in self.modes.ignored,
                  "oid": None} for f in payload.get("files", [])]
        self._json({"files": files, "commitOid": None})

    def _lfs_batch(self, payload: dict) -> None:
        if self.modes.batch_gzip_bomb_bytes:
            return self._gzip_bomb(self.modes.batch_gzip_bomb_bytes)
        objects = []
        for entry in payload.get("objects", []):
            oid, size = entry["oid"], entry["size"]
            answer: dict = {"oid": oid, "size": size, "authenticated": True}
            if oid not in self.modes.lfs_objects:
                answer["actions"] = {"upload": {"href": f"{self.hub.url}/__lfs/{oid}"},
                                     "verify": {"href": f"{self.modes.verify_origin or self.hub.url}/__lfs/{oid}/verify"}}
            objects.append(answer)
        return self._json({"transfer": "basic", "objects": objects})

    def _gzip_bomb(self, total: int) -> None:
        first, repeated, count = _zero_bomb_parts(total)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Encoding", "gzip")
        self.send_header("Content-Length", str(len(first) + len(repeated) * (count - 1)))
        self.end_headers()
        self.wfile.write(first)
        for _ in range(count - 1):
            self.wfile.write(repeated)

    def _lfs_object(self, oid: str, verify: bool) -> None:
        if verify:
            self._read_body()
            return self._json({}) if oid in self.modes.lfs_objects else self._error(404, "", "Object not found")
        length = int(self.headers.get("Content-Length") or 0)
        if self.modes.drop_lfs_uploads > 0:
            self.modes.drop_lfs_uploads -= 1
            self.rfile.read(length // 2)
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return None
        data = self.rfile.read(length)
        if hashlib.sha256(data).hexdigest() != oid:
            return self._error(400, "", "The uploaded content does not match its sha256")
        self.modes.lfs_objects[oid] = data
        self.modes.lfs_bytes_received[oid] = self.modes.lfs_bytes_received.get(oid, 0) + len(data)
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()
        return None

    def _commit(self, repo_id: str, body: bytes) -> None:
        import base64  # noqa: PLC0415 - only commits need it

        folder = self.modes.store / repo_id
        for line in body.splitlines():
            item = json.loads(line)
            value = item["value"]
            if item["key"] == "file":
                data = base64.b64decode(value["content"])
            elif item["key"] == "lfsFile":
                if value["oid"] not in self.modes.lfs_objects:
                    return self._error(400, "", f"LFS object {value['oid']} was never uploaded")
                data = self.modes.lfs_objects[value["oid"]]
            else:
                continue
            target = folder / value["path"]
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        served = self.hub.add_model(repo_id, folder)
        token = (self.headers.get("Authorization") or "").removeprefix("Bearer ").strip()
        extra = self.modes.commit_url_extra.replace("{token}", token)
        self._json({"commitUrl": f"{self.hub.url}/{repo_id}/commit/{served.sha}{extra}", "commitOid": served.sha,
                    "pullRequestUrl": None})

    def _info(self, model: ServedModel, full: bool) -> dict:
        return {**super()._info(model, full), "private": self.modes.private.get(model.repo_id, False)}

    def _whoami(self) -> None:
        user = self._user()
        if user is None:
            return self._error(401, "", "Invalid credentials in Authorization header")
        token = (self.headers.get("Authorization") or "").removeprefix("Bearer ").strip()
        access: dict = {"displayName": "mergesmith-test", "role": self._role()}
        if token in self.modes.fine_grained:
            access = {"displayName": "mergesmith-test", "role": "fineGrained",
                      "fineGrained": {"canReadGatedRepos": False, "global": [],
                                      "scoped": self.modes.fine_grained[token]}}
        return self._json({"type": "user", "name": user, "fullname": user,
                           "auth": {"type": "access_token", "accessToken": access}})
