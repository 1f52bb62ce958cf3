#!/bin/sh
# The runner's task (docs/runner.md), run by BOINC's wrapper in the slot
# directory. The wrapper has already unpacked condor_job.zip and listed
# the slot (initial_file_list); after this script it zips every file new
# since then into condor_out.zip. This script exits 0 once the job's
# program ran, because the wrapper fails the whole BOINC job on a non-zero
# exit (and then no output is uploaded): the job's own exit code goes to
# _condor_exit_code. Its own stderr is the wrapper's, which BOINC returns
# as the result's stderr text (the daemon logs it).

# Set by register: empty for a plain runner (the program runs here, as
# the client's user), the podman network mode (--container-network) for a
# container runner (the program runs only inside the job's image).
CONTAINER_NETWORK=""

fail() { echo "condor_runner: $*" >&2; exit 1; }

# A job is run in its image or not at all: a container job at a plain
# runner, or a job without an image at a container runner, fails the
# BOINC job (the daemon sends neither; this guards a misconfigured one).
image=""
[ -f _condor_container_image ] && IFS= read -r image <_condor_container_image
if [ -n "$CONTAINER_NETWORK" ]; then
    [ -n "$image" ] || fail "this runner runs jobs in their container image, and this job names none"
    command -v podman >/dev/null 2>&1 || fail "can't run the job in image $image: podman is not installed on this host"
    envfile=$(mktemp) || fail "can't write a temporary file"
    trap 'rm -f "$envfile"' EXIT
elif [ -n "$image" ]; then
    fail "this runner runs no container, and this job must run in image $image"
fi

# The job's environment: NAME=VALUE lines, taken as text, never
# evaluated. A name sh can't take is skipped (export would end the
# script). In a container they go to podman's --env-file, which takes
# the rest of each line as the value, as it is.
if [ -f _condor_env ]; then
    while IFS= read -r line || [ -n "$line" ]; do
        [ -n "$line" ] || continue
        case ${line%%=*} in
        "$line" | "" | [0-9]* | *[!A-Za-z0-9_]*)
            echo "condor_runner: skipped environment line ${line%%=*}" >&2 ;;
        *)
            if [ -n "$CONTAINER_NETWORK" ]; then
                printf '%s\n' "$line" >>"$envfile"
            else
                export "$line"
            fi ;;
        esac
    done <_condor_env
fi

# No program is the runner's failure (the BOINC job errs), not the job's.
[ -f condor_exec.exe ] || fail "no condor_exec.exe"
chmod +x condor_exec.exe
stdin=/dev/null
[ -f _condor_stdin ] && stdin=_condor_stdin

if [ -z "$CONTAINER_NETWORK" ]; then
    ./condor_exec.exe "$@" <"$stdin" >_condor_stdout 2>_condor_stderr
    rc=$?
else
    # The slot is the job's working directory /srv in the container, as
    # on the OSPool. --init: the job is not PID 1, so a signal ends it as
    # it would outside (128+N). The limits of open files and processes
    # are this task's own: podman's defaults (1048576 of each) fail where
    # it may not raise them (no CAP_SYS_RESOURCE); podman lowers its own
    # hard process limit to 32768, so no more than that either.
    limit() { # the soft:hard limit of /proc's line "Max $1", at most $2
        awk -v m="$2" -v l="Max $1" 'index($0, l) == 1 {
            n = split(substr($0, length(l) + 1), f, " ")
            for (i = 1; i <= 2; i++) if (f[i] == "unlimited" || f[i] + 0 > m) f[i] = m
            print f[1] ":" f[2] }' /proc/self/limits
    }
    nofile=$(limit "open files" 1048576)
    nproc=$(limit processes 32768)
    # create (fetches the image if the host lacks it) and init (the
    # runtime's set-up) fail before the program runs: that is this host's
    # failure, the BOINC job errs and BOINC sends it elsewhere. Nothing
    # ever runs outside the image.
    cid=$(podman create --init --interactive --network="$CONTAINER_NETWORK" \
        --ulimit "nofile=$nofile" --ulimit "nproc=$nproc" \
        --env-file "$envfile" --volume "$PWD:/srv" --workdir /srv \
        --log-driver none --entrypoint '' \
        "$image" /srv/condor_exec.exe "$@" 2>_condor_podman) ||
        fail "can't run the job in image $image: podman create: $(cat _condor_podman)"
    trap 'rm -f "$envfile"; podman rm --force "$cid" >/dev/null 2>&1' EXIT
    podman init "$cid" >/dev/null 2>_condor_podman ||
        fail "can't run the job in image $image: podman init: $(cat _condor_podman)"
    rm -f _condor_podman
    # The program's exit status (128+N after signal N), or podman's own
    # failure to start it, which the state does not record as an exit.
    podman start --attach --interactive "$cid" <"$stdin" >_condor_stdout 2>_condor_stderr
    rc=$?
    state=$(podman inspect --format '{{.State.Status}} {{.State.ExitCode}}' "$cid" 2>&1)
    case $state in
    "exited "*) rc=${state#exited } ;;
    *) fail "can't run the job in image $image: podman start exited $rc, the container is: $state" ;;
    esac
fi

# sh and podman report death by signal N as 128+N; they can't tell that
# from "exit 128+N", and 129-192 is taken for a signal.
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
