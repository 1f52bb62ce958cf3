"""Plain vanilla jobs routed to BOINC by the job router with the route users
install (deploy/job-router-route.batch-boinc)."""
import os
import time

import pytest

import harness
from harness import COMPLETED, HELD, REMOVED, RUNNING, THOME, UPPER, Faults, fail, log, make_vanilla_job, read

JR_TAIL = ("jr", harness.CONDOR_LOGS + "/JobRouterLog", 20)


@pytest.mark.sim
def test_router_complete(pool, sim, jobs):
    """A +WantBOINC vanilla job is routed (a `batch boinc` copy) and the
    original completes with ExitCode 0 and its output in its directory."""
    name = "router-complete"
    make_vanilla_job(name, "uppercase", "mk-" + name)
    job = jobs.submit(name)
    job.expect_completed(300, tails=(JR_TAIL,), what="the vanilla job ")
    r = jobs.routed_copy(job)
    if r is None:
        fail("completed, but no routed copy of %s was found (did it run somewhere else?)" % job)
    log.info("  vanilla job %s ran as routed job %s: %s, %s", job, r, r.attr("GridResource"), r.grid_id())
    f = Faults()
    ec = job.attr("ExitCode")
    f.check(ec == 0, "ExitCode '%s', not 0" % ec)
    log.info("  the original: JobUniverse %s, JobStatus %s, ExitCode %s", job.attr("JobUniverse"), job.status(), ec)
    f.same_file(THOME + "/" + name + "/out", UPPER)
    f.done()


@pytest.mark.sim
def test_router_remove(pool, sim, jobs):
    """condor_rm of the original removes the routed copy too, and the BOINC
    job is aborted."""
    name = "router-remove"
    make_vanilla_job(name, "uppercase", "--sleep-ms 60000 mk-" + name)
    job = jobs.submit(name)
    end = time.monotonic() + 180
    r = None
    while time.monotonic() < end:
        r = jobs.routed_copy(job)
        if r is not None and r.status() == RUNNING:
            break
        time.sleep(2)
    if r is None:
        fail("not routed in 180 s", job, tails=(JR_TAIL,))
    st = r.status()
    if st != RUNNING:
        fail("the routed copy %s is %s, not running" % (r, harness.status_name(st)), r)
    gid = r.grid_id()
    log.info("  vanilla job %s runs as routed job %s (%s); removing the original", job, r, gid)
    try:
        job.act("Remove")
    except RuntimeError as e:
        fail("condor_rm failed: %s" % e)
    if not job.wait_left_queue(90):
        fail("the original is still in the queue 90 s after condor_rm", job)
    if not r.wait_left_queue(90):
        fail("the routed copy %s is still in the queue 90 s after the original was removed" % r, r)
    a = sim.wait_aborted(gid, "mk-" + name, 60)
    if a == 3:
        fail("no BOINC job found for %s" % gid)
    if a != 0:
        fail("BOINC job not aborted 60 s after condor_rm of the original: %s" % sim.jobs_text(gid, "mk-" + name))
    log.info("  BOINC job aborted: %s", sim.jobs_text(gid, "mk-" + name))


@pytest.mark.sim
def test_router_unzip(pool, sim, jobs):
    """An app whose outputs come back as one zip (zipper: results.zip with
    upper.txt and count.txt): the job names the files inside and asks for
    them to be unpacked."""
    name = "router-unzip"
    d = make_vanilla_job(name, "zipper", "mk-" + name, "upper.txt, count.txt", "+BoincUnzipOutputs      = true")
    job = jobs.submit(name)
    job.expect_completed(300)
    f = Faults()
    f.same_file(d + "/upper.txt", UPPER)
    count = read(d + "/count.txt", "") or ""
    f.check("words 11" in count.splitlines(), "count.txt: %s" % harness.oneline(count, 100))
    f.check(not os.path.exists(d + "/results.zip"), "the zip the job did not name was kept")
    log.info("  the job's directory: %s", " ".join(sorted(os.listdir(d))))
    f.done()


@pytest.mark.sim
def test_router_refused(pool, sim, jobs):
    """A job the project refuses (no such app): the routed copy is held by
    boinc_gahp with a reason, and the original shows the same hold (the
    route does not remove held copies, so it is not routed again and again)."""
    name = "router-refused"
    make_vanilla_job(name, "no-such-app", "mk-" + name)
    job = jobs.submit(name)
    if job.wait_status(120, HELD, COMPLETED, REMOVED) is None:
        fail("the original is not held 120 s after submit (status %s)" % harness.status_name(job.last_status), job)
    hr = job.attr("HoldReason") or ""
    log.info("  the original is held: %s", hr)
    f = Faults()
    f.check("no app named no-such-app" in hr, "held without the daemon's reason: '%s'" % hr)
    time.sleep(10)
    c = 'RoutedFromJobId == "%d.0"' % job.cluster
    copies = {a["ClusterId"] for a in pool.schedd.query(constraint=c, projection=["ClusterId"])}
    copies |= {a["ClusterId"] for a in pool.schedd.history(c, ["ClusterId"])}
    f.check(len(copies) == 1, "%d routed copies, not 1" % len(copies))
    f.done()
