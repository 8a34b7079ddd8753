"""The settings transformers assumes when a config.json leaves them out, for the architectures GGUF export maps:
a config says only what differs from its class's defaults, and the file must say what the model really uses (a
Llama whose rope theta is missing uses 10000, a Gemma 3 1000000 for its global layers).

Written out rather than asked of transformers, whose import took 1.2-3 s of every export; the values are
transformers 5's (`AutoConfig.for_model(type)`), and tests/gguf/test_config_defaults.py checks that the metadata
written from them equals the metadata written from transformers' own filled config, architecture by architecture.
"""

from __future__ import annotations

from typing import Any

_LLAMA_SIZES = {"hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32, "vocab_size": 32000,
                "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "tie_word_embeddings": False}
_QWEN = {**_LLAMA_SIZES, "max_position_embeddings": 32768, "intermediate_size": 22016, "vocab_size": 151936,
         "num_key_value_heads": 32}
_GEMMA = {"hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 26, "num_attention_heads": 8,
          "num_key_value_heads": 4, "head_dim": 256, "rms_norm_eps": 1e-6, "sliding_window": 4096,
          "tie_word_embeddings": True}

DEFAULTS: dict[str, dict[str, Any]] = {
    "llama": {**_LLAMA_SIZES, "max_position_embeddings": 2048, "intermediate_size": 11008},
    "mistral": {**_LLAMA_SIZES, "max_position_embeddings": 131072, "intermediate_size": 14336,
                "num_key_value_heads": 8, "sliding_window": 4096},
    "qwen2": _QWEN,
    "qwen3": {**_QWEN, "head_dim": 128},
    "gemma2": {**_GEMMA, "max_position_embeddings": 8192, "vocab_size": 256000, "rope_theta": 10000.0,
               "attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0},
    "gemma3_text": {**_GEMMA, "max_position_embeddings": 131072, "vocab_size": 262208, "rope_theta": 1000000.0,
                    "rope_local_base_freq": 10000.0},
    "phi3": {**_LLAMA_SIZES, "max_position_embeddings": 4096, "original_max_position_embeddings": 4096,
             "hidden_size": 3072, "intermediate_size": 8192, "vocab_size": 32064, "rms_norm_eps": 1e-5,
             "partial_rotary_factor": 1.0},
}
# Where a missing head size is the hidden size over the heads (the others have a fixed default, or none).
_HEAD_DIM_FROM_SIZES = ("llama", "mistral")


def with_defaults(config: dict[str, Any]) -> dict[str, Any]:
    """`config` with what transformers assumes for its `model_type` where a setting is missing (a setting written
    as null stays null, as transformers keeps it: no sliding window, no softcapping); a type not in the table is
    returned as it is."""
    model_type = config.get("model_type", "")
    filled = {**DEFAULTS.get(model_type, {}), **config}
    if model_type in _HEAD_DIM_FROM_SIZES and filled.get("head_dim") is None:
        filled["head_dim"] = int(filled["hidden_size"]) // int(filled["num_attention_heads"])
    return filled
