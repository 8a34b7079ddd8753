"""Reading a PEFT LoRA adapter and applying it to a base model's tensors as they are read.

For a LoRA module `W = W_base + s·(B·A)` with `s = lora_alpha / r` (rsLoRA: `lora_alpha / √r`), per module from
`rank_pattern` / `alpha_pattern`, times the user's `--scale`; embedding LoRAs add `(B·A)ᵀ`; `lora_bias` adds
`s·b` to the bias; `modules_to_save` tensors replace the base's; a DoRA module's `lora_magnitude_vector`
renormalises the sum (guiapp/checkpoints/dora.py). Deltas are computed in float32 from the stored
factors, so a bf16 or fp16 adapter never meets a half-precision matmul.

A `model+adapter` reference is read through `LoraAdapter` (checkpoints.sources): it adds the deltas while
streaming, with no temporary full copy of the adapted model. `mergesmith apply-lora` (guiapp.lora.apply) writes
the same tensors as a full model folder.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

import torch

from guiapp.checkpoints.dora import MAGNITUDE, dora_weight, output_features
from guiapp.checkpoints.peft_format import (
    ADAPTER_WEIGHTS,
    EMBEDDING_A,
    EMBEDDING_B,
    LORA_A,
    LORA_B,
    LORA_B_BIAS,
    PEFT_PREFIX,
    is_embedding,
    is_output_head,
    split_module,
)
from guiapp.checkpoints.reading import TensorInfo, load_pickle_weights
from guiapp.errors import CheckpointError, IncompatibleModelsError, SettingsError
from guiapp.facts.wording import say
from guiapp.hub.adapter_config import AdapterConfig, read_adapter_config
from guiapp.hub.references import ModelRef
from guiapp.progress import Progress
from guiapp.system.bounded import open_regular_file

# Key fragments of adapters written by kohya's sd-scripts and LyCORIS (LoHa, LoKr), which are not PEFT's format.
_FOREIGN_KEY_MARKERS = (
    "lora_unet_", "lora_te_", "lora_te1_", "lora_te2_", "lora_down.", "lora_up.", "hada_w1", "lokr_w1",
)

@dataclass(frozen=True)
class LoraModule:
    """One adapted module: where its factors are stored and the scaling PEFT gives it."""

    module: str
    a_key: str
    b_key: str
    bias_key: str | None
    transposed: bool  # B·A is the weight's transpose (embeddings, fan_in_fan_out layers such as GPT-2's Conv1D)
    scaling: float
    rank: int  # the configuration's rank and alpha for this module (rank_pattern / alpha_pattern resolved)
    alpha: float
    magnitude_key: str | None = None  # DoRA's magnitude vector, when the module has one


class LoraAdapter:
    """A PEFT LoRA adapter folder opened for reading: deltas and replacement tensors by base tensor name.

    Use `check_base(tensors, label)` with the base model's headers before streaming: it also maps adapter
    module names onto base tensor names that carry an extra or a missing prefix (e.g. `bert.`).
    """

    def __init__(self, folder: Path, config: AdapterConfig, tensors: dict[str, Any], scale: float) -> None:
        self.folder = folder
        self.config = config
        self.scale = scale
        self._tensors = tensors  # key -> tensor, memory-mapped (safetensors) or loaded (.bin)
        self.modules = _lora_modules(config, list(tensors), scale, folder)
        self.replacements = {
            key.removeprefix(PEFT_PREFIX): key for key in tensors if not _is_lora_key(key)
        }
        self._module_names: dict[str, str] = {}  # base module name -> adapter module name, when they differ

    @classmethod
    def open(cls, folder: Path | str, scale: float = 1.0) -> LoraAdapter:
        """Open the adapter in `folder` (adapter_config.json + adapter_model.safetensors or .bin).

        Raises CheckpointError for a missing or damaged file, a configuration field PEFT never writes (see
        `read_adapter_config`), a pattern past its time bound, an adapter of another kind (not LoRA or DoRA,
        or layer_replication) or another format (kohya / LyCORIS keys), and SettingsError for a scale that is not a
        finite number.
        """
        folder = Path(folder)
        if not math.isfinite(scale):
            raise SettingsError(f"The scale must be a number (got {scale}).", hint=say("Example: {scale:0.5}"), key="scale")
        config = _read_adapter_config(folder)
        tensors = _read_adapter_tensors(folder)
        return cls(folder, config, tensors, scale)

    @property
    def label(self) -> str:
        return str(self.folder)

    @property
    def tensors(self) -> Mapping[str, Any]:
        """The adapter file's tensors by key, as stored (for reading only)."""
        return MappingProxyType(self._tensors)

    @property
    def base_model(self) -> str | None:
        """The base model the adapter says it was made for (`base_model_name_or_path`), if any."""
        return self.config.base_model

    def check_base(self, base_tensors: dict[str, TensorInfo], base_label: str) -> None:
        """Check that every adapted module and replaced tensor exists in the base with a matching shape.

        Raises IncompatibleModelsError listing the mismatches (and naming the base the adapter was made for).
        """
        self._module_names = _match_module_names(
            [m.module for m in self.modules.values()] + [split_module(name)[0] for name in self.replacements],
            base_tensors,
        )
        adapter_names = {adapter: base for base, adapter in self._module_names.items()}
        problems = []
        for lora in self.modules.values():
            base_name = adapter_names.get(lora.module, lora.module) + ".weight"
            expected = self._delta_shape(lora)
            info = base_tensors.get(base_name)
            if info is None and self._tied_head(lora.module, base_tensors):
                continue
            if info is None:
                problems.append(f"{lora.module} is not in the base model")
            elif math.prod(info.shape) != math.prod(expected) or info.shape[0] != expected[0]:
                problems.append(
                    f"{lora.module}: the adapter changes a {_shape(expected)} weight, "
                    f"the base's is {_shape(info.shape)}"
                )
            base_bias = adapter_names.get(lora.module, lora.module) + ".bias"
            if info is not None and lora.magnitude_key is not None and self._tensors[lora.magnitude_key].numel() != (
                    features := output_features(info.shape, lora.transposed)):
                problems.append(f"{lora.module}: the adapter's DoRA magnitudes are for "
                                f"{self._tensors[lora.magnitude_key].numel()} features, the base's weight has {features}")
            if lora.bias_key is not None and base_bias not in base_tensors:
                problems.append(f"{lora.module}: the adapter changes a bias the base model does not have")
        for name, key in self.replacements.items():
            module, leaf = split_module(name)
            base_name = f"{adapter_names.get(module, module)}.{leaf}"
            shape = tuple(self._tensors[key].shape)
            info = base_tensors.get(base_name)
            if info is None and self._tied_head(module, base_tensors):
                continue
            if info is None:
                problems.append(f"{name} (saved whole in the adapter) is not in the base model")
            elif info.shape != shape:
                problems.append(f"{name}: the adapter holds {_shape(shape)}, the base {_shape(info.shape)}")
        if not problems:
            return
        made_for = f" It was made for {self.base_model}." if self.base_model else ""
        vocabulary = any("embed" in p or "lm_head" in p for p in problems)
        raise IncompatibleModelsError(
            f"The adapter {self.label} does not fit the base model {base_label}: {_first(problems)}.{made_for}",
            hint="Apply it to the model it was trained on"
            + (" (if only the vocabulary differs, resize the base's embeddings to the adapter's vocabulary first)"
               if vocabulary else "")
            + ".",
        )

    def delta_for(
        self, tensor_name: str, base_shape: tuple[int, ...], device: torch.device | str = "cpu"
    ) -> torch.Tensor | None:
        """The float32 update the adapter adds to the base tensor `tensor_name`, or None when it adds none.

        Raises IncompatibleModelsError when the update's shape is not `base_shape`.
        """
        module, leaf = split_module(tensor_name)
        lora = self.modules.get(self._module_names.get(module, module))
        if lora is None:
            return None
        if leaf == "bias" and lora.bias_key is not None:
            delta = self._tensors[lora.bias_key].to(device, torch.float32) * lora.scaling
        elif leaf == "weight":
            a = self._tensors[lora.a_key].to(device, torch.float32)
            b = self._tensors[lora.b_key].to(device, torch.float32)
            delta = (b @ a).T if lora.transposed else b.reshape(b.shape[0], -1) @ a.reshape(a.shape[0], -1)
            delta = delta.mul_(lora.scaling)
        else:
            return None
        if math.prod(delta.shape) != math.prod(base_shape) or delta.shape[0] != base_shape[0]:
            raise IncompatibleModelsError(
                f"The adapter {self.label} changes {tensor_name} with a {_shape(tuple(delta.shape))} update, but the "
                f"base's tensor is {_shape(base_shape)}.",
                hint="Apply the adapter to the model it was trained on.",
            )
        return delta.reshape(base_shape)

    def replacement_for(self, tensor_name: str) -> torch.Tensor | None:
        """The tensor the adapter stores whole (modules_to_save) for `tensor_name`, as stored; None otherwise."""
        module, leaf = split_module(tensor_name)
        key = self.replacements.get(f"{self._module_names.get(module, module)}.{leaf}")
        return None if key is None else self._tensors[key]

    def applied_dtype(self, tensor_name: str) -> torch.dtype | None:
        """The dtype `apply_to` gives the base tensor `tensor_name`: the replacement's as stored, float32 where the
        adapter adds an update; None where it leaves the tensor as the base stores it. Call after `check_base`."""
        replacement = self.replacement_for(tensor_name)
        if replacement is not None:
            return replacement.dtype
        module, leaf = split_module(tensor_name)
        lora = self.modules.get(self._module_names.get(module, module))
        if lora is None or not (leaf == "weight" or (leaf == "bias" and lora.bias_key is not None)):
            return None
        return torch.float32

    def apply_to(self, tensor_name: str, tensor: torch.Tensor) -> torch.Tensor:
        """`tensor` (the base's `tensor_name`) with the adapter applied: the replacement, or base + delta in
        float32, or `tensor` itself when the adapter does not touch it."""
        replacement = self.replacement_for(tensor_name)
        if replacement is not None:
            return replacement
        delta = self.delta_for(tensor_name, tuple(tensor.shape), tensor.device)
        return tensor if delta is None else self.added(tensor_name, tensor, delta)

    def added(self, tensor_name: str, tensor: torch.Tensor, delta: torch.Tensor) -> torch.Tensor:
        """The base's `tensor_name` with `delta_for`'s update in float32: their sum, or for a DoRA module's weight
        the sum renormalised by the module's magnitudes. Never in place (`tensor` may be a memory map)."""
        module, leaf = split_module(tensor_name)
        lora = self.modules.get(self._module_names.get(module, module))
        if lora is not None and lora.magnitude_key is not None and leaf == "weight":
            return dora_weight(tensor, delta, self._tensors[lora.magnitude_key], lora.transposed)
        return tensor.to(torch.float32) + delta

    def changes_nothing(self) -> bool:
        """True when every lora_B factor (and lora bias) is zero and nothing is saved whole: a no-op adapter."""
        if self.replacements or any(lora.magnitude_key for lora in self.modules.values()):
            return False  # a DoRA magnitude changes the weight's scale even when B·A is zero
        return all(
            not bool(self._tensors[key].to(torch.float32).any())
            for lora in self.modules.values()
            for key in (lora.b_key, lora.bias_key)
            if key is not None
        )

    def _tied_head(self, module: str, base_tensors: dict[str, TensorInfo]) -> bool:
        """An output head of an adapter that also changes the embedding, for a base that stores no head of its
        own (its head is the embedding): the head's entries mirror the embedding's, for PEFT, and add nothing."""
        changes_embedding = any(
            is_embedding(name, (0, 0)) for name in [*self.modules, *(split_module(n)[0] for n in self.replacements)]
        )
        return changes_embedding and is_output_head(module) and not any(
            split_module(name)[0] == module for name in base_tensors
        )

    def _delta_shape(self, lora: LoraModule) -> tuple[int, ...]:
        a, b = self._tensors[lora.a_key], self._tensors[lora.b_key]
        if lora.transposed:
            return (int(a.shape[1]), int(b.shape[0]))
        return (int(b.shape[0]), math.prod(int(d) for d in a.shape[1:]))


