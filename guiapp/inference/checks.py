"""Checks made from headers before a model is built to try it: the configuration must describe the weights there
are, and the weights must fit in memory.

transformers builds the model config.json describes, allocating every weight, before it reads the files: a
config that declares 20,000 layers over weights for 2 (or a vocabulary of ten million over an embedding of 64
rows) builds gigabytes first and fails, or exhausts memory, only then. Here the layer count, hidden size and
vocabulary are compared with the safetensors headers, and the configuration's whole model (built on torch's
"meta" device, which allocates nothing) with the number of weights the files hold.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from guiapp.checkpoints.reading import TensorInfo
from guiapp.checkpoints.tensor_roles import TensorRole, architecture_of, tensor_place
from guiapp.errors import CheckpointError, InsufficientResourcesError
from guiapp.system.units import format_bytes

# The config.json names of each size, across families (Llama/BERT, GPT-2, T5).
LAYER_FIELDS = ("num_hidden_layers", "n_layer", "num_layers")
HIDDEN_FIELDS = ("hidden_size", "n_embd", "d_model")
# The configuration's model may hold a little more than the files (buffers saved as weights, heads rebuilt):
# more than this fraction beyond them is a configuration that does not describe these weights.
BUILD_ALLOWANCE = 0.05
_FIX = "Restore the model's original config.json (or download the model again): it must describe its weights."


def check_config_matches_weights(config: Mapping[str, Any] | None, tensors: Mapping[str, TensorInfo],
                                 label: str) -> None:
    """Refuse a config.json whose layer count, hidden size or vocabulary disagrees with the weights' headers.

    A field the config does not have, or the weights cannot show (no token embedding), is not compared. Raises
    CheckpointError naming the field, both numbers and `label`.
    """
    if not config:
        return
    architecture = architecture_of(dict(config))
    layers = _present_layers(tensors)
    field, declared = _first_field(config, LAYER_FIELDS)
    if field and layers and declared > layers:  # no layers found: names the table does not know (T5's `block`)
        raise _disagreement(label, field, declared, f"the weights hold {layers} layers")
    embedding = next((info for name, info in tensors.items() if name.endswith(".weight") and len(info.shape) == 2
                      and tensor_place(name, architecture).role is TensorRole.EMBEDDING), None)
    if embedding is None:
        return
    rows, width = embedding.shape
    vocab = config.get("vocab_size")
    if _is_count(vocab) and vocab != rows:
        raise _disagreement(label, "vocab_size", vocab, f"the token embedding {embedding.name} has {rows:,} rows")
    field, hidden = _first_field(config, HIDDEN_FIELDS)
    if field and hidden != width and not _embedding_width_named(config, width):
        raise _disagreement(label, field, hidden, f"the token embedding {embedding.name} is {width:,} wide")


def check_built_size(config: Mapping[str, Any], tensors: Mapping[str, TensorInfo], label: str) -> None:
    """Refuse a config.json whose model (built on the meta device: no memory) holds far more parameters than the
    files store: every size the config gives is covered, not only the three `check_config_matches_weights` names.

    A config transformers cannot build is left to the loader, which explains it. Raises CheckpointError naming,
    where it can, the config field and a weight whose shape it changes.
    """
    shapes = _meta_shapes(config)
    stored = sum(info.numel for info in tensors.values())
    built = sum(math.prod(shape) for shape in (shapes or {}).values())
    if shapes is None or built <= stored * (1 + BUILD_ALLOWANCE) + 1024:
        return
    raise CheckpointError(
        f"The config.json of {label} describes a model of {built:,} weights, but its files hold {stored:,}"
        f"{_culprit(config, shapes, tensors)}.",
        why="A configuration that does not describe its weights (edited, or taken from another model) makes "
        "transformers allocate the model it describes before reading any file.",
        hint=_FIX,
    )


def check_fits_in_memory(label: str, needed: int, free: int, device: str) -> None:
    """Refuse a model whose weights alone (`needed` bytes once loaded) exceed the `free` memory of `device`.
    `free` 0 means unknown, and nothing is refused. Raises InsufficientResourcesError."""
    if free and needed > free:
        where = "memory" if device == "cpu" else f"memory on {device}"
        raise InsufficientResourcesError(
            f"{label} needs about {format_bytes(needed)} of {where} to be tried, and {format_bytes(free)} is free.",
            hint="Close other programs, try a smaller model, or pick a smaller dtype (bfloat16 halves float32).",
        )


def _meta_shapes(config: Mapping[str, Any]) -> dict[str, tuple[int, ...]] | None:
    """The shape of each parameter transformers would build for `config`; None when it cannot build it here, the
    config asks for code from the model's repository (never run), or its weights are stored quantized."""
    import torch  # noqa: PLC0415 - with transformers below
    import transformers  # noqa: PLC0415 - seconds to import; only jobs that try models need it

    from guiapp.inference.running import CAUSAL, model_kind  # noqa: PLC0415 - inference imports torch/transformers

    if "auto_map" in config or "quantization_config" in config:  # packed weights: the files hold fewer numbers
        return None
    try:
        built_config = transformers.AutoConfig.for_model(**dict(config))
        auto = transformers.AutoModelForCausalLM if model_kind(dict(config)) == CAUSAL else transformers.AutoModel
        with torch.device("meta"):
            model = auto.from_config(built_config, trust_remote_code=False)
    except Exception:  # noqa: BLE001 - an unknown or broken config: the loader explains it with its own message
        return None
    return {name: tuple(parameter.shape) for name, parameter in model.named_parameters()}


