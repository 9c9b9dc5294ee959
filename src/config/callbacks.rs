//! Where a webhook may be sent: the rules an agent's `callback_url_prefixes` (when the
//! config is checked) and a request's `callback_url` (when it is asked) both follow.
//!
//! They would sit best with the outbox that delivers to these URLs (`crate::outbox`),
//! but that module imports `crate::config` (its `[webhooks]` settings, and the service,
//! which imports the config), so the config checks importing them from there would
//! close an import cycle. They stay here, with no import of their own from the crate,
//! until that is untangled.

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
pub fn callback_path_refusal(raw: &str, url: &reqwest::Url) -> Option<String> {
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
pub fn link_local_refusal(url: &reqwest::Url) -> Option<&'static str> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::testing::{BASE, env};
    use crate::config::{Config, Settings};

    #[test]
    fn encoded_slashes_backslashes_and_dots_in_a_callback_path_are_refused_in_any_case() {
        let refused = |raw: &str| {
            let url = reqwest::Url::parse(raw).unwrap();
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
            reqwest::Url::parse("https://a.example/hooks/%2E%2E/admin")
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

        let toml = BASE.replace(
            r#"routes = ["ops"]"#,
            "routes = [\"ops\"]\nwebhook_secret_env = \"HOOK\"\ncallback_url_prefixes = [\"https://a.example/hooks\"]",
        );
        let env = |k: &str| {
            if k == "HOOK" {
                Some("s".to_owned())
            } else {
                env(k)
            }
        };
        let c = Config::from_settings(Settings::from_toml(&toml).unwrap(), &env).unwrap();
        let ok = |u: &str| c.agents[0].allows_callback(&reqwest::Url::parse(u).unwrap());
        assert!(ok("https://a.example/hooks/x"));
        assert!(!ok("https://a.example/hooks/..%2Fadmin"));

        let with_prefix = |p: &str| {
            let toml = BASE.replace(
                r#"routes = ["ops"]"#,
                &format!(
                    "routes = [\"ops\"]\nwebhook_secret_env = \"HOOK\"\ncallback_url_prefixes = [\"{p}\"]"
                ),
            );
            Config::from_settings(Settings::from_toml(&toml).unwrap(), &env)
                .map(|_| ())
                .map_err(|e| e.to_string())
        };
        let e = with_prefix("https://a.example/hooks%2Fx").unwrap_err();
        assert!(
            e.contains("agents[0].callback_url_prefixes") && e.contains("%2F"),
            "{e}"
        );
        assert!(with_prefix("https://a.example/hooks?x=%2F").is_ok());
    }

    #[test]
    fn callback_prefixes_to_link_local_and_metadata_addresses_are_refused_unless_the_agent_opts_in()
    {
        let env = |k: &str| {
            if k == "HOOK" {
                Some("s".to_owned())
            } else {
                env(k)
            }
        };
        let with_prefix = |p: &str, opt_in: bool| {
            let toml = BASE.replace(
                r#"routes = ["ops"]"#,
                &format!(
                    "routes = [\"ops\"]\nwebhook_secret_env = \"HOOK\"\n\
                     callback_url_prefixes = [\"https://a.example/hooks\", \"{p}\"]\n\
                     allow_link_local_callbacks = {opt_in}"
                ),
            );
            Config::from_settings(Settings::from_toml(&toml).unwrap(), &env)
                .map(|_| ())
                .map_err(|e| e.to_string())
        };
        for (prefix, what) in [
            ("http://169.254.169.254", "a cloud metadata address"),
            (
                "http://169.254.169.254/latest/meta-data/",
                "a cloud metadata address",
            ),
            // The same address written as one number, in hex, or IPv4-mapped.
            ("http://2852039166/", "a cloud metadata address"),
            ("http://0xa9fea9fe/", "a cloud metadata address"),
            (
                "http://[::ffff:169.254.169.254]/",
                "a cloud metadata address",
            ),
            ("http://[fd00:ec2::254]/", "a cloud metadata address"),
            ("http://100.100.100.200/", "a cloud metadata address"),
            (
                "http://169.254.170.2/v2/credentials",
                "a link-local address",
            ),
            ("https://169.254.1.1:8443/hooks", "a link-local address"),
            ("http://[fe80::1]/", "a link-local address"),
            ("http://[febf::1]:8080/", "a link-local address"),
            ("http://metadata.google.internal/", "a cloud metadata host"),
            ("http://METADATA.google.internal./", "a cloud metadata host"),
            ("http://metadata/", "a cloud metadata host"),
            ("http://instance-data/", "a cloud metadata host"),
        ] {
            let e = with_prefix(prefix, false).expect_err(prefix);
            assert!(
                e.contains("agents[0].callback_url_prefixes")
                    && e.contains(&format!("'{prefix}' reaches {what}"))
                    && e.contains("agents[0].allow_link_local_callbacks = true"),
                "{prefix}: {e}"
            );
            assert_eq!(
                with_prefix(prefix, true),
                Ok(()),
                "{prefix} with the opt-in"
            );
        }
        for prefix in [
            "http://127.0.0.1:9/hooks",
            "http://10.0.0.5/hooks",
            "http://169.253.255.255/",
            "http://169.255.0.1/",
            "http://[fec0::1]/",
            "http://[fd00:ec2::253]/",
            "https://metadata.example.com/",
            "https://hooks.internal/",
        ] {
            assert_eq!(with_prefix(prefix, false), Ok(()), "{prefix}");
        }
    }
}
