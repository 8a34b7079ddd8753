"""The routers' rows: one vector per expert and layer, from the experts' prompts (or random), as mergekit-moe makes
them.

Prompts are the tokenizer's start token as text plus the prompt, tokenized without special tokens, left-padded with
the start token. `cheap_embed` sums the base's token embeddings over every token of an expert's prompts (normalised,
minus the normalised sum of its negative prompts, normalised again): the same vector for every layer, read from one
tensor. `hidden` runs the base model (the project's inference code, in bfloat16 where the probe says it runs) and
takes each layer's input at the last token, averaged over the prompts, then the same differences and norms.
`random` is `randn(layers, experts, hidden)` from a generator seeded with the job's seed (mergekit-moe's global
seed gives the same numbers); `uniform_random` is torch.nn.Linear's default initialisation.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch

from guiapp.errors import CheckpointError
from guiapp.inference.running import load_model, load_tokenizer, resolve_sources
from guiapp.moe.config import Expert
from guiapp.progress import Progress

_TINY = 1e-8  # mergekit-moe's floor for a norm: an all-zero vector stays zero instead of becoming NaN


def random_gates(mode: str, layers: int, experts: int, hidden: int, seed: int) -> torch.Tensor:
    """`randn` (mode "random") or Linear's uniform initialisation ("uniform_random"), [layers, experts, hidden]."""
    generator = torch.Generator().manual_seed(seed)
    if mode == "random":
        return torch.randn((layers, experts, hidden), generator=generator, dtype=torch.float32)
    scale = math.sqrt(1.0 / hidden)
    return torch.rand((layers, experts, hidden), generator=generator, dtype=torch.float32) * 2 * scale - scale


def tokenize_prompts(tokenizer: Any, prompts: Sequence[str]) -> dict[str, torch.Tensor]:
    """The prompts as mergekit-moe tokenizes them: start token + prompt, no special tokens, left-padded (with the
    start token, else the end token)."""
    tokenizer.padding_side = "left"
    tokenizer.pad_token_id = tokenizer.bos_token_id
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    if tokenizer.pad_token_id is None:  # padding is masked out: any token does (mergekit-moe stops here)
        tokenizer.pad_token_id = 0
    encoded = tokenizer([(tokenizer.bos_token or "") + p for p in prompts], return_tensors="pt", padding=True,
                        add_special_tokens=False)
    return {"input_ids": encoded["input_ids"], "attention_mask": encoded["attention_mask"]}


def cheap_embed_gates(experts: Sequence[Expert], tokenizer: Any, embedding: torch.Tensor, layers: int) -> torch.Tensor:
    """[layers, experts, hidden] from the sums of the prompts' token embeddings (`embedding`: the base's table).

    Raises CheckpointError when a prompt has a token beyond the table (a tokenizer of another model)."""

    def vector(prompts: Sequence[str]) -> torch.Tensor:
        tokens = tokenize_prompts(tokenizer, prompts)
        ids, mask = tokens["input_ids"], tokens["attention_mask"]
        if ids.numel() and int(ids.max()) >= embedding.shape[0]:
            raise CheckpointError(
                f"The base model's tokenizer gives token {int(ids.max())} but its embedding has only "
                f"{embedding.shape[0]} rows.", hint="Use the base model's own tokenizer files.")
        # Summed over each prompt, then over the prompts, as mergekit-moe sums: the same float32 rounding.
        summed = (embedding[ids].to(torch.float32) * mask.unsqueeze(-1)).sum(dim=1).sum(dim=0, keepdim=True)
        return summed / summed.norm(dim=-1, keepdim=True).clamp(min=_TINY)

    return _combine(experts, vector).repeat(layers, 1, 1)  # [1, experts, hidden] for every layer


def hidden_gates(experts: Sequence[Expert], base: str, dtype: torch.dtype, device: str,
                 progress: Progress) -> torch.Tensor:
    """[layers, experts, hidden] from the base model's layer inputs at the prompts' last tokens, computed in
    `dtype` on `device`. Raises what `load_model` raises (a model with code, no tokenizer, a missing device)."""
    loaded = load_model(resolve_sources([base], progress)[0], dtype, device, progress)
    progress.start_stage("Running the base model on the experts' prompts",
                         total=sum(1 + bool(e.negative_prompts) for e in experts))

    def vector(prompts: Sequence[str]) -> torch.Tensor:
        tokens = {k: v.to(loaded.device) for k, v in tokenize_prompts(loaded.tokenizer, prompts).items()}
        with torch.no_grad():
            output = loaded.model(**tokens, output_hidden_states=True, return_dict=True)
        states = torch.stack(output.hidden_states[:-1])[:, :, -1, :]  # each layer's input, [layers, prompts, hidden]
        progress.step()
        return (states.sum(dim=1) / states.shape[1]).to("cpu")

    return _combine(experts, vector)


def gate_tokenizer(base: str, progress: Progress) -> Any:
    """The base model's tokenizer (see `load_tokenizer`)."""
    return load_tokenizer(resolve_sources([base], progress)[0])[0]


def _combine(experts: Sequence[Expert], vector: Callable[[Sequence[str]], torch.Tensor]) -> torch.Tensor:
    """Per expert: the positive prompts' vector ([layers or 1, hidden]) minus the negative prompts', normalised;
    as [layers or 1, experts, hidden]."""
    rows = []
    for expert in experts:
        row = vector(expert.positive_prompts)
        if expert.negative_prompts:
            row = row - vector(expert.negative_prompts)
        rows.append(row / row.norm(p=2, dim=-1, keepdim=True).clamp(min=_TINY))
    return torch.stack(rows, dim=1)
