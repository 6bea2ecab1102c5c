{{/*
The script of the replicated Redis (global.availability high), one for the
pod's three containers: "server" (redis-server, a master or a replica of
it), "sentinel" (Redis Sentinel, which promotes a replica when the master
is lost), "keeper" (points the Service redis at the master and follows a
rotated password) and "handover" (the server's preStop: a master hands its
role to a replica before it stops).

Members call each other by their stable DNS names
(<pod>.redis-headless.<namespace>), never by pod address, which changes
when a pod is recreated: Sentinel resolves and announces names.

Which member is the master, at a start: the one the members' Sentinels
name; else the one this member last knew (written on its volume, so a
whole-cluster restart keeps the master that had the newest data); else,
on the very first start, member 0.

The password is read from the environment at start and from the mounted
Secret afterwards (the kubelet keeps it current after a rotation); it is
never written to a command line that outlives redis-server's start (which
rewrites its process title) or to a log.
*/}}
{{- define "redis.haScript" -}}
{{- $name := include "common.name" . -}}
#!/bin/sh
set -eu
name={{ $name }}
members={{ include "redis.replicas" . }}
quorum=$((members / 2 + 1))
domain="{{ $name }}-headless.$NAMESPACE"
me="$POD_NAME.$domain"
# Where this member's own processes listen: all addresses unless
# REDIS_BIND names some (the first is how the member reaches itself).
local_host="${REDIS_BIND:-127.0.0.1}"
local_host="${local_host%% *}"
auth_file=/etc/redis-auth/password
known=/data/onprem-master
sentinel_conf=/data/sentinel.conf

log() { echo "redis-ha $1: $2" >&2; }

nl='
'

# read_password sets pw to the mounted Secret's password (the
# environment's until the kubelet has mounted it) with the shell's own
# read: the keeper runs every second, and each process it starts costs
# the node a fork and an exec.
read_password() {
  pw=""
  if [ -s "$auth_file" ]; then IFS= read -r pw < "$auth_file" || :; fi
  [ -n "$pw" ] || pw="$REDIS_PASSWORD"
}

current_password() {
  read_password
  printf '%s' "$pw"
}

# find_master prints the master's name: the one a member's Sentinel
# names, else the one this member last knew, else member 0.
find_master() {
  i=0
  while [ "$i" -lt "$members" ]; do
    m="$(timeout 3 redis-cli -h "$name-$i.$domain" -p 26379 --raw sentinel get-master-addr-by-name "$name" 2>/dev/null | head -n 1)" || m=""
    case "$m" in
      *.*) echo "$m"; return ;;
    esac
    i=$((i + 1))
  done
  if [ -s "$known" ]; then cat "$known"; return; fi
  echo "$name-0.$domain"
}

# wait_resolvable waits (up to a minute) until name $1 resolves: a pod's
# DNS name exists once it has an address.
wait_resolvable() {
  i=0
  until getent hosts "$1" >/dev/null 2>&1; do
    i=$((i + 1))
    if [ "$i" -ge 60 ]; then log "$2" "$1 does not resolve; going on"; return; fi
    sleep 1
  done
}

server() {
  master="$(find_master)"
  # A master takes a write only while a replica follows it (lag under 10
  # s): one cut off from the others refuses writes that would be lost
  # when it rejoins as a replica. The memory bound is the standalone
  # server's (3/4 of the limit, nothing evicted).
  set -- --port 6379 --dir /data --appendonly yes \
    --replica-announce-ip "$me" \
    --min-replicas-to-write 1 --min-replicas-max-lag 10 \
    --requirepass "$REDIS_PASSWORD" --masterauth "$REDIS_PASSWORD"
  {{- $limit := dig "limits" "memory" "" (.Values.resources | default dict) }}
  {{- if $limit }}
  set -- "$@" --maxmemory {{ printf "%.0f" (mulf (include "common.bytes" (dict "ctx" . "quantity" $limit) | float64) 0.75) }} --maxmemory-policy noeviction
  {{- end }}
  if [ -n "${REDIS_BIND:-}" ]; then
    # shellcheck disable=SC2086
    set -- "$@" --bind $REDIS_BIND
  fi
  if [ "$master" = "$me" ]; then
    log server "starting as the master"
  else
    log server "starting as a replica of $master"
    wait_resolvable "$master" server
    set -- "$@" --replicaof "$master" 6379
  fi
  printf '%s\n' "$master" > "$known"
  exec redis-server "$@"
}

