"""The checks' tools: the pool's users, job directories, jobs in the
schedd (HTCondor's Python bindings), the job's files, the simulated
project's state. Everything here runs inside the Debian root, as root; what
the submitting user does goes through asuser.py under the user's uid.
"""
import json
import logging
import os
import re
import subprocess
import time
import urllib.error

from bindings import htcondor
import pytest

import simstate

log = logging.getLogger("htcondor-test")

HERE = os.path.dirname(os.path.abspath(__file__))
ASUSER = os.path.join(HERE, "asuser.py")

# The user who submits every job (the gridmanager and the GAHP run as it),
# and the second-tier user (the ssh route logs in as it; it runs serve).
TUSER, TUID = "boincuser", 2001
RUSER, RUID = "boincremote", 2002
THOME = "/home/" + TUSER
RHOME = "/home/" + RUSER
# Where the packages put them (boinc-gahp, boinc-gahp-tools).
GAHP = "/usr/bin/boinc_gahp"
SIM = "/usr/bin/boinc-sim"
CONDOR_LOGS = "/var/log/condor"
# The tier2 check's GAHP for grid_resource = batch boinctier2 (BOINCTIER2_GAHP).
TIER2_WRAPPER = THOME + "/bin/boinc-tier2-gahp"
GMLOG = CONDOR_LOGS + "/GridmanagerLog." + TUSER
PATH = "/usr/sbin:/usr/bin:/sbin:/bin"

IDLE, RUNNING, REMOVED, COMPLETED, HELD = 1, 2, 3, 4, 5
_STATUS = {1: "idle", 2: "running", 3: "removed", 4: "completed", 5: "held", 6: "transferring", 7: "suspended"}

UPPER = "THE QUICK BROWN FOX\nJUMPS OVER THE LAZY DOG\nTHE END\n"
INPUT = "the quick brown fox\njumps over the lazy dog\nthe end\n"
COUNTS = "brown 1\ndog 1\nend 1\nfox 1\njumps 1\nlazy 1\nover 1\nquick 1\nthe 3\n"
SUMMARY = "lines 3\nwords 11\nbytes 52\n"


def status_name(st):
    return _STATUS.get(st, repr(st))


def now():
    return time.monotonic()


def oneline(text, n=200):
    return (text or "")[:n].replace("\n", "|")


def read(path, default=None):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return default


def write(path, text, uid=None, mode=None):
    with open(path, "w") as f:
        f.write(text)
    if mode is not None:
        os.chmod(path, mode)
    if uid is not None:
        os.chown(path, uid, uid)


def chown_tree(path, uid):
    for d, dirs, files in os.walk(path):
        os.chown(d, uid, uid)
        for n in dirs + files:
            os.lchown(os.path.join(d, n), uid, uid)


def fail(why, *jobs, tails=()):
    """Ends a check: logs what helps to read the failure (the jobs'
    attributes, the tail of the gridmanager's log, other logs), then fails
    with `why`."""
    for job in jobs:
        if job is not None:
            job.describe()
    for label, path, n in tails:
        for line in (read(path, "") or "").splitlines()[-n:]:
            log.info("    %s| %s", label, line)
    pytest.fail(why, pytrace=False)


def gm_tail():
    return ("gm", GMLOG, 25)


def submitted_ads(iwd):
    """The ads the gridmanager sent in BLAH_JOB_SUBMIT for jobs of this
    Iwd, as its log shows them at D_FULLDEBUG, the GAHP escapes undone
    (`[ In = "/dev/null"; Cmd = ...; StageCmd = false; ... ]`)."""
    out = []
    for line in (read(GMLOG, "") or "").splitlines():
        m = re.search(r"GAHP\[\d+\] <- 'BLAH_JOB_SUBMIT \d+ (.*)'$", line)
        if m:
            ad = re.sub(r"\\(.)", r"\1", m.group(1))
            if 'Iwd = "%s"' % iwd in ad:
                out.append(ad)
    return out


