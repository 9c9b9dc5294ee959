//! `exec`: asks exactly as `ask` does, runs a command only if the call is confirmed,
//! and reports what became of it (`POST /v1/confirmations/{id}/outcome`), so the
//! approver sees on Telegram whether what they approved ran.
//!
//! The command gets the approved parameters (the record's `parameters`, its JSON text
//! as the service sent it) in `HITL_PARAMS` and the request's id in
//! `HITL_CONFIRMATION_ID`. Its stdin and stdout are its own; its stderr passes through
//! too, read on the way so that its last non-empty line can say why it failed.
//!
//! Exit statuses: the command's own when it ran (128 + N when killed by signal N, as a
//! shell says it); 127 when it could not be found and 126 when it could not be started
//! otherwise (as a shell), both reported `failed`; `ask`'s 1 (cancelled), 2 (timeout)
//! and 3 (error) when it did not run, with nothing reported. A report that cannot be
//! delivered is retried briefly and then said on stderr; it never changes the status,
//! since the command's status is what a script around `exec` acts on.

use std::ffi::OsString;
use std::process::{ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;
use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

use crate::client::{Retry, RunReportRequest, V1Client, cut};

use super::{AskRequest, Decided, EXIT_CONFIRMED, EXIT_ERROR, decide, error_text, service_url};

/// The variable holding the approved parameters, a JSON object.
pub const PARAMS_ENV: &str = "HITL_PARAMS";
/// The variable holding the confirmation's id (`cf_…`).
pub const ID_ENV: &str = "HITL_CONFIRMATION_ID";
/// The status when the command cannot be found, as a shell's.
pub const EXIT_NOT_FOUND: u8 = 127;
/// The status when the command was found but cannot be started, as a shell's.
pub const EXIT_CANNOT_RUN: u8 = 126;

/// How much of one stderr line is kept to report: the report takes 500 characters, and
/// a line without an end (a progress bar) must not grow without bound.
const MAX_LINE_BYTES: usize = 4096;

/// Reporting: a few quick attempts while the service is out of reach or busy, each
/// bounded, so a service that is down delays the exit by seconds, not minutes.
const REPORT_RETRY: Retry = Retry {
    attempts: 3,
    delay: Duration::from_millis(250),
    doubling: true,
    retry_status: |s| s.is_server_error() || s == reqwest::StatusCode::TOO_MANY_REQUESTS,
    busy_waits: false,
    retry_failure: |_| true,
};
/// The bound on one report request.
const REPORT_TIMEOUT: Duration = Duration::from_secs(5);

/// What `exec` runs: the ask, and the command with its arguments (at least the command).
#[derive(Debug, Clone)]
pub struct ExecRequest {
    pub ask: AskRequest,
    pub command: Vec<OsString>,
}

/// Asks, runs the command if confirmed, reports; returns the exit status. Says what it
/// does on stderr, each line starting `exec: `; stdout is the command's alone.
pub async fn exec(req: ExecRequest) -> u8 {
    let mut say = |line: String| eprintln!("exec: {line}");
    let Some(program) = req.command.first() else {
        say("error: no command given: write it after --, e.g. exec ... -- ./deploy.sh".into());
        return EXIT_ERROR;
    };
    let decided = match decide(&req.ask, &mut say).await {
        Ok(decided) => decided,
        Err(e) => {
            say(format!(
                "error: {}; the command was not run",
                error_text(&e)
            ));
            return EXIT_ERROR;
        }
    };
    let (record, text) = match decided {
        Decided::Refused(body) => {
            say(format!(
                "error: the service refused the request: {}; the command was not run",
                body.trim()
            ));
            return EXIT_ERROR;
        }
        Decided::Record { code, record, .. } if code != EXIT_CONFIRMED => {
            say(format!("not run: {}", not_run_why(&record)));
            return code;
        }
        Decided::Record { record, text, .. } => (record, text),
    };
    let id = record.get("id").and_then(Value::as_str).unwrap_or_default();
    let client = match reporter(&req.ask) {
        Ok(client) => client,
        Err(e) => {
            say(format!(
                "error: {}; the command was not run",
                error_text(&e)
            ));
            return EXIT_ERROR;
        }
    };
    let ran = match approved_parameters(&text) {
        Ok(params) => run(program, &req.command[1..], params.get(), id).await,
        Err(why) => {
            say(format!("error: {why}; the command was not run"));
            Ran {
                code: EXIT_ERROR,
                outcome: RunReportRequest::not_executed(Some(&format!(
                    "exec did not run it: {why}"
                ))),
            }
        }
    };
    if let Err(why) = report(&client, id, &ran.outcome).await {
        say(format!(
            "warning: what became of request {id} was not reported ({why})"
        ));
    }
    ran.code
}

/// Why the request ended without a confirmation, in a few words.
fn not_run_why(record: &Value) -> String {
    let id = record.get("id").and_then(Value::as_str).unwrap_or("?");
    let status = record.get("status").and_then(Value::as_str).unwrap_or("?");
    match record.get("reason").and_then(Value::as_str) {
        Some(reason) => format!("request {id} ended {status} ({})", cut(reason, 300)),
        None => format!("request {id} ended {status}"),
    }
}

/// The client reports go through: the same service and token the ask used.
fn reporter(req: &AskRequest) -> anyhow::Result<V1Client> {
    let base = service_url(&req.url)?;
    V1Client::new(&base, req.token.clone().into(), Some(REPORT_TIMEOUT))
        .context("cannot set up HTTP")
}

/// The record's `parameters` as the service wrote them.
fn approved_parameters(record_text: &str) -> Result<Box<RawValue>, String> {
    #[derive(Deserialize)]
    struct Approved {
        parameters: Box<RawValue>,
    }
    serde_json::from_str::<Approved>(record_text)
        .map(|a| a.parameters)
        .map_err(|e| format!("the confirmed record's parameters cannot be read ({e})"))
}

/// What running the command came to: the status `exec` exits with, and the report.
struct Ran {
    code: u8,
    outcome: RunReportRequest,
}

/// Runs the command with the approved parameters and waits for it.
async fn run(program: &OsString, args: &[OsString], params: &str, id: &str) -> Ran {
    let name = program.to_string_lossy();
    let started = Instant::now();
    let spawned = tokio::process::Command::new(program)
        .args(args)
        .env(PARAMS_ENV, params)
        .env(ID_ENV, id)
        .stdin(Stdio::inherit())
        .stdout(Stdio::inherit())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = match spawned {
        Ok(child) => child,
        Err(e) => {
            let code = if e.kind() == std::io::ErrorKind::NotFound {
                EXIT_NOT_FOUND
            } else {
                EXIT_CANNOT_RUN
            };
            let error = format!("cannot start {name}: {e}");
            eprintln!("exec: {error}");
            return Ran {
                code,
                outcome: RunReportRequest::failed(&error, None),
            };
        }
    };
    let tee = child.stderr.take().map(|err| tokio::spawn(tee(err)));
    let status = wait(&mut child).await;
    // The pipe ends when the command (and whatever it started that kept its stderr)
    // is gone; its last line is known then.
    let last_line = match tee {
        Some(task) => task.await.unwrap_or_default(),
        None => None,
    };
    let took = started.elapsed();
    match status {
        Ok(status) => ended(status, last_line.as_deref(), took),
        Err(e) => {
            let error = format!("cannot wait for {name}: {e}");
            eprintln!("exec: {error}");
            Ran {
                code: EXIT_ERROR,
                outcome: RunReportRequest::failed(&error, Some(took)),
            }
        }
    }
}

/// Waits for the command. A Ctrl-C reaches the command itself (it is in the terminal's
/// process group), so `exec` keeps waiting and reports what the command did with it;
/// SIGTERM or SIGHUP sent to `exec` alone stops the command (SIGKILL, the one signal
/// the standard library can send), which is then reported as killed.
async fn wait(child: &mut tokio::process::Child) -> std::io::Result<ExitStatus> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        if let (Ok(mut int), Ok(mut term), Ok(mut hup)) = (
            signal(SignalKind::interrupt()),
            signal(SignalKind::terminate()),
            signal(SignalKind::hangup()),
        ) {
            loop {
                tokio::select! {
                    status = child.wait() => return status,
                    _ = int.recv() => {}
                    _ = term.recv() => { let _ = child.start_kill(); }
                    _ = hup.recv() => { let _ = child.start_kill(); }
                }
            }
        }
    }
    child.wait().await
}

