#!/usr/bin/env bash
# etr-run and etr-mpirun against hostile input (issue 13 cases 7, 8 and 10), as a user
# meets them: each refusal is one printable sentence on stderr and exit status 1; a
# discovery script that hangs is ended with its children (after --discovery-timeout, at
# most what is left of --min-np-timeout, and when etr-run is stopped by a signal).
#  7. --hosts 'local host:2'; a hostfile of random bytes, a FIFO as hostfile (it would
#     block); a discovery script printing random bytes;
#  8. a hanging discovery script (and its `sleep` child): the timeout, the --min-np-timeout
#     bound, SIGTERM to etr-run before the first launch and while the job runs, the job
#     ending while a discovery hangs;
# 10. a job program that does not exist, is a directory or is not executable: etr-run's
#     own check, mpirun's report of it (-wdir turns the check off), and etr-mpirun's,
#     whose option parsing must not take an option's value for the program.
# Usage: launcher_bad_input_test.sh ETR_RUN ETR_MPIRUN
set -u
etr_run=$1 mpirun=$2
work=$(mktemp -d)
started=()
cleanup() {
  for p in "${started[@]}"; do kill -KILL "$p" 2>/dev/null; done
  # A child a failing etr-run left behind (its pid in a file the script wrote).
  for f in "$work"/*.childpid; do [ -f "$f" ] && kill -KILL "$(cat "$f")" 2>/dev/null; done
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }
# run NAME COMMAND...: runs COMMAND (stdin /dev/null), stdout in NAME.out, stderr in
# NAME.err, its exit status in $status.
run() {
  local name=$1
  shift
  "$@" </dev/null >"$work/$name.out" 2>"$work/$name.err"
  status=$?
}
# refused NAME PATTERN: NAME exited 1 with one line on stderr, printable, matching the
# extended regex PATTERN.
refused() {
  local name=$1 pattern=$2
  local err=$work/$name.err
  [ "$status" -eq 1 ] || { cat "$err"; fail "$name: exit status $status, not 1"; }
  [ "$(wc -l <"$err")" -eq 1 ] || { cat "$err"; fail "$name: not one line on stderr"; }
  LC_ALL=C grep -q '[^[:print:]]' "$err" && { cat -v "$err"; fail "$name: unprintable bytes"; }
  grep -Eq "$pattern" "$err" || { cat "$err"; fail "$name: no sentence matching: $pattern"; }
  echo "ok $name: $(cat "$err")"
}
# stopped PID: the process no longer runs (absent, or a zombie not yet reaped).
stopped() {
  local state
  state=$(ps -o stat= -p "$1" 2>/dev/null)
  case "$state" in "" | Z*) return 0 ;; *) return 1 ;; esac
}
# hang_script NAME: a discovery script that writes its pid and its child's to files and
# waits for the child, `sleep 300`.
hang_script() {
  local s=$work/$1.sh
  printf '#!/bin/sh\necho $$ >%s\nsleep 300 &\necho $! >%s\nwait\n' \
    "$work/$1.pid" "$work/$1.childpid" >"$s"
  chmod +x "$s"
  echo "$s"
}
# ended NAME: the hang script NAME and its child no longer run.
ended() {
  local p c i
  p=$(cat "$work/$1.pid") c=$(cat "$work/$1.childpid")
  for i in $(seq 50); do stopped "$p" && stopped "$c" && return 0; sleep 0.1; done
  fail "$1: the discovery script ($p) or its child ($c) still runs"
}

echo "== 7. host names"
run space "$etr_run" --hosts 'local host:2' -- true
refused space "^etr-run: error: --hosts item 'local host:2': 'local host' is not a host name: ' ' is not a letter, digit, '-' or '\.'"
run slots "$etr_run" --hosts 'node1:100000' -- true
refused slots "the slot count '100000' is not a whole number from 1 to 4096"
run short "$etr_run" --hosts localhost:2 --min-np 3 -- true
refused short "^etr-run: error: --hosts gives 2 slot\(s\), fewer than --min-np 3, and a fixed list never grows; list more slots$"
run usage "$etr_run" --np abc --hosts localhost -- true
[ "$status" -eq 2 ] || { cat "$work/usage.err"; fail "usage: exit status $status, not 2"; }
echo "ok usage: $(head -1 "$work/usage.err")"
head -c 4096 /dev/urandom >"$work/random.hosts"
run hostfile "$etr_run" --hostfile "$work/random.hosts" -- true
refused hostfile "^etr-run: error: hostfile $work/random.hosts, line [0-9]+ \('.*'\): .*; write HOST, HOST:SLOTS or HOST slots=SLOTS$"
mkfifo "$work/fifo.hosts"
run fifo timeout 20 "$etr_run" --hostfile "$work/fifo.hosts" -- true
refused fifo "the hostfile $work/fifo.hosts is not a regular file"
printf '#!/bin/sh\necho localhost:1\nhead -c 2000 /dev/urandom\n' >"$work/garbage.sh"
chmod +x "$work/garbage.sh"
run garbage "$etr_run" --host-discovery-script "$work/garbage.sh" -- true
refused garbage "^etr-run: error: the output of $work/garbage.sh, line [0-9]+ "
grep -q "launch 1" "$work/garbage.out" "$work/garbage.err" && fail "garbage: launched on garbage"

echo "== 8. a hanging discovery script"
run timeout "$etr_run" --host-discovery-script "$(hang_script timeout)" --discovery-timeout 1 -- true
refused timeout "the host discovery script $work/timeout.sh did not finish within 1 s \(--discovery-timeout\) and was ended"
ended timeout
# --min-np-timeout 1 bounds the default 10 s discovery timeout.
run bound "$etr_run" --host-discovery-script "$(hang_script bound)" --min-np-timeout 1 -- true
refused bound "did not finish within 1 s"
ended bound
# SIGTERM to etr-run while the first discovery hangs (it may take 60 s).
"$etr_run" --host-discovery-script "$(hang_script term)" --discovery-timeout 60 -- true \
  </dev/null >"$work/term.out" 2>"$work/term.err" &
pid=$!
started+=("$pid")
for i in $(seq 100); do [ -s "$work/term.childpid" ] && break; sleep 0.1; done
kill -TERM "$pid"
wait "$pid"
status=$?
[ "$status" -eq 143 ] || { cat "$work/term.err"; fail "term: exit status $status, not 143"; }
grep -q "stopped by signal 15 while waiting for slots" "$work/term.err" || { cat "$work/term.err"; fail "term: no sentence"; }
ended term
echo "ok term: $(cat "$work/term.err")"
# SIGTERM while the job runs and a later discovery hangs: the first discovery prints a
# slot, every later one hangs.
printf '#!/bin/sh\n[ -f %s ] || { touch %s; echo localhost:1; exit 0; }\nexec %s\n' \
  "$work/once" "$work/once" "$(hang_script later)" >"$work/first-then-hang.sh"
chmod +x "$work/first-then-hang.sh"
"$etr_run" --host-discovery-script "$work/first-then-hang.sh" --discovery-timeout 60 \
  --discovery-interval 0.1 -- sleep 60 </dev/null >"$work/running.out" 2>"$work/running.err" &
pid=$!
started+=("$pid")
for i in $(seq 100); do [ -s "$work/later.childpid" ] && break; sleep 0.1; done
[ -s "$work/later.childpid" ] || { cat "$work/running.err"; fail "running: no second discovery"; }
kill -TERM "$pid"
wait "$pid"
status=$?
[ "$status" -eq 143 ] || { cat "$work/running.err"; fail "running: exit status $status, not 143"; }
grep -q "launch 1: 1 rank(s) on localhost:1" "$work/running.err" || { cat "$work/running.err"; fail "running: the job was not launched"; }
ended later
echo "ok running"

# The job ends while a discovery hangs: etr-run does not wait for the script (60 s) to
# report the job's end (under `timeout 30`, which would end a blocked etr-run).
printf '#!/bin/sh\n[ -f %s ] || { touch %s; echo localhost:1; exit 0; }\nexec %s\n' \
  "$work/once2" "$work/once2" "$(hang_script during)" >"$work/first-then-hang2.sh"
chmod +x "$work/first-then-hang2.sh"
run during timeout 30 "$etr_run" --host-discovery-script "$work/first-then-hang2.sh" \
  --discovery-timeout 60 --discovery-interval 0.1 -- sh -c 'sleep 2; exit 3'
[ "$status" -eq 3 ] || { cat "$work/during.err"; fail "during: exit status $status, not the job's 3"; }
[ -s "$work/during.childpid" ] || { cat "$work/during.err"; fail "during: no discovery while the job ran"; }
ended during
echo "ok during"

echo "== 10. a program that cannot be started"
run missing "$etr_run" --hosts localhost:2 -- /nonexistent
refused missing "^etr-run: error: the program /nonexistent does not exist; give the job as an executable's path or a program on PATH$"
run notonpath "$etr_run" --hosts localhost:2 -- no-such-program-etr
refused notonpath "the program no-such-program-etr is not on PATH or in the working directory"
mkdir "$work/dir"
run directory "$etr_run" --hosts localhost:1 -- "$work/dir"
refused directory "the program $work/dir is not a file"
# -wdir: etr-run leaves the check to mpirun, and says mpirun's report in one sentence.
run reported "$etr_run" --hosts localhost:1 --mpi-arg=-wdir --mpi-arg="$work" -- /nonexistent
[ "$status" -eq 1 ] || { cat "$work/reported.err"; fail "reported: exit status $status, not 1"; }
grep -Eq "^etr-run: error: the program /nonexistent does not exist or is not executable on host [^ ]+; " "$work/reported.err" ||
  { cat "$work/reported.err"; fail "reported: mpirun's report was not turned into a sentence"; }
grep -q -- "-----" "$work/reported.err" && { cat "$work/reported.err"; fail "reported: mpirun's page was forwarded"; }
echo "ok reported"

run mpirun_missing "$mpirun" -np 2 /nonexistent
refused mpirun_missing "^etr-mpirun: error: the program '/nonexistent' does not exist; give an executable's path or a program on PATH$"
run mpirun_notonpath "$mpirun" -np 2 no-such-program-etr
refused mpirun_notonpath "the program 'no-such-program-etr' is not on PATH or in the working directory"
run mpirun_plain "$mpirun" -np 1 --mca btl_base_verbose 0 -x ETR_X=1 /etc/passwd
refused mpirun_plain "the program '/etc/passwd' is not executable"
run mpirun_directory "$mpirun" -np 1 -- "$work/dir"
refused mpirun_directory "the program '$work/dir' is not a file"
# Options with values before a good program: not taken for the program.
run mpirun_ok "$mpirun" -np 1 --mca btl_base_verbose 0 -x ETR_X=1 --bind-to none -wdir "$work" true
[ "$status" -eq 0 ] || { cat "$work/mpirun_ok.err"; fail "mpirun_ok: exit status $status"; }
printf '#!/bin/sh\necho here\n' >"$work/dir/job.sh"
chmod +x "$work/dir/job.sh"
run mpirun_wdir "$mpirun" -np 1 -wdir "$work/dir" ./job.sh
[ "$status" -eq 0 ] && grep -q here "$work/mpirun_wdir.out" ||
  { cat "$work/mpirun_wdir.err"; fail "mpirun_wdir: a program relative to -wdir was refused"; }
echo "ok mpirun options"
echo "PASS"
