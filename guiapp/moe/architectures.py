"""The MoE models Mergesmith writes, tensor for tensor as mergekit-moe 0.1.5 writes them on transformers 5.

Mixtral: the base's attention, embeddings and norms; per layer the experts' MLPs fused as transformers 5 stores them
(`mlp.experts.gate_up_proj` [experts, 2 × intermediate, hidden]: each expert's gate rows then its up rows;
`mlp.experts.down_proj` [experts, hidden, intermediate]) and the router `mlp.gate.weight` [experts, hidden].
Qwen2-MoE: one tensor set per expert (`mlp.experts.N.gate_proj.weight`…), the shared expert's
(`mlp.shared_expert.*`) and its gate (`mlp.shared_expert_gate.weight` [1, hidden]), and zero q/k/v biases when the
base has none (Qwen2-MoE always has them). DeepSeek-MoE: one tensor set per expert and the ungated shared expert's
(`mlp.shared_experts.*`); transformers has no DeepSeek-MoE (v1) class: its config.json names DeepSeek's own code on
the Hub, as mergekit-moe's does, which Mergesmith never runs.

An output tensor is a list of parts written one after the other as its rows, so no more than one expert's
tensors are in memory at a time.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from guiapp.checkpoints.reading import TensorInfo
from guiapp.errors import IncompatibleModelsError, RecipeError
from guiapp.hub.references import ModelRef
from guiapp.moe.config import PROMPT_FREE_MODES, Expert, MoeConfig

_MLP = re.compile(r"^model\.layers\.(\d+)\.mlp\.(gate_proj|up_proj|down_proj)\.weight$")
_SKIPPED = ("rotary_emb.inv_freq",)  # buffers old checkpoints saved; transformers computes them


@dataclass(frozen=True)
class Part:
    """Rows of one output tensor: `names` of `model` concatenated along their rows (with a leading axis of one for
    one expert of a fused tensor when `stacked`), the gate rows of `gate` (layer, "routed" or "shared"), or zeros of
    `zeros` shape. `expert` carries the noise and residual scale; `residual` marks a down projection."""

    model: ModelRef | None = None
    names: tuple[str, ...] = ()
    expert: Expert | None = None
    residual: bool = False
    stacked: bool = False
    gate: tuple[int, str] | None = None
    zeros: tuple[int, ...] | None = None


@dataclass(frozen=True)
class OutputTensor:
    """One tensor of the output and the parts it is made of. `source_dtype` is the dtype of its inputs (the output
    keeps it when the configuration and the base name no dtype)."""

    name: str
    shape: tuple[int, ...]
    parts: tuple[Part, ...]
    source_dtype: object


@dataclass(frozen=True)
class Architecture:
    """An output architecture: its name as `architecture:` matches it (as a prefix), the model types it takes and
    how many shared experts it needs."""

    name: str
    input_types: tuple[str, ...]
    shared_experts: int  # how many it needs (DeepSeek: at most this many)
    shared_prefix: str = "shared_expert"

    def refusal(self, config: MoeConfig, model_types: Mapping[ModelRef, str | None]) -> str | None:
        """Why this architecture cannot be built from `config` (None when it can), in plain words."""
        if self is DEEPSEEK:
            if len(config.shared_experts) > 1:
                return f"{self.name} takes at most one shared expert"
            if any(e.positive_prompts or e.negative_prompts for e in config.shared_experts):
                return f"{self.name}'s shared expert has no gate, so no prompts"
        elif len(config.shared_experts) != self.shared_experts:
            return (f"{self.name} takes exactly one shared expert" if self.shared_experts
                    else f"{self.name} has no shared experts")
        elif self.shared_experts and config.gate_mode not in PROMPT_FREE_MODES \
                and not config.shared_experts[0].positive_prompts:
            return f"{self.name}'s shared expert needs positive_prompts for its gate"
        types = set(model_types.values())
        if len(types) != 1:
            return "its input models must all be of one kind (" + ", ".join(sorted(map(str, types))) + ")"
        kind = next(iter(types))
        if kind not in self.input_types:
            return f"it is built from {' or '.join(self.input_types)} models, not {kind}"
        return None

    def plan(self, config: MoeConfig, tensors: Mapping[ModelRef, Mapping[str, TensorInfo]]) -> list[OutputTensor]:
        """Every output tensor in writing order, from the models' headers. Raises IncompatibleModelsError when an
        expert lacks an MLP tensor of the base."""
        base = config.base_model
        base_tensors = tensors[base]
        layers = _layers(base_tensors)
        plan = [_copy(base, info) for name, info in base_tensors.items()
                if not _MLP.match(name) and ".mlp." not in name and not name.endswith(_SKIPPED)]
        if self.name == "Qwen MoE":
            plan = _with_qkv_biases(plan, base_tensors)
        for layer in range(layers):
            plan += self._layer_mlp(layer, config, tensors)
        return plan

    def _layer_mlp(self, layer: int, config: MoeConfig, tensors: Mapping[ModelRef, Mapping[str, TensorInfo]]
                   ) -> list[OutputTensor]:
        prefix = f"model.layers.{layer}.mlp"
        base = tensors[config.base_model]
        gate, up, down = (base[_needed(base, f"{prefix}.{p}.weight", config.base_model)]
                          for p in ("gate_proj", "up_proj", "down_proj"))
        experts = len(config.experts)
        for expert in (*config.experts, *config.shared_experts):
            for info in (gate, up, down):
                _same_shape(tensors[expert.source_model], info, expert.source_model)
        router = OutputTensor(f"{prefix}.gate.weight", (experts, gate.shape[1]), (Part(gate=(layer, "routed")),),
                              None)
        if self.name == "Mixtral":
            return [
                OutputTensor(f"{prefix}.experts.gate_up_proj", (experts, 2 * gate.shape[0], gate.shape[1]), tuple(
                    Part(e.source_model, (gate.name, up.name), e, stacked=True) for e in config.experts), gate.dtype),
                OutputTensor(f"{prefix}.experts.down_proj", (experts, *down.shape), tuple(
                    Part(e.source_model, (down.name,), e, residual=True, stacked=True) for e in config.experts),
                    down.dtype),
                router,
            ]
        out = []
        for place, expert in [*((f"experts.{i}", e) for i, e in enumerate(config.experts)),
                              *((self.shared_prefix, e) for e in config.shared_experts)]:
            for info in (gate, up, down):
                leaf = info.name.removeprefix(f"{prefix}.")
                out.append(OutputTensor(f"{prefix}.{place}.{leaf}", info.shape, (
                    Part(expert.source_model, (info.name,), expert, residual=info is down),), info.dtype))
        out.append(router)
        if self is QWEN_MOE:
            out.append(OutputTensor(f"{prefix}.shared_expert_gate.weight", (1, gate.shape[1]),
                                    (Part(gate=(layer, "shared")),), None))
        return out


MIXTRAL = Architecture("Mixtral", ("llama", "mistral"), 0)
DEEPSEEK = Architecture("DeepSeek MoE", ("llama", "mistral"), 1, "shared_experts")
QWEN_MOE = Architecture("Qwen MoE", ("llama", "mistral", "qwen2"), 1)
# In mergekit-moe's order of preference: Mixtral when it fits (older configurations expect it), then the first.
ARCHITECTURES = (MIXTRAL, DEEPSEEK, QWEN_MOE)
# Names mergekit-moe knows that Mergesmith does not write yet.
_NOT_YET = ("qwen3",)


def select_architecture(config: MoeConfig, model_types: Mapping[ModelRef, str | None]) -> Architecture:
    """The output architecture for `config`: those whose name starts with `architecture:` (all when absent), the
    first that can be built. Raises RecipeError saying why none can."""
    wanted = (config.architecture or "").lower()
    candidates = [a for a in ARCHITECTURES if a.name.lower().startswith(wanted)]
    if not candidates:
        later = any(name.startswith(wanted) or wanted.startswith(name) for name in _NOT_YET)
        raise RecipeError(
            f"architecture: {config.architecture} is not one Mergesmith writes"
            + (" yet" if later else "") + ".",
            hint="Use mixtral (routed experts only), deepseek (an ungated shared expert) or qwen (a gated shared "
            "expert).", key="architecture")
    reasons = []
    for architecture in candidates:
        reason = architecture.refusal(config, model_types)
        if reason is None:
            return architecture
        reasons.append(f"{architecture.name}: {reason}")
    raise RecipeError("No MoE architecture fits this configuration (" + "; ".join(reasons) + ").",
                      hint="Mixtral takes no shared_experts; DeepSeek MoE one without prompts; Qwen MoE exactly one, "
                      "with prompts. All models must be fine-tunes of one Llama, Mistral or Qwen2 base.",
                      key="architecture")


def _layers(tensors: Mapping[str, TensorInfo]) -> int:
    indices = {int(m.group(1)) for name in tensors if (m := _MLP.match(name))}
    return max(indices) + 1 if indices else 0


def _copy(model: ModelRef, info: TensorInfo) -> OutputTensor:
    return OutputTensor(info.name, info.shape, (Part(model, (info.name,)),), info.dtype)


def _with_qkv_biases(plan: list[OutputTensor], base: Mapping[str, TensorInfo]) -> list[OutputTensor]:
    """Zero q/k/v biases after each projection the base stores without one (Qwen2-MoE always adds them)."""
    out = []
    for tensor in plan:
        out.append(tensor)
        match = re.fullmatch(r"(model\.layers\.\d+\.self_attn\.[qkv]_proj)\.weight", tensor.name)
        if match and f"{match.group(1)}.bias" not in base:
            rows = (tensor.shape[0],)
            out.append(OutputTensor(f"{match.group(1)}.bias", rows, (Part(zeros=rows),), tensor.source_dtype))
    return out


def _needed(tensors: Mapping[str, TensorInfo], name: str, ref: ModelRef) -> str:
    if name not in tensors:
        raise IncompatibleModelsError(f"{ref} has no {name}, so its MLP cannot become an expert.",
                                      hint="Use Llama, Mistral or Qwen2 models with a gate, up and down projection.")
    return name


def _same_shape(tensors: Mapping[str, TensorInfo], info: TensorInfo, ref: ModelRef) -> None:
    found = tensors.get(_needed(tensors, info.name, ref))
    if found.shape != info.shape:
        raise IncompatibleModelsError(
            f"{ref}'s {info.name} is {'×'.join(map(str, found.shape))} but the base's is "
            f"{'×'.join(map(str, info.shape))}.",
            hint="The experts must be fine-tunes of the base model (the same size).")
