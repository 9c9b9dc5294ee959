//! What the backends share: stored rows turned into domain values and back, the audit
//! chain's hashing, and the multi-row `INSERT`s whose column lists must be the same on
//! SQLite and PostgreSQL. No SQL runs here; each backend keeps its own statements (the
//! placeholders and a few functions differ) and executes these builders itself.

use sqlx::{Database, Encode, FromRow, QueryBuilder, Type};
use time::OffsetDateTime;

use super::{Gauges, LiveWindow, OutboxEntry, PendingEntry, StorageError};
use crate::domain::args_hash::ArgsHash;
use crate::domain::audit::{self, AuditEvent, GENESIS_HASH, NewEvent, StoredRow};
use crate::domain::grant::{Grant, GrantSource, Scope};
use crate::domain::ids::{
    CallbackToken, DeliveryId, GrantId, IdempotencyKey, OwnerId, QuestionId, ToolName,
};
use crate::domain::interaction::{Answer, TimeoutAction};
use crate::domain::mcp_call::ServerName;
use crate::domain::question::{Operator, Progress, Question, Status, Via, Window, WindowKey};
use columns::{
    decided_by, edited, json, stored_annotations, stored_interaction, stored_run_report,
    stored_server, unsigned,
};

mod columns;
mod whole;

pub(super) use whole::WholeRow;

/// A time as stored: Unix epoch milliseconds.
pub(super) fn ms(t: OffsetDateTime) -> i64 {
    (t.unix_timestamp_nanos() / 1_000_000) as i64
}

/// A stored time back; `None` when out of range (a corrupt row).
pub(super) fn from_ms(v: i64) -> Option<OffsetDateTime> {
    OffsetDateTime::from_unix_timestamp_nanos(i128::from(v) * 1_000_000).ok()
}

/// A Telegram user id as stored (ids fit in 52 bits; the cap never applies).
pub(super) fn user_column(id: u64) -> i64 {
    i64::try_from(id).unwrap_or(i64::MAX)
}

/// The `decided_by_*` columns of an operator (all NULL when nobody decided).
pub(super) fn operator_columns(
    op: &Option<Operator>,
) -> (Option<i64>, Option<String>, Option<String>) {
    match op {
        Some(op) => (
            i64::try_from(op.id).ok(),
            op.username.clone(),
            Some(op.name.clone()),
        ),
        None => (None, None, None),
    }
}

/// `StorageError::Corrupt` for the row `id`.
fn corrupt_in(id: &str) -> impl Fn(&str) -> StorageError + '_ {
    move |what: &str| StorageError::Corrupt {
        id: id.to_owned(),
        what: what.to_owned(),
    }
}

/// A row of `confirmations` (`SELECT *`: columns not named here are ignored), alone or
/// as part of a [`WholeRow`].
#[derive(FromRow)]
pub(super) struct Row {
    id: String,
    agent: String,
    route: String,
    chat_id: i64,
    tool: String,
    owner_id: String,
    args_hash: String,
    params_json: String,
    briefing: String,
    context: Option<String>,
    allow_edit: bool,
    window_seconds: i64,
    window_requested_seconds: Option<i64>,
    approved_once: bool,
    has_call: bool,
    idempotency_key: Option<String>,
    callback_token: String,
    callback_url: Option<String>,
    message_id: Option<i64>,
    status: String,
    via: Option<String>,
    reason: String,
    decided_by_id: Option<i64>,
    decided_by_username: Option<String>,
    decided_by_name: Option<String>,
    created_at: i64,
    expires_at: i64,
    decided_at: Option<i64>,
    interaction_json: Option<String>,
    result_json: Option<String>,
    timeout_action: Option<String>,
    denial_reason: Option<String>,
    extensions: i64,
    reminders_sent: i64,
    escalated_at: Option<i64>,
    reasons_requested: i64,
    sla_marks: i64,
    rule_json: Option<String>,
    expect_outcome_seconds: Option<i64>,
    run_status: Option<String>,
    run_summary: Option<String>,
    run_error: Option<String>,
    run_duration_ms: Option<i64>,
    run_at: Option<i64>,
    recalled_json: Option<String>,
    args_schema: Option<String>,
    original_params_json: Option<String>,
    original_args_hash: Option<String>,
    server: Option<String>,
    annotations_json: Option<String>,
    run_overdue: bool,
}

