# Sourced by .ci/run (and by a developer who wants the PostgreSQL tests): starts a private PostgreSQL server
# on a free local port, in a temporary directory, and exports its URL as KERNELZOO_TEST_POSTGRES. The server
# stops when the sourcing shell exits. Needs Debian's postgresql package (initdb and pg_ctl).
_pg_bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
if [ -z "$_pg_bin" ]; then
  echo "postgres.sh: no PostgreSQL server binaries (apt-get install postgresql)" >&2
  return 1 2>/dev/null || exit 1
fi
_pg_dir=$(mktemp -d /tmp/kernelzoo-pg.XXXXXX)
_pg_port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
# the server refuses to run as root: run it as the package's postgres user then
if [ "$(id -u)" = 0 ]; then
  chown postgres "$_pg_dir"
  _pg_as() { runuser -u postgres -- "$@"; }
else
  _pg_as() { "$@"; }
fi
_pg_as "$_pg_bin/initdb" -D "$_pg_dir/data" -A trust -U kernelzoo -E UTF8 >/dev/null
_pg_as "$_pg_bin/pg_ctl" -D "$_pg_dir/data" -l "$_pg_dir/log" -w -t 60 \
  -o "-p $_pg_port -k $_pg_dir -c listen_addresses=127.0.0.1 -c max_connections=200 -c fsync=off" start >/dev/null
export KERNELZOO_TEST_POSTGRES="postgresql+psycopg://kernelzoo@127.0.0.1:$_pg_port/postgres"
trap '_pg_as "$_pg_bin/pg_ctl" -D "$_pg_dir/data" -m fast stop >/dev/null 2>&1; rm -rf "$_pg_dir"' EXIT
echo "PostgreSQL $("$_pg_bin/postgres" --version | awk '{print $3}') on 127.0.0.1:$_pg_port"
