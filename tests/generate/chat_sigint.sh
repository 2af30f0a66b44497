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
# Each wait polls for an event, bounded generously (120 s) for a loaded machine under ASan.
wait_for_output() {  # until out has grown past $1 bytes: the answer is streaming
  for _ in $(seq 1200); do [ "$(wc -c <out)" -gt "$1" ] && return; sleep 0.1; done
}
wait_for_cancelled() {  # until $1 answers have ended with their "stop: cancelled" stats line
  for _ in $(seq 1200); do [ "$(grep -c 'stop: cancelled' err)" -ge "$1" ] && return; sleep 0.1; done
}
echo 'Tell me everything' >&3
wait_for_output 0
kill -INT "$pid"
wait_for_cancelled 1
size=$(wc -c <out)
echo 'Second question' >&3
wait_for_output "$size"
kill -INT "$pid"
wait_for_cancelled 2
echo /quit >&3
exec 3>&-
wait "$pid"
echo $? >rc
