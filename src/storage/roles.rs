//! The store by role: one trait for each part of what the service keeps.
//!
//! A part of the service that needs one role takes that role (`&dyn Audit`, `Arc<dyn
//! AgentEvents>`); where everything is needed, [`Store`](super::Store) is their union.
//! Each backend implements every role; what the two backends share is written once
//! (`common.rs` and `sql/`, compiled for each).

use async_trait::async_trait;
use time::OffsetDateTime;
use tokio::sync::mpsc;

use super::{
    AgentEvent, AlertEntry, Answered, Change, Decided, DeliveryAttempt, EndedCursor, Gauges,
    GrantInserted, Inserted, LiveConfig, LiveWindow, NewAlert, OutboxEntry, PendingEntry,
    RunReported, Shown, StorageError, WindowUse,
};
use crate::domain::audit::{AuditEvent, Head, NewEvent, StoredRow, StoredStatus};
use crate::domain::authority::{Authority, Fingerprint};
use crate::domain::away::Absence;
use crate::domain::grant::{Grant, Scope};
use crate::domain::ids::{CallbackToken, GrantId, IdempotencyKey, OwnerId, QuestionId, ToolName};
use crate::domain::interaction::Answer;
use crate::domain::outage::Outage;
use crate::domain::question::{Decision, Operator, Question, Window, WindowKey};
use crate::domain::rules::suggest::Decided as PersonDecided;
use crate::domain::rules::{ChatRuleRecord, ChatRuleState};
use crate::domain::run_report::{NewRunReport, Recalled};
use crate::storage::pins::{ListedTool, Listing, ToolPin};

/// Asking and finding questions: storing a new one, deciding it, and the lookups of one or
/// many.
#[async_trait]
pub trait Questions: Send + Sync + 'static {
    /// Stores a new request, unless the same agent already used its idempotency key
    /// within [`IDEMPOTENCY_TTL`](super::IDEMPOTENCY_TTL) of `now`. The record may
    /// already be terminal (a window hit is stored confirmed at once); then its webhook
    /// is queued in the same transaction.
    async fn insert(
        &self,
        record: &Question,
        now: OffsetDateTime,
    ) -> Result<Inserted, StorageError>;

    async fn get(&self, id: &QuestionId) -> Result<Option<Question>, StorageError>;

    async fn find_by_token(&self, token: &CallbackToken) -> Result<Option<Question>, StorageError>;

    /// The agent's live request under `key`, if any.
    async fn find_by_idempotency_key(
        &self,
        agent: &str,
        key: &IdempotencyKey,
        now: OffsetDateTime,
    ) -> Result<Option<Question>, StorageError>;

    /// The agent's interaction with its own `interaction_id`.
    async fn find_interaction(
        &self,
        agent: &str,
        interaction_id: &str,
    ) -> Result<Option<Question>, StorageError>;

    /// The question posted as `message_id` in `chat_id` (its first message or a copy).
    async fn find_by_message(
        &self,
        chat_id: i64,
        message_id: i32,
    ) -> Result<Option<Question>, StorageError>;

    /// The pending questions posted in `chat_id` (as their first message), oldest first.
    async fn pending_in_chat(&self, chat_id: i64) -> Result<Vec<Question>, StorageError>;

    /// At most `limit` of the questions asked in any of `chats` (as their first message
    /// or a copy) that ended, the latest decision first, starting after `before` (the
    /// last of the previous page). Only questions someone was asked: not the calls a
    /// window, a rule or a grant let through as they were stored.
    async fn ended_in_chats(
        &self,
        chats: &[i64],
        before: Option<&EndedCursor>,
        limit: u32,
    ) -> Result<Vec<Question>, StorageError>;

    /// How many requests of `agent` are pending.
    async fn count_pending(&self, agent: &str) -> Result<u64, StorageError>;

    /// The confirmations of `route` asked since `since` that ended (at most `limit`, the
    /// latest first), as the statistics read them (`/stats`).
    async fn ended_since(
        &self,
        route: &str,
        since: OffsetDateTime,
        limit: u32,
    ) -> Result<Vec<crate::domain::stats::Ended>, StorageError>;

    /// At most `limit` pending questions, of `agent` when given (`None`: of every
    /// agent), the soonest deadline first: what waits, seen from outside the chat.
    async fn pending_of(
        &self,
        agent: Option<&str>,
        limit: u32,
    ) -> Result<Vec<Question>, StorageError>;

    /// How many calls the rule named `rule` let through (confirmed by it, not asked)
    /// since `since`: what an `allow` rule's `rate` counts, in the database so that the
    /// count survives restarts and is shared by replicas.
    async fn count_allowed_by_rule(
        &self,
        rule: &str,
        since: OffsetDateTime,
    ) -> Result<u64, StorageError>;

    /// Every pending request's id, deadline and whether its message was recorded
    /// (restart recovery).
    async fn pending(&self) -> Result<Vec<PendingEntry>, StorageError>;

    /// Decided requests whose message does not show the outcome yet (restart recovery).
    async fn unshown_decisions(&self) -> Result<Vec<Question>, StorageError>;

    /// Moves a pending request to its outcome with one conditional update. In the same
    /// transaction it opens the confirmation window (when an operator confirmed a request
    /// with `window_seconds > 0`) and queues the webhook (when it has a `callback_url`).
    async fn decide(&self, id: &QuestionId, decision: &Decision) -> Result<Decided, StorageError>;
}

