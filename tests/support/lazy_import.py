"""A module imported when a test first uses it, not when the test file is collected.

Every test process imports every test file to collect it; peft, bitsandbytes and mergekit each took seconds to
import there (peft 5 s, mergekit-moe 5.5 s, bitsandbytes 3 s of CPU), in every process, also in those that never
run a test needing them. They are test dependencies (the `test` extra installs them), so a missing one fails the
tests that use it instead of skipping them.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any


class LazyModule:
    """Stands for the module `name`: the first attribute read imports it (ImportError if it is not installed)."""

    def __init__(self, name: str) -> None:
        self._name = name

    def module(self) -> ModuleType:
        return importlib.import_module(self._name)

    def __getattr__(self, attribute: str) -> Any:
        if attribute.startswith("_"):  # pytest looks for its own marks (`__test__`, ...) on every module global
            raise AttributeError(attribute)
        return getattr(self.module(), attribute)
