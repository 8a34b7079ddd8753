"""The GGUF export as a job: the CLI's `export-gguf` and the window's "Export for LM Studio / Ollama…" run it."""

from __future__ import annotations

from pathlib import Path

from guiapp.jobs.runner import Job


def gguf_export_job(model: str, out: Path | str, kind: str, *, check: bool = False, text: str | None = None,
                    threads: int | None = None, modelfile: bool = False) -> Job:
    """A job writing `model` as the GGUF file `out` of type `kind`; with `check`, then the perplexity of the file
    (dequantized) beside the source's on `text` (the built-in text when None); with `modelfile`, an Ollama
    Modelfile beside the file."""
    spec = {"model": model, "out": str(out), "kind": kind, "check": check, "threads": threads,
            "modelfile": modelfile}

    def work(progress):
        from guiapp.gguf.export import export_gguf
        from guiapp.system.threads import ThreadPolicy

        result = export_gguf(model, out, kind, progress, ThreadPolicy(limit=threads))
        # "output" is the folder (the Jobs page opens it); "file" the GGUF file itself.
        summary = {"output": str(result.path.parent), "file": str(result.path), "bytes": result.bytes, "predicted_bytes": result.predicted_bytes,
                   "seconds": result.seconds, "tensor_types": result.type_counts, "type": kind}
        if modelfile:
            from guiapp.gguf.modelfile import modelfile_path, write_modelfile

            written = write_modelfile(result.path)
            summary["modelfile"] = str(written or modelfile_path(result.path))
        if check:
            from guiapp.gguf.check import BUILT_IN_TEXT, check_export

            checked = check_export(model, result.path, text or BUILT_IN_TEXT, progress)
            summary["check"] = {"source_perplexity": checked.source_perplexity,
                                "gguf_perplexity": checked.gguf_perplexity, "tokens": checked.tokens,
                                "change_percent": checked.change_percent, "summary": checked.summary()}
        return summary

    return Job(title=f"Export GGUF → {Path(out).name}", kind="export-gguf", spec=spec, work=work)
