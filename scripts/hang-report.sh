#!/usr/bin/env bash
# Runs a command with a time limit; if it is still running then, writes every thread's stack
# (gdb when installed, else each thread's kernel wait channel from /proc) and kills it.
# For hangs seen only on the GPU machine, where one device call must bring back the evidence:
#   scripts/hang-report.sh SECONDS REPORT_FILE command args...
# Exit status: the command's, or 124 when it hung.
set -u
limit=${1:?usage: hang-report.sh SECONDS REPORT_FILE command...}
report=${2:?usage: hang-report.sh SECONDS REPORT_FILE command...}
shift 2
"$@" &
pid=$!
for ((i = 0; i < limit * 10; ++i)); do
  kill -0 "$pid" 2>/dev/null || { wait "$pid"; exit $?; }
  sleep 0.1
done
{
  echo "# hang after ${limit}s: $*"
  # the process and all its descendants (ctest -> test binaries, timeout -> python, ...)
  procs=$pid
  frontier=$pid
  while [ -n "$frontier" ]; do
    next=""
    for p in $frontier; do next="$next $(pgrep -P "$p" | tr '\n' ' ')"; done
    frontier=$(echo $next)
    procs="$procs $frontier"
  done
  for target in $procs; do
    echo "## pid $target: $(tr '\0' ' ' < /proc/"$target"/cmdline 2>/dev/null | cut -c1-200)"
    if command -v gdb >/dev/null; then
      gdb -p "$target" -batch -ex "set pagination off" -ex "thread apply all bt" 2>&1 |
        grep -vE "^\[New LWP|^Reading symbols|^Downloading|^warning:" | head -300
    else
      echo "(no gdb: kernel wait channel per thread)"
      for t in /proc/"$target"/task/*; do
        echo "$(basename "$t") $(cat "$t/comm") $(cat "$t/wchan" 2>/dev/null)"
      done
    fi
  done
} > "$report" 2>&1
for p in $procs; do kill -9 "$p" 2>/dev/null; done
wait "$pid" 2>/dev/null
exit 124