/// Where a question is shown: its Telegram messages (the first, its copies, the strays
/// learned from taps), what they show, and the chats routes live in.
#[async_trait]
pub trait Messages: Send + Sync + 'static {
    /// Records the Telegram message that carries the request's buttons (audited).
    async fn set_message_id(&self, id: &QuestionId, message_id: i32) -> Result<(), StorageError>;

    /// Records that a message of the question shows what `what` says (its outcome, or
    /// the file with the full parameters), so a restart does not show it again.
    async fn mark_shown(&self, id: &QuestionId, what: Shown) -> Result<(), StorageError>;

    /// Adds a further destination for a pending question; false when it already had
    /// that chat (or is no longer pending).
    async fn add_copy(
        &self,
        id: &QuestionId,
        recipient: &str,
        chat_id: i64,
        now: OffsetDateTime,
    ) -> Result<bool, StorageError>;

    /// Records the message of a copy (audited).
    async fn set_copy_message_id(
        &self,
        id: &QuestionId,
        chat_id: i64,
        message_id: i32,
        now: OffsetDateTime,
    ) -> Result<(), StorageError>;

    /// Records (audited) a message of the question learned from a tap on it, unless it
    /// is known already; returns the record as it is then (`None`: no such question).
    async fn add_stray(
        &self,
        id: &QuestionId,
        chat_id: i64,
        message_id: i32,
        now: OffsetDateTime,
    ) -> Result<Option<Question>, StorageError>;

    /// Routes whose chat moved (a group upgraded to a supergroup), with the new chat.
    async fn route_chats(&self) -> Result<Vec<(String, i64)>, StorageError>;

    /// Records that `route` now lives in `to_chat`, and moves its pending requests there.
    async fn move_route_chat(
        &self,
        route: &str,
        from_chat: i64,
        to_chat: i64,
        now: OffsetDateTime,
    ) -> Result<(), StorageError>;
}

