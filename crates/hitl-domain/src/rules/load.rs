//! From raw rules to checked ones: every refusal of issue 35 happens here, once, when
//! the configuration is loaded, so evaluation never meets a rule it cannot apply.

use std::cmp::Ordering;
use std::collections::{BTreeMap, HashMap};
use std::num::NonZeroU64;

use serde_json::{Number, Value};

use super::condition::{Condition, Op, kind};
use super::error::{MAX_NAME_CHARS, Problem, RuleError, RuleLabel, Side};
use super::glob::Glob;
use super::normal::normalise;
use super::number::compare_numbers;
use super::raw::{RawRate, RawRule};
use super::{Effect, Rate, Rule};
use crate::mcp_call::{self, Annotations};
use crate::text;

/// A raw rule read from a value that holds one `[[rules]]` table, with serde's message
/// (and where in the rule it applies) under the rule's name when it is not one.
pub(super) fn raw_from_value(number: usize, value: &Value) -> Result<RawRule, RuleError> {
    let rule = RuleLabel::new(number, value.get("name").and_then(Value::as_str));
    if !value.is_object() {
        // serde would read a list as the struct's fields in order.
        return Err(RuleError {
            rule,
            problem: Problem::NotATable(kind(value)),
        });
    }
    serde_path_to_error::deserialize(value).map_err(|e| {
        let at = e.path().to_string();
        let message = e.into_inner().to_string();
        let problem = if at == "." {
            message
        } else {
            format!("`{at}`: {message}")
        };
        RuleError {
            rule,
            problem: Problem::Shape(problem),
        }
    })
}

/// The rules checked so far, in file order, with the place of each name.
#[derive(Default)]
pub(super) struct Loader {
    rules: Vec<Rule>,
    numbers: HashMap<String, usize>,
}

impl Loader {
    /// Checks the next rule in the file.
    pub(super) fn push(&mut self, raw: RawRule) -> Result<(), RuleError> {
        let number = self.rules.len() + 1;
        let rule = rule(raw, number)?;
        if let Some(&first) = self.numbers.get(&rule.name) {
            return Err(RuleError {
                rule: RuleLabel::new(number, Some(&rule.name)),
                problem: Problem::DuplicateName { first, number },
            });
        }
        self.numbers.insert(rule.name.clone(), number);
        self.rules.push(rule);
        Ok(())
    }

    pub(super) fn into_rules(self) -> Vec<Rule> {
        self.rules
    }
}

/// One rule, checked; `number` is its place in the file (from 1), to name it when its
/// name is missing.
fn rule(raw: RawRule, number: usize) -> Result<Rule, RuleError> {
    let label = RuleLabel::new(number, Some(&raw.name));
    let refuse = |problem| RuleError {
        rule: label.clone(),
        problem,
    };
    check_name(&raw.name).map_err(refuse)?;
    if raw.tools.is_empty() {
        return Err(refuse(Problem::NoTools));
    }
    let tools = raw
        .tools
        .iter()
        .map(|t| {
            Glob::parse(t).map_err(|error| Problem::Glob {
                glob: t.clone(),
                error,
            })
        })
        .collect::<Result<Vec<_>, _>>()
        .map_err(refuse)?;
    for (key, list) in [
        ("agents", &raw.agents),
        ("owners", &raw.owners),
        ("servers", &raw.servers),
    ] {
        if list.as_ref().is_some_and(Vec::is_empty) {
            return Err(refuse(Problem::EmptyList(key)));
        }
    }
    let servers = raw
        .servers
        .as_ref()
        .map(|servers| {
            servers
                .iter()
                .map(|s| {
                    Glob::parse(s).map_err(|error| Problem::ServerGlob {
                        glob: s.clone(),
                        error,
                    })
                })
                .collect::<Result<Vec<_>, _>>()
        })
        .transpose()
        .map_err(refuse)?;
    let annotations = raw
        .annotations
        .as_ref()
        .map(annotations)
        .transpose()
        .map_err(refuse)?;
    let conditions = raw
        .conditions
        .into_iter()
        .enumerate()
        .map(|(index, c)| {
            Condition::parse(&c.path, c.op, c.value).map_err(|error| Problem::Condition {
                index,
                path: c.path,
                error,
            })
        })
        .collect::<Result<Vec<_>, _>>()
        .map_err(refuse)?;
    check_bands(raw.effect, &conditions).map_err(refuse)?;
    let rate = match (raw.effect, raw.rate) {
        (_, None) => None,
        (Effect::Allow, Some(rate)) => Some(check_rate(rate).map_err(refuse)?),
        (effect, Some(_)) => return Err(refuse(Problem::RateNotOnAllow(effect))),
    };
    Ok(Rule {
        name: raw.name,
        effect: raw.effect,
        tools,
        agents: raw.agents,
        normal_owners: raw
            .owners
            .as_ref()
            .map(|owners| owners.iter().map(|o| normalise(o).into_owned()).collect()),
        owners: raw.owners,
        servers,
        annotations,
        conditions,
        rate,
        reason: raw.reason,
    })
}

