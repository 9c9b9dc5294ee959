//! What the console shows of a question: everything the agent sent, each text with its
//! invisible characters as the visible escapes the chat shows, the parameters in full
//! (pretty-printed as in the chat, never cut), and who has answered.
//!
//! The page shows these strings as they come, so they are written here the way the chat
//! writes them: every time as [`operator_time`] (`2026-12-06 03:02:44 UTC`), never the
//! API's RFC 3339, and a question's kind in words (`approval question`), never the
//! `human_interaction` an interaction without a call is stored under.

use serde::Serialize;
use serde_json::value::RawValue;

use crate::domain::audit::AuditEvent;
use crate::domain::edit;
use crate::domain::grant::{Grant, scope_in_words};
use crate::domain::interaction::InteractionType;
use crate::domain::python;
use crate::domain::question::{Question, operator_time, window_duration};
use crate::domain::shown::params_view;
use crate::domain::text::{self, Layout};
use crate::storage::{LiveWindow, WindowUse};

#[derive(Serialize)]
pub struct QuestionList {
    pub questions: Vec<QuestionView>,
}

#[derive(Serialize)]
pub struct QuestionDetail {
    pub question: QuestionView,
    /// Its audit trail so far, oldest first.
    pub events: Vec<EventView>,
}

/// An event of a question's trail, as the console lists it.
#[derive(Serialize)]
pub struct EventView {
    pub seq: i64,
    pub at: String,
    pub kind: String,
    pub actor: String,
    pub detail: serde_json::Value,
}

impl EventView {
    pub fn of(e: AuditEvent) -> EventView {
        EventView {
            seq: e.seq,
            at: operator_time(e.at),
            kind: e.kind,
            actor: e.actor,
            detail: e.detail,
        }
    }
}

#[derive(Serialize)]
pub struct QuestionView {
    pub id: String,
    /// `confirmation`, or the interaction's type (`approval`, `form`, ...).
    pub kind: &'static str,
    /// The kind in words: `confirmation`, `approval question`, `free-text question`, ...
    pub kind_words: String,
    /// What the question is about, in one line: the tool of the call it carries, else
    /// its kind and the start of its question, as the chat's `/pending` lists it
    /// (`❓ approval question “…”`).
    pub title: String,
    /// It carries a call (a confirmation, or an interaction with one): `tool` names it.
    pub has_call: bool,
    pub status: &'static str,
    pub tool: String,
    pub agent: String,
    pub owner_id: String,
    pub route: String,
    /// The MCP server (upstream) the call goes to, when a gateway asked; null otherwise.
    pub server: Option<String>,
    /// The tool's MCP annotations in a few words (`read-only, not destructive`): what
    /// the server says of its own tool; null when the call carried none.
    pub hints: Option<String>,
    /// The agent's description of the call (a confirmation's briefing, an
    /// interaction's question).
    pub briefing: String,
    pub context: Option<String>,
    /// Every parameter, pretty JSON as the chat shows it, nothing cut.
    pub parameters: String,
    /// The parameters exactly as the agent sent them.
    pub parameters_json: Option<Box<RawValue>>,
    /// The argument hash a decision must name: the call the page showed.
    pub args_hash: String,
    /// What Approve also allows: identical calls for this long; null for a single call.
    pub window: Option<String>,
    pub window_seconds: u64,
    pub expires_at: String,
    pub decided_at: Option<String>,
    pub decided_by: Option<String>,
    pub reason: String,
    pub answers: Vec<AnswerView>,
    pub outcome: Option<serde_json::Value>,
    /// The route asks for a second, explicit confirmation of Approve
    /// (`console_confirm`).
    pub confirm_twice: bool,
    /// The console may decide it (a confirmation, an approval, a form about a call);
    /// other kinds are answered in the chat.
    pub decidable: bool,
    /// The call may be edited before it is approved: the page shows a form built from
    /// `args_schema`, pre-filled with the parameters.
    pub editable: bool,
    /// The tool's JSON Schema the agent sent (only while the call is editable).
    pub args_schema: Option<Box<RawValue>>,
    /// Set when an operator approved the call with changes: what changed, in words
    /// (`amount 1200.5 → 1000`).
    pub changes: Option<String>,
}

