//! Edit before execute (issue 37): the tool's `args_schema` an agent may send with a
//! call, the check of an operator's edited parameters against it, and the changes the
//! chat shows ("amount 1200.5 → 1000").
//!
//! The schema is the agent's and so hostile: it is checked as a JSON Schema when the
//! question is asked (an invalid one is refused then, not when someone edits), it may
//! not fetch anything (no remote or file `$ref`: the validator is built without any
//! retriever), and its `pattern`s run on the linear-time `regex` engine with a size cap,
//! never a backtracking one.

use jsonschema::{PatternOptions, ValidationError, Validator};
use serde_json::Value;

use super::limits::MAX_ARGS_SCHEMA_BYTES;

/// A compiled pattern's size cap: enough for any field rule, too little to exhaust memory.
const PATTERN_SIZE_LIMIT: usize = 1 << 20;

/// The most field errors one refused edit reports (the rest add nothing a person can act on).
const MAX_FIELD_ERRORS: usize = 20;

/// A tool's argument schema, checked: a JSON object that is a valid JSON Schema this
/// service can apply without fetching anything.
#[derive(Debug, Clone)]
pub struct ArgsSchema {
    /// The schema's JSON text as the agent sent it (its key order is the form's field
    /// order: pydantic lists a model's fields in their declared order).
    text: String,
    validator: std::sync::Arc<Validator>,
}

impl PartialEq for ArgsSchema {
    fn eq(&self, other: &Self) -> bool {
        self.text == other.text
    }
}

/// Why a schema was refused, in a sentence that completes "args_schema …".
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchemaError(pub String);

/// One field of an edit that does not fit the schema.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct FieldError {
    /// The parameter at fault, as a dotted path (`amount`, `target.region`, `tags[2]`);
    /// empty when the parameters as a whole are at fault.
    pub field: String,
    pub message: String,
}

fn build(schema: &Value) -> Result<Validator, String> {
    jsonschema::options()
        .with_pattern_options(PatternOptions::regex().size_limit(PATTERN_SIZE_LIMIT))
        .build(schema)
        .map_err(|e| e.to_string())
}

impl ArgsSchema {
    /// Checks `text` (the request's `args_schema`, as JSON text); also how a stored
    /// schema is read back.
    pub fn parse(text: &str) -> Result<ArgsSchema, SchemaError> {
        if text.len() > MAX_ARGS_SCHEMA_BYTES {
            return Err(SchemaError(format!(
                "is {} bytes; the limit is {MAX_ARGS_SCHEMA_BYTES}",
                text.len()
            )));
        }
        let schema: Value =
            serde_json::from_str(text).map_err(|e| SchemaError(format!("is not JSON: {e}")))?;
        if !schema.is_object() {
            return Err(SchemaError(
                "must be a JSON Schema object (pydantic's model_json_schema())".into(),
            ));
        }
        let validator = build(&schema)
            .map_err(|e| SchemaError(format!("is not a JSON Schema this service can use: {e}")))?;
        Ok(ArgsSchema {
            text: text.trim().to_owned(),
            validator: std::sync::Arc::new(validator),
        })
    }

    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Whether `params` fit the schema; if not, each field at fault (at most
    /// [`MAX_FIELD_ERRORS`]), in the validator's order.
    pub fn check(&self, params: &Value) -> Result<(), Vec<FieldError>> {
        let mut errors: Vec<FieldError> = Vec::new();
        for e in self.validator.iter_errors(params) {
            for fe in field_errors(&e) {
                if !errors.contains(&fe) {
                    errors.push(fe);
                }
            }
            if errors.len() >= MAX_FIELD_ERRORS {
                errors.truncate(MAX_FIELD_ERRORS);
                break;
            }
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors)
        }
    }
}

/// A validator error as the fields it names. A missing required property, or an
/// unexpected one, is reported at the root by the validator: it is named here instead,
/// so the form can show the message beside that field.
fn field_errors(e: &ValidationError<'_>) -> Vec<FieldError> {
    use jsonschema::error::ValidationErrorKind as Kind;
    let at = dotted(e.instance_path());
    let join = |name: &str| {
        if at.is_empty() {
            name.to_owned()
        } else {
            format!("{at}.{name}")
        }
    };
    match e.kind() {
        Kind::Required { property } => {
            let name = property
                .as_str()
                .map_or_else(|| property.to_string(), str::to_owned);
            vec![FieldError {
                field: join(&name),
                message: "is required".into(),
            }]
        }
        Kind::AdditionalProperties { unexpected } => unexpected
            .iter()
            .map(|name| FieldError {
                field: join(name),
                message: "is not a parameter of this tool".into(),
            })
            .collect(),
        _ => vec![FieldError {
            field: at,
            message: e.to_string(),
        }],
    }
}

