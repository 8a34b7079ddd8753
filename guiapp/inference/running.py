"""Running models to try them: generation with streamed text, perplexity in windows, embedding similarity.

Models load through transformers, a `BASE+ADAPTER` reference through PEFT. Nothing that comes with a model runs as
code: a model that ships Python code (auto_map, .py files) is refused before loading, every transformers entry
point gets `trust_remote_code=False` (so transformers never asks the user, whose "y" would run it), and the chat
template, a program too, renders in a sandboxed child process bounded in time and memory
(guiapp/merging/template_child.py). A prompt longer than the model's context is cut (or refused) before the
model sees it, and a tokenizer that fails, even with a native panic, is named as the file that cannot be used.
Everything a forward pass touches is in ONE dtype: the model, the adapter's weights (PEFT keeps them in float32
by default, which is how a bf16 model with an adapter ends in "expected mat1 and mat2 to have the same dtype")
and the hidden states. The caller picks that dtype from the probe (`guiapp.system.capabilities.inference_option`),
so a float16 model on a CPU that computes float16 poorly runs in float32 instead of failing with
`"addmm_impl_cpu_" not implemented for 'Half'`.
"""

from __future__ import annotations

import copy
import json
import math
import os
import re
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from guiapp.checkpoints.quantized.loading import dequantized_model
from guiapp.compute.devices import resolve_device
from guiapp.errors import CheckpointError, MergesmithError, Remedy, SettingsError, UnsupportedModelError
from guiapp.facts.dtypes import dtype_name
from guiapp.hub.merge_files import TOKENIZER_FILES
from guiapp.hub.model_config import read_model_config
from guiapp.hub.references import ModelRef
from guiapp.inference.sampling import DEFAULT_TEMPERATURE, DEFAULT_TOP_P, LONG_PROMPT_CHOICES, REFUSE, TRUNCATE
from guiapp.inference.template_process import render_in_child
from guiapp.inference.text_windows import PIECE_CHARACTERS, token_pieces, windows
from guiapp.progress import Progress
from guiapp.system.bounded import JSON_BYTES, TOKENIZER_JSON_BYTES, load_json_limited, open_regular_file
from guiapp.system.units import format_bytes, plural

# PEFT asks transformers a deprecated question when an adapter is attached; the warning is for PEFT's developers,
# not for someone trying a model, and it would land in the terminal between the progress lines.
warnings.filterwarnings("ignore", message=r"`is_gradient_checkpointing` is deprecated", category=FutureWarning)

CAUSAL, ENCODER = "causal", "encoder"
# Model types whose checkpoints are encoders even when config.json names no architecture.
ENCODER_MODEL_TYPES = frozenset({
    "bert", "roberta", "xlm-roberta", "distilbert", "deberta", "deberta-v2", "electra", "mpnet", "albert",
    "camembert", "modernbert", "nomic_bert",
})
DEFAULT_WINDOW_TOKENS = 512
# Larger text files are refused: perplexity on more than this says nothing a sample would not.
MAX_TEXT_BYTES = 32 * 1024 * 1024
TextListener = Callable[[str], None]
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
# The files transformers reads to build a tokenizer and generation settings; each must be a regular file.
READ_BY_TRANSFORMERS = (*sorted(TOKENIZER_FILES), "generation_config.json")
# Files whose "auto_map" names classes defined by Python code in the model's folder or repository.
AUTO_MAP_FILES = ("config.json", "tokenizer_config.json", "adapter_config.json", "processor_config.json",
                  "preprocessor_config.json")
# A chat template renders in a child process stopped after this long, with this much memory, and may write
# this much beyond the prompt; a template that needs more is not a template.
TEMPLATE_SECONDS = 20.0
TEMPLATE_START_SECONDS = 300.0  # the child's imports, before the template runs: only a broken install takes this
TEMPLATE_MEMORY_BYTES = 1 << 30
TEMPLATE_EXTRA_CHARACTERS = 1_000_000
# What a model's generation_config.json may ask for that Try, which streams one sequence, cannot do: (setting,
# whether the value asks for it, the value that turns it off, what it is called). DoLa and contrastive search
# moved out of transformers into code on the Hub, which Mergesmith never runs.
UNSTREAMABLE_SETTINGS: tuple[tuple[str, Callable[[Any], bool], Any, str], ...] = (
    ("num_beams", lambda value: value is not None and value > 1, 1, "beam search"),
    ("num_beam_groups", lambda value: value is not None and value > 1, 1, "group beam search"),
    ("constraints", lambda value: value is not None, None, "constrained beam search"),
    ("force_words_ids", lambda value: value is not None, None, "constrained beam search"),
    ("num_return_sequences", lambda value: value is not None and value > 1, 1, "several answers at once"),
    ("dola_layers", lambda value: value is not None, None,
     "DoLa decoding (moved out of transformers into code on the Hub, which Mergesmith never runs)"),
    ("penalty_alpha", lambda value: value is not None and value > 0, None,
     "contrastive search (moved out of transformers into code on the Hub, which Mergesmith never runs)"),
    ("prompt_lookup_num_tokens", lambda value: value is not None, None, "prompt lookup decoding"),
    ("assistant_early_exit", lambda value: value is not None, None, "self-speculative decoding"),
    ("use_mtp", lambda value: bool(value), None, "multi-token prediction"),
    ("cache_implementation", lambda value: value == "paged", None, "continuous batching"),
)


