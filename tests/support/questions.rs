//! Questions for tests that hand them to a store directly, made as the service makes
//! them (`Question::pending`, `Question::end_at_creation`): a test names only the
//! fields it is about.

#![allow(dead_code)] // each test executable uses a subset

use std::time::Duration;

use hitl_telegram::domain::args_hash::ArgsHash;
use hitl_telegram::domain::ids::{IdempotencyKey, OwnerId, ToolName};
use hitl_telegram::domain::python;
use hitl_telegram::domain::question::{Question, Seed, Status, UnaskedEnd, Via};
use hitl_telegram::service::now;

/// The parameters of every built question's call.
const PARAMS: &str = r#"{"a": 1}"#;

/// A question being built: see [`question`].
pub struct QuestionBuilder {
    seed: Seed,
}

/// A confirmation of agent `agent` on route `ops` (chat -1): `tool` with `{"a": 1}`, a
/// context, edits allowed, a 60 s window, asked now for 60 s.
pub fn question() -> QuestionBuilder {
    let params = python::json::parse_object(PARAMS).unwrap();
    let t = now();
    QuestionBuilder {
        seed: Seed {
            agent: "agent".into(),
            route: "ops".into(),
            chat_id: -1,
            tool: ToolName::parse("tool").unwrap(),
            owner_id: OwnerId::anonymous(),
            args_hash: ArgsHash::of(&params),
            params_json: PARAMS.into(),
            briefing: "tool with: a=1".into(),
            context: Some("ctx".into()),
            allow_edit: true,
            window_seconds: 60,
            window_requested_seconds: None,
            has_call: false,
            idempotency_key: None,
            callback_url: None,
            created_at: t,
            expires_at: t + Duration::from_secs(60),
            interaction: None,
            expect_outcome_seconds: None,
            args_schema: None,
            server: None,
            annotations: None,
        },
    }
}

impl QuestionBuilder {
    pub fn idempotency_key(mut self, key: Option<&str>) -> Self {
        self.seed.idempotency_key = key.map(|k| IdempotencyKey::parse(k).unwrap());
        self
    }

    pub fn window_seconds(mut self, seconds: u64) -> Self {
        self.seed.window_seconds = seconds;
        self
    }

    /// The window the agent asked for when the route's cap cut it.
    pub fn window_requested_seconds(mut self, seconds: Option<u64>) -> Self {
        self.seed.window_requested_seconds = seconds;
        self
    }

    pub fn callback_url(mut self, url: &str) -> Self {
        self.seed.callback_url = Some(url.into());
        self
    }

    pub fn briefing(mut self, briefing: String) -> Self {
        self.seed.briefing = briefing;
        self
    }

    pub fn context(mut self, context: Option<String>) -> Self {
        self.seed.context = context;
        self
    }

    /// The question, pending.
    pub fn pending(self) -> Question {
        Question::pending(self.seed)
    }

    /// The question as a live window confirmed it when it was stored, now; `reason`: the
    /// record's.
    pub fn window_hit(self, reason: String) -> Question {
        let mut q = self.pending();
        let ending = UnaskedEnd {
            status: Status::Confirmed,
            via: Via::Window,
            reason,
            result: None,
        };
        q.end_at_creation(ending, now());
        q
    }
}
