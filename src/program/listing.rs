//! `pending`, `windows` and `grants`: what waits and what is open, across every route
//! and agent, read from the database (nothing is written) for an operator away from the
//! chat. The JSON is the API's own views (`--json`); the text, one line per item.

use std::io::Write;
use std::path::Path;

use serde::Serialize;

use super::existing_store;
use crate::api::grants::GrantView;
use crate::api::listing::WindowView;
use crate::api::record::RecordView;
use crate::cli;
use crate::domain::question::operator_time;

/// What to list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listing {
    /// The pending questions.
    Pending,
    /// The live confirmation windows.
    Windows,
    /// The live grants.
    Grants,
}

/// How many pending questions are listed at most.
const MAX_PENDING: u32 = 10_000;

/// Lists `what` on stdout, as text or JSON.
pub async fn list(config: &Path, what: Listing, json: bool) -> anyhow::Result<()> {
    let store = existing_store(config).await?;
    let now = crate::service::now();
    let (lines, value): (Vec<String>, serde_json::Value) = match what {
        Listing::Pending => {
            let pending = store.pending_of(None, MAX_PENDING).await?;
            let lines = pending
                .iter()
                .map(|q| {
                    format!(
                        "{}  route {}  agent {}  {}  owner {}  expires {}",
                        q.id,
                        q.route,
                        q.agent,
                        q.interaction
                            .as_ref()
                            .map_or_else(|| q.tool.as_str().to_owned(), |_| "(a question)".into()),
                        q.owner_id.as_str(),
                        operator_time(q.expires_at)
                    )
                })
                .collect();
            let views: Vec<RecordView> = pending.iter().map(RecordView::from).collect();
            (lines, json_of("pending", &views)?)
        }
        Listing::Windows => {
            let windows = store.live_windows_of(None, now).await?;
            let lines = windows
                .iter()
                .map(|w| {
                    let k = &w.window.key;
                    format!(
                        "{}  route {}  agent {}  {}  owner {}  args {}  until {}",
                        w.window.opened_by,
                        w.route,
                        k.agent,
                        k.tool.as_str(),
                        k.owner_id.as_str(),
                        &k.args_hash.as_str()[..12.min(k.args_hash.as_str().len())],
                        operator_time(w.window.expires_at)
                    )
                })
                .collect();
            let views: Vec<WindowView> = windows.iter().map(WindowView::of).collect();
            (lines, json_of("windows", &views)?)
        }
        Listing::Grants => {
            let grants = store.live_grants(None, None, now).await?;
            let lines = grants
                .iter()
                .map(|g| {
                    format!(
                        "{}  route {}  agent {}  {}  owner {}  until {}",
                        g.grant_id,
                        g.route,
                        g.agent,
                        g.scope,
                        g.owner_id.as_str(),
                        operator_time(g.expires_at)
                    )
                })
                .collect();
            let views: Vec<GrantView> = grants.iter().map(GrantView::of).collect();
            (lines, json_of("grants", &views)?)
        }
    };
    store.close().await;
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let written = if json {
        writeln!(out, "{value}")
    } else if lines.is_empty() {
        writeln!(out, "none")
    } else {
        lines.iter().try_for_each(|l| writeln!(out, "{l}"))
    };
    match written.and_then(|()| out.flush()) {
        // The reader (`| head`) has all it wanted: a normal end.
        Err(e) if cli::is_broken_pipe(&e) => Ok(()),
        other => Ok(other?),
    }
}

fn json_of<T: Serialize>(key: &str, items: &[T]) -> anyhow::Result<serde_json::Value> {
    let mut object = serde_json::Map::new();
    object.insert(key.to_owned(), serde_json::to_value(items)?);
    Ok(serde_json::Value::Object(object))
}