/// The exit status and the report for a command that ended with `status`.
fn ended(status: ExitStatus, last_line: Option<&str>, took: Duration) -> Ran {
    let why = |what: String| match last_line {
        Some(line) => format!("{what}: {line}"),
        None => what,
    };
    if let Some(code) = status.code() {
        if code == 0 {
            return Ran {
                code: 0,
                outcome: RunReportRequest::executed(None, Some(took)),
            };
        }
        return Ran {
            // An exit status is 0 to 255 on Unix; elsewhere a larger one reads as 255.
            code: u8::try_from(code).unwrap_or(u8::MAX),
            outcome: RunReportRequest::failed(&why(format!("exit status {code}")), Some(took)),
        };
    }
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(signal) = status.signal() {
            return Ran {
                code: u8::try_from(128 + signal).unwrap_or(u8::MAX),
                outcome: RunReportRequest::failed(
                    &why(format!("killed by signal {signal}")),
                    Some(took),
                ),
            };
        }
    }
    Ran {
        code: EXIT_ERROR,
        outcome: RunReportRequest::failed(
            &why(format!("ended without a status ({status})")),
            Some(took),
        ),
    }
}

/// Copies the command's stderr to ours as it comes and returns its last non-empty line
/// (its first [`MAX_LINE_BYTES`], trimmed). Our stderr being gone does not stop the
/// copy: the command keeps its pipe and runs on.
async fn tee(mut from: impl AsyncRead + Unpin) -> Option<String> {
    let mut to = tokio::io::stderr();
    let mut lines = LastLine::default();
    let mut buf = [0u8; 8192];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let _ = to.write_all(&buf[..n]).await;
        let _ = to.flush().await;
        lines.feed(&buf[..n]);
    }
    lines.finish()
}

