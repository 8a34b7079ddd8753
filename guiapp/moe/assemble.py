"""Assembling a mixture of experts: plan from headers, compute the routers' rows, then stream every tensor into the
output folder.

Everything that can be checked from headers is checked before anything is read or written: the configuration, that
every expert fits the base (the one compatibility check: architecture, vocabulary, shapes), which output
architecture fits, the output folder and the free space. The base's attention, embeddings and norms are copied;
each expert's MLP is read once and written into its place; the routers come from `gates`. The output appears only
when complete (staging folder), with config.json as mergekit-moe writes it and the base's tokenizer files.
Unlike mergekit-moe, a shared expert may be any fine-tune of the base, not only the base or a routed expert.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from guiapp.checkpoints.reading import dtype_from_name
from guiapp.checkpoints.sources import ModelHeaders, ModelReader, open_readers, read_headers
from guiapp.checkpoints.writing import PlannedTensor, ShardedWriter, StagedOutput, check_free_space, parse_size
from guiapp.errors import (
    ON_CPU,
    CheckpointError,
    DeviceError,
    IncompatibleModelsError,
    NonFiniteResultError,
    SettingsError,
)
from guiapp.facts.wording import say
from guiapp.hub.merge_files import TOKENIZER_FILES
from guiapp.hub.references import ModelRef
from guiapp.merging.compatibility import ModelFacts, compare_models
from guiapp.merging.model_card import copy_companion_files
from guiapp.moe.architectures import DEEPSEEK, MIXTRAL, Architecture, OutputTensor, Part, select_architecture
from guiapp.moe.config import PROMPT_FREE_MODES, Expert, MoeConfig
from guiapp.moe.gates import cheap_embed_gates, gate_tokenizer, hidden_gates, random_gates
from guiapp.progress import Progress

EMBEDDING = "model.embed_tokens.weight"
# mergekit-moe computes hidden-state gates in bfloat16; where the probe says bfloat16 does not run, float32.
HIDDEN_GATE_DTYPE = "bfloat16"


@dataclass(frozen=True)
class MoePlan:
    """What the assembly will do, known from headers alone."""

    config: MoeConfig
    architecture: Architecture
    tensors: list[OutputTensor]
    planned: list[PlannedTensor]
    headers: dict[ModelRef, ModelHeaders]
    layers: int
    hidden: int
    out_dtype: torch.dtype | None
    gate_dtype: torch.dtype
    device: str
    warnings: tuple[str, ...] = field(default=())

    @property
    def output_bytes(self) -> int:
        return sum(t.nbytes for t in self.planned)

    @property
    def input_bytes(self) -> int:
        """The bytes read: each part's tensors once (the embedding once more for cheap_embed gates)."""
        read = sum(self.headers[p.model].tensors[name].nbytes for t in self.tensors for p in t.parts
                   if p.model is not None for name in p.names)
        if self.config.gate_mode == "cheap_embed":
            read += self.headers[self.config.base_model].tensors[EMBEDDING].nbytes
        return read

    @property
    def base_parameters(self) -> int:
        return sum(info.numel for info in self.headers[self.config.base_model].tensors.values())

    @property
    def gate_prompt_sets(self) -> int:
        """How many batches of prompts the gates run (positive and negative, per expert)."""
        return sum(1 + bool(e.negative_prompts) for e in gated_experts(self.config))


def gated_experts(config: MoeConfig) -> tuple[Expert, ...]:
    """The experts with a gate row, in the gates' order: the routed ones, then the shared ones that have prompts
    (all of them for prompt-free gates, whose draw mergekit-moe makes for them too)."""
    shared = [e for e in config.shared_experts if e.positive_prompts or config.gate_mode in PROMPT_FREE_MODES]
    return (*config.experts, *shared)


