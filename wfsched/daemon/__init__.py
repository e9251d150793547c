"""The supervisor daemon: the tick loop, leadership of a shared store, failure
hooks, the event log, systemd notification, the wait between ticks and the
metrics."""
