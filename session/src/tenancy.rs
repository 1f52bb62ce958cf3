//! What one client of `boinc_gahp serve` may do in its session: use its own
//! projects with the authenticators the admin gave it (whatever it sends),
//! name files only under its own directory on this host, and see only its
//! own batches and jobs.
//!
//! Names are kept apart by a prefix: every batch and job name a client sends
//! goes to the project as `<client>~<name>` and comes back without it. Two
//! clients on one BOINC account then never name the same batch, and a
//! client asking for another's batch asks for one that does not exist, so
//! it gets exactly the server's own "no such batch" answer (client names
//! have no `~`, so no client's names can be written as another's).

use std::path::{Component, Path, PathBuf};

use gahp_protocol::classad::{ClassAd, Value};
use gahp_protocol::gahp::escape::escape_into;
use gahp_protocol::gahp::sequence_commands::SequenceCommand;
use gahp_protocol::gahp::{AsyncCommand, BlahCommand, Command, Request};

/// Between the client's name and each of its batch and job names.
pub const NAME_SEPARATOR: char = '~';

#[derive(Debug, Clone)]
pub struct Tenancy {
    /// The client's name (a token's name: `[A-Za-z0-9._-]`).
    pub client: String,
    /// The projects it may select, each with its authenticator file here.
    pub projects: Vec<(String, PathBuf)>,
    /// Its file area: every path it names is relative to this.
    pub files: PathBuf,
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum Refusal {
    #[error("project {0} is not one of this client's")]
    Project(String),
    #[error("path {0:?} is not a relative path inside the client's area")]
    Path(PathBuf),
}

impl Tenancy {
    fn prefix(&self) -> String {
        format!("{}{NAME_SEPARATOR}", self.client)
    }

    fn name(&self, n: &str) -> String {
        format!("{}{n}", self.prefix())
    }

    /// The authenticator file of a project URL the client may use.
    pub fn authenticator_file(&self, url: &str) -> Result<&Path, Refusal> {
        let want = url.trim_end_matches('/');
        self.projects
            .iter()
            .find(|(u, _)| u.trim_end_matches('/') == want)
            .map(|(_, f)| f.as_path())
            .ok_or_else(|| Refusal::Project(url.into()))
    }

    /// A client's path: relative, no `..`, resolved in its area.
    pub fn path(&self, p: &Path) -> Result<PathBuf, Refusal> {
        Ok(self.files.join(inside(p)?))
    }

    /// The request as this host runs it: names prefixed, paths in the
    /// client's area. Project and pool selection is the session's (it reads
    /// the authenticator, and checks a pool's projects against the
    /// client's); paths outside the area are refused.
    pub fn rewrite(&self, req: Request) -> Result<Request, Refusal> {
        Ok(match req {
            Request::Command { reqid, command: Command::Boinc(command) } => {
                Request::Command { reqid, command: Command::Boinc(self.command(command)?) }
            }
            Request::Command { reqid, command: Command::Sequence(command) } => {
                Request::Command { reqid, command: Command::Sequence(self.sequence(command)?) }
            }
            Request::Command { reqid, command: Command::Blah(command) } => {
                Request::Command { reqid, command: Command::Blah(self.blah(command)?) }
            }
            other => other,
        })
    }

