"""Process handling: the run keeper and its client, records, /proc.

Kept empty: the run keeper imports `wfsched.process.keeper` and
`wfsched.process.launcher` alone.
"""
