#!/bin/bash
# wal-pusher-ab.sh: the background pusher (`pipe wal push --background`,
# 4 workers, zstd level 3, an fs archive) over the same real WAL at two
# builds, interleaved: its CPU (/proc/PID/stat) and peak RSS (VmHWM) until
# every ready segment is noted pushed. What a change to the push path
# costs in CPU and memory (bench/reports/2026-11-29-wal-memory.md). Builds
# OLD (a commit) into a temporary worktree; NEW is bin/pipe (make build).
# The WAL is a pgbench run's on a PostgreSQL 15 cluster made here (initdb
# and pgbench as the postgres user), its segments copied under SEGS
# consecutive names into a fake data directory.
# Needs initdb, pg_ctl, pgbench (postgresql-15), git and go; run as root.
# Usage: bench/scripts/wal-pusher-ab.sh OLD_COMMIT [SEGS] [REPS]
set -euo pipefail
cd "$(dirname "$0")/../.."
old_commit=${1:?usage: $0 OLD_COMMIT [SEGS] [REPS]}
segs=${2:-132} reps=${3:-3}
for tool in initdb pg_ctl pgbench git go su; do
  command -v "$tool" >/dev/null || { echo "$0: $tool is not installed (apt-get install postgresql-15; git and go)" >&2; exit 2; }
done
[ "$(id -u)" = 0 ] || { echo "$0: run as root (initdb and pgbench run as the postgres user)" >&2; exit 2; }
new=$PWD/bin/pipe work=$(mktemp -d)
chmod 755 "$work"
trap 'su postgres -c "pg_ctl -D $work/pg stop -m immediate" >/dev/null 2>&1 || true; git worktree remove --force "$work/src" >/dev/null 2>&1; rm -rf "$work"' EXIT
git worktree add -q --detach "$work/src" "$old_commit"
(cd "$work/src" && GOFLAGS=-tags=disable_grpc_modules go build -trimpath -o "$work/pipe-old" ./cmd/pipe)
# Real WAL: pgbench's, kept in pg_wal by wal_keep_size.
mkdir "$work/pg" "$work/sock"
chown postgres "$work/pg" "$work/sock"
su postgres -c "initdb -D $work/pg >/dev/null && pg_ctl -D $work/pg -o '-p 5497 -k $work/sock -c wal_keep_size=2GB' -l $work/sock/pg.log start >/dev/null &&
  pgbench -h $work/sock -p 5497 -i -s 10 postgres >/dev/null 2>&1 && pgbench -h $work/sock -p 5497 -T 20 -c 2 postgres >/dev/null 2>&1 &&
  pg_ctl -D $work/pg stop >/dev/null"
data=$work/data
mkdir -p "$data/global" "$data/pg_wal/archive_status"
cp "$work/pg/global/pg_control" "$data/global/"
mapfile -t real < <(ls "$work/pg/pg_wal" | grep -E '^[0-9A-F]{24}$')
for i in $(seq 0 $((segs - 1))); do
  name=$(printf '00000001%016X' $((16 + i)))
  cp "$work/pg/pg_wal/${real[$((i % ${#real[@]}))]}" "$data/pg_wal/$name"
done
cat > "$work/archive.hcl" <<EOF
archive "ab" {
  store "fs" { path = "$work/archive/" }
  compress {
    codec = "zstd"
    level = 3
  }
  push {
    async   = true
    workers = 4
  }
}
EOF
run() {
  local bin=$1
  rm -rf "$work/archive" "$data/pg_wal/pipe-spool"
  for f in "$data"/pg_wal/*; do [ -f "$f" ] && touch "$data/pg_wal/archive_status/$(basename "$f").ready"; done
  rm -f "$data"/pg_wal/archive_status/*.done
  sync
  local start end p
  start=$(date +%s%N)
  (cd "$data" && exec "$bin" wal push --background "$work/archive.hcl") &
  p=$!
  until [ "$(ls "$data/pg_wal/pipe-spool/push" 2>/dev/null | grep -c '\.ok$')" -ge "$segs" ]; do
    kill -0 $p 2>/dev/null || { echo "the pusher exited early; see $data/pg_wal/pipe-spool/push/pusher.log" >&2; exit 1; }
    sleep 0.02
  done
  end=$(date +%s%N)
  read -r ut st < <(awk '{print $14, $15}' /proc/$p/stat)
  echo "$2: wall $(( (end - start) / 1000000 )) ms, CPU $(( (ut + st) * 10 )) ms, peak RSS $(awk '/VmHWM/{print int($2/1024)}' /proc/$p/status) MiB, stored $(du -sm "$work/archive" | cut -f1) MiB"
  kill $p
  wait $p 2>/dev/null || true
}
for r in $(seq "$reps"); do
  run "$work/pipe-old" "old ($old_commit)"
  run "$new" "new (bin/pipe)"
done