/// What operators do to a pending question besides deciding it: answers and selections, the
/// reason asked for, deadlines moved, reminders and escalation.
#[async_trait]
pub trait Steps: Send + Sync + 'static {
    /// Stores one person's answer to a pending question, with its audit and stream
    /// events, unless they already answered or the question ended. With `settles`, the
    /// answer decides the question in the same transaction (as [`Questions::decide`]).
    /// `also`: an event audited right after the answer's, in the same transaction, only
    /// when the answer is stored (the console's `console_decision`): the trail never
    /// holds the answer without it, nor it without the answer.
    async fn add_answer(
        &self,
        id: &QuestionId,
        answer: &Answer,
        settles: Option<&Decision>,
        also: Option<&NewEvent>,
    ) -> Result<Answered, StorageError>;

    /// A person's multi-choice selection in progress.
    async fn selection(&self, id: &QuestionId, user_id: u64) -> Result<Vec<String>, StorageError>;

    async fn set_selection(
        &self,
        id: &QuestionId,
        user_id: u64,
        keys: &[String],
    ) -> Result<(), StorageError>;

    /// Records (audited, streamed) that `by` tapped "Deny with reason" in `chat_id`;
    /// returns the record, or `None` when the question is no longer pending.
    async fn request_reason(
        &self,
        id: &QuestionId,
        by: &Operator,
        chat_id: i64,
        now: OffsetDateTime,
    ) -> Result<Option<Question>, StorageError>;

    /// Records the message that asks `user_id` for their reason.
    async fn set_reason_prompt(
        &self,
        id: &QuestionId,
        user_id: u64,
        prompt_message_id: i32,
    ) -> Result<(), StorageError>;

    /// The question whose reason `user_id` was asked for in `chat_id`, when
    /// `reply_to` is the prompt or a message of that question there, or when the
    /// replied-to message is that question's reason prompt as its text says (`named`).
    async fn reason_request_for(
        &self,
        chat_id: i64,
        reply_to: i32,
        named: Option<&QuestionId>,
        user_id: u64,
    ) -> Result<Option<Question>, StorageError>;

    /// Moves a pending question's deadline from `from` to `to` (conditional on `from`,
    /// so concurrent taps move it once), audited and streamed; `None` when nothing moved.
    async fn extend(
        &self,
        id: &QuestionId,
        from: OffsetDateTime,
        to: OffsetDateTime,
        by: &Operator,
        now: OffsetDateTime,
    ) -> Result<Option<Question>, StorageError>;

    /// Claims the reminders up to `passed` of a pending question that has sent `sent`
    /// (audited, streamed); `None` when another claim came first or it ended.
    async fn claim_reminders(
        &self,
        id: &QuestionId,
        sent: u32,
        passed: u32,
        now: OffsetDateTime,
    ) -> Result<Option<Question>, StorageError>;

    /// Claims `mark` of a pending question whose card shows `shown` marks (audited and
    /// streamed as `sla_at_risk` or `sla_overdue`); `None` when another claim came first
    /// or it ended.
    async fn claim_sla_mark(
        &self,
        id: &QuestionId,
        shown: u32,
        mark: crate::domain::sla::SlaMark,
        now: OffsetDateTime,
    ) -> Result<Option<Question>, StorageError>;

    /// Adds a copy of a pending question for the delegate of the approvers away
    /// (`recipient` names them), in their private chat `chat_id` (audited and streamed as
    /// `delegated`, naming them); `None` when that copy exists already or it ended.
    async fn delegate_question(
        &self,
        id: &QuestionId,
        recipient: &str,
        chat_id: i64,
        now: OffsetDateTime,
    ) -> Result<Option<Question>, StorageError>;

    /// Claims a pending question's escalation and adds its copy for `chat_id` (audited,
    /// streamed); `None` when it was escalated already or ended.
    async fn escalate(
        &self,
        id: &QuestionId,
        recipient: &str,
        chat_id: i64,
        now: OffsetDateTime,
    ) -> Result<Option<Question>, StorageError>;
}

