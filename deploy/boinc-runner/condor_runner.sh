#!/bin/sh
# The runner's task (docs/runner.md), run by BOINC's wrapper in the slot
# directory. The wrapper has already unpacked condor_job.zip and listed
# the slot (initial_file_list); after this script it zips every file new
# since then into condor_out.zip. This script exits 0 once the job's
# program ran, because the wrapper fails the whole BOINC job on a non-zero
# exit (and then no output is uploaded): the job's own exit code goes to
# _condor_exit_code. Its own stderr is the wrapper's, which BOINC returns
# as the result's stderr text (the daemon logs it).
#
# The job's program, its environment lines and its container are the job
# author's, and the host is the volunteer's: nothing the job does steers
# this script or reaches past the job (docs/runner.md "What the runner
# does"). So this script never reads, writes or moves through a link or a
# special file that it did not make, and its own settings and commands
# are its own.

# Set by register: empty for a plain runner (the program runs here, as
# the client's user), the podman network mode (--container-network) for a
# container runner (the program runs only inside the job's image).
CONTAINER_NETWORK=""

# The system's commands, whatever PATH the client gave; that PATH is the
# job's (and where podman is looked for first).
start_path=${PATH-}
path_was_set=${PATH+yes}
PATH=/usr/bin:/bin:/usr/sbin:/sbin
IFS=' 	
'
nl='
'

note() { echo "condor_runner: $*" >&2; }
fail() { note "$@"; exit 1; }

# BOINC counts the CPU time and memory of the wrapper's task and its
# descendants, and podman's conmon, the parent of a container's
# processes, leaves its own parent. As a child subreaper this script
# adopts conmon, and so the container: its CPU time is reported, its
# memory counted. sh can't set the flag (prctl PR_SET_CHILD_SUBREAPER);
# perl can, and then runs this script again, as it was run (the same
# shell and arguments, from /proc): exec keeps the flag. The marker is
# the client's environment's, never the job's (its lines go to the
# container only).
if [ -n "$CONTAINER_NETWORK" ] && [ "${CONDOR_RUNNER_REAPER-}" != 1 ]; then
    CONDOR_RUNNER_REAPER=1
    export CONDOR_RUNNER_REAPER
    case $(uname -m) in # prctl's system call number
    x86_64) prctl=157 ;;
    aarch64) prctl=167 ;;
    *) prctl="" ;;
    esac
    perl=$(command -v perl) || perl=""
    shell=$(readlink /proc/$$/exe) || shell=""
    if [ -n "$prctl" ] && [ -n "$perl" ] && [ -n "$shell" ] && argv=$(mktemp) && cat /proc/$$/cmdline >|"$argv"; then
        if [ -n "$path_was_set" ]; then PATH=$start_path; else unset PATH; fi
        exec "$perl" -e 'my ($nr, $shell, $file) = @ARGV;
            open(my $f, "<", $file) or die "condor_runner: $file: $!\n";
            my @argv = split /\0/, do { local $/; <$f> }, -1;
            pop @argv;
            unlink $file;
            syscall($nr, 36, 1, 0, 0, 0) == 0 or
                warn "condor_runner: the container\x27s CPU time is not counted: prctl: $!\n";
            exec { $shell } @argv or die "condor_runner: exec $shell: $!\n"' "$prctl" "$shell" "$argv"
    fi
    [ -n "${argv-}" ] && rm -f -- "$argv"
    note "the container's CPU time is not counted: no perl, or not an x86_64 or aarch64 host"
fi

# A file this script reads must be a regular file, not a link (to a host
# file) nor a FIFO or device (which would block or read the host).
regular() { [ -f "$1" ] && [ ! -L "$1" ]; }

# Every `>` below makes a new file (noclobber: O_EXCL) after fresh has
# removed whatever was at that name, so a link put there is removed, never
# written through. rm -r removes a link itself, never what it points to.
set -C
fresh() {
    rm -rf -- "$1" 2>/dev/null
    [ -e "$1" ] || [ -L "$1" ] && fail "can't remove $1 to write it anew"
    return 0
}

# The files the wrapper listed before this task (it zips only new ones),
# read now: the job may rewrite the list. A name with a line break can't
# be told from two listed names, so it is never taken as listed.
listed=$nl
regular initial_file_list && listed=$nl$(cat initial_file_list)$nl
is_listed() {
    case $1 in *"$nl"*) return 1 ;; esac
    case $listed in *"$nl$1$nl"*) return 0 ;; esac
    return 1
}

