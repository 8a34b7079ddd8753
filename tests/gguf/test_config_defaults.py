"""The exporter fills a config's missing settings from its own table of transformers' defaults (importing
transformers took 1.2-3 s of every export): the metadata written from it must be what transformers' own filled
config gives, for every architecture and for configs written by old and new transformers."""

from __future__ import annotations

import copy

import gguf
import pytest
import transformers

from guiapp.gguf.architectures import FAMILIES, Source, source_of, write_metadata

_TYPES = {"LlamaForCausalLM": "llama", "MistralForCausalLM": "mistral", "Qwen2ForCausalLM": "qwen2",
          "Qwen3ForCausalLM": "qwen3", "Gemma2ForCausalLM": "gemma2", "Gemma3ForCausalLM": "gemma3_text",
          "Phi3ForCausalLM": "phi3"}
_SMALL = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
          "vocab_size": 300}
# Settings real configs carry, old (transformers 4: rope_theta, rope_scaling at the top) and new alike.
_VARIANTS = {
    "nothing": {},
    "sizes": _SMALL,
    "sizes and kv heads": {**_SMALL, "num_key_value_heads": 2, "max_position_embeddings": 512},
    "head_dim": {**_SMALL, "head_dim": 32},
    "old rope theta": {**_SMALL, "rope_theta": 500000.0, "rms_norm_eps": 1e-5},
    "old linear scaling": {**_SMALL, "rope_theta": 20000.0, "rope_scaling": {"type": "linear", "factor": 2.0}},
    "old yarn": {**_SMALL, "rope_scaling": {"rope_type": "yarn", "factor": 4.0,
                                            "original_max_position_embeddings": 4096}},
    "old llama3": {**_SMALL, "rope_theta": 500000.0, "rope_scaling": {
        "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192}},
    "new rope parameters": {**_SMALL, "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0}},
    "sliding window": {**_SMALL, "sliding_window": 512, "use_sliding_window": True},
    "softcapping": {**_SMALL, "attn_logit_softcapping": 40.0, "final_logit_softcapping": 20.0},
    "old gemma 3 local base": {**_SMALL, "rope_theta": 2000000.0, "rope_local_base_freq": 20000.0},
    "tied": {**_SMALL, "tie_word_embeddings": True},
    "phi-3 long rope": {**_SMALL, "max_position_embeddings": 8192, "original_max_position_embeddings": 4096,
                        "rope_scaling": {"type": "longrope", "short_factor": [1.0] * 8, "long_factor": [2.0] * 8}},
    "partial rotary": {**_SMALL, "partial_rotary_factor": 0.5},
    # Written out as null (Mistral v0.3's sliding window, Gemma 3's softcapping): null is not "missing".
    "null window and caps": {**_SMALL, "sliding_window": None, "final_logit_softcapping": None,
                             "attn_logit_softcapping": None, "rope_scaling": None},
    "null sizes": {**_SMALL, "head_dim": None, "num_key_value_heads": None},
}


# Gemma 3 configs name their scaling `rope_type` (llama.cpp's converter refuses any other key); given the older
# `type`, transformers 5 keeps it beside `rope_type: default` and scales nothing, where the table keeps the scaling.
_OLD_KEY_TRANSFORMERS_5_IGNORES = {("Gemma3ForCausalLM", "old linear scaling"), ("Gemma3ForCausalLM", "phi-3 long rope")}


def _metadata(source: Source) -> dict:
    writer = gguf.GGUFWriter(path=None, arch=source.arch_name)
    write_metadata(writer, source, "model")
    return {key: (field.value, field.type) for key, field in writer.kv_data[0].items()}


def _as_transformers_fills(architecture: str, config: dict) -> dict | None:
    try:
        filled = transformers.AutoConfig.for_model(_TYPES[architecture], **config).to_dict()
    except Exception:  # noqa: BLE001 - transformers refuses the combination (its validators raise their own types)
        return None
    return {**filled, **{key: value for key, value in config.items() if key not in filled}}


@pytest.mark.parametrize("variant", sorted(_VARIANTS))
@pytest.mark.parametrize("architecture", sorted(FAMILIES))
def test_the_metadata_from_the_table_is_what_transformers_defaults_give(architecture, variant):
    if (architecture, variant) in _OLD_KEY_TRANSFORMERS_5_IGNORES:
        pytest.skip("transformers 5 ignores this scaling key for this architecture")
    config = {"architectures": [architecture], "model_type": _TYPES[architecture], **_VARIANTS[variant]}
    # transformers writes into the dicts it is given (rope_theta into rope_scaling): it gets a copy
    reference = _as_transformers_fills(architecture, copy.deepcopy({k: v for k, v in config.items() if k != "model_type"}))
    if reference is None:
        pytest.skip("transformers refuses this config for this architecture")
    expected = Source(architecture, FAMILIES[architecture], reference)
    try:
        wanted = _metadata(expected)
    except Exception as error:  # noqa: BLE001 - what the exporter says of such a config is compared below
        with pytest.raises(type(error)):
            _metadata(source_of(config, "model"))
        return
    assert _metadata(source_of(config, "model")) == wanted


def test_an_export_does_not_import_transformers():
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415

    code = ("import sys\nfrom guiapp.gguf.architectures import source_of\n"
            "source_of({'architectures': ['LlamaForCausalLM'], 'model_type': 'llama'}, 'model')\n"
            "print('transformers' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True).stdout.strip() == "False"
