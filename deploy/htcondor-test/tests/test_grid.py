"""`grid_resource = batch boinc` jobs: the gridmanager runs boinc_gahp, and
a job completes, is removed, held and released, fails, outlives a killed
daemon, carries its arguments, shares a batch, and goes where its data is."""
import glob
import os
import re
import signal
import time

import pytest

import harness
from harness import (COMPLETED, COUNTS, GMLOG, HELD, REMOVED, RUNNING, SUMMARY, THOME, TUID, UPPER, Faults, fail,
                     gm_tail, log, make_job, oneline, read, status_name, write)


def test_pool(pool, jobs):
    """The gridmanager starts the package's boinc_gahp (its banner in the
    log) and every HTCondor daemon listens on 127.0.0.1 only."""
    make_job("pool", "uppercase", "--sleep-ms 30000 mk-pool")
    job = jobs.submit("pool")
    end = time.monotonic() + 60
    while time.monotonic() < end and "GAHP server version" not in (read(GMLOG, "") or ""):
        time.sleep(1)
    gm = read(GMLOG, "") or ""
    if "GAHP server pid" not in gm:
        fail("the gridmanager did not start a GAHP within 60 s", tails=(gm_tail(),))
    for what in ("GAHP server pid", "GAHP server version"):
        line = next(x for x in gm.splitlines() if what in x) if what in gm else ""
        log.info("  %s", line[line.find(what):])
    if not re.search(r"GAHP server version: .*BOINC GAHP", gm):
        fail("no boinc_gahp banner in " + GMLOG, tails=(gm_tail(),))
    time.sleep(2)
    for line in [x for x in (read(GMLOG, "") or "").splitlines() if re.search(r"GAHP\[\d+\] (<-|->) ", x)][:12]:
        log.info("    gm| %s", line)
    listening = [x for f in glob.glob(harness.CONDOR_LOGS + "/*Log*") for x in (read(f, "") or "").splitlines()
                 if "Listening at" in x]
    bad = [x for x in listening if "Listening at <127.0.0.1:" not in x]
    if bad:
        fail("an HTCondor daemon listens beyond 127.0.0.1: " + bad[0])
    log.info("  HTCondor listens on 127.0.0.1 only (%d sockets)", len(listening))
    if not job.remove_quietly():
        fail("could not remove the probe job %s" % job)


def test_complete(pool, project, jobs):
    """A wordcount job completes with ExitCode 0, its two outputs, and its
    argument with a space reaching the app as one word. Against another
    project: an uppercase job (BOINC's example app) and its `out`."""
    if not project.is_sim:
        return complete_external(pool, project, jobs)
    make_job("complete", "wordcount", "--sleep-ms 1000 'two words' three mk-complete")
    job = jobs.submit("complete")
    job.expect_completed(240)
    d = THOME + "/complete"
    f = Faults()
    ec = job.attr("ExitCode")
    f.check(ec == 0, "ExitCode '%s', not 0" % ec)
    f.same_file(d + "/counts", COUNTS)
    f.same_file(d + "/summary", SUMMARY)
    # The job's event log: submitted, then terminated normally with 0.
    ends = [e for e in job.events(d + "/job.log") if e.type == harness.htcondor.JobEventType.JOB_TERMINATED]
    f.check(len(ends) == 1 and ends[0].get("ReturnValue") == 0,
            "job.log has no JobTerminated event with ReturnValue 0: %s" % [dict(e) for e in ends])
    # The argument with a space must reach the app as one word: the built-in
    # app logs `ignoring unknown argument "two words"` on stderr (job.err),
    # and the BOINC job's command line keeps it quoted.
    err = read(d + "/job.err", "") or ""
    if 'unknown argument "two words"' in err:
        log.info("  job.err shows the app got 'two words' as one argument")
    else:
        cl = (project.cmdlines(job.grid_id(), "mk-complete") or [""])[0]
        log.info("  BOINC command line: %s", cl)
        if '"two words"' in cl or "'two words'" in cl:
            log.info("  (job.err has no app stderr; the command line keeps 'two words' quoted)")
        else:
            f.add("'two words' did not reach BOINC as one argument (job.err: %s)" % oneline(err, 300))
    f.done()


