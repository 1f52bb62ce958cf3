"""The HTCondor checks' pool, projects and selection (docs/htcondor-test.md).

pytest runs inside the Debian root (trixie: HTCondor 23.9, sid: 25) that
deploy/htcondor-test/run made and installed the packages in, as root. The
fixtures set up what the checks run in:

  project      the simulated project (boinc-sim in the root), or with
               --project-url/--project-auth-file another BOINC project (the
               real-server stage); `sim` is the simulated one alone
  pool         a personal HTCondor (master, collector, schedd, job router)
               on 127.0.0.1 whose gridmanager runs the package's boinc_gahp
               as the user boincuser, configured for `project`
  remote_user  boincremote, the second tier's user (ssh and tier2)
  jobs         a check's jobs, removed at its end if still queued

Checks are named after their test function (test_hold_release is
hold-release) and run in CHECKS' order; --checks "a b" picks some.
Checks marked `sim` need the simulated project's apps or state.
"""
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import time

from bindings import htcondor
import pytest

import harness
from harness import GAHP, PATH, TIER2_WRAPPER, RHOME, RUID, RUSER, THOME, TUID, TUSER, Project, read, write

log = logging.getLogger("htcondor-test")

# Every check, in the order they run.
CHECKS = [
    "pool", "complete", "remove", "hold-release", "fail", "gahp-kill", "args", "share", "broker",
    "router-complete", "router-remove", "router-unzip", "router-refused", "script-grid", "script-routed",
    "script-defaults", "script-held", "stage-cmd", "seq-complete", "seq-hold-release", "spool", "condor-c", "ssh",
    "tier2",
]

DEPLOY = os.path.normpath(os.path.join(harness.HERE, "..", ".."))
POOL_CONF_IN = os.path.join(DEPLOY, "htcondor-test", "personal-pool.conf.in")
ROUTE = os.path.join(DEPLOY, "job-router-route.batch-boinc")
# The package's config.d snippet that sets BOINC_GAHP.
GAHP_SNIPPET = "/etc/condor/config.d/50-boinc-gahp.conf"


def pytest_addoption(parser):
    g = parser.getgroup("boinc-gahp")
    g.addoption("--checks", default="", help='run only these checks ("complete fail")')
    g.addoption("--project-url", default="", help="another BOINC project instead of the simulated one")
    g.addoption("--project-auth-file", default="", help="the file holding that project's authenticator")
    g.addoption("--run-dir", default="/var/lib/boinc-gahp-test/run", help="this run's scratch files")
    g.addoption("--pause", type=int, default=0, help="keep the pool up this many seconds after the checks")
    g.addoption("--port-base", type=int, default=harness.PORT_BASE,
                help="the first of the 100 ports the pool, sshd and serve take theirs from (one range per pool)")


def check_name(item):
    return item.originalname[len("test_"):].replace("_", "-")


def _interrupt(signum, frame):
    raise KeyboardInterrupt("signal %d" % signum)


def pytest_configure(config):
    # SIGTERM (the script's teardown, a CI timeout) ends the run as Ctrl-C
    # does: the fixtures' teardown stops the pool and the sims.
    signal.signal(signal.SIGTERM, _interrupt)
    harness.PORT_BASE = config.getoption("--port-base")
    url, auth = config.getoption("--project-url"), config.getoption("--project-auth-file")
    if bool(url) != bool(auth):
        raise pytest.UsageError("--project-url and --project-auth-file go together")


def pytest_collection_modifyitems(config, items):
    for item in items:
        if check_name(item) not in CHECKS:
            raise pytest.UsageError("%s is not in conftest.CHECKS" % item.nodeid)
    items.sort(key=lambda item: CHECKS.index(check_name(item)))
    external = bool(config.getoption("--project-url"))
    wanted = config.getoption("--checks").split()
    for w in wanted:
        if w not in CHECKS:
            raise pytest.UsageError("no check named %s" % w)
    if external:
        runs_there = [check_name(i) for i in items if not i.get_closest_marker("sim")]
        for w in wanted:
            if w not in runs_there:
                raise pytest.UsageError("check %s needs the simulated project (with --project-url: %s)" % (
                    w, " ".join(runs_there)))
        if not wanted:
            wanted = runs_there
    if wanted:
        keep = [i for i in items if check_name(i) in wanted]
        config.hook.pytest_deselected(items=[i for i in items if i not in keep])
        items[:] = keep


