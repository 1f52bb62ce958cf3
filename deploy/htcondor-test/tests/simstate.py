#!/usr/bin/env python3
"""Reads the simulated BOINC project's state (GET <project_url>__sim/state,
see docs/sim.md) for the HTCondor checks (imported by harness.py; the
command line below is for looking by hand). Standard library only.

  simstate.py URL jobs  [ID] [MARKER]  one line per matching BOINC job:
                                       id name batch-name status error_mask batch-state cancelled
  simstate.py URL aborted  ID MARKER   exit 0 if at least one BOINC job matches and every
                                       match is cancelled (job error_mask has WU_ERROR_CANCELLED,
                                       or its batch is aborted or retired without a result);
                                       1 if one is not, 3 if none matches
  simstate.py URL cmdline  ID MARKER   the command lines of the matching jobs
  simstate.py URL bounds   ID MARKER   one line per matching job: app rsc_disk_bound
                                       rsc_memory_bound (bytes, as integers)
  simstate.py URL count                number of BOINC jobs
  simstate.py URL stepper N EXTRA      the `stepper` app's state file after N steps
                                       from an empty state with input `extra` from
                                       the file EXTRA, computed here (not asked)

  simstate.py URL batches ID...       one line per BOINC batch of these ids:
                                       batch-name state jobs-of-these-ids
  simstate.py URL calls ENDPOINT       how many calls of ENDPOINT (e.g.
                                       get_output.php:batch_files) the project served

A job matches when the last '/'-separated part of ID (the daemon's job id,
the last word of GridJobId: .../<batch>/<job>, or .../<job> when the batch
bears the job's name) is its name or, for a lone job, its batch's name, or
when MARKER is one of the words of its command line (the test puts a unique
word into every HTCondor job's arguments; the built-in apps ignore unknown
words). Jobs submitted together share a batch: its name alone does not
name one job.
"""
import json
import sys
import urllib.request

WU_ERROR_CANCELLED = 16
BATCH_ABORTED = 3
BATCH_RETIRED = 4


def load(url):
    with urllib.request.urlopen(url.rstrip("/") + "/__sim/state", timeout=10) as r:
        return json.load(r)


def matches(state, ident, marker):
    batches = {b["id"]: b for b in state.get("batches", [])}
    last = (ident or "").rstrip("/").split("/")[-1]
    sizes = {}
    for j in state.get("jobs", []):
        sizes[j.get("batch")] = sizes.get(j.get("batch"), 0) + 1
    out = []
    for j in state.get("jobs", []):
        b = batches.get(j.get("batch"), {})
        words = (j.get("command_line") or "").replace('"', " ").replace("'", " ").split()
        lone = sizes.get(j.get("batch")) == 1
        if (last and (j.get("name") == last or (lone and b.get("name") == last))) or (marker and marker in words):
            out.append((j, b))
    return out


def cancelled(j, b):
    if j.get("error_mask", 0) & WU_ERROR_CANCELLED:
        return True
    if b.get("state") == BATCH_ABORTED:
        return True
    return b.get("state") == BATCH_RETIRED and j.get("status") != "DONE"


FNV_OFFSET = 0xCBF29CE484222325
FNV_PRIME = 0x100000001B3


def fnv1a64(h, data):
    for b in data:
        h = ((h ^ b) * FNV_PRIME) & 0xFFFFFFFFFFFFFFFF
    return h


def stepper_state(steps, extra):
    """The stepper's state after `steps` steps (docs/sim.md): counter + 1,
    checksum = FNV-1a 64 over '<old checksum hex> <new counter>\n' + extra."""
    counter, checksum = 0, 0
    for _ in range(steps):
        counter += 1
        checksum = fnv1a64(fnv1a64(FNV_OFFSET, ("%016x %d\n" % (checksum, counter)).encode()), extra)
    return "" if steps == 0 else "counter %d checksum %016x\n" % (counter, checksum)


def jobs(state, ident, marker):
    """One tuple per matching BOINC job: id name batch-name status
    error_mask batch-state cancelled."""
    return [
        (j["id"], j["name"], b.get("name"), j["status"], j["error_mask"], b.get("state"), cancelled(j, b))
        for j, b in matches(state, ident, marker)
    ]


def aborted(state, ident, marker):
    """0 if at least one job matches and every match is cancelled, 1 if
    one is not, 3 if none matches."""
    found = matches(state, ident, marker)
    if not found:
        return 3
    return 0 if all(cancelled(j, b) for j, b in found) else 1


def bounds(state, ident, marker):
    """(app, rsc_disk_bound, rsc_memory_bound) of each matching job."""
    return [
        (j.get("app"), int(j.get("rsc_disk_bound") or 0), int(j.get("rsc_memory_bound") or 0))
        for j, _ in matches(state, ident, marker)
    ]


def batches(state, idents):
    """(batch-name, state, jobs-of-these-ids) of each BOINC batch holding
    one of the jobs named by idents (daemon job ids)."""
    by_id = {b["id"]: b for b in state.get("batches", [])}
    names = set(i.rstrip("/").split("/")[-1] for i in idents)
    count = {}
    for j in state.get("jobs", []):
        if j.get("name") in names:
            count[j.get("batch")] = count.get(j.get("batch"), 0) + 1
    return [(by_id.get(bid, {}).get("name"), by_id.get(bid, {}).get("state"), n) for bid, n in sorted(count.items())]


def calls(state, endpoint):
    return state.get("rpc_counts", {}).get(endpoint, 0)


def main(argv):
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    url, cmd = argv[1], argv[2]
    ident = argv[3] if len(argv) > 3 else ""
    marker = argv[4] if len(argv) > 4 else ""
    if cmd == "stepper":
        with open(argv[4], "rb") as f:
            sys.stdout.write(stepper_state(int(ident), f.read()))
        return 0
    state = load(url)
    if cmd == "count":
        print(len(state.get("jobs", [])))
        return 0
    if cmd == "calls":
        print(calls(state, ident))
        return 0
    if cmd == "batches":
        for line in batches(state, argv[3:]):
            print(*line)
        return 0
    if cmd == "jobs":
        for line in jobs(state, ident, marker):
            print(*line)
        return 0
    if cmd == "cmdline":
        for j, _ in matches(state, ident, marker):
            print(j.get("command_line", ""))
        return 0
    if cmd == "bounds":
        for line in bounds(state, ident, marker):
            print(*line)
        return 0
    if cmd == "aborted":
        return aborted(state, ident, marker)
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
