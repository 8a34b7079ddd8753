"""The window under test: real widgets (offscreen), the real engine on small generated models, the real probe.

Each test gets its own config folder (jobs history) and QSettings file, so nothing leaks between tests or into
the user's settings. The window loads the real method registry (torch) but is handed the probe result made
once per session, so tests do not each run the probe child. `window` is a fresh window for each test;
`shared_window` is one window for a module's tests that need no fresh one (see its docstring).
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest
from PySide6.QtCore import QEvent, QSettings
from PySide6.QtWidgets import QApplication, QWidget
from pytestqt.qtbot import QtBot

from guiapp.system.probe import Check, ProbeResult
from guiapp.ui.widgets import layer_chart
from tests.support.fixtures import hub_env, hub_server  # noqa: F401 - fixtures for the search tests


@pytest.fixture(scope="session")
def chart_shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the chart tests save their screenshots for a person to look at: $MERGESMITH_CHART_SHOTS, else a folder
    of this run's pytest temporary tree (pytest keeps the last three runs' and removes older ones)."""
    chosen = os.environ.get("MERGESMITH_CHART_SHOTS")
    folder = Path(chosen) if chosen else tmp_path_factory.mktemp("charts")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture(autouse=True)
def isolated_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MERGESMITH_CONFIG_DIR", str(tmp_path / "config"))
    _empty_settings_in(tmp_path)


def _empty_settings_in(folder: Path) -> None:
    """QSettings read and written in `folder`, empty."""
    QSettings.setDefaultFormat(QSettings.Format.IniFormat)
    QSettings.setPath(QSettings.Format.IniFormat, QSettings.Scope.UserScope, str(folder / "qsettings"))
    QSettings().clear()


def _built_window(qtbot: QtBot, probe: ProbeResult):
    """The main window built like `run_app` builds it, shown at 1280 x 860, its methods loaded, with `probe`."""
    from guiapp.ui.app import create_window

    # An earlier window closed and marked for deletion goes at Qt's next event loop: here, before this window is
    # built, or it would still be alive (~1,800 widgets) while this one is built and styled, and every style sheet
    # set now would repolish it too.
    QApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
    _, window = create_window([])
    window.resize(1280, 860)
    window.show()
    window.state.start_loading(probe=False)
    qtbot.waitUntil(lambda: window.state.methods is not None, timeout=60_000)
    window.state.set_probe(probe)
    return window


@pytest.fixture
def make_window(qtbot, probed):
    """Builds the main window like `run_app` does, methods loaded, with the session's probe (or `probe`)."""
    windows = []

    def make(probe: ProbeResult | None = None):
        window = _built_window(qtbot, probe or probed)
        qtbot.addWidget(window)
        windows.append(window)
        return window

    yield make
    for window in windows:
        window.state.jobs.shutdown(10)


@pytest.fixture
def window(make_window):
    return make_window()


@dataclasses.dataclass(frozen=True)
class _Shared:
    """A module's window and what `shared_window` puts back before each test."""

    window: object
    recipe: dict
    output: str
    palette: object
    scheme: object
    lora_forms: dict


def _close_open_windows_but(window) -> None:
    """Close every popup and every modal dialog (what Qt says is open, one at a time), then every other visible
    window the shared window owns. Not a walk over all top-level widgets: those include widgets earlier tests made
    without a parent (a chart on its own) and left to be deleted, and touching one of those crashed the test
    process twice."""
    for _ in range(100):  # one that refuses to close must not hold the test here
        if (popup := QApplication.activePopupWidget()) is not None:
            popup.close()
        elif (modal := QApplication.activeModalWidget()) is not None and modal is not window:
            modal.close()
        else:
            break
    for child in window.findChildren(QWidget):
        if child.isWindow() and child.isVisible():
            child.close()


@pytest.fixture(scope="module")
def _module_window(request, qapp, probed, tmp_path_factory: pytest.TempPathFactory):
    """The window of `shared_window`, built once per module as `make_window` builds one, with a settings and
    config folder of the module's own (the tests' own `isolated_settings` folders take over for each test)."""
    folder = tmp_path_factory.mktemp("shared-window")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MERGESMITH_CONFIG_DIR", str(folder / "config"))
        _empty_settings_in(folder)
        window = _built_window(QtBot(request), probed)
        app = QApplication.instance()
        lora = window.lora
        yield _Shared(window, window.merge.recipe.copy(), window.merge.output_edit.text(), app.palette(),
                      app.styleHints().colorScheme(),
                      {"extract": lora.extract.form_values(), "apply": lora.apply.form_values()})
        window.state.jobs.shutdown(10)
        window.close()
        window.deleteLater()


