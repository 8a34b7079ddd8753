"""What a LoRA rank would keep, before extracting: the spectra of a sample of a fine-tune's module updates, read
from both models on this computer (guiapp.lora.spectrum), and the rank that keeps most of the change."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

KEPT_SHARE = 0.9  # the share of the change the summary's rank keeps


@dataclass(frozen=True)
class RankSample:
    """The sampled modules' spectra (guiapp.lora.spectrum.ModuleSpectrum) and `typical_rank`, the rank keeping
    KEPT_SHARE of the change for half of them (None when no sampled module reaches it)."""

    spectra: list[Any]
    typical_rank: int | None


def sample_ranks(base: str, model: str, cancelled: Callable[[], bool],
                 on_module: Callable[[int, int], None]) -> RankSample:
    """Read and decompose a sample of the modules changed from `base` to its fine-tune `model`; `on_module(done,
    total)` is called as each module starts and once all are done. Imports torch: call it off the UI thread.

    Raises OfflineError naming a Hub model that is not downloaded (nothing is downloaded for a preview),
    CheckpointError for an unreadable model, IncompatibleModelsError when the models do not match, JobCancelled
    once `cancelled()` is true.
    """
    from guiapp.lora.spectrum import PREVIEW_MAX_RANK, preview_spectra

    spectra = preview_spectra(base, model, None, PREVIEW_MAX_RANK, cancelled, on_module)
    known = sorted(rank for rank in (s.rank_for(KEPT_SHARE) for s in spectra) if rank is not None)
    return RankSample(spectra, known[len(known) // 2] if known else None)
