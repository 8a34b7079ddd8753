"""The main window: a page list on the left, the pages on the right, menus and shortcuts.

Pages talk to each other through `AppState` signals (Models → Merge/LoRA, Welcome → Merge, any page → Jobs).
Closing with a job running asks first, then cancels it and waits for it to stop cleanly.
"""

from __future__ import annotations

from PySide6.QtCore import QSettings, Qt
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import (
    QHBoxLayout,
    QListWidget,
    QListWidgetItem,
    QMainWindow,
    QMessageBox,
    QStackedWidget,
    QWidget,
)

from guiapp.ui.pages.experts import ExpertsPage
from guiapp.ui.pages.hardware import HardwarePage
from guiapp.ui.pages.jobs import JobsPage
from guiapp.ui.pages.lab import LabPage
from guiapp.ui.pages.lora import LoraPage
from guiapp.ui.pages.merge import MergePage
from guiapp.ui.pages.models import ModelsPage
from guiapp.ui.pages.settings import SettingsPage
from guiapp.ui.pages.try_page import TryPage
from guiapp.ui.state import AppState
from guiapp.ui.text import error_text
from guiapp.ui.welcome import WelcomePage
from guiapp.ui.widgets.charts import load_chart_library

PAGES = (("welcome", "Start"), ("models", "Models"), ("merge", "Merge"), ("lora", "LoRA"), ("experts", "Experts"),
         ("try", "Try"), ("lab", "Lab"), ("jobs", "Jobs"), ("hardware", "Hardware"), ("settings", "Settings"))
SHUTDOWN_TIMEOUT_SECONDS = 15