sentinel() {
  master="$(find_master)"
  wait_resolvable "$master" sentinel
  umask 077
  {
    echo "port 26379"
    if [ -n "${REDIS_BIND:-}" ]; then echo "bind $REDIS_BIND"; fi
    echo "dir /data"
    echo "sentinel resolve-hostnames yes"
    echo "sentinel announce-hostnames yes"
    echo "sentinel announce-ip $me"
    echo "sentinel monitor $name $master 6379 $quorum"
    echo "sentinel auth-pass $name $(current_password)"
    echo "sentinel down-after-milliseconds $name {{ int .Values.ha.downAfterMilliseconds }}"
    echo "sentinel failover-timeout $name {{ int .Values.ha.failoverTimeoutMilliseconds }}"
    echo "sentinel parallel-syncs $name 1"
  } > "$sentinel_conf.new"
  mv "$sentinel_conf.new" "$sentinel_conf"
  log sentinel "watching master $master (quorum $quorum of $members)"
  exec redis-server "$sentinel_conf" --sentinel
}

cli() {
  read_password
  REDISCLI_AUTH="$pw" redis-cli -h "$local_host" -p 6379 --no-auth-warning --raw "$@"
}

sentinel_cli() {
  redis-cli -h "$local_host" -p 26379 --raw "$@"
}

api="https://${KUBERNETES_SERVICE_HOST:-kubernetes.default.svc}:${KUBERNETES_SERVICE_PORT:-443}"
sa=/var/run/secrets/kubernetes.io/serviceaccount

kube() {
  token=""
  IFS= read -r token < "$sa/token" || :
  curl -sS --max-time 5 --cacert "$sa/ca.crt" -H "Authorization: Bearer $token" "$@"
}

# point_service makes the Endpoints of the Service redis name this pod
# (created when missing: the Service has no selector).
point_service() {
  body='{"apiVersion":"v1","kind":"Endpoints","metadata":{"name":"'"$name"'","namespace":"'"$NAMESPACE"'","labels":{"onprem.dev/redis-cluster":"'"$name"'"}},"subsets":[{"addresses":[{"ip":"'"$POD_IP"'","targetRef":{"kind":"Pod","name":"'"$POD_NAME"'","namespace":"'"$NAMESPACE"'"}}],"ports":[{"name":"redis","port":6379,"protocol":"TCP"}]}]}'
  code="$(kube -o /dev/null -w '%{http_code}' -X PATCH -H 'Content-Type: application/merge-patch+json' \
    "$api/api/v1/namespaces/$NAMESPACE/endpoints/$name" -d "$body")" || code=000
  if [ "$code" = 404 ]; then
    code="$(kube -o /dev/null -w '%{http_code}' -X POST -H 'Content-Type: application/json' \
      "$api/api/v1/namespaces/$NAMESPACE/endpoints" -d "$body")" || code=000
  fi
  case "$code" in
    2*) log keeper "the Service $name now reaches this member, the master ($POD_IP)" ;;
    *) log keeper "pointing the Service $name at this member failed (HTTP $code); trying again"; return 1 ;;
  esac
}

