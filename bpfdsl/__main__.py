"""``python -m bpfdsl`` runs the command line."""

from bpfdsl.cli import main

raise SystemExit(main())
