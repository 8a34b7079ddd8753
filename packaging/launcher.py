"""The bundled executable's entry point: `mergesmith` with no command opens the window, with one it is the CLI.

A frozen app has no interpreter to run `python -m MODULE`, yet Mergesmith starts helper processes that way
(the capability probe runs as `sys.executable -m guiapp.system.probe_child`, so a driver crash cannot take the
window down). Here `sys.executable` is this executable, so it does what `python -m` would, for Mergesmith's own
modules only.
"""

import runpy
import sys


def main() -> int:
    if len(sys.argv) >= 3 and sys.argv[1] == "-m" and sys.argv[2].startswith("guiapp."):
        module = sys.argv[2]
        sys.argv = [sys.argv[0], *sys.argv[3:]]
        runpy.run_module(module, run_name="__main__", alter_sys=True)
        return 0

    from guiapp.__main__ import main as cli_main

    return cli_main()


if __name__ == "__main__":
    sys.exit(main())