@dataclass(frozen=True)
class ModelSource:
    """Where one model to try lives: its folder and, for `BASE+ADAPTER`, the adapter's folder."""

    ref: ModelRef
    folder: Path
    adapter_folder: Path | None = None

    @property
    def label(self) -> str:
        return str(self.ref)


@dataclass
class LoadedModel:
    """A model ready to run: `kind` is "causal" (generates text) or "encoder" (embeds it)."""

    source: ModelSource
    model: Any
    tokenizer: Any
    kind: str
    dtype: torch.dtype
    device: torch.device
    tokenizer_folder: Path | None = None
    set_aside: tuple[str, ...] = ()  # generation modes of generation_config.json that Try cannot stream

    @property
    def label(self) -> str:
        return self.source.label

    @property
    def tokenizer_file(self) -> Path | None:
        return _tokenizer_file(self.tokenizer_folder) if self.tokenizer_folder is not None else None

    @property
    def max_positions(self) -> int | None:
        config = self.model.config
        return getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)


@dataclass(frozen=True)
class GenerationSettings:
    """Greedy (`sample` False) or sampled with `seed`, `temperature` and `top_p`; at most `max_new_tokens`."""

    max_new_tokens: int = 128
    sample: bool = False
    seed: int = 0
    temperature: float = DEFAULT_TEMPERATURE
    top_p: float = DEFAULT_TOP_P
    long_prompt: str = TRUNCATE

    def __post_init__(self) -> None:
        """Raises SettingsError (keyed by the setting) for a temperature that is not above 0, a top-p outside
        (0, 1] (transformers would refuse them only once a model is loaded) or an unknown `long_prompt`."""
        if self.long_prompt not in LONG_PROMPT_CHOICES:
            raise SettingsError(f"A long prompt is either cut or refused, not \"{self.long_prompt}\".",
                                hint=f"Choose one of: {', '.join(LONG_PROMPT_CHOICES)}.", key="long_prompt")
        if self.max_new_tokens < 1:
            raise SettingsError(f"The number of new tokens must be at least 1 (got {self.max_new_tokens}).",
                                hint="Ask for 64 or 128 new tokens to see how a model continues.",
                                key="max_new_tokens")
        if not (math.isfinite(self.temperature) and self.temperature > 0):
            raise SettingsError(f"The temperature must be a number above 0 (got {self.temperature}).",
                                hint=f"Use {DEFAULT_TEMPERATURE}, or Greedy for the likeliest tokens.",
                                key="temperature")
        if not (0 < self.top_p <= 1):
            raise SettingsError(f"Top-p must be above 0 and at most 1 (got {self.top_p}).",
                                hint=f"Use {DEFAULT_TOP_P}; 1 draws from every token.", key="top_p")

    def generate_kwargs(self) -> dict[str, Any]:
        """The `generate()` arguments these settings mean (the same ones a test passes to transformers)."""
        kwargs: dict[str, Any] = {"max_new_tokens": self.max_new_tokens, "do_sample": self.sample}
        if self.sample:
            kwargs.update(temperature=self.temperature, top_p=self.top_p, top_k=0)
        return kwargs


@dataclass(frozen=True)
class Generation:
    """What one model wrote: the text and the new token ids (without the prompt)."""

    label: str
    text: str
    token_ids: list[int]


@dataclass(frozen=True)
class PerplexityResult:
    """exp(mean negative log-likelihood) over `tokens` predicted tokens, computed in `windows` windows."""

    label: str
    perplexity: float
    tokens: int
    windows: int


def resolve_sources(references: Sequence[str], progress: Progress | None = None) -> list[ModelSource]:
    """The folders behind each model argument (a folder, a Hub id, or either of these `+ADAPTER`), in order. The
    Hub models and adapters among them are downloaded into the cache as needed, all under one Downloading bar.

    Raises RecipeError for an empty reference (ModelRef.parse), CheckpointError for a missing folder, HubError
    subclasses when a Hub model cannot be had.
    """
    from guiapp.hub.resolve import resolve_models  # noqa: PLC0415 - the hub layer loads only when asked

    refs = [ModelRef.parse(reference) for reference in references]
    adapters = [ref.adapter for ref in refs if ref.adapter]
    folders = resolve_models([ref.base for ref in refs] + adapters, progress=progress)
    adapter_folders = iter(folders[len(refs):])
    return [ModelSource(ref, folder, next(adapter_folders) if ref.adapter else None)
            for ref, folder in zip(refs, folders, strict=False)]


def model_kind(config: dict[str, Any]) -> str:
    """"causal" for a text generator (an architecture ending in ForCausalLM or LMHeadModel), "encoder" for
    BERT-like models, from config.json alone."""
    architectures = config.get("architectures") or []
    if any(name.endswith(("ForCausalLM", "LMHeadModel", "ForConditionalGeneration")) for name in architectures):
        return CAUSAL
    if architectures or config.get("model_type") in ENCODER_MODEL_TYPES:
        return ENCODER
    return CAUSAL