/// Confirmation windows: the lookups a window hit is decided by, and their end (revoked or
/// expired).
#[async_trait]
pub trait Windows: Send + Sync + 'static {
    /// The live window for `key` at `now`, if any.
    async fn live_window(
        &self,
        key: &WindowKey,
        now: OffsetDateTime,
    ) -> Result<Option<Window>, StorageError>;

    /// The windows live at `now` that a request of `route` opened, soonest expiry first.
    async fn live_windows(
        &self,
        route: &str,
        now: OffsetDateTime,
    ) -> Result<Vec<LiveWindow>, StorageError>;

    /// The windows live at `now`, of `agent` when given (`None`: of every agent),
    /// soonest expiry first.
    async fn live_windows_of(
        &self,
        agent: Option<&str>,
        now: OffsetDateTime,
    ) -> Result<Vec<LiveWindow>, StorageError>;

    /// The window live at `now` that `opened_by` opened, if any. A request opens at most
    /// one window, so its id names the window.
    async fn live_window_opened_by(
        &self,
        opened_by: &QuestionId,
        now: OffsetDateTime,
    ) -> Result<Option<LiveWindow>, StorageError>;

    /// Closes the window `opened_by` opened, if it is still live at `now`, and records in
    /// the same transaction that `by` revoked it (in `chat_id`). Returns the window
    /// closed; `None` when there was none live (nothing is written then). The one way a
    /// window ends early, so a cache of windows is invalidated here.
    async fn revoke_window(
        &self,
        opened_by: &QuestionId,
        by: &Operator,
        chat_id: i64,
        now: OffsetDateTime,
    ) -> Result<Option<LiveWindow>, StorageError>;

    /// Deletes windows that expired before `now`; returns how many.
    async fn purge_expired_windows(&self, now: OffsetDateTime) -> Result<u64, StorageError>;
}

/// Grants (issue 35): what a human let an agent do for an owner, in a scope, for a while.
/// Every method reads or writes the table itself, never a cache: a grant revoked by any
/// process sharing the database stops letting calls through at once on every other.
#[async_trait]
pub trait Grants: Send + Sync + 'static {
    /// Stores a new grant, unless its source was used already: an interaction becomes a
    /// grant once per agent, a grant question once (the database's unique indexes
    /// decide, so of two replicas storing the same source at once one succeeds).
    async fn insert_grant(&self, grant: &Grant) -> Result<GrantInserted, StorageError>;

    /// The grant `id`, live or not.
    async fn grant(&self, id: &GrantId) -> Result<Option<Grant>, StorageError>;

    /// A grant of `agent` for `owner_id`, live at `now`, whose scope covers `scope` (the
    /// scope itself, or its kind's `*`); of several, the one that expires last.
    async fn live_grant_covering(
        &self,
        agent: &str,
        owner_id: &OwnerId,
        scope: &Scope,
        now: OffsetDateTime,
    ) -> Result<Option<Grant>, StorageError>;

    /// The grants live at `now`, of `agent` and of `route` when given (`None`: of
    /// every agent, of every route), soonest expiry first.
    async fn live_grants(
        &self,
        agent: Option<&str>,
        route: Option<&str>,
        now: OffsetDateTime,
    ) -> Result<Vec<Grant>, StorageError>;

    /// Revokes the grant `id` if it is live at `now` and (when `agent` is given) that
    /// agent's: an agent revokes only its own, an operator (`agent: None`) any. `by` is
    /// the operator (`None`: the agent itself). One conditional update: returns the
    /// grant as revoked, or `None` when it is unknown, another agent's, already revoked
    /// or expired (nothing is written then).
    async fn revoke_grant(
        &self,
        id: &GrantId,
        agent: Option<&str>,
        by: Option<&Operator>,
        now: OffsetDateTime,
    ) -> Result<Option<Grant>, StorageError>;
}

