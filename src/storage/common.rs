//! The role traits as both backends implement them, written once.
//!
//! Compiled once per backend, as `sql` is (see its header): each backend names itself
//! `This` and declares this file with `#[path = "common.rs"] mod common;`. A method here
//! is the same on both backends: a statement of `sql` on the backend's `pool`, or in the
//! audit transaction it opens (`audit_tx`, its audit lock held), around the few places
//! where the two differ, which each backend gives:
//! * its window cache ([`WindowCache`]: SQLite answers window lookups from memory,
//!   PostgreSQL keeps none);
//! * `write_tx` (a transaction that appends no audit event) and `snapshot_tx` (one
//!   read snapshot of the audit trail and the statuses);
//! * its group commit of window hits (`insert_window_hit`), how it writes a run report
//!   (`write_run_report`: SQLite's group commit takes them too), `purge_windows`,
//!   `backup_into` and `shut_down`.
//!
//! What only PostgreSQL does ([`Coordination`]) is its own; SQLite keeps the defaults.

use std::path::Path;
use std::sync::atomic::Ordering;

use async_trait::async_trait;
use time::OffsetDateTime;

use super::{MIGRATOR, This, sql};
use crate::domain::audit::{AuditEvent, Head, NewEvent, StoredRow, StoredStatus};
use crate::domain::away::Absence;
use crate::domain::grant::{Grant, Scope};
use crate::domain::ids::ToolName;
use crate::domain::ids::{CallbackToken, GrantId, IdempotencyKey, OwnerId, QuestionId};
use crate::domain::interaction::Answer;
use crate::domain::outage::Outage;
use crate::domain::question::{Decision, Operator, Question, Window, WindowKey};
use crate::domain::rules::suggest::Decided as PersonDecided;
use crate::domain::rules::{ChatRuleRecord, ChatRuleState};
use crate::domain::run_report::{NewRunReport, Recalled};
use crate::storage::pins::{ListedTool, Listing, ToolPin};
use crate::storage::{
    Administration, AgentEvent, AgentEvents, AlertEntry, Answered, Audit, AwayStore,
    ChatRulesStore, Decided, DeliveryAttempt, EndedCursor, Gauges, GrantInserted, Grants, Inserted,
    LiveWindow, Messages, NewAlert, Outages, Outbox, OutboxEntry, PendingEntry, Questions,
    RunReported, Runs, Shown, Steps, StorageError, ToolPins, WindowCache, WindowUse, Windows,
};

#[async_trait]
impl Questions for This {
    async fn insert(&self, r: &Question, now: OffsetDateTime) -> Result<Inserted, StorageError> {
        if r.is_terminal() {
            return self.insert_window_hit(r, now).await;
        }
        let (_writer, mut tx) = self.audit_tx().await?;
        // Boxed: requests arriving together wait for the audit lock by the thousand, and
        // each waiting future is as large as its largest state, which is the writing
        // that comes after the lock.
        let bound = self.outbox_backlog_bound();
        let inserted = Box::pin(sql::insert_in(&mut tx, r, now, bound)).await?;
        tx.commit().await?;
        Ok(inserted)
    }

    async fn get(&self, id: &QuestionId) -> Result<Option<Question>, StorageError> {
        sql::get(&self.pool, id).await
    }

    async fn find_by_token(&self, token: &CallbackToken) -> Result<Option<Question>, StorageError> {
        sql::find_by_token(&self.pool, token).await
    }

    async fn find_by_idempotency_key(
        &self,
        agent: &str,
        key: &IdempotencyKey,
        now: OffsetDateTime,
    ) -> Result<Option<Question>, StorageError> {
        sql::find_by_idempotency_key(&self.pool, agent, key, now).await
    }

    async fn find_interaction(
        &self,
        agent: &str,
        interaction_id: &str,
    ) -> Result<Option<Question>, StorageError> {
        sql::find_interaction(&self.pool, agent, interaction_id).await
    }