/// A rule's `annotations`: each a boolean, under a name a call could carry.
fn annotations(table: &BTreeMap<String, Value>) -> Result<Annotations, Problem> {
    if table.is_empty() {
        return Err(Problem::EmptyAnnotations);
    }
    let mut pairs = BTreeMap::new();
    for (key, value) in table {
        mcp_call::check_key(key).map_err(|e| Problem::AnnotationKey {
            key: key.clone(),
            why: e.0,
        })?;
        let Value::Bool(b) = value else {
            return Err(Problem::AnnotationNotBoolean {
                key: key.clone(),
                kind: kind(value),
            });
        };
        pairs.insert(key.clone(), *b);
    }
    Ok(Annotations::from_pairs(pairs))
}

fn check_name(name: &str) -> Result<(), Problem> {
    if name.trim().is_empty() {
        return Err(Problem::NoName);
    }
    if let Some(c) = text::first_invisible(name) {
        return Err(Problem::InvisibleName(text::escape_char(c)));
    }
    let chars = name.chars().count();
    if chars > MAX_NAME_CHARS {
        return Err(Problem::LongName(chars));
    }
    Ok(())
}

fn check_rate(rate: RawRate) -> Result<Rate, Problem> {
    Ok(Rate {
        max: NonZeroU64::new(rate.max).ok_or(Problem::RateZero("max"))?,
        per_seconds: NonZeroU64::new(rate.per_seconds).ok_or(Problem::RateZero("per_seconds"))?,
    })
}

/// A bound as written: `lte 100`.
fn written((op, n): (Op, &Number)) -> String {
    format!("{op} {n}")
}

/// The tighter of two bounds of one side: the larger lower bound (or the smaller upper
/// bound, as `keep` says), and on a tie the strict one.
fn tighter<'a>(a: (Op, &'a Number), b: (Op, &'a Number), keep: Ordering) -> (Op, &'a Number) {
    match compare_numbers(a.1, b.1) {
        Some(order) if order == keep => a,
        Some(Ordering::Equal) if matches!(b.0, Op::Gt | Op::Lt) => b,
        Some(Ordering::Equal) | None => a,
        Some(_) => b,
    }
}

/// For each path compared with `lt`/`lte`/`gt`/`gte`: an `allow` needs both a lower and
/// an upper bound (else a value past the open side passes, a negative amount through an
/// `amount lte 100`), and for any effect the bounds must leave some number between them
/// (`gt 1000` with `lt 10` never holds: a rule meant for "outside the band" that would
/// silently never match).
fn check_bands(effect: Effect, conditions: &[Condition]) -> Result<(), Problem> {
    let mut paths: Vec<&str> = Vec::new();
    for c in conditions {
        let path = c.path().as_str();
        if c.bound().is_some() && !paths.contains(&path) {
            paths.push(path);
        }
    }
    for path in paths {
        let bounds = conditions
            .iter()
            .filter(|c| c.path().as_str() == path)
            .filter_map(Condition::bound);
        let (mut lower, mut upper) = (None, None);
        for bound in bounds {
            if matches!(bound.0, Op::Gt | Op::Gte) {
                lower = Some(lower.map_or(bound, |l| tighter(l, bound, Ordering::Greater)));
            } else {
                upper = Some(upper.map_or(bound, |u| tighter(u, bound, Ordering::Less)));
            }
        }
        match (lower, upper) {
            (Some(l), Some(u)) => {
                let empty = match compare_numbers(l.1, u.1) {
                    Some(Ordering::Greater) => true,
                    Some(Ordering::Equal) => l.0 == Op::Gt || u.0 == Op::Lt,
                    Some(Ordering::Less) | None => false,
                };
                if empty {
                    return Err(Problem::EmptyBand {
                        path: path.to_owned(),
                        lower: written(l),
                        upper: written(u),
                    });
                }
            }
            (None, Some(u)) if effect == Effect::Allow => {
                return Err(Problem::OneSided {
                    path: path.to_owned(),
                    has: written(u),
                    open: Side::Lower,
                });
            }
            (Some(l), None) if effect == Effect::Allow => {
                return Err(Problem::OneSided {
                    path: path.to_owned(),
                    has: written(l),
                    open: Side::Upper,
                });
            }
            _ => {}
        }
    }
    Ok(())
}
