//! `[metrics]`: who may read `GET /metrics`.

use serde::Deserialize;

use super::{ConfigError, TokenDigest, invalid, token_digest};

/// `[metrics]`: who may read `GET /metrics`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MetricsSettings {
    /// Variable holding the bearer token `GET /metrics` requires; unset, the endpoint is
    /// open (bind the service to a private network then).
    pub token_env: Option<String>,
}

impl MetricsSettings {
    /// The token `GET /metrics` requires, read through `env`, if the section names its
    /// variable. (That it differs from every agent's token is checked in
    /// [`Config::from_settings`](super::Config::from_settings).)
    pub(super) fn token(
        &self,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Option<TokenDigest>, ConfigError> {
        Ok(match &self.token_env {
            Some(var) => {
                let token = env(var).filter(|t| !t.trim().is_empty()).ok_or_else(|| {
                    invalid(
                        "metrics.token_env",
                        format!(
                            "environment variable {var} (the token of GET /metrics) is not set"
                        ),
                    )
                })?;
                let digest = token_digest(token.trim());
                Some(TokenDigest(digest))
            }
            None => None,
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::config::testing::{BASE, env, err_of};
    use crate::config::{Config, Settings, token_digest};

    #[test]
    fn without_a_metrics_token_anyone_may_scrape_and_with_one_only_its_holder() {
        let open = Config::from_settings(Settings::from_toml(BASE).unwrap(), &env).unwrap();
        assert!(open.metrics_token_accepted(None));
        assert!(open.metrics_token_accepted(Some("anything")));

        let toml = format!("{BASE}\n[metrics]\ntoken_env = \"METRICS\"\n");
        let env = |k: &str| match k {
            "METRICS" => Some(" scrape-secret ".into()),
            other => env(other),
        };
        let closed = Config::from_settings(Settings::from_toml(&toml).unwrap(), &env).unwrap();
        assert!(closed.metrics_token_accepted(Some("scrape-secret")));
        assert!(!closed.metrics_token_accepted(None));
        assert!(!closed.metrics_token_accepted(Some("agent-secret-0123456789")));
        let dbg = format!("{closed:?}");
        assert!(dbg.contains("TokenDigest([redacted])"), "{dbg}");
        let digest = format!("{:?}", token_digest("scrape-secret"));
        assert!(!dbg.contains(&digest[1..digest.len() - 1]), "{dbg}");
    }

    #[test]
    fn a_metrics_token_must_be_set_and_differ_from_the_agents_tokens() {
        let unset = err_of(&format!("{BASE}\n[metrics]\ntoken_env = \"NOPE\"\n"));
        assert!(
            unset.contains("metrics.token_env") && unset.contains("NOPE"),
            "{unset}"
        );
        let shared = err_of(&format!("{BASE}\n[metrics]\ntoken_env = \"AGENT_TOKEN\"\n"));
        assert!(shared.contains("must differ"), "{shared}");
    }
}
