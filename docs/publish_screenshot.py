"""Make docs/screenshot-publish.png: the Publish dialog for a merge, against the tests' Hub (offscreen).

    python docs/publish_screenshot.py

Serves two input models (one gated) from the test Hub with its upload API, signs in with the test token,
writes a merged folder whose recipe names them, opens the dialog from the Try page and grabs it once the
checks are done.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

DOCS = Path(__file__).resolve().parent
sys.path.insert(0, str(DOCS.parent))  # for tests.support.hub_server


def main() -> int:
    if not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
        os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    folder = Path(tempfile.gettempdir()) / "mergesmith-publish-screenshot"  # a short, stable path: it is shown
    shutil.rmtree(folder, ignore_errors=True)  # this script's own folder from an earlier run
    folder.mkdir()
    os.environ["MERGESMITH_CONFIG_DIR"] = str(folder / "config")
    os.environ["HF_HOME"] = str(folder / "hf")
    from tests.support.hub_server import TEST_TOKEN, HubServer, enable_uploads

    os.environ["HF_TOKEN"] = TEST_TOKEN
    with HubServer() as server:
        os.environ["HF_ENDPOINT"] = server.url
        enable_uploads(server, folder / "hub-store")
        shoot(folder, server)
    return 0


def shoot(folder: Path, server) -> None:
    from PySide6.QtCore import QEventLoop, QSettings
    from PySide6.QtWidgets import QApplication

    from guiapp.checkpoints.samples import write_llama, write_llama_finetune
    from guiapp.ui.app import create_window

    QSettings.setDefaultFormat(QSettings.Format.IniFormat)
    QSettings.setPath(QSettings.Format.IniFormat, QSettings.Scope.UserScope, str(folder / "qsettings"))
    base = write_llama(folder / "tiny-base")
    chat = write_llama_finetune(folder / "tiny-chat", base, seed=5, delta_rank=8)
    server.add_model("mergesmith-demo/tiny-base", base, card_data={"license": "apache-2.0"})
    server.add_model("mergesmith-demo/tiny-chat", chat, gated=True, card_data={"license": "apache-2.0"})
    merged = write_llama_finetune(folder / "tiny-chat-merge", base, seed=6, delta_rank=8)
    (merged / "README.md").write_text("---\nlibrary_name: transformers\ntags:\n- merge\n- mergesmith\n---\n\n"
                                      "# Merged model\n\nThis model was made with Mergesmith using the **SLERP** "
                                      "method.\n\n## Models merged\n\n- mergesmith-demo/tiny-base (base)\n"
                                      "- mergesmith-demo/tiny-chat\n")
    (merged / "mergesmith_recipe.yml").write_text(
        "merge_method: slerp\nbase_model: mergesmith-demo/tiny-base\nmodels:\n  - model: mergesmith-demo/tiny-base\n"
        "  - model: mergesmith-demo/tiny-chat\nparameters:\n  t: 0.5\n")

    app, window = create_window([sys.argv[0]], keep_history=False)
    window.resize(1360, 860)
    window.show()

    def wait(done, timeout=120):
        deadline = time.monotonic() + timeout
        while not done():
            if time.monotonic() > deadline:
                raise SystemExit("timed out")
            QApplication.processEvents(QEventLoop.ProcessEventsFlag.AllEvents, 20)

    window.show_page("try")
    window.try_page.set_models([str(base), str(chat), str(merged)])
    dialog = window.try_page.open_publish()
    wait(lambda: dialog.check_status.text().startswith("Ready"))
    settle = time.monotonic() + 0.5
    wait(lambda: time.monotonic() > settle)
    dialog.grab().save(str(DOCS / "screenshot-publish.png"))
    print("docs/screenshot-publish.png")
    window.state.jobs.shutdown()
    del app


if __name__ == "__main__":
    sys.exit(main())
