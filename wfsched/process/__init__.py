"""Process handling: the fork server, per-run shims, preflight checks.

Kept empty: the fork server imports `wfsched.process.launcher` alone.
"""