/// What happened after the yes (issue 36): agents' reports of running confirmed calls,
/// the runs never reported, the earlier run recalled to the next approver, and what a
/// window let through.
#[async_trait]
pub trait Runs: Send + Sync + 'static {
    /// Takes `report` as what happened when `agent` ran its confirmed call `id`, with one
    /// conditional update: a question with no run yet, or the service's `unknown`,
    /// takes it; the same report again changes nothing; another agent's question is
    /// not found. In the same transaction: its audit event, the agent's stream event
    /// and its webhook.
    async fn report_run(
        &self,
        id: &QuestionId,
        agent: &str,
        report: &NewRunReport,
        now: OffsetDateTime,
    ) -> Result<RunReported, StorageError>;

    /// Marks `unknown` (audited, streamed, its webhook queued) at most `limit` confirmed
    /// calls whose route's `expect_outcome_seconds` passed at `now` with no report;
    /// returns them.
    async fn overdue_runs(
        &self,
        now: OffsetDateTime,
        limit: u32,
    ) -> Result<Vec<Question>, StorageError>;

    /// Records that every message of `id` shows its run as reported at `reported_at`.
    async fn mark_run_shown(
        &self,
        id: &QuestionId,
        reported_at: OffsetDateTime,
    ) -> Result<(), StorageError>;

    /// The questions whose messages do not show their run yet (restart recovery).
    async fn unshown_runs(&self) -> Result<Vec<Question>, StorageError>;

    /// The last reported run of `agent`'s `tool` decided since `since`, when it failed
    /// or is `unknown` (`None` when it went fine, or there is none).
    async fn recall_run(
        &self,
        agent: &str,
        tool: &ToolName,
        since: OffsetDateTime,
    ) -> Result<Option<Recalled>, StorageError>;

    /// How many calls the window `opened_by` opened let through, and how many of them
    /// failed.
    async fn window_use(&self, opened_by: &QuestionId) -> Result<WindowUse, StorageError>;
}

/// MCP tool pins (issue 48, "no rug pulls"): each gateway's upstream tools as approvers
/// allowed them, keyed by (agent, server, tool). Every read goes to the tables: an Allow
/// tapped through any replica is seen by the next listing on every other.
#[async_trait]
pub trait ToolPins: Send + Sync + 'static {
    /// Records a `tools/list` result and says, tool by tool in the order given, whether
    /// it is allowed or held for a person. The server's first listing is taken as
    /// `listing.mode` says (allowed as listed, audited `tools_pinned`; or every tool
    /// held under one token); later ones hold a new tool or a changed definition under
    /// a token of its own (audited `tool_quarantined`), and keep one already held as it
    /// is. One transaction, under the audit lock.
    async fn record_listing(
        &self,
        listing: &Listing<'_>,
        now: OffsetDateTime,
    ) -> Result<Vec<ListedTool>, StorageError>;

    /// Records the message (chat and id) that shows the definitions held under `token`.
    async fn set_pin_message(
        &self,
        token: &CallbackToken,
        chat_id: i64,
        message_id: i32,
    ) -> Result<(), StorageError>;

    /// The pins whose held definition waits under `token` (its Allow button), by tool
    /// name.
    async fn pending_pins(&self, token: &CallbackToken) -> Result<Vec<ToolPin>, StorageError>;

    /// Allows every definition held under `token` (one conditional update, audited
    /// `tool_allowed` for each, by `by`) and returns the pins as they were just before;
    /// empty when nothing waits under it any more (allowed already, or replaced by a
    /// newer definition): then nothing is written.
    async fn allow_pins(
        &self,
        token: &CallbackToken,
        by: &Operator,
        now: OffsetDateTime,
    ) -> Result<Vec<ToolPin>, StorageError>;

    /// Every pin of `agent`'s `server`, by tool name.
    async fn tool_pins(&self, agent: &str, server: &str) -> Result<Vec<ToolPin>, StorageError>;
}