impl Row {
    /// The question, without its answers, copies and strays ([`WholeRow`] adds them).
    pub(super) fn into_domain(self) -> Result<Question, StorageError> {
        let id = self.id.clone();
        let corrupt = corrupt_in(&id);
        let time = |v: i64| from_ms(v).ok_or_else(|| corrupt("time out of range"));
        let decided_by = decided_by(
            self.decided_by_id,
            self.decided_by_username,
            self.decided_by_name,
            &corrupt,
        )?;
        Ok(Question {
            id: QuestionId::parse(&self.id).map_err(|_| corrupt("id"))?,
            agent: self.agent,
            route: self.route,
            chat_id: self.chat_id,
            tool: ToolName::from_stored(&self.tool).map_err(|_| corrupt("tool"))?,
            owner_id: OwnerId::from_stored(&self.owner_id).map_err(|_| corrupt("owner_id"))?,
            args_hash: ArgsHash::parse(&self.args_hash).map_err(|_| corrupt("args_hash"))?,
            params_json: self.params_json,
            briefing: self.briefing,
            context: self.context,
            allow_edit: self.allow_edit,
            window_seconds: u64::try_from(self.window_seconds)
                .map_err(|_| corrupt("window_seconds"))?,
            window_requested_seconds: unsigned(
                self.window_requested_seconds,
                "window_requested_seconds",
                &corrupt,
            )?,
            approved_once: self.approved_once,
            has_call: self.has_call,
            idempotency_key: self
                .idempotency_key
                .map(|k| IdempotencyKey::parse(&k))
                .transpose()
                .map_err(|_| corrupt("idempotency_key"))?,
            callback_token: CallbackToken::parse(&self.callback_token)
                .map_err(|_| corrupt("callback_token"))?,
            callback_url: self.callback_url,
            message_id: self
                .message_id
                .map(i32::try_from)
                .transpose()
                .map_err(|_| corrupt("message_id"))?,
            status: Status::parse(&self.status).ok_or_else(|| corrupt("status"))?,
            via: self
                .via
                .map(|v| Via::parse(&v).ok_or_else(|| corrupt("via")))
                .transpose()?,
            reason: self.reason,
            decided_by,
            created_at: time(self.created_at)?,
            expires_at: time(self.expires_at)?,
            decided_at: self.decided_at.map(time).transpose()?,
            interaction: stored_interaction(self.interaction_json, &corrupt)?,
            result: json(self.result_json, "result_json", &corrupt)?,
            timeout_action: self
                .timeout_action
                .map(|a| TimeoutAction::parse(&a).ok_or_else(|| corrupt("timeout_action")))
                .transpose()?,
            answers: Vec::new(),
            copies: Vec::new(),
            strays: Vec::new(),
            denial_reason: self.denial_reason,
            progress: Progress {
                extensions: u32::try_from(self.extensions).map_err(|_| corrupt("extensions"))?,
                reminders_sent: u32::try_from(self.reminders_sent)
                    .map_err(|_| corrupt("reminders_sent"))?,
                escalated_at: self.escalated_at.map(time).transpose()?,
                reasons_requested: u32::try_from(self.reasons_requested)
                    .map_err(|_| corrupt("reasons_requested"))?,
                sla_marks: u32::try_from(self.sla_marks).map_err(|_| corrupt("sla_marks"))?,
            },
            rule: json(self.rule_json, "rule_json", &corrupt)?,
            expect_outcome_seconds: unsigned(
                self.expect_outcome_seconds,
                "expect_outcome_seconds",
                &corrupt,
            )?,
            run_report: stored_run_report(
                self.run_status,
                self.run_summary,
                self.run_error,
                self.run_duration_ms,
                self.run_at,
                self.run_overdue,
                &corrupt,
            )?,
            recalled: json(self.recalled_json, "recalled_json", &corrupt)?,
            args_schema: self.args_schema,
            edited: edited(self.original_params_json, self.original_args_hash, &corrupt)?,
            server: stored_server(self.server.as_deref(), &corrupt)?,
            annotations: stored_annotations(self.annotations_json.as_deref(), &corrupt)?,
        })
    }
}

