from fathom.cli.main import main

raise SystemExit(main())