def load_model(source: ModelSource, dtype: torch.dtype, device: str, progress: Progress | None = None) -> LoadedModel:
    """Load `source` with transformers (and its adapter with PEFT), everything in `dtype` on `device`.

    Raises UnsupportedModelError when the model or adapter comes with Python code (before anything of it is
    loaded) or transformers does not know the architecture, CheckpointError when the folder has no config or
    tokenizer, or one of the files transformers reads is not a regular file or the tokenizer cannot be built,
    DeviceError for a missing device.
    """
    import transformers  # noqa: PLC0415 - transformers costs seconds to import; only jobs that run models need it

    transformers.utils.logging.disable_progress_bar()  # progress goes through `progress`, not tqdm on stderr
    progress = progress or Progress()
    target = resolve_device(device)
    for folder in (source.folder, source.adapter_folder):
        if folder is not None:
            refuse_model_code(folder, source.label)
            _check_regular_files(folder)
    config = _read_config(source.folder)
    kind = model_kind(config)
    auto = transformers.AutoModelForCausalLM if kind == CAUSAL else transformers.AutoModel
    try:
        model = dequantized_model(auto, source.folder, dtype)
        if model is None:
            model = auto.from_pretrained(source.folder, dtype=dtype, trust_remote_code=False)
    except (ValueError, KeyError, ModuleNotFoundError) as error:
        raise _unsupported(source, config, error) from None
    if source.adapter_folder is not None:
        model = _attach_adapter(model, source)
    model = _in_dtype(model, target, dtype).eval()
    _check_one_dtype(model, dtype, source)
    tokenizer, tokenizer_folder = load_tokenizer(source)
    set_aside = set_aside_unstreamable(model) if kind == CAUSAL else ()
    # Said once loaded: the stage that was running said "Loading" already.
    progress.log(f"Loaded {source.label} ({kind}, {dtype_name(dtype)} on {target}).")
    return LoadedModel(source, model, tokenizer, kind, dtype, target, tokenizer_folder, set_aside)


def load_architecture(source: ModelSource, dtype: torch.dtype, device: str) -> LoadedModel:
    """The causal model that `source`'s config.json describes, with its tokenizer, as `load_model` would give it
    but with freshly initialised weights in place of stored ones (for weights that come from elsewhere: the lab
    merges them into it in memory). Raises what `load_model` raises, and UnsupportedModelError for an encoder.
    """
    import transformers  # noqa: PLC0415 - transformers costs seconds to import; only jobs that run models need it

    refuse_model_code(source.folder, source.label)
    _check_regular_files(source.folder)
    config = _read_config(source.folder)
    if model_kind(config) != CAUSAL:
        raise UnsupportedModelError(f"{source.label} is an encoder (like BERT): it has no perplexity to compare.",
                                    hint="Merge lab searches need models that generate text.")
    try:
        settings = transformers.AutoConfig.from_pretrained(source.folder, trust_remote_code=False)
        model = transformers.AutoModelForCausalLM.from_config(settings, dtype=dtype, trust_remote_code=False)
    except (ValueError, KeyError, ModuleNotFoundError) as error:
        raise _unsupported(source, config, error) from None
    model = _in_dtype(model, resolve_device(device), dtype).eval()
    tokenizer, tokenizer_folder = load_tokenizer(source)
    return LoadedModel(source, model, tokenizer, CAUSAL, dtype, resolve_device(device), tokenizer_folder)


def refuse_model_code(folder: Path, label: str) -> None:
    """Raise UnsupportedModelError, saying where, when `folder` holds code meant to run with the model: an
    "auto_map" (classes defined by Python code) in its config, tokenizer or adapter settings, or .py files.

    Raises CheckpointError when one of those settings files cannot be read (see `load_json_limited`).
    """
    reasons = []
    for name in AUTO_MAP_FILES:
        path = folder / name
        if os.path.lexists(path):
            document = load_json_limited(path, JSON_BYTES, CheckpointError, what="model settings file",
                                         hint="Download or copy the model again.")
            if isinstance(document, dict) and document.get("auto_map"):
                reasons.append(f"{name} names classes defined by its own code (auto_map)")
    code_files = sorted(str(path.relative_to(folder)) for path in folder.rglob("*.py"))
    if code_files:
        shown = ", ".join(code_files[:4]) + (f" and {len(code_files) - 4} more" if len(code_files) > 4 else "")
        reasons.append(f"its folder holds Python code ({shown})")
    if reasons:
        raise UnsupportedModelError(
            f"{label} comes with its own Python code: {'; '.join(reasons)}. Mergesmith never runs code that comes "
            "with a model, so it did not load it.",
            why="Code in a model's folder runs with all your rights on this computer; a model that needs it "
            "cannot be tried without trusting its authors with your machine.",
            hint="Look for a version of the model that uses an architecture transformers knows (its model card "
            "often names one), or try it in a program you trust to run its authors' code.",
        )


