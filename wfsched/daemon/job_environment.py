"""The environment runs and failure hooks inherit from the supervisor.

A job inherits the supervisor's environment so that PATH, LANG and the
operator's own variables reach it, but not what belongs to the supervisor
alone: its service manager's sockets and its store credentials. A job's
output is kept in its logs and its last 64 KiB in the store, so a variable a
job can print is a variable written to disk; the store's password must never
be one (docs/high-availability.md, "What runs never see").

Withheld here, once for runs and hooks alike:
- the service manager's: `NOTIFY_SOCKET`, `WATCHDOG_USEC`, `WATCHDOG_PID`
  (a job must not answer systemd for the supervisor), and `WFSCHED_FAULT`
  (the crash tests' kill point);
- libpq's variables that carry the store's credentials or point at them:
  `PGPASSWORD`, `PGPASSFILE`, `PGSERVICE`, `PGSERVICEFILE`, `PGSYSCONFDIR`
  (where the service file is found), `PGSSLCERT`, `PGSSLKEY` (the client
  certificate and its key). Variables that only say where the store is
  (`PGHOST`, `PGPORT`, `PGUSER`, `PGDATABASE`, `PGSSLMODE`, `PGSSLROOTCERT`)
  are no secret and pass;
- `WFSCHED_STORE` when it names a PostgreSQL URL carrying a password: the
  job gets the same URL without it (so its own `wfsched` commands still name
  the store, and bring their own credentials); a value no store accepts (a
  mistyped URL, a connection string: either may hold a password anywhere)
  is withheld; a SQLite path or a URL without a password passes as is.

A definition's `[run] env` is applied after this, so an operator who means
a job to have one of these (even `PGPASSWORD`) sets it there on purpose.
"""

from __future__ import annotations

from collections.abc import Mapping

from wfsched.store.location import carries_password, is_postgres_url, masked_store

SUPERVISOR_ONLY = ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID", "WFSCHED_FAULT")
STORE_CREDENTIALS = (
    "PGPASSWORD",
    "PGPASSFILE",
    "PGSERVICE",
    "PGSERVICEFILE",
    "PGSYSCONFDIR",
    "PGSSLCERT",
    "PGSSLKEY",
)
WITHHELD = frozenset(SUPERVISOR_ONLY + STORE_CREDENTIALS)


def inherited_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """`environ` without what runs and hooks never see (see the module text)."""
    env = {name: value for name, value in environ.items() if name not in WITHHELD}
    store = env.get("WFSCHED_STORE")
    if store is not None and carries_password(store):
        if is_postgres_url(store):
            env["WFSCHED_STORE"] = masked_store(store)
        else:
            del env["WFSCHED_STORE"]
    return env
