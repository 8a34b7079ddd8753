"""Starting the window: QApplication, the qasync event loop, the main window, then the slow loading.

Nothing here (or in what it imports at module level) imports torch: the window is shown first and the method
registry, torch and the capability probe load on a worker thread afterwards.
"""

from __future__ import annotations

import atexit
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from PySide6.QtCore import QSettings, QTimer, QtMsgType, qInstallMessageHandler
from PySide6.QtGui import QIcon
from PySide6.QtWidgets import QApplication

from guiapp import __version__
from guiapp.ui.garbage import collect_garbage_on_ui_thread
from guiapp.ui.resource_files import icon_file
from guiapp.ui.wheel_guard import install_wheel_guard
from guiapp.ui.widgets.wrapping_label import keep_clipboard_clean


def create_window(argv: Sequence[str] | None = None, *, keep_history: bool = True):
    """The application object and the (not yet shown) main window, with saved settings applied."""
    from guiapp.ui.main_window import MainWindow
    from guiapp.ui.pages.settings import apply_offline_setting, apply_saved_settings
    from guiapp.ui.state import AppState
    from guiapp.ui.theme import style_sheet_held_back

    app = QApplication.instance() or QApplication(list(argv if argv is not None else sys.argv))
    app.setOrganizationName("Mergesmith")
    app.setApplicationName("Mergesmith")
    app.setApplicationVersion(__version__)
    app.setDesktopFileName("mergesmith")  # lets desktops match the window to the menu entry and its icon
    collect_garbage_on_ui_thread(app)
    install_wheel_guard(app)  # before the window is built, so every value widget is polished through it
    keep_clipboard_clean(app)
    icon = icon_file(256)
    if icon.is_file():
        app.setWindowIcon(QIcon(str(icon)))
    apply_saved_settings()
    apply_offline_setting()
    with style_sheet_held_back():
        window = MainWindow(AppState(keep_history=keep_history))
    return app, window


# Qt's messages that say nothing a user can act on: platform plugins (offscreen, some X11 window managers) note
# that they ignore a size hint every time a window is shown.
QUIET_QT_MESSAGES = ("does not support propagateSizeHints",)


def quiet_qt_messages() -> None:
    """From now on print Qt's messages to stderr as Qt does, except those in QUIET_QT_MESSAGES (for the app and
    the self-test; the tests keep pytest-qt's capture)."""
    qInstallMessageHandler(_qt_message)


def _qt_message(kind: QtMsgType, context, message: str) -> None:
    if not any(quiet in message for quiet in QUIET_QT_MESSAGES):
        print(message, file=sys.stderr)


def run_app(argv: Sequence[str] | None = None) -> int:
    """Show the window and run until it is closed; returns the exit code. When Mergesmith is already open for this
    user, bring that window to the front instead and return 0."""
    import asyncio  # not needed to show the window

    import qasync

    from guiapp.ui.single_instance import SingleInstance, ask_running_instance_to_show

    quiet_qt_messages()
    QApplication.instance() or QApplication(list(argv if argv is not None else sys.argv))
    if ask_running_instance_to_show():
        print("Mergesmith is already open: its window was brought to the front.")
        return 0
    app, window = create_window(argv)
    SingleInstance(window)
    sys.excepthook = lambda kind, error, trace: show_unexpected(window, error)
    loop = qasync.QEventLoop(app)
    asyncio.set_event_loop(loop)
    window.show()
    QTimer.singleShot(0, window.state.start_loading)  # after the first paint
    with loop:
        loop.run_forever()
    return 0


def exit_now(code: int) -> NoReturn:
    """End the process once the window has closed. By then the jobs are stopped and the history and settings are
    saved; what is left is the interpreter taking torch and Qt apart object by object, 2–5 s with nothing on
    screen. The settings are written out, the exit handlers run and the output is flushed, then the process ends."""
    QSettings().sync()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed terminal or pipe: nothing more can be said there
            pass
    os._exit(code)


def show_unexpected(parent, error: BaseException) -> None:
    """A bug of ours, reported as an explanation (the traceback behind Details) instead of a console dump."""
    from PySide6.QtWidgets import QMessageBox

    from guiapp.system.explain import explain

    explanation = explain(error)
    box = QMessageBox(QMessageBox.Icon.Warning, "Something went wrong", explanation.title, parent=parent)
    box.setInformativeText(f"{explanation.what}\n\n{explanation.fix}\n\nYour jobs keep running; "
                           "the window may need a restart if this page stops responding.")
    box.setDetailedText(explanation.raw)
    box.exec()