# BOINC's files in the slot (the client's, the wrapper's, the app
# version's, whose main program is named as this launcher without
# _launcher.sh) and this script's own outputs: never the job's.
main_program=${0##*/}
main_program=${main_program%_launcher.sh}
slot_file() {
    case $1 in
    stderr.txt | boinc_* | init_data.xml | job.xml | wrapper | condor_runner.sh | "$main_program" | \
        condor_job.zip | condor_out.zip | temp.zip | initial_file_list* | wrapper_checkpoint.txt | \
        .condor_parked | _condor_stdout | _condor_stderr | _condor_exit_code | _condor_container) return 0 ;;
    esac
    return 1
}

# Where what the job made that is not returned goes: a directory this
# script makes, named as the wrapper's zip pattern skips it. Whatever was
# there (an input named so, or a link the job made) is removed first.
parked=.condor_parked
parked_made=""
make_parked() {
    [ -d "$parked" ] && [ ! -L "$parked" ] && [ -n "${parked_made-}" ] && return 0
    fresh "$parked"
    mkdir "$parked" || fail "can't make $parked"
    parked_made=yes
}

# podman: where the client's PATH has it (absolute directories only: an
# empty or relative entry would be the slot, the job's files), else the
# system's. Run with the client's PATH, as it would be by hand.
podman=""
rest=$start_path:/usr/local/bin:/usr/bin:/bin:
while [ -z "$podman" ] && [ -n "$rest" ]; do
    d=${rest%%:*}
    rest=${rest#*:}
    case $d in /*) [ -f "$d/podman" ] && [ -x "$d/podman" ] && podman=$d/podman ;; esac
done
run_podman() {
    if [ -n "$path_was_set" ]; then PATH=$start_path "$podman" "$@"; else "$podman" "$@"; fi
}

# A container job's files live in $parked, which is /srv in the
# container: the container never sees the slot itself, where BOINC's
# files are (the soft links the wrapper resolves condor_out.zip and its
# task through, init_data.xml with the volunteer's account key), nor this
# script's own outputs.
job=.
if [ -n "$CONTAINER_NETWORK" ]; then
    job=$parked
    # A runner run again (the wrapper restarted) finds the job's files
    # there already; the container of the run before is ended first, so
    # no container but this run's ever writes there.
    if regular _condor_container; then
        old=""
        IFS= read -r old <_condor_container
        [ -n "$old" ] && [ -n "$podman" ] && run_podman rm --force -- "$old" >/dev/null 2>&1
        fresh _condor_container
    fi
    if [ -d "$parked" ] && [ ! -L "$parked" ]; then parked_made=yes; else make_parked; fi
    for f in * .[!.]* ..?*; do
        [ -e "$f" ] || [ -L "$f" ] || continue
        slot_file "$f" && continue
        mv -- "$f" "$job/" || fail "can't move $f into $job"
    done
fi

# A job is run in its image or not at all: a container job at a plain
# runner, or a job without an image at a container runner, fails the
# BOINC job (the daemon sends neither; this guards a misconfigured one).
image=""
if [ -e "$job/_condor_container_image" ] || [ -L "$job/_condor_container_image" ]; then
    regular "$job/_condor_container_image" || fail "_condor_container_image is not a regular file"
    IFS= read -r image <"$job/_condor_container_image"
fi
if [ -n "$CONTAINER_NETWORK" ]; then
    [ -n "$image" ] || fail "this runner runs jobs in their container image, and this job names none"
    # Never an option of podman's, nor a path on this host (the daemon
    # refuses these too: docs/runner.md "Containers").
    case $image in
    docker://*) ;;
    -* | *[!A-Za-z0-9._/:@+-]* | containers-storage:* | dir:* | docker:* | docker-archive:* | docker-daemon:* | \
        oci:* | oci-archive:* | ostree:* | sif:* | tarball:*) fail "not an image name: $image" ;;
    esac
    [ -n "$podman" ] || fail "can't run the job in image $image: podman is not installed on this host"
    priv=$(mktemp -d) || fail "can't make a temporary directory"
    trap 'rm -rf -- "$priv"' EXIT
    envfile=$priv/env
    : >"$envfile"
elif [ -n "$image" ]; then
    fail "this runner runs no container, and this job must run in image $image"
fi

# No program is the runner's failure (the BOINC job errs), not the job's.
regular "$job/condor_exec.exe" || fail "no condor_exec.exe"
chmod +x "$job/condor_exec.exe" || fail "can't make condor_exec.exe executable"
stdin=/dev/null
if [ -e "$job/_condor_stdin" ] || [ -L "$job/_condor_stdin" ]; then
    regular "$job/_condor_stdin" || fail "_condor_stdin is not a regular file"
    stdin=$job/_condor_stdin
fi
envlines=/dev/null
if [ -e "$job/_condor_env" ] || [ -L "$job/_condor_env" ]; then
    regular "$job/_condor_env" || fail "_condor_env is not a regular file"
    envlines=$job/_condor_env
fi

# The job's environment: NAME=VALUE lines, taken as text, never
# evaluated, and never this shell's variables: they go to the job's
# program only, through env(1) here (as HTCondor's starter passes them,
# so no name is read-only, under any sh), through podman's --env-file in
# a container (which takes the rest of each line as the value, as it
# is). A line whose name is not a variable's is skipped and noted.
env_name_ok() {
    case $1 in
    "$2" | "" | [0-9]* | *[!A-Za-z0-9_]*) note "skipped environment line $1"; return 1 ;;
    esac
}
fresh _condor_stdout
fresh _condor_stderr

if [ -z "$CONTAINER_NETWORK" ]; then
    # env NAME=VALUE... ./condor_exec.exe ARGS...: the lines are added
    # after the job's arguments, then the arguments are rotated to the end.
    env_cmd=$(command -v env) || fail "no env command"
    n=$#
    while IFS= read -r line || [ -n "$line" ]; do
        [ -n "$line" ] || continue
        env_name_ok "${line%%=*}" "$line" || continue
        set -- "$@" "$line"
    done <"$envlines"
    set -- "$@" ./condor_exec.exe
    while [ "$n" -gt 0 ]; do
        set -- "$@" "$1"
        shift
        n=$((n - 1))
    done
    if [ -n "$path_was_set" ]; then
        PATH=$start_path "$env_cmd" -- "$@" <"$stdin" >_condor_stdout 2>_condor_stderr
    else
        "$env_cmd" -- "$@" <"$stdin" >_condor_stdout 2>_condor_stderr
    fi
    rc=$?
else
    while IFS= read -r line || [ -n "$line" ]; do
        [ -n "$line" ] || continue
        env_name_ok "${line%%=*}" "$line" || continue
        printf '%s\n' "$line" >>"$envfile"
    done <"$envlines"
    # The job's directory is its working directory /srv in the container,
    # as on the OSPool. --init: the job is not PID 1, so a signal ends it
    # as it would outside (128+N). The limits of open files and processes
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
    cid=$(run_podman create --init --interactive --network="$CONTAINER_NETWORK" \
        --ulimit "nofile=$nofile" --ulimit "nproc=$nproc" \
        --env-file "$envfile" --volume "$PWD/$job:/srv" --workdir /srv \
        --log-driver none --entrypoint '' \
        -- "$image" /srv/condor_exec.exe "$@" 2>"$priv/podman") ||
        fail "can't run the job in image $image: podman create: $(cat "$priv/podman")"
    trap 'rm -rf -- "$priv"; run_podman rm --force -- "$cid" >/dev/null 2>&1 && rm -f _condor_container' EXIT
    # Kept beside the job's directory, out of the container's reach, for
    # a run after a restart of the wrapper to end this container.
    fresh _condor_container
    printf '%s\n' "$cid" >_condor_container
    run_podman init "$cid" >/dev/null 2>|"$priv/podman" ||
        fail "can't run the job in image $image: podman init: $(cat "$priv/podman")"
    # Paused at once, or, when a suspend comes before podman start has
    # started it, once it runs.
    pause_container() {
        n=0
        until run_podman pause -- "$cid" >/dev/null 2>|"$priv/pause"; do
            state=$(run_podman inspect --format '{{.State.Status}}' -- "$cid" 2>&1)
            case $state in
            created | configured | initialized) [ $((n += 1)) -le 10 ] && sleep 1 && continue ;;
            esac
            note "can't pause the container ($state): $(cat "$priv/pause")"
            return 0
        done
        note suspended
    }
    # The program's exit status (128+N after signal N), or podman's own
    # failure to start it, which the state does not record as an exit.
    # The volunteer is in charge (docs/runner.md "The volunteer in
    # charge"): the wrapper (--use_tstp) sends this script SIGTSTP to
    # suspend the task, SIGCONT to resume it, SIGTERM to end it (abort,
    # quit, a bound exceeded), and the container, which is not the
    # wrapper's child, follows: pause freezes it, unpause thaws it, rm
    # kills it. podman start runs in the background, so that a signal's
    # trap runs at once (a trap ends the wait, with a status above 128).
    trap pause_container TSTP
    trap 'run_podman unpause -- "$cid" >/dev/null 2>&1 && note resumed' CONT
    trap 'run_podman rm --force --time 0 -- "$cid" >/dev/null 2>&1 || run_podman rm --force -- "$cid" >/dev/null 2>&1
        note "ended by BOINC: the container is removed"; exit 1' TERM INT HUP
    run_podman start --attach --interactive --sig-proxy=false "$cid" <"$stdin" >_condor_stdout 2>_condor_stderr &
    started=$!
    while wait "$started"; rc=$?; [ "$rc" -gt 128 ] && kill -0 "$started" 2>/dev/null; do :; done
    # An end from here on still removes the container (a signal's
    # default would skip the EXIT trap).
    trap - TSTP CONT
    state=$(run_podman inspect --format '{{.State.Status}} {{.State.ExitCode}}' "$cid" 2>&1)
    case $state in
    "exited "*) rc=${state#exited } ;;
    *) fail "can't run the job in image $image: podman start exited $rc, the container is: $state" ;;
    esac
fi

# sh and podman report death by signal N as 128+N; they can't tell that
# from "exit 128+N", and 129-192 is taken for a signal.
case $rc in
'' | *[!0-9]*) fail "can't tell the job's exit code: $rc" ;;
esac
fresh _condor_exit_code
if [ "$rc" -gt 128 ] && [ "$rc" -le 192 ]; then
    echo "signal $((rc - 128))" >_condor_exit_code
else
    echo "$rc" >_condor_exit_code
fi

if [ -n "$CONTAINER_NETWORK" ]; then
    # The container has exited, and its processes with it (its PID 1
    # ended): nothing changes the job's directory while it is sorted. Its
    # new top-level files come up into the slot to be zipped, each moved
    # as itself (mv renames: a link would stay a link, so links are left
    # where they are), never over a file of the slot's; the rest stays in
    # $parked. No file made set-user-id or set-group-id by a root
    # container, and no device node, is left on the host.
    find "$job" -xdev \( -type b -o -type c \) -exec rm -f -- {} + 2>/dev/null
    find "$job" -xdev -type f \( -perm -4000 -o -perm -2000 \) -exec chmod ug-s -- {} + 2>/dev/null
    for f in "$job"/* "$job"/.[!.]* "$job"/..?*; do
        [ -e "$f" ] || [ -L "$f" ] || continue
        name=${f#"$job"/}
        is_listed "$name" && continue
        if ! regular "$f"; then
            note "not returned (not a file): $name"
        elif slot_file "$name" || [ -e "$name" ] || [ -L "$name" ]; then
            note "not returned (a name of BOINC's or the runner's): $name"
        else
            mv -- "$f" "$name" || fail "can't move $name out of $job"
        fi
    done
    exit 0
fi

# The wrapper zips top-level files only, and a directory, a dangling link
# or a FIFO fails or stalls the zip, and a link to a file would send that
# file: park what the job made that is not a regular file where the zip's
# pattern doesn't look, and say so. A directory the wrapper listed (an
# input) stays.
for f in * .[!.]* ..?*; do
    [ -e "$f" ] || [ -L "$f" ] || continue
    if [ "$f" = "$parked" ]; then
        [ -n "${parked_made-}" ] && continue
        note "not returned (the runner's name): $f"
        make_parked
        continue
    fi
    regular "$f" && continue
    [ -d "$f" ] && [ ! -L "$f" ] && is_listed "$f" && continue
    make_parked
    mv -- "$f" "$parked/" && note "not returned (not a file): $f"
done
exit 0
