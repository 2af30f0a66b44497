#!/usr/bin/env bash
# Drives `kylin chat` through a fifo and interrupts two answers with SIGINT, then quits.
# usage: chat_sigint.sh KYLIN_BIN MODEL_DIR WORK_DIR; leaves WORK_DIR/{out,err,rc}.
set -u
bin=$1 model=$2 work=$3
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 2
mkfifo in
"$bin" chat --model "$model" --greedy --no-think -n 100000 --ctx 100000 <in >out 2>err &
pid=$!
exec 3>in
wait_for_output() {  # until the answer has started streaming (at most 10 s)
  for _ in $(seq 100); do [ "$(wc -c <out)" -gt "$1" ] && return; sleep 0.1; done
}
echo 'Tell me everything' >&3
wait_for_output 0
kill -INT "$pid"
sleep 0.3
size=$(wc -c <out)
echo 'Second question' >&3
wait_for_output "$size"
kill -INT "$pid"
sleep 0.3
echo /quit >&3
exec 3>&-
wait "$pid"
echo $? >rc
