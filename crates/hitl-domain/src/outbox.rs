//! The outbox's rules, pure: where a webhook may be delivered and how a delivery is
//! signed. The worker that delivers (`crate::outbox`) sits above the configuration and
//! the service; these rules sit below both, because the configuration checks an agent's
//! `callback_url_prefixes` with them when it loads and the API checks a request's
//! `callback_url` with them when it is asked.
//!
//! Where: an http(s) URL under one of the agent's prefixes ([`under_prefix`]), with no
//! percent-encoded separator in its path ([`callback_path_refusal`]), and no prefix on a
//! link-local or cloud metadata address unless the agent opts in
//! ([`link_local_refusal`]). How: [`sign`].

use hmac::{Hmac, Mac};
use sha2::Sha256;
pub use url::Url;

pub const SIGNATURE_HEADER: &str = "X-Hitl-Signature";
pub const TIMESTAMP_HEADER: &str = "X-Hitl-Timestamp";
pub const DELIVERY_HEADER: &str = "X-Hitl-Delivery";

/// `sha256=<hex>` of `"<timestamp>.<delivery_id>.<body>"` under `secret`.
///
/// `X-Hitl-Signature: sha256=<hex HMAC-SHA256(secret,
/// "<timestamp>.<delivery_id>.<body>")>`, where `<timestamp>` is the
/// `X-Hitl-Timestamp` header (Unix seconds), `<delivery_id>` the `X-Hitl-Delivery` header
/// and `<body>` the raw request body. Binding the timestamp lets a receiver refuse
/// replays of old deliveries; binding the delivery id means a replay cannot pass as a
/// new delivery under a fresh id (receivers de-duplicate on it). Delivery ids are `wh_`
/// and hex, so the dots separate the three parts unambiguously.
pub fn sign(secret: &[u8], timestamp: i64, delivery_id: &str, body: &[u8]) -> String {
    // HMAC accepts keys of any length; `new_from_slice` cannot fail for it.
    let mut mac = match Hmac::<Sha256>::new_from_slice(secret) {
        Ok(m) => m,
        Err(_) => unreachable!("HMAC takes keys of any length"),
    };
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(delivery_id.as_bytes());
    mac.update(b".");
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

/// Whether `url` lies under one of `prefixes`: same scheme, host and port, and a path
/// under the prefix's path at a `/` boundary, so the prefix `https://a.example/hooks`
/// admits neither `https://a.example.evil.net/...` nor `https://a.example/hooks-evil`.
/// A URL with credentials, or with an encoded separator in its path, is under none.
pub fn under_prefix(url: &Url, prefixes: &[Url]) -> bool {
    if !url.username().is_empty() || url.password().is_some() {
        return false;
    }
    if encoded_separator(url.path()).is_some() {
        return false;
    }
    prefixes.iter().any(|p| {
        p.scheme() == url.scheme()
            && p.host_str() == url.host_str()
            && p.port_or_known_default() == url.port_or_known_default()
            && {
                let base = p.path();
                let path = url.path();
                base.ends_with('/') && path.starts_with(base)
                    || path == base
                    || path.starts_with(&format!("{base}/"))
            }
    })
}

/// The first percent-encoded `/`, `\` or `.` (`%2F`, `%5C`, `%2E`, in any case) in
/// `path`, as written. A callback URL's path must hold none: the prefix check compares
/// the encoded path, but a receiver (or a proxy in front of it) that decodes before
/// routing would see another path, such as `/hooks/..%2Fadmin` becoming `/admin`.
pub fn encoded_separator(path: &str) -> Option<&str> {
    path.as_bytes().windows(3).enumerate().find_map(|(i, w)| {
        let code = [w[1].to_ascii_uppercase(), w[2].to_ascii_uppercase()];
        (w[0] == b'%' && matches!(&code, b"2F" | b"5C" | b"2E")).then(|| &path[i..i + 3])
    })
}

/// Why the callback URL `raw` (parsed as `url`) is refused for what its path holds, if
/// it is: a percent-encoded `/`, `\` or `.` (see [`encoded_separator`]). The text as
/// written is checked as well as the parsed path, because parsing resolves encoded dot
/// segments (`/hooks/%2e%2e/x` parses as `/x`).
pub fn callback_path_refusal(raw: &str, url: &Url) -> Option<String> {
    let code = encoded_separator(raw_path(raw)).or_else(|| encoded_separator(url.path()))?;
    Some(format!(
        "must not hold {code} in its path: percent-encoded '/', '\\' and '.' (%2F, %5C, \
         %2E, in any case) are refused, because a receiver that decodes them would route \
         the delivery to another path than the one the agent's callback_url_prefixes allow"
    ))
}

/// Host names that are cloud metadata services (Google Cloud's, AWS's `instance-data`,
/// Tencent Cloud's, Equinix Metal's), whose answers include the machine's credentials:
/// each resolves to a link-local or otherwise internal address.
const METADATA_HOSTS: &[&str] = &[
    "metadata.google.internal",
    "metadata.goog",
    "metadata",
    "instance-data",
    "instance-data.ec2.internal",
    "metadata.tencentyun.com",
    "metadata.platformequinix.com",
];

/// Why a callback prefix's host is one a webhook must not reach unless the agent opts in
/// (`allow_link_local_callbacks`), if it is: a link-local address (169.254.0.0/16,
/// fe80::/10, also as an IPv4-mapped IPv6 address), a cloud metadata address
/// (169.254.169.254 is link-local; AWS's fd00:ec2::254, Alibaba Cloud's 100.100.100.200)
/// or one of [`METADATA_HOSTS`]. A webhook is a POST whose URL an agent chooses under the
/// prefix: one to a metadata service is the classic server-side request forgery. The
/// host is the parsed one, so `http://2852039166/` (169.254.169.254 as one number) is
/// caught too; a name that merely resolves to such an address is not.
pub fn link_local_refusal(url: &Url) -> Option<&'static str> {
    use std::net::{Ipv4Addr, Ipv6Addr};
    let v4 = |ip: Ipv4Addr| {
        if ip == Ipv4Addr::new(169, 254, 169, 254) || ip == Ipv4Addr::new(100, 100, 100, 200) {
            Some("a cloud metadata address")
        } else if ip.is_link_local() {
            Some("a link-local address")
        } else {
            None
        }
    };
    // The parser has normalised the host: IPv4 in dotted form, IPv6 in brackets.
    let host = url.host_str()?;
    if let Some(v6) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        let ip: Ipv6Addr = v6.parse().ok()?;
        return if let Some(mapped) = ip.to_ipv4_mapped() {
            v4(mapped)
        } else if ip == Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254) {
            Some("a cloud metadata address")
        } else if ip.segments()[0] & 0xffc0 == 0xfe80 {
            Some("a link-local address")
        } else {
            None
        };
    }
    if let Ok(ip) = host.parse::<Ipv4Addr>() {
        return v4(ip);
    }
    let name = host.strip_suffix('.').unwrap_or(host).to_ascii_lowercase();
    METADATA_HOSTS
        .contains(&name.as_str())
        .then_some("a cloud metadata host")
}

