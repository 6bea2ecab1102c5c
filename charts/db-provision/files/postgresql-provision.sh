#!/bin/sh
# Gives every service named in postgresql-services its own PostgreSQL role
# (LOGIN, with its password) and its own database, owned by that role. The
# role, password and database come from the service's Secret
# onprem-<service>-postgresql (keys username, password, database, and owner
# once a rotation has made the login another role than the owner), mounted
# at /var/run/onprem/postgresql/<service>/; postgresql-provision.sql does
# the work for one service.
#
# Idempotent: what is missing is created; what exists gets the Secret's
# password and ownership again, so that re-runs converge.
#
# The admin connection comes from libpq's environment: PGHOST, PGPORT,
# PGUSER, PGPASSWORD, PGDATABASE; POSTGRESQL_TLS=true requires TLS. No
# credential is printed or put on a command line: psql reads the service's
# password from its environment (\getenv).
set -eu

here=$(dirname "$0")
services_file=${SERVICES_FILE:-$here/postgresql-services}
sql=${SQL_FILE:-$here/postgresql-provision.sql}
secrets=${SECRETS_DIR:-/var/run/onprem/postgresql}
attempts=${ATTEMPTS:-60}
pause=${PAUSE_SECONDS:-5}

log() {
	printf 'db-provision: postgresql: %s\n' "$*"
}

fail() {
	log "$*" >&2
	exit 1
}

# load NAME FILE: the variable NAME gets FILE's exact content. (A command
# substitution alone would drop trailing newlines, which the service, reading
# the same Secret, keeps.) Only NAME goes through eval, never the content.
load() {
	_content=$(cat "$2" && printf x) || fail "cannot read $2"
	eval "$1=\${_content%x}"
	unset _content
}

if [ "${POSTGRESQL_TLS:-}" = true ]; then
	export PGSSLMODE=require
fi

where="${PGHOST:-localhost}:${PGPORT:-5432}"
attempt=1
until pg_isready --quiet --timeout=5; do
	if [ "$attempt" -ge "$attempts" ]; then
		fail "$where is not accepting connections after $attempts attempts"
	fi
	log "waiting for $where (attempt $attempt of $attempts)"
	attempt=$((attempt + 1))
	sleep "$pause"
done

count=0
while IFS= read -r service || [ -n "$service" ]; do
	[ -n "$service" ] || continue
	load ONPREM_USERNAME "$secrets/$service/username"
	load ONPREM_PASSWORD "$secrets/$service/password"
	load ONPREM_DATABASE "$secrets/$service/database"
	ONPREM_OWNER=$ONPREM_USERNAME
	if [ -f "$secrets/$service/owner" ]; then
		load ONPREM_OWNER "$secrets/$service/owner"
	fi
	[ -n "$ONPREM_USERNAME" ] || fail "key username of the PostgreSQL Secret of $service is empty"
	[ -n "$ONPREM_PASSWORD" ] || fail "key password of the PostgreSQL Secret of $service is empty"
	[ -n "$ONPREM_DATABASE" ] || fail "key database of the PostgreSQL Secret of $service is empty"
	[ -n "$ONPREM_OWNER" ] || fail "key owner of the PostgreSQL Secret of $service is empty"
	export ONPREM_USERNAME ONPREM_PASSWORD ONPREM_DATABASE ONPREM_OWNER
	psql --no-psqlrc --quiet --set=ON_ERROR_STOP=1 --file="$sql" </dev/null ||
		fail "could not provision $service"
	log "role \"$ONPREM_USERNAME\" and database \"$ONPREM_DATABASE\" ready for $service"
	count=$((count + 1))
done <"$services_file"
unset ONPREM_USERNAME ONPREM_PASSWORD ONPREM_DATABASE ONPREM_OWNER

log "done: $count service(s)"
