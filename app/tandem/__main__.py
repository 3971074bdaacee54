"""`python -m tandem`: the same as the `tandem` command."""

from tandem.cli.main import main

raise SystemExit(main())