# keeper, every second: keeps replication and Sentinel on the password
# the mounted Secret holds, labels the pod with its role, notes the master
# on the volume, and, on the master that the Sentinels name (and that has
# a replica, or finds the Service empty), points the Service redis at it.
# A round starts three processes (sleep, and redis-cli asking Sentinel
# and the server); the rest is the shell's own. Those two redis-cli are
# written out rather than called through cli and sentinel_cli: the shell
# forks once more to run a function in a command substitution. The master reads the
# Service's Endpoints from the API server every round until they name it,
# then every tenth round.
keeper() {
  # The container's first process: without a trap, SIGTERM is ignored and
  # a stopping pod waits out its whole grace period (60 s) for the kill.
  trap 'exit 0' TERM INT
  applied=""
  labelled=""
  pointed=0
  while :; do
    sleep 1
    # The probes' sign of life (the file's time, set by the shell).
    : > /data/.keeper-alive
    read_password
    if [ "$pw" != "$applied" ]; then
      a="$(printf 'CONFIG SET masterauth %s\n' "$pw" | REDISCLI_AUTH="$pw" redis-cli -h "$local_host" -p 6379 --no-auth-warning 2>/dev/null)" || a=""
      b="$(printf 'SENTINEL SET %s auth-pass %s\n' "$name" "$pw" | redis-cli -h "$local_host" -p 26379 2>/dev/null)" || b=""
      if [ "$a" = OK ] && [ "$b" = OK ]; then
        [ -z "$applied" ] || log keeper "replication and Sentinel now use the Secret's new password"
        applied="$pw"
      fi
    fi
    master="$(redis-cli -h "$local_host" -p 26379 --raw sentinel get-master-addr-by-name "$name" 2>/dev/null)" || master=""
    master="${master%%"$nl"*}"
    case "$master" in
      *.*)
        last=""
        if [ -s "$known" ]; then IFS= read -r last < "$known" || :; fi
        [ "$master" = "$last" ] || printf '%s\n' "$master" > "$known"
        ;;
    esac
    role="$(REDISCLI_AUTH="$pw" redis-cli -h "$local_host" -p 6379 --no-auth-warning --raw role 2>/dev/null)" || role=""
    role="${role%%"$nl"*}"
    case "$role" in
      master|slave)
        [ "$role" = slave ] && role=replica
        if [ "$role" != "$labelled" ]; then
          code="$(kube -o /dev/null -w '%{http_code}' -X PATCH -H 'Content-Type: application/merge-patch+json' \
            "$api/api/v1/namespaces/$NAMESPACE/pods/$POD_NAME" -d '{"metadata":{"labels":{"onprem.dev/redis-role":"'"$role"'"}}}')" || code=000
          case "$code" in 2*) labelled="$role"; log keeper "this member is now a $role" ;; esac
        fi
        ;;
    esac
    if [ "$master" != "$me" ] || [ "$role" != master ]; then
      pointed=0
      continue
    fi
    # pointed counts the rounds since the Endpoints were seen to name
    # this master (0: not yet).
    if [ "$pointed" -gt 0 ]; then
      pointed=$((pointed + 1))
      [ $((pointed % 10)) -eq 1 ] || continue
    fi
    ep="$(kube "$api/api/v1/namespaces/$NAMESPACE/endpoints/$name" 2>/dev/null)" || continue
    case "$ep" in
      *"\"ip\":\"$POD_IP\""*) [ "$pointed" -gt 0 ] || pointed=1; continue ;;
    esac
    pointed=0
    # A master cut off from the others (its Sentinel in a minority still
    # names it) has no replica left: it does not take the Service back.
    replicas="$(cli info replication 2>/dev/null | sed -n 's/^connected_slaves:\([0-9]*\).*/\1/p')" || replicas=""
    case "$ep" in
      *'"ip":'*) [ "${replicas:-0}" -ge 1 ] || continue ;;
    esac
    if point_service; then pointed=1; fi
  done
}

# handover: a master about to stop asks Sentinel for a failover and waits
# (up to 20 s) until it is a replica, so that a roll or a drain does not
# wait for down-after-milliseconds with writes refused.
handover() {
  [ "$(cli role 2>/dev/null | head -n 1)" = master ] || exit 0
  [ "$members" -gt 1 ] || exit 0
  sentinel_cli sentinel failover "$name" >/dev/null 2>&1 || exit 0
  i=0
  while [ "$i" -lt 40 ]; do
    [ "$(cli role 2>/dev/null | head -n 1)" = master ] || exit 0
    sleep 0.5
    i=$((i + 1))
  done
}

case "${1:-}" in
  server) server ;;
  sentinel) sentinel ;;
  keeper) keeper ;;
  handover) handover ;;
  *) echo "usage: $0 server|sentinel|keeper|handover" >&2; exit 2 ;;
esac
{{- end -}}
