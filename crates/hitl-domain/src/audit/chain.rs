//! The hash chain: each row's hash over the previous one's and its own fields, the
//! check that names the first row where the stored chain stops matching, and the head
//! (`SEQ:HASH`) an operator records to catch a trail truncated or rewritten later.

use serde_json::json;
use sha2::{Digest, Sha256};
use time::OffsetDateTime;

pub const GENESIS_HASH: &str = "0000000000000000000000000000000000000000000000000000000000000000";

fn millis(t: OffsetDateTime) -> i64 {
    (t.unix_timestamp_nanos() / 1_000_000) as i64
}

/// The hash of a row, given the previous row's hash. `detail` is hashed as the exact
/// text stored, so verification never depends on re-serialising JSON.
pub fn chain_hash(
    prev_hash: &str,
    seq: i64,
    at: OffsetDateTime,
    confirmation_id: Option<&str>,
    kind: &str,
    actor: &str,
    detail_text: &str,
) -> String {
    let content = json!([seq, millis(at), confirmation_id, kind, actor, detail_text]).to_string();
    let mut h = Sha256::new();
    h.update(prev_hash.as_bytes());
    h.update(content.as_bytes());
    hex::encode(h.finalize())
}

/// A stored row as text, the way verification reads it.
#[derive(Debug, Clone)]
pub struct StoredRow {
    pub seq: i64,
    pub at: OffsetDateTime,
    pub confirmation_id: Option<String>,
    pub kind: String,
    pub actor: String,
    pub detail_text: String,
    pub prev_hash: String,
    pub hash: String,
}

/// Where the chain broke.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("audit chain broken at event {seq}: {reason}")]
pub struct Broken {
    pub seq: i64,
    pub reason: String,
}

/// A point in the chain, written `SEQ:HASH`: an event's sequence number and its hash.
///
/// Because every hash covers the one before it, a head kept somewhere the database's
/// owner cannot write (the service logs it; `audit verify` prints it) pins every event
/// up to `SEQ`: a later trail that ends before `SEQ`, or holds another event there, was
/// truncated or rewritten, however carefully its hashes were recomputed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head {
    seq: i64,
    /// 64 lowercase hex digits.
    hash: String,
}

/// Why a `SEQ:HASH` text is not a head.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadHead {
    #[error(
        "expected SEQ:HASH, an event number and its 64-digit hash as `audit verify` prints them after `head:`"
    )]
    Shape,
    #[error("'{0}' is not an event number (a whole number, 0 or more)")]
    Seq(String),
    #[error("the hash must be 64 hexadecimal digits, got {0} characters")]
    HashLength(usize),
    #[error("the hash must be 64 hexadecimal digits, found {0:?}")]
    HashDigit(char),
    #[error("event 0 is the head of an empty trail: its hash is 64 zeros")]
    Genesis,
}

impl Head {
    /// The head of an empty trail: event 0 with the genesis hash.
    pub fn genesis() -> Head {
        Head {
            seq: 0,
            hash: GENESIS_HASH.to_owned(),
        }
    }

    /// A head from an event number and its hash (as stored, or as typed).
    pub fn new(seq: i64, hash: &str) -> Result<Head, BadHead> {
        if seq < 0 {
            return Err(BadHead::Seq(seq.to_string()));
        }
        if hash.len() != 64 {
            return Err(BadHead::HashLength(hash.chars().count()));
        }
        if let Some(c) = hash.chars().find(|c| !c.is_ascii_hexdigit()) {
            return Err(BadHead::HashDigit(c));
        }
        let hash = hash.to_ascii_lowercase();
        if seq == 0 && hash != GENESIS_HASH {
            return Err(BadHead::Genesis);
        }
        Ok(Head { seq, hash })
    }

    pub fn seq(&self) -> i64 {
        self.seq
    }

    pub fn hash(&self) -> &str {
        &self.hash
    }
}

impl std::str::FromStr for Head {
    type Err = BadHead;

    fn from_str(s: &str) -> Result<Head, BadHead> {
        let (seq, hash) = s.trim().split_once(':').ok_or(BadHead::Shape)?;
        let seq_num: i64 = seq
            .parse()
            .map_err(|_| BadHead::Seq(seq.chars().take(40).collect()))?;
        Head::new(seq_num, hash)
    }
}

