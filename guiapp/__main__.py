from guiapp.cli import main

raise SystemExit(main())