    async fn find_by_message(
        &self,
        chat_id: i64,
        message_id: i32,
    ) -> Result<Option<Question>, StorageError> {
        sql::find_by_message(&self.pool, chat_id, message_id).await
    }

    async fn pending_in_chat(&self, chat_id: i64) -> Result<Vec<Question>, StorageError> {
        sql::pending_in_chat(&self.pool, chat_id).await
    }

    async fn ended_since(
        &self,
        route: &str,
        since: OffsetDateTime,
        limit: u32,
    ) -> Result<Vec<crate::domain::stats::Ended>, StorageError> {
        sql::ended_since(&self.pool, route, since, limit).await
    }

    async fn pending_of(
        &self,
        agent: Option<&str>,
        limit: u32,
    ) -> Result<Vec<Question>, StorageError> {
        sql::pending_of(&self.pool, agent, limit).await
    }

    async fn ended_in_chats(
        &self,
        chats: &[i64],
        before: Option<&EndedCursor>,
        limit: u32,
    ) -> Result<Vec<Question>, StorageError> {
        sql::ended_in_chats(&self.pool, chats, before, limit).await
    }

    async fn count_pending(&self, agent: &str) -> Result<u64, StorageError> {
        sql::count_pending(&self.pool, agent).await
    }

    async fn count_allowed_by_rule(
        &self,
        rule: &str,
        since: OffsetDateTime,
    ) -> Result<u64, StorageError> {
        sql::count_allowed_by_rule(&self.pool, rule, since).await
    }

    async fn pending(&self) -> Result<Vec<PendingEntry>, StorageError> {
        sql::pending(&self.pool).await
    }

    async fn unshown_decisions(&self) -> Result<Vec<Question>, StorageError> {
        sql::unshown_decisions(&self.pool).await
    }

    async fn decide(&self, id: &QuestionId, d: &Decision) -> Result<Decided, StorageError> {
        let (_writer, mut tx) = self.audit_tx().await?;
        let decided = sql::apply_decision(&mut tx, id, d, self.outbox_backlog_bound()).await?;
        if let Decided::Applied(record) = &decided {
            tx.commit().await?;
            self.remember_window(record);
        }
        Ok(decided)
    }
}

#[async_trait]
impl Messages for This {
    async fn set_message_id(&self, id: &QuestionId, message_id: i32) -> Result<(), StorageError> {
        let (_writer, tx) = self.audit_tx().await?;
        sql::set_message_id(tx, id, message_id).await
    }

    async fn mark_shown(&self, id: &QuestionId, what: Shown) -> Result<(), StorageError> {
        sql::mark_shown(&self.pool, id, what).await
    }

    async fn add_copy(
        &self,
        id: &QuestionId,
        recipient: &str,
        chat_id: i64,
        now: OffsetDateTime,
    ) -> Result<bool, StorageError> {
        let (_writer, tx) = self.audit_tx().await?;
        sql::add_copy(tx, id, recipient, chat_id, now).await
    }

    async fn set_copy_message_id(
        &self,
        id: &QuestionId,
        chat_id: i64,
        message_id: i32,
        now: OffsetDateTime,
    ) -> Result<(), StorageError> {
        let (_writer, tx) = self.audit_tx().await?;
        sql::set_copy_message_id(tx, id, chat_id, message_id, now).await
    }

    async fn add_stray(
        &self,
        id: &QuestionId,
        chat_id: i64,
        message_id: i32,
        now: OffsetDateTime,
    ) -> Result<Option<Question>, StorageError> {
        let (writer, tx) = self.audit_tx().await?;
        sql::add_stray(tx, id, chat_id, message_id, now).await?;
        drop(writer);
        self.get(id).await
    }

    async fn route_chats(&self) -> Result<Vec<(String, i64)>, StorageError> {
        sql::route_chats(&self.pool).await
    }