    fn command(&self, command: AsyncCommand) -> Result<AsyncCommand, Refusal> {
        Ok(match command {
            AsyncCommand::Ping => AsyncCommand::Ping,
            AsyncCommand::Submit(mut s) => {
                s.batch_name = self.name(&s.batch_name);
                for job in &mut s.jobs {
                    job.name = self.name(&job.name);
                    for input in &mut job.inputs {
                        input.src = self.path(&input.src)?;
                    }
                }
                AsyncCommand::Submit(s)
            }
            AsyncCommand::QueryBatches { min_mod_time, batches } => {
                AsyncCommand::QueryBatches { min_mod_time, batches: batches.iter().map(|b| self.name(b)).collect() }
            }
            AsyncCommand::FetchOutput(mut f) => {
                f.job_name = self.name(&f.job_name);
                f.dir = self.path(&f.dir)?;
                // Relative to `dir`, which is inside the area.
                // (Output names land there too before their rename.)
                f.stderr_file = inside_or_discarded(&f.stderr_file)?;
                for spec in &mut f.specs {
                    inside(Path::new(&spec.src))?;
                    spec.dst = inside(&spec.dst)?;
                }
                AsyncCommand::FetchOutput(f)
            }
            AsyncCommand::AbortJobs { jobs } => AsyncCommand::AbortJobs { jobs: jobs.iter().map(|j| self.name(j)).collect() },
            AsyncCommand::RetireBatch { batch } => AsyncCommand::RetireBatch { batch: self.name(&batch) },
            AsyncCommand::SetLease { batch, lease_time } => AsyncCommand::SetLease { batch: self.name(&batch), lease_time },
        })
    }

    /// A sequence's name is the stem of every step's BOINC batch and job
    /// name, so the prefix carries into those too.
    fn sequence(&self, command: SequenceCommand) -> Result<SequenceCommand, Refusal> {
        Ok(match command {
            SequenceCommand::Create(mut c) => {
                c.name = self.name(&c.name);
                for file in c.state_files.iter_mut().chain(c.inputs.iter_mut()) {
                    file.src = self.path(&file.src)?;
                }
                SequenceCommand::Create(c)
            }
            SequenceCommand::Fetch(mut f) => {
                f.name = self.name(&f.name);
                f.dir = self.path(&f.dir)?;
                SequenceCommand::Fetch(f)
            }
            SequenceCommand::Extend { name, steps } => SequenceCommand::Extend { name: self.name(&name), steps },
            SequenceCommand::End { name } => SequenceCommand::End { name: self.name(&name) },
            SequenceCommand::Query { name } => SequenceCommand::Query { name: self.name(&name) },
            SequenceCommand::Abort { name } => SequenceCommand::Abort { name: self.name(&name) },
        })
    }

    /// A BLAH job's ad with its paths in the client's area; its ids name
    /// its BOINC jobs with its prefix (the runtime makes them so), so an id
    /// of another client's job names none of its own.
    fn blah(&self, command: BlahCommand) -> Result<BlahCommand, Refusal> {
        Ok(match command {
            BlahCommand::Ping { batch_type } => BlahCommand::Ping { batch_type },
            BlahCommand::JobSubmit { mut ad } => {
                self.ad_paths(&mut ad)?;
                BlahCommand::JobSubmit { ad }
            }
            BlahCommand::JobStatus { job_id } => BlahCommand::JobStatus { job_id: self.job_id(&job_id) },
            BlahCommand::JobCancel { job_id } => BlahCommand::JobCancel { job_id: self.job_id(&job_id) },
            BlahCommand::JobRefreshProxy { job_id, proxy } => BlahCommand::JobRefreshProxy { job_id: self.job_id(&job_id), proxy },
        })
    }

    /// `boinc/<key>/<name>[/<name>]` with each name prefixed; anything
    /// else as it is (it is no job id of the runtime's either).
    fn job_id(&self, id: &str) -> String {
        match id.strip_prefix("boinc/").and_then(|rest| rest.split_once('/')) {
            Some((key, names)) => {
                let names: Vec<String> = names.split('/').map(|n| self.name(n)).collect();
                format!("boinc/{key}/{}", names.join("/"))
            }
            None => id.to_string(),
        }
    }

