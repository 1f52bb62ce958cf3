//! The server's floor: the requests a command needs, made directly with the
//! plainest client there is (HTTP/1.1 keep-alive over a `TcpStream`, no
//! pool, no actors, no state), as `ab -k` makes them. What a daemon spends
//! above this is its own.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use gahp_protocol::boinc::{reply, request, Script, SubmitJob, SubmitParams};
use gahp_protocol::Authenticator;

/// A project as the floor talks to it: `http://host[:port]/path/` only
/// (the bench keeps to loopback, where there is no TLS).
#[derive(Clone)]
pub struct Project {
    addr: String,
    host: String,
    path: String,
    pub url: String,
    pub auth: Authenticator,
}

impl Project {
    pub fn new(url: &str, auth: &str) -> Project {
        let rest = url.strip_prefix("http://").unwrap_or_else(|| panic!("the floor speaks plain http only: {url}"));
        let (host, path) = rest.split_once('/').map_or((rest, ""), |(h, p)| (h, p));
        let addr = if host.contains(':') { host.to_string() } else { format!("{host}:80") };
        let path = format!("/{}", path.trim_end_matches('/')) + "/";
        let path = if path == "//" { "/".to_string() } else { path };
        Project { addr, host: host.to_string(), path, url: url.to_string(), auth: Authenticator::new(auth) }
    }
}

/// One keep-alive connection, opened again when the server closes it.
pub struct Conn {
    project: Project,
    stream: Option<BufReader<TcpStream>>,
}

impl Conn {
    pub fn new(project: &Project) -> Conn {
        Conn { project: project.clone(), stream: None }
    }

    /// An RPC to one of the project's scripts, the XML as the form field
    /// `request` with `files` attached, as BOINC's clients send it.
    pub fn rpc(&mut self, script: Script, xml: &str, files: &[(&str, &[u8])]) -> Vec<u8> {
        let (content_type, body) = multipart(xml, files);
        let path = format!("{}{}", self.project.path, script.path());
        self.exchange("POST", &path, Some((&content_type, &body)))
    }

    /// A GET of a URL of the project (its path and query).
    pub fn get(&mut self, url: &str) -> Vec<u8> {
        let path = url.strip_prefix(self.project.url.as_str()).map(|p| format!("{}{p}", self.project.path));
        self.exchange("GET", &path.unwrap_or_else(|| panic!("not the project's URL")), None)
    }

    fn exchange(&mut self, method: &str, path: &str, body: Option<(&str, &[u8])>) -> Vec<u8> {
        let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {}\r\nUser-Agent: floor\r\n", self.project.host);
        if let Some((content_type, b)) = body {
            head.push_str(&format!("Content-Type: {content_type}\r\nContent-Length: {}\r\n", b.len()));
        }
        head.push_str("\r\n");
        // An output's URL carries the authenticator: never in a message.
        let shown = self.project.auth.redact_in(path);
        // A kept connection the server has closed meanwhile fails at once;
        // a new one does not.
        for fresh in [self.stream.is_none(), true] {
            if fresh {
                let s = TcpStream::connect(&self.project.addr).expect("connect to the project");
                s.set_nodelay(true).ok();
                s.set_read_timeout(Some(Duration::from_secs(300))).ok();
                self.stream = Some(BufReader::new(s));
            }
            match self.try_exchange(head.as_bytes(), body.map(|b| b.1)) {
                Ok((status, keep, reply)) => {
                    if !keep {
                        self.stream = None;
                    }
                    assert_eq!(status, 200, "{method} {shown}: HTTP {status}: {}", String::from_utf8_lossy(&reply));
                    return reply;
                }
                Err(_) if !fresh => self.stream = None,
                Err(e) => panic!("{method} {shown}: {e}"),
            }
        }
        unreachable!("the second try is on a fresh connection")
    }

    fn try_exchange(&mut self, head: &[u8], body: Option<&[u8]>) -> io::Result<(u16, bool, Vec<u8>)> {
        let s = self.stream.as_mut().expect("connected");
        let mut out = Vec::with_capacity(head.len() + body.map_or(0, <[u8]>::len));
        out.extend_from_slice(head);
        out.extend_from_slice(body.unwrap_or_default());
        s.get_mut().write_all(&out)?;
        read_response(s)
    }
}

/// Status, whether the connection stays open, and the body.
fn read_response(s: &mut BufReader<TcpStream>) -> io::Result<(u16, bool, Vec<u8>)> {
    let mut line = String::new();
    if s.read_line(&mut line)? == 0 {
        return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "closed before a reply"));
    }
    let status: u16 = line.split_whitespace().nth(1).and_then(|c| c.parse().ok()).ok_or_else(|| bad(&line))?;
    let (mut length, mut chunked, mut keep) = (None, false, true);
    loop {
        line.clear();
        s.read_line(&mut line)?;
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        let (name, value) = l.split_once(':').ok_or_else(|| bad(l))?;
        let (name, value) = (name.trim().to_ascii_lowercase(), value.trim().to_ascii_lowercase());
        match name.as_str() {
            "content-length" => length = Some(value.parse::<usize>().map_err(|_| bad(l))?),
            "transfer-encoding" => chunked = value.contains("chunked"),
            "connection" => keep = !value.contains("close"),
            _ => {}
        }
    }
    let mut body = Vec::new();
    if chunked {
        loop {
            line.clear();
            s.read_line(&mut line)?;
            let size = usize::from_str_radix(line.trim().split(';').next().unwrap_or(""), 16).map_err(|_| bad(&line))?;
            if size == 0 {
                // Trailers, then the empty line.
                loop {
                    line.clear();
                    s.read_line(&mut line)?;
                    if line.trim().is_empty() {
                        break;
                    }
                }
                break;
            }
            let at = body.len();
            body.resize(at + size, 0);
            s.read_exact(&mut body[at..])?;
            line.clear();
            s.read_line(&mut line)?;
        }
    } else if let Some(n) = length {
        body.resize(n, 0);
        s.read_exact(&mut body)?;
    } else {
        s.read_to_end(&mut body)?;
        keep = false;
    }
    Ok((status, keep, body))
}