/// The path of a URL as written: after the scheme and authority, before `?` or `#`.
fn raw_path(raw: &str) -> &str {
    let rest = raw.split_once("://").map_or(raw, |(_, rest)| rest);
    let rest = rest.split(['?', '#']).next().unwrap_or_default();
    rest.find(['/', '\\']).map_or("", |at| &rest[at..])
}

/// URLs and whether each lies under [`UNDER_HOOKS_PREFIX`]: the cases both this module's
/// test and the configuration's (an agent configured with that prefix) check.
#[doc(hidden)]
pub const UNDER_HOOKS: &[(&str, bool)] = &[
    ("https://a.example/hooks", true),
    ("https://a.example/hooks/x", true),
    ("https://a.example/hooks/x?y=1", true),
    ("https://a.example:443/hooks/x", true),
    ("https://a.example/hooks-evil", false),
    ("https://a.example.evil.net/hooks/x", false),
    ("http://a.example/hooks/x", false),
    ("https://a.example:8443/hooks/x", false),
    ("https://user:pw@a.example/hooks/x", false),
    ("https://a.example/hooks/..%2Fadmin", false),
];

/// The prefix [`UNDER_HOOKS`] is about.
#[doc(hidden)]
pub const UNDER_HOOKS_PREFIX: &str = "https://a.example/hooks";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encoded_slashes_backslashes_and_dots_in_a_callback_path_are_refused_in_any_case() {
        let refused = |raw: &str| {
            let url = Url::parse(raw).unwrap();
            callback_path_refusal(raw, &url)
        };
        for raw in [
            "https://a.example/hooks/..%2fadmin",
            "https://a.example/hooks/..%2Fadmin",
            "https://a.example/hooks/..%5cadmin",
            "https://a.example/hooks/..%5Cadmin",
            "https://a.example/hooks/a%2ejson",
            "https://a.example/hooks/%2E%2E/admin",
            "https://a.example/hooks/%2e./admin",
        ] {
            let reason = refused(raw).unwrap_or_else(|| panic!("{raw} was accepted"));
            assert!(reason.starts_with("must not hold %"), "{reason}");
        }
        // Parsing resolves the encoded dot segment: only the text as written shows it.
        assert_eq!(
            Url::parse("https://a.example/hooks/%2E%2E/admin")
                .unwrap()
                .path(),
            "/admin"
        );
        // Elsewhere than the path, and other encodings, are the receiver's business.
        for raw in [
            "https://a.example/hooks/x?next=%2Fadmin",
            "https://a.example/hooks/x#%2e",
            "https://a.example/hooks/a%20b",
            "https://a.example/hooks/%252f",
            "https://a.example/hooks",
        ] {
            assert_eq!(refused(raw), None, "{raw}");
        }
    }

    #[test]
    fn a_callback_url_is_under_a_prefix_only_at_a_path_boundary_on_the_same_origin() {
        let prefixes = [Url::parse(UNDER_HOOKS_PREFIX).unwrap()];
        for &(url, allowed) in UNDER_HOOKS {
            assert_eq!(
                under_prefix(&Url::parse(url).unwrap(), &prefixes),
                allowed,
                "{url}"
            );
        }
    }

    #[test]
    fn the_signature_is_hmac_sha256_of_timestamp_dot_delivery_id_dot_body() {
        // Computed independently with Python:
        // hmac.new(b"secret", b"1700000000.wh_0123456789abcdef0123456789abcdef.{}",
        //          hashlib.sha256).hexdigest()
        let id = "wh_0123456789abcdef0123456789abcdef";
        assert_eq!(
            sign(b"secret", 1_700_000_000, id, b"{}"),
            "sha256=aeec0715ce139d6800149881a67862085f45b3f82eee335374c9c32ecd379e20"
        );
        assert_ne!(
            sign(b"secret", 1_700_000_000, id, b"{}"),
            sign(
                b"secret",
                1_700_000_000,
                "wh_ffffffffffffffffffffffffffffffff",
                b"{}"
            ),
            "another delivery id, another signature"
        );
        // The timestamp, the body and the key count too.
        let s = sign(b"secret", 1_700_000_000, id, b"{}");
        assert_ne!(s, sign(b"secret", 1_700_000_001, id, b"{}"));
        assert_ne!(s, sign(b"secret", 1_700_000_000, id, b"{ }"));
        assert_ne!(s, sign(b"other", 1_700_000_000, id, b"{}"));
    }
}
