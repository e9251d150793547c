"""The supervisor daemon: the tick loop, ownership of the store, failure
hooks, the event log, systemd notification and the test-only fault points."""