/// Telegram out of reach (issue 50): the outage open, if any, its beginning and end
/// (each audited, with its alert queued for the fallback URL in the same transaction),
/// and the alerts' deliveries.
#[async_trait]
pub trait Outages: Send + Sync + 'static {
    /// The outage not ended yet, if any (at most one is).
    async fn open_outage(&self) -> Result<Option<Outage>, StorageError>;

    /// Stores `outage` as begun, audited `telegram_outage_started` by `event`, with
    /// `alert` queued when given. `false`: an outage is open already (another leader's),
    /// and nothing was stored.
    async fn begin_outage(
        &self,
        outage: &Outage,
        event: &NewEvent,
        alert: Option<&NewAlert>,
        now: OffsetDateTime,
    ) -> Result<bool, StorageError>;

    /// Ends `outage`, audited by `event`, with `alert` queued when given. `false`: it had
    /// ended already, and nothing was stored.
    async fn end_outage(
        &self,
        outage: &Outage,
        event: &NewEvent,
        alert: Option<&NewAlert>,
        now: OffsetDateTime,
    ) -> Result<bool, StorageError>;

    /// The alerts due at `now`, oldest first, at most `limit`.
    async fn due_alerts(
        &self,
        now: OffsetDateTime,
        limit: u32,
    ) -> Result<Vec<AlertEntry>, StorageError>;

    /// When the next pending alert not due at `after` is due, if any.
    async fn next_alert_due_after(
        &self,
        after: OffsetDateTime,
    ) -> Result<Option<OffsetDateTime>, StorageError>;

    /// Records an alert's attempt (a final one audited `outage_alert_delivered` or
    /// `outage_alert_given_up`).
    async fn alert_attempted(
        &self,
        entry: &AlertEntry,
        result: DeliveryAttempt,
        now: OffsetDateTime,
    ) -> Result<(), StorageError>;
}

/// Approvers away (issue 50): every replica reads the same absences.
#[async_trait]
pub trait AwayStore: Send + Sync + 'static {
    /// Sets `absence` (replacing the person's last), audited `away_set` by `by`.
    async fn set_away(
        &self,
        absence: &Absence,
        by: &Operator,
        now: OffsetDateTime,
    ) -> Result<(), StorageError>;

    /// Ends `person`'s absence now (audited `away_ended`); whether one was running.
    async fn end_away(
        &self,
        person: u64,
        by: &Operator,
        now: OffsetDateTime,
    ) -> Result<bool, StorageError>;

    /// The absences running at `now`, by person.
    async fn absences(&self, now: OffsetDateTime) -> Result<Vec<Absence>, StorageError>;
}

/// Rules accepted in a route's chat (issue 50): proposals, what is in force, and the
/// decisions people made that proposals are drawn from. Every read goes to the table,
/// so a rule accepted through one replica is read by every other.
#[async_trait]
pub trait ChatRulesStore: Send + Sync + 'static {
    /// Stores `proposals` (each under its id) as proposed, and returns those now
    /// proposed: a rule already accepted under the same id stays as it is, and is left
    /// out of the answer.
    async fn propose_chat_rules(
        &self,
        proposals: &[ChatRuleRecord],
        now: OffsetDateTime,
    ) -> Result<Vec<ChatRuleRecord>, StorageError>;

    /// The chat rule stored under `id`, whatever its state.
    async fn chat_rule(&self, id: &str) -> Result<Option<ChatRuleRecord>, StorageError>;

    /// Every chat rule in force (a dry run or enforced), the first accepted first.
    async fn chat_rules(&self) -> Result<Vec<ChatRuleRecord>, StorageError>;

    /// Moves the rule `id` to `to`, if it is in one of `from` (one conditional update,
    /// audited `chat_rule_moved` in the same transaction): its state before and the rule
    /// as it is now; `None` when it was not in one of `from` (a second tap).
    async fn move_chat_rule(
        &self,
        id: &str,
        from: &[ChatRuleState],
        to: ChatRuleState,
        by: &Operator,
        now: OffsetDateTime,
    ) -> Result<Option<(ChatRuleState, ChatRuleRecord)>, StorageError>;

    /// When `route` was last offered a proposal (`None`: never).
    async fn last_proposed_at(&self, route: &str) -> Result<Option<OffsetDateTime>, StorageError>;

    /// At most `limit` confirmations of `route` asked since `since` that a person
    /// approved or cancelled, the latest first: what proposals are drawn from.
    async fn decided_by_people(
        &self,
        route: &str,
        since: OffsetDateTime,
        limit: u32,
    ) -> Result<Vec<PersonDecided>, StorageError>;
}

