"""HTCondor's other routes to the daemon (docs/second-tier.md): a spooled
submit, Condor-C, the ssh route (remote_gahp), a second tier (serve and
connect)."""
import glob
import os
import re
import subprocess
import time

from bindings import htcondor
import pytest

import harness
from harness import (COMPLETED, GAHP, GMLOG, HELD, REMOVED, RHOME, RUID, RUSER, THOME, TIER2_WRAPPER, TUID, TUSER, UPPER, Faults,
                     fail, gm_tail, log, make_job, read, write)


@pytest.mark.sim
def test_spool(pool, sim, jobs):
    """condor_submit -spool: the input is spooled with the job and deleted
    from the submit directory at once (the submitting laptop is gone); the
    output waits in the spool until condor_transfer_data brings it."""
    name = "spool"
    d = make_job(name, "uppercase", "mk-" + name)
    job = jobs.submit(name, spool=True)
    os.unlink(d + "/in")
    # Held while its input is spooled (HoldReasonCode 16), then released by
    # the schedd: wait for an end other than that.
    end = time.monotonic() + 240
    st = None
    while time.monotonic() < end:
        st = job.status()
        if st in (COMPLETED, REMOVED) or (st == HELD and job.attr("HoldReasonCode") != 16):
            break
        time.sleep(2)
    if st != COMPLETED:
        fail("ended %s, not completed in 240 s: %s" % (harness.status_name(st), job.attr("HoldReason")), job,
             tails=(gm_tail(),))
    f = Faults()
    f.check(not os.path.exists(d + "/out"), "out is in the submit directory before condor_transfer_data")
    log.info("  completed, spooled; the submit directory before condor_transfer_data: %s", " ".join(sorted(os.listdir(d))))
    try:
        harness.user_action(["retrieve", str(job.cluster)], cwd=d)
    except RuntimeError as e:
        f.add("condor_transfer_data failed: %s" % e)
        f.done()
    log.info("  condor_transfer_data (Schedd.retrieve): %s", " ".join(sorted(os.listdir(d))))
    f.same_file(d + "/out", UPPER)
    ec = job.attr("ExitCode")
    f.check(ec == 0, "ExitCode '%s', not 0" % ec)
    f.done()


def schedd_name():
    """The schedd's name in the collector (its host name: Condor-C cannot
    find a schedd named localhost in an IPv4-only pool, localhost being ::1
    first)."""
    for _ in range(30):
        try:
            ads = htcondor.Collector().query(htcondor.AdTypes.Schedd, projection=["Name"])
        except (OSError, RuntimeError, htcondor.HTCondorException):
            ads = []
        if ads and ads[0].get("Name"):
            return ads[0]["Name"]
        time.sleep(1)
    return None


@pytest.mark.sim
def test_condor_c(pool, sim, jobs):
    """Condor-C (grid_resource = condor <schedd> <pool>), the shape of an
    HTCondor-CE: the job arrives at the schedd as a vanilla +WantBOINC job,
    the job router from deploy/ routes it to boinc_gahp, and the output goes
    back to the submit directory."""
    name = "condor-c"
    schedd = schedd_name()
    if not schedd:
        fail("the schedd is not in the collector")
    d = make_job(name, "uppercase", "mk-" + name, "\n".join([
        "+remote_JobUniverse = 5", '+remote_ShouldTransferFiles = "YES"', '+remote_WhenToTransferOutput = "ON_EXIT"',
        "+WantBOINC = true", '+BoincApp = "uppercase"']),
        grid_resource="condor %s 127.0.0.1:%d" % (schedd, pool.port))
    # Condor-C's own lines instead of the batch boinc ones.
    sub = read(d + "/job.sub")
    write(d + "/job.sub", "".join(l for l in sub.splitlines(True) if not l.startswith("+remote_BoincApp")), TUID)
    job = jobs.submit(name)
    job.expect_completed(240, tails=(("c-gahp", "/tmp/CGAHPWorkerLog." + TUSER, 10),
                                     ("jr", harness.CONDOR_LOGS + "/JobRouterLog", 10)))
    # The job Condor-C made on the schedd, and its routed copy.
    c = 'JobUniverse == 5 && regexp("mk-%s", Args ?: Arguments ?: "")' % name
    ads = pool.schedd.query(constraint=c, projection=["ClusterId"]) or list(pool.schedd.history(c, ["ClusterId"], match=1))
    v = harness.Job(pool, ads[0]["ClusterId"], name="condor-c vanilla") if ads else None
    if v is not None:
        jobs.submitted.append(v)
    r = jobs.routed_copy(v) if v is not None else None
    log.info("  grid job %s (%s) arrived as vanilla job %s, routed as %s (%s)", job, job.attr("GridResource"),
             v or "?", r or "?", r.attr("GridResource") if r else "")
    f = Faults()
    f.check(v is not None, "no vanilla job of Condor-C's found on the schedd")
    f.check(r is not None, "the vanilla job was not routed")
    ec = job.attr("ExitCode")
    f.check(ec == 0, "ExitCode '%s', not 0" % ec)
    f.same_file(d + "/out", UPPER)
    f.done()


