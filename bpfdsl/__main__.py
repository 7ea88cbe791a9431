"""``python -m bpfdsl`` runs the command line."""

from bpfdsl.cli import run

run()
