//! The text an operator reads before approving a tool call.
//!
//! AI-Parrot's ConfirmationGuard renders
//! `template.format(tool=tool, params=params_str, **params)`, where `params_str` is
//! `", ".join(f"{k}={v!r}")`, and falls back to `"<tool> with: k=v!r, ..."` (or
//! `"<tool> (no parameters)"`) when that raises. An agent's own logs show that text, so
//! ours is the same byte for byte. Where Parrot lets an error escape (TypeError,
//! AttributeError) we fall back too, and we also fall back when the template or the
//! result is too long to show: the operator sees a whole briefing or the plain list of
//! parameters, never half a template.

use std::collections::HashMap;

use crate::python::format::{format_template, py_repr};
use crate::python::value::{PyDict, PyValue};

/// Longest rendered briefing, in characters; a longer one falls back. Also bounds
/// every width and precision, so a hostile `{x:>999999999}` is refused before
/// anything is allocated.
pub const MAX_BRIEFING_CHARS: usize = 8192;

/// Longest template accepted, in bytes; a longer one falls back without parsing.
pub const MAX_TEMPLATE_BYTES: usize = 8 * 1024;

/// A rendered briefing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Briefing {
    /// What the operator sees.
    pub text: String,
    /// Why the template was not used (`None` when it rendered). For logs: it names the
    /// rule that failed, never a parameter value.
    pub fallback_reason: Option<String>,
}

/// The briefing for `tool` called with `params`, from the operator's `template` when
/// there is one and it renders.
pub fn render(template: Option<&str>, tool: &str, params: &PyDict) -> Briefing {
    match render_template(template, tool, params) {
        Ok(text) => Briefing {
            text,
            fallback_reason: None,
        },
        Err(reason) => Briefing {
            text: fallback(tool, params),
            fallback_reason: Some(reason),
        },
    }
}

/// The briefing without a template: `"<tool> with: k=v!r, ..."`, or
/// `"<tool> (no parameters)"`.
pub fn fallback(tool: &str, params: &PyDict) -> String {
    if params.is_empty() {
        format!("{tool} (no parameters)")
    } else {
        format!("{tool} with: {}", params_text(params))
    }
}

/// `", ".join(f"{k}={v!r}" for k, v in params.items())`.
fn params_text(params: &PyDict) -> String {
    params
        .iter()
        .map(|(key, value)| format!("{key}={}", py_repr(value)))
        .collect::<Vec<_>>()
        .join(", ")
}

fn render_template(template: Option<&str>, tool: &str, params: &PyDict) -> Result<String, String> {
    let template = template.ok_or("no template")?;
    if template.len() > MAX_TEMPLATE_BYTES {
        return Err(format!("template longer than {MAX_TEMPLATE_BYTES} bytes"));
    }
    // `format(tool=..., params=..., **params)` raises before formatting anything when
    // a parameter repeats one of the two named arguments.
    if params.get("tool").is_some() || params.get("params").is_some() {
        return Err(
            "TypeError: a parameter named `tool` or `params` repeats a keyword argument".into(),
        );
    }
    let tool_value = PyValue::Str(tool.to_owned());
    let params_value = PyValue::Str(params_text(params));
    // Hashed once, so a template with many fields costs no more than one pass each.
    let by_name: HashMap<&str, &PyValue> = params.iter().collect();
    let lookup = |name: &str| match name {
        "tool" => Some(&tool_value),
        "params" => Some(&params_value),
        _ => by_name.get(name).copied(),
    };
    format_template(template, lookup, MAX_BRIEFING_CHARS).map_err(|error| error.to_string())
}

#[cfg(test)]
mod tests {
    use std::io::ErrorKind;
    use std::path::Path;
    use std::process::Command;
    use std::time::{Duration, Instant};

    use num_bigint::BigInt;

    use super::*;
    use crate::python::json::parse_object;

    /// One case written by `scripts/gen_briefing_cases.py`, its `expected` computed by
    /// Python exactly as AI-Parrot renders.
    #[derive(Debug, serde::Deserialize)]
    struct Case {
        name: String,
        tool: String,
        params_json: String,
        template: Option<String>,
        expected: String,
    }

    /// Every case whose rendering differs from Python's, described for the failure.
    fn mismatches(cases: &[Case]) -> Vec<String> {
        cases
            .iter()
            .filter_map(|case| {
                let params = match parse_object(&case.params_json) {
                    Ok(params) => params,
                    Err(error) => {
                        return Some(format!("{}: params do not parse: {error}", case.name));
                    }
                };
                let briefing = render(case.template.as_deref(), &case.tool, &params);
                (briefing.text != case.expected).then(|| {
                    format!(
                        "{}: template {:?} params {}\n  expected {:?}\n  rendered {:?} ({:?})",
                        case.name,
                        case.template,
                        case.params_json,
                        case.expected,
                        briefing.text,
                        briefing.fallback_reason
                    )
                })
            })
            .collect()
    }

