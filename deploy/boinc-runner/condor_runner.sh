#!/bin/sh
# The runner's task (docs/runner.md), run by BOINC's wrapper in the slot
# directory. The wrapper has already unpacked condor_job.zip and listed
# the slot (initial_file_list); after this script it zips every file new
# since then into condor_out.zip. This script always exits 0, because
# the wrapper fails the whole BOINC job on a non-zero exit (and then no
# output is uploaded): the job's own exit code goes to _condor_exit_code.
# Its own stderr is the wrapper's, which BOINC returns as the result's
# stderr text (the daemon logs it).

# The job's environment: NAME=VALUE lines, exported as text, never
# evaluated. A name sh can't take is skipped (export would end the script).
if [ -f _condor_env ]; then
    while IFS= read -r line || [ -n "$line" ]; do
        [ -n "$line" ] || continue
        case ${line%%=*} in
        "$line" | "" | [0-9]* | *[!A-Za-z0-9_]*)
            echo "condor_runner: skipped environment line ${line%%=*}" >&2 ;;
        *) export "$line" ;;
        esac
    done <_condor_env
fi

# No program is the runner's failure (the BOINC job errs), not the job's.
[ -f condor_exec.exe ] || { echo "condor_runner: no condor_exec.exe" >&2; exit 1; }
chmod +x condor_exec.exe
stdin=/dev/null
[ -f _condor_stdin ] && stdin=_condor_stdin

./condor_exec.exe "$@" <"$stdin" >_condor_stdout 2>_condor_stderr
rc=$?
# sh reports death by signal N as 128+N; it can't tell that from
# "exit 128+N", and takes 129-192 for a signal.
if [ "$rc" -gt 128 ] && [ "$rc" -le 192 ]; then
    echo "signal $((rc - 128))" >_condor_exit_code
else
    echo "$rc" >_condor_exit_code
fi

# The wrapper zips top-level files only, and a directory (or a dangling
# link) fails the zip and so the job: park what the job made that is not
# a file where the zip's pattern doesn't look (.condor_parked), and say so.
for f in * .[!.]* ..?*; do
    [ -e "$f" ] || [ -L "$f" ] || continue
    [ -f "$f" ] && continue
    grep -qxF -e "$f" initial_file_list 2>/dev/null && continue
    [ "$f" = .condor_parked ] && continue
    mkdir -p .condor_parked && mv "$f" .condor_parked/ &&
        echo "condor_runner: not returned (not a file): $f" >&2
done
exit 0
