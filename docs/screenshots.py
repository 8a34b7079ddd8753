"""Make the window's screenshots in docs/ from a real run (offscreen, or under xvfb-run).

    python docs/screenshots.py

Serves a few generated models from the tests' Hub server, writes the sample models, runs a real merge, a
failing merge (output folder taken) and an extraction, then grabs every page, light and (for Merge and Jobs)
dark.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

DOCS = Path(__file__).resolve().parent
sys.path.insert(0, str(DOCS.parent))  # for tests.support.hub_server


def main() -> int:
    if not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
        os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    folder = Path(tempfile.mkdtemp(prefix="mergesmith-shots-"))
    os.environ["MERGESMITH_CONFIG_DIR"] = str(folder / "config")
    os.environ["HF_HOME"] = str(folder / "hf")
    from tests.support.hub_server import HubServer

    with HubServer() as server:
        os.environ["HF_ENDPOINT"] = server.url
        shoot(folder, server)
    return 0


def shoot(folder: Path, server) -> None:
    from PySide6.QtCore import QEventLoop, QSettings
    from PySide6.QtWidgets import QApplication

    from guiapp.engine.samples import write_llama_finetune
    from guiapp.jobs.demo import prepare_demo
    from guiapp.ui.app import create_window
    from guiapp.ui.theme import apply_scheme

    QSettings.setDefaultFormat(QSettings.Format.IniFormat)
    QSettings.setPath(QSettings.Format.IniFormat, QSettings.Scope.UserScope, str(folder / "qsettings"))
    samples = folder / "samples"
    recipe = prepare_demo(samples)
    chat = write_llama_finetune(folder / "tiny-chat-v2", samples / "tiny-base", seed=5, delta_rank=8)
    server.add_model("mergesmith-demo/tiny-base", samples / "tiny-base", downloads=1520, likes=31,
                     card_data={"license": "apache-2.0"})
    server.add_model("mergesmith-demo/tiny-math", samples / "tiny-math", downloads=402, likes=12,
                     card_data={"license": "apache-2.0", "base_model": "mergesmith-demo/tiny-base"})
    server.add_model("mergesmith-demo/tiny-chat", chat, downloads=97, likes=4,
                     card_data={"license": "apache-2.0", "base_model": "mergesmith-demo/tiny-base"})
    server.add_model("mergesmith-demo/tiny-gated", samples / "tiny-base", gated=True, downloads=12)

    app, window = create_window([sys.argv[0]], keep_history=True)
    window.resize(1360, 860)
    window.show()
    window.state.start_loading()

    def wait(done, timeout=120):
        deadline = time.monotonic() + timeout
        while not done():
            if time.monotonic() > deadline:
                raise SystemExit("timed out")
            QApplication.processEvents(QEventLoop.ProcessEventsFlag.AllEvents, 20)

    def shot(page: str, name: str, settle: float = 0.3) -> None:
        window.show_page(page)
        end = time.monotonic() + settle
        wait(lambda: time.monotonic() > end)
        window.grab().save(str(DOCS / f"screenshot-{name}.png"))
        print(f"docs/screenshot-{name}.png")

    shot("welcome", "welcome")
    wait(lambda: window.state.methods is not None and window.state.probe is not None)
    window.models.search_edit.setText("tiny")
    wait(lambda: window.models.results.rowCount() == 4)
    window.models.results.selectRow(1)
    wait(lambda: window.models.fit_badge.text() != "")
    shot("models", "models")

    window.merge.load_sample(recipe.document, str(samples / "merged"))
    wait(lambda: window.merge.run_message.text() == "Ready.")
    shot("merge", "merge")
    window.merge.run()
    wait(lambda: not window.state.jobs.active())
    taken = folder / "taken"
    taken.mkdir()
    window.merge.output_edit.setText(str(taken))
    window.merge.overwrite_check.setChecked(False)
    window.merge.run()
    wait(lambda: not window.state.jobs.active())
    shot("jobs", "jobs-failure")

    window.lora.set_extract_models(str(samples / "tiny-math"), str(samples / "tiny-base"))
    window.lora.x_out.setText(str(folder / "adapter"))
    window.lora.rank_value.setValue(8)
    wait(lambda: "pair up" in window.lora.x_check.text())
    window.lora.run_extract()
    wait(lambda: not window.state.jobs.active())
    shot("lora", "lora")
    shot("jobs", "jobs")
    shot("hardware", "hardware")
    shot("settings", "settings", settle=1.0)

    apply_scheme("dark")
    shot("merge", "merge-dark")
    shot("jobs", "jobs-dark")
    apply_scheme("system")
    window.state.jobs.shutdown()


if __name__ == "__main__":
    sys.exit(main())