def complete_external(pool, project, jobs):
    """complete, against another project: its uppercase app (BOINC's example
    app) gets the job's input and its `out` comes back."""
    name = "complete"
    make_job(name, "uppercase", "mk-%s-%d" % (name, time.time()))
    job = jobs.submit(name)
    job.expect_completed(300)
    f = Faults()
    ec = job.attr("ExitCode")
    f.check(ec == 0, "ExitCode '%s', not 0" % ec)
    f.same_file(THOME + "/complete/out", UPPER)
    log.info("  completed as %s on %s", job.grid_id(), project.url)
    f.done()


@pytest.mark.sim
def test_remove(pool, sim, jobs):
    """condor_rm of a running job takes it out of the queue as Removed, and
    its BOINC job is aborted."""
    make_job("remove", "uppercase", "--sleep-ms 40000 mk-remove")
    job = jobs.submit("remove")
    job.expect_running(120, "it could be removed")
    gid = job.grid_id()
    log.info("  running as %s; BOINC: %s", gid, sim.jobs_text(gid, "mk-remove"))
    try:
        job.act("Remove")
    except RuntimeError as e:
        fail("condor_rm failed: %s" % e)
    if not job.wait_left_queue(60):
        fail("still in the queue 60 s after condor_rm", job, tails=(gm_tail(),))
    st = job.status()
    if st != REMOVED:
        fail("left the queue with status %s" % status_name(st))
    if "BLAH_JOB_CANCEL" not in (read(GMLOG, "") or ""):
        log.info("  (no BLAH_JOB_CANCEL in the gridmanager log)")
    aborts = [e for e in job.events(THOME + "/remove/job.log") if e.type == harness.htcondor.JobEventType.JOB_ABORTED]
    log.info("  job.log: %d JobAborted event(s)", len(aborts))
    r = sim.wait_aborted(gid, "mk-remove", 30)
    if r == 3:
        fail("no BOINC job found for %s" % gid)
    if r != 0:
        fail("BOINC job not aborted 30 s after condor_rm: %s" % sim.jobs_text(gid, "mk-remove"))
    log.info("  BOINC job aborted: %s", sim.jobs_text(gid, "mk-remove"))


@pytest.mark.sim
def test_hold_release(pool, sim, jobs):
    """condor_hold of a running job aborts its BOINC job; after
    condor_release it completes (a new BOINC job)."""
    name = "hold-release"
    make_job(name, "uppercase", "--sleep-ms 15000 mk-" + name)
    job = jobs.submit(name)
    job.expect_running(120, "it could be held")
    gid1 = job.grid_id()
    try:
        job.act("Hold")
    except RuntimeError as e:
        fail("condor_hold failed: %s" % e)
    if job.wait_status(60, HELD) is None:
        fail("not held 60 s after condor_hold (status %s)" % status_name(job.last_status))
    # The gridmanager cancels the BOINC job on hold.
    if sim.wait_aborted(gid1, "", 30) != 0:
        fail("BOINC job %s not aborted 30 s after condor_hold: %s" % (gid1, sim.jobs_text(gid1, "")))
    log.info("  held; BOINC job aborted: %s", sim.jobs_text(gid1, ""))
    try:
        job.act("Release")
    except RuntimeError as e:
        fail("condor_release failed: %s" % e)
    st = job.wait_status(240, COMPLETED, HELD, REMOVED)
    if st is None:
        fail("not completed 240 s after release (status %s)" % status_name(job.last_status), job, tails=(gm_tail(),))
    if st != COMPLETED:
        fail("ended %s after release: %s" % (status_name(st), job.attr("HoldReason")))
    job.wait_left_queue(30)
    log.info("  BOINC job before hold %s, after release %s", gid1, job.grid_id())
    f = Faults()
    ec = job.attr("ExitCode")
    f.check(ec == 0, "ExitCode '%s', not 0" % ec)
    f.same_file(THOME + "/" + name + "/out", UPPER)
    kinds = [e.type for e in job.events(THOME + "/" + name + "/job.log")]
    f.check(harness.htcondor.JobEventType.JOB_HELD in kinds and harness.htcondor.JobEventType.JOB_RELEASED in kinds,
            "job.log lacks the hold or the release: %s" % [str(k) for k in kinds])
    f.done()


