"""Running models to try them: generation with streamed text, perplexity in windows, embedding similarity.

Models load through transformers (never with `trust_remote_code`), a `BASE+ADAPTER` reference through PEFT.
Everything a forward pass touches is in ONE dtype: the model, the adapter's weights (PEFT keeps them in float32
by default, which is how a bf16 model with an adapter ends in "expected mat1 and mat2 to have the same dtype")
and the hidden states. The caller picks that dtype from the probe (`guiapp.system.capabilities.inference_option`),
so a float16 model on a CPU that computes float16 poorly runs in float32 instead of failing with
`"addmm_impl_cpu_" not implemented for 'Half'`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from guiapp.engine.devices import resolve_device
from guiapp.engine.sampling import DEFAULT_TEMPERATURE, DEFAULT_TOP_P
from guiapp.errors import CheckpointError, SettingsError, UnsupportedModelError
from guiapp.hub.model_config import read_model_config
from guiapp.hub.references import ModelRef
from guiapp.progress import Progress

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

    @property
    def label(self) -> str:
        return self.source.label

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

    def __post_init__(self) -> None:
        """Raises SettingsError (keyed by the setting) for a temperature that is not above 0 or a top-p outside
        (0, 1]: transformers would refuse them only once a model is loaded."""
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


def resolve_source(reference: str, progress: Progress | None = None) -> ModelSource:
    """The folders behind one model argument: the one-model case of `resolve_sources`, with its errors."""
    return resolve_sources([reference], progress)[0]


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

    Raises UnsupportedModelError when transformers does not know the architecture or the model needs code from
    its repository, CheckpointError when the folder has no config or tokenizer, DeviceError for a missing device.
    """
    import transformers  # noqa: PLC0415 - transformers costs seconds to import; only jobs that run models need it

    transformers.utils.logging.disable_progress_bar()  # progress goes through `progress`, not tqdm on stderr
    progress = progress or Progress()
    target = resolve_device(device)
    config = _read_config(source.folder)
    kind = model_kind(config)
    progress.log(f"Loading {source.label} ({kind}, {str(dtype).removeprefix('torch.')} on {target}).")
    auto = transformers.AutoModelForCausalLM if kind == CAUSAL else transformers.AutoModel
    try:
        model = auto.from_pretrained(source.folder, dtype=dtype)
    except (ValueError, KeyError, ModuleNotFoundError) as error:
        raise _unsupported(source, config, error) from None
    if source.adapter_folder is not None:
        model = _attach_adapter(model, source)
    model = model.to(device=target, dtype=dtype).eval()
    _check_one_dtype(model, dtype, source)
    tokenizer = _load_tokenizer(source)
    return LoadedModel(source, model, tokenizer, kind, dtype, target)


def _read_config(folder: Path) -> dict[str, Any]:
    path = folder / "config.json"
    if not path.is_file():
        raise CheckpointError(f"{folder} has no config.json, so transformers cannot tell what model it is.",
                              hint="Pick the folder that holds config.json and the weights.")
    return read_model_config(path)


def _unsupported(source: ModelSource, config: dict[str, Any], error: Exception) -> UnsupportedModelError:
    architecture = ", ".join(config.get("architectures") or []) or config.get("model_type") or "unnamed"
    if "auto_map" in config or "trust_remote_code" in str(error):
        why = ("its architecture is defined by Python code in the model's own repository, and Mergesmith never "
               "runs code that comes with a model")
    elif isinstance(error, ModuleNotFoundError) and "transformers.models." in str(error):
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

    try:
        return peft.PeftModel.from_pretrained(model, source.adapter_folder, is_trainable=False)
    except (ValueError, KeyError, RuntimeError) as error:
        raise CheckpointError(
            f"The adapter {source.adapter_folder} does not fit {source.ref.base}: {str(error).splitlines()[0]}",
            hint="Use the base model the adapter was trained on (adapter_config.json names it).",
        ) from None


def _check_one_dtype(model: Any, dtype: torch.dtype, source: ModelSource) -> None:
    """Every floating parameter in `dtype`: the guarantee this module exists for. (Buffers such as rotary
    frequencies stay float32 by design; the layers that own them cast.)"""
    strays = {str(p.dtype) for p in model.parameters() if p.is_floating_point() and p.dtype != dtype}
    if strays:
        raise CheckpointError(f"{source.label} keeps weights in {', '.join(sorted(strays))} after loading in {dtype}.",
                              hint="Report this model to Mergesmith: it holds weights that cannot be converted.")


def _load_tokenizer(source: ModelSource) -> Any:
    import transformers  # noqa: PLC0415 - seconds to load; only Try jobs need it

    for folder in (source.folder, source.adapter_folder):
        if folder is not None and any((folder / name).is_file() for name in ("tokenizer.json", "tokenizer_config.json",
                                                                                "tokenizer.model", "vocab.txt")):
            return transformers.AutoTokenizer.from_pretrained(folder)
    raise CheckpointError(
        f"{source.label} has no tokenizer (no tokenizer.json or tokenizer_config.json in its folder).",
        why="Trying a model turns the prompt into tokens with the model's own tokenizer, and this folder holds "
        "only weights and a configuration.",
        hint="Copy the tokenizer files of the model it came from into the folder; merges made by Mergesmith "
        "copy them from the base model.",
    )


def prompt_ids(loaded: LoadedModel, prompt: str) -> torch.Tensor:
    """The prompt as a 1 × n tensor of token ids, through the tokenizer's chat template when it has one."""
    tokenizer = loaded.tokenizer
    if getattr(tokenizer, "chat_template", None):
        text = tokenizer.apply_chat_template([{"role": "user", "content": prompt}], tokenize=False,
                                             add_generation_prompt=True)
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