/// The window stored for `key` (its expiry and opener as read back).
pub(super) fn window(
    key: &WindowKey,
    expires_at: i64,
    opened_by: &str,
) -> Result<Window, StorageError> {
    let corrupt = corrupt_in(opened_by);
    Ok(Window {
        key: key.clone(),
        expires_at: from_ms(expires_at).ok_or_else(|| corrupt("window expiry"))?,
        opened_by: QuestionId::parse(opened_by).map_err(|_| corrupt("opened_by"))?,
    })
}

/// A pending request as stored: id, deadline, delivered, attached, route.
pub(super) type PendingRow = (String, i64, bool, bool, String);

pub(super) fn pending_entry(
    (id, at, delivered, attached, route): PendingRow,
) -> Result<PendingEntry, StorageError> {
    let corrupt = corrupt_in(&id);
    Ok(PendingEntry {
        id: QuestionId::parse(&id).map_err(|_| corrupt("id"))?,
        expires_at: from_ms(at).ok_or_else(|| corrupt("expires_at"))?,
        delivered,
        attached,
        route,
    })
}

/// The metrics' gauges from their three reads: pending requests per agent (count,
/// oldest creation), the webhook backlog, and dropped deliveries per agent.
pub(super) fn gauges(
    pending: Vec<(String, i64, i64)>,
    backlog: i64,
    dropped: Vec<(String, i64)>,
) -> Gauges {
    Gauges {
        oldest_pending_since: pending
            .iter()
            .map(|(_, _, since)| *since)
            .min()
            .and_then(from_ms),
        pending_by_agent: pending
            .into_iter()
            .map(|(agent, n, _)| (agent, u64::try_from(n).unwrap_or(0)))
            .collect(),
        webhook_backlog: u64::try_from(backlog).unwrap_or(0),
        webhook_dropped_by_agent: dropped
            .into_iter()
            .map(|(agent, n)| (agent, u64::try_from(n).unwrap_or(0)))
            .collect(),
    }
}

/// What `audit verify` reads, from the rows of `audit_events` (in `seq` order) and each
/// question's `(id, status)`, as both backends read them.
pub(super) fn audit_snapshot(
    rows: Vec<AuditRow>,
    statuses: Vec<(String, String)>,
) -> Result<(Vec<StoredRow>, Vec<audit::StoredStatus>), StorageError> {
    let rows = rows
        .into_iter()
        .map(AuditRow::into_stored)
        .collect::<Result<_, _>>()?;
    let statuses = statuses
        .into_iter()
        .map(|(id, status)| audit::StoredStatus { id, status })
        .collect();
    Ok((rows, statuses))
}

/// A row of `audit_events` (`SELECT *`).
#[derive(FromRow)]
pub(super) struct AuditRow {
    seq: i64,
    at: i64,
    confirmation_id: Option<String>,
    kind: String,
    actor: String,
    detail: String,
    prev_hash: String,
    hash: String,
}

impl AuditRow {
    pub(super) fn into_stored(self) -> Result<StoredRow, StorageError> {
        Ok(StoredRow {
            at: from_ms(self.at).ok_or_else(|| StorageError::Corrupt {
                id: format!("audit event {}", self.seq),
                what: "time".into(),
            })?,
            seq: self.seq,
            confirmation_id: self.confirmation_id,
            kind: self.kind,
            actor: self.actor,
            detail_text: self.detail,
            prev_hash: self.prev_hash,
            hash: self.hash,
        })
    }

    /// The event as the API shows it (its detail parsed).
    pub(super) fn into_event(self) -> Result<AuditEvent, StorageError> {
        let s = self.into_stored()?;
        Ok(AuditEvent {
            detail: serde_json::from_str(&s.detail_text).unwrap_or(serde_json::Value::Null),
            seq: s.seq,
            at: s.at,
            confirmation_id: s.confirmation_id,
            kind: s.kind,
            actor: s.actor,
            prev_hash: s.prev_hash,
            hash: s.hash,
        })
    }
}