def plan_moe(config: MoeConfig, device: str = "cpu", probe_result: Any = None) -> MoePlan:
    """Read every model's headers and check them: CheckpointError when prompts are to be routed and the local base
    has no tokenizer, RecipeError when no output architecture fits,
    IncompatibleModelsError when an expert does not fit the base, DeviceError when the hidden gates cannot run on
    `device`, and the header readers' CheckpointError / HubError subclasses."""
    headers = {ref: read_headers(ref) for ref in config.models()}
    base = headers[config.base_model]
    if config.gate_mode not in PROMPT_FREE_MODES:
        _check_tokenizer(config.base_model)
    report = compare_models([ModelFacts.of(h.label, h.tensors, h.config) for h in headers.values()])
    if not report.compatible:
        raise IncompatibleModelsError(
            f"The experts do not all fit the base model {config.base_model}: " + report.problems[0].message,
            why="Each expert's MLP replaces the base's in its layer, with the base's attention and embeddings, so "
            "every expert must be a fine-tune of the base (same architecture, vocabulary and sizes).",
            hint=report.problems[0].hint or "Use fine-tunes of the base model as experts.")
    architecture = select_architecture(config, {ref: (h.config or {}).get("model_type") for ref, h in headers.items()})
    tensors = architecture.plan(config, {ref: h.tensors for ref, h in headers.items()})
    out_dtype = _out_dtype(config, base.config or {})
    gate_dtype = _gate_dtype(config, device, probe_result)
    layers = sum(1 for t in tensors if t.name.endswith("mlp.gate.weight"))
    if layers == 0 or EMBEDDING not in base.tensors:
        raise IncompatibleModelsError(f"{config.base_model} has no layers with an MLP, or no {EMBEDDING}.",
                                      hint="Use a Llama, Mistral or Qwen2 model as the base.")
    hidden = base.tensors[EMBEDDING].shape[1]
    planned = [PlannedTensor(t.name, t.shape, out_dtype or t.source_dtype or gate_dtype) for t in tensors]
    return MoePlan(config, architecture, tensors, planned, headers, layers, hidden, out_dtype, gate_dtype, device,
                   config.warnings)


@dataclass(frozen=True)
class MoeSettings:
    """What `mergesmith moe` and the window's Experts page ask for. `config_text` is the configuration as written,
    kept beside the output as mergekit-moe keeps it."""

    config: MoeConfig
    out: Path
    device: str = "cpu"
    seed: int = 0
    overwrite: bool = False
    max_shard_size: str = "5GB"
    config_text: str | None = None


def assemble_moe(settings: MoeSettings, progress: Progress | None = None, plan: MoePlan | None = None
                 ) -> dict[str, Any]:
    """Write the MoE model `settings.config` describes into `settings.out`. Returns a summary (output, architecture,
    experts, tensors, bytes).

    Raises what `plan_moe` raises, OutputError / InsufficientResourcesError for the output folder,
    NonFiniteResultError when a gate row or an expert's tensor is NaN or infinite, and the readers' errors.
    """
    progress = progress or Progress()
    try:
        shard_bytes = parse_size(settings.max_shard_size)
    except ValueError as error:
        raise SettingsError(str(error), hint="Example: 5GB", key="max_shard_size") from None
    config = settings.config
    if plan is None:
        progress.start_stage("Checking the experts against the base model")
        plan = plan_moe(config, settings.device)
    for warning in plan.warnings:
        progress.warn(warning)
    inputs = tuple(folder for ref in config.models() if (folder := ref.existing_folder()) is not None)
    with StagedOutput(settings.out, overwrite=settings.overwrite, inputs=inputs, kind="moe") as staged:
        check_free_space(staged.path, plan.output_bytes)
        readers = open_readers(config.models(), progress)
        try:
            by_ref = dict(zip(config.models(), readers, strict=True))
            gates = _gates(plan, by_ref, settings, progress)
            writer = ShardedWriter(staged.path, plan.planned, shard_bytes)
            _stream(plan, by_ref, gates, writer, settings.seed, progress)
            base_folder = by_ref[config.base_model].folder
            _write_model_files(plan, base_folder, staged.path, settings)
        finally:
            for reader in readers:
                reader.close()
        output = staged.commit(progress)
    progress.log(f"Wrote {output}: a {plan.architecture.name} model with {len(config.experts)} experts.")
    if plan.architecture is DEEPSEEK:
        progress.log("Warning: transformers has no DeepSeek-MoE class: loading this model needs DeepSeek's own code "
                     "from the Hub (trust_remote_code), which Mergesmith does not run.")
    return {"output": str(output), "architecture": plan.architecture.name, "experts": len(config.experts),
            "tensors": len(plan.planned), "bytes": plan.output_bytes}


