//! `BLAH_*` commands through a client, as the serve tests send them.

use std::time::{Duration, Instant};

use gahp_protocol::classad::{ClassAd, Value};
use gahp_protocol::gahp::{BlahCommand, Command};

use super::{GahpClient, ReqId, Request, WAIT};

pub fn str_value(v: &str) -> Value {
    Value::Str(v.into())
}

/// A BLAH command through the client; its result's fields after the id.
pub fn blah(g: &mut GahpClient, command: BlahCommand) -> Vec<String> {
    g.call(|reqid| Request::Command { reqid: ReqId(reqid), command: Command::Blah(command) }, WAIT).unwrap()
}

/// Submits the ad; its job id.
pub fn submit(g: &mut GahpClient, ad: ClassAd) -> String {
    let r = blah(g, BlahCommand::JobSubmit { ad });
    assert_eq!(r[..2], ["0", "No error"], "{r:?}");
    r[2].clone()
}

/// Polls the job's status until it is neither idle nor running; its
/// status fields (code, error, status, ad).
pub fn wait_final(g: &mut GahpClient, id: &str, within: Duration) -> Vec<String> {
    let until = Instant::now() + within;
    loop {
        let r = blah(g, BlahCommand::JobStatus { job_id: id.into() });
        if r[0] == "0" && r[2] != "1" && r[2] != "2" {
            return r;
        }
        assert!(Instant::now() < until, "{id} did not end in time: {r:?}");
        std::thread::sleep(Duration::from_millis(150));
    }
}
