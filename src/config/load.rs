//! Reading [`Settings`]: the TOML file (or the built-in example), with the
//! `HITL__SECTION__KEY` environment overrides laid over it.

use std::path::Path;

use figment::Figment;
use figment::providers::{Env, Format, Toml};

use super::{ConfigError, Settings};

/// Prefix of the environment variables that override single keys:
/// `HITL__SERVER__BIND=0.0.0.0:8080` sets `[server] bind`.
pub const ENV_OVERRIDE_PREFIX: &str = "HITL__";

/// The shipped example configuration (see [`Settings::builtin`]).
const BUILTIN_CONFIG: &str = include_str!("../../config/default.toml");

impl Settings {
    /// Reads `path`, then applies `HITL__SECTION__KEY` overrides from the process
    /// environment.
    pub fn load(path: &Path) -> Result<Settings, ConfigError> {
        if !path.exists() {
            return Err(ConfigError::Load(format!(
                "configuration file {} does not exist",
                path.display()
            )));
        }
        if path.is_dir() {
            // What Docker leaves when a bind-mounted file is missing on the host: an
            // empty directory in its place. Say so, rather than a bare read error.
            return Err(ConfigError::Load(format!(
                "configuration file {} is a directory (Docker creates an empty one when \
                 the file it should mount is missing: create it first, e.g. \
                 `cp config/default.toml config/local.toml`)",
                path.display()
            )));
        }
        let text = std::fs::read_to_string(path).map_err(|e| {
            ConfigError::Load(format!(
                "cannot read configuration file {}: {e}",
                path.display()
            ))
        })?;
        check_syntax(path, &text)?;
        with_env_overrides(Figment::from(Toml::file_exact(path)))
    }

    /// The shipped `config/default.toml`, built in: what `--demo` runs on when no
    /// configuration file is found, so the demo works from any folder.
    pub fn builtin() -> Result<Settings, ConfigError> {
        with_env_overrides(Figment::from(Toml::string(BUILTIN_CONFIG)))
    }

    /// Parses settings from TOML text, without environment overrides (tests, `--demo`).
    pub fn from_toml(text: &str) -> Result<Settings, ConfigError> {
        Figment::new()
            .merge(Toml::string(text))
            .extract()
            .map_err(|e| ConfigError::Load(described(e)))
    }
}

/// Refuses `text` (the file `path`) when it is not TOML, saying the first mistake once
/// and as a person needs it: the file, the line and column, what is wrong there and what
/// was expected. figment would say it too, but as a block of text, and twice: the
/// environment's layer reads the file again to know its lists ([`IndexedEnv`]).
pub(super) fn check_syntax(path: &Path, text: &str) -> Result<(), ConfigError> {
    let Err(e) = toml::from_str::<toml::Table>(text) else {
        return Ok(());
    };
    // toml's message is a line or two: what is wrong, then what was expected.
    let what: Vec<&str> = e
        .message()
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let place = match e.span() {
        Some(span) => {
            let (line, column) = line_and_column(text, span.start);
            format!("{}, line {line}, column {column}", path.display())
        }
        None => path.display().to_string(),
    };
    Err(ConfigError::Load(format!("{place}: {}", what.join("; "))))
}

/// The line and column (both from 1, the column in characters) of byte `offset` in
/// `text`, as an editor shows them. The end of the file is the end of its last line (an
/// array left open is missing its `]` there, not on a line after the file).
fn line_and_column(text: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(text.trim_end_matches(['\n', '\r']).len());
    let before = text.get(..offset).unwrap_or(text);
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    (
        before.matches('\n').count() + 1,
        before[line_start..].chars().count() + 1,
    )
}

/// The settings `file` holds, with `HITL__SECTION__KEY` variables over them.
fn with_env_overrides(file: Figment) -> Result<Settings, ConfigError> {
    let env = IndexedEnv { file: &file };
    let layered = file.clone().merge(env);
    layered.extract().map_err(|e| {
        let mut text = described(e);
        if text.contains("expected a sequence") {
            text.push_str(LIST_FROM_ENV_HINT);
        }
        ConfigError::Load(text)
    })
}

/// figment's errors in a person's words, each distinct one once: where (the file, or the
/// environment variable), which key, what is wrong. Not figment's own wording, which
/// puts the profile before every key (`"default.server.bnd"`) and names a provider
/// made from a string by the line of our source that made it.
fn described(errors: figment::Error) -> String {
    use figment::Source;
    use figment::error::Kind;
    let mut said: Vec<String> = Vec::new();
    for e in errors {
        let what = match &e.kind {
            Kind::UnknownField(found, expected) => {
                format!(
                    "unknown key `{found}` (known here: {})",
                    expected.join(", ")
                )
            }
            kind => kind.to_string(),
        };
        let key = e.path.join(".");
        let source = e.metadata.as_ref().map(|md| md.source.as_ref());
        let text = match source {
            Some(Some(Source::File(file))) if key.is_empty() => {
                format!("{}: {what}", file.display())
            }
            Some(Some(Source::File(file))) => format!("{}: {key}: {what}", file.display()),
            // The one provider without a source: the `HITL__…` variables.
            Some(None) if !key.is_empty() => format!("{}: {what}", env_var_name(&e.path)),
            _ if key.is_empty() => what,
            _ => format!("{key}: {what}"),
        };
        if !said.contains(&text) {
            said.push(text);
        }
    }
    said.join("; ")
}

/// What a list from the environment looks like, said when one has the wrong shape.
const LIST_FROM_ENV_HINT: &str = " (a list from the environment is one value in brackets: \
    HITL__ROUTES__0__APPROVERS='[11111111, 22222222]' changes one key of the file's first \
    route, and HITL__ROUTES='[{name=\"ops\", chat_id=-1001234567890, approvers=[11111111]}]' \
    replaces every route)";