# ------------------------------------------------------------ PASS/FAIL lines


_RESULTS = {}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    name = check_name(item)
    r = _RESULTS.setdefault(name, {"secs": 0.0, "why": None, "ran": False})
    if call.when == "call":
        r["secs"] += call.duration
        r["ran"] = rep.passed
    if rep.failed and r["why"] is None:
        e = call.excinfo.value if call.excinfo else None
        why = getattr(e, "msg", None) or str(e) or rep.longreprtext.strip().splitlines()[-1]
        r["why"] = ("" if call.when == "call" else "in %s: " % call.when) + why.strip()
    if rep.skipped and call.when != "teardown":
        r["why"] = r["why"] or "skipped"


def pytest_terminal_summary(terminalreporter):
    if not _RESULTS:
        return
    tr = terminalreporter
    tr.write_line("")
    passed = failed = 0
    for name in CHECKS:
        r = _RESULTS.get(name)
        if r is None:
            continue
        if r["why"] is None and not r["ran"]:
            r["why"] = "did not run to its end (interrupted)"
        if r["why"] is None:
            passed += 1
            tr.write_line("PASS %s (%d s)" % (name, r["secs"]))
        else:
            failed += 1
            tr.write_line("FAIL %s (%d s): %s" % (name, r["secs"], r["why"]))
    tr.write_line("%d passed, %d failed" % (passed, failed))


# ------------------------------------------------------------ fixtures


@pytest.fixture(scope="session")
def run_dir(pytestconfig):
    d = pytestconfig.getoption("--run-dir")
    os.makedirs(d, exist_ok=True)
    return d


def add_user(user, uid, home):
    if subprocess.run(["getent", "passwd", user], stdout=subprocess.DEVNULL).returncode != 0:
        for args in (["groupadd", "-g", str(uid), user],
                     ["useradd", "-u", str(uid), "-g", str(uid), "-M", "-d", home, "-s", "/bin/sh", user]):
            p = harness.in_root(args)
            if p.returncode != 0:
                raise RuntimeError("%s: %s" % (" ".join(args), p.stderr.strip()))


@pytest.fixture(scope="session")
def fresh_root():
    """A fresh pool and user every run: /etc/hosts names this host, an empty
    job queue, history and logs, an empty home."""
    # The host's name on 127.0.0.1, so that HTCondor can resolve itself. A
    # full name comes first: it is what 127.0.0.1 resolves to, so the
    # schedd is named after it. Condor-C finds a schedd by a name it can
    # resolve: not localhost in this IPv4-only pool (::1 first), not a name
    # without a domain ("unknown host"). (rm first: a symlink in the root
    # must not lead to a file of the host's.)
    host = socket.gethostname()
    if host == "localhost":
        host = "boinc-gahp-test"
    fqdn = host if "." in host else host + ".boinc-gahp.test"
    if os.path.lexists("/etc/hosts"):
        os.unlink("/etc/hosts")
    write("/etc/hosts", "127.0.0.1\t%s %s localhost\n::1\tlocalhost ip6-localhost ip6-loopback\n" % (fqdn, host))
    dirs = harness.in_root(["condor_config_val", "SPOOL", "LOG", "EXECUTE", "LOCK", "RUN"])
    if dirs.returncode != 0:
        raise RuntimeError("condor_config_val failed: " + dirs.stderr)
    for d in dirs.stdout.split():
        if not re.match(r"^/(var|run)/", d):
            raise RuntimeError("unexpected HTCondor directory '%s'" % d)
        os.makedirs(d, exist_ok=True)
        for n in os.listdir(d):
            p = os.path.join(d, n)
            shutil.rmtree(p) if os.path.isdir(p) and not os.path.islink(p) else os.unlink(p)
        shutil.chown(d, "condor", "condor")
    for p in ("/var/lib/boinc-sim-test", "/var/lib/boinc-sim-test2", "/var/log/boinc-sim-test", THOME, RHOME):
        shutil.rmtree(p, ignore_errors=True)
    os.makedirs("/var/log/boinc-sim-test")
    for n in os.listdir("/tmp"):
        if n.startswith(("CGAHPLog.", "CGAHPWorkerLog.")):
            os.unlink(os.path.join("/tmp", n))
    add_user(TUSER, TUID, THOME)
    os.makedirs(THOME)
    os.chown(THOME, TUID, TUID)


