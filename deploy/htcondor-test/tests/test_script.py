"""Script jobs: the job's own executable, run by the project's runner app
(docs/runner.md; the sim's built-in `runner` really runs it)."""
import re

import pytest

import harness
from harness import COMPLETED, HELD, REMOVED, THOME, TUID, UPPER, Faults, fail, log, read, write

SCRIPT = """#!/bin/sh
# analyze.sh: written by the HTCondor checks (deploy/htcondor-test)
echo "FOO=$FOO"
for a in "$@"; do
    echo "arg:$a"
done
echo "analyze.sh ran" >&2
tr a-z A-Z <in >out.txt
exit 3
"""


def make_script_job(name, universe, extra=""):
    """A script job's directory: in, analyze.sh, job.sub. The script prints
    $FOO and its arguments (one per line) on stdout, a line on stderr,
    writes out.txt from in and exits 3. It is sent as HTCondor sends an
    executable by default (no transfer_executable line) and names no app,
    so the daemon's runner_app runs it. universe: grid (batch boinc) or
    vanilla (+WantBOINC, for the job router's route)."""
    d = harness.job_dir(name)
    write(d + "/in", harness.INPUT, TUID)
    write(d + "/analyze.sh", SCRIPT, TUID, 0o755)
    if universe == "grid":
        head = "universe                = grid\ngrid_resource           = batch boinc"
    else:
        head = ("universe                = vanilla\nshould_transfer_files   = YES\n"
                "when_to_transfer_output = ON_EXIT\n+WantBOINC              = true")
    # The marker word (last argument) finds the BOINC job in the sim.
    write(d + "/job.sub", """# %s: written by the HTCondor checks (deploy/htcondor-test)
%s
executable              = analyze.sh
arguments               = "one 'two words' mk-%s"
environment             = "FOO=bar"
transfer_input_files    = in
transfer_output_files   = out.txt
output                  = job.out
error                   = job.err
log                     = job.log
%s
queue
""" % (name, head, name, extra), TUID)
    return d


def script_job_ok(project, job, f):
    """Waits for a script job to end and checks what it left: completed
    with the script's ExitCode 3, job.out (its stdout: $FOO and each
    argument whole), job.err (its stderr), out.txt (made from in), and, on
    the simulated project, one BOINC job of the runner app. Returns that
    job's (app, disk bound, memory bound), or None."""
    name = job.name
    d = THOME + "/" + name
    job.expect_completed(300)
    ec = job.attr("ExitCode")
    f.check(ec == 3, "ExitCode '%s', not the script's 3" % ec)
    f.same_file(d + "/job.out", "FOO=bar\narg:one\narg:two words\narg:mk-%s\n" % name)
    err = read(d + "/job.err", "") or ""
    f.check("analyze.sh ran" in err.splitlines(), "job.err lacks the script's stderr: %s" % harness.oneline(err))
    f.same_file(d + "/out.txt", UPPER)
    bounds = None
    # The simulated project tells what it ran (another project: the outputs
    # and the exit code above say it).
    if project.is_sim:
        found = project.bounds("", "mk-" + name)
        if len(found) == 1 and found[0][0] == "runner":
            bounds = found[0]
        else:
            f.add("not one BOINC job of the runner app: '%s'" % ";".join(" ".join(map(str, b)) for b in found))
    log.info("  ExitCode %s; job.out: %s; BOINC job (app disk-bound memory-bound): %s", ec,
             harness.oneline(read(d + "/job.out", ""), 300), bounds or "(another project)")
    return bounds


def test_script_grid(pool, project, jobs):
    """A grid universe script job: batch boinc, the script sent, no app named."""
    make_script_job("script-grid", "grid")
    job = jobs.submit("script-grid")
    f = Faults()
    script_job_ok(project, job, f)
    f.done()


