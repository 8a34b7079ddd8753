"""`mergesmith --self-test`: open the window (offscreen when there is no display), run the sample-models merge
through the window's own pages and job runner, check the result, try the merged model on the Try page (a few
tokens: the app carries transformers), and exit 0, or print what failed.

It uses throwaway folders for the samples, the output and the settings, so it never touches the user's files
or history; the packaged app runs it to check an installation.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

METHODS_TIMEOUT_SECONDS = 120
JOB_TIMEOUT_SECONDS = 120


class SelfTestFailed(Exception):
    pass


def run_self_test() -> int:
    if sys.platform.startswith("linux") and not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
        os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    with tempfile.TemporaryDirectory(prefix="mergesmith-self-test-") as folder:
        os.environ["MERGESMITH_CONFIG_DIR"] = str(Path(folder) / "config")
        try:
            _run(Path(folder))
        except SelfTestFailed as failure:
            print(f"Self-test FAILED: {failure}", file=sys.stderr)
            return 1
    print("Self-test passed: the window opened, the sample models were written and merged, the merged model is "
          "complete and generates text.")
    return 0


def _run(folder: Path) -> None:
    from PySide6.QtCore import QSettings

    from guiapp.jobs.runner import JobStatus
    from guiapp.ui.app import create_window, quiet_qt_messages

    # Keep the user's saved window state and settings out of it (and unchanged by it).
    QSettings.setDefaultFormat(QSettings.Format.IniFormat)
    QSettings.setPath(QSettings.Format.IniFormat, QSettings.Scope.UserScope, str(folder / "qsettings"))
    quiet_qt_messages()
    app, window = create_window([sys.argv[0]], keep_history=False)
    started = time.monotonic()
    window.show()
    window.state.start_loading()
    _step("open the window", lambda: window.isVisible(), 10)
    print(f"Window shown in {time.monotonic() - started:.2f} s.")
    _step("load the merge methods (PyTorch)", lambda: window.state.methods is not None, METHODS_TIMEOUT_SECONDS,
          lambda: window.statusBar().currentMessage())
    window.welcome.try_samples(folder / "samples")
    _step("write the sample models and fill in the merge", lambda: bool(window.merge.document.get("models")), 60,
          lambda: window.welcome.status.text())
    key = window.merge.run()
    if key is None:
        raise SelfTestFailed(f"the Merge page did not start the job: {window.merge.run_message.text()}")
    record = window.state.jobs.record(key)
    _step("run the merge", lambda: not record.status.active, JOB_TIMEOUT_SECONDS,
          lambda: "\n".join(record.log[-5:]))
    if record.status != JobStatus.DONE:
        detail = (record.explanation or {}).get("what") or "\n".join(record.log[-5:])
        raise SelfTestFailed(f"the merge ended as {record.status}: {detail}")
    output = Path(record.summary["output"])
    weights = list(output.glob("*.safetensors"))
    if not weights or not (output / "config.json").is_file():
        raise SelfTestFailed(f"the merged model in {output} is incomplete (no weights or config.json)")
    if window.jobs.bar.value() != window.jobs.bar.maximum():
        raise SelfTestFailed("the Jobs page did not show the finished job at 100 %")
    print(f"Merged {record.summary['tensors']} tensors into {output.name} in {record.summary['seconds']:.2f} s.")
    try:  # the charts' library (pyqtgraph) is imported only when a chart first shows: check a bundle carries it
        window.jobs.job_chart.chart.ensure_plot()
    except ImportError as error:
        raise SelfTestFailed(f"the Jobs page cannot draw its chart: {error}") from None
    _try(window, output)
    window.close()
    app.processEvents()


def _try(window, model: Path) -> None:
    """Generate a few tokens from `model` on the Try page, as a user would after the merge."""
    page = window.try_page
    window.show_page("try")
    page.set_models([str(model)])
    page.prompt.setPlainText("Hello")
    page.max_new_tokens.setValue(4)
    page.generate_button.click()
    # Generate is disabled while the run goes and enabled again when it has ended, done or not.
    _step("try the merged model (transformers)", lambda: page.generate_button.isEnabled() and page.status.text()
          not in ("", "Starting…"), JOB_TIMEOUT_SECONDS, lambda: page.status.text())
    produced = page.columns[0].text() if page.columns else ""
    if page.status.text() != "Done." or not produced.strip():
        raise SelfTestFailed(f"the Try page did not generate text: {page.status.text()} "
                             f"{page.columns[0].status.text() if page.columns else ''}".strip())
    print(f"Tried {model.name}: {len(produced)} characters generated.")


def _step(what: str, done: Callable[[], bool], timeout: float, detail: Callable[[], str] | None = None) -> None:
    """Run the event loop until `done()` or `timeout` seconds; a timeout fails the self-test naming `what`."""
    from PySide6.QtCore import QEventLoop
    from PySide6.QtWidgets import QApplication

    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            extra = f" ({detail()})" if detail else ""
            raise SelfTestFailed(f"could not {what} within {timeout:.0f} s{extra}")
        QApplication.processEvents(QEventLoop.ProcessEventsFlag.AllEvents, 50)
        time.sleep(0.01)