@pytest.fixture(scope="session")
def sim(fresh_root, run_dir, pytestconfig):
    """The simulated BOINC project (boinc-sim from the tools package) on 127.0.0.1."""
    if pytestconfig.getoption("--project-url"):
        pytest.fail("this check needs the simulated project", pytrace=False)
    proc, project = harness.start_sim(run_dir, "sim", "/var/lib/boinc-sim-test", "/var/log/boinc-sim-test/sim.log")
    yield project
    harness.stop_sim(proc)


@pytest.fixture(scope="session")
def external_project(pytestconfig):
    """Another BOINC project (the real-server stage): its URL and the
    authenticator in its file (the first word). The root shares the host's
    network, so a project on the host's 127.0.0.1 is reachable."""
    url = pytestconfig.getoption("--project-url")
    if not re.match(r"^https?://", url):
        raise pytest.UsageError("--project-url: not an http(s) URL: %s" % url)
    words = (read(pytestconfig.getoption("--project-auth-file"), "") or "").split()
    if not words:
        raise pytest.UsageError("no authenticator in %s" % pytestconfig.getoption("--project-auth-file"))
    log.info("checks against the project at %s (not the simulated one)", url)
    return Project(url, words[0], False, "the project")


@pytest.fixture(scope="session")
def project(request, fresh_root, pytestconfig):
    """The project the pool's jobs go to: the simulated one, or --project-url's."""
    name = "external_project" if pytestconfig.getoption("--project-url") else "sim"
    return request.getfixturevalue(name)


class Pool:
    def __init__(self, project, port, master):
        self.project = project
        self.port = port
        self.master = master
        self.schedd = htcondor.Schedd()


def pool_config(port):
    """personal-pool.conf.in filled in; then the job router with the route
    users install (its app table given an entry, so that its syntax is
    exercised too), polling often, and the tier2 check's GAHP."""
    conf = read(POOL_CONF_IN).replace("@COLLECTOR_PORT@", str(port))
    route = []
    for line in read(ROUTE).splitlines():
        line = re.sub(r'=", " "\)\)$', '=", " some-tool=uppercase "))', line, count=1)
        line = line.replace('=([^ ]+) ", " ", ', '=([^ ]+) ", " some-tool=uppercase ", ', 1)
        route.append(line)
    route += ["", "# the HTCondor checks: route often", "JOB_ROUTER_POLLING_PERIOD = 2", "JOB_ROUTER_DEBUG = D_FULLDEBUG",
              "", "# the tier2 check (grid_resource = batch boinctier2)", "BOINCTIER2_GAHP = " + TIER2_WRAPPER, ""]
    return conf, "\n".join(route)