@pytest.mark.sim
def test_script_routed(pool, sim, jobs):
    """A plain vanilla script job that opts in to BOINC and names no
    BoincApp: the route sends it to the runner with its requests copied
    (request_disk, KiB, becomes the BOINC job's rsc_disk_bound in bytes);
    the original completes with the script's exit code and its outputs in
    its directory."""
    name = "script-routed"
    make_script_job(name, "vanilla", "request_memory          = 64\nrequest_disk            = 102400\n"
                                     "request_cpus            = 1")
    job = jobs.submit(name)
    f = Faults()
    bounds = script_job_ok(sim, job, f)
    r = jobs.routed_copy(job)
    if r is None:
        f.add("no routed copy of %s was found (did it run somewhere else?)" % job)
        f.done()
    log.info("  vanilla job %s ran as routed job %s: %s; remote_RequestDisk %s, remote_RequestCpus %s", job, r,
             r.attr("GridResource"), r.attr("remote_RequestDisk"), r.attr("remote_RequestCpus"))
    if bounds is not None:
        f.check(bounds[1] == 102400 * 1024,
                "rsc_disk_bound '%s', not request_disk's %d bytes" % (bounds[1], 102400 * 1024))
    f.done()


def ad_value(ad, name):
    """An attribute's value as the ad's text has it (`128`, `undefined`,
    `1.048576000000000E+06`), or None if the ad has no such attribute."""
    m = re.search(r"(?:\[|;) %s = ([^;\]]+?) ?(?:;|\])" % name, ad, re.I)
    return m.group(1) if m else None


@pytest.mark.sim
def test_script_defaults(pool, sim, jobs):
    """The routed script job asking for no memory and no disk: the ad
    HTCondor's defaults make, and the bounds the daemon gave its BOINC job
    (the runner's template has none, so the job's own apply). 25.x sends
    RequestMemory = 128 (MiB) and RequestDisk = 1048576 (KiB, a real after
    the route's EVALSET): rsc_memory_bound 128 MiB, rsc_disk_bound 1 GiB.
    23.9's defaults are expressions of the job's usage: RequestMemory its
    image size in MiB (1 for a small script), and RequestDisk (DiskUsage),
    which the route turns into undefined: no disk bound is sent, and the
    project's default applies."""
    name = "script-defaults"
    make_script_job(name, "vanilla")
    job = jobs.submit(name)
    f = Faults()
    bounds = script_job_ok(sim, job, f)
    major = harness.condor_major()
    ads = harness.submitted_ads(THOME + "/" + name)
    if len(ads) != 1:
        fail("%d BLAH_JOB_SUBMIT ads for %s in the gridmanager's log, not 1" % (len(ads), name))
    mem, disk = ad_value(ads[0], "RequestMemory"), ad_value(ads[0], "RequestDisk")
    log.info("  HTCondor %d sent RequestMemory %s, RequestDisk %s; the BOINC job's bounds: %s", major, mem, disk,
             bounds)
    if bounds is None:
        f.done()
    _, disk_bound, mem_bound = bounds
    try:
        mem_mib = float(mem)
    except (TypeError, ValueError):
        fail("RequestMemory '%s' is not a number" % mem)
    f.check(mem_bound == int(mem_mib * 1024 * 1024),
            "rsc_memory_bound %s, not RequestMemory's %s MiB" % (mem_bound, mem))
    if major >= 24:
        f.check(mem_mib == 128, "RequestMemory '%s', not 25.x's default 128" % mem)
        f.check(disk is not None and re.match(r"^[0-9.E+]+$", disk) is not None and float(disk) == 1048576,
                "RequestDisk '%s', not 25.x's default 1048576 KiB" % disk)
        f.check(disk_bound == 1048576 * 1024, "rsc_disk_bound %s, not RequestDisk's 1 GiB" % disk_bound)
    else:
        f.check(disk == "undefined", "RequestDisk '%s', not undefined (the route's answer to DiskUsage)" % disk)
        f.check(disk_bound != 1048576 * 1024, "rsc_disk_bound is 1 GiB, though no RequestDisk was sent")
    f.done()


