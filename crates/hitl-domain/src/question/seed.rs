//! How a question begins: [`Question::pending`] from a [`Seed`] (what varies between
//! questions; every other field starts at its one default), and
//! [`Question::end_at_creation`] for a question settled before anyone is asked.

use std::sync::Arc;

use serde_json::Value;
use time::OffsetDateTime;

use super::{ANSWER_PENDING_REASON, PENDING_REASON, Question, Status, Via};
use crate::args_hash::ArgsHash;
use crate::ids::{CallbackToken, IdempotencyKey, OwnerId, QuestionId, ToolName};
use crate::interaction::Interaction;
use crate::mcp_call::{Annotations, ServerName};

/// What a new question is made of: what the agent asked, where it goes and until when.
/// The fields mean what [`Question`]'s fields of the same names mean.
#[derive(Debug, Clone)]
pub struct Seed {
    pub agent: String,
    pub route: String,
    pub chat_id: i64,
    pub tool: ToolName,
    pub owner_id: OwnerId,
    pub args_hash: ArgsHash,
    pub params_json: String,
    pub briefing: String,
    pub context: Option<String>,
    pub allow_edit: bool,
    pub window_seconds: u64,
    pub window_requested_seconds: Option<u64>,
    pub has_call: bool,
    pub idempotency_key: Option<IdempotencyKey>,
    pub callback_url: Option<String>,
    pub created_at: OffsetDateTime,
    pub expires_at: OffsetDateTime,
    pub interaction: Option<Arc<Interaction>>,
    pub expect_outcome_seconds: Option<u64>,
    pub args_schema: Option<String>,
    pub server: Option<ServerName>,
    pub annotations: Option<Annotations>,
}

/// How a question settled before anyone was asked ends: a window hit, a rule's `allow`
/// or `deny`, a grant.
#[derive(Debug, Clone, PartialEq)]
pub struct UnaskedEnd {
    pub status: Status,
    pub via: Via,
    pub reason: String,
    /// The value an interaction settles on (`None` for a confirmation).
    pub result: Option<Value>,
}

impl Question {
    /// A new question, pending: a fresh id and callback token, no message yet, nothing
    /// answered, decided, reported or recalled. Its reason says what it waits for (an
    /// operator's decision, or an interaction's answer).
    pub fn pending(seed: Seed) -> Question {
        let Seed {
            agent,
            route,
            chat_id,
            tool,
            owner_id,
            args_hash,
            params_json,
            briefing,
            context,
            allow_edit,
            window_seconds,
            window_requested_seconds,
            has_call,
            idempotency_key,
            callback_url,
            created_at,
            expires_at,
            interaction,
            expect_outcome_seconds,
            args_schema,
            server,
            annotations,
        } = seed;
        let reason = match interaction {
            Some(_) => ANSWER_PENDING_REASON,
            None => PENDING_REASON,
        };
        Question {
            id: QuestionId::generate(),
            agent,
            route,
            chat_id,
            tool,
            owner_id,
            args_hash,
            params_json,
            briefing,
            context,
            allow_edit,
            window_seconds,
            window_requested_seconds,
            approved_once: false,
            has_call,
            idempotency_key,
            callback_token: CallbackToken::generate(),
            callback_url,
            message_id: None,
            status: Status::Pending,
            via: None,
            reason: reason.to_owned(),
            decided_by: None,
            created_at,
            expires_at,
            decided_at: None,
            interaction,
            result: None,
            timeout_action: None,
            answers: Vec::new(),
            copies: Vec::new(),
            strays: Vec::new(),
            denial_reason: None,
            progress: Default::default(),
            rule: None,
            expect_outcome_seconds,
            run_report: None,
            recalled: None,
            args_schema,
            edited: None,
            server,
            annotations,
        }
    }

    /// Ends a question that nobody was asked, as `ending` says, decided `now`. Its
    /// callback token is replaced by one never shown: no button ever carried it.
    pub fn end_at_creation(&mut self, ending: UnaskedEnd, now: OffsetDateTime) {
        let UnaskedEnd {
            status,
            via,
            reason,
            result,
        } = ending;
        self.status = status;
        self.via = Some(via);
        self.callback_token = CallbackToken::never_shown();
        self.reason = reason;
        self.result = result;
        self.decided_at = Some(now);
    }
}