def _check_regular_files(folder: Path) -> None:
    """Raise CheckpointError naming the first of `READ_BY_TRANSFORMERS` in `folder` that is not a regular file (a pipe
    or a device such as /dev/zero, which transformers would wait on or read without end) or is too large."""
    for name in READ_BY_TRANSFORMERS:
        path = folder / name
        if not os.path.lexists(path):
            continue
        with open_regular_file(path, CheckpointError, what="tokenizer or generation settings file") as stream:
            size = os.fstat(stream.fileno()).st_size
        if size > TOKENIZER_JSON_BYTES:
            raise CheckpointError(
                f"{path} is {format_bytes(size)}, larger than the {format_bytes(TOKENIZER_JSON_BYTES)} a tokenizer "
                "or settings file can be.", hint="Download or copy the model again.")


def _read_config(folder: Path) -> dict[str, Any]:
    path = folder / "config.json"
    if not path.is_file():
        raise CheckpointError(f"{folder} has no config.json, so transformers cannot tell what model it is.",
                              hint="Pick the folder that holds config.json and the weights.")
    return read_model_config(path)


def _unsupported(source: ModelSource, config: dict[str, Any], error: Exception) -> UnsupportedModelError:
    architecture = ", ".join(config.get("architectures") or []) or config.get("model_type") or "unnamed"
    if isinstance(error, ModuleNotFoundError) and "transformers.models." in str(error):
        # The app download carries the model code of the common families only (packaging/mergesmith.spec).
        return UnsupportedModelError(
            f"{source.label} ({architecture}) cannot be tried in this copy of Mergesmith: the app download carries "
            "the code of the most used model families (Llama, Mistral, Qwen, Gemma, Phi, GPT-2, BERT and a few "
            "more), not of this one.",
            hint="Merging and extracting work for every architecture; to try this one, install Mergesmith with "
            "Python (see the install guide), which brings all of transformers.",
        )
    else:
        why = "the installed transformers does not know this architecture"
    return UnsupportedModelError(
        f"{source.label} ({architecture}) cannot be loaded: {why}.",
        hint="Try a model of an architecture transformers supports (Llama, Mistral, Qwen, Gemma, Phi, BERT, …), "
        "or update transformers if the architecture is newer than it.",
        why=str(error).splitlines()[0] if str(error) else None,
    )


def _attach_adapter(model: Any, source: ModelSource) -> Any:
    import peft  # noqa: PLC0415 - peft and transformers take seconds to load; only Try jobs need them

    from guiapp.lora.peft_config import resolved_lora_config  # noqa: PLC0415 - with peft above

    config = resolved_lora_config(source.adapter_folder)  # PEFT gets no pattern from the file to run unbounded
    try:
        return peft.PeftModel.from_pretrained(model, source.adapter_folder, is_trainable=False, config=config)
    except (ValueError, KeyError, RuntimeError) as error:
        raise CheckpointError(
            f"The adapter {source.adapter_folder} does not fit {source.ref.base}: {str(error).splitlines()[0]}",
            hint="Use the base model the adapter was trained on (adapter_config.json names it).",
        ) from None


def _in_dtype(model: Any, device: torch.device, dtype: torch.dtype) -> Any:
    """`model` on `device` with its weights (an adapter's too) in `dtype`, and its float32 buffers kept float32 as
    transformers loads them: rotary frequencies rounded to bfloat16 moved every position's angle, so a bf16 run
    differed from transformers' own from the second layer on."""
    kept = {name: buffer for name, buffer in model.named_buffers() if buffer.dtype == torch.float32}
    model = model.to(device=device, dtype=dtype)
    for name, buffer in kept.items():
        owner, _, leaf = name.rpartition(".")
        setattr(model.get_submodule(owner), leaf, buffer.to(device))
    return model


def _check_one_dtype(model: Any, dtype: torch.dtype, source: ModelSource) -> None:
    """Every floating parameter in `dtype`: the guarantee this module exists for. (Buffers such as rotary
    frequencies stay float32 by design; the layers that own them cast.)"""
    strays = {str(p.dtype) for p in model.parameters() if p.is_floating_point() and p.dtype != dtype}
    if strays:
        raise CheckpointError(f"{source.label} keeps weights in {', '.join(sorted(strays))} after loading in {dtype}.",
                              hint="Report this model to Mergesmith: it holds weights that cannot be converted.")


def load_tokenizer(source: ModelSource) -> tuple[Any, Path]:
    """The tokenizer of the model's folder (else the adapter's) and that folder.

    Raises CheckpointError when neither has tokenizer files or the tokenizer cannot be built from them.
    """
    import transformers  # noqa: PLC0415 - seconds to load; only Try jobs need it

    for folder in (source.folder, source.adapter_folder):
        if folder is not None and any((folder / name).is_file() for name in ("tokenizer.json", "tokenizer_config.json",
                                                                                "tokenizer.model", "vocab.txt")):
            with _tokenizer_in_use(source.label, _tokenizer_file(folder), "loading it"):
                return transformers.AutoTokenizer.from_pretrained(folder, trust_remote_code=False), folder
    raise CheckpointError(
        f"{source.label} has no tokenizer (no tokenizer.json or tokenizer_config.json in its folder).",
        why="Trying a model turns the prompt into tokens with the model's own tokenizer, and this folder holds "
        "only weights and a configuration.",
        hint="Copy the tokenizer files of the model it came from into the folder; merges made by Mergesmith "
        "copy them from the base model.",
    )


