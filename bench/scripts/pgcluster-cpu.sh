#!/bin/bash
# pgcluster-cpu.sh: where a whole-server PostgreSQL backup spends the
# machine's CPU (bench/reports/2026-11-27-pgcluster-cpu.md). Starts
# postgres:15 and MinIO under Docker (ports 15432, 19000), loads the
# pgcluster scenario's 8 databases, then runs pipe's cluster backup and the
# pg_dump | zstd | mc loop, printing for each the wall time, the machine's
# busy CPU-seconds (/proc/stat), the containers' (cgroup v1 cpuacct) and
# docker-proxy's (/proc/<pid>/stat): first through the ports Docker maps
# ("proxy"), then to the containers' own addresses ("direct"), as the
# benchmark's cluster scenarios connect where they can.
# Needs docker, psql, pg_dump, zstd, bin/pipe (make build) and mc
# (bench/results/tools/mc). Usage: bench/scripts/pgcluster-cpu.sh [runs]
set -euo pipefail
cd "$(dirname "$0")/../.."
runs=${1:-2}
pipe=$PWD/bin/pipe mc=$PWD/bench/results/tools/mc work=$(mktemp -d)
trap 'docker rm -f cpu-pg cpu-minio >/dev/null 2>&1; rm -rf "$work"' EXIT
docker run -d --name cpu-pg -e POSTGRES_PASSWORD=pw -p 15432:5432 postgres:15 >/dev/null
docker run -d --name cpu-minio -e MINIO_ROOT_USER=minioadmin -e MINIO_ROOT_PASSWORD=minioadmin -p 19000:9000 \
  minio/minio:RELEASE.2024-01-16T16-07-38Z server /data >/dev/null
export PGPASSWORD=pw MC_HOST_lab=http://minioadmin:minioadmin@localhost:19000 PIPE_VAR_secret=minioadmin
until psql -X -q -h localhost -p 15432 -U postgres -c 'SELECT 1' >/dev/null 2>&1; do sleep 1; done
until "$mc" mb -q lab/lab >/dev/null 2>&1; do sleep 1; done

# The data: bench/postgres.go's pgBenchDataset, big and seven small.
dataset() {
  cat <<SQL
CREATE TABLE pgbench_branches (bid int PRIMARY KEY, bbalance int, filler char(88));
CREATE TABLE pgbench_tellers (tid int PRIMARY KEY, bid int REFERENCES pgbench_branches, tbalance int, filler char(84));
CREATE TABLE pgbench_accounts (aid int PRIMARY KEY, bid int REFERENCES pgbench_branches, abalance int, filler char(84));
INSERT INTO pgbench_branches SELECT b, 0, '' FROM generate_series(1, $(($1/100000))) b;
INSERT INTO pgbench_tellers SELECT t, (t - 1) / 10 + 1, 0, '' FROM generate_series(1, $(($1/10000))) t;
INSERT INTO pgbench_accounts SELECT a, (a - 1) / 100000 + 1, (a::bigint * 7919 % 10000)::int - 5000, '' FROM generate_series(1, $1) a;
CREATE TABLE events (id bigserial PRIMARY KEY, account int NOT NULL REFERENCES pgbench_accounts, kind text NOT NULL, amount numeric(12,2), at timestamptz NOT NULL, payload jsonb, note text);
INSERT INTO events (account, kind, amount, at, payload, note) SELECT i % $1 + 1, (ARRAY['deposit','withdrawal','transfer','fee'])[i % 4 + 1], (i % 100000) / 100.0, timestamptz '2026-01-01 00:00:00+00' + i * interval '17 seconds', jsonb_build_object('i', i, 'tags', jsonb_build_array('a' || i % 7, 'b' || i % 11), 'ok', i % 3 = 0), CASE WHEN i % 5 = 0 THEN NULL ELSE md5(i::text) END FROM generate_series(1, $2) i;
CREATE INDEX events_at ON events (at);
CREATE INDEX events_kind ON events (kind, account);
VACUUM ANALYZE;
SQL
}
dbs="big crm billing shop hr wiki auth audit"
for db in $dbs; do
  psql -X -q -h localhost -p 15432 -U postgres -c "CREATE DATABASE $db"
  if [ "$db" = big ]; then dataset 2000000 1200000; else dataset 100000 100000; fi |
    psql -X -q -h localhost -p 15432 -U postgres -d "$db" >/dev/null
done

cat > "$work/backup.hcl" <<'HCL'
variable "secret" {
  sensitive = true
}
variable "host" {}
variable "port" {}
variable "endpoint" {}
pipeline "backup" {
  streams = 2
  source "postgres" {
    host      = var.host
    port      = var.port
    user      = "postgres"
    sslmode   = "disable"
    databases = ["*"]
  }
  compress {
    codec   = "zstd"
    level   = 3
    workers = 2
  }
  sink "s3" {
    bucket            = "lab"
    endpoint          = var.endpoint
    region            = "us-east-1"
    path_style        = true
    access_key_id     = "minioadmin"
    secret_access_key = var.secret
    key               = "cluster/pipe/"
  }
}
HCL

busy() { awk '/^cpu /{print $2+$3+$4+$7+$8}' /proc/stat; }
proxy() { # docker-proxy's CPU ticks
  local t=0 p
  for p in $(pgrep -x docker-proxy); do t=$((t + $(awk '{print $14+$15}' "/proc/$p/stat"))); done
  echo $t
}
usage() { cat "/sys/fs/cgroup/cpuacct/docker/$(docker inspect -f '{{.Id}}' "$1")/cpuacct.usage"; }
measure() { # label command...
  local b0 p0 m0 x0 t0 t1
  b0=$(busy) p0=$(usage cpu-pg) m0=$(usage cpu-minio) x0=$(proxy) t0=$(date +%s.%N)
  "${@:2}" >"$work/out" 2>&1 || { cat "$work/out"; return 1; }
  t1=$(date +%s.%N)
  awk -v l="$1" -v w="$(echo "$t1 - $t0" | bc)" -v b="$(( $(busy) - b0 ))" -v p="$(( $(usage cpu-pg) - p0 ))" -v m="$(( $(usage cpu-minio) - m0 ))" -v x="$(( $(proxy) - x0 ))" \
    'BEGIN { printf "%-12s wall %.2f s  busy %.2f CPU-s  PostgreSQL %.2f  MinIO %.2f  docker-proxy %.2f\n", l, w, b / 100, p / 1e9, m / 1e9, x / 100 }'
}
loop() { # host port
  for db in $dbs; do
    pg_dump -Fc -Z0 -h "$1" -p "$2" -U postgres "$db" | zstd -q -3 -T2 | "$mc" pipe "lab/lab/loop/$db.dump.zst" >/dev/null
  done
}
ip() { docker inspect -f '{{.NetworkSettings.IPAddress}}' "$1"; }
for way in proxy direct; do
  if [ $way = proxy ]; then
    host=localhost port=15432 endpoint=http://localhost:19000
  else
    host=$(ip cpu-pg) port=5432 endpoint=http://$(ip cpu-minio):9000
  fi
  export MC_HOST_lab=http://minioadmin:minioadmin@${endpoint#http://}
  for _ in $(seq "$runs"); do
    measure "pipe $way" env PIPE_VAR_host="$host" PIPE_VAR_port="$port" PIPE_VAR_endpoint="$endpoint" "$pipe" run "$work/backup.hcl"
    measure "loop $way" loop "$host" "$port"
  done
done
