"""Make the window's screenshots in docs/ from one real run (under xvfb-run, or offscreen).

    xvfb-run -a python docs/screenshots.py

Serves a few generated models from the tests' Hub server, writes the sample models, and drives the window as a
user would: a search on the Models page, the sample merge (one weight changing across the layers, so its chart
shows), a real merge, a failing merge (output folder taken), a rank preview and an extraction on the LoRA page, a
generation on the Try page. It grabs every page light at 1360×860, Merge, LoRA and Jobs dark, and Merge, LoRA,
Jobs and Models at 1024×700: docs/screenshot-<page>[-dark][-1024x700].png. The Publish dialog has its own script
(docs/publish_screenshot.py: it needs the test Hub's upload API and a sign-in).

Names given on the command line (`merge merge-dark jobs`…) limit the files written to those, so a change to one
page refreshes its pictures only; the run is the same.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

DOCS = Path(__file__).resolve().parent
sys.path.insert(0, str(DOCS.parent))  # for tests.support.hub_server and tests.tryout.models
DEFAULT_SIZE, SMALL_SIZE = (1360, 860), (1024, 700)


def main() -> int:
    if not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
        os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    folder = Path(tempfile.gettempdir()) / "mergesmith-screenshots"  # a short, stable path: the pages show it
    shutil.rmtree(folder, ignore_errors=True)  # this script's own folder from an earlier run
    folder.mkdir()
    os.environ["MERGESMITH_CONFIG_DIR"] = str(folder / "config")
    os.environ["HF_HOME"] = str(folder / "hf")
    from tests.support.hub_server import HubServer

    with HubServer() as server:
        os.environ["HF_ENDPOINT"] = server.url
        shoot(folder, server, set(sys.argv[1:]))
    return 0


def shoot(folder: Path, server, wanted: set[str]) -> None:
    """Drive the window and save its pictures (only the names in `wanted`, when it is not empty)."""
    import torch
    from PySide6.QtCore import QEventLoop, QSettings
    from PySide6.QtWidgets import QApplication

    from guiapp.checkpoints.samples import write_llama_finetune
    from guiapp.jobs.demo import prepare_demo
    from guiapp.ui.app import create_window
    from guiapp.ui.theme import apply_scheme
    from tests.tryout.models import write_causal

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
    storytellers = [write_causal(folder / name, torch.float32, seed=seed)
                    for seed, name in enumerate(("tiny-storyteller", "tiny-storyteller-2", "tiny-storyteller-3"))]

    app, window = create_window([sys.argv[0]], keep_history=True)
    window.resize(*DEFAULT_SIZE)
    window.show()
    window.state.start_loading()

    def wait(done, timeout=180):
        deadline = time.monotonic() + timeout
        while not done():
            if time.monotonic() > deadline:
                raise SystemExit(f"timed out waiting for {done.__doc__ or 'a step'}")
            QApplication.processEvents(QEventLoop.ProcessEventsFlag.AllEvents, 20)

    def settle(seconds: float = 0.4) -> None:
        end = time.monotonic() + seconds
        wait(lambda: time.monotonic() > end)

    def shot(page: str, name: str, size: tuple[int, int] = DEFAULT_SIZE) -> None:
        window.show_page(page)
        window.resize(*size)
        wait(lambda: (window.width(), window.height()) == size, timeout=10)
        settle()
        if wanted and name not in wanted:
            return
        window.grab().save(str(DOCS / f"screenshot-{name}.png"))
        print(f"docs/screenshot-{name}.png")

    shot("welcome", "welcome")
    wait(lambda: window.state.methods is not None and window.state.probe is not None)

    search = window.models.hub
    search.search_edit.setText("tiny")
    wait(lambda: search.results.rowCount() == 4)
    search.results.selectRow(1)
    wait(lambda: "Licence" in search.details_pane.detail_facts.text() and search.details_pane.fit_badge.text())
    shot("models", "models")

    document = recipe.document
    document["models"][0]["parameters"]["weight"] = [0.3, 0.8]  # a weight changing across the layers: its chart
    window.merge.load_sample(document, str(samples / "merged"))
    wait(lambda: window.merge.run_message.text() == "Ready.")
    shot("merge", "merge")
    window.merge.run_button.click()
    wait(lambda: not window.state.jobs.active())
    # A failing merge: the output folder is taken between the check (which would refuse it) and the run.
    taken = folder / "merged-v2"
    window.merge.output_edit.setText(str(taken))
    wait(lambda: window.merge.run_button.isEnabled() and "merged-v2" in window.merge.run_box.action_bar.summary.text())
    taken.mkdir()
    (taken / "notes.txt").write_text("not a model\n")
    window.merge.run_button.click()
    wait(lambda: not window.state.jobs.active())
    shot("jobs", "jobs-failure")
    window.merge.output_edit.setText(str(samples / "merged"))  # back to the merge that ran

    lora = window.lora
    lora.set_extract_models(str(samples / "tiny-math"), str(samples / "tiny-base"))
    lora.extract.out.setText(str(folder / "tiny-math-adapter"))
    lora.extract.rank_value.setValue(8)
    wait(lambda: "pair up" in lora.extract.check.text())
    wait(lambda: lora.extract.rank_preview.button.isEnabled())
    lora.extract.rank_preview.button.click()
    wait(lambda: bool(lora.extract.rank_preview.chart.spectra) and lora.extract.rank_preview.button.isEnabled())
    lora.extract.run_button.click()
    wait(lambda: not window.state.jobs.active() and "Adapter:" in lora.extract.report.text())
    settle()  # the page scrolls to the report once it is laid out; back up to the models and the rank
    lora.extract.scroll.verticalScrollBar().setValue(0)  # the models, the rank and its preview
    shot("lora", "lora")
    shot("jobs", "jobs")

    try_page = window.try_page
    try_page.set_models([str(model) for model in storytellers])
    try_page.prompt.setPlainText("the cat sat on the")
    try_page.max_new_tokens.setValue(16)
    window.show_page("try")
    try_page.generate_button.click()
    wait(lambda: try_page.status.text() == "Done.")
    shot("try", "try")

    window.jobs.select(window.state.jobs.records[-2].key)  # the extraction, not the generation
    shot("hardware", "hardware")
    settle(1.0)
    shot("settings", "settings")
    for page in ("merge", "lora", "jobs", "models"):
        shot(page, f"{page}-1024x700", SMALL_SIZE)

    apply_scheme("dark")
    for page in ("merge", "lora", "jobs"):
        shot(page, f"{page}-dark")
    apply_scheme("system")
    window.state.jobs.shutdown()


if __name__ == "__main__":
    sys.exit(main())