def _tokenizer_file(folder: Path) -> Path:
    """The file a tokenizer in `folder` comes from (tokenizer.json, else the folder), for messages about it."""
    file = folder / "tokenizer.json"
    return file if file.is_file() else folder


@contextmanager
def _tokenizer_in_use(label: str, file: Path | None, doing: str) -> Iterator[None]:
    """Turn any failure of the tokenizer while `doing` into a CheckpointError naming its `file`: an exception,
    or a panic of its native (Rust) code, which is a BaseException (pyo3's PanicException). Mergesmith's own
    errors (a cancelled job), KeyboardInterrupt and SystemExit pass through."""
    try:
        yield
    except MergesmithError:
        raise
    except BaseException as error:
        if not (isinstance(error, Exception) or _is_native_panic(error)):
            raise
        detail = (str(error).strip().splitlines() or [type(error).__name__])[0][:300]
        raise CheckpointError(
            f"The tokenizer of {label} ({file}) cannot be used: {doing} failed with \"{detail}\".",
            why="The tokenizer's files describe rules (a vocabulary, splitting patterns) that its library could "
            "not follow; a splitting pattern that backtracks without end makes the tokenizer give up.",
            hint="Copy the tokenizer files of the model this one came from (its base model) into the folder, or "
            "download the model again.",
        ) from None


def _is_native_panic(error: BaseException) -> bool:
    """Whether `error` is a panic of a library's Rust code (pyo3's PanicException: the tokenizers library), which
    derives from BaseException, so `except Exception` misses it."""
    return type(error).__name__ == "PanicException"


def prompt_ids(loaded: LoadedModel, prompt: str, progress: Progress | None = None) -> torch.Tensor:
    """The prompt as a 1 × n tensor of token ids, through the tokenizer's chat template when it has one.

    Raises CheckpointError when the chat template or the tokenizer fails (see `render_chat_template`,
    `_tokenizer_in_use`), SettingsError for an empty prompt that the tokenizer cannot start from.
    """
    tokenizer = loaded.tokenizer
    with _tokenizer_in_use(loaded.label, loaded.tokenizer_file, "turning the prompt into tokens"):
        if _chat_template(tokenizer):
            text = render_chat_template(loaded, prompt, progress or Progress())
            encoded = tokenizer(text, add_special_tokens=False, return_tensors="pt")
        else:
            encoded = tokenizer(prompt, return_tensors="pt")
    ids = encoded["input_ids"]
    if ids.shape[-1] == 0:  # an empty prompt with a tokenizer that adds no start token: start from that token
        if tokenizer.bos_token_id is None:
            raise SettingsError("The prompt is empty and this model's tokenizer has no start token to begin from.",
                                hint="Type a few words for the model to continue.", key="prompt")
        ids = torch.tensor([[tokenizer.bos_token_id]])
    return ids.to(loaded.device)


def _chat_template(tokenizer: Any) -> str | None:
    """The tokenizer's chat template for a plain conversation (the "default" one of several), or None."""
    if not getattr(tokenizer, "chat_template", None):
        return None
    try:
        return tokenizer.get_chat_template()
    except ValueError:  # several named templates and none called "default"
        return None


def render_chat_template(loaded: LoadedModel, prompt: str, progress: Progress,
                         seconds: float = TEMPLATE_SECONDS) -> str:
    """The text of a one-message conversation holding `prompt`, as the model's chat template writes it, rendered
    by transformers in jinja2's sandbox in a child process (guiapp/merging/template_child.py, kept between renders
    by guiapp/inference/template_process.py) that is stopped after `seconds` and may use `TEMPLATE_MEMORY_BYTES`.

    Raises CheckpointError naming the template's problem (it reaches for Python internals, raises an error of its
    own, is not valid, builds too large a text, runs too long, or fails otherwise); JobCancelled when `progress`
    is cancelled while it renders.
    """
    tokenizer = loaded.tokenizer
    request = {"template": _chat_template(tokenizer), "messages": [{"role": "user", "content": prompt}],
               "variables": dict(tokenizer.special_tokens_map), "memory_bytes": TEMPLATE_MEMORY_BYTES,
               "max_characters": len(prompt) + TEMPLATE_EXTRA_CHARACTERS}
    answer = render_in_child(json.dumps(request).encode("ascii"), seconds, TEMPLATE_START_SECONDS, progress)
    if answer is None:
        raise _template_error(loaded, f"took longer than {seconds:g} seconds to write a one-message conversation, "
                              "so it was stopped", "A chat template only arranges a conversation's messages; "
                              "one that runs this long loops without end, by mistake or on purpose.")
    problem, message = answer.get("problem"), answer.get("message", "")
    if problem is None:
        return answer["text"]
    explained = {
        "internals": ("tries to reach Python internals, which the sandbox it runs in refused "
                      f"({message})", "A chat template arranges a conversation's messages; reaching beyond them is "
                      "an attempt to escape the sandbox and run code on this computer."),
        "raised": (f"refused the conversation in its own words: \"{message}\"", "Chat templates check the "
                   "conversations they are given; Try sends one user message, which this template does not accept."),
        "syntax": (f"is not a valid template ({message})", "The template's text cannot be read as a Jinja template."),
        "too_large": ("builds a text too large to be a prompt, so it was stopped"
                      + (f" ({message})" if message else ""), "A chat template adds a few words around each "
                      "message; one that builds more is broken, by mistake or on purpose."),
    }
    what, why = explained.get(problem, (f"failed: {message or 'its renderer stopped'}",
                                        "The template asks for something the renderer could not do."))
    raise _template_error(loaded, what, why)


