#!/bin/sh
# The runner's main program: starts BOINC's wrapper (WRAPPER, beside this
# file in the project directory) with the job's arguments. The wrapper
# takes its task's arguments only after --passthrough_child, and joins
# them with spaces and splits the result again (at white space, '...' and
# "..." grouping, no escapes) before running the task: so each argument
# that would not survive that is quoted here, with the quote it does not
# contain (BOINC's own command lines can't carry one with white space and
# both quotes, nor an empty one, either: the daemon refuses those).
n=$#
while [ "$n" -gt 0 ]; do
    a=$1
    shift
    n=$((n - 1))
    case $a in
    *[[:space:]]* | [\'\"]*)
        case $a in
        *\'*) a="\"$a\"" ;;
        *) a="'$a'" ;;
        esac ;;
    esac
    set -- "$@" "$a"
done
exec "$(dirname "$0")/WRAPPER" --passthrough_child "$@"