@pytest.fixture(scope="session")
def pool(project, run_dir, pytestconfig):
    """The personal HTCondor pool on 127.0.0.1, its gridmanager running the
    package's boinc_gahp for `project`."""
    u = THOME
    os.makedirs(u + "/.config/boinc-gahp", exist_ok=True)
    os.makedirs(u + "/.boinc", exist_ok=True)
    write(u + "/.boinc/sim.auth", project.auth + "\n", mode=0o600)
    write(u + "/.config/boinc-gahp/config.toml", harness.gahp_config(project))
    harness.chown_tree(u, TUID)
    # The daemon must accept the file (its keys are checked strictly); it
    # exits at once on EOF.
    p = harness.as_user([GAHP], timeout=20)
    if p.returncode != 0:
        raise RuntimeError("boinc_gahp rejects the test's config.toml: " + harness.oneline(p.stderr, 300))
    shutil.rmtree(u + "/.local/state/boinc-gahp", ignore_errors=True)  # the probe's state

    port = harness.free_port()
    conf, route = pool_config(port)
    write("/etc/condor/config.d/99-boinc-gahp-test.conf", conf)
    write("/etc/condor/config.d/99-zz-boinc-gahp-test-route.conf", route)
    # BOINC_GAHP is the package's: set by its config.d snippet, to its binary.
    knob = harness.in_root(["condor_config_val", "BOINC_GAHP"]).stdout.strip()
    at = re.search(r"^\s*# at: (\S+),", harness.in_root(["condor_config_val", "-v", "BOINC_GAHP"]).stdout, re.M)
    if knob != GAHP or not at or at.group(1) != GAHP_SNIPPET:
        raise RuntimeError("BOINC_GAHP is '%s' from '%s', not the package's %s from %s" % (
            knob, at.group(1) if at else "", GAHP, GAHP_SNIPPET))
    htcondor.reload_config()

    t = time.monotonic()
    master_out = open(os.path.join(run_dir, "master.out"), "w")
    master = subprocess.Popen(["/usr/sbin/condor_master", "-f"], stdin=subprocess.DEVNULL, stdout=master_out,
                              stderr=subprocess.STDOUT, env={"PATH": PATH, "LANG": "C.UTF-8", "HOME": "/root"},
                              start_new_session=True)
    master_out.close()
    try:
        end = time.monotonic() + 60
        up = False
        while time.monotonic() < end:
            if master.poll() is not None:
                raise RuntimeError("condor_master exited: " + harness.oneline(read(os.path.join(run_dir, "master.out"), ""), 500))
            if harness.in_root(["condor_q", "-totals"], timeout=10).returncode == 0:
                up = True
                break
            time.sleep(1)
        if not up:
            raise RuntimeError("the schedd did not answer in 60 s")
        log.info("HTCondor %s pool up on 127.0.0.1:%d (condor_master pid %d) in %d s", harness.condor_version(), port,
                 master.pid, time.monotonic() - t)
        yield Pool(project, port, master)
        pause = pytestconfig.getoption("--pause")
        if pause > 0:
            log.info("pausing %d s: condor_q in the root; logs in %s; the project at %s", pause, harness.CONDOR_LOGS,
                     project.url)
            time.sleep(pause)
    finally:
        # SIGTERM: a graceful shutdown of every daemon.
        harness.stop(master, 30)


@pytest.fixture
def jobs(pool):
    j = harness.Jobs(pool)
    yield j
    j.cleanup()


@pytest.fixture(scope="session")
def remote_user(pool):
    """The second-tier user: the ssh route logs in as it, the tier2 check
    runs `boinc_gahp serve` as it. It holds the project's key and its own
    daemon config."""
    add_user(RUSER, RUID, RHOME)
    # Key-only logins; sshd without PAM refuses a key when the password is
    # locked ('!', useradd's), so '*' (no password, not locked).
    p = harness.in_root(["usermod", "-p", "*", RUSER])
    if p.returncode != 0:
        raise RuntimeError("usermod -p '*' %s: %s" % (RUSER, p.stderr))
    for d in (".config/boinc-gahp", ".boinc", ".ssh"):
        os.makedirs(os.path.join(RHOME, d), exist_ok=True)
    write(RHOME + "/.boinc/sim.auth", pool.project.auth + "\n", mode=0o600)
    write(RHOME + "/.config/boinc-gahp/config.toml", harness.gahp_config(pool.project, RHOME))
    harness.chown_tree(RHOME, RUID)
    return RUSER
