"""Work sequences (deploy/batch-boinc-sequence.sub's attributes): one
HTCondor job, a chain of BOINC jobs (the sim's stepper app)."""
import time

import pytest

import harness
import simstate
from harness import COMPLETED, HELD, REMOVED, RUNNING, TUID, Faults, fail, gm_tail, log, write


def make_seq_job(name, steps, args):
    """The stepper, `steps` steps from an empty `state`, `extra` every step's."""
    d = harness.job_dir(name)
    write(d + "/state", "", TUID)
    write(d + "/extra", "extra of %s\n" % name, TUID)
    write(d + "/job.sub", """# %s: written by the HTCondor checks (deploy/htcondor-test)
universe                   = grid
grid_resource              = batch boinc
executable                 = /bin/true
transfer_executable        = false
+remote_BoincApp           = "stepper"
arguments                  = "%s"
transfer_input_files       = state, extra
+remote_BoincSequenceSteps = %d
+remote_BoincStateFiles    = "state"
+remote_BoincMaxStepTime   = 600
output                     = job.out
error                      = job.err
log                        = job.log
queue
""" % (name, args, steps), TUID)
    return d


def expected_state(d):
    """The stepper's state after 10 steps, computed here (not asked of the sim)."""
    with open(d + "/extra", "rb") as f:
        return simstate.stepper_state(10, f.read())


def steps_text(steps):
    return ";".join(" ".join(map(str, s)) for s in steps)


def none_live(steps):
    """No step live on the server (each one done or cancelled)."""
    return all(status == "DONE" or cancelled for _, _, status, cancelled in steps)


def done_count(steps):
    return sum(1 for s in steps if s[2] == "DONE")


@pytest.mark.sim
def test_seq_complete(pool, sim, jobs):
    """A 10-step sequence completes with the stepper's state after 10 steps,
    and 10 of its BOINC jobs are done."""
    name = "seq-complete"
    d = make_seq_job(name, 10, "mk-" + name)
    job = jobs.submit(name)
    job.expect_completed(300)
    f = Faults()
    ec = job.attr("ExitCode")
    f.check(ec == 0, "ExitCode '%s', not 0" % ec)
    f.same_file(d + "/state", expected_state(d))
    steps = sim.seq_steps("mk-" + name)
    done = len({s[0] for s in steps if s[2] == "DONE"})
    log.info("  %d BOINC jobs, %d done: %s", len(steps), done, steps_text(steps))
    f.check(done == 10, "%d BOINC steps done, not 10" % done)
    f.done()


@pytest.mark.sim
def test_seq_hold_release(pool, sim, jobs):
    """Held mid-chain: its live step is aborted and nothing runs while it
    is held; released, it goes on from the last completed step."""
    name = "seq-hold-release"
    marker = "mk-" + name
    d = make_seq_job(name, 10, "--sleep-ms 3000 " + marker)
    job = jobs.submit(name)
    end = time.monotonic() + 240
    steps = []
    while time.monotonic() < end:
        steps = sim.seq_steps(marker)
        if done_count(steps) >= 3:
            break
        time.sleep(1)
    if done_count(steps) < 3:
        fail("3 steps not done in 240 s: %s" % steps_text(steps), job, tails=(gm_tail(),))
    if job.wait_status(30, RUNNING) is None:
        fail("status %s mid-chain, not running" % harness.status_name(job.last_status), job)
    try:
        job.act("Hold")
    except RuntimeError as e:
        fail("condor_hold failed: %s" % e)
    if job.wait_status(60, HELD) is None:
        fail("not held 60 s after condor_hold (status %s)" % harness.status_name(job.last_status))
    # The live step is aborted on hold.
    end = time.monotonic() + 30
    while time.monotonic() < end:
        steps = sim.seq_steps(marker)
        if none_live(steps):
            break
        time.sleep(1)
    if not none_live(steps):
        fail("a step still live 30 s after condor_hold: %s" % steps_text(steps))
    # A step is submitted once the one before it was collected: every step
    # before the last one submitted was complete at the hold (one done on
    # the server but not yet collected may run again).
    held_done = max([s[0] for s in steps] + [0]) - 1
    log.info("  held with %d steps complete; BOINC: %s", held_done, steps_text(steps))
    # Nothing runs while it is held. (A step whose submit was already on
    # its way when the hold came may still reach the server: it is then
    # aborted, never left to run.)
    time.sleep(5)
    later = sim.seq_steps(marker)
    f = Faults()
    f.check(none_live(later), "a step is live while held: %s" % steps_text(later))
    f.check(done_count(later) == done_count(steps), "a step ran while held: %s" % steps_text(later))
    try:
        job.act("Release")
    except RuntimeError as e:
        fail("condor_release failed: %s" % e)
    st = job.wait_status(300, COMPLETED, HELD, REMOVED)
    if st is None:
        fail("not completed 300 s after release (status %s)" % harness.status_name(job.last_status), job,
             tails=(gm_tail(),))
    if st != COMPLETED:
        fail("ended %s after release: %s" % (harness.status_name(st), job.attr("HoldReason")))
    job.wait_left_queue(30)
    ec = job.attr("ExitCode")
    f.check(ec == 0, "ExitCode '%s', not 0" % ec)
    f.same_file(d + "/state", expected_state(d))
    steps = sim.seq_steps(marker)
    log.info("  BOINC jobs: %s", steps_text(steps))
    # The steps done before the hold ran once each: not again after release.
    for step in range(1, held_done + 1):
        runs = sum(1 for s in steps if s[0] == step)
        f.check(runs == 1, "step %d ran %d times" % (step, runs))
    f.check(len({s[0] for s in steps if s[2] == "DONE"}) == 10, "not 10 steps done")
    f.done()

