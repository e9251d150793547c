"""The operator API the CLI calls: administration, reads, runs, status,
audit and retention, over the `wfsched.store.Store` interface.

Never forks, never launches: requests for the supervisor go through the store.
"""