@pytest.mark.sim
def test_fail(pool, sim, jobs):
    """A failing BOINC job completes with the app's exit status as
    ExitCode (the daemon's mapping, docs/blah.md)."""
    make_job("fail", "uppercase", "--fail 3 mk-fail")
    job = jobs.submit("fail")
    st = job.wait_status(240, COMPLETED, HELD, REMOVED)
    if st is None:
        fail("did not end in 240 s (status %s)" % status_name(job.last_status), job, tails=(gm_tail(),))
    ec, hr = job.attr("ExitCode"), job.attr("HoldReason")
    if st != COMPLETED:
        fail("ended %s (ExitCode '%s', HoldReason '%s'); expected exit" % (status_name(st), ec, hr))
    job.wait_left_queue(30)
    ec = job.attr("ExitCode")
    if ec != 3:
        fail("completed with ExitCode '%s', not 3" % ec)
    log.info("  completed with ExitCode 3 (%s)", job.attr("ExitReason"))


@pytest.mark.sim
def test_gahp_kill(pool, sim, jobs):
    """boinc_gahp killed with SIGKILL while a job runs: the gridmanager
    starts a new one, and the job completes as the same BOINC job."""
    name = "gahp-kill"
    make_job(name, "uppercase", "--sleep-ms 20000 mk-" + name)
    job = jobs.submit(name)
    job.expect_running(120, "the GAHP could be killed")
    gid1 = job.grid_id()
    pids = harness.gahp_pids()
    if len(pids) != 1:
        fail("expected one boinc_gahp process, found '%s'" % " ".join(map(str, pids)))
    died0 = (read(GMLOG, "") or "").count("died due to signal 9")
    log.info("  killing boinc_gahp pid %d (SIGKILL) while job %s runs as %s", pids[0], job, gid1)
    os.kill(pids[0], signal.SIGKILL)
    end = time.monotonic() + 60
    p2 = []
    while time.monotonic() < end:
        p2 = [p for p in harness.gahp_pids() if p != pids[0]]
        if p2:
            break
        time.sleep(1)
    gm = read(GMLOG, "") or ""
    if gm.count("died due to signal 9") > died0:
        line = [x for x in gm.splitlines() if "died due to signal 9" in x][-1]
        log.info("  gridmanager: %s", line[line.find("ERROR"):])
    if p2:
        log.info("  a new boinc_gahp runs: pid %d", p2[0])
    st = job.wait_status(240, COMPLETED, HELD, REMOVED)
    if st is None:
        fail("not completed 240 s after the kill (status %s)" % status_name(job.last_status), job, tails=(gm_tail(),))
    if st != COMPLETED:
        fail("ended %s after the kill: %s" % (status_name(st), job.attr("HoldReason")))
    job.wait_left_queue(30)
    gid2 = job.grid_id()
    f = Faults()
    f.check(gid1 == gid2, "the job was submitted again (%s -> %s)" % (gid1, gid2))
    n = len(sim.jobs("", "mk-" + name))
    f.check(n == 1, "%d BOINC jobs for it, not 1" % n)
    ec = job.attr("ExitCode")
    f.check(ec == 0, "ExitCode '%s', not 0" % ec)
    f.same_file(THOME + "/" + name + "/out", UPPER)
    f.done()