    async fn move_route_chat(
        &self,
        route: &str,
        from_chat: i64,
        to_chat: i64,
        now: OffsetDateTime,
    ) -> Result<(), StorageError> {
        let (_writer, tx) = self.audit_tx().await?;
        sql::move_route_chat(tx, route, from_chat, to_chat, now).await
    }
}

#[async_trait]
impl Steps for This {
    async fn add_answer(
        &self,
        id: &QuestionId,
        answer: &Answer,
        settles: Option<&Decision>,
        also: Option<&NewEvent>,
    ) -> Result<Answered, StorageError> {
        let (_writer, tx) = self.audit_tx().await?;
        let bound = self.outbox_backlog_bound();
        let answered = sql::add_answer(tx, id, answer, settles, also, bound).await?;
        if let (Some(_), Answered::Added(record)) = (settles, &answered) {
            self.remember_window(record);
        }
        Ok(answered)
    }

    async fn selection(&self, id: &QuestionId, user_id: u64) -> Result<Vec<String>, StorageError> {
        sql::selection(&self.pool, id, user_id).await
    }

    async fn set_selection(
        &self,
        id: &QuestionId,
        user_id: u64,
        keys: &[String],
    ) -> Result<(), StorageError> {
        sql::set_selection(&self.pool, id, user_id, keys).await
    }

    async fn request_reason(
        &self,
        id: &QuestionId,
        by: &Operator,
        chat_id: i64,
        now: OffsetDateTime,
    ) -> Result<Option<Question>, StorageError> {
        let (_writer, tx) = self.audit_tx().await?;
        sql::request_reason(tx, id, by, chat_id, now).await
    }

    async fn set_reason_prompt(
        &self,
        id: &QuestionId,
        user_id: u64,
        prompt_message_id: i32,
    ) -> Result<(), StorageError> {
        sql::set_reason_prompt(&self.pool, id, user_id, prompt_message_id).await
    }

    async fn reason_request_for(
        &self,
        chat_id: i64,
        reply_to: i32,
        named: Option<&QuestionId>,
        user_id: u64,
    ) -> Result<Option<Question>, StorageError> {
        match sql::reason_request_for(&self.pool, chat_id, reply_to, named, user_id).await? {
            Some(id) => self.get(&id).await,
            None => Ok(None),
        }
    }

    async fn extend(
        &self,
        id: &QuestionId,
        from: OffsetDateTime,
        to: OffsetDateTime,
        by: &Operator,
        now: OffsetDateTime,
    ) -> Result<Option<Question>, StorageError> {
        let (_writer, tx) = self.audit_tx().await?;
        sql::extend(tx, id, from, to, by, now).await
    }

    async fn claim_reminders(
        &self,
        id: &QuestionId,
        sent: u32,
        passed: u32,
        now: OffsetDateTime,
    ) -> Result<Option<Question>, StorageError> {
        let (_writer, tx) = self.audit_tx().await?;
        sql::claim_reminders(tx, id, sent, passed, now).await
    }

    async fn claim_sla_mark(
        &self,
        id: &QuestionId,
        shown: u32,
        mark: crate::domain::sla::SlaMark,
        now: OffsetDateTime,
    ) -> Result<Option<Question>, StorageError> {
        let (_writer, tx) = self.audit_tx().await?;
        sql::claim_sla_mark(tx, id, shown, mark, now).await
    }

    async fn delegate_question(
        &self,
        id: &QuestionId,
        recipient: &str,
        chat_id: i64,
        now: OffsetDateTime,
    ) -> Result<Option<Question>, StorageError> {
        let (_writer, tx) = self.audit_tx().await?;
        sql::delegate_question(tx, id, recipient, chat_id, now).await
    }

    async fn escalate(
        &self,
        id: &QuestionId,
        recipient: &str,
        chat_id: i64,
        now: OffsetDateTime,
    ) -> Result<Option<Question>, StorageError> {
        let (_writer, tx) = self.audit_tx().await?;
        sql::escalate(tx, id, recipient, chat_id, now).await
    }
}

