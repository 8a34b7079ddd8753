"""The PEFT LoRA adapter format, as PEFT itself writes and reads it, shared by extraction and application.

An adapter folder holds `adapter_model.safetensors` and `adapter_config.json`. Keys are the base model's module
names under `base_model.model.`: `<module>.lora_A.weight` (r × in), `<module>.lora_B.weight` (out × r, with
`<module>.lora_B.bias` when `lora_bias` is on), `<module>.lora_embedding_A` (r × vocab) and
`<module>.lora_embedding_B` (dim × r) for embeddings, and `<module>.<parameter>` for `modules_to_save` entries
(saved whole).
"""

from __future__ import annotations

from typing import Any

from guiapp.checkpoints.tensor_roles import TensorRole, tensor_place
from guiapp.hub.adapter_config import ADAPTER_CONFIG as ADAPTER_CONFIG  # the reader of that file lives in hub

ADAPTER_WEIGHTS = "adapter_model.safetensors"
PEFT_PREFIX = "base_model.model."
LORA_A, LORA_B = "lora_A.weight", "lora_B.weight"
LORA_B_BIAS = "lora_B.bias"
EMBEDDING_A, EMBEDDING_B = "lora_embedding_A", "lora_embedding_B"

# Heads PEFT itself always puts into modules_to_save for these task types, so an adapter must carry them.
CLASSIFIER_HEADS = {"SEQ_CLS": ("classifier", "score"), "TOKEN_CLS": ("classifier", "score")}


def split_module(tensor_name: str) -> tuple[str, str]:
    """("model.layers.0.mlp.up_proj", "weight") from "model.layers.0.mlp.up_proj.weight"."""
    module, _, leaf = tensor_name.rpartition(".")
    return module, leaf


def short_name(module: str) -> str:
    """The last component of a module name, the form PEFT's `target_modules` suffixes use."""
    return module.rpartition(".")[2]


def is_output_head(module: str) -> bool:
    """The output projection onto the vocabulary (a Linear layer, even where the name says "embed": GPT-NeoX's
    `embed_out`), by the tensor-role table."""
    return tensor_place(f"{module}.weight").role is TensorRole.HEAD


def is_embedding(module: str, shape: tuple[int, ...]) -> bool:
    """An nn.Embedding: a 2-D weight the tensor-role table puts before the layers (token, position and type
    embeddings)."""
    place = tensor_place(f"{module}.weight")
    return len(shape) == 2 and place.before_layers and place.role in (TensorRole.EMBEDDING, TensorRole.OTHER)


def task_type_for(config: dict[str, Any] | None) -> str:
    """PEFT's task type for a base model, from its config.json architectures.

    `*ForCausalLM`/`*LMHeadModel` → CAUSAL_LM, `*ForSequenceClassification` → SEQ_CLS, token classification →
    TOKEN_CLS, question answering → QUESTION_ANS, encoder-decoder generation → SEQ_2_SEQ_LM, and anything else
    (encoder-only models, bare backbones) → FEATURE_EXTRACTION, which PEFT loads on any model.
    """
    config = config or {}
    architectures = config.get("architectures") or []
    architecture = architectures[0] if architectures else ""
    if architecture.endswith("ForSequenceClassification"):
        return "SEQ_CLS"
    if architecture.endswith("ForTokenClassification"):
        return "TOKEN_CLS"
    if architecture.endswith("ForQuestionAnswering"):
        return "QUESTION_ANS"
    if architecture.endswith(("ForConditionalGeneration", "ForSeq2SeqLM")) and config.get("is_encoder_decoder"):
        return "SEQ_2_SEQ_LM"
    if architecture.endswith(("ForCausalLM", "LMHeadModel", "ForConditionalGeneration")):
        return "CAUSAL_LM"
    return "FEATURE_EXTRACTION"
