"""The names that say which role a tensor plays: token embeddings, output head, final norm, layer N, or other
(`engine.layers` reads names with these tables; this holds only the tables).

Names decide, the way mergekit's architecture files do it: a few architectures whose names mislead the generic
rule are listed as data (ARCHITECTURES); every other model is read by the generic rule from names alone.
"""

from __future__ import annotations

import re

# The module names that hold numbered layers (`model.layers.3.…`, `transformer.h.3.…`, `blocks.3.…`).
LAYER_CONTAINERS = ("layers", "layer", "h", "blocks")

# Architectures whose tensor names the generic rule would misread, as data: the full names (or name endings
# after a ".") of their embedding, head and final norm modules, keyed by config.json `architectures` entries.
ARCHITECTURES: dict[str, dict[str, tuple[str, ...]]] = {
    # `embed_out` is the untied output head although its name says "embed" (Pythia, GPT-NeoX-20B).
    "GPTNeoXForCausalLM": {"embedding": ("gpt_neox.embed_in",), "head": ("embed_out",),
                           "norm": ("gpt_neox.final_layer_norm",)},
    # GPT-2 names its token embeddings `wte` and its final norm `ln_f`; `wpe` are position embeddings.
    "GPT2LMHeadModel": {"embedding": ("transformer.wte",), "head": ("lm_head",), "norm": ("transformer.ln_f",)},
    # BERT's masked-LM decoder is tied to the word embeddings and sits after the encoder.
    "BertForMaskedLM": {"embedding": ("bert.embeddings.word_embeddings",), "head": ("cls.predictions.decoder",),
                        "norm": ()},
}

# The generic rule: module names (the last part before `.weight`/`.bias`) of each role in common architectures
# (Llama, Mistral, Qwen2, Gemma, Phi-3, GPT-2, GPT-NeoX, BERT, Falcon, BLOOM, MPT, T5-style `shared`).
EMBEDDING_MODULES = ("embed_tokens", "embed_in", "wte", "word_embeddings", "tok_embeddings", "shared")
HEAD_MODULES = ("lm_head", "embed_out", "output", "decoder")
NORM_MODULES = ("norm", "ln_f", "final_layer_norm", "final_layernorm", "final_norm", "norm_f")
# Modules outside the layers that sit before them although they are no token embeddings (position embeddings).
BEFORE_LAYERS = re.compile(r"(?:^|\.)(?:embeddings?|wpe|embed_positions|position_embeddings)(?:\.|$)")