#[async_trait]
impl Windows for This {
    async fn live_window(
        &self,
        key: &WindowKey,
        now: OffsetDateTime,
    ) -> Result<Option<Window>, StorageError> {
        match self.cached_window(key, now) {
            Some(window) => Ok(window),
            None => sql::live_window(&self.pool, key, now).await,
        }
    }

    async fn live_windows(
        &self,
        route: &str,
        now: OffsetDateTime,
    ) -> Result<Vec<LiveWindow>, StorageError> {
        sql::live_windows(&self.pool, route, now).await
    }

    async fn live_windows_of(
        &self,
        agent: Option<&str>,
        now: OffsetDateTime,
    ) -> Result<Vec<LiveWindow>, StorageError> {
        sql::live_windows_of(&self.pool, agent, now).await
    }

    async fn live_window_opened_by(
        &self,
        opened_by: &QuestionId,
        now: OffsetDateTime,
    ) -> Result<Option<LiveWindow>, StorageError> {
        sql::live_window_opened_by(&self.pool, opened_by, now).await
    }

    async fn revoke_window(
        &self,
        opened_by: &QuestionId,
        by: &Operator,
        chat_id: i64,
        now: OffsetDateTime,
    ) -> Result<Option<LiveWindow>, StorageError> {
        let (_writer, tx) = self.audit_tx().await?;
        let revoked = sql::revoke_window(tx, opened_by, by, chat_id, now).await?;
        // The cache follows the commit, the audit lock still held (so no decision's
        // window slips in between): window hits stop at once.
        if let Some(live) = &revoked {
            self.forget_window(live);
        }
        Ok(revoked)
    }

    async fn purge_expired_windows(&self, now: OffsetDateTime) -> Result<u64, StorageError> {
        self.purge_windows(now).await
    }
}

#[async_trait]
impl Runs for This {
    async fn report_run(
        &self,
        id: &QuestionId,
        agent: &str,
        report: &NewRunReport,
        now: OffsetDateTime,
    ) -> Result<RunReported, StorageError> {
        self.write_run_report(id, agent, report, now).await
    }

    async fn overdue_runs(
        &self,
        now: OffsetDateTime,
        limit: u32,
    ) -> Result<Vec<Question>, StorageError> {
        let (_writer, tx) = self.audit_tx().await?;
        sql::overdue_runs(tx, now, limit, self.outbox_backlog_bound()).await
    }

    async fn mark_run_shown(
        &self,
        id: &QuestionId,
        reported_at: OffsetDateTime,
    ) -> Result<(), StorageError> {
        sql::mark_run_shown(&self.pool, id, reported_at).await
    }

    async fn unshown_runs(&self) -> Result<Vec<Question>, StorageError> {
        sql::unshown_runs(&self.pool).await
    }

    async fn recall_run(
        &self,
        agent: &str,
        tool: &ToolName,
        since: OffsetDateTime,
    ) -> Result<Option<Recalled>, StorageError> {
        sql::recall_run(&self.pool, agent, tool, since).await
    }

    async fn window_use(&self, opened_by: &QuestionId) -> Result<WindowUse, StorageError> {
        sql::window_use(&self.pool, opened_by).await
    }
}

#[async_trait]
impl Grants for This {
    async fn insert_grant(&self, grant: &Grant) -> Result<GrantInserted, StorageError> {
        // Under the audit lock: a new grant is audited (`grant_created`) in the same
        // transaction.
        let (_writer, mut tx) = self.audit_tx().await?;
        let inserted = sql::insert_grant(&mut tx, grant).await?;
        tx.commit().await?;
        Ok(inserted)
    }

    async fn grant(&self, id: &GrantId) -> Result<Option<Grant>, StorageError> {
        sql::grant(&self.pool, id).await
    }