def generate(
    loaded: LoadedModel,
    prompt: str,
    settings: GenerationSettings,
    progress: Progress | None = None,
    on_text: TextListener | None = None,
) -> Generation:
    """Generate a continuation of `prompt`, calling `on_text` with each new piece of text as it is decoded.

    `progress` counts new tokens in a stage named after the model; cancelling it stops generation at the next
    token (JobCancelled). Raises UnsupportedModelError for an encoder, which does not generate text.
    """

    if loaded.kind != CAUSAL:
        raise UnsupportedModelError(
            f"{loaded.label} is an encoder (like BERT): it turns text into vectors and does not write text.",
            hint="Compare encoders with the similarity of sentence pairs instead.")
    progress = progress or Progress()
    progress.start_stage(f"Generating: {loaded.source.ref.short_name}", total=settings.max_new_tokens)
    streamer = _StreamToListener(loaded.tokenizer, progress, on_text)
    input_ids = prompt_ids(loaded, prompt)
    tokenizer = loaded.tokenizer
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    if settings.sample:
        torch.manual_seed(settings.seed)
    with torch.inference_mode():
        output = loaded.model.generate(input_ids=input_ids, attention_mask=torch.ones_like(input_ids),
                                       pad_token_id=pad, streamer=streamer, **settings.generate_kwargs())
    new_ids = output[0, input_ids.shape[1]:].tolist()
    return Generation(loaded.label, tokenizer.decode(new_ids, skip_special_tokens=True), new_ids)


class _StreamToListener:
    """transformers' TextStreamer, but handing text to a listener and counting tokens (which checks cancel)."""

    def __init__(self, tokenizer: Any, progress: Progress, on_text: TextListener | None) -> None:
        import transformers  # noqa: PLC0415 - seconds to load; only Try jobs need it

        listener = on_text or (lambda text: None)

        class Streamer(transformers.TextStreamer):
            def on_finalized_text(self, text: str, stream_end: bool = False) -> None:
                if text:
                    listener(text)

        self._streamer = Streamer(tokenizer, skip_prompt=True, skip_special_tokens=True)
        self._progress = progress
        self._prompt_seen = False

    def put(self, value: torch.Tensor) -> None:
        self._streamer.put(value)
        if self._prompt_seen:
            self._progress.step("token")
        self._prompt_seen = True

    def end(self) -> None:
        self._streamer.end()


def perplexity(
    loaded: LoadedModel, text: str, window: int = DEFAULT_WINDOW_TOKENS, progress: Progress | None = None
) -> PerplexityResult:
    """Perplexity of `loaded` on `text`, in windows of at most `window` tokens (and the model's context).

    Consecutive windows share one token, so every token after the first is predicted exactly once, from the
    tokens before it in its window. Log-probabilities are summed in float32 whatever the model's dtype.
    Cancelling `progress` stops between windows. Raises SettingsError when the text has fewer than two tokens
    and UnsupportedModelError for an encoder.
    """
    if loaded.kind != CAUSAL:
        raise UnsupportedModelError(
            f"{loaded.label} is an encoder (like BERT): it does not predict the next word, so it has no perplexity.",
            hint="Compare encoders with the similarity of sentence pairs instead.")
    progress = progress or Progress()
    ids = loaded.tokenizer(text, return_tensors="pt")["input_ids"][0]
    if ids.numel() < 2:
        raise SettingsError("The text is too short for perplexity: it needs at least two tokens.",
                            hint="Paste a few sentences or more.", key="text")
    window = max(2, min(window, loaded.max_positions or window))
    starts = list(range(0, ids.numel() - 1, window - 1))
    progress.start_stage(f"Perplexity: {loaded.source.ref.short_name}", total=len(starts))
    total_nll, predicted = 0.0, 0
    for start in starts:
        chunk = ids[start:start + window].to(loaded.device)
        with torch.inference_mode():
            logits = loaded.model(input_ids=chunk[None]).logits[0, :-1].float()
        log_probs = torch.log_softmax(logits, dim=-1)
        total_nll -= log_probs.gather(1, chunk[1:, None]).sum().item()
        predicted += chunk.numel() - 1
        progress.step(f"window of {chunk.numel()} tokens")
    return PerplexityResult(loaded.label, math.exp(total_nll / predicted), predicted, len(starts))


def embedding(loaded: LoadedModel, sentence: str) -> torch.Tensor:
    """The mean of the last hidden states over the sentence's tokens, in float32."""
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

    Raises SettingsError for a file that is missing, not a regular file, too large, not UTF-8, or a .jsonl line
    without a "text" string.
    """
    if not path.is_file():
        raise SettingsError(f"{path} is not a file.", hint="Give a .txt or .jsonl file.", key="text")
    if path.stat().st_size > MAX_TEXT_BYTES:
        raise SettingsError(f"{path} is larger than {MAX_TEXT_BYTES // (1024 * 1024)} MB.", key="text",
                            hint="Perplexity on a sample of a few thousand words says as much; cut the file down.")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise SettingsError(f"{path} is not UTF-8 text.", hint="Save it as UTF-8 text.", key="text") from None
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


def sentence_pairs(text: str) -> list[tuple[str, str]]:
    """Sentence pairs from text: each line "first<TAB>second", or else consecutive non-empty lines in twos."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    tabbed = [tuple(part.strip() for part in line.split("\t", 1)) for line in lines if "\t" in line]
    if tabbed:
        return [(a, b) for a, b in tabbed]
    return list(zip(lines[0::2], lines[1::2]))