@pytest.mark.sim
def test_script_held(pool, sim, jobs):
    """A routed script job that asks for more cpus than the runner provides
    (1: the default, no [blah.apps.runner] in the test's config): held with
    the daemon's reason naming both, and nothing made on the project."""
    name = "script-held"
    make_script_job(name, "vanilla", "request_cpus            = 8")
    job = jobs.submit(name)
    st = job.wait_status(120, HELD, COMPLETED, REMOVED)
    if st is None:
        fail("not held 120 s after submit (status %s)" % harness.status_name(job.last_status), job)
    hr = job.attr("HoldReason") or ""
    log.info("  %s: %s", harness.status_name(st), hr)
    f = Faults()
    f.check(st == HELD and re.search(r"8 cpus.*runner provides 1", hr, re.S),
            "expected a hold naming the 8 cpus asked and the runner's 1, got %s: '%s'" % (harness.status_name(st), hr))
    n = len(sim.jobs("", "mk-" + name))
    f.check(n == 0, "%d BOINC job(s) made for it, not 0" % n)
    f.done()



STAGE_SCRIPT = """#!/bin/sh
# stage.sh: written by the HTCondor checks (deploy/htcondor-test)
echo "stage.sh ran" >&2
tr a-z A-Z <in >out
exit 3
"""


@pytest.mark.sim
def test_stage_cmd(pool, sim, jobs):
    """A grid job whose executable is a script in its directory, with
    transfer_executable = false and no app named. HTCondor 24 and later
    say so in the BLAH ad (StageCmd = false): the daemon must not send the
    script but run default_app (uppercase) on the job's input, so the job
    completes with ExitCode 0. 23.9 sends no StageCmd, so the daemon
    cannot know: the script goes to the runner and exits 3 (there a user
    writes +remote_TransferExecutable = false; docs/htcondor.md)."""
    name = "stage-cmd"
    d = harness.job_dir(name)
    write(d + "/in", harness.INPUT, TUID)
    write(d + "/stage.sh", STAGE_SCRIPT, TUID, 0o755)
    write(d + "/job.sub", """# %s: written by the HTCondor checks (deploy/htcondor-test)
universe                = grid
grid_resource           = batch boinc
executable              = stage.sh
transfer_executable     = false
arguments               = "mk-%s"
transfer_input_files    = in
transfer_output_files   = out
output                  = job.out
error                   = job.err
log                     = job.log
queue
""" % (name, name), TUID)
    job = jobs.submit(name)
    job.expect_completed(300)
    major = harness.condor_major()
    f = Faults()
    ads = harness.submitted_ads(d)
    stage = [re.search(r"\bStageCmd = (\w+)", ad, re.I) for ad in ads]
    stage = [m.group(1).lower() if m else None for m in stage]
    log.info("  HTCondor %d sent %d BLAH_JOB_SUBMIT ad(s), StageCmd %s", major, len(ads), stage)
    found = sim.bounds("", "mk-" + name)
    apps = [b[0] for b in found]
    ec = job.attr("ExitCode")
    if major >= 24:
        f.check(stage == ["false"], "the gridmanager's ads do not say StageCmd = false once: %s" % stage)
        f.check(apps == ["uppercase"], "not one BOINC job of default_app uppercase (the script not sent): %s" % apps)
        f.check(ec == 0, "ExitCode '%s', not uppercase's 0 (the script's 3: it ran)" % ec)
    else:
        f.check(stage == [None], "23.x sent StageCmd: %s (docs/htcondor.md says it does not)" % stage)
        f.check(apps == ["runner"], "not one BOINC job of the runner app (the script sent): %s" % apps)
        f.check(ec == 3, "ExitCode '%s', not the script's 3" % ec)
    f.same_file(d + "/out", harness.UPPER)
    f.done()
