#!/bin/sh
# drill-overhead.sh PIPE [SCALE] [REPS]: what a restore drill costs over the
# restore alone. A postgres:15 container gets pgbench -i -s SCALE (default
# 100); pipe backs its database up to a folder; then, REPS times (default
# 2), in turns: the restore alone (pipe run into a fresh, already started
# postgres:15 container) and pipe drill (a scratch postgres:15 started by
# the drill, the same restore, two checks). Prints each time and the
# ratio drill / restore. Needs docker, bc and the postgres:15 image.
set -eu
for tool in docker bc; do
  command -v "$tool" >/dev/null || { echo "drill-overhead.sh: $tool is not installed" >&2; exit 2; }
done
PIPE=$(realpath "$1")
SCALE=${2:-100}
REPS=${3:-2}
W=$(mktemp -d)
cleanup() { docker rm -f pipe-ovh-prod pipe-ovh-target >/dev/null 2>&1 || true; rm -rf "$W"; }
trap cleanup EXIT
cd "$W"
ready() { until docker exec "$1" psql -h 127.0.0.1 -U postgres -c 'SELECT 1' >/dev/null 2>&1; do sleep 0.5; done; }
docker run -d --rm --name pipe-ovh-prod --shm-size=1g -p 127.0.0.1::5432 -e POSTGRES_HOST_AUTH_METHOD=trust postgres:15 >/dev/null
ready pipe-ovh-prod
PROD=$(docker port pipe-ovh-prod 5432/tcp | head -1 | cut -d: -f2)
docker exec pipe-ovh-prod createdb -h 127.0.0.1 -U postgres bench
docker exec pipe-ovh-prod pgbench -h 127.0.0.1 -U postgres -i -s "$SCALE" -q bench 2>&1 | tail -1
cat > d.hcl <<EOF
variable "target_port" { default = 5432 }
pipeline "backup" {
  source "postgres" {
    host     = "127.0.0.1"
    port     = $PROD
    user     = "postgres"
    database = "bench"
  }
  compress {}
  sink "fs" { path = "st/\${run.id}/" }
}
pipeline "restore" {
  source "fs" { path = "st/" }
  decompress {}
  sink "postgres" {
    host     = "127.0.0.1"
    port     = var.target_port
    user     = "postgres"
    database = "bench"
    create   = true
    no_owner = true
    sslmode  = "disable"
  }
}
drill "bench" {
  pipeline = "restore"
  image    = "postgres:15"
  check "accounts" {
    query    = "SELECT count(*) FROM pgbench_accounts"
    at_least = $((SCALE * 100000))
  }
  check "branches" {
    query  = "SELECT count(*) FROM pgbench_branches"
    expect = "$SCALE"
  }
}
EOF
"$PIPE" run d.hcl --pipeline backup 2>&1 | head -1
for i in $(seq "$REPS"); do
  docker run -d --rm --name pipe-ovh-target --shm-size=1g -p 127.0.0.1::5432 -e POSTGRES_HOST_AUTH_METHOD=trust postgres:15 >/dev/null
  ready pipe-ovh-target
  TP=$(docker port pipe-ovh-target 5432/tcp | head -1 | cut -d: -f2)
  s=$(date +%s.%N); "$PIPE" run d.hcl --pipeline restore --var target_port="$TP" >/dev/null 2>&1; e=$(date +%s.%N)
  restore=$(echo "$e - $s" | bc)
  docker rm -f pipe-ovh-target >/dev/null
  s=$(date +%s.%N); "$PIPE" drill d.hcl > drill.out 2>&1; e=$(date +%s.%N)
  drill=$(echo "$e - $s" | bc)
  echo "rep $i: restore alone ${restore}s, drill ${drill}s, ratio $(echo "scale=3; $drill / $restore" | bc)"
  sed 's/^/    /' drill.out
done