class Faults:
    """What is wrong with a check's result: every finding, not just the
    first, in one failure."""

    def __init__(self):
        self.items = []

    def add(self, why):
        self.items.append(why)

    def check(self, ok, why):
        if not ok:
            self.add(why)
        return ok

    def same_file(self, path, expected):
        text = read(path)
        if text is None:
            self.add("missing " + os.path.basename(path))
        elif text != expected:
            self.add("%s differs: %s" % (os.path.basename(path), oneline(text)))

    def done(self):
        if self.items:
            pytest.fail("; ".join(self.items), pytrace=False)


# ------------------------------------------------------------ users


def user_env(user, home):
    return {"PATH": PATH, "LANG": "C.UTF-8", "HOME": home, "USER": user, "LOGNAME": user}


def run_as(uid, user, home, args, cwd=None, timeout=60, **kw):
    """Runs a program as a user of the root (no shell), its output captured."""
    return subprocess.run(
        args, user=uid, group=uid, extra_groups=[], cwd=cwd or home, env=user_env(user, home),
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout, **kw)


def as_user(args, cwd=THOME, **kw):
    return run_as(TUID, TUSER, THOME, args, cwd=cwd, **kw)


def as_remote_user(args, **kw):
    return run_as(RUID, RUSER, RHOME, args, **kw)


def in_root(args, timeout=60):
    return subprocess.run(args, env={"PATH": PATH, "LANG": "C.UTF-8", "HOME": "/root"},
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout)


def condor_version():
    """The pool's `condor_version` line: `$CondorVersion: 25.4.0 ... $`."""
    return in_root(["condor_version"]).stdout.split("\n")[0].strip()


def condor_major():
    """HTCondor's major version (23, 25): what the gridmanager sends differs."""
    m = re.search(r"\$CondorVersion: (\d+)\.", condor_version())
    if not m:
        raise RuntimeError("condor_version says no version: %s" % condor_version())
    return int(m.group(1))


def user_action(args, cwd=THOME, timeout=60):
    """asuser.py as the submitting user: its JSON answer, or an error."""
    try:
        p = as_user(["python3", ASUSER] + args, cwd=cwd, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise RuntimeError("%s: no answer in %d s" % (" ".join(args), timeout))
    if p.returncode != 0:
        raise RuntimeError((p.stderr or p.stdout).strip())
    return json.loads(p.stdout)


# Where free_port looks: each pool its own 100 ports (conftest's
# --port-base), so that two pools started at once never pick the same one.
PORT_BASE = 29618


def free_port():
    """A free TCP port on 127.0.0.1 (none of /proc/net/tcp's listeners has
    it) among this pool's."""
    used = set()
    for f in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in (read(f, "") or "").splitlines()[1:]:
            parts = line.split()
            if len(parts) > 3 and parts[3] == "0A":
                used.add(int(parts[1].rsplit(":", 1)[1], 16))
    for p in range(PORT_BASE, PORT_BASE + 100):
        if p not in used:
            return p
    raise RuntimeError("no free port in %d-%d" % (PORT_BASE, PORT_BASE + 99))


def wait_listening(port, proc, seconds=10):
    """Until something listens on 127.0.0.1:port, or proc has exited."""
    want = "0100007F:%04X" % port
    end = now() + seconds
    while now() < end:
        for line in (read("/proc/net/tcp", "") or "").splitlines()[1:]:
            parts = line.split()
            if len(parts) > 3 and parts[1] == want and parts[3] == "0A":
                return True
        if proc.poll() is not None:
            return False
        time.sleep(0.1)
    return False


def stop(proc, seconds=10):
    """SIGTERM, a bounded wait, then SIGKILL."""
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(seconds)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)