/// The webhook outbox: deliveries queued with outcomes, and their attempts.
#[async_trait]
pub trait Outbox: Send + Sync + 'static {
    /// Sets `webhooks.max_backlog_per_agent` (at least 1): an outcome whose agent already
    /// has this many undelivered webhooks gets its delivery dropped (audited) instead of
    /// queued. The service sets it at start; the CLI tools, which decide nothing, keep the
    /// default.
    fn set_outbox_backlog_bound(&self, bound: u32);

    /// Outbox entries due at `now`, oldest first.
    async fn due_deliveries(
        &self,
        now: OffsetDateTime,
        limit: u32,
    ) -> Result<Vec<OutboxEntry>, StorageError>;

    /// Outbox entries due at `now`, at most `per_agent` of each agent (its oldest due),
    /// in turns: every agent's first, then every agent's second, and so on. An agent with
    /// a long backlog thus never hides another agent's due delivery from the worker.
    async fn due_deliveries_by_agent(
        &self,
        now: OffsetDateTime,
        per_agent: u32,
    ) -> Result<Vec<OutboxEntry>, StorageError>;

    /// When the next pending webhook is due, if any.
    async fn next_delivery_due(&self) -> Result<Option<OffsetDateTime>, StorageError>;

    /// When the next pending webhook not yet due at `after` is due, if any. (Rows due
    /// already are the worker's to start, or in flight.)
    async fn next_delivery_due_after(
        &self,
        after: OffsetDateTime,
    ) -> Result<Option<OffsetDateTime>, StorageError>;

    /// Records the result of an attempt (and, when it is final, its audit event).
    async fn delivery_attempted(
        &self,
        entry: &OutboxEntry,
        result: DeliveryAttempt,
        now: OffsetDateTime,
    ) -> Result<(), StorageError>;
}

/// The audit trail: its events appended and read back, for `audit verify` and the log.
#[async_trait]
pub trait Audit: Send + Sync + 'static {
    /// Appends an event to the audit trail. State changes append theirs inside their own
    /// transaction; this is for events that change nothing else (a refused tap).
    async fn record_event(&self, event: NewEvent) -> Result<(), StorageError>;

    /// One request's events, oldest first.
    async fn events_for(&self, id: &QuestionId) -> Result<Vec<AuditEvent>, StorageError>;

    /// The whole trail (from `since`, if given), in sequence order, as stored.
    async fn audit_rows(
        &self,
        since: Option<OffsetDateTime>,
    ) -> Result<Vec<StoredRow>, StorageError>;

    /// The whole trail (in sequence order) and every request's stored status (pending
    /// ones too, so a decided request set back to pending shows), read in one
    /// transaction: while the service keeps deciding, the two still agree, so
    /// `audit verify` reports no drift that is only a race.
    async fn audit_snapshot(&self) -> Result<(Vec<StoredRow>, Vec<StoredStatus>), StorageError>;

    /// The newest event's sequence number and hash (the genesis head for an empty
    /// trail), for the log.
    async fn audit_head(&self) -> Result<Head, StorageError>;
}

/// The agents' event streams (long polls and SSE read them; every write that changes a
/// question appends to them in its own transaction).
#[async_trait]
pub trait AgentEvents: Send + Sync + 'static {
    /// The agent's stream events after `after`, oldest first.
    async fn agent_events(
        &self,
        agent: &str,
        after: i64,
        limit: u32,
    ) -> Result<Vec<AgentEvent>, StorageError>;

    /// Deletes stream events written before `before`; returns how many.
    async fn purge_agent_events(&self, before: OffsetDateTime) -> Result<u64, StorageError>;

    /// The newest event number of the agent's stream (0 when it has none).
    async fn last_agent_event(&self, agent: &str) -> Result<i64, StorageError>;
}