def apply_inputs(base: ModelRef, adapter: LoraAdapter) -> tuple[Path, ...]:
    """The local folders applying `adapter` to `base` reads, which the output must keep clear of."""
    return tuple(folder for folder in (base.existing_folder(), adapter.folder) if folder is not None)


def open_adapter(adapter: ModelRef, progress: Progress | None = None, scale: float = 1.0) -> LoraAdapter:
    """Open the adapter `adapter` names (a local folder or a Hub model, downloaded as needed): apply-lora's, or
    that of a recipe's `model+adapter` reference.

    Raises CheckpointError / HubError subclasses when the adapter cannot be had or read.
    """
    from guiapp.hub.resolve import resolve_model  # noqa: PLC0415 - the hub layer loads only when asked

    return LoraAdapter.open(resolve_model(adapter, progress=progress, what="adapter"), scale=scale)


def _read_adapter_config(folder: Path) -> AdapterConfig:
    """The adapter's checked configuration (`read_adapter_config`), refused unless it is a plain LoRA adapter."""
    config = read_adapter_config(folder)
    if config.peft_type != "LORA":
        raise CheckpointError(
            f"{folder} is a {config.peft_type or 'unknown'} adapter; Mergesmith applies LoRA adapters only.",
            hint="Merge it with PEFT itself: PeftModel.from_pretrained(model, folder).merge_and_unload().",
        )
    if config.document.get("layer_replication"):
        raise CheckpointError(
            f"{folder} rebuilds the base model with repeated layers (layer_replication in {config.path}), which "
            "Mergesmith does not apply.",
            hint="Merge it with PEFT itself: PeftModel.from_pretrained(model, folder).merge_and_unload().",
        )
    if config.document.get("target_parameters"):
        raise CheckpointError(
            f"{folder} adapts parameters directly (target_parameters), which Mergesmith does not apply yet.",
            hint="Merge it with PEFT itself: PeftModel.from_pretrained(model, folder).merge_and_unload().",
        )
    return config