/// The last non-empty line of a byte stream fed in pieces.
#[derive(Default)]
struct LastLine {
    current: Vec<u8>,
    last: Option<Vec<u8>>,
}

impl LastLine {
    fn feed(&mut self, bytes: &[u8]) {
        for piece in bytes.split_inclusive(|b| *b == b'\n') {
            let (text, ends) = match piece.strip_suffix(b"\n") {
                Some(text) => (text, true),
                None => (piece, false),
            };
            let room = MAX_LINE_BYTES.saturating_sub(self.current.len());
            self.current
                .extend_from_slice(&text[..text.len().min(room)]);
            if ends {
                self.end_line();
            }
        }
    }

    fn end_line(&mut self) {
        if self.current.iter().any(|b| !b.is_ascii_whitespace()) {
            self.last = Some(std::mem::take(&mut self.current));
        } else {
            self.current.clear();
        }
    }

    fn finish(mut self) -> Option<String> {
        self.end_line();
        self.last
            .map(|line| String::from_utf8_lossy(&line).trim().to_owned())
    }
}

/// Reports `outcome` for the request `id`; why not, when it was not taken.
async fn report(client: &V1Client, id: &str, outcome: &RunReportRequest) -> Result<(), String> {
    let answer = client
        .report(id, outcome, None, &REPORT_RETRY, &mut |_| {})
        .await;
    match answer {
        Ok(reply) if reply.status.is_success() => Ok(()),
        Ok(reply) => Err(format!(
            "the service answered {}: {}",
            reply.status,
            cut(&reply.error_detail(), 300)
        )),
        Err(failure) => Err(format!(
            "cannot reach the service at {}: {}",
            client.base(),
            crate::telemetry::causes(failure.error())
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn last(pieces: &[&[u8]]) -> Option<String> {
        let mut l = LastLine::default();
        for p in pieces {
            l.feed(p);
        }
        l.finish()
    }

    #[test]
    fn the_last_non_empty_stderr_line_is_kept_across_pieces() {
        assert_eq!(
            last(&[b"first\nsec", b"ond line\n", b"\n  \n"]).as_deref(),
            Some("second line")
        );
        assert_eq!(
            last(&[b"no newline at the end"]).as_deref(),
            Some("no newline at the end")
        );
        assert_eq!(last(&[b"a\r\n"]).as_deref(), Some("a"));
        assert_eq!(last(&[b"", b"\n\n"]), None);
    }

    #[test]
    fn a_line_without_an_end_is_kept_to_a_bounded_head() {
        let mut l = LastLine::default();
        for _ in 0..1000 {
            l.feed(&[b'x'; 1000]);
        }
        assert_eq!(l.finish().unwrap().len(), MAX_LINE_BYTES);
    }

    #[cfg(unix)]
    #[test]
    fn a_failure_says_the_status_and_the_last_line_and_a_signal_as_a_shell_does() {
        use std::os::unix::process::ExitStatusExt;
        let took = Duration::from_millis(20);
        let ran = ended(ExitStatus::from_raw(3 << 8), Some("disk full"), took);
        assert_eq!(ran.code, 3);
        assert_eq!(
            ran.outcome.error.as_deref(),
            Some("exit status 3: disk full")
        );
        assert_eq!(ran.outcome.duration_ms, Some(20));
        let ran = ended(ExitStatus::from_raw(9), None, took);
        assert_eq!(ran.code, 137);
        assert_eq!(ran.outcome.error.as_deref(), Some("killed by signal 9"));
        let ran = ended(ExitStatus::from_raw(0), Some("warnings only"), took);
        assert_eq!(ran.code, 0);
        assert_eq!(ran.outcome, RunReportRequest::executed(None, Some(took)));
    }

    #[test]
    fn the_parameters_are_the_records_own_text() {
        let text = r#"{"id":"cf_1","parameters":{"b": 1.50, "a": 123456789012345678901234567890}}"#;
        assert_eq!(
            approved_parameters(text).unwrap().get(),
            r#"{"b": 1.50, "a": 123456789012345678901234567890}"#
        );
        assert!(approved_parameters(r#"{"id":"cf_1"}"#).is_err());
    }
}
