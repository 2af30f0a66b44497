# Sourced by the *_client.sh tests: kylin-server instances on free loopback ports for the official
# clients' checks, killed on exit. serve NAME DIR [ARGS...] starts one on a model directory made of
# DIR's files under the served name NAME (the id the clients see) and sets $port; stop ends the last one
# with SIGTERM and fails unless it exits 0. The e2e checkpoints: e2e-qwen3 (the Qwen3 tokenizer and
# template) and e2e-qwen35 (Qwen3.5: the synthetic tokenizer, the official template, XML tool calls).
work="$(mktemp -d)"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && kill -KILL "$p" 2>/dev/null; done
  rm -rf "$work"
}
trap cleanup EXIT

free_port() { node -e 'const s = require("net").createServer().listen(0, "127.0.0.1", () => { console.log(s.address().port); s.close(); })'; }

# model_dir NAME: the directory of one of the e2e checkpoints, made under $work.
model_dir() {
  local dir="$work/$1"
  [[ -d "$dir" ]] && { echo "$dir"; return; }
  mkdir "$dir"
  case "$1" in
    e2e-qwen3)
      ln -s "$data"/models/e2e-qwen3-fullvocab/* "$dir"/
      ln -s "$data"/qwen3-tokenizer/tokenizer.json "$data"/qwen3-tokenizer/tokenizer_config.json "$dir"/ ;;
    e2e-qwen35) ln -s "$data"/models/e2e-qwen35-fullvocab/* "$dir"/ ;;
    e2e-qwen3-embedding) ln -s "$data"/models/e2e-qwen3-embedding/* "$dir"/ ;;
    *) echo "no e2e checkpoint $1" >&2; exit 1 ;;
  esac
  echo "$dir"
}

serve() {  # NAME [kylin-server args...]
  local name="$1"
  shift
  local dir
  dir="$(model_dir "$name")"
  port="$(free_port)"
  log="$work/$name-$port.log"
  "$bin" --model "$dir" --port "$port" --threads 2 "$@" >"$log" 2>&1 &
  pid=$!
  pids+=("$pid")
  for _ in $(seq 1 300); do
    if node -e 'fetch(process.argv[1]).then(r => process.exit(r.ok ? 0 : 1), () => process.exit(1))' \
         "http://127.0.0.1:$port/health"; then return 0; fi
    kill -0 "$pid" 2>/dev/null || { cat "$log" >&2; echo "kylin-server exited early" >&2; exit 1; }
    sleep 0.2
  done
  cat "$log" >&2; echo "kylin-server never became healthy" >&2; exit 1
}

stop() {  # the last server serve started
  kill -TERM "$pid"
  local status=0
  wait "$pid" || status=$?
  [[ $status -eq 0 ]] || { cat "$log" >&2; echo "kylin-server exited with $status after SIGTERM" >&2; exit 1; }
}
