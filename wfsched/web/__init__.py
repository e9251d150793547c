"""`wfsched web`: a read-only web view of a store, served apart from the supervisor.

Its dependencies (Jinja2, waitress) come with the `web` extra; the CLI checks
for them before importing anything here (`wfsched.cli.web`).
"""
