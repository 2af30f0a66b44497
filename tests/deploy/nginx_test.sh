#!/usr/bin/env bash
# ctest deploy_nginx: deploy/nginx in front of 3 kylin-server replicas, all on loopback. Checks:
# a session (X-Session-Id) keeps hitting one replica; with clients running, one replica is killed
# (SIGKILL): every request completes or fails cleanly (an HTTP error or a cut stream, never a
# hang: each curl has a deadline), requests sent after the kill all succeed on the live replicas,
# and the survivors' sessions stay where they were. Bounded: 12 sessions, each at most 100 short
# requests before the kill (a few on any machine) and 2 after it.
# Usage: nginx_test.sh <kylin-server binary> <tests/data dir>
set -euo pipefail
bin="$1"
data="$(cd "$2" && pwd)"
root="$(cd "$(dirname "$0")/../.." && pwd)"
[[ -x "$bin" ]] || { echo "kylin-server not built: $bin" >&2; exit 1; }
command -v nginx >/dev/null || { echo "nginx is not installed (scripts/setup.sh installs nginx-light)" >&2; exit 1; }

work="$(mktemp -d)"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*" >&2
  for f in "$work"/*.log; do echo "--- $f" >&2; tail -20 "$f" >&2; done
  exit 1
}

model="$work/e2e-qwen3"
mkdir "$model"
ln -s "$data"/models/e2e-qwen3-fullvocab/* "$model"/
ln -s "$data"/qwen3-tokenizer/tokenizer.json "$data"/qwen3-tokenizer/tokenizer_config.json "$model"/

free_port() { node -e 'const s = require("net").createServer().listen(0, "127.0.0.1", () => { console.log(s.address().port); s.close(); })'; }
wait_health() {  # URL PID
  for _ in $(seq 1 300); do
    curl -sf -m 2 "$1/health" >/dev/null && return 0
    kill -0 "$2" 2>/dev/null || return 1
    sleep 0.2
  done
  return 1
}

ports=()
declare -A replica_pid
for i in 0 1 2; do
  port="$(free_port)"
  "$bin" --model "$model" --port "$port" --ctx 1024 --threads 1 --parallel 2 >"$work/replica$i.log" 2>&1 &
  pids+=($!)
  replica_pid["127.0.0.1:$port"]=$!
  ports+=("127.0.0.1:$port")
done
for r in "${ports[@]}"; do wait_health "http://$r" "${replica_pid[$r]}" || fail "replica $r never became healthy"; done

listen="$(free_port)"
mkdir "$work/nginx"
bash "$root/deploy/nginx/render.sh" "$listen" "$work/nginx" "${ports[@]}" >"$work/nginx/kylin.conf"
nginx -c "$work/nginx/kylin.conf" >"$work/nginx-stdout.log" 2>&1 &
pids+=($!)
url="http://127.0.0.1:$listen"
wait_health "$url" "$!" || fail "nginx never proxied /health"

# One request: prints "<start s> <http status> <curl exit> <replica>" (replica from X-Kylin-Replica).
request() {  # SESSION STREAM(true|false)
  local body headers start code rc
  body='{"messages": [{"role": "user", "content": "Hello from '"$1"'"}], "max_tokens": 24, "temperature": 0, "stream": '"$2"'}'
  headers="$(mktemp -p "$work")"
  start="$(date +%s.%N)"
  rc=0
  code="$(curl -s -m 60 -o /dev/null -D "$headers" -w '%{http_code}' -H "X-Session-Id: $1" -H 'Content-Type: application/json' \
            -d "$body" "$url/v1/chat/completions")" || rc=$?
  echo "$start $code $rc $(tr -d '\r' <"$headers" | awk 'tolower($1) == "x-kylin-replica:" {print $2}')"
  rm -f "$headers"
}

# Affinity: each session's two requests land on the same replica.
declare -A home
for s in $(seq 1 12); do
  read -r _ code1 _ r1 < <(request "s$s" false)
  read -r _ code2 _ r2 < <(request "s$s" true)
  [[ $code1 == 200 && $code2 == 200 ]] || fail "session s$s: statuses $code1 $code2"
  [[ -n $r1 && $r1 == "$r2" ]] || fail "session s$s moved between replicas ($r1, $r2) with all of them up"
  home["s$s"]="$r1"
done
used="$(printf '%s\n' "${home[@]}" | sort -u | wc -l)"
((used >= 2)) || fail "12 sessions all hashed to one replica"
echo "affinity ok: 12 sessions over $used replicas"

# The replica of session s1 dies while every session sends requests, one after another: each
# session runs until it has a request on record, the replica is killed and reaped, and then every
# session sends 2 more, so requests after the kill exist however fast or slow the machine is.
victim="${home[s1]}"
client() {  # SESSION: requests until the kill is announced, then 2 more (at most 100 before it)
  local k=0 left=2
  while ((left > 0)); do
    [[ -e $work/killed ]] && left=$((left - 1))
    ((k < 100)) || break
    k=$((k + 1))
    request "$1" "$([[ $((k % 2)) == 0 ]] && echo true || echo false)"
  done
}
for s in $(seq 1 12); do
  client "s$s" >"$work/s$s.out" &
done
for _ in $(seq 1 600); do
  started=0
  for s in $(seq 1 12); do [[ -s $work/s$s.out ]] && started=$((started + 1)); done
  ((started == 12)) && break
  sleep 0.1
done
((started == 12)) || fail "only $started of 12 sessions finished a request within 60 s"
kill -KILL "${replica_pid[$victim]}"
wait "${replica_pid[$victim]}" 2>/dev/null || true
kill_time="$(date +%s.%N)"
touch "$work/killed"
wait_clients=0
for job in $(jobs -p); do
  case " ${pids[*]} " in *" $job "*) continue ;; esac
  wait "$job" || wait_clients=$?
done
((wait_clients == 0)) || fail "a client loop failed"

after=0
for s in $(seq 1 12); do
  while read -r start code rc replica; do
    # A deadline hit (curl 28) is a hang; anything else is a completed request or a clean failure.
    [[ $rc != 28 ]] || fail "session s$s: a request hung until curl's deadline"
    if awk -v a="$start" -v k="$kill_time" 'BEGIN { exit !(a > k) }'; then
      after=$((after + 1))
      [[ $code == 200 && $rc == 0 ]] || fail "session s$s: a request sent after the kill got status $code, curl exit $rc"
      [[ $replica != "$victim" ]] || fail "session s$s: answered by the killed replica $victim"
    fi
    if [[ ${home[s$s]} != "$victim" && $code == 200 ]]; then
      [[ $replica == "${home[s$s]}" ]] || fail "session s$s left its live replica ${home[s$s]} for $replica"
    fi
  done <"$work/s$s.out"
  recorded="$(wc -l <"$work/s$s.out")"
  ((recorded >= 3 && recorded <= 102)) || fail "session s$s: $recorded requests recorded (expected 1 to 100 before the kill, 2 after)"
done
((after >= 24)) || fail "$after requests were sent after the kill (expected 2 per session, 24)"
cut="$(cat "$work"/s*.out | awk '$2 != 200 || $3 != 0' | wc -l)"
echo "failover ok: replica $victim killed; $cut request(s) in flight there failed cleanly; $after sent after it all answered by live replicas; survivors' sessions stayed"
echo "nginx deploy check passed"
