"""The errors Mergesmith raises on purpose.

Every class here carries a message written for the user (what happened, naming the model, tensor or setting),
where there is one a hint (what to do), and where it concerns one place the `key` of that place: a recipe key path
such as ("models", 1, "parameters", "weight") or a job setting's name such as ("rank",), so the window can show
the message next to the field it concerns. `guiapp.system.explain` turns these, and foreign exceptions, into an
`Explanation` for the window and the CLI. Nothing here imports torch.

Like huggingface_hub's errors, each class also inherits the standard exception that fits what failed, so callers
can catch by meaning: recipe and settings problems and unreadable files are `ValueError`s (bad values, bad
content); Hub problems are `OSError`s (`ConnectionError` when the network failed, `FileNotFoundError` when the
model or version does not exist, `PermissionError` when access is refused). Checkpoint errors are deliberately
not `OSError`s: code that catches `OSError` around reading a file wraps the operating system's failures and must
not re-wrap Mergesmith's own diagnosis of the file's content.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

KeyPath = tuple[str | int, ...]


@dataclass(frozen=True)
class Remedy:
    """A change of one job setting that fixes a problem: `setting` is the key the job's spec uses ("device",
    "output", "compute_dtype"; for a merge also its recipe's "dtype", "out_dtype", "tokenizer_source"), `value`
    its new value, `label` the words that complete "Retry …" on the window's button ("on the CPU").

    The CLI shows it as the flag of the command that ran and the window as a button, both from one table
    (`guiapp.facts.wording.SETTINGS`, offered by `guiapp.jobs.remedies`).
    """

    setting: str
    value: Any
    label: str

    @property
    def changes(self) -> dict[str, Any]:
        """The change as a job's settings take it: {setting: value}."""
        return {self.setting: self.value}


# The most common remedy: run the job on the CPU (every machine has one, and it computes every dtype).
ON_CPU = Remedy("device", "cpu", "on the CPU")
# A merge of models whose vocabularies differ follows its base model's tokenizer.
BASE_TOKENIZER = Remedy("tokenizer_source", "base", "with the base model's tokenizer")


def key_path(key: str | KeyPath | None) -> KeyPath:
    """`key` as a tuple: "rank" → ("rank",), "models[1].parameters" → ("models", 1, "parameters"), None → ()."""
    if key is None:
        return ()
    if isinstance(key, tuple):
        return key
    parts: list[str | int] = []
    for part in key.replace("[", ".").replace("]", "").split("."):
        if part:
            parts.append(int(part) if part.isdigit() else part)
    return tuple(parts)


class MergesmithError(Exception):
    """Base class. `str(error)` is the user-facing message; `hint` says what to do about it.

    `why` says why it is a problem when that is not obvious from the message (the class's docstring stands in
    otherwise). `remedy` optionally holds the setting change that fixes the problem (a `Remedy`, e.g. the device
    "cpu"); the window offers it as a Retry button, the CLI as the flag to add. `key` is the recipe key path or setting name the
    problem concerns (given as a tuple or as text like "models[1].parameters"; always stored as a tuple, empty
    when the problem concerns no one place).
    """

    title = "The job could not finish"

    def __init__(
        self,
        message: str,
        *,
        hint: str | None = None,
        remedy: Remedy | None = None,
        why: str | None = None,
        key: str | KeyPath | None = None,
    ):
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.remedy = remedy
        self.why = why
        self.key = key_path(key)


class RecipeError(MergesmithError, ValueError):
    """The recipe is invalid: an unknown method, a missing or out-of-range parameter, or YAML that cannot be read.

    (The first paragraph of an error class's docstring is the "Why" users read when the error gives none; `key`
    names the recipe key.)
    """

    title = "The recipe has a problem"


class SettingsError(MergesmithError, ValueError):
    """A job setting or option is invalid (a rank, solver, scale, shard size, sort order…).

    `key` names the setting.
    """

    title = "A setting has a problem"


class CheckpointError(MergesmithError, ValueError):
    """A model file cannot be read: truncated, corrupt, not a checkpoint at all, or missing."""

    title = "A model file cannot be read"


class ModelConfigError(CheckpointError):
    """A model's configuration file (config.json) holds a value of the wrong kind, such as text where a number
    belongs or a negative size: the file is damaged, or was edited or written by a tool that does not follow the
    transformers format."""

    title = "A model's configuration has a problem"


class UnsafeCheckpointError(CheckpointError):
    """A pickle checkpoint holds more than tensors (code that would run if it were unpickled)."""

    title = "A model file contains code"