    /// `Iwd` into the area; every other path the daemon reads or writes
    /// (inputs, outputs and their remaps, `In`, `Out`, `Err`) relative to
    /// it and staying below it. A work sequence job's state files are
    /// among its inputs (and come back as outputs into `Iwd`), its end
    /// marker a plain name; its sequence is named with the client's
    /// prefix by the runtime (the BLAH front end's `name_prefix`).
    fn ad_paths(&self, ad: &mut ClassAd) -> Result<(), Refusal> {
        let list = |name: &str, sep: char| -> Vec<String> {
            ad.get_str(name).unwrap_or("").split(sep).map(str::trim).filter(|e| !e.is_empty()).map(String::from).collect()
        };
        for entry in list("TransferInput", ',') {
            // A URL is refused later, with a hold reason that says so.
            if !entry.contains("://") {
                inside(Path::new(&entry))?;
            }
        }
        for entry in list("TransferOutput", ',') {
            inside(Path::new(&entry))?;
        }
        for entry in list("TransferOutputRemaps", ';') {
            if let Some((_, to)) = entry.split_once('=') {
                inside(Path::new(to.trim()))?;
            }
        }
        for name in ["In", "Out", "Err"] {
            if let Some(p) = ad.get_str(name).map(str::trim).filter(|p| !p.is_empty()) {
                inside_or_discarded(Path::new(p))?;
            }
        }
        if let Some(iwd) = ad.get_str("Iwd").map(str::trim) {
            let iwd = self.path(Path::new(iwd))?;
            ad.insert("Iwd", Value::Str(iwd.to_string_lossy().into_owned()));
        }
        Ok(())
    }

    /// A result line as the client sees it: its names without the prefix,
    /// its paths relative to its area as it gave them (an error text names
    /// no directory of this host). The line is escaped, so the area is
    /// looked for as escaped (a state directory with a space in it).
    pub fn unname(&self, line: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(line.len());
        let mut unnamer = self.unnamer();
        unnamer.feed(line, &mut out);
        unnamer.finish(&mut out);
        out
    }

    /// [`Tenancy::unname`] of a text handed over in pieces: the pieces'
    /// outputs concatenate to exactly the unname of the whole text, however
    /// it is cut (a prefix or the area cut across two pieces is removed).
    pub fn unnamer(&self) -> Unnamer {
        let mut area = Vec::new();
        escape_into(format!("{}/", self.files.display()).as_bytes(), &mut area);
        Unnamer { names: Remover::new(self.prefix().into_bytes()), area: Remover::new(area), between: Vec::new() }
    }
}

/// Removes the client's prefix, then its area, from a text fed in pieces.
pub struct Unnamer {
    names: Remover,
    area: Remover,
    between: Vec<u8>,
}

impl Unnamer {
    /// The next piece; what can be written of it so far is appended to `out`.
    pub fn feed(&mut self, piece: &[u8], out: &mut Vec<u8>) {
        self.between.clear();
        self.names.feed(piece, &mut self.between);
        self.area.feed(&self.between, out);
    }

    /// The end of the text: the rest is appended to `out`.
    pub fn finish(mut self, out: &mut Vec<u8>) {
        self.between.clear();
        self.names.finish(&mut self.between);
        self.area.feed(&self.between, out);
        self.area.finish(out);
    }
}

/// Removes every occurrence of `what`, leftmost first and not overlapping,
/// from a text fed in pieces: the last `what.len() - 1` bytes seen, which
/// may begin an occurrence the next piece completes, are kept back. The
/// leftmost whole occurrence in what is held is then also the leftmost in
/// the whole text (one that starts earlier would end earlier), so the
/// result is that of the whole text.
struct Remover {
    what: Vec<u8>,
    held: Vec<u8>,
}

impl Remover {
    fn new(what: Vec<u8>) -> Self {
        Remover { what, held: Vec::new() }
    }

    fn feed(&mut self, piece: &[u8], out: &mut Vec<u8>) {
        if self.what.is_empty() {
            out.extend_from_slice(piece);
            return;
        }
        self.held.extend_from_slice(piece);
        let mut rest = &self.held[..];
        while let Some(at) = find(rest, &self.what) {
            out.extend_from_slice(&rest[..at]);
            rest = &rest[at + self.what.len()..];
        }
        let sure = rest.len().saturating_sub(self.what.len() - 1);
        out.extend_from_slice(&rest[..sure]);
        let kept = self.held.len() - (rest.len() - sure);
        self.held.drain(..kept);
    }