class MainWindow(QMainWindow):
    def __init__(self, state: AppState) -> None:
        super().__init__()
        self.state = state
        self._help_viewers: dict[str, QWidget] = {}  # the open Help pages, by document
        self.setWindowTitle("Mergesmith")
        self.welcome = WelcomePage()
        self.models = ModelsPage(state)
        self.merge = MergePage(state)
        self.lora = LoraPage(state)
        self.experts = ExpertsPage(state)
        self.try_page = TryPage(state)
        self.lab = LabPage(state, self.merge)
        self.jobs = JobsPage(state)
        self.hardware = HardwarePage(state)
        self.settings = SettingsPage(state)
        self.pages = {"welcome": self.welcome, "models": self.models, "merge": self.merge, "lora": self.lora,
                      "experts": self.experts, "try": self.try_page, "lab": self.lab, "jobs": self.jobs,
                      "hardware": self.hardware, "settings": self.settings}

        self.nav = QListWidget(accessibleName="Pages")
        self.nav.setFixedWidth(170)
        self.nav.setSpacing(3)
        font = self.nav.font()
        font.setPointSizeF(font.pointSizeF() * 1.15)
        self.nav.setFont(font)
        self.stack = QStackedWidget()
        for key, label in PAGES:
            item = QListWidgetItem(label)
            item.setData(Qt.ItemDataRole.UserRole, key)
            self.nav.addItem(item)
            self.stack.addWidget(self.pages[key])
        self.nav.currentRowChanged.connect(self.stack.setCurrentIndex)
        central = QWidget()
        layout = QHBoxLayout(central)
        layout.addWidget(self.nav)
        layout.addWidget(self.stack, 1)
        self.setCentralWidget(central)
        self._build_menus()
        self.statusBar().showMessage(
            "Loading the merge engine (PyTorch) in the background: recipes are checked once it is there…")

        self.welcome.go_to.connect(self._start_on)
        self.welcome.search_typed.connect(self._search_from_start)
        self.welcome.samples_ready.connect(self._sample_ready)
        self.settings.show_welcome.connect(lambda: self.show_page("welcome"))
        state.use_as_base.connect(lambda ref: (self.merge.set_base(ref), self.show_page("merge")))
        state.add_to_merge.connect(lambda ref: (self.merge.add_model(ref), self.show_page("merge")))
        state.extract_from.connect(lambda model, base: (self.lora.set_extract_models(model, base or None),
                                                        self.show_page("lora")))
        for page in (self.merge, self.lora, self.experts):
            page.job_submitted.connect(self._job_submitted)
        self.jobs.retried.connect(self.jobs.select)
        self.lab.use_recipe.connect(lambda document: (self.merge.apply_document(document), self.show_page("merge")))
        self.lab.try_models.connect(lambda folders: (self.try_page.set_models(folders), self.show_page("try")))
        self.jobs.sign_in_requested.connect(self.show_sign_in)
        self.jobs.offline_requested.connect(self.settings.offline_check.setChecked)
        # Statuses follow what they describe: a sign-in or offline switch re-checks the forms (a gated model's
        # error goes once it can be read); the Start page follows the sample merge it prepared.
        for changed in (self.settings.signed_in, self.settings.offline_check.toggled):
            changed.connect(lambda *_: (self.merge.recheck(), self.lora.recheck()))
        state.jobs.record_changed.connect(lambda key: self.welcome.follow_job(state.jobs.record(key)))
        state.jobs.record_changed.connect(lambda _: self._update_jobs_label())
        state.jobs.record_added.connect(lambda _: self._update_jobs_label())
        state.methods_ready.connect(lambda _: self.statusBar().showMessage("Ready.", 5000))
        state.methods_ready.connect(lambda _: load_chart_library(self))  # after torch: both load NumPy
        state.methods_failed.connect(lambda e: self.statusBar().showMessage(
            f"The merge engine could not be loaded: {error_text(e)}"))
        self._restore()
        self._update_jobs_label()

    def _build_menus(self) -> None:
        file_menu = self.menuBar().addMenu("&File")
        self._action(file_menu, "&New merge", QKeySequence.StandardKey.New, self.new_merge)
        self._action(file_menu, "&Import recipe…", QKeySequence.StandardKey.Open,
                     lambda: (self.show_page("merge"), self.merge.import_recipe()))
        self._action(file_menu, "&Export recipe…", QKeySequence.StandardKey.Save,
                     lambda: (self.show_page("merge"), self.merge.export_recipe()))
        self._action(file_menu, "&Run the job on this page", QKeySequence("Ctrl+R"), self.run_current)
        file_menu.addSeparator()
        self._action(file_menu, "&Quit", QKeySequence.StandardKey.Quit, self.close)
        edit = self.menuBar().addMenu("&Edit")
        self._action(edit, "&Undo recipe change", QKeySequence.StandardKey.Undo,
                     lambda: self._recipe_step(self.merge.undo, "Nothing to undo."))
        self._action(edit, "&Redo recipe change", QKeySequence.StandardKey.Redo,
                     lambda: self._recipe_step(self.merge.redo, "Nothing to redo."))
        go = self.menuBar().addMenu("&Go")
        self._action(go, "&Find models", QKeySequence.StandardKey.Find,
                     lambda: (self.show_page("models"), self.models.focus_search()))
        for number, (key, label) in enumerate(PAGES, start=1):  # Ctrl+1 … Ctrl+9, then Ctrl+0 for the tenth
            self._action(go, label, QKeySequence(f"Ctrl+{number % 10}"), lambda _=False, k=key: self.show_page(k))
        help_menu = self.menuBar().addMenu("&Help")
        self._action(help_menu, "&Getting started", QKeySequence.StandardKey.HelpContents,
                     lambda: self.show_help("Getting started", "getting-started.md"))
        self._action(help_menu, "&Recipe format", None, lambda: self.show_help("Recipe format", "recipes.md"))
        self._action(help_menu, "&About Mergesmith", None, self._about)

    def _action(self, menu, text: str, shortcut, slot) -> QAction:
        action = QAction(text, self)
        if shortcut is not None:
            action.setShortcut(shortcut)
        action.triggered.connect(slot)
        menu.addAction(action)
        return action

    def _about(self) -> None:
        from guiapp.ui.about import AboutDialog  # only when asked for

        AboutDialog(self).exec()

    def show_help(self, title: str, document: str) -> None:
        """Show a page of Help (docs/`document`) in a window of its own, beside this one (one window a page)."""
        from guiapp.ui.help_viewer import HelpViewer  # only when asked for

        viewer = self._help_viewers.get(document)
        if viewer is None:
            viewer = self._help_viewers[document] = HelpViewer(title, document, self)
        viewer.show()
        viewer.raise_()
        viewer.activateWindow()

    def new_merge(self) -> None:
        """File → New merge: an empty recipe on the Merge page; Edit → Undo brings the previous one back."""
        self.show_page("merge")
        self.merge.new_merge()
        self.statusBar().showMessage("Started a new merge. Edit → Undo recipe change (Ctrl+Z) brings the previous "
                                     "recipe back.", 10_000)

    def _recipe_step(self, step, nothing: str) -> None:
        if self.current_page() != "merge":  # the recipe is not in sight: changing it unseen would surprise
            self.statusBar().showMessage("Undo and redo change the recipe on the Merge page.", 5000)
        elif not step():
            self.statusBar().showMessage(nothing, 5000)

    def run_current(self) -> None:
        """Ctrl+R: run what the current page prepares (the merge, the extraction or the application)."""
        page = self.current_page()
        if page == "merge":
            self.merge.run_button.click()  # as the button does: nothing while it is disabled with its reason
        elif page == "lora":
            self.lora.tabs.currentWidget().run_button.click()
        elif page == "experts":
            self.experts.run_button.click()

    def show_sign_in(self) -> None:
        """The Settings page with its access token field ready for typing (an explanation's "Sign in…")."""
        self.show_page("settings")
        self.settings.token_edit.setFocus()

    def show_page(self, key: str) -> None:
        self.nav.setCurrentRow([k for k, _ in PAGES].index(key))

    def _start_on(self, key: str) -> None:
        """A page chosen on the Start page, ready for its first step (the Models page: typing a search)."""
        self.show_page(key)
        if key == "models":
            self.models.focus_search()

    def _search_from_start(self, typed: str) -> None:
        """Keys typed in the Start page's search box: the search goes on in the Models page's box, which takes the
        keyboard (what was there before is replaced by the first key)."""
        if self.current_page() != "models":
            self._start_on("models")
        self.models.hub.search_edit.insert(typed)

    def current_page(self) -> str:
        return PAGES[self.nav.currentRow()][0]

    def _sample_ready(self, document: dict, output: str) -> None:
        replaced = self.merge.load_sample(document, output)
        self.show_page("merge")
        if replaced:
            self.statusBar().showMessage("The sample recipe took the place of yours. Edit → Undo recipe change "
                                         "(Ctrl+Z) brings yours back.", 15_000)
        # The sample models stay in the library (every picker, the Models page) for the user's own merges.
        self.state.add_folders([document["base_model"]] + [entry["model"] for entry in document["models"]])

    def _job_submitted(self, key: str) -> None:
        self.jobs.select(key)
        self.show_page("jobs")

    def _update_jobs_label(self) -> None:
        active = len(self.state.jobs.active())
        self.nav.item([k for k, _ in PAGES].index("jobs")).setText(f"Jobs ({active} active)" if active else "Jobs")

    # --- window state and closing ---------------------------------------------------------------------------

    def _restore(self) -> None:
        settings = QSettings()
        if not self.restoreGeometry(settings.value("window/geometry", b"")):
            self.resize(1280, 820)
        self.restoreState(settings.value("window/state", b""))
        first_run = not settings.value("window/welcomed", False, type=bool)
        self.show_page("welcome" if first_run else settings.value("window/page", "merge"))

    def _save(self) -> None:
        settings = QSettings()
        settings.setValue("window/geometry", self.saveGeometry())
        settings.setValue("window/state", self.saveState())
        settings.setValue("window/page", self.current_page())
        settings.setValue("window/welcomed", True)
        self.merge.save_form()
        self.lora.save_form()
        self.experts.save_form()
        self.try_page.save_form()

    def closeEvent(self, event) -> None:  # noqa: N802 - Qt's name
        active = self.state.jobs.active()
        if active:
            box = QMessageBox(QMessageBox.Icon.Question, "A job is still running",
                              f"{active[0].title} is still running"
                              + (f" ({len(active) - 1} more waiting)" if len(active) > 1 else "")
                              + ".\nQuit anyway? The job is cancelled and leaves nothing half-written behind.",
                              QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No, self)
            box.button(QMessageBox.StandardButton.Yes).setText("Cancel the job and quit")
            box.button(QMessageBox.StandardButton.No).setText("Keep running")
            box.setDefaultButton(QMessageBox.StandardButton.No)
            if box.exec() != QMessageBox.StandardButton.Yes:
                event.ignore()
                return
        self._save()
        self.statusBar().showMessage("Stopping…")
        self.state.jobs.shutdown(SHUTDOWN_TIMEOUT_SECONDS)
        event.accept()
