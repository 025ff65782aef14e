#!/bin/sh
# pg_ctl for pytest-postgresql. PostgreSQL refuses to run as root, and CI containers run the tests as root:
# then the server runs as the `postgres` user (its data folder is made theirs by tests/store/conftest.py).
pg_ctl=$(command -v pg_ctl || ls -d /usr/lib/postgresql/*/bin/pg_ctl 2>/dev/null | sort -V | tail -n 1)
if [ "$(id -u)" = 0 ]; then
    exec runuser -u postgres -- "$pg_ctl" "$@"
fi
exec "$pg_ctl" "$@"