def _template_error(loaded: LoadedModel, what: str, why: str) -> CheckpointError:
    return CheckpointError(
        f"The chat template of {loaded.label} {what}.", why=why,
        hint="Use a copy of the model with its original chat template, or remove \"chat_template\" from "
        "tokenizer_config.json (and any chat_template.jinja) to try the model on the prompt as written.",
    )


def fit_context(loaded: LoadedModel, ids: torch.Tensor, settings: GenerationSettings,
                progress: Progress) -> tuple[torch.Tensor, int]:
    """The prompt ids and number of new tokens, within the model's context (`LoadedModel.max_positions`).

    A prompt that leaves no room for new tokens (up to half the context) keeps only its last tokens, with a
    warning in the log, or is refused when `settings.long_prompt` is "refuse" (SettingsError keyed "prompt");
    the number of new tokens is cut to what the context has room for.
    """
    context = loaded.max_positions
    if not context:
        return ids, settings.max_new_tokens
    length = ids.shape[-1]
    keep = context - min(settings.max_new_tokens, context // 2)
    if length > keep:
        if settings.long_prompt == REFUSE:
            raise SettingsError(
                f"The prompt is {length:,} tokens long and {loaded.label} reads at most {context:,} tokens "
                f"(with room for the new ones, {keep:,} for the prompt).", key="prompt",
                hint="Shorten the prompt, or let Try keep its end (the default).",
                remedy=Remedy("long_prompt", TRUNCATE, f"with long prompt {TRUNCATE}"))
        progress.log(f"The prompt is {length:,} tokens long and {loaded.label} reads at most {context:,} tokens: "
                     f"only its last {keep:,} tokens are used.")
        ids, length = ids[:, -keep:], keep
    new_tokens = min(settings.max_new_tokens, context - length)
    if new_tokens < settings.max_new_tokens:
        progress.log(f"{loaded.label} reads at most {context:,} tokens: it writes at most {new_tokens:,} new "
                     "tokens after this prompt.")
    return ids, new_tokens


def set_aside_unstreamable(model: Any) -> tuple[str, ...]:
    """Turn off, in the loaded model's generation settings (read from its generation_config.json; the file is
    left as it is), every decoding mode Try cannot stream (`UNSTREAMABLE_SETTINGS`), and return what they were
    called. generate() fills each setting it is not given from these, so they are changed here, once, rather
    than per call. Settings that still ask for another mode, greedy or sampled, are replaced by the token ids
    alone."""
    from transformers import GenerationConfig  # noqa: PLC0415 - seconds to load; only Try jobs need it
    from transformers.generation.configuration_utils import GenerationMode  # noqa: PLC0415 - as above

    config = getattr(model, "generation_config", None)
    if config is None:
        return ()
    set_aside = []
    for name, asks, off, called in UNSTREAMABLE_SETTINGS:
        if asks(getattr(config, name, None)):
            setattr(config, name, off)
            set_aside.append(called)
    streamable = (GenerationMode.GREEDY_SEARCH, GenerationMode.SAMPLE)
    for sample in (False, True):
        trial = copy.deepcopy(config)
        trial.do_sample = sample
        mode = trial.get_generation_mode()
        if mode not in streamable:
            set_aside.append(str(mode.value).replace("_", " "))
            owner = model.get_base_model() if hasattr(model, "get_base_model") else model  # a PEFT model's base
            owner.generation_config = GenerationConfig(
                **{key: getattr(config, key) for key in ("bos_token_id", "eos_token_id", "pad_token_id")})
            break
    return tuple(dict.fromkeys(set_aside))


def generate(
    loaded: LoadedModel,
    prompt: str,
    settings: GenerationSettings,
    progress: Progress | None = None,
    on_text: TextListener | None = None,
) -> Generation:
    """Generate a continuation of `prompt`, calling `on_text` with each new piece of text as it is decoded.

    `progress` counts new tokens in a stage named after the model; cancelling it stops generation at the next
    token (JobCancelled). Raises UnsupportedModelError for an encoder, which does not generate text, and the
    errors of `prompt_ids` and `fit_context`.
    """

    if loaded.kind != CAUSAL:
        raise UnsupportedModelError(
            f"{loaded.label} is an encoder (like BERT): it turns text into vectors and does not write text.",
            hint="Compare encoders with the similarity of sentence pairs instead.")
    progress = progress or Progress()
    input_ids, new_tokens = fit_context(loaded, prompt_ids(loaded, prompt, progress), settings, progress)
    if loaded.set_aside:
        progress.log(f"{loaded.label}: its generation_config.json asks for {', '.join(loaded.set_aside)}, which "
                     "Try cannot stream; it writes one answer, token by token, without it.")
    works = token_works(loaded, input_ids.shape[-1], new_tokens)
    progress.start_stage(f"Generating: {loaded.source.ref.short_name}", total=new_tokens, work_total=sum(works))
    streamer = _StreamToListener(loaded, progress, on_text, works)
    tokenizer = loaded.tokenizer
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    if settings.sample:
        torch.manual_seed(settings.seed)
    with torch.inference_mode():
        output = loaded.model.generate(input_ids=input_ids, attention_mask=torch.ones_like(input_ids),
                                       pad_token_id=pad, streamer=streamer, trust_remote_code=False,
                                       **{**settings.generate_kwargs(), "max_new_tokens": new_tokens})
    new_ids = output[0, input_ids.shape[1]:].tolist()
    with _tokenizer_in_use(loaded.label, loaded.tokenizer_file, "turning tokens into text"):
        text = tokenizer.decode(new_ids, skip_special_tokens=True)
    return Generation(loaded.label, text, new_ids)


class _StreamToListener:
    """transformers' TextStreamer, but handing text to a listener and counting tokens (which checks cancel)."""

    def __init__(self, loaded: LoadedModel, progress: Progress, on_text: TextListener | None,
                 works: list[float]) -> None:
        import transformers  # noqa: PLC0415 - seconds to load; only Try jobs need it

        listener = on_text or (lambda text: None)

        class Streamer(transformers.TextStreamer):
            def on_finalized_text(self, text: str, stream_end: bool = False) -> None:
                if text:
                    listener(text)

        self._streamer = Streamer(loaded.tokenizer, skip_prompt=True, skip_special_tokens=True)
        self._loaded = loaded
        self._progress = progress
        self._works = works  # each new token's cost, in order
        self._prompt_seen = False
        self._tokens = 0

    def put(self, value: torch.Tensor) -> None:
        with _tokenizer_in_use(self._loaded.label, self._loaded.tokenizer_file, "turning tokens into text"):
            self._streamer.put(value)
        if self._prompt_seen:
            work = self._works[self._tokens] if self._tokens < len(self._works) else 0.0
            self._tokens += 1
            self._progress.step("token", work=work)
        self._prompt_seen = True

    def end(self) -> None:
        with _tokenizer_in_use(self._loaded.label, self._loaded.tokenizer_file, "turning tokens into text"):
            self._streamer.end()


# transformers' own work for each generated token (its loop, sampling, the cache's bookkeeping): about 3 ms, the
# time of reading 16M parameters (jobs/estimates.py's reference rates: 3 ms a token, 0.19 ns a parameter).
_STEP_PARAMETERS = 16_000_000


def token_works(loaded: LoadedModel, prompt_tokens: int, new_tokens: int) -> list[float]:
    """What each of `new_tokens` tokens generated after a prompt of `prompt_tokens` costs, in parameters read: the
    model's weights, run once a token, and transformers' step, the same for every token; and per token of context
    so far, each layer's cached keys and values (read, and copied as the cache grows) and the attention over them,
    so that later tokens of a long text cost more. Never raises (a configuration that does not say its layers
    counts only the weights)."""
    config = loaded.model.config
    layers = getattr(config, "num_hidden_layers", None) or getattr(config, "n_layer", None) or 0
    hidden = getattr(config, "hidden_size", None) or getattr(config, "n_embd", None) or 0
    heads = getattr(config, "num_attention_heads", None) or getattr(config, "n_head", None) or 1
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    head_dim = getattr(config, "head_dim", None) or hidden // max(1, heads)
    per_context = layers * (4 * kv_heads * head_dim + 2 * hidden)
    fixed = sum(p.numel() for p in loaded.model.parameters()) + _STEP_PARAMETERS
    return [float(fixed + per_context * (prompt_tokens + index)) for index in range(new_tokens)]


def perplexity(
    loaded: LoadedModel, text: str, window: int = DEFAULT_WINDOW_TOKENS, progress: Progress | None = None,
    piece_characters: int = PIECE_CHARACTERS,
) -> PerplexityResult:
    """Perplexity of `loaded` on `text`, in windows of at most `window` tokens (and the model's context).

    Consecutive windows share one token, so every token after the first is predicted exactly once, from the
    tokens before it in its window. The text is tokenized in pieces of at most `piece_characters` and scored as
    the windows come (`guiapp.inference.text_windows`), so memory stays bounded however long it is.
    Log-probabilities are summed in float32 whatever the model's dtype. Cancelling `progress` stops between
    windows. Raises SettingsError when the text has fewer than two tokens and UnsupportedModelError for an encoder.
    """
    if loaded.kind != CAUSAL:
        raise UnsupportedModelError(
            f"{loaded.label} is an encoder (like BERT): it does not predict the next word, so it has no perplexity.",
            hint="Compare encoders with the similarity of sentence pairs instead.")
    progress = progress or Progress()
    window = max(2, min(window, loaded.max_positions or window))
    progress.start_stage(f"Perplexity: {loaded.source.ref.short_name}", total=len(text))
    total_nll, predicted, count = 0.0, 0, 0
    read_so_far = [0, 0]  # characters and tokens of the pieces read
    counted = 0  # characters the bar has counted

    def read(pieces: Iterator[tuple[list[int], int]]) -> Iterator[list[int]]:
        while True:
            with _tokenizer_in_use(loaded.label, loaded.tokenizer_file, "turning the text into tokens"):
                piece = next(pieces, None)
            if piece is None:
                return
            ids, characters = piece
            read_so_far[0] += characters
            read_so_far[1] += len(ids)
            yield ids

    for ids in windows(read(token_pieces(loaded.tokenizer, text, piece_characters)), window):
        chunk = torch.tensor(ids, device=loaded.device)
        with torch.inference_mode():
            logits = loaded.model(input_ids=chunk[None]).logits[0, :-1].float()
        log_probs = torch.log_softmax(logits, dim=-1)
        total_nll -= log_probs.gather(1, chunk[1:, None]).sum().item()
        predicted += chunk.numel() - 1
        count += 1
        # The bar moves by window, by the characters its tokens stand for (a text of one piece read at once would
        # otherwise jump from 0 to 100 % as its last window begins, with no time left to show before).
        characters, tokens = read_so_far
        scored = max(counted, min(characters, round(characters * (predicted + 1) / max(1, tokens))))
        progress.step(f"window of {chunk.numel()} tokens", units=scored - counted)
        counted = scored
    if counted < len(text):
        progress.step("text read", units=len(text) - counted)
    if predicted == 0:
        raise SettingsError("The text is too short for perplexity: it needs at least two tokens.",
                            hint="Paste a few sentences or more.", key="text")
    return PerplexityResult(loaded.label, math.exp(total_nll / predicted), predicted, count)


def embedding(loaded: LoadedModel, sentence: str) -> torch.Tensor:
    """The mean of the last hidden states over the sentence's tokens, in float32."""
    with _tokenizer_in_use(loaded.label, loaded.tokenizer_file, "turning the text into tokens"):
        encoded = loaded.tokenizer(sentence, return_tensors="pt").to(loaded.device)
    with torch.inference_mode():
        states = loaded.model(**encoded).last_hidden_state[0].float()
    mask = encoded["attention_mask"][0, :, None].float()
    return (states * mask).sum(0) / mask.sum()


def similarities(
    loaded: LoadedModel, pairs: list[tuple[str, str]], progress: Progress | None = None
) -> list[float]:
    """Cosine similarity of the embeddings of each sentence pair (what an encoder offers instead of perplexity).

    Cancelling `progress` stops between pairs.
    """
    progress = progress or Progress()
    progress.start_stage(f"Similarity: {loaded.source.ref.short_name}", total=len(pairs))
    scores = []
    for first, second in pairs:
        score = torch.nn.functional.cosine_similarity(embedding(loaded, first), embedding(loaded, second), dim=0)
        scores.append(float(score))
        progress.step(first[:40])
    return scores


def read_text_file(path: Path) -> str:
    """The text of a .txt file, or the "text" fields of a .jsonl file joined by blank lines.

    Raises SettingsError for a file that is missing, not a regular file, too large, not UTF-8 (naming the first
    byte that is not), or a .jsonl line without a "text" string.
    """
    with open_regular_file(path, SettingsError, what="text file") as stream:
        data = stream.read(MAX_TEXT_BYTES + 1)
    if len(data) > MAX_TEXT_BYTES:
        raise SettingsError(f"{path} is larger than {MAX_TEXT_BYTES // (1024 * 1024)} MB.", key="text",
                            hint="Perplexity on a sample of a few thousand words says as much; cut the file down.")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        raise SettingsError(f"{path} is not UTF-8 text: byte {error.start:,} (0x{data[error.start]:02x}, on line "
                            f"{line}) is not part of any UTF-8 character.", key="text",
                            hint="Save the file as UTF-8 text (most editors offer it under Save As), or remove "
                            "that byte.") from None
    if path.suffix.lower() != ".jsonl":
        return text
    pieces = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            raise SettingsError(f"Line {number} of {path} is not JSON: {error.msg}.", key="text",
                                hint="Each line of a .jsonl file is one JSON object with a \"text\" field.") from None
        if not isinstance(record, dict) or not isinstance(record.get("text"), str):
            raise SettingsError(f"Line {number} of {path} has no \"text\" string.", key="text",
                                hint="Each line of a .jsonl file is one JSON object with a \"text\" field.")
        pieces.append(record["text"])
    return "\n\n".join(pieces)


def readable_text(text: str, what: str) -> tuple[str, str | None]:
    """`text` with each lone surrogate (how Python carries a byte that is not UTF-8, e.g. from a command line)
    replaced by U+FFFD, and a line saying so for the log (None when there was none)."""
    replaced = _LONE_SURROGATE.subn("\ufffd", text)
    if not replaced[1]:
        return text, None
    verb = "is" if replaced[1] == 1 else "are"
    return replaced[0], (f"The {what} holds {plural(replaced[1], 'byte')} that {verb} not UTF-8 text; each was "
                         "replaced by \ufffd.")


def sentence_pairs(text: str) -> list[tuple[str, str]]:
    """Sentence pairs from text: each line "first<TAB>second", or else consecutive non-empty lines in twos."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    tabbed = [tuple(part.strip() for part in line.split("\t", 1)) for line in lines if "\t" in line]
    if tabbed:
        return [(a, b) for a, b in tabbed]
    return list(zip(lines[0::2], lines[1::2]))
