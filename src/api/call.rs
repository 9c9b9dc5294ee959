//! `call` of `POST /v1/interactions`: the tool call an `approval` or `form` is about,
//! with the same fields (read the same way) as `POST /v1/confirmations`.

use serde::Deserialize;
use utoipa::ToSchema;

use super::field::{self, Params, Window};
use crate::domain::edit::ArgsSchema;
use crate::domain::ids::{OwnerId, ToolName};

/// The tool call an `approval` or `form` is about (AI-Parrot's ConfirmationGuard through
/// the Python package): the operator sees the tool and every parameter.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CallBody {
    #[serde(deserialize_with = "field::tool")]
    #[schema(inline)]
    pub tool: ToolName,
    /// The call's exact parameters; no repeated keys.
    #[schema(inline)]
    pub params: Params,
    /// On whose behalf the agent acts; default `anonymous`.
    #[serde(deserialize_with = "field::owner")]
    #[schema(inline)]
    pub owner_id: Option<OwnerId>,
    /// The window the agent's guard records on approval; cut to the route's
    /// `max_window_seconds` and disclosed to the operator.
    #[serde(deserialize_with = "field::window")]
    #[schema(inline)]
    pub window_seconds: Option<Window>,
    #[serde(deserialize_with = "field::args_schema")]
    #[schema(inline)]
    pub args_schema: Option<ArgsSchema>,
}
