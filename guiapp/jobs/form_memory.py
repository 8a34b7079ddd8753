"""What the window's forms held when it closed (the recipe being edited, the LoRA forms), so work survives a
restart. Kept as `forms.json` in Mergesmith's config folder; no Qt.

Each form is stored under its name ("merge", "extract", "apply") as plain JSON values. Secrets never reach the
file (keys naming a token or password are dropped, as in the jobs history). A missing, damaged or oversized file
is an empty memory, never an error: losing the remembered form must not stop the window opening.
"""

from __future__ import annotations

import json
import os
import tempfile
from typing import Any

from guiapp.errors import MergesmithError
from guiapp.jobs.history import without_secrets
from guiapp.system.bounded import RECIPE_BYTES, check_value_size, load_json_limited
from guiapp.system.paths import settings_file
from guiapp.system.scrub import scrub

FORMS_NAME = "forms.json"
# Three forms, each at most a recipe's size.
MAX_FORMS_BYTES = 4 * RECIPE_BYTES


def remembered_form(name: str) -> dict[str, Any]:
    """The values form `name` held when last saved ({} when none were kept or the file cannot be read)."""
    try:
        forms = load_json_limited(settings_file(FORMS_NAME), MAX_FORMS_BYTES, MergesmithError, what="forms file")
    except (MergesmithError, OSError, ValueError):
        return {}
    form = forms.get(name) if isinstance(forms, dict) else None
    return form if isinstance(form, dict) else {}


def remember_form(name: str, values: dict[str, Any]) -> None:
    """Keep `values` as form `name`'s (write then rename: a crash never leaves half a file). A value too large
    to keep, or an unwritable config folder, costs the memory of this form, never an error."""
    path = settings_file(FORMS_NAME)
    try:
        check_value_size(values, "The form", MergesmithError)
        forms = {}
        try:
            forms = load_json_limited(path, MAX_FORMS_BYTES, MergesmithError, what="forms file")
        except (MergesmithError, OSError, ValueError):
            pass
        forms = forms if isinstance(forms, dict) else {}
        forms[name] = without_secrets(values)
        text = scrub(json.dumps(forms, indent=1, default=str))
        if len(text.encode()) > MAX_FORMS_BYTES:
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=".forms.", suffix=".tmp")
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            stream.write(text)
        os.replace(temporary, path)
    except (MergesmithError, OSError):
        pass
