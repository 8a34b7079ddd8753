"""The Settings page: folders, the Hub token (through huggingface_hub: Mergesmith never stores it), offline
mode and the colour scheme. Choices are kept in QSettings; the token is not."""

from __future__ import annotations

import os

from PySide6.QtCore import QSettings, Signal
from PySide6.QtWidgets import (
    QApplication,
    QCheckBox,
    QComboBox,
    QFileDialog,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLineEdit,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from guiapp.facts.hub import hub_endpoint
from guiapp.jobs import account as hub_account
from guiapp.system.paths import home_dir
from guiapp.ui.background import call_in_background
from guiapp.ui.text import error_text
from guiapp.ui.theme import apply_scheme, set_status_style
from guiapp.ui.widgets.wrapping_label import WrappingLabel

CACHE_KEY, OUTPUT_KEY, OFFLINE_KEY, THEME_KEY = "paths/hf_cache", "paths/output", "hub/offline", "ui/theme"
FOLLOWS_DESKTOP_SCHEME = "mergesmith_follows_desktop_scheme"  # an application property, set once it does


def apply_saved_settings() -> None:
    """Apply what must be in place before the Hub client is imported or the window drawn (called at start)."""
    settings = QSettings()
    cache = settings.value(CACHE_KEY, "")
    if cache and "HF_HUB_CACHE" not in os.environ:
        os.environ["HF_HUB_CACHE"] = cache
    apply_scheme(settings.value(THEME_KEY, "system"))
    app = QApplication.instance()
    if not app.property(FOLLOWS_DESKTOP_SCHEME):  # once per application: each apply restyles every widget
        app.setProperty(FOLLOWS_DESKTOP_SCHEME, True)
        app.styleHints().colorSchemeChanged.connect(_follow_desktop_scheme)


def _follow_desktop_scheme(_scheme) -> None:
    """The desktop switched between light and dark: follow it (a forced choice is applied again as is)."""
    apply_scheme(QSettings().value(THEME_KEY, "system"))


def apply_offline_setting() -> None:
    """Hand the saved offline choice to the one place that decides; without one, the environment decides."""
    settings = QSettings()
    hub_account.choose_offline(settings.value(OFFLINE_KEY, type=bool) if settings.contains(OFFLINE_KEY) else None)


class SettingsPage(QWidget):
    show_welcome = Signal()
    signed_in = Signal()  # a token was accepted: checks that failed for want of access can pass now

    def __init__(self, state, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.state = state
        settings = QSettings()

        folders = QGroupBox("Folders")
        form = QFormLayout(folders)
        self.output_edit = QLineEdit(settings.value(OUTPUT_KEY, str(home_dir() / "Mergesmith")),
                                     accessibleName="Default output folder")
        self.output_edit.editingFinished.connect(lambda: QSettings().setValue(OUTPUT_KEY, self.output_edit.text()))
        form.addRow("Default output folder", self._with_browse(self.output_edit, OUTPUT_KEY))
        self.cache_edit = QLineEdit(settings.value(CACHE_KEY, ""), accessibleName="Model cache folder")
        self.cache_edit.setPlaceholderText(_current_cache())
        self.cache_edit.editingFinished.connect(lambda: QSettings().setValue(CACHE_KEY, self.cache_edit.text()))
        form.addRow("Model cache folder", self._with_browse(self.cache_edit, CACHE_KEY))
        form.addRow("", WrappingLabel("Shared with other Hugging Face tools. A new cache folder is used from the next "
                               "start of Mergesmith."))

        hub = QGroupBox("Hugging Face Hub")
        form = QFormLayout(hub)
        self.account = WrappingLabel("Checking…")
        form.addRow("Account", self.account)
        self.token_edit = QLineEdit(echoMode=QLineEdit.EchoMode.Password, accessibleName="Access token",
                                    placeholderText=f"hf_… (from {_hub_address()}/settings/tokens)")
        self.sign_in_button = QPushButton("Sign in")
        self.sign_in_button.clicked.connect(self.sign_in)
        self.token_edit.returnPressed.connect(self.sign_in)
        self.sign_out_button = QPushButton("Sign out", enabled=False)  # until a stored token is found
        self.sign_out_button.clicked.connect(self.sign_out)
        row = QHBoxLayout()
        row.addWidget(self.token_edit, 1)
        row.addWidget(self.sign_in_button)
        row.addWidget(self.sign_out_button)
        form.addRow("Access token", row)
        form.addRow("", WrappingLabel("Needed for gated and private models. The token is kept by huggingface_hub "
                               "(shared with the other Hugging Face tools on this computer), never in Mergesmith's files."))
        self.offline_check = QCheckBox("Work offline (use only local folders and downloaded models)")
        self.offline_source = WrappingLabel()
        self._show_offline()
        self.offline_check.toggled.connect(self.set_offline)
        form.addRow("", self.offline_check)
        form.addRow("", self.offline_source)

        look = QGroupBox("Appearance and start")
        form = QFormLayout(look)
        self.theme_combo = QComboBox(accessibleName="Colour scheme")
        for label, key in (("Follow the system", "system"), ("Light", "light"), ("Dark", "dark")):
            self.theme_combo.addItem(label, key)
        self.theme_combo.setCurrentIndex(max(0, self.theme_combo.findData(settings.value(THEME_KEY, "system"))))
        self.theme_combo.currentIndexChanged.connect(self._theme_changed)
        form.addRow("Colour scheme", self.theme_combo)
        welcome = QPushButton("Show the welcome again")
        welcome.clicked.connect(self.show_welcome)
        welcome_row = QHBoxLayout()
        welcome_row.addWidget(welcome)
        welcome_row.addStretch()
        form.addRow("", welcome_row)
        form.addRow("", WrappingLabel("The window's size, position and last page are restored at each start."))

        layout = QVBoxLayout(self)
        for group in (folders, hub, look):
            layout.addWidget(group)
        layout.addStretch()
        self._account_checked = False

    def showEvent(self, event) -> None:  # noqa: N802 - Qt's name
        # The Hub is asked who the token belongs to only when the page is first opened, not at start.
        super().showEvent(event)
        if not self._account_checked:
            self._account_checked = True
            self.refresh_account()

    def _with_browse(self, edit: QLineEdit, key: str) -> QWidget:
        browse = QPushButton("Browse…")

        def choose() -> None:
            folder = QFileDialog.getExistingDirectory(self, "Choose a folder", edit.text() or edit.placeholderText())
            if folder:
                edit.setText(folder)
                QSettings().setValue(key, folder)

        browse.clicked.connect(choose)
        row = QWidget()
        layout = QHBoxLayout(row)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(edit, 1)
        layout.addWidget(browse)
        return row

    def refresh_account(self) -> None:
        call_in_background(hub_account.current_account,
                           lambda answer: self._show_account(answer.words, can_sign_out=answer.can_sign_out),
                           # a token is there but failed (rejected, offline): signing out stays possible
                           lambda e: self._show_account(getattr(e, "message", str(e)), True, can_sign_out=True))

    def _show_account(self, text: str, problem: bool = False, can_sign_out: bool | None = None) -> None:
        """Show the account line; `can_sign_out` (None: unchanged) enables Sign out, only for a stored token."""
        self.account.setText(text)
        set_status_style(self.account, "problem" if problem else None)
        if can_sign_out is not None:
            self.sign_out_button.setEnabled(can_sign_out)

    def sign_in(self) -> None:
        token = self.token_edit.text().strip()
        if not token:
            self._show_account("Paste an access token first.", True)
            return
        self.account.setText("Signing in…")
        call_in_background(lambda: hub_account.sign_in(token), self._signed_in,
                           lambda e: self._show_account(error_text(e), True))

    def _signed_in(self, user: str) -> None:
        self.token_edit.clear()  # only once accepted: a refused token stays to be corrected
        self._show_account(f"Signed in as {user}", can_sign_out=True)
        self.signed_in.emit()

    def sign_out(self) -> None:
        call_in_background(hub_account.sign_out, lambda _: self.refresh_account(),
                           lambda e: self._show_account(error_text(e), True))

    def set_offline(self, offline: bool) -> None:
        """Make the app offline or online now; a choice equal to what the environment says is not kept, so the
        environment decides again from then on."""
        if offline == hub_account.environment_asks_offline():
            QSettings().remove(OFFLINE_KEY)
        else:
            QSettings().setValue(OFFLINE_KEY, offline)
        apply_offline_setting()
        self._show_offline()

    def _show_offline(self) -> None:
        """The tick box shows the offline mode in force, the line under it where that comes from."""
        state = hub_account.offline_status()
        self.offline_check.blockSignals(True)
        self.offline_check.setChecked(state.offline)
        self.offline_check.blockSignals(False)
        self.offline_source.setText(state.words)
        set_status_style(self.offline_source, "muted")

    def _theme_changed(self) -> None:
        scheme = self.theme_combo.currentData()
        QSettings().setValue(THEME_KEY, scheme)
        apply_scheme(scheme)


def _hub_address() -> str:
    """The Hub in use (HF_ENDPOINT), where tokens are made."""
    return hub_endpoint().split("://", 1)[-1]


def _current_cache() -> str:
    return str(hub_account.model_cache_folder())
