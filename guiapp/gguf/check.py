"""Checking an exported GGUF file against its source: perplexity of both on the same text, with the same
tokenizer and the same code, the file's weights dequantized by gguf-py (llama.cpp's own reader), so the check
needs no llama.cpp."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import gguf
import torch

from guiapp.checkpoints.sources import read_headers
from guiapp.errors import CheckpointError
from guiapp.gguf.architectures import Source, plan_tensors, restore, source_of
from guiapp.hub.references import ModelRef
from guiapp.inference.running import load_model, perplexity, resolve_sources
from guiapp.progress import Progress

# A short built-in text, plain and varied, for when the user gives none.
BUILT_IN_TEXT = (
    "The river ran past the old mill, where children used to watch the wheel turn slowly in the spring. "
    "Every morning the baker opened her shop at six, and the smell of bread drifted down the narrow street. "
    "In the evening people sat outside, talking about the weather, the harvest and the news from the city. "
    "A train whistled in the distance; somebody laughed; a dog barked twice and then was quiet again. "
    "Years later, when the mill had closed, the wheel still stood there, and visitors took pictures of it."
)


@dataclass(frozen=True)
class CheckResult:
    source_perplexity: float
    gguf_perplexity: float
    tokens: int

    @property
    def change_percent(self) -> float:
        return 100.0 * (self.gguf_perplexity / self.source_perplexity - 1.0)

    def summary(self) -> str:
        return (f"{self.change_percent:+.2f} % perplexity ({self.gguf_perplexity:.4g} from the GGUF file, "
                f"{self.source_perplexity:.4g} from the source, over {self.tokens} tokens)")


def gguf_weights(path: Path, source: Source, shapes: dict[str, tuple[int, ...]]) -> dict[str, torch.Tensor]:
    """The file's tensors dequantized to float32, under the names (and as the values) of the checkpoint whose
    tensor shapes are `shapes`.

    Raises CheckpointError when the file cannot be read as GGUF or lacks one of the checkpoint's tensors.
    """
    try:
        reader = gguf.GGUFReader(path)
    except (OSError, ValueError) as error:
        raise CheckpointError(f"{path} cannot be read as a GGUF file: {error}.") from None
    in_file = {tensor.name: tensor for tensor in reader.tensors}
    weights: dict[str, torch.Tensor] = {}
    for planned in plan_tensors(source, shapes, str(path)):
        if planned.source is None:
            continue
        stored = in_file.get(planned.name)
        if stored is None:
            raise CheckpointError(f"{path} has no tensor {planned.name}.")
        values = torch.from_numpy(gguf.quants.dequantize(stored.data, stored.tensor_type).copy())
        weights[planned.source] = restore(source, planned, values.reshape(planned.shape).to(torch.float32))
    return weights


def check_export(model: str, path: Path, text: str = BUILT_IN_TEXT, progress: Progress | None = None) -> CheckResult:
    """Perplexity of `model` and of its GGUF file `path` on `text`, both in float32 on the CPU.

    Raises what `load_model` and `perplexity` raise, and CheckpointError for a file that does not fit the model.
    """
    progress = progress or Progress()
    headers = read_headers(ModelRef.parse(model))
    source = source_of(headers.config, model)
    loaded = load_model(resolve_sources([model], progress)[0], torch.float32, "cpu", progress)
    before = perplexity(loaded, text, progress=progress)
    weights = gguf_weights(Path(path), source, {name: tuple(info.shape) for name, info in headers.tensors.items()})
    if hasattr(loaded.model, "merge_and_unload"):  # BASE+ADAPTER: the file holds the adapter applied
        loaded.model = loaded.model.merge_and_unload()
    target = loaded.model
    missing, unexpected = target.load_state_dict(weights, strict=False)
    untied = [name for name in missing if name != "lm_head.weight" and "rotary" not in name]
    if untied or unexpected:
        raise CheckpointError(f"{path} does not hold the weights of {model}: {(untied + unexpected)[:3]}.")
    after = perplexity(loaded, text, progress=progress)
    return CheckResult(before.perplexity, after.perplexity, before.tokens)