    async fn live_grant_covering(
        &self,
        agent: &str,
        owner_id: &OwnerId,
        scope: &Scope,
        now: OffsetDateTime,
    ) -> Result<Option<Grant>, StorageError> {
        sql::live_grant_covering(&self.pool, agent, owner_id, scope, now).await
    }

    async fn live_grants(
        &self,
        agent: Option<&str>,
        route: Option<&str>,
        now: OffsetDateTime,
    ) -> Result<Vec<Grant>, StorageError> {
        sql::live_grants(&self.pool, agent, route, now).await
    }

    async fn revoke_grant(
        &self,
        id: &GrantId,
        agent: Option<&str>,
        by: Option<&Operator>,
        now: OffsetDateTime,
    ) -> Result<Option<Grant>, StorageError> {
        let (_writer, mut tx) = self.audit_tx().await?;
        let revoked = sql::revoke_grant(&mut tx, id, agent, by, now).await?;
        tx.commit().await?;
        Ok(revoked)
    }
}

#[async_trait]
impl ToolPins for This {
    async fn record_listing(
        &self,
        listing: &Listing<'_>,
        now: OffsetDateTime,
    ) -> Result<Vec<ListedTool>, StorageError> {
        // Under the audit lock: what is held or pinned is audited in the same
        // transaction, and two listings of one server are recorded one after the other.
        let (_writer, mut tx) = self.audit_tx().await?;
        let listed = sql::record_listing(&mut tx, listing, now).await?;
        tx.commit().await?;
        Ok(listed)
    }

    async fn set_pin_message(
        &self,
        token: &CallbackToken,
        chat_id: i64,
        message_id: i32,
    ) -> Result<(), StorageError> {
        sql::set_pin_message(&self.pool, token, chat_id, message_id).await
    }

    async fn pending_pins(&self, token: &CallbackToken) -> Result<Vec<ToolPin>, StorageError> {
        sql::pending_pins(&self.pool, token).await
    }

    async fn allow_pins(
        &self,
        token: &CallbackToken,
        by: &Operator,
        now: OffsetDateTime,
    ) -> Result<Vec<ToolPin>, StorageError> {
        let (_writer, mut tx) = self.audit_tx().await?;
        let allowed = sql::allow_pins(&mut tx, token, by, now).await?;
        if allowed.is_empty() {
            return Ok(allowed);
        }
        tx.commit().await?;
        Ok(allowed)
    }

    async fn tool_pins(&self, agent: &str, server: &str) -> Result<Vec<ToolPin>, StorageError> {
        sql::tool_pins(&self.pool, agent, server).await
    }
}

#[async_trait]
impl AwayStore for This {
    async fn set_away(
        &self,
        absence: &Absence,
        by: &Operator,
        now: OffsetDateTime,
    ) -> Result<(), StorageError> {
        let (_writer, mut tx) = self.audit_tx().await?;
        sql::set_away(&mut tx, absence, by, now).await?;
        tx.commit().await?;
        Ok(())
    }

    async fn end_away(
        &self,
        person: u64,
        by: &Operator,
        now: OffsetDateTime,
    ) -> Result<bool, StorageError> {
        let (_writer, mut tx) = self.audit_tx().await?;
        let ended = sql::end_away(&mut tx, person, by, now).await?;
        if ended {
            tx.commit().await?;
        }
        Ok(ended)
    }

    async fn absences(&self, now: OffsetDateTime) -> Result<Vec<Absence>, StorageError> {
        sql::absences(&self.pool, now).await
    }
}

#[async_trait]
impl Outages for This {
    async fn open_outage(&self) -> Result<Option<Outage>, StorageError> {
        sql::open_outage(&self.pool).await
    }

    async fn begin_outage(
        &self,
        outage: &Outage,
        event: &NewEvent,
        alert: Option<&NewAlert>,
        now: OffsetDateTime,
    ) -> Result<bool, StorageError> {
        let (_writer, mut tx) = self.audit_tx().await?;
        let began = sql::begin_outage(&mut tx, outage, event, alert, now).await?;
        if began {
            tx.commit().await?;
        }
        Ok(began)
    }