/// The trail's head from its last row (`None`: the trail is empty).
pub(super) fn head(last: Option<(i64, String)>) -> Result<audit::Head, StorageError> {
    match last {
        None => Ok(audit::Head::genesis()),
        Some((seq, hash)) => audit::Head::new(seq, &hash).map_err(|e| StorageError::Corrupt {
            id: format!("audit event {seq}"),
            what: format!("hash: {e}"),
        }),
    }
}

/// An event ready to append: numbered and hashed onto the chain.
pub(super) struct Chained<'e> {
    pub(super) seq: i64,
    pub(super) event: &'e NewEvent,
    pub(super) detail: String,
    pub(super) prev_hash: String,
    pub(super) hash: String,
}

/// Numbers and hashes `events`, in order, onto the chain whose last row is `last`
/// (`None`: the trail is empty). The caller read `last` inside the transaction that
/// appends, under the lock that keeps every other appender out.
pub(super) fn chain(last: Option<(i64, String)>, events: &[NewEvent]) -> Vec<Chained<'_>> {
    let (mut seq, mut prev_hash) = last.unwrap_or_else(|| (0, GENESIS_HASH.to_owned()));
    let mut rows = Vec::with_capacity(events.len());
    for event in events {
        seq += 1;
        let detail = event.detail.to_string();
        let hash = audit::chain_hash(
            &prev_hash,
            seq,
            event.at,
            event.confirmation_id.as_deref(),
            event.kind,
            &event.actor,
            &detail,
        );
        let prev = std::mem::replace(&mut prev_hash, hash.clone());
        rows.push(Chained {
            seq,
            event,
            detail,
            prev_hash: prev,
            hash,
        });
    }
    rows
}

/// `INSERT INTO audit_events … VALUES (…), (…)` for `rows` (see [`insert_runs`]).
pub(super) fn insert_audit_rows<DB>(rows: &[Chained<'_>]) -> QueryBuilder<DB>
where
    DB: Database,
    DB::Arguments: Default,
    for<'t> &'t str: Encode<'t, DB> + Type<DB>,
    for<'t> Option<&'t str>: Encode<'t, DB> + Type<DB>,
    for<'t> i64: Encode<'t, DB> + Type<DB>,
{
    let mut insert = QueryBuilder::new(
        "INSERT INTO audit_events (seq, at, confirmation_id, kind, actor, detail, prev_hash,
            hash) ",
    );
    insert.push_values(rows, |mut row, c| {
        row.push_bind(c.seq)
            .push_bind(ms(c.event.at))
            .push_bind(c.event.confirmation_id.as_deref())
            .push_bind(c.event.kind)
            .push_bind(c.event.actor.as_str())
            .push_bind(c.detail.as_str())
            .push_bind(c.prev_hash.as_str())
            .push_bind(c.hash.as_str());
    });
    insert
}

/// The columns of a stored request, in the order every writer binds them
/// ([`insert_confirmations`], and the SQLite group commit's own statement).
macro_rules! confirmation_columns {
    () => {
        "id, agent, route, chat_id, tool, owner_id, args_hash, params_json, briefing,
        context, allow_edit, window_seconds, idempotency_key, callback_token, callback_url,
        message_id, status, via, reason, decided_by_id, decided_by_username,
        decided_by_name, created_at, expires_at, decided_at, interaction_id,
        interaction_json, window_requested_seconds, approved_once, has_call, rule, rule_json,
        expect_outcome_seconds, recalled_json, run_due_at, args_schema, server,
        annotations_json"
    };
}
pub(super) use confirmation_columns;

/// `INSERT INTO confirmations … VALUES (…), (…)` for `records`, one row each: the one
/// column list for a single request and for a batch of window hits, on either backend.
pub(super) fn insert_confirmations<'r, DB>(
    records: impl IntoIterator<Item = &'r Question>,
) -> QueryBuilder<DB>
where
    DB: Database,
    DB::Arguments: Default,
    for<'t> &'t str: Encode<'t, DB> + Type<DB>,
    for<'t> Option<&'t str>: Encode<'t, DB> + Type<DB>,
    for<'t> i64: Encode<'t, DB> + Type<DB>,
    for<'t> Option<i64>: Encode<'t, DB> + Type<DB>,
    for<'t> bool: Encode<'t, DB> + Type<DB>,
    for<'t> Option<String>: Encode<'t, DB> + Type<DB>,
{
    let mut b = QueryBuilder::new(concat!(
        "INSERT INTO confirmations (",
        confirmation_columns!(),
        ") "
    ));
    b.push_values(records, |mut row, r| {
        let (by_id, by_username, by_name) = operator_columns(&r.decided_by);
        row.push_bind(r.id.as_str())
            .push_bind(r.agent.as_str())
            .push_bind(r.route.as_str())
            .push_bind(r.chat_id)
            .push_bind(r.tool.as_str())
            .push_bind(r.owner_id.as_str())
            .push_bind(r.args_hash.as_str())
            .push_bind(r.params_json.as_str())
            .push_bind(r.briefing.as_str())
            .push_bind(r.context.as_deref())
            .push_bind(r.allow_edit)
            .push_bind(i64::try_from(r.window_seconds).unwrap_or(i64::MAX))
            .push_bind(r.idempotency_key.as_ref().map(|k| k.as_str()))
            .push_bind(r.callback_token.as_str())
            .push_bind(r.callback_url.as_deref())
            .push_bind(r.message_id.map(i64::from))
            .push_bind(r.status.as_str())
            .push_bind(r.via.map(Via::as_str))
            .push_bind(r.reason.as_str())
            .push_bind(by_id)
            .push_bind(by_username)
            .push_bind(by_name)
            .push_bind(ms(r.created_at))
            .push_bind(ms(r.expires_at))
            .push_bind(r.decided_at.map(ms))
            .push_bind(r.interaction.as_ref().map(|i| i.interaction_id.as_str()))
            .push_bind(
                r.interaction
                    .as_ref()
                    .map(|i| serde_json::Value::Object(i.raw.clone()).to_string()),
            )
            .push_bind(
                r.window_requested_seconds
                    .map(|w| i64::try_from(w).unwrap_or(i64::MAX)),
            )
            .push_bind(r.approved_once)
            .push_bind(r.has_call)
            .push_bind(rule_name(r))
            .push_bind(rule_json(r))
            .push_bind(expect_outcome(r))
            .push_bind(recalled_json(r))
            .push_bind(run_due(r))
            .push_bind(r.args_schema.as_deref())
            .push_bind(server_column(r))
            .push_bind(annotations_column(r));
    });
    b
}