impl std::fmt::Display for Head {
    /// `SEQ:HASH`, exactly what `--expect-head` takes.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.seq, self.hash)
    }
}

/// An intact chain: how many events it holds and its head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    pub events: u64,
    pub head: Head,
}

/// Checks rows in sequence order; returns how many were verified and the last one's
/// head.
pub fn verify<'a>(rows: impl IntoIterator<Item = &'a StoredRow>) -> Result<Verified, Broken> {
    let mut head = Head::genesis();
    let mut n = 0;
    for r in rows {
        if r.seq != head.seq + 1 {
            return Err(Broken {
                seq: r.seq,
                reason: format!("expected event {} next (a row is missing)", head.seq + 1),
            });
        }
        if r.prev_hash != head.hash {
            return Err(Broken {
                seq: r.seq,
                reason: "its prev_hash does not match the previous event's hash".into(),
            });
        }
        let recomputed = chain_hash(
            &r.prev_hash,
            r.seq,
            r.at,
            r.confirmation_id.as_deref(),
            &r.kind,
            &r.actor,
            &r.detail_text,
        );
        if recomputed != r.hash {
            return Err(Broken {
                seq: r.seq,
                reason: "its content does not match its hash (the row was edited)".into(),
            });
        }
        // `recomputed` is a hex SHA-256, so this is a valid head.
        head = Head {
            seq: r.seq,
            hash: recomputed,
        };
        n += 1;
    }
    Ok(Verified { events: n, head })
}

/// How a trail differs from a head recorded earlier.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HeadMismatch {
    #[error(
        "audit trail truncated: it ends at event {last}, but event {} was recorded earlier (expected head {expected}): events were removed from its end",
        expected.seq
    )]
    Truncated { expected: Head, last: i64 },
    #[error(
        "audit trail rewritten: event {} has hash {found}, not {} as recorded earlier (expected head {expected}): the events up to it are not the ones that were there",
        expected.seq,
        expected.hash
    )]
    Rewritten { expected: Head, found: String },
    #[error(
        "audit trail rewritten: event {} of the expected head {expected} is missing",
        expected.seq
    )]
    Missing { expected: Head },
}

