"""What the submitting user does with HTCondor's Python bindings, run as
that user (harness.py starts it with the user's uid, in the job's
directory): the tests themselves run as root, and the schedd would own a
job submitted from there by root. Prints one JSON object.

  asuser.py submit FILE [--spool]   submit the submit file FILE (its queue
                                    statement, relative paths from the
                                    current directory); --spool: as
                                    condor_submit -spool (the input files
                                    sent with the job). {"cluster": N, "procs": M}
  asuser.py act ACTION JOB          Hold, Release, Remove or RemoveX on JOB
                                    (a cluster or cluster.proc)
  asuser.py retrieve CLUSTER        condor_transfer_data: the spooled
                                    outputs into the job's directory
"""
import json
import sys

from bindings import V2, htcondor


def submit(path, spool):
    with open(path) as f:
        description = htcondor.Submit(f.read())
    # The file's queue statement ("queue" or "queue N") gives the count.
    qargs = description.getQArgs().strip()
    count = int(qargs) if qargs else 1
    schedd = htcondor.Schedd()
    result = schedd.submit(description, count=count, spool=spool)
    if spool:
        # Version 2 spools what its submit kept; version 1 wants the jobs' ads.
        schedd.spool(result if V2 else list(description.jobs(count=count, clusterid=result.cluster())))
    return {"cluster": result.cluster(), "procs": result.num_procs()}


def act(action, job):
    # Version 2's JobAction is a Python enum, version 1's a Boost one.
    how = htcondor.JobAction[action] if V2 else htcondor.JobAction.names[action]
    result = htcondor.Schedd().act(how, [job] if "." in job else "ClusterId == %d" % int(job))
    return {k: result[k] for k in result.keys()}


def retrieve(cluster):
    htcondor.Schedd().retrieve("ClusterId == %d" % int(cluster))
    return {"retrieved": int(cluster)}


def main(argv):
    if len(argv) >= 3 and argv[1] == "submit":
        out = submit(argv[2], "--spool" in argv[3:])
    elif len(argv) == 4 and argv[1] == "act":
        out = act(argv[2], argv[3])
    elif len(argv) == 3 and argv[1] == "retrieve":
        out = retrieve(argv[2])
    else:
        print(__doc__, file=sys.stderr)
        return 2
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv))
    except (RuntimeError, htcondor.HTCondorException, OSError, ValueError) as e:
        print("%s: %s" % (type(e).__name__, e), file=sys.stderr)
        sys.exit(1)