/// A JSON pointer (`/target/region`, `/tags/2`) as a dotted path (`target.region`,
/// `tags[2]`).
fn dotted(path: &jsonschema::paths::Location) -> String {
    let mut out = String::new();
    for segment in path.iter() {
        match segment {
            jsonschema::paths::LocationSegment::Index(i) => out.push_str(&format!("[{i}]")),
            jsonschema::paths::LocationSegment::Property(p) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(&p);
            }
        }
    }
    out
}

/// One parameter an edit changed: its name, and its value before and after as compact
/// JSON (`None`: absent on that side).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub key: String,
    pub before: Option<String>,
    pub after: Option<String>,
}

/// The top-level parameters that differ between `before` and `after` (two JSON
/// objects): changed and added ones in key order, then the removed ones.
pub fn changes(before: &Value, after: &Value) -> Vec<Change> {
    let empty = serde_json::Map::new();
    let b = before.as_object().unwrap_or(&empty);
    let a = after.as_object().unwrap_or(&empty);
    let mut out = Vec::new();
    for (key, value) in a {
        if b.get(key) != Some(value) {
            out.push(Change {
                key: key.clone(),
                before: b.get(key).map(Value::to_string),
                after: Some(value.to_string()),
            });
        }
    }
    for (key, value) in b {
        if !a.contains_key(key) {
            out.push(Change {
                key: key.clone(),
                before: Some(value.to_string()),
                after: None,
            });
        }
    }
    out
}

/// The changes in words: `amount 1200.5 → 1000, note "x" → (removed)`.
pub fn changes_text(changes: &[Change]) -> String {
    changes
        .iter()
        .map(|c| {
            format!(
                "{} {} → {}",
                c.key,
                c.before.as_deref().unwrap_or("(none)"),
                c.after.as_deref().unwrap_or("(removed)")
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(v: Value) -> Result<ArgsSchema, SchemaError> {
        ArgsSchema::parse(&v.to_string())
    }

    fn transfer() -> ArgsSchema {
        parse(json!({
            "title": "TransferArgs",
            "type": "object",
            "properties": {
                "amount": {"type": "number", "exclusiveMinimum": 0, "maximum": 5000},
                "to": {"type": "string", "minLength": 1},
                "target": {"type": "object", "properties": {"region": {"enum": ["eu", "us"]}}},
            },
            "required": ["amount", "to"],
            "additionalProperties": false,
        }))
        .expect("a valid schema")
    }

    #[test]
    fn a_schema_must_be_an_object_and_a_valid_json_schema() {
        for bad in [
            json!([]),
            json!("x"),
            json!({"type": "no-such-type"}),
            json!({"minimum": "ten"}),
        ] {
            assert!(parse(bad.clone()).is_err(), "{bad}");
        }
        assert!(parse(json!({})).is_ok());
        assert!(ArgsSchema::parse("{not json").is_err());
    }

    #[test]
    fn a_schema_cannot_fetch_anything() {
        for r in ["https://example.com/s.json", "file:///etc/passwd"] {
            let e = parse(json!({"$ref": r})).expect_err(r);
            assert!(e.0.contains("JSON Schema"), "{}", e.0);
        }
    }

    #[test]
    fn each_field_at_fault_is_named() {
        let s = transfer();
        assert_eq!(s.check(&json!({"amount": 10, "to": "ACME"})), Ok(()));
        let errors = s
            .check(&json!({"amount": 9000, "target": {"region": "mars"}, "extra": 1}))
            .expect_err("invalid");
        let fields: Vec<&str> = errors.iter().map(|e| e.field.as_str()).collect();
        for f in ["amount", "to", "target.region", "extra"] {
            assert!(fields.contains(&f), "{f} in {errors:?}");
        }
        let amount = errors.iter().find(|e| e.field == "amount").unwrap();
        assert!(amount.message.contains("5000"), "{amount:?}");
    }

    #[test]
    fn a_pattern_runs_in_linear_time() {
        // A backtracking engine would take exponential time here; `regex` cannot.
        let s = parse(json!({"properties": {"p": {"pattern": "^(a+)+$"}}})).unwrap();
        let hostile = format!("{}!", "a".repeat(10_000));
        assert!(s.check(&json!({ "p": hostile })).is_err());
    }

    #[test]
    fn changes_list_what_differs_in_order() {
        let c = changes(
            &json!({"amount": 1200.5, "to": "ACME", "note": "x"}),
            &json!({"amount": 1000, "to": "ACME", "memo": "y"}),
        );
        assert_eq!(
            changes_text(&c),
            "amount 1200.5 → 1000, memo (none) → \"y\", note \"x\" → (removed)"
        );
        assert!(changes(&json!({"a": 1}), &json!({"a": 1})).is_empty());
    }
}