def gahp_pids():
    """The test user's boinc_gahp processes in this root (the host's and
    other roots' have another root directory)."""
    me = os.stat("/")
    pids = []
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            if read("/proc/%s/comm" % p, "").strip() != "boinc_gahp":
                continue
            uid = re.search(r"^Uid:\s+(\d+)", read("/proc/%s/status" % p, ""), re.M)
            r = os.stat("/proc/%s/root" % p)
        except OSError:
            continue
        if uid and int(uid.group(1)) == TUID and (r.st_dev, r.st_ino) == (me.st_dev, me.st_ino):
            pids.append(int(p))
    return sorted(pids)


# ------------------------------------------------------------ jobs


class Job:
    """A job (a cluster, or one proc of it) in the pool's schedd: its
    attributes from the queue, else from the history, as root sees them."""

    def __init__(self, pool, cluster, proc=None, name=""):
        self.pool = pool
        self.cluster = int(cluster)
        self.proc = proc
        self.name = name
        self.last_status = None

    def __str__(self):
        return "%d" % self.cluster if self.proc is None else "%d.%d" % (self.cluster, self.proc)

    def constraint(self):
        c = "ClusterId == %d" % self.cluster
        return c if self.proc is None else c + " && ProcId == %d" % self.proc

    def ad(self):
        ads = self.pool.schedd.query(constraint=self.constraint(), projection=[], limit=1)
        if ads:
            return ads[0]
        for ad in self.pool.schedd.history(self.constraint(), [], match=1):
            return ad
        return {}

    def attr(self, name, default=None):
        v = self.ad().get(name, default)
        return v if isinstance(v, (int, float, str, bool)) or v is None else str(v)

    def status(self):
        return self.attr("JobStatus")

    def in_queue(self):
        return bool(self.pool.schedd.query(constraint=self.constraint(), projection=["ClusterId"], limit=1))

    def procs_in_queue(self):
        return len(self.pool.schedd.query(constraint=self.constraint(), projection=["ProcId"]))

    def grid_id(self):
        """The daemon's job id: the last word of GridJobId."""
        return (self.attr("GridJobId") or "").split(" ")[-1]

    def wait_status(self, seconds, *wanted):
        """Until JobStatus is one of `wanted`: that status, or None after
        `seconds` (the last one seen in self.last_status)."""
        end = now() + seconds
        while now() < end:
            self.last_status = self.status()
            if self.last_status in wanted:
                return self.last_status
            time.sleep(2)
        return None

    def wait_left_queue(self, seconds):
        end = now() + seconds
        while now() < end:
            if not self.in_queue():
                return True
            time.sleep(2)
        return False

    def expect_completed(self, seconds, tails=(), what=""):
        """Waits for the job to end; fails unless it completed. Then waits
        for it to leave the queue (its final attributes are in the history)."""
        st = self.wait_status(seconds, COMPLETED, HELD, REMOVED)
        if st is None:
            fail("%snot completed in %d s (status %s)" % (what, seconds, status_name(self.last_status)), self,
                 tails=(gm_tail(),) + tuple(tails))
        if st != COMPLETED:
            fail("%sended %s, not completed: %s" % (what, status_name(st), self.attr("HoldReason")), tails=tuple(tails))
        self.wait_left_queue(30)

    def expect_running(self, seconds, before="it could be removed"):
        st = self.wait_status(seconds, RUNNING, COMPLETED, HELD, REMOVED)
        if st is None:
            fail("not running in %d s (status %s)" % (seconds, status_name(self.last_status)), self, tails=(gm_tail(),))
        if st != RUNNING:
            fail("ended %s before %s" % (status_name(st), before))

    def act(self, action):
        user_action(["act", action, str(self)], timeout=60)

    def remove_quietly(self):
        """Takes the job out of the queue (clean-up): True once it is gone."""
        if not self.in_queue():
            return True
        try:
            self.act("Remove")
        except RuntimeError:
            pass
        if self.wait_left_queue(30):
            return True
        try:
            self.act("RemoveX")
        except RuntimeError:
            pass
        return self.wait_left_queue(15)

    def describe(self):
        ad = self.ad()
        log.info("    job %s: JobStatus=%s ExitCode=%s GridJobId='%s' HoldReason='%s'", self, ad.get("JobStatus"),
                 ad.get("ExitCode"), ad.get("GridJobId", ""), ad.get("HoldReason", ""))

    def events(self, log_path):
        """The events of this job in a job event log (htcondor.JobEventLog)."""
        return [e for e in htcondor.JobEventLog(log_path).events(stop_after=0) if e.cluster == self.cluster and
                (self.proc is None or e.proc == self.proc)]