/// The `server` column: the MCP server the call goes to, if any.
pub(super) fn server_column(r: &Question) -> Option<&str> {
    r.server.as_ref().map(|s| s.as_str())
}

/// The `annotations_json` column: the tool's MCP annotations, in name order.
pub(super) fn annotations_column(r: &Question) -> Option<String> {
    r.annotations.as_ref().map(|a| a.to_json().to_string())
}

/// A window's `server` column: '' for a call to no server (a server's name is never
/// empty, and a primary key holds no NULL).
pub(super) fn window_server(key: &WindowKey) -> &str {
    key.server.as_ref().map_or("", |s| s.as_str())
}

/// A window's `server` column back.
pub(super) fn window_server_back(
    stored: &str,
    corrupt: &impl Fn(&str) -> StorageError,
) -> Result<Option<ServerName>, StorageError> {
    if stored.is_empty() {
        return Ok(None);
    }
    ServerName::parse(stored)
        .map(Some)
        .map_err(|_| corrupt("window server"))
}

/// The `rule` column: the name of the rule that decided the call.
pub(super) fn rule_name(r: &Question) -> Option<&str> {
    r.rule.as_ref().and_then(|v| v.rule.as_deref())
}

/// The `expect_outcome_seconds` column.
pub(super) fn expect_outcome(r: &Question) -> Option<i64> {
    r.expect_outcome_seconds
        .map(|s| i64::try_from(s).unwrap_or(i64::MAX))
}

/// The `run_due_at` column: when an approved call is owed its report (`None`: nothing
/// ran yet, or no report is expected).
pub(crate) fn run_due(r: &Question) -> Option<i64> {
    r.report_due_at().map(ms)
}

/// The `recalled_json` column: the earlier run the approver is told of.
pub(super) fn recalled_json(r: &Question) -> Option<String> {
    r.recalled
        .as_ref()
        .and_then(|v| serde_json::to_string(v).ok())
}