    fn finish(self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.held);
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    memchr::memmem::find(hay, needle)
}

/// `p` if it is relative and stays below where it starts.
fn inside(p: &Path) -> Result<PathBuf, Refusal> {
    let ok = !p.as_os_str().is_empty() && p.components().all(|c| matches!(c, Component::Normal(_) | Component::CurDir));
    if ok {
        Ok(p.to_path_buf())
    } else {
        Err(Refusal::Path(p.to_path_buf()))
    }
}

/// Like [`inside`], and `/dev/null` (what the gridmanager passes for a
/// stderr it does not want; it is appended to, never replaced) stays itself.
fn inside_or_discarded(p: &Path) -> Result<PathBuf, Refusal> {
    if p == Path::new(DISCARD) {
        return Ok(p.to_path_buf());
    }
    inside(p)
}

const DISCARD: &str = "/dev/null";

#[cfg(test)]
mod tests {
    use super::*;
    use gahp_protocol::gahp::{FetchMode, FetchOutput, InputFile, JobParams, JobSpec, OutputSpec, ReqId, SubmitBatch};

    fn alice() -> Tenancy {
        Tenancy {
            client: "alice".into(),
            projects: vec![("http://127.0.0.1:1/p/".into(), "/etc/a.auth".into())],
            files: "/srv/clients/alice/files".into(),
        }
    }

    fn submit(src: &str) -> Request {
        Request::Command {
            reqid: ReqId(1),
            command: Command::Boinc(AsyncCommand::Submit(SubmitBatch {
                batch_name: "b1".into(),
                app_name: "app".into(),
                jobs: vec![JobSpec { name: "j1".into(), args: vec![], inputs: vec![InputFile { src: src.into(), dst_name: "in".into() }] }],
                params: JobParams::default(),
            })),
        }
    }

    #[test]
    fn names_go_out_prefixed_and_come_back_bare_and_paths_land_in_the_area() {
        let t = alice();
        let Ok(Request::Command { command: Command::Boinc(AsyncCommand::Submit(s)), .. }) = t.rewrite(submit("in/x.dat")) else { panic!() };
        assert_eq!((s.batch_name.as_str(), s.jobs[0].name.as_str()), ("alice~b1", "alice~j1"));
        assert_eq!(s.jobs[0].inputs[0].src, Path::new("/srv/clients/alice/files/in/x.dat"));
        assert_eq!(t.unname(b"1 NULL alice~j1 DONE alice~j2 ERROR"), b"1 NULL j1 DONE j2 ERROR");
        assert_eq!(t.unname(b"1 no\\ batch\\ named\\ alice~b9"), b"1 no\\ batch\\ named\\ b9");
        assert_eq!(t.unname(b"1 can't\\ open\\ /srv/clients/alice/files/out/err"), b"1 can't\\ open\\ out/err");
        // Another client's prefix is left alone: it names nothing of alice's.
        assert_eq!(t.unname(b"bob~j1"), b"bob~j1");
        // An area with a space in its path appears escaped in a line.
        let spaced = Tenancy { files: "/srv/boinc gahp/clients/alice/files".into(), ..alice() };
        assert_eq!(spaced.unname(b"1 can't\\ open\\ /srv/boinc\\ gahp/clients/alice/files/out/err"), b"1 can't\\ open\\ out/err");
    }

    /// Every occurrence removed from the whole line at once: what `unname`
    /// did before it took pieces.
    fn remove_all(line: &[u8], what: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        let mut rest = line;
        while let Some(at) = rest.windows(what.len()).position(|w| w == what) {
            out.extend_from_slice(&rest[..at]);
            rest = &rest[at + what.len()..];
        }
        out.extend_from_slice(rest);
        out
    }

