//! How a blocking tool waits: long-polls that report progress so the client does not
//! time the call out, and the question withdrawn when the call is cancelled.

use std::time::{Duration, Instant};

use axum::http::{Method, StatusCode};
use rmcp::RoleServer;
use rmcp::model::{CallToolResult, ProgressNotificationParam};
use rmcp::service::RequestContext;
use serde_json::Value;

use crate::client::{Kind, OUTAGE_PATIENCE, OUTAGE_RETRY, Outage, is_terminal, seconds_left};

use super::answer::{answer_text, decision_text, failure, text_result};
use super::v1::Answer;
use super::{HitlMcp, POLL};

/// What a blocking tool asked, by the id its API path takes.
pub(super) enum Asked {
    /// A confirmation, by its record id (`cf_...`).
    Confirmation(String),
    /// An interaction, by its own `interaction_id`.
    Interaction(String),
}

impl Asked {
    /// Its API path, the id percent-encoded: an `interaction_id` may hold `/`, `?`, `#`
    /// or `%`.
    pub(super) fn path(&self) -> String {
        match self {
            Asked::Confirmation(id) => Kind::Confirmation.path(id),
            Asked::Interaction(id) => Kind::Interaction.path(id),
        }
    }

    pub(super) fn id(&self) -> &str {
        match self {
            Asked::Confirmation(id) | Asked::Interaction(id) => id,
        }
    }

    /// The record as the model reads it.
    pub(super) fn text(&self, record: &Value) -> String {
        match self {
            Asked::Confirmation(_) => decision_text(record),
            Asked::Interaction(_) => answer_text(record),
        }
    }

    /// Where a 409 of a withdrawal holds the record as it ended.
    fn conflict_key(&self) -> &'static str {
        match self {
            Asked::Confirmation(_) => "confirmation",
            Asked::Interaction(_) => "interaction",
        }
    }
}

/// Whether a tool's `wait` asks it to block (the default) or to return at once
/// (`suspend`); anything else is refused, as the API refuses it.
pub(super) fn blocks(wait: Option<&str>, what: &str) -> Result<bool, CallToolResult> {
    match wait {
        None | Some("block") => Ok(true),
        Some("suspend") => Ok(false),
        Some(other) => Err(text_result(
            format!(
                "NOT APPROVED: wait must be \"block\" or \"suspend\", not {other:?}. \
                 Do not run {what}."
            ),
            None,
            true,
        )),
    }
}

impl HitlMcp {
    /// Waits for what a blocking tool asked (see [`Self::wait_for`]) and says how it
    /// ended; when the wait fails, withdraws it first (see [`Self::withdraw`]).
    pub(super) async fn wait_or_withdraw(
        &self,
        ctx: &RequestContext<RoleServer>,
        bearer: Option<&str>,
        asked: &Asked,
        record: Value,
        what: &str,
    ) -> CallToolResult {
        match self.wait_for(ctx, bearer, asked, record).await {
            Ok(record) => text_result(asked.text(&record), Some(&record), false),
            Err(why) => self.withdraw(bearer, asked, what, &why).await,
        }
    }

    /// Long-polls what was asked until its record is terminal, sending a progress
    /// notification after every poll (so clients that reset their timeout on progress
    /// keep waiting). Gives up at the request's deadline plus a margin, or when the client
    /// cancels, and then returns the record as it is (still pending, which the model is
    /// told: get_decision resumes it). `Err` says why a poll failed.
    pub(super) async fn wait_for(
        &self,
        ctx: &RequestContext<RoleServer>,
        bearer: Option<&str>,
        asked: &Asked,
        mut record: Value,
    ) -> Result<Value, String> {
        let token = ctx.meta.get_progress_token();
        let started = Instant::now();
        let total = seconds_left(&record);
        let give_up = total.map(|t| Duration::from_secs_f64(t) + Duration::from_secs(30));
        let poll = format!("{}?wait={}", asked.path(), POLL.as_secs());
        let mut outage = Outage::new(OUTAGE_PATIENCE);
        loop {
            if is_terminal(&record) {
                return Ok(record);
            }
            if ctx.ct.is_cancelled() || give_up.is_some_and(|g| started.elapsed() > g) {
                return Ok(record);
            }
            if let Some(token) = &token {
                let waited = started.elapsed().as_secs_f64();
                let mut progress = ProgressNotificationParam::new(token.clone(), waited)
                    .with_message(format!(
                        "waiting for a human on Telegram ({waited:.0} s so far)"
                    ));
                if let Some(total) = total {
                    progress = progress.with_total(total);
                }
                // A client that went away is noticed by the cancellation token.
                let _ = ctx.peer.notify_progress(progress).await;
            }
            let answer = tokio::select! {
                answer = self.api.call(bearer, Method::GET, &poll, None) => answer,
                () = ctx.ct.cancelled() => return Ok(record),
            };
            match answer {
                Answer::Ok(s, r) if s.is_success() => {
                    outage.over();
                    record = r;
                }
                // A replica restarting (503) or out of reach: the question is kept in
                // the database, so the wait rides out a short outage (a rolling
                // restart behind a load balancer) before it gives up and withdraws.
                Answer::Ok(StatusCode::SERVICE_UNAVAILABLE, _) | Answer::Unreachable(_)
                    if outage.bearable() =>
                {
                    tokio::select! {
                        () = tokio::time::sleep(OUTAGE_RETRY) => {}
                        () = ctx.ct.cancelled() => return Ok(record),
                    }
                }
                failed => return Err(failure(failed)),
            }
        }
    }

    /// The wait failed (`why`): the question is withdrawn before the model is told NOT
    /// APPROVED, so it cannot be approved while nobody waits for it. A decision that
    /// came first (the withdrawal's 409) is the answer instead; a withdrawal that fails
    /// too is said as it is, with the id to read the outcome by.
    async fn withdraw(
        &self,
        bearer: Option<&str>,
        asked: &Asked,
        what: &str,
        why: &str,
    ) -> CallToolResult {
        let id = asked.id();
        match self
            .api
            .call(bearer, Method::DELETE, &asked.path(), None)
            .await
        {
            Answer::Ok(s, record) if s.is_success() => text_result(
                format!(
                    "NOT APPROVED: waiting for the decision failed ({why}), so the question was \
                     withdrawn from Telegram and nobody can answer it now. Do not run {what}. \
                     Question {id}."
                ),
                Some(&record),
                true,
            ),
            Answer::Ok(StatusCode::CONFLICT, body) if is_terminal(&body[asked.conflict_key()]) => {
                let record = &body[asked.conflict_key()];
                text_result(asked.text(record), Some(record), false)
            }
            failed => text_result(
                format!(
                    "NOT APPROVED: waiting for the decision failed ({why}), and the question \
                     could not be withdrawn ({}): it may still be answered on Telegram until \
                     it expires. Do not run {what} on this result; call get_decision with id \
                     \"{id}\" to learn how it ended.",
                    failure(failed)
                ),
                None,
                true,
            ),
        }
    }
}