class Jobs:
    """A check's jobs: submitted as the user, removed at its end if they
    are still in the queue."""

    def __init__(self, pool):
        self.pool = pool
        self.submitted = []

    def submit(self, name, spool=False, cwd=None):
        d = cwd or os.path.join(THOME, name)
        try:
            out = user_action(["submit", "job.sub"] + (["--spool"] if spool else []), cwd=d)
        except RuntimeError as e:
            fail("submit of %s failed: %s" % (name, e))
        job = Job(self.pool, out["cluster"], name=name)
        self.submitted.append(job)
        log.info("  %s: submitted as job %d.0%s", name, job.cluster,
                 " (%d procs)" % out["procs"] if out["procs"] != 1 else "")
        return job

    def routed_copy(self, job):
        """The job router's copy of job (its cluster), from the queue or the history."""
        c = 'RoutedFromJobId == "%d.0"' % job.cluster
        ads = self.pool.schedd.query(constraint=c, projection=["ClusterId"], limit=1)
        if not ads:
            ads = list(self.pool.schedd.history(c, ["ClusterId"], match=1))
        if not ads:
            return None
        r = Job(self.pool, ads[0]["ClusterId"], name="routed " + job.name)
        self.submitted.append(r)
        return r

    def cleanup(self):
        for job in reversed(self.submitted):
            try:
                job.remove_quietly()
            except Exception as e:  # clean-up goes on past one job
                log.info("  (could not remove job %s: %s)", job, e)


# ------------------------------------------------------------ job directories


def job_dir(name, home=THOME, uid=TUID):
    d = os.path.join(home, name)
    os.makedirs(d, exist_ok=True)
    os.chown(d, uid, uid)
    return d


def make_job(name, app, args, extra="", grid_resource="batch boinc", input_text=INPUT):
    """A batch boinc job's directory: in, job.sub. `args` carries a unique
    marker word, which finds its BOINC job in the sim's state."""
    d = job_dir(name)
    write(os.path.join(d, "in"), input_text, TUID)
    outs = "counts, summary" if app == "wordcount" else "out"
    write(os.path.join(d, "job.sub"), """# %s: written by the HTCondor checks (deploy/htcondor-test)
universe                = grid
grid_resource           = %s
executable              = /bin/true
transfer_executable     = false
+remote_BoincApp         = "%s"
arguments               = "%s"
transfer_input_files    = in
transfer_output_files   = %s
output                  = job.out
error                   = job.err
log                     = job.log
%s
queue
""" % (name, grid_resource, app, args, outs, extra), TUID)
    return d


def make_vanilla_job(name, app, args, outs="out", extra=""):
    """A plain vanilla job that opts in to BOINC (+WantBOINC), for the job
    router's route (deploy/job-router-route.batch-boinc)."""
    d = job_dir(name)
    write(os.path.join(d, "in"), INPUT, TUID)
    write(os.path.join(d, "job.sub"), """# %s: written by the HTCondor checks (deploy/htcondor-test)
universe                = vanilla
executable              = /bin/true
transfer_executable     = false
arguments               = "%s"
should_transfer_files   = YES
when_to_transfer_output = ON_EXIT
transfer_input_files    = in
transfer_output_files   = %s
output                  = job.out
error                   = job.err
log                     = job.log
request_memory          = 64
+WantBOINC              = true
+BoincApp               = "%s"
%s
queue
""" % (name, args, outs, app, extra), TUID)
    return d


# ------------------------------------------------------------ projects


