from rlhls.cli import main

raise SystemExit(main())
