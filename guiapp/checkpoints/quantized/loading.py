"""A quantized model loaded into transformers as the full-precision model it dequantizes to.

transformers would load a quantized folder through its quantizer (bitsandbytes' 4-bit layers compute in float32
whatever dtype the rest runs in, which is how a QLoRA try in bfloat16 ends in "expected mat1 and mat2 to have the
same dtype"). Built from the config without its quantization settings and filled with the dequantized weights,
every layer is a plain one in the dtype asked for.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from guiapp.checkpoints.reading import open_checkpoint
from guiapp.errors import CheckpointError


def dequantized_model(auto: Any, folder: Path, dtype: torch.dtype) -> Any | None:
    """The model in `folder` built by `auto` (a transformers Auto class) with its weights dequantized and cast to
    `dtype`, or None when the model is not quantized (load it as usual then).

    Raises what `open_checkpoint` raises (a quantized model whose tensors disagree with its settings), ValueError /
    KeyError from transformers for an architecture it does not know, and CheckpointError when a weight the
    architecture needs is missing.
    """
    import transformers  # noqa: PLC0415 - transformers costs seconds to import; only a Try of such a model needs it
    from transformers.initialization import no_init_weights  # noqa: PLC0415 - as above

    with open_checkpoint(folder) as checkpoint:
        if checkpoint.quantized is None:
            return None
        settings = dict(checkpoint.config or {})
        config = transformers.AutoConfig.for_model(settings.pop("model_type", None), **settings)
        with no_init_weights():
            model = auto.from_config(config, dtype=dtype, trust_remote_code=False)
        state = {name: checkpoint.read(name) for name in checkpoint.tensors}
    state = {name: t.to(dtype) if t.is_floating_point() else t for name, t in state.items()}
    missing = [name for name in model.load_state_dict(state, strict=False, assign=True).missing_keys
               if name not in _tied(model)]
    if missing:
        raise CheckpointError(f"{folder} has no weight {missing[0]!r}, which its architecture needs "
                              f"({len(missing)} missing).", hint="Download the model again; a file may be missing.")
    model.tie_weights()
    return model


def _tied(model: Any) -> set[str]:
    """The weight names the model ties to another one (an output head sharing the embedding)."""
    tied = getattr(model, "_tied_weights_keys", None) or {}
    return set(tied if not isinstance(tied, dict) else tied.keys())