fn bad(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("bad HTTP reply line {what:?}"))
}

fn multipart(xml: &str, files: &[(&str, &[u8])]) -> (String, Vec<u8>) {
    let boundary = "------------------------floorfloorfloor";
    let mut body = format!("--{boundary}\r\nContent-Disposition: form-data; name=\"request\"\r\n\r\n{xml}\r\n").into_bytes();
    for (i, (name, data)) in files.iter().enumerate() {
        body.extend_from_slice(
            format!("--{boundary}\r\nContent-Disposition: form-data; name=\"file_{i}\"; filename=\"{name}\"\r\nContent-Type: application/octet-stream\r\n\r\n")
                .as_bytes(),
        );
        body.extend_from_slice(data);
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(format!("--{boundary}--\r\n").as_bytes());
    (format!("multipart/form-data; boundary={boundary}"), body)
}

/// `n` calls of `work` over `conns` connections at once, each connection
/// taking every `conns`-th call, as `ab -k -c conns` does.
pub fn at_once(project: &Project, conns: usize, n: usize, work: impl Fn(&mut Conn, usize) + Sync) {
    std::thread::scope(|s| {
        for c in 0..conns.min(n) {
            let work = &work;
            s.spawn(move || {
                let mut conn = Conn::new(project);
                for i in (c..n).step_by(conns) {
                    work(&mut conn, i);
                }
            });
        }
    });
}

pub fn ping(conn: &mut Conn) {
    reply::parse_ping(&conn.rpc(Script::SubmitRpcHandler, &request::ping(), &[])).expect("ping");
}

/// An input file as a submit sends it: its physical name (MD5, as the
/// daemons name it) and its bytes.
pub struct Input {
    pub phys_name: String,
    pub data: Vec<u8>,
}

impl Input {
    pub fn new(data: Vec<u8>) -> Input {
        use md5::Digest;
        let phys_name = md5::Md5::digest(&data).iter().map(|b| format!("{b:02x}")).collect();
        Input { phys_name, data }
    }
}

/// What a submit of jobs new to the project needs: create_batch,
/// query_files (tying the present inputs to the batch), upload_files of
/// the absent ones, submit_batch. The app's templates are taken as known.
/// Job `k` is `<batch>_<k>` with input `k % inputs.len()`.
pub fn submit(conn: &mut Conn, project: &Project, app: &str, batch: &str, jobs: usize, inputs: &[Input]) -> i64 {
    let auth = &project.auth;
    let expire = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64() + 86_400.0;
    let id = reply::parse_create_batch(&conn.rpc(Script::SubmitRpcHandler, &request::create_batch(auth, batch, app, expire), &[]))
        .expect("create_batch");
    let mut names: Vec<String> = inputs.iter().map(|f| f.phys_name.clone()).collect();
    names.sort_unstable();
    names.dedup();
    let absent =
        reply::parse_query_files(&conn.rpc(Script::JobFile, &request::query_files(auth, Some(id), &names), &[])).expect("query_files");
    if !absent.is_empty() {
        let absent: Vec<String> = absent.into_iter().map(|i| names[i].clone()).collect();
        let files: Vec<(&str, &[u8])> =
            absent.iter().map(|n| (n.as_str(), inputs.iter().find(|f| &f.phys_name == n).map(|f| f.data.as_slice()).unwrap())).collect();
        reply::parse_upload_files(&conn.rpc(Script::JobFile, &request::upload_files(auth, id, &absent), &files)).expect("upload_files");
    }
    let job_names: Vec<String> = (0..jobs).map(|k| format!("{batch}_{k}")).collect();
    let specs: Vec<SubmitJob> = job_names
        .iter()
        .enumerate()
        .map(|(k, name)| SubmitJob { name, args: &[], files: vec![inputs[k % inputs.len()].phys_name.as_str()] })
        .collect();
    let xml = request::submit_batch(auth, id, app, &SubmitParams::default(), &specs);
    reply::parse_submit_batch(&conn.rpc(Script::SubmitRpcHandler, &xml, &[])).expect("submit_batch");
    id
}

/// What a BOINC_QUERY_BATCHES of one batch needs: one query_batch2.
pub fn query(conn: &mut Conn, project: &Project, batch: &str) {
    let xml = request::query_batch2(&project.auth, 0.0, &[batch.to_string()]);
    reply::parse_query_batch2(&conn.rpc(Script::SubmitRpcHandler, &xml, &[])).expect("query_batch2");
}

/// What a BOINC_FETCH_OUTPUT of a job with one output file needs: its
/// templates (the output names), its finished instance (exit status,
/// stderr), and the file.
pub fn fetch(conn: &mut Conn, project: &Project, job: &str) -> usize {
    let auth = &project.auth;
    let t = reply::parse_templates(&conn.rpc(Script::SubmitRpcHandler, &request::get_templates_for_job(auth, job), &[]))
        .expect("get_templates");
    reply::parse_query_completed_job(&conn.rpc(Script::SubmitRpcHandler, &request::query_completed_job(auth, job), &[]))
        .expect("query_completed_job");
    (0..t.outputs.len()).map(|i| conn.get(&request::output_url(&project.url, auth, job, i)).len()).sum()
}
