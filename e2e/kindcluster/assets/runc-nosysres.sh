#!/bin/sh
# runc-nosysres: dockerd's default runtime on hosts whose capability
# bounding set lacks CAP_SYS_RESOURCE (there, runc refuses any container
# that asks for it, such as every --privileged kind node, with "unable to
# apply caps: operation not permitted").
#
# It strips CAP_SYS_RESOURCE from the OCI bundle's config.json (runc
# create/run) and from the process file (runc exec), then runs the real
# runc with the same arguments. Written by onprem.dev/onprem/e2e/kindcluster.
set -u
REAL_RUNC="@RUNC@"
JQ="@JQ@"
bundle=""
process=""
prev=""
for arg in "$@"; do
	case "$prev" in
	--bundle | -b) bundle="$arg" ;;
	--process | -p) process="$arg" ;;
	esac
	case "$arg" in
	--bundle=*) bundle="${arg#--bundle=}" ;;
	--process=*) process="${arg#--process=}" ;;
	esac
	prev="$arg"
done

# drop FILE JQ-PATH: remove CAP_SYS_RESOURCE from every capability list
# under JQ-PATH, in place.
drop() {
	[ -f "$1" ] || return 0
	tmp="$1.nosysres.$$"
	if "$JQ" "if $2 then $2 |= with_entries(.value |= map(select(. != \"CAP_SYS_RESOURCE\"))) else . end" "$1" >"$tmp"; then
		mv "$tmp" "$1"
	else
		rm -f "$tmp"
	fi
}

[ -n "$bundle" ] && drop "$bundle/config.json" .process.capabilities
[ -n "$process" ] && drop "$process" .capabilities
exec "$REAL_RUNC" "$@"
