//! Logging through `tracing`: human-readable text by default, JSON lines with `--log-json`
//! (or `HITL_LOG_JSON=true`). The filter comes from `RUST_LOG` (default `info`); the MCP
//! library's own per-session lines are kept at `warn` unless `RUST_LOG` names `rmcp`.
//!
//! Text is coloured only when stderr is a terminal and `NO_COLOR` is unset or empty
//! (<https://no-color.org>): `docker logs`, journald, files and the stderr Claude Code
//! shows from the hook get plain text, never escape codes.
//!
//! Also here: [`causes`], how an error and what caused it read in a log line.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

/// Installs the global subscriber. Calling it twice is harmless (tests do).
pub fn init(json: bool) {
    let filter = filter(std::env::var("RUST_LOG").ok().as_deref());
    let no_color = std::env::var_os("NO_COLOR");
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(colour(std::io::stderr().is_terminal(), no_color.as_deref()));
    let _ = if json {
        builder.json().flatten_event(true).try_init()
    } else {
        builder.try_init()
    };
}

/// The filter: `RUST_LOG` (default `info`), with rmcp (the MCP library) at `warn` unless
/// `RUST_LOG` names it. rmcp logs each MCP session's start at info with the client's
/// whole `peer_info` (its name, version, capabilities), and its end: a line per session
/// that nobody can act on, on the stderr an MCP client shows for `hitl-telegram mcp`
/// and in the service's log for every POST to `/mcp`.
fn filter(rust_log: Option<&str>) -> EnvFilter {
    let spec = rust_log.filter(|s| !s.trim().is_empty()).unwrap_or("info");
    let spec = if spec.contains("rmcp") {
        spec.to_owned()
    } else {
        format!("{spec},rmcp=warn")
    };
    EnvFilter::try_new(&spec).unwrap_or_else(|_| EnvFilter::new("info,rmcp=warn"))
}

/// Whether text logs are coloured: only on a terminal, and never when `NO_COLOR` holds
/// a non-empty value (the convention: present and empty means unset).
fn colour(terminal: bool, no_color: Option<&std::ffi::OsStr>) -> bool {
    terminal && no_color.is_none_or(|v| v.is_empty())
}

/// `e` and the chain of errors that caused it (`source()`), outermost first, joined by
/// ": ". An error whose text already includes its cause's is not repeated, so the line
/// ends with the innermost cause (the refused connection, the failed DNS lookup, the
/// TLS or proxy failure) said once. Callers pass errors that carry no secret: a
/// `reqwest::Error` for a URL that may hold one (the bot token, a receiver's key) only
/// after `without_url()`.
pub fn causes(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut next = e.source();
    while let Some(cause) = next {
        let text = cause.to_string();
        if !text.is_empty() && !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        next = cause.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;

    #[test]
    fn rmcp_is_kept_at_warn_unless_rust_log_names_it() {
        for rust_log in [None, Some(""), Some("debug"), Some("hitl_telegram=debug")] {
            let shown = filter(rust_log).to_string();
            assert!(shown.contains("rmcp=warn"), "{rust_log:?}: {shown}");
        }
        assert!(!filter(Some("rmcp=debug")).to_string().contains("rmcp=warn"));
    }

    #[test]
    fn colour_only_on_a_terminal_without_no_color() {
        assert!(colour(true, None));
        assert!(colour(true, Some(OsStr::new(""))));
        assert!(!colour(true, Some(OsStr::new("1"))));
        assert!(!colour(false, None));
        assert!(!colour(false, Some(OsStr::new(""))));
    }

    #[derive(Debug, thiserror::Error)]
    #[error("{text}")]
    struct Chain {
        text: &'static str,
        #[source]
        source: Option<Box<Chain>>,
    }

    fn chain(texts: &[&'static str]) -> Chain {
        let mut e = None;
        for text in texts.iter().rev() {
            e = Some(Chain {
                text,
                source: e.map(Box::new),
            });
        }
        e.expect("at least one")
    }

    #[test]
    fn causes_end_with_the_innermost_and_say_each_once() {
        let e = chain(&[
            "error sending request",
            "client error (Connect)",
            "tcp connect error",
            "Connection refused (os error 111)",
        ]);
        assert_eq!(
            causes(&e),
            "error sending request: client error (Connect): tcp connect error: \
             Connection refused (os error 111)"
        );
        let repeated = chain(&["cannot connect: refused", "refused"]);
        assert_eq!(causes(&repeated), "cannot connect: refused");
    }
}
