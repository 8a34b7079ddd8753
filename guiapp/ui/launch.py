"""Opening the window from the `mergesmith` command: first making sure this session can show one (Qt would abort
with a cryptic plugin error), then the window or its self-test."""

from __future__ import annotations

import os
import sys

from guiapp.cli.process import EXIT_FAILED


def launch_window(self_test: bool = False) -> int:
    """Open the window (or, with `self_test`, run the self-test through it) and return the exit code; a session that
    cannot show a window gets the reason printed and exit code 1."""
    if self_test and _display_left_over():
        # The self-test opens the window offscreen when there is no display, and so when the one named is gone.
        print(f"{_display_gone()} The self-test runs without a screen.", file=sys.stderr)
        os.environ.pop("DISPLAY")
    # Only a display it cannot use stops the self-test (without one, it opens the window offscreen).
    problem = _display_problem() if not self_test or os.environ.get("DISPLAY") else None
    if problem:
        print(problem, file=sys.stderr)
        return EXIT_FAILED
    if self_test:
        from guiapp.ui.self_test import run_self_test  # Qt only loads when the window is wanted

        return run_self_test()
    from guiapp.ui.app import exit_now, run_app

    exit_now(run_app())


def _display_problem() -> str | None:
    """Why the window cannot open on this Linux session (Qt would abort with a cryptic plugin error), or None."""

    if not sys.platform.startswith("linux") or os.environ.get("QT_QPA_PLATFORM") or os.environ.get("WAYLAND_DISPLAY"):
        return None
    if not os.environ.get("DISPLAY"):
        return ("Mergesmith's window needs a desktop session, and none was found (no DISPLAY or WAYLAND_DISPLAY).\n"
                f"{_WITHOUT_A_SCREEN}")
    if _display_left_over():
        return f"{_display_gone()}\n{_WITHOUT_A_SCREEN}"
    from guiapp.system.display_libraries import install_advice, missing_libraries, xcb_plugin

    plugin = xcb_plugin()
    try:
        missing = missing_libraries(plugin) if plugin is not None else []
    except (OSError, ValueError):  # an unreadable plugin: let Qt try, and say what it finds
        return None
    if missing:
        return (f"Mergesmith's window needs system libraries that are not installed: {', '.join(missing)}.\n"
                f"Qt's X11 support loads them at start-up and cannot open a window without them. Install them:\n"
                f"{install_advice(missing)}\nthen start Mergesmith again.")
    return None


_WITHOUT_A_SCREEN = ("Start it from your desktop; on a machine without a screen, run it on a virtual one with "
                     "`xvfb-run -a mergesmith` (Debian/Ubuntu package xvfb). The command line needs no display: "
                     "`mergesmith --help` lists the jobs it runs.")


def _display_left_over() -> bool:
    """True on Linux when DISPLAY names an X display that does not answer (left from an ended session, or copied
    from another machine): Qt would abort the process, blaming a library that is installed."""

    from guiapp.system.display_libraries import display_answers

    display = os.environ.get("DISPLAY")
    return (sys.platform.startswith("linux") and bool(display) and not os.environ.get("QT_QPA_PLATFORM")
            and not os.environ.get("WAYLAND_DISPLAY") and not display_answers(display))


def _display_gone() -> str:

    return (f"Mergesmith's window needs a desktop session, and the display DISPLAY={os.environ.get('DISPLAY')} "
            "names does not answer: no X server runs there (it may be left from a session that has ended).")