def _culprit(config: Mapping[str, Any], shapes: Mapping[str, tuple[int, ...]],
             tensors: Mapping[str, TensorInfo]) -> str:
    """": <field> is <n>, which makes <weight> a × b where the file's is c × d", for the first stored weight the
    config reshapes and a config field holding the size that differs; "" when none is found."""
    for name, shape in shapes.items():
        info = tensors.get(name)
        if info is None or tuple(info.shape) == shape or len(info.shape) != len(shape):
            continue
        sizes = {size for size, stored in zip(shape, info.shape, strict=True) if size != stored}
        fields = [key for key, value in config.items() if _is_count(value) and value in sizes]
        said = f"{fields[0]} is {config[fields[0]]:,}, which makes" if fields else "it makes"
        return f": {said} {name} {_shape(shape)} where the file's is {_shape(tuple(info.shape))}"
    return ""


def _shape(shape: tuple[int, ...]) -> str:
    return " × ".join(f"{size:,}" for size in shape)


def _present_layers(tensors: Mapping[str, TensorInfo]) -> int:
    """The layers the weights hold: one more than the highest index under any layer prefix."""
    indices = [place.layer.index for place in map(tensor_place, tensors) if place.layer is not None]
    return max(indices) + 1 if indices else 0


def _embedding_width_named(config: Mapping[str, Any], width: int) -> bool:
    """Whether the config gives the embeddings a width of their own that is `width` (ALBERT's embedding_size,
    OPT's word_embed_proj_dim): then the hidden size may differ from it."""
    return any(_is_count(value) and value == width for key, value in config.items()
               if "embed" in key and "position" not in key)


def _first_field(config: Mapping[str, Any], names: tuple[str, ...]) -> tuple[str | None, int]:
    for name in names:
        if _is_count(config.get(name)):
            return name, config[name]
    return None, 0


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _disagreement(label: str, field: str, declared: int, present: str) -> CheckpointError:
    return CheckpointError(
        f"The config.json of {label} says {field} is {declared:,}, but {present}.",
        why="transformers builds the model config.json describes before it reads the weights, so a configuration "
        "that does not describe them would allocate memory for weights that do not exist.",
        hint=_FIX,
    )