@pytest.fixture
def shared_window(_module_window, qtbot):
    """One main window for all the tests of a module that use it (a window costs ~0.3–0.7 s of CPU to build),
    put back before each test into the state a fresh window starts in, as far as a test may rely on it:

    - the Start page shown, the window 1280 × 860 and active, no other window, dialog, menu or popup open, no
      widget focused;
    - the colour scheme the system's (Settings shows "system");
    - the Merge page's recipe the one a fresh window shows, with its output folder, Replace unticked and no
      typed edit of the YAML pending, its Advanced section closed (Edit → Undo may still hold earlier tests' steps),
      and nothing shown of an earlier recipe's check (output sizes, compatibility, the charts' layer count);
    - the LoRA page's Extract tab in front, its Extract and Apply forms as the window showed them when built;
    - the settings and config folder the test's own, empty (`isolated_settings`): what the test saves stays there.

    A test using it must not run jobs, change the probe, add to the model library, sign in or go offline, or
    change what the window read from the settings when it was built; other pages' widgets (the LoRA page's
    fields, an opened section, a selection, a scroll position) it leaves as it found them, or no other test of the
    module may depend on them. Tests that need any of this use `window`."""
    shared = _module_window
    window = shared.window
    _close_open_windows_but(window)
    page = window.merge
    page.recipe_panel.flush()
    page.overwrite_check.setChecked(False)
    page.advanced.advanced_button.setChecked(False)
    if page.output_edit.text() != shared.output:
        page.output_edit.setText(shared.output)
    # What the last check of an earlier test's recipe showed stays until a check brings something else, and a
    # test's own edit cancels the check the reset starts: clear it, as a window that never checked a recipe shows.
    page.output.refresh_capabilities(window.state.probe, shared.recipe.get("out_dtype"), {})
    page.models_box.show_verdict(None)
    layer_chart.set_layer_count(0)
    page.apply_document(shared.recipe)  # also when unchanged: the YAML view may show a rejected edit
    _put_back_lora_forms(window.lora, shared.lora_forms)
    settings = window.settings
    app = QApplication.instance()
    if settings.theme_combo.currentData() != "system" or app.palette() != shared.palette \
            or app.styleHints().colorScheme() != shared.scheme:
        settings.theme_combo.blockSignals(True)
        settings.theme_combo.setCurrentIndex(settings.theme_combo.findData("system"))
        settings.theme_combo.blockSignals(False)
        from guiapp.ui.theme import apply_scheme

        apply_scheme("system")
    window.show_page("welcome")
    if window.size().toTuple() != (1280, 860):
        window.resize(1280, 860)
    window.activateWindow()  # as a window just shown is: another test's window may have been the active one
    qtbot.waitUntil(window.isActiveWindow, timeout=5_000)
    if (focused := QApplication.focusWidget()) is not None:
        focused.clearFocus()
    QApplication.processEvents()
    return window


def _put_back_lora_forms(page, forms: dict) -> None:
    """The LoRA page's Extract tab in front and its Extract and Apply forms as `forms` (`form_values` of each, when
    the window was built), every text set, empty ones too (`restore` leaves a field alone when its text is empty)."""
    page.tabs.setCurrentIndex(0)
    extract, apply = forms["extract"], forms["apply"]
    for tab, form in ((page.extract, extract), (page.apply, apply)):
        tab.overwrite.setChecked(False)
        tab.restore(form)
    for set_text, text in ((page.extract.base.set_text, extract["x_base"]),
                           (page.extract.model.set_text, extract["x_model"]),
                           (page.extract.modules.include.setText, extract["include"]),
                           (page.extract.modules.exclude.setText, extract["exclude"]),
                           (page.extract.out.setText, extract["x_out"]),
                           (page.apply.base.set_text, apply["a_base"]),
                           (page.apply.adapter.set_text, apply["a_adapter"]),
                           (page.apply.out.setText, apply["a_out"])):
        set_text(text)


def broken_float16(result: ProbeResult) -> ProbeResult:
    """The probe of a machine whose CPU cannot convert float16 (as some torch builds cannot)."""
    checks = [dataclasses.replace(c, ok=False, error="RuntimeError: \"copy_\" not implemented for 'Half'")
              if (c.device, c.dtype) == ("cpu", "float16") and c.operation.startswith("cast_to_") else c
              for c in result.checks]
    return dataclasses.replace(result, checks=checks)


def with_gpu(result: ProbeResult, device: str = "cuda:0") -> ProbeResult:
    """The probe of this machine plus a GPU `device` that passed every check: a machine this one is not."""
    gpu = {"id": device, "kind": "cuda", "name": "Test GPU", "memory_total": 8_000_000_000,
           "memory_free": 7_000_000_000}
    checks = result.checks + [Check(device, c.dtype, c.operation, c.ok, c.error) for c in result.checks
                              if c.device == "cpu"]
    speeds = result.speeds + [dataclasses.replace(s, device=device) for s in result.speeds if s.device == "cpu"]
    return dataclasses.replace(result, devices=result.devices + [gpu], checks=checks, speeds=speeds)


def wait_for_job(qtbot, window, key: str, timeout: int = 60_000):
    record = window.state.jobs.record(key)
    qtbot.waitUntil(lambda: not record.status.active, timeout=timeout)
    return record
