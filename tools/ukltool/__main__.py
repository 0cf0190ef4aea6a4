from ukltool.cli import main

raise SystemExit(main())
