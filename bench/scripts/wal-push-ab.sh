#!/bin/bash
# wal-push-ab.sh: the wall time of one synchronous `pipe wal push` (zstd,
# age, MinIO) at two builds, interleaved segment by segment on the same
# data and store: what a change to the push path costs (the name's claim
# of bench/reports/2026-11-28-wal-claim.md). Builds OLD (a commit) into a
# temporary worktree; NEW is bin/pipe (make build). Starts MinIO under
# Docker on port 19100; writes N synthetic 16 MiB segments (a page header,
# then data that compresses about 3:1) into a fake data directory.
# Needs docker, python3, git and go.
# Usage: bench/scripts/wal-push-ab.sh OLD_COMMIT [N]
set -euo pipefail
cd "$(dirname "$0")/../.."
old_commit=${1:?usage: $0 OLD_COMMIT [N]}
n=${2:-40}
new=$PWD/bin/pipe work=$(mktemp -d)
trap 'docker rm -f ab-minio >/dev/null 2>&1; git worktree remove --force "$work/src" >/dev/null 2>&1; rm -rf "$work"' EXIT
git worktree add -q --detach "$work/src" "$old_commit"
(cd "$work/src" && GOFLAGS=-tags=disable_grpc_modules go build -trimpath -o "$work/pipe-old" ./cmd/pipe)
old=$work/pipe-old
docker run -d --name ab-minio -e MINIO_ROOT_USER=minioadmin -e MINIO_ROOT_PASSWORD=minioadmin -p 19100:9000 \
  minio/minio:RELEASE.2024-01-16T16-07-38Z server /data >/dev/null
mkdir -p "$work/data/global" "$work/data/pg_wal" "$work/keys"
python3 - "$work/data" "$n" <<'PY'
import os, random, struct, sys
d, n = sys.argv[1], int(sys.argv[2])
sysid = 7301234567890123456
open(os.path.join(d, "global", "pg_control"), "wb").write(struct.pack("<Q", sysid) + bytes(8184))
rnd = random.Random(1)
words = [bytes(rnd.getrandbits(8) for _ in range(rnd.randint(4, 24))) for _ in range(4096)]
for i in range(1, n + 1):
    seg = 16 << 20
    head = struct.pack("<HHIQ", 0xD110, 0x0002, 1, 0) + bytes(8) + struct.pack("<QII", sysid, seg, 8192)
    body = bytearray(head)
    while len(body) < seg:
        body += rnd.choice(words) + bytes(rnd.randint(0, 40))
    open(os.path.join(d, "pg_wal", "%08X%08X%08X" % (1, 0, i)), "wb").write(bytes(body[:seg]))
PY
"$new" keygen -o "$work/keys/wal" >/dev/null
for who in old new; do
  cat > "$work/$who.hcl" <<EOF
archive "ab" {
  store "s3" {
    bucket            = "walab"
    key               = "$who/"
    endpoint          = "http://localhost:19100"
    path_style        = true
    access_key_id     = "minioadmin"
    secret_access_key = "minioadmin"
  }
  compress {}
  encrypt { recipients = [file("$work/keys/wal.pub")] }
}
EOF
done
export AWS_EC2_METADATA_DISABLED=true
# The bucket: a tiny program of the same module (the old worktree's).
mkdir -p "$work/src/mb"
cat > "$work/src/mb/main.go" <<'GO'
package main

import (
	"context"
	"os"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

func main() {
	c := s3.New(s3.Options{Region: "us-east-1", BaseEndpoint: aws.String("http://localhost:19100"), UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider("minioadmin", "minioadmin", "")})
	if _, err := c.CreateBucket(context.Background(), &s3.CreateBucketInput{Bucket: aws.String("walab")}); err != nil {
		os.Stderr.WriteString(err.Error() + "\n")
		os.Exit(1)
	}
}
GO
for try in $(seq 30); do
  (cd "$work/src" && go run ./mb 2>"$work/mb.err") && break
  [ "$try" = 30 ] && { cat "$work/mb.err" >&2; exit 1; }
  sleep 1
done
cd "$work/data"
declare -a t_old t_new
for i in $(seq 1 "$n"); do
  seg=$(printf '%08X%08X%08X' 1 0 "$i")
  for who in $( ((i % 2)) && echo "old new" || echo "new old"); do
    bin=$old; [ "$who" = new ] && bin=$new
    s=$(date +%s%N)
    "$bin" wal push "$work/$who.hcl" "pg_wal/$seg" 2>/dev/null
    e=$(date +%s%N)
    ms=$(( (e - s) / 1000000 ))
    if [ "$who" = old ]; then t_old+=("$ms"); else t_new+=("$ms"); fi
  done
done
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
mo=$(median "${t_old[@]}") mn=$(median "${t_new[@]}")
echo "segments: $n of 16 MiB, interleaved; OLD $old_commit, NEW $(git -C "$OLDPWD" describe --always --dirty)"
echo "median wall time of one push: old ${mo} ms, new ${mn} ms, new/old $(awk -v a="$mn" -v b="$mo" 'BEGIN {printf "%.3f", a/b}')"
echo "old: ${t_old[*]}"
echo "new: ${t_new[*]}"
