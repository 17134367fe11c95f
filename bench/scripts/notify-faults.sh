#!/bin/sh
# notify-faults.sh PIPE [RUNS]: RUNS (default 50) pipe runs, each ending in
# a fault chosen at random (a source killed with -9, a wrong key, a full
# disk, SIGTERM, the plugin process killed with -9) or in success, each
# with a notify webhook to a local receiver. It prints, per run, the
# events the receiver got and how long after the event's time (when pipe
# knew) each end event arrived; then the totals: events expected, got,
# duplicated, and the slowest delivery. Needs python3, pgrep and shuf.
set -eu
for tool in python3 pgrep shuf; do
  command -v "$tool" >/dev/null || { echo "notify-faults.sh: $tool is not installed" >&2; exit 2; }
done
PIPE=$(realpath "$1")
RUNS=${2:-50}
W=$(mktemp -d)
trap 'kill $RECV 2>/dev/null; rm -rf "$W"' EXIT
cd "$W"
cat > recv.py <<'PY'
import http.server, json, time, datetime
class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        b = self.rfile.read(int(self.headers['Content-Length']))
        ev = json.loads(b)
        t = datetime.datetime.fromisoformat(ev['time'].replace('Z', '+00:00')).timestamp()
        with open('events.log', 'a') as f:
            f.write('%s %s %.3f\n' % (ev['id'], ev['event'], time.time() - t))
        self.send_response(200); self.end_headers()
    def log_message(self, *a): pass
s = http.server.HTTPServer(('127.0.0.1', 0), H)
open('port', 'w').write(str(s.server_address[1]))
s.serve_forever()
PY
python3 recv.py & RECV=$!
while [ ! -s port ]; do sleep 0.1; done
PORT=$(cat port)
mkdir in && head -c 3000000 /dev/urandom > in/a
"$PIPE" keygen -o right >/dev/null 2>&1; "$PIPE" keygen -o wrong >/dev/null 2>&1
cat > p.hcl <<EOF
notify "ops" { webhook = "http://127.0.0.1:$PORT/hook" }
pipeline "ok" {
  source "fs" { path = "in" }
  encrypt { recipients = [file("right.pub")] }
  sink "fs" { path = "st/\${run.id}/" }
}
pipeline "killed_source" {
  source "exec" { command = ["sh", "-c", "head -c 100000 /dev/zero; kill -9 \$\$"] }
  sink "fs" { path = "ks/\${run.id}/" }
}
pipeline "wrong_key" {
  source "fs" { path = "st/" }
  decrypt { identities = [file("wrong.key")] }
  sink "fs" { path = "wk/" }
}
pipeline "full_disk" {
  source "fs" { path = "in" }
  sink "fs" { path = "fd/\${run.id}/" }
}
pipeline "slow" {
  source "exec" { command = ["sh", "-c", "head -c 1000 /dev/zero; sleep 30"] }
  sink "fs" { path = "sl/\${run.id}/" }
}
EOF
"$PIPE" run p.hcl --pipeline ok >/dev/null 2>&1
: > events.log
expected=0
for i in $(seq "$RUNS"); do
  fault=$(shuf -n1 -e ok killed_source wrong_key full_disk sigterm plugin_kill)
  case $fault in
  ok|killed_source|wrong_key) "$PIPE" run p.hcl --pipeline "$fault" >/dev/null 2>&1 || true ;;
  full_disk) sh -c "ulimit -f 1000; exec \"$PIPE\" run p.hcl --pipeline full_disk" >/dev/null 2>&1 || true ;;
  sigterm) "$PIPE" run p.hcl --pipeline slow >/dev/null 2>&1 & pid=$!; sleep 0.7; kill -TERM $pid; wait $pid || true ;;
  plugin_kill)
    "$PIPE" run p.hcl --pipeline slow >/dev/null 2>&1 & pid=$!; sleep 0.7
    for p in $(pgrep -P $pid); do grep -qz PIPE_PLUGIN_SERVE=builtin /proc/$p/environ 2>/dev/null && kill -9 $p; done
    wait $pid || true ;;
  esac
  expected=$((expected + 2))
  echo "run $i: $fault"
done
sleep 1
echo "events expected $expected, got $(wc -l < events.log), distinct ids $(cut -d' ' -f1 events.log | sort -u | wc -l)"
echo "by event: $(cut -d' ' -f2 events.log | sort | uniq -c | tr '\n' ' ')"
echo "end events' delay after pipe knew (s): max $(grep -v ' start ' events.log | cut -d' ' -f3 | sort -n | tail -1), median $(grep -v ' start ' events.log | cut -d' ' -f3 | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')"