    async fn end_outage(
        &self,
        outage: &Outage,
        event: &NewEvent,
        alert: Option<&NewAlert>,
        now: OffsetDateTime,
    ) -> Result<bool, StorageError> {
        let (_writer, mut tx) = self.audit_tx().await?;
        let ended = sql::end_outage(&mut tx, outage, event, alert, now).await?;
        if ended {
            tx.commit().await?;
        }
        Ok(ended)
    }

    async fn due_alerts(
        &self,
        now: OffsetDateTime,
        limit: u32,
    ) -> Result<Vec<AlertEntry>, StorageError> {
        sql::due_alerts(&self.pool, now, limit).await
    }

    async fn next_alert_due_after(
        &self,
        after: OffsetDateTime,
    ) -> Result<Option<OffsetDateTime>, StorageError> {
        sql::next_alert_due_after(&self.pool, after).await
    }

    async fn alert_attempted(
        &self,
        entry: &AlertEntry,
        result: DeliveryAttempt,
        now: OffsetDateTime,
    ) -> Result<(), StorageError> {
        let event = sql::alert_event(entry, &result, now);
        let id = entry.delivery_id.as_str();
        self.attempted(sql::Deliveries::Alerts, id, &result, event, now)
            .await
    }
}

#[async_trait]
impl ChatRulesStore for This {
    async fn propose_chat_rules(
        &self,
        proposals: &[ChatRuleRecord],
        now: OffsetDateTime,
    ) -> Result<Vec<ChatRuleRecord>, StorageError> {
        sql::propose_chat_rules(&self.pool, proposals, now).await
    }

    async fn chat_rule(&self, id: &str) -> Result<Option<ChatRuleRecord>, StorageError> {
        sql::chat_rule(&self.pool, id).await
    }

    async fn chat_rules(&self) -> Result<Vec<ChatRuleRecord>, StorageError> {
        sql::chat_rules(&self.pool).await
    }

    async fn move_chat_rule(
        &self,
        id: &str,
        from: &[ChatRuleState],
        to: ChatRuleState,
        by: &Operator,
        now: OffsetDateTime,
    ) -> Result<Option<(ChatRuleState, ChatRuleRecord)>, StorageError> {
        let (_writer, mut tx) = self.audit_tx().await?;
        let moved = sql::move_chat_rule(&mut tx, id, from, to, by, now).await?;
        if moved.is_some() {
            tx.commit().await?;
        }
        Ok(moved)
    }

    async fn last_proposed_at(&self, route: &str) -> Result<Option<OffsetDateTime>, StorageError> {
        sql::last_proposed_at(&self.pool, route).await
    }

    async fn decided_by_people(
        &self,
        route: &str,
        since: OffsetDateTime,
        limit: u32,
    ) -> Result<Vec<PersonDecided>, StorageError> {
        sql::decided_by_people(&self.pool, route, since, limit).await
    }
}

#[async_trait]
impl Outbox for This {
    fn set_outbox_backlog_bound(&self, bound: u32) {
        self.outbox_backlog_bound
            .store(bound.max(1), Ordering::Relaxed);
    }

    async fn due_deliveries(
        &self,
        now: OffsetDateTime,
        limit: u32,
    ) -> Result<Vec<OutboxEntry>, StorageError> {
        sql::due_deliveries(&self.pool, now, limit).await
    }

    async fn due_deliveries_by_agent(
        &self,
        now: OffsetDateTime,
        per_agent: u32,
    ) -> Result<Vec<OutboxEntry>, StorageError> {
        sql::due_deliveries_by_agent(&self.pool, now, per_agent).await
    }

    async fn next_delivery_due(&self) -> Result<Option<OffsetDateTime>, StorageError> {
        sql::next_delivery_due(&self.pool).await
    }

