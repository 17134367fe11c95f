#!/bin/bash
# lock-overhead.sh PIPE [SCALE] [REPS] [SEGMENTS]: what S3 Object Lock
# costs a base backup and a WAL burst, side by side in one run. Starts
# MinIO under Docker (port 19101, its Prometheus metrics public) with two
# buckets, "plain" and "locked" (created with object lock), and a
# postgres:15 container with pgbench -i -s SCALE (default 100). Then REPS
# times (default 3), in turns: a base backup (zstd, age) to each bucket,
# the locked one with object_lock_days = 1; and a burst of SEGMENTS
# (default 256) synthetic 16 MiB segments, each pushed by its own
# `pipe wal push` as archive_command does, to each bucket. (The server
# archives to /bin/true: its WAL is not what is measured.) Prints each
# time, the ratio locked / plain, and the S3 requests MinIO counted per
# phase (by API), so the requests per object can be compared. SEGMENTS = 0
# measures base backups only.
# Needs docker, curl (7.75 or later: --aws-sigv4), python3 and bc.
set -euo pipefail
for tool in docker curl python3 bc; do
  command -v "$tool" >/dev/null || { echo "lock-overhead.sh: $tool is not installed" >&2; exit 2; }
done
PIPE=$(realpath "$1")
SCALE=${2:-100}
REPS=${3:-3}
SEGS=${4:-256}
W=$(mktemp -d)
cleanup() { docker rm -f pipe-lock-minio pipe-lock-pg >/dev/null 2>&1 || true; rm -rf "$W"; }
trap cleanup EXIT
cd "$W"
S3=http://127.0.0.1:19101
docker run -d --rm --name pipe-lock-minio -p 127.0.0.1:19101:9000 -e MINIO_ROOT_USER=minioadmin -e MINIO_ROOT_PASSWORD=minioadmin \
  -e MINIO_PROMETHEUS_AUTH_TYPE=public minio/minio:RELEASE.2024-01-16T16-07-38Z server /data >/dev/null
until curl -sf "$S3/minio/health/live" >/dev/null; do sleep 0.3; done
s3() { curl -sf --aws-sigv4 "aws:amz:us-east-1:s3" --user minioadmin:minioadmin "$@"; }
s3 -X PUT "$S3/plain" >/dev/null
s3 -X PUT -H "x-amz-bucket-object-lock-enabled: true" "$S3/locked" >/dev/null

docker run -d --rm --name pipe-lock-pg --shm-size=1g -p 127.0.0.1::5432 -e POSTGRES_PASSWORD=bench postgres:15 \
  -c wal_level=replica -c max_wal_senders=4 -c archive_mode=on -c archive_command=/bin/true >/dev/null
until docker exec pipe-lock-pg psql -h 127.0.0.1 -U postgres -c 'SELECT 1' >/dev/null 2>&1; do sleep 0.5; done
PG=$(docker port pipe-lock-pg 5432/tcp | head -1 | cut -d: -f2)
docker exec pipe-lock-pg sh -c 'echo "host replication all all scram-sha-256" >> "$PGDATA/pg_hba.conf"'
docker exec pipe-lock-pg psql -q -h 127.0.0.1 -U postgres -c 'SELECT pg_reload_conf()' >/dev/null
docker exec pipe-lock-pg createdb -h 127.0.0.1 -U postgres bench
docker exec pipe-lock-pg pgbench -h 127.0.0.1 -U postgres -i -s "$SCALE" -q bench 2>&1 | tail -1

"$PIPE" keygen -o keys/backup >/dev/null
export PIPE_VAR_pg_dsn="postgres://postgres:bench@127.0.0.1:$PG/postgres?sslmode=disable" AWS_EC2_METADATA_DISABLED=true
for b in plain locked; do
  lock=""
  [ "$b" = locked ] && lock="object_lock_days = 1"
  cat > "$b.hcl" <<EOF
variable "pg_dsn" { sensitive = true }
pipeline "base" {
  source "postgres_basebackup" { dsn = var.pg_dsn }
  compress {}
  encrypt { recipients = [file("$W/keys/backup.pub")] }
  sink "s3" {
    bucket            = "$b"
    key               = "base/\${run.id}/"
    endpoint          = "$S3"
    path_style        = true
    access_key_id     = "minioadmin"
    secret_access_key = "minioadmin"
    $lock
  }
}
archive "wal" {
  store "s3" {
    bucket            = "$b"
    key               = "archive/"
    endpoint          = "$S3"
    path_style        = true
    access_key_id     = "minioadmin"
    secret_access_key = "minioadmin"
    $lock
  }
  compress {}
  encrypt { recipients = [file("$W/keys/backup.pub")] }
  background = "never"
}
EOF
done