def _gates(plan: MoePlan, readers: dict[ModelRef, ModelReader], settings: MoeSettings,
           progress: Progress) -> torch.Tensor:
    """[layers, routed + shared experts, hidden] float gate rows, checked to be finite."""
    config = plan.config
    gated = gated_experts(config)
    if config.gate_mode in PROMPT_FREE_MODES:
        gates = random_gates(config.gate_mode, plan.layers, len(gated), plan.hidden, settings.seed)
    elif config.gate_mode == "cheap_embed":
        progress.start_stage("Routing by the prompts' words")
        embedding = readers[config.base_model].read(EMBEDDING)
        gates = cheap_embed_gates(gated, gate_tokenizer(str(config.base_model), progress), embedding, plan.layers)
    else:
        progress.start_stage("Loading the base model to route by meaning")
        gates = hidden_gates(gated, str(config.base_model), plan.gate_dtype, settings.device, progress)
    if not bool(torch.isfinite(gates).all()):
        raise NonFiniteResultError("The routers' rows came out NaN or infinite.",
                                   hint="Check the base model's weights: running it on the prompts overflowed.")
    return gates


def _stream(plan: MoePlan, readers: dict[ModelRef, ModelReader], gates: torch.Tensor, writer: ShardedWriter,
            seed: int, progress: Progress) -> None:
    routed = len(plan.config.experts)
    noise = torch.Generator().manual_seed(seed)
    progress.start_stage("Writing the experts", total=len(plan.planned), bytes_total=plan.output_bytes)
    try:
        for tensor, planned in zip(plan.tensors, plan.planned, strict=True):
            row = 0
            for part in tensor.parts:
                data = _part(part, readers, gates, routed, noise).to(planned.dtype)
                writer.write(planned.name, data, first_row=row)
                row += data.shape[0]
            progress.step(planned.name, nbytes=planned.nbytes)
        writer.close()
    except BaseException:
        writer.abort()
        raise


def _part(part: Part, readers: dict[ModelRef, ModelReader], gates: torch.Tensor, routed: int,
          noise: torch.Generator) -> torch.Tensor:
    """The rows one part contributes (see Part), in float32 when computed, as stored when copied."""
    if part.gate is not None:
        layer, which = part.gate
        return gates[layer, :routed] if which == "routed" else gates[layer, routed:]
    if part.zeros is not None:
        return torch.zeros(part.zeros, dtype=torch.float32)
    tensors = [readers[part.model].read(name) for name in part.names]
    data = tensors[0] if len(tensors) == 1 else torch.cat(tensors, dim=0)
    expert = part.expert
    if expert is not None and (expert.noise_scale is not None or (part.residual and expert.residual_scale is not None)):
        data = data.to(torch.float32)
        if expert.noise_scale is not None:
            data = data + torch.randn(data.shape, generator=noise, dtype=torch.float32) * expert.noise_scale
        if part.residual and expert.residual_scale is not None:
            data = data * expert.residual_scale
        if not bool(torch.isfinite(data).all()):
            raise NonFiniteResultError(f"An expert's weights from {part.model} became NaN or infinite once scaled.",
                                       hint="Lower its residual_scale or noise_scale.")
    return data.unsqueeze(0) if part.stacked else data


def _write_model_files(plan: MoePlan, base_folder: Path, out: Path, settings: MoeSettings) -> None:
    """config.json as mergekit-moe writes it (transformers' own config classes, from the base's), the base's
    tokenizer and generation settings, the configuration as given and a short card."""
    import transformers  # noqa: PLC0415 - seconds to import; only the last step of an assembly needs it

    config = plan.config
    base = transformers.AutoConfig.from_pretrained(base_folder, trust_remote_code=False)
    if plan.architecture is DEEPSEEK:
        _write_deepseek_config(base.to_dict(), config, plan.out_dtype, out)
    elif plan.architecture is MIXTRAL:
        if not isinstance(base, transformers.MistralConfig):
            mistral = transformers.MistralConfig(**base.to_dict())
            mistral.sliding_window = None
            mistral.max_position_embeddings = base.max_position_embeddings
            base = mistral
        out_config = transformers.MixtralConfig(**base.to_dict())
        out_config.architectures = ["MixtralForCausalLM"]
        out_config.num_local_experts = len(config.experts)
        out_config.num_experts_per_tok = config.experts_per_token
        out_config.sliding_window = None
    else:
        out_config = transformers.Qwen2MoeConfig(**base.to_dict())
        out_config.architectures = ["Qwen2MoeForCausalLM"]
        out_config.num_experts = len(config.experts)
        out_config.num_experts_per_tok = config.experts_per_token
        out_config.decoder_sparse_step = 1
        out_config.norm_topk_prob = True
        out_config.sliding_window = None
        out_config.use_sliding_window = False
        out_config.shared_expert_intermediate_size = out_config.intermediate_size
        out_config.moe_intermediate_size = out_config.intermediate_size
    if plan.architecture is not DEEPSEEK:
        if plan.out_dtype is not None:
            out_config.dtype = plan.out_dtype
        out_config.save_pretrained(out)
    copy_companion_files(out, base_folder, base_folder)
    if settings.config_text is not None:
        (out / "mergekit_moe_config.yml").write_text(settings.config_text, encoding="utf-8")
    experts = "\n".join(f"- {e.source_model}" for e in config.experts)
    shared = "".join(f"\nShared expert: {e.source_model}\n" for e in config.shared_experts)
    (out / "README.md").write_text(
        "---\nlibrary_name: transformers\ntags:\n- mergesmith\n- moe\n---\n\n"
        f"# {Path(settings.out).name}\n\n"
        f"A {plan.architecture.name} mixture of experts assembled by Mergesmith from the base model "
        f"{config.base_model}, routed by {config.gate_mode} gates, {config.experts_per_token} experts per token.\n\n"
        f"Experts:\n\n{experts}\n{shared}", encoding="utf-8")