#[derive(Serialize)]
pub struct AnswerView {
    pub by: String,
    pub at: String,
}

fn line(s: &str) -> String {
    text::visible(s, Layout::Line)
}

/// How much of a question without a call its title quotes.
const TITLE_EXCERPT: usize = 80;

/// `r`'s kind in words, and its one-line title (see [`QuestionView::title`]).
fn kind_and_title(r: &Question) -> (String, String) {
    let Some(i) = &r.interaction else {
        return ("confirmation".to_owned(), line(r.tool.as_str()));
    };
    // A grant question is named as one: approving it stores a grant, not a yes.
    let words = match &i.grant {
        Some(_) => "grant question".to_owned(),
        None => format!("{} question", i.kind.in_words()),
    };
    if r.has_call {
        return (words, line(r.tool.as_str()));
    }
    let first = i.question.lines().next().unwrap_or("").trim();
    let mut excerpt: String = first.chars().take(TITLE_EXCERPT).collect();
    if excerpt.chars().count() < i.question.trim().chars().count() {
        excerpt.push('…');
    }
    let title = match &i.grant {
        Some(terms) => format!(
            "🔑 grant of {} for {}",
            line(terms.scope.as_str()),
            line(terms.owner_id.as_str())
        ),
        None => format!("❓ {words} “{}”", line(&excerpt)),
    };
    (words, title)
}

impl QuestionView {
    /// `r` as the console shows it; `confirm_twice`: its route's `console_confirm`.
    pub fn of(r: &Question, confirm_twice: bool) -> QuestionView {
        let parameters = match python::json::parse(&r.params_json) {
            Ok(v) => params_view(&v, usize::MAX).0,
            Err(_) => text::visible(&r.params_json, Layout::Quoted),
        };
        let (kind_words, title) = kind_and_title(r);
        QuestionView {
            id: r.id.to_string(),
            kind: match &r.interaction {
                Some(i) => i.kind.as_str(),
                None => "confirmation",
            },
            kind_words,
            title,
            has_call: r.interaction.is_none() || r.has_call,
            status: r.public_status(),
            tool: line(r.tool.as_str()),
            agent: line(&r.agent),
            owner_id: line(r.owner_id.as_str()),
            route: line(&r.route),
            server: r.server.as_ref().map(|s| s.to_string()),
            hints: r
                .annotations
                .as_ref()
                .filter(|a| !a.is_empty())
                .map(|a| line(&a.brief())),
            briefing: text::visible(&r.briefing, Layout::Quoted),
            context: r
                .context
                .as_deref()
                .map(|c| text::visible(c, Layout::Quoted)),
            parameters,
            parameters_json: RawValue::from_string(r.params_json.clone()).ok(),
            args_hash: r.args_hash.to_string(),
            window: (r.window_seconds > 0).then(|| window_duration(r.window_seconds)),
            window_seconds: r.window_seconds,
            expires_at: operator_time(r.expires_at),
            decided_at: r.decided_at.map(operator_time),
            decided_by: r.decided_by.as_ref().map(|op| line(&op.to_string())),
            reason: line(&r.reason),
            answers: r
                .answers
                .iter()
                .map(|a| AnswerView {
                    by: a
                        .by
                        .as_ref()
                        .map_or_else(|| line(&a.respondent), |op| line(&op.to_string())),
                    at: operator_time(a.at),
                })
                .collect(),
            // The agent's words about its run, with every invisible character as the
            // escape the chat shows, like every other text of the agent's here.
            outcome: r.run_report.as_ref().map(|e| {
                let mut o = e.to_json();
                for key in ["summary", "error"] {
                    if let Some(text) = o[key].as_str().map(line) {
                        o[key] = serde_json::Value::String(text);
                    }
                }
                o
            }),
            confirm_twice,
            decidable: !r.is_terminal()
                && r.interaction.as_ref().is_none_or(|i| match i.kind {
                    InteractionType::Approval => true,
                    InteractionType::Form => r.has_call,
                    _ => false,
                }),
            editable: !r.is_terminal() && r.editable(),
            args_schema: r
                .args_schema
                .as_ref()
                .filter(|_| !r.is_terminal() && r.editable())
                .and_then(|s| RawValue::from_string(s.clone()).ok()),
            changes: r.edit_changes().map(|c| line(&edit::changes_text(&c))),
        }
    }
}

