//! What happened after the yes (issue 36): the agent's report of running an approved
//! call (`executed`, `failed`, `not_executed`, or `unknown` when the reporter cannot
//! tell, as a gateway whose upstream died mid-call cannot), or the service's own
//! `unknown` when a route expected a report and none came in time. An unknown result is
//! never taken for success: the next approver of the same tool is told, as after a
//! failure.

use std::fmt;

use time::OffsetDateTime;

use super::text;

/// The most characters a report's `summary` or `error` may hold.
pub const MAX_REPORT_CHARS: usize = 500;

/// How long a failed (or unreported) run is recalled to the next approver of the same
/// agent's same tool.
pub const REMEMBERED_FOR: time::Duration = time::Duration::days(1);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunStatus {
    /// The call ran and did what it does.
    Executed,
    /// The call ran, or began to, and failed.
    Failed,
    /// The agent did not run it after all.
    NotExecuted,
    /// Nobody knows whether it ran: the reporter said so (the upstream MCP server went
    /// away mid-call), or the route's `expect_outcome_seconds` passed with no report.
    /// Either way a later report replaces it: knowing is better than not knowing.
    Unknown,
}

impl RunStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Executed => "executed",
            RunStatus::Failed => "failed",
            RunStatus::NotExecuted => "not_executed",
            RunStatus::Unknown => "unknown",
        }
    }

    pub fn parse(s: &str) -> Option<RunStatus> {
        Some(match s {
            "executed" => RunStatus::Executed,
            "failed" => RunStatus::Failed,
            "not_executed" => RunStatus::NotExecuted,
            "unknown" => RunStatus::Unknown,
            _ => return None,
        })
    }

    /// Whether the next approver of the same tool should hear of it.
    pub fn is_worrying(self) -> bool {
        matches!(self, RunStatus::Failed | RunStatus::Unknown)
    }
}

/// Why a report was refused, naming its field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunReportError {
    pub field: &'static str,
    pub why: String,
}

impl fmt::Display for RunReportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.why)
    }
}

/// The statuses a reporter may send, as a refusal lists them.
pub const REPORTED_STATUSES: &str = "\"executed\", \"failed\", \"not_executed\" or \"unknown\"";

/// What is said of a reporter's `unknown` that gave no reason, where an earlier run is
/// recalled ([`Recalled::words`]): a recalled `unknown` with words is a reporter's, one
/// without is the service's own (nobody reported).
pub const REPORTED_UNKNOWN: &str = "the reporter could not tell";

/// A reporter's report, checked: a known status, texts within bounds, an error only
/// with `failed` (why it failed) or `unknown` (why nobody knows).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewRunReport {
    status: RunStatus,
    summary: Option<String>,
    error: Option<String>,
    duration_ms: Option<u64>,
}

impl NewRunReport {
    pub fn new(
        status: &str,
        summary: Option<String>,
        error: Option<String>,
        duration_ms: Option<u64>,
    ) -> Result<NewRunReport, RunReportError> {
        let bad = |field, why: &str| RunReportError {
            field,
            why: why.to_owned(),
        };
        let status = RunStatus::parse(status)
            .ok_or_else(|| bad("status", &format!("must be {REPORTED_STATUSES}")))?;
        let text = |field, t: Option<String>| -> Result<Option<String>, RunReportError> {
            match t {
                Some(t) if t.chars().count() > MAX_REPORT_CHARS => Err(RunReportError {
                    field,
                    why: format!("must be at most {MAX_REPORT_CHARS} characters"),
                }),
                // Stored as sent, but for NUL, which would end the text in a C string:
                // every other invisible character is shown as its escape wherever the
                // text is shown.
                Some(t) => Ok(Some(text::without_nul(&t).into_owned())),
                None => Ok(None),
            }
        };
        let summary = text("summary", summary)?;
        let error = text("error", error)?;
        if error.is_some() && !matches!(status, RunStatus::Failed | RunStatus::Unknown) {
            return Err(bad(
                "error",
                "is only for a report with status \"failed\" or \"unknown\"",
            ));
        }
        Ok(NewRunReport {
            status,
            summary,
            error,
            duration_ms,
        })
    }

    pub fn status(&self) -> RunStatus {
        self.status
    }

    /// The report as stored, taken at `at`.
    pub fn at(self, at: OffsetDateTime) -> RunReport {
        RunReport {
            status: self.status,
            summary: self.summary,
            error: self.error,
            duration_ms: self.duration_ms,
            reported_at: at,
            overdue: false,
        }
    }
}

/// What is known of a confirmed call's run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunReport {
    pub status: RunStatus,
    pub summary: Option<String>,
    pub error: Option<String>,
    pub duration_ms: Option<u64>,
    /// When the agent reported it (or, for an overdue `unknown`, when the wait for it
    /// ran out).
    pub reported_at: OffsetDateTime,
    /// The service's own `unknown`: no report came by the route's
    /// `expect_outcome_seconds` (a reporter's `unknown` is not overdue: it came).
    pub overdue: bool,
}

impl RunReport {
    /// The service's own `unknown` (overdue), decided at `at`.
    pub fn unknown(at: OffsetDateTime) -> RunReport {
        RunReport {
            status: RunStatus::Unknown,
            summary: None,
            error: None,
            duration_ms: None,
            reported_at: at,
            overdue: true,
        }
    }