@pytest.mark.sim
def test_args(pool, sim, jobs):
    """Arguments BOINC can carry reach the app exactly (it logs each one on
    stderr, which is job.err); one it cannot carry holds the job with a
    reason naming it."""
    name = "args"
    make_job(name, "uppercase",
             "alpha 'two words' 'it''s' 'tab\there' naïve back\\slash 'say \"\"hi\"\"' 'a&b<c>' mk-" + name)
    job = jobs.submit(name)
    job.expect_completed(240)
    d = THOME + "/" + name
    err = read(d + "/job.err", "") or ""
    f = Faults()
    for a in ('"alpha"', '"two words"', '"it\'s"', r'"tab\there"', '"naïve"', r'"back\\slash"', r'"say \"hi\""',
              '"a&b<c>"'):
        f.check("unknown argument " + a in err, "%s did not arrive whole" % a)
    if not f.items:
        log.info("  the app got: %s", " ".join(m[17:] for m in re.findall(r"unknown argument .*", err)))
    else:
        log.info("  job.err: %s", oneline(err, 400))

    # A word with a space and both quotes: BOINC's splitter has no escape.
    make_job(name + "-refused", "uppercase", "ok 'it''s \"\"both\"\"' mk-" + name)
    job = jobs.submit(name + "-refused")
    st = job.wait_status(120, HELD, COMPLETED, REMOVED)
    if st is None:
        f.add("not held in 120 s (status %s)" % status_name(job.last_status))
        f.done()
    hr = job.attr("HoldReason") or ""
    log.info("  held: %s", hr)
    f.check(st == HELD and re.search(r"argument 2.*both ' and", hr, re.S),
            "expected a hold naming argument 2 and its two quotes, got %s: %s" % (status_name(st), hr))
    f.done()


@pytest.mark.sim
def test_share(pool, sim, jobs):
    """20 jobs queued at once (one submit file, queue 20): all complete, and
    the daemon put some of them into one shared BOINC batch."""
    name = "share"
    d = harness.job_dir(name)
    for i in range(20):
        harness.job_dir("%s/j%d" % (name, i))
        write("%s/j%d/in" % (d, i), harness.INPUT, TUID)
    write(d + "/job.sub", """# share: written by the HTCondor checks (deploy/htcondor-test)
universe                = grid
grid_resource           = batch boinc
executable              = /bin/true
transfer_executable     = false
+remote_BoincApp         = "uppercase"
arguments               = "mk-share"
initialdir              = j$(Process)
transfer_input_files    = in
transfer_output_files   = out
output                  = job.out
error                   = job.err
log                     = ../job.log
queue 20
""", TUID)
    job = jobs.submit(name)
    end = time.monotonic() + 300
    left = 20
    while time.monotonic() < end:
        left = job.procs_in_queue()
        if left == 0:
            break
        time.sleep(3)
    if left:
        fail("%d of 20 jobs still queued after 300 s" % left, harness.Job(pool, job.cluster, 0), tails=(gm_tail(),))
    f = Faults()
    ids = []
    for i in range(20):
        proc = harness.Job(pool, job.cluster, i)
        st = proc.status()
        f.check(st == COMPLETED, "job %s ended %s" % (proc, status_name(st)))
        f.same_file("%s/j%d/out" % (d, i), UPPER)
        ids.append(proc.grid_id())
    batches = sim.batches(ids)
    log.info("  BOINC batches of the 20 jobs (name state jobs):")
    for b in batches:
        log.info("    %s %s %s", *b)
    shared = sum(n for _, _, n in batches if n > 1)
    f.check(shared >= 2, "no two jobs shared a BOINC batch")
    log.info("  %d of 20 jobs went into shared batches (%d batches)", shared, len(batches))
    # How the outputs came (batch zips when jobs finish together; not
    # checked: it depends on how completions fall between refreshes).
    log.info("  outputs: %d batch zip(s), %d single download(s)", sim.calls("get_output.php:batch_files"),
             sim.calls("get_output.php:workunit_file"))
    f.done()


