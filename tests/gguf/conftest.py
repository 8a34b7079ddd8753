from __future__ import annotations

from pathlib import Path

import pytest

from tests.gguf import models


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory) -> dict[str, Path]:
    """One tiny model per supported architecture, shared read-only by the tests."""
    root = tmp_path_factory.mktemp("gguf-models")
    return {name: build(root / name) for name, build in models.BUILDERS.items()}


@pytest.fixture(scope="session")
def exported(tiny_models, tmp_path_factory):
    """`exported(architecture, type)`: the model's GGUF file of that type, written once per session."""
    root = tmp_path_factory.mktemp("gguf-files")
    files: dict[tuple[str, str], Path] = {}

    def get(architecture: str, kind: str) -> Path:
        from guiapp.gguf.export import export_gguf

        if (architecture, kind) not in files:
            path = root / f"{architecture}-{kind}.gguf"
            export_gguf(str(tiny_models[architecture]), path, kind)
            files[architecture, kind] = path
        return files[architecture, kind]

    return get