/// The `HITL__…` variables as figment's [`Env`] reads them, except that an index into a
/// list of the file (`HITL__ROUTES__0__APPROVERS`: `routes[0].approvers`) changes that
/// entry, or appends the next one, instead of replacing the whole list with a map (which
/// figment would do, and then fail with "found map, expected a sequence").
struct IndexedEnv<'a> {
    file: &'a Figment,
}

impl IndexedEnv<'_> {
    fn env() -> Env {
        Env::prefixed(ENV_OVERRIDE_PREFIX).split("__")
    }
}

impl figment::Provider for IndexedEnv<'_> {
    fn metadata(&self) -> figment::Metadata {
        Self::env().metadata()
    }

    fn data(
        &self,
    ) -> Result<figment::value::Map<figment::Profile, figment::value::Dict>, figment::Error> {
        let mut data = Self::env().data()?;
        let file = self.file.data()?;
        let nothing = figment::value::Dict::new();
        for (profile, dict) in data.iter_mut() {
            let base = file.get(profile).unwrap_or(&nothing);
            let mut path = Vec::new();
            indexed_into_lists(dict, base, &mut path).map_err(figment::Error::from)?;
        }
        Ok(data)
    }
}

/// Turns each map of `env` that indexes a list of `base` into that list with the
/// indexed entries changed (deeply, key by key) or appended; `path` is where `env` is,
/// for the error that names a bad index.
fn indexed_into_lists(
    env: &mut figment::value::Dict,
    base: &figment::value::Dict,
    path: &mut Vec<String>,
) -> Result<(), String> {
    use figment::value::Value;
    for (key, value) in env.iter_mut() {
        path.push(key.clone());
        let replacement = match (&mut *value, base.get(key)) {
            (Value::Dict(_, over), Some(Value::Array(tag, list))) => {
                let mut list = list.clone();
                let mut indexed: Vec<(usize, Value)> = Vec::new();
                for (index, v) in std::mem::take(over) {
                    let i = index.parse::<usize>().map_err(|_| {
                        format!(
                            "{}__{}__…: '{}' is a list, so the next part of the variable's \
                             name is an index (0 for the first entry), not '{index}'",
                            env_var_name(path),
                            index.to_ascii_uppercase(),
                            path.join(".")
                        )
                    })?;
                    indexed.push((i, v));
                }
                indexed.sort_by_key(|(i, _)| *i);
                for (i, mut v) in indexed {
                    path.push(i.to_string());
                    if i < list.len() {
                        if let (Value::Dict(_, over), Value::Dict(_, entry)) = (&mut v, &list[i]) {
                            indexed_into_lists(over, entry, path)?;
                        }
                        list[i] = merged(list[i].clone(), v);
                    } else if i == list.len() {
                        list.push(v);
                    } else {
                        let n = list.len();
                        return Err(format!(
                            "{}__…: '{}' has {n} {}, so index {i} leaves a gap: the next new \
                             entry is index {n}",
                            env_var_name(path),
                            path[..path.len() - 1].join("."),
                            if n == 1 { "entry" } else { "entries" },
                        ));
                    }
                    path.pop();
                }
                Some(Value::Array(*tag, list))
            }
            (Value::Dict(_, over), Some(Value::Dict(_, inner))) => {
                indexed_into_lists(over, inner, path)?;
                None
            }
            _ => None,
        };
        if let Some(list) = replacement {
            *value = list;
        }
        path.pop();
    }
    Ok(())
}

/// `over` laid on `base`: maps key by key, anything else replaced.
fn merged(base: figment::value::Value, over: figment::value::Value) -> figment::value::Value {
    use figment::value::Value;
    match (base, over) {
        (Value::Dict(tag, mut base), Value::Dict(_, over)) => {
            for (k, v) in over {
                let v = match base.remove(&k) {
                    Some(b) => merged(b, v),
                    None => v,
                };
                base.insert(k, v);
            }
            Value::Dict(tag, base)
        }
        (_, over) => over,
    }
}

/// `HITL__ROUTES__0__APPROVERS` for the path `routes.0.approvers`.
fn env_var_name(path: &[String]) -> String {
    format!(
        "{ENV_OVERRIDE_PREFIX}{}",
        path.join("__").to_ascii_uppercase()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::testing::BASE;

    #[test]
    fn a_syntax_error_says_the_file_line_column_and_what_was_expected() {
        let refusal = |text: &str| match check_syntax(Path::new("conf/x.toml"), text) {
            Err(ConfigError::Load(e)) => e,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            refusal("[server]\nbind = \"127.0.0.1:8080\n"),
            "conf/x.toml, line 2, column 23: invalid basic string"
        );
        assert_eq!(
            refusal("[server]\nbind =\n"),
            "conf/x.toml, line 2, column 7: invalid string; expected `\"`, `'`"
        );
        assert_eq!(
            refusal("[[routes]]\napprovers = [1, 2\n\n"),
            "conf/x.toml, line 2, column 18: invalid array; expected `]`"
        );
        assert_eq!(
            refusal("[server]\nk = \"ïï\" 2"),
            "conf/x.toml, line 2, column 10: expected newline, `#`"
        );
        assert!(check_syntax(Path::new("conf/x.toml"), BASE).is_ok());
    }

    #[test]
    fn an_unknown_key_in_the_file_is_refused() {
        let e = Settings::from_toml(&BASE.replace("[server]", "[server]\nbnd = 1"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("bnd"), "{e}");
    }
}