class QuantizedCheckpointError(CheckpointError):
    """A quantized model's tensors disagree with its quantization settings: a scale, zero point or packed part is
    missing, or its shape does not fit the weight it belongs to. Found when the model is opened, before any output."""

    title = "A quantized model's files do not fit together"


class UnknownQuantizationError(CheckpointError):
    """A model is quantized with a method (named in its config.json) that Mergesmith has no dequantizer for."""

    title = "This model's quantization cannot be read yet"


class IncompatibleModelsError(MergesmithError):
    """The models cannot be combined: different shapes, vocabularies, architectures or missing tensors."""

    title = "These models cannot be combined"


class OutputError(MergesmithError):
    """The output folder cannot be used: it exists, is not writable, or is inside an input.

    `replace_with` (overwrite: True) is the setting change that replaces the existing folder: offered apart from
    `remedy` (a new name), as an explicit choice, because it deletes what is there.
    """

    title = "The output folder cannot be used"

    def __init__(self, message: str, *, replace_with: Remedy | None = None, **details: Any):
        super().__init__(message, **details)
        self.replace_with = replace_with


class InsufficientResourcesError(MergesmithError):
    """Not enough disk space or memory for the job, found before it starts or while it runs."""

    title = "Not enough space or memory"


class NonFiniteResultError(MergesmithError):
    """A computed tensor contains NaN or infinity; the job stops and writes nothing finished."""

    title = "The result contains NaN or infinity"


class DeviceError(MergesmithError):
    """The chosen device or dtype cannot be used on this machine with this torch build."""

    title = "The chosen device cannot be used"


class JobCancelled(MergesmithError):
    """The user cancelled the job; nothing was left behind."""

    title = "Cancelled"

    def __init__(self, message: str = "The job was cancelled. Nothing was written."):
        super().__init__(message)


class HubError(MergesmithError, OSError):
    """Base of the errors that come from talking to the Hugging Face Hub."""

    title = "The Hugging Face Hub could not be reached"


class GatedModelError(HubError, PermissionError):
    """The model's licence must be accepted on its Hub page (and a token given) before its files can be read."""

    title = "This model needs your permission first"


class ModelNotFoundError(HubError, FileNotFoundError):
    """No model (or file) by that name: a typo, a private repo without a token, or a local folder that is gone."""

    title = "The model was not found"


class RevisionNotFoundError(HubError, FileNotFoundError):
    """The model exists but the branch, tag or commit written after the @ in its name does not."""

    title = "The model version was not found"


class OfflineError(HubError, ConnectionError):
    """Something needs the Hub while Mergesmith is offline (or the network is down) and nothing local can stand in."""

    title = "Offline"


class HubUnreachableError(OfflineError):
    """The Hub's address cannot be reached: no network, a proxy or firewall in the way, or the Hub is down.
    Switching to offline mode keeps the models already downloaded and local folders usable."""

    title = "Can't reach the Hugging Face Hub"


class RateLimitedError(HubError, ConnectionError):
    """The Hub refused more requests for now (HTTP 429)."""

    title = "The Hub asked us to slow down"


class ConnectionLostError(HubError, ConnectionError):
    """The connection to the Hub broke and could not be resumed."""

    title = "The connection to the Hub was lost"


class InvalidTokenError(HubError, PermissionError):
    """The Hub did not accept the access token."""

    title = "The access token was not accepted"


class HubResponseError(HubError):
    """The Hub (or the mirror Mergesmith is set to use) sent an answer Mergesmith will not use: a file or version name
    that would point outside the cache, an answer too large once decompressed, or fields of the wrong kind."""

    title = "The Hub sent an answer Mergesmith cannot use"


class UnsupportedModelError(MergesmithError):
    """The model cannot be run here: transformers does not know its architecture, or it needs code from its repo."""

    title = "This model cannot be run here"


class UploadFailedError(HubError):
    """The Hub answered an upload with an error (a server error, a refusal) after files were sent."""

    title = "The upload did not finish"


class UploadRefusedError(HubError, PermissionError):
    """An upload cannot start: not signed in, a token that cannot write, or a repo name that cannot be used."""

    title = "The model cannot be published"


class ClusterError(MergesmithError):
    """The merge lab cannot use the Ray cluster it was pointed at: nothing answers there, Ray is not installed, or
    the cluster lost the work it was given."""

    title = "The Ray cluster cannot be used"
