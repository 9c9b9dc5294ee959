//! `[server]`: the address the HTTP server binds, and its timeouts and connection limit.

use serde::Deserialize;

use super::{ConfigError, invalid};

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerSettings {
    pub bind: String,
    /// Seconds a new connection has to send the headers of its first request.
    #[serde(default = "default_header_read_timeout_seconds")]
    pub header_read_timeout_seconds: f64,
    /// Seconds a kept-alive connection may wait, after a response, for the headers of
    /// its next request.
    #[serde(default = "default_idle_timeout_seconds")]
    pub idle_timeout_seconds: f64,
    /// Seconds a request's whole body may take to arrive, from the end of its headers.
    #[serde(default = "default_body_read_timeout_seconds")]
    pub body_read_timeout_seconds: f64,
    /// Most connections open at once (fewer when the open-file limit is lower).
    #[serde(default = "default_max_connections")]
    pub max_connections: u32,
}

impl ServerSettings {
    /// Checks `server.bind`: an address like 127.0.0.1:8080.
    pub(super) fn check_bind(&self) -> Result<(), ConfigError> {
        if self.bind.parse::<std::net::SocketAddr>().is_err() {
            return Err(invalid(
                "server.bind",
                format!("'{}' is not an address like 127.0.0.1:8080", self.bind),
            ));
        }
        Ok(())
    }
}

/// See [`ServerSettings::header_read_timeout_seconds`]: a client sends its headers in
/// one go; 10 s is ample even for a phone on a poor network.
pub const DEFAULT_HEADER_READ_TIMEOUT_SECONDS: f64 = 10.0;
/// See [`ServerSettings::idle_timeout_seconds`]: longer than the keep-alive of common
/// HTTP clients' pools, so they rarely reuse a connection the service is closing.
pub const DEFAULT_IDLE_TIMEOUT_SECONDS: f64 = 60.0;
/// See [`ServerSettings::body_read_timeout_seconds`]: the largest body (64 KiB) takes
/// well under a second even on a poor mobile link; 10 s leaves ample room.
pub const DEFAULT_BODY_READ_TIMEOUT_SECONDS: f64 = 10.0;
/// See [`ServerSettings::max_connections`]: room for 10,000 blocked agents (benchmark
/// B3) and more.
pub const DEFAULT_MAX_CONNECTIONS: u32 = 16_384;
/// The longest `header_read_timeout_seconds` / `idle_timeout_seconds` /
/// `body_read_timeout_seconds` accepted.
pub const MAX_HTTP_TIMEOUT_SECONDS: f64 = 3600.0;

fn default_header_read_timeout_seconds() -> f64 {
    DEFAULT_HEADER_READ_TIMEOUT_SECONDS
}

fn default_idle_timeout_seconds() -> f64 {
    DEFAULT_IDLE_TIMEOUT_SECONDS
}

fn default_body_read_timeout_seconds() -> f64 {
    DEFAULT_BODY_READ_TIMEOUT_SECONDS
}

fn default_max_connections() -> u32 {
    DEFAULT_MAX_CONNECTIONS
}

/// The checked `[server]` limits the HTTP server runs with (see `api::serve`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HttpLimits {
    pub header_read_timeout: std::time::Duration,
    pub idle_timeout: std::time::Duration,
    /// The deadline for a request's whole body, from the end of its headers.
    pub body_read_timeout: std::time::Duration,
    /// As configured; the server lowers it to what the open-file limit allows.
    pub max_connections: usize,
}

impl HttpLimits {
    /// Checks the `[server]` limits, naming the key at fault.
    pub(super) fn from_settings(s: &ServerSettings) -> Result<HttpLimits, ConfigError> {
        let seconds = |key: &str, v: f64| {
            if v.is_finite() && v > 0.0 && v <= MAX_HTTP_TIMEOUT_SECONDS {
                Ok(std::time::Duration::from_secs_f64(v))
            } else {
                Err(invalid(
                    format!("server.{key}"),
                    format!(
                        "must be a number of seconds greater than 0 and at most \
                         {MAX_HTTP_TIMEOUT_SECONDS}"
                    ),
                ))
            }
        };
        if s.max_connections == 0 {
            return Err(invalid("server.max_connections", "must be at least 1"));
        }
        Ok(HttpLimits {
            header_read_timeout: seconds(
                "header_read_timeout_seconds",
                s.header_read_timeout_seconds,
            )?,
            idle_timeout: seconds("idle_timeout_seconds", s.idle_timeout_seconds)?,
            body_read_timeout: seconds("body_read_timeout_seconds", s.body_read_timeout_seconds)?,
            max_connections: s.max_connections as usize,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::testing::{BASE, env, err_of};
    use crate::config::{Config, DEFAULT_MAX_LONG_POLLS, DEFAULT_MAX_STREAMS, Settings};

    #[test]
    fn the_http_limits_and_the_agents_caps_have_defaults_and_refuse_nonsense() {
        let c = Config::from_settings(Settings::from_toml(BASE).unwrap(), &env).unwrap();
        assert_eq!(
            c.http,
            HttpLimits {
                header_read_timeout: std::time::Duration::from_secs(10),
                idle_timeout: std::time::Duration::from_secs(60),
                body_read_timeout: std::time::Duration::from_secs(10),
                max_connections: 16_384,
            }
        );
        assert_eq!(c.agents[0].max_streams, DEFAULT_MAX_STREAMS);
        assert_eq!(c.agents[0].max_long_polls, DEFAULT_MAX_LONG_POLLS);

        let server = |line: &str| BASE.replace("[server]\n", &format!("[server]\n{line}\n"));
        let c = Config::from_settings(
            Settings::from_toml(&server("header_read_timeout_seconds = 0.5")).unwrap(),
            &env,
        )
        .unwrap();
        assert_eq!(
            c.http.header_read_timeout,
            std::time::Duration::from_millis(500)
        );
        for (line, key) in [
            (
                "header_read_timeout_seconds = 0",
                "server.header_read_timeout_seconds",
            ),
            (
                "header_read_timeout_seconds = -1",
                "server.header_read_timeout_seconds",
            ),
            ("idle_timeout_seconds = 3601", "server.idle_timeout_seconds"),
            (
                "body_read_timeout_seconds = 0",
                "server.body_read_timeout_seconds",
            ),
            (
                "body_read_timeout_seconds = nan",
                "server.body_read_timeout_seconds",
            ),
            (
                "body_read_timeout_seconds = 3601",
                "server.body_read_timeout_seconds",
            ),
            ("max_connections = 0", "server.max_connections"),
        ] {
            let e = err_of(&server(line));
            assert!(e.contains(key), "{line}: {e}");
        }
        for key in ["max_streams", "max_long_polls"] {
            let e = err_of(&BASE.replace(
                r#"routes = ["ops"]"#,
                &format!("routes = [\"ops\"]\n{key} = 0"),
            ));
            assert!(e.contains(&format!("agents[0].{key}")), "{e}");
        }
    }
}
