"""The GGUF export as a job: the CLI's `export-gguf` and the window's "Export for LM Studio / Ollama…" run it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from guiapp.jobs.runner import Job, JobSpec


@dataclass(frozen=True)
class GgufExportSpec(JobSpec):
    """`model` written as the GGUF file `output` of type `gguf_type`; with `check`, then the perplexity of the file
    (dequantized) beside the source's on `text` (the built-in text when None); with `modelfile`, an Ollama
    Modelfile beside the file."""

    kind: ClassVar[str] = "export-gguf"
    model: str
    output: str
    gguf_type: str
    check: bool = False
    text: str | None = None
    threads: int | None = None
    modelfile: bool = False

    def job(self) -> Job:
        return Job(title=f"Export GGUF → {Path(self.output).name}", kind=self.kind, spec=self.to_dict(),
                   work=self._work)

    def _work(self, progress) -> dict[str, Any]:
        from guiapp.gguf.export import export_gguf
        from guiapp.system.threads import ThreadPolicy

        result = export_gguf(self.model, Path(self.output), self.gguf_type, progress, ThreadPolicy(limit=self.threads))
        # "output" is the folder (the Jobs page opens it); "file" the GGUF file itself.
        summary = {"output": str(result.path.parent), "file": str(result.path), "bytes": result.bytes,
                   "predicted_bytes": result.predicted_bytes, "seconds": result.seconds,
                   "tensor_types": result.type_counts, "type": self.gguf_type}
        if result.k_quants:
            summary["k_quants"] = result.k_quants
        if self.modelfile:
            from guiapp.gguf.modelfile import modelfile_path, write_modelfile

            written = write_modelfile(result.path)
            summary["modelfile"] = str(written or modelfile_path(result.path))
        if self.check:
            from guiapp.gguf.check import BUILT_IN_TEXT, check_export

            checked = check_export(self.model, result.path, self.text or BUILT_IN_TEXT, progress)
            summary["check"] = {"source_perplexity": checked.source_perplexity,
                                "gguf_perplexity": checked.gguf_perplexity, "tokens": checked.tokens,
                                "change_percent": checked.change_percent, "summary": checked.summary()}
        return summary


def gguf_export_job(model: str, out: Path | str, gguf_type: str, **settings: Any) -> Job:
    """A job writing `model` as the GGUF file `out` of type `gguf_type` (see `GgufExportSpec`)."""
    return GgufExportSpec(model, str(out), gguf_type, **settings).job()


def predicted_gguf_sizes(folder: Path) -> dict[str, int]:
    """The size in bytes of the GGUF file of each type for the model in `folder`, from its headers (and tokenizer).
    Raises CheckpointError for a folder that is not a model it can read, UnsupportedModelError for an architecture
    GGUF export cannot map."""
    from guiapp.checkpoints.sources import read_headers
    from guiapp.gguf.export import predicted_sizes
    from guiapp.hub.references import ModelRef

    return predicted_sizes(read_headers(ModelRef.parse(str(folder))), Path(folder))
