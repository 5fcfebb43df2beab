"""`python -m proxy` is the same as the `shrink-proxy` command."""

from proxy.cli import main

raise SystemExit(main())