    #[test]
    fn a_line_unnamed_in_pieces_is_the_line_unnamed_whole() {
        use rand::{Rng, SeedableRng};
        let t = Tenancy { files: "/srv/a b/alice".into(), ..alice() };
        let whole = |line: &[u8]| remove_all(&remove_all(line, b"alice~"), b"/srv/a\\ b/alice/");
        // Parts of the prefix and the area, so that occurrences overlap,
        // nest ("ali" "alice~" "ce~") and straddle every cut.
        let atoms: [&[u8]; 13] =
            [b"alice~", b"ali", b"ce~", b"/srv/a\\ b/", b"alice/", b"/srv/a\\ b/alice/", b"al", b"alice", b"~", b" ", b"x", b"\\", b"a"];
        let mut rng = rand::rngs::StdRng::seed_from_u64(21);
        for _ in 0..2000 {
            let line: Vec<u8> = (0..rng.gen_range(0..24)).flat_map(|_| atoms[rng.gen_range(0..atoms.len())].iter().copied()).collect();
            let expected = whole(&line);
            assert_eq!(t.unname(&line), expected);
            let mut out = Vec::new();
            let mut unnamer = t.unnamer();
            let mut rest = &line[..];
            while !rest.is_empty() {
                let (piece, after) = rest.split_at(rng.gen_range(1..=rest.len().min(9)));
                unnamer.feed(piece, &mut out);
                rest = after;
            }
            unnamer.finish(&mut out);
            assert_eq!(out, expected, "{}", String::from_utf8_lossy(&line));
        }
    }

    #[test]
    fn a_sequence_is_named_for_its_client_and_reads_and_writes_in_its_area() {
        use gahp_protocol::gahp::sequence_commands::{CreateSequence, FetchSequence, StepSelector};
        let t = alice();
        let seq = |command| Request::Command { reqid: ReqId(4), command: Command::Sequence(command) };
        let create = |state: &str, input: &str| {
            seq(SequenceCommand::Create(CreateSequence {
                name: "md".into(),
                app_name: "stepper".into(),
                steps: 2,
                max_step_time: 60,
                max_attempts: 2,
                end_marker: None,
                state_files: vec![InputFile { src: state.into(), dst_name: "state".into() }],
                args: vec![],
                inputs: vec![InputFile { src: input.into(), dst_name: "params".into() }],
            }))
        };
        let Ok(Request::Command { command: Command::Sequence(SequenceCommand::Create(c)), .. }) = t.rewrite(create("s0", "run/params"))
        else {
            panic!()
        };
        assert_eq!(c.name, "alice~md");
        assert_eq!(c.state_files[0].src, Path::new("/srv/clients/alice/files/s0"));
        assert_eq!(c.inputs[0].src, Path::new("/srv/clients/alice/files/run/params"));
        assert_eq!(t.rewrite(create("/etc/shadow", "p")), Err(Refusal::Path("/etc/shadow".into())));
        assert_eq!(t.rewrite(create("s0", "../bob/files/p")), Err(Refusal::Path("../bob/files/p".into())));
        let fetch =
            |dir: &str| seq(SequenceCommand::Fetch(FetchSequence { name: "md".into(), step: StepSelector::Latest, dir: dir.into() }));
        let Ok(Request::Command { command: Command::Sequence(SequenceCommand::Fetch(f)), .. }) = t.rewrite(fetch("out")) else { panic!() };
        assert_eq!((f.name.as_str(), f.dir.as_path()), ("alice~md", Path::new("/srv/clients/alice/files/out")));
        assert!(t.rewrite(fetch("/tmp")).is_err());
        for (command, want) in [
            (SequenceCommand::Query { name: "md".into() }, SequenceCommand::Query { name: "alice~md".into() }),
            (SequenceCommand::End { name: "md".into() }, SequenceCommand::End { name: "alice~md".into() }),
            (SequenceCommand::Abort { name: "md".into() }, SequenceCommand::Abort { name: "alice~md".into() }),
            (SequenceCommand::Extend { name: "md".into(), steps: 3 }, SequenceCommand::Extend { name: "alice~md".into(), steps: 3 }),
        ] {
            assert_eq!(t.rewrite(seq(command)), Ok(seq(want)));
        }
    }

