"""Starting Mergesmith: without a command the window opens, with one (`mergesmith merge …`) the command runs.

The one place that chooses between the two, so the command line never imports the window.
"""

from __future__ import annotations

from collections.abc import Sequence

from guiapp.cli.main import build_parser, run_command
from guiapp.cli.process import leave_a_deleted_working_folder
from guiapp.system.memory import configure_heaps, skip_the_collection_at_exit
from guiapp.ui.launch import launch_window


def main(argv: Sequence[str] | None = None) -> int:
    """Parse `argv` (the process's arguments by default) and open the window or run the command; the exit code."""
    configure_heaps()
    skip_the_collection_at_exit()
    leave_a_deleted_working_folder()
    args = build_parser().parse_args(argv)
    if getattr(args, "handler", None) is None:
        return launch_window(self_test=args.self_test)
    return run_command(args)


if __name__ == "__main__":
    raise SystemExit(main())