/// What processes sharing one database tell each other: the change feed, leases and the
/// replicas' configurations. Every method has a default for a backend with one writing
/// process (SQLite).
#[async_trait]
pub trait Coordination: Send + Sync + 'static {
    /// What other processes sharing this database commit, as they commit: a replica's
    /// blocked agents, long polls and event streams must hear a decision taken by
    /// another replica at once. `None`: this backend has one writing process (SQLite),
    /// which hears its own changes directly. The feed ends when the receiver is dropped
    /// or the store closes.
    async fn follow_changes(&self) -> Result<Option<mpsc::Receiver<Change>>, StorageError> {
        Ok(None)
    }

    /// Takes the lease `name` for `holder`, or renews it, for `lease` from now on the
    /// database's clock; `true` while `holder` holds it (nobody else held it unexpired).
    /// The default: this backend has one process (SQLite), which always holds it.
    async fn hold_lease(
        &self,
        _name: &str,
        _holder: &str,
        _lease: std::time::Duration,
    ) -> Result<bool, StorageError> {
        Ok(true)
    }

    /// Gives the lease up (if `holder` holds it), so another takes it at once rather
    /// than when it expires.
    async fn release_lease(&self, _name: &str, _holder: &str) -> Result<(), StorageError> {
        Ok(())
    }

    /// Records that `holder` runs a configuration whose authorisation view is `view`
    /// (stored with its fingerprint), for `lease` from now on the database's clock, and
    /// forgets the replicas whose record expired. Renewed like a lease. The default:
    /// this backend has one process (SQLite), whose own configuration is the only one,
    /// so nothing is recorded.
    async fn hold_config(
        &self,
        _holder: &str,
        _view: &Authority,
        _lease: std::time::Duration,
    ) -> Result<(), StorageError> {
        Ok(())
    }

    /// The configurations of the replicas whose record has not expired, by holder.
    /// `None`: this backend has one process (SQLite), whose own configuration is the
    /// only one.
    async fn live_configs(&self) -> Result<Option<Vec<LiveConfig>>, StorageError> {
        Ok(None)
    }

    /// The view recorded under `fingerprint` (by any replica, live or not), if one is.
    /// A view that cannot be read (a newer version's, a damaged row) is
    /// [`StorageError::Corrupt`].
    async fn config_view(
        &self,
        _fingerprint: &Fingerprint,
    ) -> Result<Option<Authority>, StorageError> {
        Ok(None)
    }

    /// Forgets `holder`'s configuration at shutdown, so it stops counting at once
    /// rather than when its record expires.
    async fn release_config(&self, _holder: &str) -> Result<(), StorageError> {
        Ok(())
    }
}

/// Keeping the database itself: its schema, health, backups, the gauges the metrics read,
/// and closing it.
#[async_trait]
pub trait Administration: Send + Sync + 'static {
    /// Applies pending migrations.
    async fn migrate(&self) -> Result<(), StorageError>;

    /// Answers when the database does.
    async fn ping(&self) -> Result<(), StorageError>;

    /// Writes a consistent copy of the whole database to `file` (which must not exist)
    /// while the service keeps running. SQLite only: PostgreSQL answers
    /// [`StorageError::Unsupported`] (its backups are `pg_dump`'s).
    async fn backup_to(&self, file: &std::path::Path) -> Result<(), StorageError>;

    /// Pending requests and the webhook backlog, for the metrics.
    async fn gauges(&self) -> Result<Gauges, StorageError>;

    /// Closes the connections cleanly (SQLite checkpoints the WAL).
    async fn close(&self);
}