def _write_deepseek_config(base: dict[str, Any], config: MoeConfig, out_dtype: torch.dtype | None, out: Path) -> None:
    """DeepSeek-MoE's config.json as mergekit-moe writes it: the base's fields plus the MoE's, and the auto_map of
    DeepSeek's code on the Hub that transformers needs to load it."""
    shared = len(config.shared_experts)
    base.update({
        "architectures": ["DeepseekForCausalLM"], "model_type": "deepseek", "n_routed_experts": len(config.experts),
        "n_shared_experts": shared or None, "num_experts_per_tok": config.experts_per_token,
        "first_k_dense_replace": 0, "moe_layer_freq": 1, "scoring_func": "softmax", "norm_topk_prob": True,
        "moe_intermediate_size": base["intermediate_size"],
        "auto_map": {
            "AutoConfig": "deepseek-ai/deepseek-moe-16b-base--configuration_deepseek.DeepseekConfig",
            "AutoModel": "deepseek-ai/deepseek-moe-16b-base--modeling_deepseek.DeepseekModel",
            "AutoModelForCausalLM": "deepseek-ai/deepseek-moe-16b-base--modeling_deepseek.DeepseekForCausalLM",
        },
    })
    if out_dtype is not None:
        base["torch_dtype"] = str(out_dtype).removeprefix("torch.")
    (out / "config.json").write_text(json.dumps(base, indent=4), encoding="utf-8")


def _check_tokenizer(base: ModelRef) -> None:
    """Raise CheckpointError when the local base folder has no tokenizer files (a Hub model's come with it)."""
    folder = base.existing_folder()
    if folder is not None and not any((folder / name).is_file() for name in TOKENIZER_FILES):
        raise CheckpointError(
            f"The base model {base} has no tokenizer (no tokenizer.json or tokenizer_config.json in its folder).",
            why="Routing by prompts turns each expert's prompts into the base model's tokens.",
            hint="Copy the tokenizer files of the model it came from into its folder, or use gate_mode: random.")


def _out_dtype(config: MoeConfig, base_config: dict) -> torch.dtype | None:
    """The configuration's dtype, else the base's, else None (each tensor keeps its own), as mergekit-moe picks."""
    name = config.dtype or base_config.get("torch_dtype") or base_config.get("dtype")
    if not name:
        return None
    try:
        return dtype_from_name(name)
    except ValueError:
        return None


def _gate_dtype(config: MoeConfig, device: str, probe_result: Any) -> torch.dtype:
    """The dtype the gates are computed in: float32 for prompt-free and cheap_embed gates; for hidden gates
    bfloat16 where the probe says it runs on `device`, else the dtype it offers. Raises DeviceError."""
    if config.gate_mode not in ("hidden", "hidden_last"):
        return torch.float32
    from guiapp.system.capabilities import inference_option  # noqa: PLC0415 - only hidden gates run a model
    from guiapp.system.probe import probe  # noqa: PLC0415 - only hidden gates run a model

    chosen = inference_option(probe_result or probe(), device, HIDDEN_GATE_DTYPE)
    if not chosen.possible:
        raise DeviceError(f"The base model cannot run on {device} to compute the gates: {chosen.reason}.",
                          hint=say("Use {device:cpu}, or gate_mode: cheap_embed, which runs no model."),
                          remedy=ON_CPU if device != "cpu" else None)
    return getattr(torch, chosen.compute_dtype)