    /// The run as the API, the event stream and the webhooks carry it.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "status": self.status.as_str(),
            "summary": self.summary,
            "error": self.error,
            "duration_ms": self.duration_ms,
            "reported_at": super::question::rfc3339(self.reported_at),
        })
    }

    /// Whether `report` says the same as this: a report sent twice (a retry) is taken
    /// once and answered alike.
    pub fn same_as(&self, report: &NewRunReport) -> bool {
        self.status == report.status
            && self.summary == report.summary
            && self.error == report.error
            && self.duration_ms == report.duration_ms
            && !self.overdue
    }

    /// Whether a report may still replace this: an `unknown`, the service's own or a
    /// reporter's. A later `executed` or `failed` is better information than "nobody
    /// knows", and taking it is how a reporter that lost track (a gateway whose upstream
    /// died) corrects itself once it learns more.
    pub fn replaceable(&self) -> bool {
        self.status == RunStatus::Unknown
    }

    /// What the run's text says in one phrase: the error of a failure or an unknown
    /// (else its summary), the summary otherwise.
    pub fn words(&self) -> Option<&str> {
        match self.status {
            RunStatus::Failed | RunStatus::Unknown => {
                self.error.as_deref().or(self.summary.as_deref())
            }
            _ => self.summary.as_deref(),
        }
    }
}

/// A duration as an operator reads it: `850 ms`, `1.2 s`, `3 min 5 s`.
pub fn duration_words(ms: u64) -> String {
    if ms < 1_000 {
        return format!("{ms} ms");
    }
    let tenths = (ms + 50) / 100;
    if tenths < 600 {
        return format!("{}.{} s", tenths / 10, tenths % 10);
    }
    let s = (ms + 500) / 1000;
    match (s / 3600, s % 3600 / 60, s % 60) {
        (0, m, 0) => format!("{m} min"),
        (0, m, s) => format!("{m} min {s} s"),
        (h, 0, _) => format!("{h} h"),
        (h, m, _) => format!("{h} h {m} min"),
    }
}

/// The last approved run of the same agent's same tool, recalled to the next approver
/// because it failed or was never reported (within [`REMEMBERED_FOR`]). Stored with the
/// new question, so every later edit of its message still says it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Recalled {
    /// The earlier request's id.
    pub id: String,
    pub tool: String,
    /// `failed` or `unknown`.
    pub status: String,
    /// When it was approved (Unix milliseconds).
    pub approved_at_ms: i64,
    /// Who approved it, in words ("Alice (@alice)", "a window", "rule 'x'").
    pub approved_by: String,
    /// Its error (or summary), as reported; for a reporter's `unknown` without either,
    /// [`REPORTED_UNKNOWN`]; `None` for the service's own `unknown`.
    pub words: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_is_checked_field_by_field() {
        let ok =
            NewRunReport::new("failed", Some("s".into()), Some("boom".into()), Some(5)).unwrap();
        assert_eq!(ok.status(), RunStatus::Failed);
        let unknown = NewRunReport::new("unknown", None, Some("upstream exited".into()), None);
        assert_eq!(unknown.unwrap().status(), RunStatus::Unknown);
        for (status, summary, error, field) in [
            ("ran", None, None, "status"),
            ("not_executed", None, Some("boom".to_owned()), "error"),
            ("executed", None, Some("boom".to_owned()), "error"),
            ("executed", Some("x".repeat(501)), None, "summary"),
            ("failed", None, Some("é".repeat(501)), "error"),
        ] {
            let e = NewRunReport::new(status, summary, error, None).unwrap_err();
            assert_eq!(e.field, field, "{status}");
        }
        assert!(NewRunReport::new("executed", Some("é".repeat(500)), None, None).is_ok());
    }

    #[test]
    fn nul_is_stored_as_its_escape_and_everything_else_as_sent() {
        let r = NewRunReport::new("executed", Some("a\0b\u{202e}".into()), None, None).unwrap();
        let e = r.at(OffsetDateTime::UNIX_EPOCH);
        assert_eq!(e.summary.as_deref(), Some("a\\x00b\u{202e}"));
    }

    #[test]
    fn the_same_report_again_is_recognised_and_a_different_one_is_not() {
        let first = NewRunReport::new("executed", Some("ok".into()), None, Some(10)).unwrap();
        let stored = first.clone().at(OffsetDateTime::UNIX_EPOCH);
        assert!(stored.same_as(&first));
        let other = NewRunReport::new("executed", Some("ok".into()), None, Some(11)).unwrap();
        assert!(!stored.same_as(&other));
        assert!(!stored.replaceable());
        assert!(RunReport::unknown(OffsetDateTime::UNIX_EPOCH).replaceable());
        let reported = NewRunReport::new("unknown", None, Some("gone".into()), None).unwrap();
        let stored = reported.clone().at(OffsetDateTime::UNIX_EPOCH);
        assert!(stored.replaceable() && !stored.overdue && stored.same_as(&reported));
        assert_eq!(stored.words(), Some("gone"));
        let bare = NewRunReport::new("unknown", None, None, None).unwrap();
        assert!(
            !RunReport::unknown(OffsetDateTime::UNIX_EPOCH).same_as(&bare),
            "a reporter's unknown is news even after the service's own"
        );
    }

    #[test]
    fn durations_read_as_an_operator_says_them() {
        assert_eq!(duration_words(850), "850 ms");
        assert_eq!(duration_words(1_200), "1.2 s");
        assert_eq!(duration_words(1_249), "1.2 s");
        assert_eq!(duration_words(59_999), "1 min");
        assert_eq!(duration_words(60_000), "1 min");
        assert_eq!(duration_words(185_000), "3 min 5 s");
        assert_eq!(duration_words(7_200_000), "2 h");
        assert_eq!(duration_words(7_500_000), "2 h 5 min");
    }
}