def _read_adapter_tensors(folder: Path) -> dict[str, Any]:
    safetensors_path = folder / ADAPTER_WEIGHTS
    if safetensors_path.is_file():
        from safetensors import safe_open  # noqa: PLC0415 - only adapters saved as safetensors need it

        from guiapp.checkpoints.reading import read_safetensors_header  # noqa: PLC0415 - with safe_open above

        with open_regular_file(safetensors_path, CheckpointError, what="adapter file") as stream:
            read_safetensors_header(stream, os.fstat(stream.fileno()).st_size, str(safetensors_path))
        handle = safe_open(str(safetensors_path), framework="pt")
        tensors = {key: handle.get_tensor(key) for key in handle.keys()}
    elif (folder / "adapter_model.bin").is_file():
        tensors = load_pickle_weights(folder / "adapter_model.bin")
    else:
        foreign = sorted(p.name for p in folder.glob("*.safetensors"))
        raise CheckpointError(
            f"{folder} has no {ADAPTER_WEIGHTS}"
            + (f" (it has {', '.join(foreign[:3])}: perhaps an adapter in another format)." if foreign else "."),
            hint="Choose a PEFT adapter folder (adapter_config.json + adapter_model.safetensors).",
        )
    foreign_keys = [key for key in tensors if any(marker in key for marker in _FOREIGN_KEY_MARKERS)]
    if foreign_keys:
        raise CheckpointError(
            f"{folder} holds a kohya / LyCORIS-style adapter (keys like {foreign_keys[0]}), not a PEFT LoRA adapter.",
            hint="Convert it to PEFT's format first, or use the tool it was made for (kohya sd-scripts, ComfyUI).",
        )
    return tensors


