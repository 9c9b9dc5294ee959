//! A JSON document as Python's `json.loads` sees it.
//!
//! AI-Parrot hashes and renders tool parameters *after* Python has decoded them, so two
//! facts about Python's view matter and `serde_json::Value` gets both wrong: integers
//! keep every digit however long, and objects keep the order the agent sent (with a
//! repeated key keeping its first position and its last value, as `dict` does).
//! Every piece of domain code that must agree with Python byte for byte works on this
//! type: the args hash (`json`), the briefing (`briefing`) and the operator's view.

use num_bigint::BigInt;

/// One decoded JSON value, with the Python type it becomes.
#[derive(Debug, Clone, PartialEq)]
pub enum PyValue {
    /// `null` -> `None`
    None,
    /// `true` / `false` -> `True` / `False`
    Bool(bool),
    /// An integer literal -> `int`, exact at any length.
    Int(BigInt),
    /// A literal with a fraction or exponent -> `float` (may be infinite after overflow,
    /// as `float("1e400")` is in Python).
    Float(f64),
    /// A string -> `str`. Lone surrogates are refused at parse time, so this is valid UTF-8.
    Str(String),
    /// An array -> `list`
    List(Vec<PyValue>),
    /// An object -> `dict`, in insertion order.
    Dict(PyDict),
}

impl PyValue {
    /// Every object key at every depth: what an input bound on "number of keys" counts.
    pub fn count_keys(&self) -> usize {
        match self {
            PyValue::List(items) => items.iter().map(PyValue::count_keys).sum(),
            PyValue::Dict(d) => d.count_keys(),
            _ => 0,
        }
    }
}

/// A Python `dict` with string keys: insertion-ordered, keys unique.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PyDict {
    entries: Vec<(String, PyValue)>,
}

impl PyDict {
    pub fn new() -> Self {
        Self::default()
    }

    /// Insert as Python's `d[key] = value` does: a new key goes last, an existing key
    /// keeps its position and takes the new value.
    pub fn insert(&mut self, key: String, value: PyValue) {
        match self.entries.iter_mut().find(|(k, _)| *k == key) {
            Some(slot) => slot.1 = value,
            None => self.entries.push((key, value)),
        }
    }

    pub fn get(&self, key: &str) -> Option<&PyValue> {
        self.entries.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// Entries in insertion order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &PyValue)> {
        self.entries.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// This dict's keys plus every key nested in its values.
    pub fn count_keys(&self) -> usize {
        self.len() + self.iter().map(|(_, v)| v.count_keys()).sum::<usize>()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// Build a dict from pairs as `dict(pairs)` does: the same result as inserting them one
/// by one, but in linear time. `insert` scans the entries, so a parser inserting each
/// key of a hostile object with 100 000 members would take tens of seconds.
impl FromIterator<(String, PyValue)> for PyDict {
    fn from_iter<I: IntoIterator<Item = (String, PyValue)>>(pairs: I) -> Self {
        let pairs = pairs.into_iter();
        let mut entries: Vec<(String, PyValue)> = Vec::with_capacity(pairs.size_hint().0);
        // Tool parameters are a handful of keys: a linear scan beats hashing every key
        // (it is most of the window-hit decision's cost otherwise). Past this size, an
        // index keeps repeated-key handling linear.
        const SCAN_UP_TO: usize = 16;
        let mut positions: Option<std::collections::HashMap<String, usize>> = None;
        for (key, value) in pairs {
            if entries.len() == SCAN_UP_TO && positions.is_none() {
                positions = Some(
                    entries
                        .iter()
                        .enumerate()
                        .map(|(i, (k, _))| (k.clone(), i))
                        .collect(),
                );
            }
            let found = match &positions {
                Some(index) => index.get(&key).copied(),
                None => entries.iter().position(|(k, _)| *k == key),
            };
            match found {
                Some(at) => entries[at].1 = value,
                None => {
                    if let Some(index) = positions.as_mut() {
                        index.insert(key.clone(), entries.len());
                    }
                    entries.push((key, value));
                }
            }
        }
        Self { entries }
    }
}