# SEGS synthetic segments (a page header, then data that compresses about
# 3:1) in a fake data directory per bucket, as PostgreSQL leaves them.
python3 - "$W/segs" "$SEGS" <<'PY'
import os, random, struct, sys
d, n = sys.argv[1], int(sys.argv[2])
os.makedirs(os.path.join(d, "global")); os.makedirs(os.path.join(d, "pg_wal"))
sysid = 7301234567890123457
open(os.path.join(d, "global", "pg_control"), "wb").write(struct.pack("<Q", sysid) + bytes(8184))
rnd = random.Random(1)
words = [bytes(rnd.getrandbits(8) for _ in range(rnd.randint(4, 24))) for _ in range(4096)]
seg = 16 << 20
body = bytearray()
while len(body) < 2 * seg:
    body += rnd.choice(words) + bytes(rnd.randint(0, 40))
for i in range(1, n + 1):
    head = struct.pack("<HHIQ", 0xD110, 0x0002, 1, 0) + bytes(8) + struct.pack("<QII", sysid, seg, 8192)
    off = rnd.randrange(seg)  # each segment a different window of the text
    open(os.path.join(d, "pg_wal", "%08X%08X%08X" % (1, 0, i)), "wb").write(head + bytes(body[off:off + seg - len(head)]))
PY

# requests prints MinIO's request counters by API, for diffs.
# (The v3 endpoint: v2's answers are cached for a few seconds.)
requests() { curl -sf "$S3/minio/metrics/v3/api/requests" | awk '/^minio_api_requests_total\{/ { match($0, /name="[^"]*"/); a = substr($0, RSTART+6, RLENGTH-7); n[a] += $NF } END { for (a in n) printf "%s %d\n", a, n[a] }' | sort; }
diffreq() { join -a2 -e0 -o 0,1.2,2.2 "$1" "$2" | awk '$3 - $2 > 0 { printf "%s=%d ", $1, $3 - $2 }'; }
now() { date +%s.%N; }
declare -A total
for rep in $(seq "$REPS"); do
  order="plain locked"
  [ $((rep % 2)) = 0 ] && order="locked plain" # neither always goes first
  for b in $order; do
    requests > before
    t0=$(now)
    "$PIPE" run "$b.hcl" --pipeline base >/dev/null 2>"$b.base.err" || { cat "$b.base.err"; exit 1; }
    t=$(echo "$(now) - $t0" | bc)
    requests > after
    echo "rep $rep base backup $b: ${t}s; requests: $(diffreq before after)"
    total[base-$b]=$(echo "${total[base-$b]:-0} + $t" | bc)
    echo "$t" >> "times.base-$b"
    [ "$SEGS" -gt 0 ] || continue
    requests > before
    t0=$(now)
    for f in segs/pg_wal/0*; do
      (cd segs && "$PIPE" wal push "$W/$b.hcl" "pg_wal/$(basename "$f")") >/dev/null 2>>"$b.wal.err" || { tail "$b.wal.err"; exit 1; }
    done
    t=$(echo "$(now) - $t0" | bc)
    requests > after
    echo "rep $rep WAL burst of $SEGS $b: ${t}s; requests: $(diffreq before after)"
    total[wal-$b]=$(echo "${total[wal-$b]:-0} + $t" | bc)
    echo "$t" >> "times.wal-$b"
    # The next burst pushes the same names: a new archive folder.
    sed -i "s|key               = \"archive[0-9]*/\"|key               = \"archive$rep/\"|" "$b.hcl"
  done
done
# median prints the median of the numbers in a file.
median() { sort -g "$1" | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
for what in base wal; do
  [ -n "${total[$what-plain]:-}" ] || continue
  mp=$(median "times.$what-plain") ml=$(median "times.$what-locked")
  echo "$what: plain ${total[$what-plain]}s, locked ${total[$what-locked]}s over $REPS reps; locked/plain $(echo "scale=3; ${total[$what-locked]} / ${total[$what-plain]}" | bc) (sums), $(echo "scale=3; $ml / $mp" | bc) (medians: plain ${mp}s, locked ${ml}s)"
done