/// The `rule_json` column: the rules' verdict on the call.
pub(super) fn rule_json(r: &Question) -> Option<String> {
    r.rule.as_ref().and_then(|v| serde_json::to_string(v).ok())
}

/// Splits `rows` for multi-row `INSERT`s into runs of a power of two rows, largest
/// first, up to 256 (the widest table has 35 columns, and SQLite allows 32,766
/// parameters in one statement; PostgreSQL 65,535). A statement's text depends on its
/// row count, and each connection keeps its prepared statements by text: with powers of
/// two, every batch size reuses one of nine statements per table instead of preparing
/// one per size.
pub(super) fn insert_runs<T>(mut rows: &[T]) -> impl Iterator<Item = &[T]> {
    std::iter::from_fn(move || {
        if rows.is_empty() {
            return None;
        }
        let len = if rows.len() >= 256 {
            256
        } else {
            1 << rows.len().ilog2()
        };
        let (run, rest) = rows.split_at(len);
        rows = rest;
        Some(run)
    })
}

/// A window joined with the route and chat of the request that opened it.
#[derive(FromRow)]
pub(super) struct WindowRow {
    agent: String,
    window_route: String,
    owner_id: String,
    tool: String,
    args_hash: String,
    window_server: String,
    expires_at: i64,
    opened_by: String,
    route: String,
    chat_id: i64,
}

/// The [`WindowRow`]s `WHERE <clause>`; `w` is the window, `c` its opening request.
macro_rules! select_windows_where {
    ($clause:literal) => {
        concat!(
            "SELECT w.agent, w.route AS window_route, w.owner_id, w.tool, w.args_hash,
                    w.server AS window_server, w.expires_at, w.opened_by, c.route, c.chat_id
             FROM windows w JOIN confirmations c ON c.id = w.opened_by
             WHERE ",
            $clause
        )
    };
}
pub(super) use select_windows_where;

impl WindowRow {
    pub(super) fn into_domain(self) -> Result<LiveWindow, StorageError> {
        let corrupt = corrupt_in(&self.opened_by);
        Ok(LiveWindow {
            window: Window {
                key: WindowKey {
                    owner_id: OwnerId::from_stored(&self.owner_id)
                        .map_err(|_| corrupt("window owner_id"))?,
                    tool: ToolName::from_stored(&self.tool).map_err(|_| corrupt("window tool"))?,
                    args_hash: ArgsHash::parse(&self.args_hash)
                        .map_err(|_| corrupt("window args_hash"))?,
                    agent: self.agent.clone(),
                    route: self.window_route.clone(),
                    server: window_server_back(&self.window_server, &corrupt)?,
                },
                expires_at: from_ms(self.expires_at).ok_or_else(|| corrupt("window expiry"))?,
                opened_by: QuestionId::parse(&self.opened_by).map_err(|_| corrupt("opened_by"))?,
            },
            route: self.route.clone(),
            chat_id: self.chat_id,
        })
    }
}

/// The columns of `grants`, in the order [`GrantRow`] names them and `insert_grant`
/// binds them.
macro_rules! grant_columns {
    () => {
        "grant_id, agent, owner_id, scope, route, reason, granted_by_id, granted_by_username,
        granted_by_name, created_at, expires_at, revoked_at, revoked_by_id,
        revoked_by_username, revoked_by_name, confirmation_id, interaction_id"
    };
}
pub(super) use grant_columns;

/// The [`GrantRow`]s `WHERE <clause>`, as a static string (sqlx only takes SQL it can
/// see is not built from input).
macro_rules! select_grants_where {
    ($clause:expr) => {
        concat!("SELECT ", grant_columns!(), " FROM grants WHERE ", $clause)
    };
}
pub(super) use select_grants_where;

/// A row of `grants` ([`grant_columns`]).
#[derive(FromRow)]
pub(super) struct GrantRow {
    grant_id: String,
    agent: String,
    owner_id: String,
    scope: String,
    route: String,
    reason: Option<String>,
    granted_by_id: i64,
    granted_by_username: Option<String>,
    granted_by_name: String,
    created_at: i64,
    expires_at: i64,
    revoked_at: Option<i64>,
    revoked_by_id: Option<i64>,
    revoked_by_username: Option<String>,
    revoked_by_name: Option<String>,
    confirmation_id: Option<String>,
    interaction_id: Option<String>,
}