/// A live window, as the console lists it.
#[derive(Serialize)]
pub struct WindowView {
    /// The request that opened it (what Revoke names).
    pub id: String,
    pub tool: String,
    pub agent: String,
    pub owner_id: String,
    pub route: String,
    pub expires_at: String,
    /// The calls it let through, and how many of them failed.
    pub calls: u64,
    pub failed: u64,
}

impl WindowView {
    pub fn of(w: &LiveWindow, used: WindowUse) -> WindowView {
        WindowView {
            id: w.window.opened_by.to_string(),
            tool: line(w.window.key.tool.as_str()),
            agent: line(&w.window.key.agent),
            owner_id: line(w.window.key.owner_id.as_str()),
            route: line(&w.route),
            expires_at: operator_time(w.window.expires_at),
            calls: used.calls,
            failed: used.failed,
        }
    }
}

/// A live grant, as the console lists it.
#[derive(Serialize)]
pub struct GrantView {
    pub id: String,
    pub agent: String,
    pub owner_id: String,
    /// What it lets through, in words.
    pub scope: String,
    pub route: String,
    pub granted_by: String,
    pub expires_at: String,
}

impl GrantView {
    pub fn of(g: &Grant) -> GrantView {
        GrantView {
            id: g.grant_id.to_string(),
            agent: line(&g.agent),
            owner_id: line(g.owner_id.as_str()),
            scope: line(&scope_in_words(&g.scope)),
            route: line(&g.route),
            granted_by: line(&g.granted_by.to_string()),
            expires_at: operator_time(g.expires_at),
        }
    }
}

/// A group's figures as the console shows them (times in seconds).
#[derive(Serialize)]
pub struct FiguresView {
    pub asked: u64,
    pub by_people: u64,
    pub median_seconds: Option<f64>,
    pub p90_seconds: Option<f64>,
    pub approved: u64,
    pub cancelled: u64,
    pub timed_out: u64,
    pub by_rule: u64,
    pub by_window: u64,
    pub by_grant: u64,
    pub failed_runs: u64,
}

impl FiguresView {
    pub fn of(f: &crate::domain::stats::Figures) -> FiguresView {
        FiguresView {
            asked: f.asked,
            by_people: f.by_people,
            median_seconds: f.median.map(|d| d.as_secs_f64()),
            p90_seconds: f.p90.map(|d| d.as_secs_f64()),
            approved: f.approved,
            cancelled: f.cancelled,
            timed_out: f.timed_out,
            by_rule: f.by_rule,
            by_window: f.by_window,
            by_grant: f.by_grant,
            failed_runs: f.failed_runs,
        }
    }
}

/// One route's statistics.
#[derive(Serialize)]
pub struct RouteStatsView {
    pub route: String,
    pub total: FiguresView,
    pub people: Vec<PersonStatsView>,
    pub tools: Vec<ToolStatsView>,
}

#[derive(Serialize)]
pub struct PersonStatsView {
    pub name: String,
    pub figures: FiguresView,
    pub rubber_stamp: bool,
}

#[derive(Serialize)]
pub struct ToolStatsView {
    pub tool: String,
    pub figures: FiguresView,
}

impl RouteStatsView {
    pub fn of(route: &str, s: &crate::domain::stats::Stats) -> RouteStatsView {
        RouteStatsView {
            route: route.to_owned(),
            total: FiguresView::of(&s.total),
            people: s
                .people
                .iter()
                .map(|p| PersonStatsView {
                    name: p.name.clone(),
                    figures: FiguresView::of(&p.figures),
                    rubber_stamp: p.rubber_stamp,
                })
                .collect(),
            tools: s
                .tools
                .iter()
                .map(|(t, f)| ToolStatsView {
                    tool: t.clone(),
                    figures: FiguresView::of(f),
                })
                .collect(),
        }
    }
}
