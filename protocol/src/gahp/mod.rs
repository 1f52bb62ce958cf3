//! The GAHP stdio protocol (`docs/spec/gahp-protocol.md`).
//!
//! Input goes `framing` (bytes -> logical lines) -> `escape` (line ->
//! arguments) -> `request` (arguments -> typed [`Request`]). Output goes
//! typed [`CommandResult`] / return lines -> `reply` -> bytes. The `BLAH_*`
//! dialect's commands and results are in [`blah`].

mod args;
pub mod blah;
pub mod error_text;
pub mod escape;
pub mod framing;
pub mod query_answer;
pub mod reply;
pub mod reqid;
pub mod request;
pub mod sequence_commands;

pub use blah::{BlahCommand, BlahResult};
pub use framing::{Frame, LineFramer};
pub use query_answer::{QueryAnswer, QueryAnswerBuilder};
pub use reply::{CommandResult, ReturnLine, BANNER, COMMANDS};
pub use request::{
    AsyncCommand, Command, FetchMode, FetchOutput, InputFile, JobParams, JobSpec, OutputSpec, ParamValue, ParseError, ReqId, Request,
    SubmitBatch,
};
