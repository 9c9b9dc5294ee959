//! `request_grant` and `check_grant`: AI-Parrot's grants (FEAT-211) as tools. A grant
//! lets every call in a scope (`tool:deploy`, or `tool:*`) through for an owner, for a
//! while, without asking; the model reads "GRANTED" only when one exists.
//!
//! `request_grant` asks as `request_approval` does: the question is posted with
//! `wait: "suspend"`, the tool long-polls it with progress, and withdraws it when the wait
//! fails. A yes stores the grant, from the tap, on the terms the person was shown; the
//! tool then presents the answered question (`POST /v1/grants` with its
//! `interaction_id`) to get that grant, with the terms it asked for, so a grant other
//! than the one approved is never reported GRANTED.

use axum::http::{Method, StatusCode};
use rmcp::RoleServer;
use rmcp::model::CallToolResult;
use rmcp::service::RequestContext;
use serde_json::{Value, json};

use crate::client::is_terminal;
use crate::domain::ids::path_segment;
use crate::domain::text;

use super::HitlMcp;
use super::answer::{failure, text_result};
use super::args::{CheckGrant, RequestGrant};
use super::v1::{Answer, bearer_of};
use super::wait::Asked;

/// How the withdrawal of a grant question went.
enum Withdrawn {
    Yes,
    /// It had ended first: a yes is still presented, as `request_approval` reports a
    /// decision that came first.
    EndedFirst(Value),
    Failed(String),
}

/// What a scope lets through, in the words the model reads.
fn calls_in(scope: &str, owner: &str) -> String {
    format!("calls in scope {scope} for owner {owner}")
}

/// No grant: the model is told not to take one for granted, and why.
fn not_granted(why: &str, scope: &str, owner: &str) -> CallToolResult {
    text_result(
        format!(
            "NOT GRANTED: {why}. No grant covers {}: do not run them without asking (\
             request_approval for each call, or request_grant again later).",
            calls_in(scope, owner)
        ),
        None,
        true,
    )
}

/// A stored grant, as the model reads it.
fn granted_text(grant: &Value) -> String {
    let who = &grant["granted_by"];
    let by = match who["username"].as_str() {
        Some(u) => format!("{} (@{u})", who["name"].as_str().unwrap_or("?")),
        None => who["name"].as_str().unwrap_or("a person").to_owned(),
    };
    format!(
        "GRANTED by {by}: you may run {} without asking until {} (grant {}). It can be \
         revoked sooner: call check_grant before each call if in doubt.",
        calls_in(
            grant["scope"].as_str().unwrap_or("?"),
            grant["owner_id"].as_str().unwrap_or("?")
        ),
        grant["expires_at"].as_str().unwrap_or("?"),
        grant["grant_id"].as_str().unwrap_or("?"),
    )
}

