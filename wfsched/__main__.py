"""`python -m wfsched` runs the CLI (tests use it to run the real daemon)."""

from wfsched.cli.main import main

main()