impl GrantRow {
    pub(super) fn into_domain(self) -> Result<Grant, StorageError> {
        let corrupt = corrupt_in(&self.grant_id);
        let time = |v: i64| from_ms(v).ok_or_else(|| corrupt("time out of range"));
        let operator = |id: i64, username, name| {
            Ok::<_, StorageError>(Operator {
                id: u64::try_from(id).map_err(|_| corrupt("operator id"))?,
                username,
                name,
            })
        };
        let source = match (self.confirmation_id, self.interaction_id) {
            (Some(id), None) => GrantSource::Asked {
                confirmation_id: QuestionId::parse(&id).map_err(|_| corrupt("confirmation_id"))?,
            },
            (None, Some(interaction_id)) => GrantSource::Interaction { interaction_id },
            _ => return Err(corrupt("source")),
        };
        Ok(Grant {
            grant_id: GrantId::parse(&self.grant_id).map_err(|_| corrupt("grant_id"))?,
            owner_id: OwnerId::from_stored(&self.owner_id).map_err(|_| corrupt("owner_id"))?,
            scope: Scope::from_stored(&self.scope).map_err(|_| corrupt("scope"))?,
            granted_by: operator(
                self.granted_by_id,
                self.granted_by_username,
                self.granted_by_name,
            )?,
            created_at: time(self.created_at)?,
            expires_at: time(self.expires_at)?,
            revoked_at: self.revoked_at.map(time).transpose()?,
            revoked_by: match (self.revoked_by_id, self.revoked_by_name) {
                (Some(id), Some(name)) => Some(operator(id, self.revoked_by_username, name)?),
                _ => None,
            },
            agent: self.agent,
            route: self.route,
            reason: self.reason,
            source,
        })
    }
}

/// A row of `webhook_outbox` as the worker reads it.
#[derive(FromRow)]
pub(super) struct OutboxRow {
    delivery_id: String,
    confirmation_id: String,
    agent: String,
    url: String,
    created_at: i64,
    attempts: i64,
}

impl OutboxRow {
    pub(super) fn into_entry(self) -> Result<OutboxEntry, StorageError> {
        let corrupt = corrupt_in(&self.delivery_id);
        Ok(OutboxEntry {
            delivery_id: DeliveryId::parse(&self.delivery_id)
                .map_err(|_| corrupt("delivery_id"))?,
            confirmation_id: QuestionId::parse(&self.confirmation_id)
                .map_err(|_| corrupt("confirmation_id"))?,
            created_at: from_ms(self.created_at).ok_or_else(|| corrupt("created_at"))?,
            attempts: u32::try_from(self.attempts).unwrap_or(u32::MAX),
            agent: self.agent,
            url: self.url,
        })
    }
}

/// The reason a webhook delivery was dropped instead of queued.
pub(super) fn dropped_reason(backlog: u64) -> String {
    format!("dropped: the agent already had {backlog} undelivered webhooks")
}

/// A default applied on timeout is stored as an answer, marked as a default, so the
/// agent sees it as a HumanResponse like any other. `None` unless `d` is such a timeout
/// (and `changed`: the decision applied).
pub(super) fn default_answer(
    d: &crate::domain::question::Decision,
    changed: bool,
) -> Option<Answer> {
    match (&d.result, d.via, d.status) {
        (Some(value), Via::Timeout, Status::Completed) if changed => Some(Answer {
            respondent: "system".into(),
            by: None,
            value: value.clone(),
            is_default: true,
            once: false,
            reason: None,
            at: d.decided_at,
        }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::insert_runs;

    #[test]
    fn insert_runs_are_powers_of_two_largest_first_and_cover_every_row() {
        let rows: Vec<usize> = (0..600).collect();
        for n in [0, 1, 2, 3, 45, 64, 255, 256, 257, 600] {
            let runs: Vec<&[usize]> = insert_runs(&rows[..n]).collect();
            assert!(
                runs.iter()
                    .all(|r| r.len().is_power_of_two() && r.len() <= 256)
            );
            assert!(runs.windows(2).all(|w| w[0].len() >= w[1].len()), "{n}");
            assert_eq!(runs.concat(), rows[..n].to_vec(), "{n}");
        }
    }
}