impl HitlMcp {
    /// `request_grant`: see the module's header.
    pub(super) async fn grant(
        &self,
        args: RequestGrant,
        ctx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        let bearer = bearer_of(&ctx);
        let (scope, owner) = (args.scope.clone(), args.owner_id.clone());
        let mut body = json!({"owner_id": args.owner_id, "scope": args.scope});
        for (name, value) in [
            ("window_seconds", args.window_seconds.map(Value::from)),
            ("route", args.route.map(Value::from)),
            ("reason", args.reason.map(Value::from)),
        ] {
            if let Some(value) = value {
                body[name] = value;
            }
        }
        if let Some(id) = args.interaction_id {
            return self.present(bearer.as_deref(), body, &id).await;
        }
        let block = match args.wait.as_deref() {
            None | Some("block") => true,
            Some("suspend") => false,
            Some(other) => {
                let why = format!(
                    "wait must be \"block\" or \"suspend\", not {other:?}, so nothing was asked"
                );
                return not_granted(&why, &scope, &owner);
            }
        };
        let mut ask = body.clone();
        ask["wait"] = json!("suspend");
        if let Some(t) = args.timeout_seconds {
            ask["timeout_seconds"] = json!(t);
        }
        let asked = match self
            .api
            .call(bearer.as_deref(), Method::POST, "/v1/grants", Some(&ask))
            .await
        {
            Answer::Ok(s, answer) if s.is_success() => answer,
            failed => {
                let why = format!("no human could be asked ({})", failure(failed));
                return not_granted(&why, &scope, &owner);
            }
        };
        let id = asked["interaction_id"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let question = asked["question"].clone();
        if !block {
            return not_yet(&id, &question);
        }
        let waiting = Asked::Interaction(id.clone());
        let ended = match self
            .wait_for(&ctx, bearer.as_deref(), &waiting, question)
            .await
        {
            Ok(record) => record,
            Err(why) => match self.withdraw_grant(bearer.as_deref(), &waiting).await {
                Withdrawn::EndedFirst(record) => record,
                Withdrawn::Yes => {
                    let why = format!(
                        "waiting for the answer failed ({why}), so the question {id} was \
                         withdrawn from Telegram and nobody can answer it now"
                    );
                    return not_granted(&why, &scope, &owner);
                }
                Withdrawn::Failed(failed) => {
                    let why = format!(
                        "waiting for the answer failed ({why}), and the question {id} could \
                         not be withdrawn ({failed}): call get_decision with its id to learn \
                         how it ended"
                    );
                    return not_granted(&why, &scope, &owner);
                }
            },
        };
        if !is_terminal(&ended) {
            return not_yet(&id, &ended);
        }
        if ended["result"] != Value::Bool(true) {
            let why = match (ended["status"].as_str(), ended["denial_reason"].as_str()) {
                (Some("timeout"), _) => "nobody answered in time".to_owned(),
                (_, Some(words)) => format!("the operator refused; {}", text::their_words(words)),
                (Some("completed"), None) => "the operator refused".to_owned(),
                (status, None) => format!(
                    "the question ended without a yes ({}: {})",
                    status.unwrap_or("?"),
                    ended["reason"].as_str().unwrap_or("")
                ),
            };
            return not_granted(&format!("{why} (question {id})"), &scope, &owner);
        }
        self.present(bearer.as_deref(), body, &id).await
    }

    /// Presents a grant question answered yes: the service answers the grant its yes
    /// stored.
    async fn present(&self, bearer: Option<&str>, mut body: Value, id: &str) -> CallToolResult {
        let scope = body["scope"].as_str().unwrap_or("?").to_owned();
        let owner = body["owner_id"].as_str().unwrap_or("?").to_owned();
        body["interaction_id"] = json!(id);
        match self
            .api
            .call(bearer, Method::POST, "/v1/grants", Some(&body))
            .await
        {
            Answer::Ok(StatusCode::CREATED, answer) if answer["status"] == "granted" => {
                let grant = &answer["grant"];
                text_result(granted_text(grant), Some(grant), false)
            }
            failed => {
                let why = format!(
                    "the approval of question {id} could not be turned into a grant ({})",
                    failure(failed)
                );
                not_granted(&why, &scope, &owner)
            }
        }
    }

    /// Withdraws a grant question whose wait failed, so nobody approves what nobody
    /// will store.
    async fn withdraw_grant(&self, bearer: Option<&str>, asked: &Asked) -> Withdrawn {
        match self
            .api
            .call(bearer, Method::DELETE, &asked.path(), None)
            .await
        {
            Answer::Ok(s, _) if s.is_success() => Withdrawn::Yes,
            Answer::Ok(StatusCode::CONFLICT, body) if is_terminal(&body["interaction"]) => {
                Withdrawn::EndedFirst(body["interaction"].clone())
            }
            failed => Withdrawn::Failed(failure(failed)),
        }
    }

    /// `check_grant`: whether a live grant covers a scope for an owner.
    pub(super) async fn check(
        &self,
        args: CheckGrant,
        ctx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        let bearer = bearer_of(&ctx);
        let path = format!(
            "/v1/grants/check?owner_id={}&scope={}",
            path_segment(&args.owner_id),
            path_segment(&args.scope)
        );
        let covered = calls_in(&args.scope, &args.owner_id);
        match self
            .api
            .call(bearer.as_deref(), Method::GET, &path, None)
            .await
        {
            Answer::Ok(s, answer) if s.is_success() && answer["allowed"] == Value::Bool(true) => {
                let grant = &answer["grant"];
                let text = format!(
                    "GRANTED: grant {} (scope {}, granted by {}) covers {covered} until {}.",
                    grant["grant_id"].as_str().unwrap_or("?"),
                    grant["scope"].as_str().unwrap_or("?"),
                    grant["granted_by"]["name"].as_str().unwrap_or("a person"),
                    grant["expires_at"].as_str().unwrap_or("?"),
                );
                text_result(text, Some(grant), false)
            }
            Answer::Ok(s, answer) if s.is_success() && answer["allowed"] == Value::Bool(false) => {
                text_result(
                    format!(
                        "NOT GRANTED: no live grant covers {covered}. Do not run them without \
                         asking: call request_grant, or request_approval for each call."
                    ),
                    None,
                    false,
                )
            }
            failed => {
                let why = format!("the approval service could not say ({})", failure(failed));
                not_granted(&why, &args.scope, &args.owner_id)
            }
        }
    }
}

/// A grant question still open: nothing is granted until it is answered yes and
/// presented.
fn not_yet(id: &str, question: &Value) -> CallToolResult {
    text_result(
        format!(
            "NOT GRANTED YET: question {id} is waiting for a human. Do not run the calls now. \
             Call get_decision with id \"{id}\"; once it says ANSWERED: true, call \
             request_grant again with the same owner_id and scope and interaction_id \"{id}\" \
             to get the grant the yes stored."
        ),
        Some(question),
        false,
    )
}
