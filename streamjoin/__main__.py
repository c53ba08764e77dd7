from streamjoin.cli import main

raise SystemExit(main())