def _lora_modules(config: AdapterConfig, keys: list[str], scale: float, folder: Path) -> dict[str, LoraModule]:
    rslora, transposed_weights = config.flag("use_rslora"), config.flag("fan_in_fan_out")
    keyset = set(keys)
    modules: dict[str, LoraModule] = {}
    for key in keys:
        stripped = key.removeprefix(PEFT_PREFIX)
        for a_suffix, b_suffix, embedding in ((LORA_A, LORA_B, False), (EMBEDDING_A, EMBEDDING_B, True)):
            if not stripped.endswith("." + a_suffix):
                continue
            module = stripped[: -len(a_suffix) - 1]
            b_key = key[: -len(a_suffix)] + b_suffix
            if b_key not in keyset:
                raise CheckpointError(f"{folder / ADAPTER_WEIGHTS} is incomplete: {key} has no matching {b_suffix}.")
            bias_key = key[: -len(a_suffix)] + LORA_B_BIAS
            magnitude_key = key[: -len(a_suffix)] + MAGNITUDE
            rank, alpha = config.rank_for(module), config.alpha_for(module)
            scaling = alpha / (math.sqrt(rank) if rslora else rank)
            modules[module] = LoraModule(module, key, b_key, bias_key if bias_key in keyset else None,
                                         embedding or transposed_weights, scaling * scale, rank, alpha,
                                         magnitude_key if magnitude_key in keyset else None)
    return modules


def _is_lora_key(key: str) -> bool:
    return any(part in key for part in (".lora_A.", ".lora_B.", ".lora_embedding_A", ".lora_embedding_B",
                                        "." + MAGNITUDE))


def _match_module_names(adapter_modules: list[str], base_tensors: dict[str, TensorInfo]) -> dict[str, str]:
    """Base module name -> adapter module name when the adapter's names carry a prefix more or less than the
    checkpoint's (an adapter trained on BertModel applied to a BertForMaskedLM checkpoint, or the reverse)."""
    base_modules = {split_module(name)[0] for name in base_tensors}
    if not adapter_modules or any(module in base_modules for module in adapter_modules):
        return {}
    probe = adapter_modules[0]
    for base_module in base_modules:
        if base_module.endswith("." + probe):
            prefix = base_module[: -len(probe)]
            return {prefix + m: m for m in adapter_modules}
        if probe.endswith("." + base_module):
            prefix = probe[: -len(base_module)]
            return {m.removeprefix(prefix): m for m in adapter_modules if m.startswith(prefix)}
    return {}


def _shape(shape: tuple[int, ...]) -> str:
    return " × ".join(str(d) for d in shape)


def _first(problems: list[str], count: int = 3) -> str:
    more = f" (and {len(problems) - count} more)" if len(problems) > count else ""
    return "; ".join(problems[:count]) + more