/// Checks that `rows` (in sequence order) still hold the `expected` head: its event is
/// there with its hash. Events after it are the trail's later growth.
pub fn check_head(rows: &[StoredRow], expected: &Head) -> Result<(), HeadMismatch> {
    if expected.seq == 0 {
        // The empty trail is the start of every trail.
        return Ok(());
    }
    match rows.binary_search_by_key(&expected.seq, |r| r.seq) {
        Ok(i) if rows[i].hash == expected.hash => Ok(()),
        Ok(i) => Err(HeadMismatch::Rewritten {
            expected: expected.clone(),
            found: rows[i].hash.clone(),
        }),
        Err(_) => {
            let last = rows.last().map_or(0, |r| r.seq);
            if last < expected.seq {
                Err(HeadMismatch::Truncated {
                    expected: expected.clone(),
                    last,
                })
            } else {
                Err(HeadMismatch::Missing {
                    expected: expected.clone(),
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(prev: &str, seq: i64, detail: &str) -> StoredRow {
        let at = OffsetDateTime::from_unix_timestamp(1_800_000_000).unwrap();
        let hash = chain_hash(prev, seq, at, Some("cf_x"), "requested", "agent:a", detail);
        StoredRow {
            seq,
            at,
            confirmation_id: Some("cf_x".into()),
            kind: "requested".into(),
            actor: "agent:a".into(),
            detail_text: detail.into(),
            prev_hash: prev.into(),
            hash,
        }
    }

    fn chain(n: i64) -> Vec<StoredRow> {
        let mut rows: Vec<StoredRow> = Vec::new();
        for seq in 1..=n {
            let prev = rows
                .last()
                .map_or(GENESIS_HASH.to_owned(), |r| r.hash.clone());
            rows.push(row(&prev, seq, &format!("{{\"n\":{seq}}}")));
        }
        rows
    }

    #[test]
    fn an_intact_chain_verifies_and_reports_its_head() {
        let rows = chain(5);
        let v = verify(&rows).unwrap();
        assert_eq!(v.events, 5);
        assert_eq!(v.head, Head::new(5, &rows[4].hash).unwrap());
        assert_eq!(
            verify(&[]),
            Ok(Verified {
                events: 0,
                head: Head::genesis()
            })
        );
    }

    #[test]
    fn an_edited_row_is_named() {
        let mut rows = chain(5);
        rows[2].detail_text = "{\"n\":99}".into();
        assert_eq!(verify(&rows).unwrap_err().seq, 3);
    }

    #[test]
    fn a_deleted_row_is_named() {
        let mut rows = chain(5);
        rows.remove(1);
        assert_eq!(verify(&rows).unwrap_err().seq, 3);
    }

    #[test]
    fn a_rehashed_edit_still_breaks_the_link_to_the_next_row() {
        let mut rows = chain(5);
        rows[2].detail_text = "{\"n\":99}".into();
        rows[2].hash = chain_hash(
            &rows[2].prev_hash,
            3,
            rows[2].at,
            Some("cf_x"),
            "requested",
            "agent:a",
            "{\"n\":99}",
        );
        assert_eq!(verify(&rows).unwrap_err().seq, 4);
    }

    fn hash_of(c: char) -> String {
        std::iter::repeat_n(c, 64).collect()
    }

    #[test]
    fn a_head_reads_and_writes_as_seq_colon_hash() {
        let text = format!("12:{}", hash_of('a'));
        let head: Head = text.parse().unwrap();
        assert_eq!((head.seq(), head.hash()), (12, hash_of('a').as_str()));
        assert_eq!(head.to_string(), text);
        // Hex case does not matter; surrounding blanks from a paste neither.
        let upper: Head = format!(" 12:{} \n", hash_of('A')).parse().unwrap();
        assert_eq!(upper, head);
        assert_eq!(
            format!("0:{GENESIS_HASH}").parse::<Head>(),
            Ok(Head::genesis())
        );
    }

    #[test]
    fn a_bad_head_says_what_is_wrong_with_it() {
        let bad = |s: &str| s.parse::<Head>().unwrap_err();
        assert_eq!(bad("12"), BadHead::Shape);
        assert_eq!(bad(""), BadHead::Shape);
        assert_eq!(
            bad(&format!("x:{}", hash_of('a'))),
            BadHead::Seq("x".into())
        );
        assert_eq!(
            bad(&format!("-1:{}", hash_of('a'))),
            BadHead::Seq("-1".into())
        );
        assert_eq!(bad("3:abc"), BadHead::HashLength(3));
        assert_eq!(bad(&format!("3:{}", hash_of('g'))), BadHead::HashDigit('g'));
        assert_eq!(bad(&format!("0:{}", hash_of('1'))), BadHead::Genesis);
        assert!(bad("12").to_string().contains("SEQ:HASH"));
    }

    #[test]
    fn an_expected_head_catches_a_truncated_or_rewritten_trail() {
        let rows = chain(5);
        let at3 = Head::new(3, &rows[2].hash).unwrap();
        assert_eq!(check_head(&rows, &at3), Ok(()), "later events are growth");
        assert_eq!(check_head(&rows[..3], &at3), Ok(()));
        assert_eq!(check_head(&[], &Head::genesis()), Ok(()));

        let err = check_head(&rows[..2], &at3).unwrap_err();
        assert_eq!(
            err,
            HeadMismatch::Truncated {
                expected: at3.clone(),
                last: 2
            }
        );
        assert!(err.to_string().contains("truncated"), "{err}");

        let other = Head::new(3, &hash_of('b')).unwrap();
        let err = check_head(&rows, &other).unwrap_err();
        assert!(matches!(err, HeadMismatch::Rewritten { .. }));
        assert!(err.to_string().contains(&rows[2].hash), "{err}");

        let mut holed = rows.clone();
        holed.remove(2);
        assert!(matches!(
            check_head(&holed, &at3),
            Err(HeadMismatch::Missing { .. })
        ));
    }
}