class Project:
    """A BOINC project the pool's jobs go to: its URL and authenticator;
    for the simulated one, its state (simstate.py)."""

    def __init__(self, url, auth, is_sim, name="project"):
        self.url = url
        self.auth = auth
        self.is_sim = is_sim
        self.name = name

    def state(self):
        for attempt in range(3):
            try:
                return simstate.load(self.url)
            except (OSError, urllib.error.URLError, ValueError):
                if attempt == 2:
                    raise
                time.sleep(1)

    def jobs(self, ident, marker):
        return simstate.jobs(self.state(), ident, marker)

    def jobs_text(self, ident, marker):
        return ";".join(" ".join(str(x) for x in j) for j in self.jobs(ident, marker))

    def aborted(self, ident, marker):
        return simstate.aborted(self.state(), ident, marker)

    def bounds(self, ident, marker):
        return simstate.bounds(self.state(), ident, marker)

    def cmdlines(self, ident, marker):
        return [j.get("command_line", "") for j, _ in simstate.matches(self.state(), ident, marker)]

    def batches(self, idents):
        return simstate.batches(self.state(), idents)

    def calls(self, endpoint):
        return simstate.calls(self.state(), endpoint)

    def wait_aborted(self, ident, marker, seconds):
        """0 once the matching BOINC jobs are all cancelled, else the last
        answer (1: one is not, 3: none matches)."""
        end = now() + seconds
        r = 1
        while now() < end:
            r = self.aborted(ident, marker)
            if r == 0:
                return 0
            time.sleep(1)
        return r

    def seq_steps(self, marker):
        """The BOINC jobs of a sequence job: (step, attempt, status, cancelled), by step."""
        out = []
        for j in self.jobs("", marker):
            p = j[1].split("#")
            out.append((int(p[-2]), p[-1], j[3], j[6]))
        return sorted(out, key=lambda s: s[0])


def start_sim(run_dir, name, data_dir, log_file):
    """A boinc-sim on 127.0.0.1 (its stdin a pipe this process holds: if
    the tests die, it stops). Returns (process, Project)."""
    out_path = os.path.join(run_dir, name + ".out")
    err = open(os.path.join(run_dir, name + ".err"), "w")
    with open(out_path, "w") as out:
        proc = subprocess.Popen([SIM, "--listen", "127.0.0.1:0", "--dir", data_dir, "--log-file", log_file],
                                stdin=subprocess.PIPE, stdout=out, stderr=err, env={"PATH": PATH, "HOME": "/root"},
                                start_new_session=True)
    err.close()
    end = now() + 30
    line = ""
    while now() < end:
        line = (read(out_path, "") or "").split("\n")[0]
        if line.startswith("ready ") and len(line.split()) >= 3:
            break
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    words = line.split()
    if len(words) < 3 or not words[1].startswith("http://127.0.0.1:"):
        stop(proc)
        raise RuntimeError("%s did not start on 127.0.0.1 in 30 s: %s %s" % (
            name, line, oneline(read(os.path.join(run_dir, name + ".err"), ""), 300)))
    log.info("%s ready at %s (pid %d)", name, words[1], proc.pid)
    return proc, Project(words[1], words[2], True, name)


def stop_sim(proc):
    if proc is None or proc.poll() is not None:
        return
    try:
        proc.stdin.close()
    except OSError:
        pass
    stop(proc)


def gahp_config(project, home=THOME):
    """The daemon's configuration (~/.config/boinc-gahp/config.toml,
    docs/blah.md): the project, its authenticator file, short periods for
    a test."""
    return """# written by the HTCondor checks (deploy/htcondor-test)
log_level = "debug"
# Work sequences poll their steps this often: short for a test.
sequence_poll_ms = 1000

[blah]
project_url = "%s"
authenticator_file = "%s/.boinc/sim.auth"
default_app = "uppercase"
# Jobs that send their own executable and name no app (the script
# checks): the sim's built-in runner app (docs/runner.md).
runner_app = "runner"
# One status query per period answers every job: short for a test.
status_refresh_secs = 2
""" % (project.url, home)
