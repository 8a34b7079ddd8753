"""Where the lab's trials run: in this process (`local`), or as Ray tasks (`ray`) on a Ray started here for the
search, or on an existing cluster at an address. The optimizer stays in the driver either way.

A Ray started here listens on 127.0.0.1 only, keeps its sockets and logs in a short folder of its own under
/tmp (Ray's socket paths must stay within 107 bytes), runs without token authentication (a new local Ray would
otherwise write ~/.ray/auth_token, which a later `ray start` then demands) and is shut down when the search ends,
however it ends. An existing cluster is connected to and disconnected from, never stopped. Each trial is one task
named `mergesmith-lab-trial-N`; a task whose worker is lost is run again by Ray (up to `TASK_RETRIES` times).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import tempfile
from abc import ABC, abstractmethod
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import Any

import psutil

from guiapp.errors import ClusterError, MergesmithError, SettingsError
from guiapp.facts.wording import say
from guiapp.lab.trial import Evaluator, Material, TrialScore, check_token_count
from guiapp.progress import Progress

ENGINES = ("local", "ray")
TASK_RETRIES = 3
# How long the lab waits for a cluster's address to answer before saying nothing does (ray.init itself would
# retry for minutes).
CONNECT_SECONDS = 5.0
# The package's folder, for the workers of a Ray started here (they start from Ray's own folder).
_SOURCE_ROOT = str(Path(__file__).resolve().parents[2])

Request = tuple[int, dict[str, Any]]


class Engine(ABC):
    """Runs trials: scores candidate recipes (of one recipe's shape) on a text."""

    name = ""

    @abstractmethod
    def check_text(self, text: str, what: str) -> None:
        """Raise SettingsError when `text` is too short for the lab."""

    @abstractmethod
    def score_each(self, requests: list[Request], material: Material) -> Iterator[tuple[int, TrialScore]]:
        """Each request's (number, score) as it finishes. Raises JobCancelled between trials."""

    def score_all(self, requests: list[Request], material: Material) -> list[TrialScore]:
        """The scores of `requests`, in their order."""
        scores = dict(self.score_each(requests, material))
        return [scores[index] for index, _ in requests]

    def close(self) -> None:  # noqa: B027 - an engine that holds nothing has nothing to release
        """Release what the engine holds (models, a Ray it started)."""

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()


def open_engine(name: str, address: str | None, document: dict[str, Any], device: str, window: int, seed: int,
                progress: Progress) -> Engine:
    """The engine `name` for trials of `document`'s shape. Raises SettingsError for an unknown engine or an
    address without the Ray engine, ClusterError when Ray is missing or the address does not answer, and what
    building the evaluator raises (RecipeError, CheckpointError...) for the local engine."""
    if name not in ENGINES:
        raise SettingsError(f'"{name}" is not a lab engine.', hint=say("Use {engine:local} or {engine:ray}."),
                            key="engine")
    if name == "local":
        if address:
            raise SettingsError(say("A Ray address is given, but the trials would run here{aside:{engine:local}}."),
                                hint=say("{cli_only:Add {engine:ray}}{window_only:Choose “A Ray cluster at…”} to run "
                                         "them on that cluster."), key="ray_address")
        return LocalEngine(document, device, window, seed, progress)
    return RayEngine(document, device, window, seed, address, progress)


class LocalEngine(Engine):
    """Trials one after another in this process, on one model built once."""

    name = "local"

    def __init__(self, document: dict[str, Any], device: str, window: int, seed: int, progress: Progress) -> None:
        self._progress = progress
        self._evaluator = Evaluator(document, device, window, seed, progress)

    def check_text(self, text: str, what: str) -> None:
        self._evaluator.check_text(text, what)

    def score_each(self, requests: list[Request], material: Material) -> Iterator[tuple[int, TrialScore]]:
        for index, document in requests:
            self._progress.check_cancelled()
            yield index, self._evaluator.score(document, material, _quiet(self._progress))

    def close(self) -> None:  # noqa: B027 - an engine that holds nothing has nothing to release
        self._evaluator.close()


class RayEngine(Engine):
    """Trials as Ray tasks, as many at once as the cluster has CPUs for."""

    name = "ray"

    def __init__(self, document: dict[str, Any], device: str, window: int, seed: int, address: str | None,
                 progress: Progress) -> None:
        try:
            import ray  # noqa: PLC0415 - an optional extra (mergesmith[cluster]), loaded for --engine ray only
        except ImportError:
            raise ClusterError("Ray is not installed, so the lab cannot run its trials on Ray.",
                               hint=say("Install it with `pip install 'mergesmith[cluster]'`, or use {engine:local}.")) from None
        self._ray = ray
        self._progress = progress
        self._config = {"document": document, "device": device, "window": window, "seed": seed}
        self._window = window
        self._address = address
        self._folder: str | None = None
        self._environment: dict[str, str | None] = {}
        progress.start_stage("Starting Ray" if address is None else f"Connecting to Ray at {address}")
        if address is None:
            self._start_local()
        else:
            self._connect(address)

    def _start_local(self) -> None:
        # Sockets live in this folder: its path must stay short (Ray's limit is 107 bytes).
        self._folder = tempfile.mkdtemp(prefix="msray-", dir="/tmp")
        self._set_environment({"RAY_AUTH_MODE": os.environ.get("RAY_AUTH_MODE", "disabled")})
        try:
            self._ray.init(address="local", _node_ip_address="127.0.0.1", include_dashboard=False,
                           _temp_dir=self._folder, logging_level="ERROR", log_to_driver=False,
                           configure_logging=True,
                           runtime_env={"env_vars": {"PYTHONPATH": _pythonpath()}})
        except BaseException:
            self.close()
            raise

    def _connect(self, address: str) -> None:
        host, _, port = address.rpartition(":")
        if not host or not port.isdigit():
            raise SettingsError(f'"{address}" is not a Ray address.',
                                hint="Give the head node's address as HOST:PORT, e.g. 10.0.0.5:6379.",
                                key="ray_address")
        try:
            socket.create_connection((host, int(port)), timeout=CONNECT_SECONDS).close()
        except OSError as error:
            raise ClusterError(
                say("Nothing answers at the Ray address {address} ({reason}): check that the cluster is running "
                    "(`ray status` on its head node), that this is its head's address and port (6379 unless it was "
                    "started with another {port}), and that no firewall stands between.",
                    address=address, reason=error.strerror or error),
                hint=say("Or run the trials here with {engine:local}.")) from None
        try:
            self._ray.init(address=address, logging_level="ERROR", log_to_driver=False)
        except (ConnectionError, RuntimeError) as error:
            raise ClusterError(f"Ray at {address} answered, but the lab could not join it: {error}",
                               hint="Check that the cluster runs Ray 2.60 (as here) and, if it asks for a token, "
                               "that RAY_AUTH_MODE=token and the cluster's token are set here.") from None

    def check_text(self, text: str, what: str) -> None:
        tokens = self._ray.get(_task(self._ray, _count_tokens, "mergesmith-lab-tokens").remote(self._config, text))
        check_token_count(tokens, what, self._window)

    def score_each(self, requests: list[Request], material: Material) -> Iterator[tuple[int, TrialScore]]:
        ray = self._ray
        material_ref = ray.put(material)
        pending = {_task(ray, _score, f"mergesmith-lab-trial-{index}").remote(self._config, document, material_ref): index
                   for index, document in requests}
        try:
            while pending:
                self._progress.check_cancelled()
                ready, _ = ray.wait(list(pending), num_returns=1, timeout=0.5)
                for ref in ready:
                    index = pending.pop(ref)
                    yield index, self._result(ref, index)
        finally:
            for ref in pending:
                ray.cancel(ref, force=True)

    def _result(self, ref: Any, index: int) -> TrialScore:
        """A finished task's score; a worker lost after Ray's retries makes a failed trial. Raises the error of a
        task that failed in the lab's own code (a model a worker cannot reach, say) as it was raised there."""
        exceptions = self._ray.exceptions
        try:
            return self._ray.get(ref)
        except exceptions.RayTaskError as error:
            cause = getattr(error, "cause", None)
            if isinstance(cause, MergesmithError):
                raise cause from None
            raise ClusterError(f"Trial {index} failed on the cluster: {cause or error}",
                               hint="Check that every worker has Mergesmith and the models' paths.") from None
        except (exceptions.WorkerCrashedError, exceptions.NodeDiedError, exceptions.ObjectLostError,
                exceptions.OwnerDiedError) as error:
            return TrialScore(None, 0.0, f"Ray lost the worker running this trial {TASK_RETRIES + 1} times "
                              f"({type(error).__name__}); a worker may be running out of memory.")

    def close(self) -> None:  # noqa: B027 - an engine that holds nothing has nothing to release
        started = _ray_processes_started_here(self._folder) if self._folder is not None else []
        try:
            self._ray.shutdown()  # a cluster joined by address is only left; one started here is stopped
            _wait_for_the_end(started)
        finally:
            self._set_environment({})
            if self._folder is not None:
                shutil.rmtree(self._folder, ignore_errors=True)
                self._folder = None

    def _set_environment(self, values: dict[str, str]) -> None:
        """Set `values` in this process's environment (Ray reads them there), remembering what they were; with
        none, put back what was there."""
        if values:
            for name, value in values.items():
                self._environment[name] = os.environ.get(name)
                os.environ[name] = value
            return
        for name, value in self._environment.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        self._environment = {}


def _pythonpath() -> str:
    existing = os.environ.get("PYTHONPATH")
    return _SOURCE_ROOT + (os.pathsep + existing if existing else "")


def _task(ray: Any, function: Any, name: str) -> Any:
    return ray.remote(function).options(name=name, max_retries=TASK_RETRIES)


# --- on the workers --------------------------------------------------------------------------------------------

# One evaluator per worker process and search (a worker runs many trials of one search: the model is built once).
_EVALUATORS: dict[str, Evaluator] = {}


def _worker_evaluator(config: dict[str, Any]) -> Evaluator:
    key = json.dumps(config, sort_keys=True, default=str)
    if key not in _EVALUATORS:
        for evaluator in _EVALUATORS.values():
            evaluator.close()
        _EVALUATORS.clear()
        _EVALUATORS[key] = Evaluator(config["document"], config["device"], config["window"], config["seed"])
    return _EVALUATORS[key]


def _score(config: dict[str, Any], document: dict[str, Any], material: Material) -> TrialScore:
    return _worker_evaluator(config).score(document, material)


def _count_tokens(config: dict[str, Any], text: str) -> int:
    return _worker_evaluator(config).token_count(text)


def _quiet(progress: Progress) -> Progress:
    """The trials' own stages (merging, perplexity) stay out of the search's progress, which counts trials; a
    cancel still reaches them."""
    return Progress(cancel=progress.cancel_token)


# How long Ray's own processes get to end after `ray.shutdown()` before they are killed.
_RAY_EXIT_SECONDS = 15.0


def _ray_processes_started_here(folder: str) -> list[psutil.Process]:
    """The processes of the Ray this process started in `folder`: its children running Ray (raylet, GCS
    server, workers) or naming the folder. Never raises."""
    found = []
    for process in psutil.Process().children(recursive=True):
        try:
            words = " ".join([process.name(), *process.cmdline()])
        except psutil.Error:
            continue
        if folder in words or "raylet" in words or "gcs_server" in words or words.startswith("ray::"):
            found.append(process)
    return found


def _wait_for_the_end(processes: list[psutil.Process]) -> None:
    """Wait until `processes` have ended and collect their exit (a finished child stays listed until its parent
    does); kill those still there after `_RAY_EXIT_SECONDS` (one was seen still listed after a search on a busy
    machine). Never raises."""
    _, alive = psutil.wait_procs(processes, timeout=_RAY_EXIT_SECONDS)
    for process in alive:
        with contextlib.suppress(psutil.Error):
            process.kill()
    psutil.wait_procs(alive, timeout=5.0)