@pytest.fixture
def second_sim(pool, run_dir):
    """A second simulated project, like the first (the broker check)."""
    proc, project = harness.start_sim(run_dir, "sim2", "/var/lib/boinc-sim-test2", "/var/log/boinc-sim-test/sim2.log")
    yield project
    harness.stop_sim(proc)


def restart_gahps():
    """A new daemon reads the config: the gridmanager starts one when this
    one is gone."""
    for p in harness.gahp_pids():
        try:
            os.kill(p, signal.SIGTERM)
        except ProcessLookupError:
            pass


@pytest.mark.sim
def test_broker(pool, sim, second_sim, jobs, run_dir):
    """The broker (docs/broker.md): a pool of two simulated projects in the
    daemon's [blah] config. A job that names no project lands on the one
    that already holds its input (the second in the pool; the first would
    win a tie)."""
    u = THOME
    log.info("  second project at %s", second_sim.url)
    write(u + "/.boinc/sim2.auth", second_sim.auth + "\n", TUID)
    write(u + "/.config/boinc-gahp/pool.toml", """# written by the HTCondor checks (deploy/htcondor-test)
refresh_secs = 30
probe_timeout_secs = 10
[[project]]
name = "first"
url = "%s"
authenticator_file = "%s/.boinc/sim.auth"
[[project]]
name = "second"
url = "%s"
authenticator_file = "%s/.boinc/sim2.auth"
""" % (sim.url, u, second_sim.url, u), TUID)
    data = "data the broker should follow\n"
    # 1. Put the data on the second project: a job that names it. It runs
    # on while the other job is placed: BOINC deletes a batch's input files
    # once the batch is retired (unless another batch still uses them).
    seed_name = "broker-seed"
    make_job(seed_name, "uppercase", "--sleep-ms 60000 mk-" + seed_name,
             '+remote_BoincProjectUrl = "%s"\n+remote_BoincAuthenticatorFile = "%s/.boinc/sim2.auth"' % (
                 second_sim.url, u), input_text=data)
    seed = jobs.submit(seed_name)
    st = seed.wait_status(120, RUNNING, COMPLETED, HELD, REMOVED)
    if st is None:
        fail("seed job not running in 120 s (status %s)" % status_name(seed.last_status), seed, tails=(gm_tail(),))
    if len(second_sim.jobs("", "mk-" + seed_name)) != 1:
        fail("the seed job is not on the second project")
    # 2. The pool in the daemon's config; a new daemon reads it.
    cfg = u + "/.config/boinc-gahp/config.toml"
    before = read(cfg)
    after = re.sub(r"^\[blah\]$", '[blah]\npool = "%s/.config/boinc-gahp/pool.toml"' % u, before, count=1, flags=re.M)
    if after == before:
        fail("could not add the pool to " + cfg)
    try:
        write(cfg, after, TUID)
        restart_gahps()
        # 3. The same input, no project named: the pool places it.
        name = "broker-pool"
        make_job(name, "uppercase", "mk-" + name, input_text=data)
        job = jobs.submit(name)
        job.expect_completed(240, what="pool job ")
        f = Faults()
        n1, n2 = len(sim.jobs("", "mk-" + name)), len(second_sim.jobs("", "mk-" + name))
        log.info("  pool job %s: %d BOINC job(s) on the first project, %d on the second", job, n1, n2)
        f.check(n1 == 0 and n2 == 1, "the pool job is not (only) on the project with its data (first %d, second %d)"
                % (n1, n2))
        f.same_file(u + "/" + name + "/out", data.upper())
        matched = [x for p in sorted(glob.glob(u + "/.local/state/boinc-gahp/boinc_gahp.log*"))
                   for x in (read(p, "") or "").splitlines() if "matches:" in x]
        if matched:
            log.info("    gahp| %s", matched[-1])
        f.done()
    finally:
        seed.remove_quietly()
        # Back to the plain config for whatever runs next.
        write(cfg, before, TUID)
        restart_gahps()