@pytest.fixture
def remote_layouts(remote_user):
    """`boinc_gahp remote-layout` as the remote user: the default directory
    (~/bosco/glite), and one that jobs name with --rgahp-glite."""
    glite2 = RHOME + "/boinc-glite"
    for args in ([], [glite2]):
        p = harness.as_remote_user([GAHP, "remote-layout"] + args)
        if p.returncode != 0:
            fail("boinc_gahp remote-layout %s failed: %s" % (" ".join(args), p.stdout + p.stderr))
        for line in (p.stdout + p.stderr).splitlines():
            log.info("    remote-layout| %s", line)
    return glite2


@pytest.fixture
def sshd(remote_user, run_dir):
    """An sshd in the root: 127.0.0.1 only, keys only, the remote user only;
    the submitting user's new key authorised, the host key known to it.
    Yields its port."""
    th, rh = THOME, RHOME
    os.makedirs(th + "/.ssh", exist_ok=True)
    os.chown(th + "/.ssh", TUID, TUID)
    os.chmod(th + "/.ssh", 0o700)
    os.chmod(rh + "/.ssh", 0o700)
    p = harness.as_user(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", th + "/.ssh/id_ed25519"])
    if p.returncode != 0:
        fail("ssh-keygen failed: " + p.stderr)
    write(rh + "/.ssh/authorized_keys", read(th + "/.ssh/id_ed25519.pub"), mode=0o600)
    harness.chown_tree(rh + "/.ssh", RUID)
    harness.in_root(["ssh-keygen", "-A"])
    os.makedirs("/run/sshd", exist_ok=True)
    os.chmod("/run/sshd", 0o755)
    port = harness.free_port()
    write("/etc/ssh/sshd_config.boinc-gahp-test", """# written by the HTCondor checks (deploy/htcondor-test)
Port %d
ListenAddress 127.0.0.1
HostKey /etc/ssh/ssh_host_ed25519_key
UsePAM no
PasswordAuthentication no
KbdInteractiveAuthentication no
PubkeyAuthentication yes
AuthenticationMethods publickey
PermitRootLogin no
AllowUsers %s
PidFile none
LogLevel VERBOSE
""" % (port, RUSER))
    sshd_log = os.path.join(run_dir, "sshd.log")
    with open(sshd_log, "w") as out:
        proc = subprocess.Popen(["/usr/sbin/sshd", "-D", "-e", "-f", "/etc/ssh/sshd_config.boinc-gahp-test"],
                                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                env={"PATH": harness.PATH}, start_new_session=True)
    try:
        if not harness.wait_listening(port, proc):
            fail("sshd exited: " + harness.oneline(read(sshd_log, "")[-300:]))
        # The host key known to the submitting user (remote_gahp uses BatchMode).
        key = " ".join(read("/etc/ssh/ssh_host_ed25519_key.pub").split()[:2])
        write(th + "/.ssh/known_hosts", "[127.0.0.1]:%d %s\n" % (port, key), TUID)
        p = harness.as_user(["ssh", "-o", "BatchMode=yes", "-p", str(port), RUSER + "@127.0.0.1", "id", "-un"], timeout=30)
        if p.stdout.strip() != RUSER:
            fail("ssh %s@127.0.0.1 as %s: %s; sshd: %s" % (RUSER, TUSER, (p.stdout + p.stderr).strip(),
                                                           harness.oneline(read(sshd_log, "")[-300:])))
        log.info("  sshd on 127.0.0.1:%d (pid %d); %s logs in as %s with a key", port, proc.pid, TUSER, RUSER)
        yield port
    finally:
        harness.stop(proc)


@pytest.mark.sim
def test_ssh(pool, sim, jobs, remote_layouts, sshd, run_dir):
    """HTCondor's remote route: grid_resource = batch boinc user@host. The
    gridmanager's remote_gahp logs in over ssh, starts blahpd (made by
    `boinc_gahp remote-layout`) there and moves the sandbox with
    condor_ft-gahp through an ssh tunnel. Two jobs at once: the default
    directory, and another one named with --rgahp-glite."""
    glite2 = remote_layouts
    data = "sent over ssh\nand back\n"
    submitted = []
    for j in ("ssh", "ssh-glite"):
        gr = "batch boinc %s@127.0.0.1:%d" % (RUSER, sshd)
        if j == "ssh-glite":
            gr += " --rgahp-glite " + glite2
        make_job(j, "uppercase", "mk-" + j, grid_resource=gr, input_text=data)
        submitted.append((j, jobs.submit(j)))
    f = Faults()
    for j, job in submitted:
        st = job.wait_status(300, COMPLETED, HELD, REMOVED)
        if st is None:
            f.add("%s not completed in 300 s (status %s)" % (j, harness.status_name(job.last_status)))
            job.describe()
            continue
        if st != COMPLETED:
            f.add("%s ended %s, not completed: %s" % (j, harness.status_name(st), job.attr("HoldReason")))
            continue
        job.wait_left_queue(30)
        log.info("  %s: %s -> GridJobId '%s'", j, job.attr("GridResource"), (job.attr("GridJobId") or "")[:120])
        ec = job.attr("ExitCode")
        f.check(ec == 0, "%s: ExitCode '%s', not 0" % (j, ec))
        f.same_file(THOME + "/" + j + "/out", data.upper())
        f.check(len(sim.jobs("", "mk-" + j)) == 1, "%s: not exactly one BOINC job" % j)
    if f.items:
        for line in (read(GMLOG, "") or "").splitlines()[-25:]:
            log.info("    gm| %s", line)
        for line in (read(os.path.join(run_dir, "sshd.log"), "") or "").splitlines()[-5:]:
            log.info("    sshd| %s", line)
    # They ran on the remote side: the remote user's daemon submitted them,
    # from the sandboxes of each directory's ft-gahp.
    subs = sum((read(p, "") or "").count("submitted to BOINC")
               for p in glob.glob(RHOME + "/.local/state/boinc-gahp/boinc_gahp.log*"))
    dirs = sorted(set(re.findall(r"/home/%s/[a-z/-]*/sandbox" % RUSER, read(GMLOG, "") or "")))
    log.info("  the remote user's boinc_gahp logged %d submit(s); the jobs' directories were in: %s", subs,
             " ".join(dirs))
    f.check(subs >= 1, "no 'submitted to BOINC' in %s's daemon log" % RUSER)
    f.check(os.path.getsize(RHOME + "/bosco/glite/log/FTGahpLog") > 0 if os.path.exists(
        RHOME + "/bosco/glite/log/FTGahpLog") else False, "no FTGahpLog in ~/bosco/glite/log")
    f.check(os.path.getsize(glite2 + "/log/FTGahpLog") > 0 if os.path.exists(glite2 + "/log/FTGahpLog") else False,
            "no FTGahpLog in %s/log (--rgahp-glite not followed?)" % glite2)
    f.done()



@pytest.fixture
def tier2_serve(pool, remote_user, run_dir):
    """A second tier (docs/serve.md): the remote user runs `boinc_gahp
    serve` over TLS and holds the project's key; the submitting user holds
    only a token. The gridmanager's GAHP for `grid_resource = batch
    boinctier2` is a one-line wrapper that runs `boinc_gahp connect`
    (BOINCTIER2_GAHP, in the pool's config). Yields serve's output file."""
    th, t2 = THOME, RHOME + "/tier2"
    for d in (t2, th + "/bin", th + "/.config/boinc-gahp"):
        os.makedirs(d, exist_ok=True)
    # A self-signed certificate for 127.0.0.1; the client trusts it alone.
    p = harness.in_root(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                         "-days", "2", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1", "-addext",
                         "basicConstraints=critical,CA:FALSE", "-keyout", t2 + "/key.pem", "-out", t2 + "/cert.pem"])
    if p.returncode != 0:
        fail("openssl req: " + p.stderr)
    write(th + "/.config/boinc-gahp/tier2-ca.pem", read(t2 + "/cert.pem"))
    harness.chown_tree(t2, RUID)
    os.chmod(t2 + "/key.pem", 0o600)
    if os.path.exists(t2 + "/tokens.toml"):
        os.unlink(t2 + "/tokens.toml")
    # The admin makes the user's token, with the project's key file on the
    # second tier; the token is printed once.
    p = harness.as_remote_user([GAHP, "token", "add", TUSER, "--tokens", t2 + "/tokens.toml", "--project",
                                "%s=%s/.boinc/sim.auth" % (pool.project.url, RHOME)])
    if p.returncode != 0:
        fail("token add: " + p.stderr[:300])
    write(th + "/.config/boinc-gahp/tier2.token", p.stdout.strip() + "\n", mode=0o600)
    port = harness.free_port()
    write(TIER2_WRAPPER, '#!/bin/sh\nexec %s connect 127.0.0.1:%d --token-file "$HOME/.config/boinc-gahp/tier2.token" '
          '--ca "$HOME/.config/boinc-gahp/tier2-ca.pem"\n' % (GAHP, port), mode=0o755)
    harness.chown_tree(th + "/bin", TUID)
    harness.chown_tree(th + "/.config/boinc-gahp", TUID)
    serve_out = os.path.join(run_dir, "serve.out")
    with open(serve_out, "w") as out:
        proc = subprocess.Popen(
            [GAHP, "--state-dir", t2 + "/state", "serve", "--listen", "127.0.0.1:%d" % port, "--tls-cert", t2 + "/cert.pem",
             "--tls-key", t2 + "/key.pem", "--tokens", t2 + "/tokens.toml"],
            user=RUID, group=RUID, extra_groups=[], cwd=RHOME, env=harness.user_env(RUSER, RHOME),
            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        if not harness.wait_listening(port, proc):
            fail("serve exited: " + harness.oneline(read(serve_out, "")[-300:]))
        log.info("  serve on 127.0.0.1:%d (pid %d) as %s; %s's GAHP is %s", port, proc.pid, RUSER, TUSER, TIER2_WRAPPER)
        yield serve_out
    finally:
        harness.stop(proc)


@pytest.mark.sim
def test_tier2(pool, sim, jobs, tier2_serve):
    """A batch boinctier2 job goes through `connect` and `serve`: its input
    up, its output back over the one connection, as one BOINC job named
    with the client's prefix."""
    name = "tier2"
    data = "up through connect\nand down again\n"
    make_job(name, "uppercase", "mk-" + name, grid_resource="batch boinctier2", input_text=data)
    job = jobs.submit(name)
    job.expect_completed(240, tails=(("serve", tier2_serve, 5),))
    log.info("  %s -> GridJobId '%s'", job.attr("GridResource"), (job.attr("GridJobId") or "")[:120])
    f = Faults()
    ec = job.attr("ExitCode")
    f.check(ec == 0, "ExitCode '%s', not 0" % ec)
    f.same_file(THOME + "/" + name + "/out", data.upper())
    # It went through serve: one BOINC job, named on the project with the
    # client's prefix; the user's own daemon never ran.
    found = sim.jobs("", "mk-" + name)
    log.info("  on the project: %s", sim.jobs_text("", "mk-" + name)[:200])
    f.check(len(found) == 1, "not exactly one BOINC job")
    f.check(any(TUSER + "~" in " ".join(map(str, j)) for j in found),
            "the BOINC job's name has no '%s~' prefix: not made through serve?" % TUSER)
    f.done()