    #[test]
    fn paths_outside_the_area_are_refused() {
        let t = alice();
        for bad in ["/etc/passwd", "../bob/files/x", "a/../../x", ""] {
            assert_eq!(t.rewrite(submit(bad)), Err(Refusal::Path(bad.into())), "{bad}");
        }
        let fetch = |dir: &str, dst: &str| Request::Command {
            reqid: ReqId(2),
            command: Command::Boinc(AsyncCommand::FetchOutput(FetchOutput {
                job_name: "j1".into(),
                dir: dir.into(),
                stderr_file: "err".into(),
                mode: FetchMode::Some,
                specs: vec![OutputSpec { src: "out".into(), dst: dst.into() }],
            })),
        };
        assert!(t.rewrite(fetch("out", "o.txt")).is_ok());
        assert!(t.rewrite(fetch("out", "/dev/null")).is_err(), "a rename over /dev/null");
        assert!(t.rewrite(fetch("/tmp", "o.txt")).is_err());
        assert!(t.rewrite(fetch("out", "/home/x/.ssh/authorized_keys")).is_err());
        assert_eq!(t.authenticator_file("http://127.0.0.1:1/p"), Ok(Path::new("/etc/a.auth")));
        assert!(t.authenticator_file("http://127.0.0.1:1/other/").is_err());
        let blah = |command| Request::Command { reqid: ReqId(3), command: Command::Blah(command) };
        assert!(t.rewrite(blah(BlahCommand::Ping { batch_type: "boinc".into() })).is_ok());
        let status = |id: &str| match t.rewrite(blah(BlahCommand::JobStatus { job_id: id.into() })) {
            Ok(Request::Command { command: Command::Blah(BlahCommand::JobStatus { job_id }), .. }) => job_id,
            other => panic!("{other:?}"),
        };
        assert_eq!(status("boinc/0123456789ab/blah#d#1"), "boinc/0123456789ab/alice~blah#d#1");
        assert_eq!(status("boinc/0123456789ab/blah#a#1/blah#b#1"), "boinc/0123456789ab/alice~blah#a#1/alice~blah#b#1");
        assert_eq!(status("blah#home_bl_x_1.0_1#1"), "blah#home_bl_x_1.0_1#1");
        let submit = |attrs: &[(&str, &str)]| {
            let mut ad = ClassAd::new();
            ad.insert("Iwd", Value::Str("blah/j1".into()));
            for (k, v) in attrs {
                ad.insert(*k, Value::Str((*v).into()));
            }
            t.rewrite(blah(BlahCommand::JobSubmit { ad }))
        };
        let Ok(Request::Command { command: Command::Blah(BlahCommand::JobSubmit { ad }), .. }) =
            submit(&[("TransferInput", "in/0/a, b"), ("Out", "/dev/null")])
        else {
            panic!()
        };
        assert_eq!(ad.get_str("Iwd"), Some("/srv/clients/alice/files/blah/j1"));
        for (attr, bad) in [
            ("TransferInput", "a,/etc/passwd"),
            ("TransferOutput", "../x"),
            ("TransferOutputRemaps", "out=/home/x/.bashrc"),
            ("Out", "/tmp/o"),
            ("Err", "../../e"),
            ("In", "/etc/shadow"),
            ("Iwd", "/"),
        ] {
            assert!(matches!(submit(&[(attr, bad)]), Err(Refusal::Path(_))), "{attr} = {bad}");
        }
        // A work sequence job: its state files are inputs, kept to the area
        // like any; the job is taken (its sequence is named by the runtime).
        let seq = |input: &str| {
            submit(&[("TransferInput", input), (gahp_blah::sequence_ad::STEPS, "3"), ("BoincStateFiles", "state")]).map(|r| match r {
                Request::Command { command: Command::Blah(BlahCommand::JobSubmit { ad }), .. } => ad,
                other => panic!("{other:?}"),
            })
        };
        let ad = seq("state, extra").unwrap();
        assert_eq!(ad.get_str("Iwd"), Some("/srv/clients/alice/files/blah/j1"));
        for bad in ["../state, extra", "/etc/state"] {
            assert!(matches!(seq(bad), Err(Refusal::Path(_))), "{bad}");
        }
    }
}
