"""`python -m wfsched` runs the CLI (tests use it to run the real daemon)."""

from wfsched.entry import main

main()