    async fn next_delivery_due_after(
        &self,
        after: OffsetDateTime,
    ) -> Result<Option<OffsetDateTime>, StorageError> {
        sql::next_delivery_due_after(&self.pool, after).await
    }

    async fn delivery_attempted(
        &self,
        entry: &OutboxEntry,
        result: DeliveryAttempt,
        now: OffsetDateTime,
    ) -> Result<(), StorageError> {
        let event = sql::attempt_event(entry, &result, now);
        let id = entry.delivery_id.as_str();
        self.attempted(sql::Deliveries::Webhooks, id, &result, event, now)
            .await
    }
}

impl This {
    /// Records an attempt of a delivery of `table` (a webhook or an outage alert), with
    /// `event` when it is final. Only a final attempt appends to the audit chain, and so
    /// needs the lock.
    async fn attempted(
        &self,
        table: sql::Deliveries,
        delivery_id: &str,
        result: &DeliveryAttempt,
        event: Option<NewEvent>,
        now: OffsetDateTime,
    ) -> Result<(), StorageError> {
        let (_writer, tx) = match event {
            Some(_) => {
                let (writer, tx) = self.audit_tx().await?;
                (Some(writer), tx)
            }
            None => (None, self.write_tx().await?),
        };
        sql::delivery_attempted(tx, table, delivery_id, result, event.as_ref(), now).await
    }
}

#[async_trait]
impl Audit for This {
    async fn record_event(&self, event: NewEvent) -> Result<(), StorageError> {
        let (_writer, mut tx) = self.audit_tx().await?;
        sql::append_event(&mut tx, &event).await?;
        tx.commit().await?;
        Ok(())
    }

    async fn events_for(&self, id: &QuestionId) -> Result<Vec<AuditEvent>, StorageError> {
        sql::events_for(&self.pool, id).await
    }

    async fn audit_rows(
        &self,
        since: Option<OffsetDateTime>,
    ) -> Result<Vec<StoredRow>, StorageError> {
        sql::audit_rows(&self.pool, since).await
    }

    async fn audit_snapshot(&self) -> Result<(Vec<StoredRow>, Vec<StoredStatus>), StorageError> {
        // One snapshot for both reads: a decision committed between them is in both or
        // in neither.
        let mut tx = self.snapshot_tx().await?;
        let snapshot = sql::audit_snapshot_in(&mut tx).await?;
        tx.rollback().await?;
        Ok(snapshot)
    }

    async fn audit_head(&self) -> Result<Head, StorageError> {
        sql::audit_head(&self.pool).await
    }
}

#[async_trait]
impl AgentEvents for This {
    async fn agent_events(
        &self,
        agent: &str,
        after: i64,
        limit: u32,
    ) -> Result<Vec<AgentEvent>, StorageError> {
        sql::agent_events(&self.pool, agent, after, limit).await
    }

    async fn purge_agent_events(&self, before: OffsetDateTime) -> Result<u64, StorageError> {
        sql::purge_agent_events(&self.pool, before).await
    }

    async fn last_agent_event(&self, agent: &str) -> Result<i64, StorageError> {
        sql::last_agent_event(&self.pool, agent).await
    }
}

#[async_trait]
impl Administration for This {
    async fn migrate(&self) -> Result<(), StorageError> {
        // PostgreSQL's migrator holds an advisory lock of its own while it runs, so
        // replicas starting together migrate once.
        MIGRATOR.run(&self.pool).await?;
        self.load_windows().await
    }

    async fn ping(&self) -> Result<(), StorageError> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }

    async fn backup_to(&self, file: &Path) -> Result<(), StorageError> {
        self.backup_into(file).await
    }

    async fn gauges(&self) -> Result<Gauges, StorageError> {
        sql::gauges(&self.pool).await
    }

    async fn close(&self) {
        self.shut_down().await;
    }
}