    fn assert_all_match(cases: &[Case]) {
        let failures = mismatches(cases);
        assert!(
            failures.is_empty(),
            "{} of {} cases differ from Python:\n{}",
            failures.len(),
            cases.len(),
            failures
                .iter()
                .take(20)
                .cloned()
                .collect::<Vec<_>>()
                .join("\n")
        );
    }

    fn dict(entries: &[(&str, PyValue)]) -> PyDict {
        let mut params = PyDict::new();
        for (key, value) in entries {
            params.insert((*key).to_owned(), value.clone());
        }
        params
    }

    #[test]
    fn every_committed_case_renders_as_python_does() {
        let cases: Vec<Case> =
            serde_json::from_str(include_str!("../../../tests/fixtures/briefing_cases.json"))
                .expect("the committed fixture is valid JSON");
        assert!(cases.len() >= 150, "only {} committed cases", cases.len());
        assert_all_match(&cases);
    }

    #[test]
    fn random_templates_render_as_python_does() {
        let script =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/gen_briefing_cases.py");
        // A fixed seed keeps the test repeatable; set BRIEFING_SEED to explore others.
        let seed = std::env::var("BRIEFING_SEED").unwrap_or_else(|_| "20240601".into());
        let output = match Command::new("python3")
            .arg(&script)
            .args(["--random", "400", "--seed", &seed])
            .output()
        {
            Ok(output) => output,
            Err(error) if error.kind() == ErrorKind::NotFound => {
                eprintln!("python3 is not on PATH; skipping the cross-check against Python");
                return;
            }
            Err(error) => panic!("could not run {}: {error}", script.display()),
        };
        assert!(
            output.status.success(),
            "{} failed: {}",
            script.display(),
            String::from_utf8_lossy(&output.stderr)
        );
        let cases: Vec<Case> = String::from_utf8_lossy(&output.stdout)
            .lines()
            .map(|line| serde_json::from_str(line).expect("the script prints one JSON case a line"))
            .collect();
        assert_eq!(cases.len(), 400);
        assert_all_match(&cases);
    }

    #[test]
    fn a_hostile_width_falls_back_quickly_without_allocating_it() {
        let params = dict(&[("x", PyValue::Int(BigInt::from(1)))]);
        for template in [
            "{x:>999999999}",
            "{x:.999999999f}",
            "{x:{x}>999999999999}",
            "{x!r:^99999}",
        ] {
            let started = Instant::now();
            let briefing = render(Some(template), "rm", &params);
            assert_eq!(briefing.text, "rm with: x=1", "{template}");
            assert!(briefing.fallback_reason.is_some());
            assert!(
                started.elapsed() < Duration::from_secs(1),
                "{template} took {:?}",
                started.elapsed()
            );
        }
    }

    #[test]
    fn a_template_at_the_bound_renders_and_one_past_it_falls_back() {
        let params = dict(&[("x", PyValue::Str("ab".into()))]);
        let at_bound = format!("{{x:>{MAX_BRIEFING_CHARS}}}");
        assert_eq!(
            render(Some(&at_bound), "t", &params).text.chars().count(),
            MAX_BRIEFING_CHARS
        );
        let past_bound = format!("!{at_bound}");
        assert_eq!(
            render(Some(&past_bound), "t", &params).text,
            "t with: x='ab'"
        );
        let long_template = "a".repeat(MAX_TEMPLATE_BYTES + 1);
        assert_eq!(
            render(Some(&long_template), "t", &params)
                .fallback_reason
                .as_deref(),
            Some("template longer than 8192 bytes")
        );
    }

    #[test]
    fn many_fields_over_one_large_value_stay_fast() {
        let big = "é'x".repeat(200_000);
        let params = dict(&[
            ("s", PyValue::Str(big.clone())),
            ("l", PyValue::List(vec![PyValue::Str(big)])),
        ]);
        let template = "{s!r:.3}{s[599999]}{l!a:.2}".repeat(250);
        let started = Instant::now();
        let briefing = render(Some(&template), "t", &params);
        assert_eq!(briefing.fallback_reason, None);
        assert!(
            briefing.text.starts_with("\"é'x[\""),
            "{:?}",
            briefing.text.get(..10)
        );
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "took {:?}",
            started.elapsed()
        );
    }

    #[test]
    fn no_template_gives_the_fallback_and_says_so() {
        let briefing = render(None, "deploy", &PyDict::new());
        assert_eq!(briefing.text, "deploy (no parameters)");
        assert_eq!(briefing.fallback_reason.as_deref(), Some("no template"));
    }

    #[test]
    fn a_parameter_named_tool_or_params_falls_back_whatever_the_template() {
        let params = dict(&[("tool", PyValue::Str("x".into()))]);
        let briefing = render(Some("plain text"), "run", &params);
        assert_eq!(briefing.text, "run with: tool='x'");
        assert!(
            briefing
                .fallback_reason
                .is_some_and(|r| r.starts_with("TypeError"))
        );
    }
}
