//! The layers of the crate's header (`lib.rs`), held by a test: every `crate::…` path in
//! code, every `use crate::{a::…, b}` group and every `super::` chain that leaves its
//! module is checked against [`LAYERS`] and [`EXCEPTIONS`], and each one that runs
//! against them is named by file and line with the rule it breaks.
//!
//! A reader, not a parser: it skips comments, strings and character literals, follows
//! inline `mod name { … }` blocks (so `super::` in a `mod tests` is resolved right), and
//! reads paths from the tokens that are left. Doc comments are skipped too: an intra-doc
//! link is no import.

/// The layers, lowest first, and the top-level modules of each. A module may name any
/// module of a lower layer; of its own layer only itself (see [`EXCEPTIONS`]).
const LAYERS: &[(&str, &[&str])] = &[
    ("domain", &["domain"]),
    ("storage", &["storage"]),
    (
        "support",
        &[
            "client",
            "config",
            "metrics",
            "release",
            "scheduler",
            "telemetry",
        ],
    ),
    ("service", &["service"]),
    (
        "adapter",
        &[
            "api",
            "audit_head",
            "hook",
            "cli",
            "gateway",
            "mcp",
            "outbox",
            "redis_bridge",
            "telegram",
        ],
    ),
    // `layers` is this test, compiled for tests only.
    ("app", &["app", "layers"]),
    ("program", &["program"]),
];

/// Where a module may name another of its own layer, as `lib.rs` states with the reason:
/// (the module, the path it may name, whatever lies under that path).
const EXCEPTIONS: &[(&str, &str)] = &[
    // Routes served by the agents' HTTP server: one error format, one connection pool,
    // one bearer-token check.
    ("mcp", "api::error"),
    ("mcp", "api::extract"),
    ("mcp", "api::serve"),
    ("gateway", "api::error"),
    ("gateway", "api::extract"),
    ("gateway", "api::serve"),
    ("telegram", "api::error"),
    ("telegram", "api::serve"),
    // A webhook's body is the record as the API returns it.
    ("outbox", "api::record"),
];

/// Paths that only some modules may name, though the layers would let more: (the path,
/// the modules that may name it, why). The store's union is for the pipeline that uses
/// every role and for the wiring that hands each part its own; every other part takes
/// the one role it uses.
const RESERVED: &[(&str, &[&str], &str)] = &[(
    "storage::Store",
    &["storage", "service", "app", "program"],
    "the store's union is for the service and the wiring: take the role you use \
     (storage::Questions, storage::Outbox, storage::Audit, …)",
)];

/// The layer of a top-level module, as its index in [`LAYERS`] and its name.
fn layer_of(module: &str) -> Option<(usize, &'static str)> {
    LAYERS
        .iter()
        .enumerate()
        .find(|(_, (_, modules))| modules.contains(&module))
        .map(|(rank, (name, _))| (rank, *name))
}

/// Why `from` (a file's module path) may not name `to` (a path from the crate's root),
/// or `None` when it may.
fn offence(from: &[String], to: &[String]) -> Option<String> {
    let (Some(from_top), Some(to_top)) = (from.first(), to.first()) else {
        return None;
    };
    let reserved = RESERVED
        .iter()
        .find(|(path, _, _)| path.split("::").eq(to.iter().map(String::as_str)));
    if let Some((_, modules, why)) = reserved
        && !modules.contains(&from_top.as_str())
    {
        return Some(format!("`{from_top}` names {}: {why}", to.join("::")));
    }
    if from_top == to_top {
        return None;
    }
    let Some((from_rank, from_layer)) = layer_of(from_top) else {
        return Some(format!(
            "`{from_top}` is in no layer: place it in lib.rs's header and in layers::LAYERS"
        ));
    };
    let Some((to_rank, to_layer)) = layer_of(to_top) else {
        return Some(format!(
            "`{to_top}` is in no layer: place it in lib.rs's header and in layers::LAYERS"
        ));
    };
    if to_rank < from_rank {
        return None;
    }
    let allowed = EXCEPTIONS.iter().any(|(module, prefix)| {
        module == from_top
            && prefix
                .split("::")
                .zip(to.iter().map(String::as_str).chain(std::iter::repeat("")))
                .all(|(want, got)| want == got)
    });
    if allowed {
        return None;
    }
    Some(if to_rank == from_rank {
        format!(
            "{from_layer} `{from_top}` names {to_layer} `{to_top}`: modules of one layer do \
             not import each other, except as lib.rs states"
        )
    } else {
        format!(
            "{from_layer} `{from_top}` names {to_layer} `{to_top}`, a layer above its own: \
             imports go down only (domain <- storage <- support <- service <- adapter <- app)"
        )
    })
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Ident(String),
    /// `::`
    PathSep,
    Punct(char),
}

fn is_ident_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// Skips a string literal whose opening `"` is at `i`; returns the index after it.
fn skip_string(chars: &[char], mut i: usize, line: &mut usize) -> usize {
    i += 1;
    while i < chars.len() {
        match chars[i] {
            '\\' => {
                if chars.get(i + 1) == Some(&'\n') {
                    *line += 1;
                }
                i += 2;
            }
            '"' => return i + 1,
            c => {
                if c == '\n' {
                    *line += 1;
                }
                i += 1;
            }
        }
    }
    i
}

/// The tokens of `source` with their lines, without comments and literals' contents.
fn tokens(source: &str) -> Vec<(usize, Token)> {
    let chars: Vec<char> = source.chars().collect();
    let at = |i: usize| chars.get(i).copied();
    let mut out = Vec::new();
    let mut line = 1;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '\n' {
            line += 1;
            i += 1;
        } else if c.is_whitespace() {
            i += 1;
        } else if c == '/' && at(i + 1) == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && at(i + 1) == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && at(i + 1) == Some('*') {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && at(i + 1) == Some('/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    if chars[i] == '\n' {
                        line += 1;
                    }
                    i += 1;
                }
            }
        } else if c == '"' {
            i = skip_string(&chars, i, &mut line);
        } else if c == '\'' {
            i = skip_quote(&chars, i);
        } else if c == ':' && at(i + 1) == Some(':') {
            out.push((line, Token::PathSep));
            i += 2;
        } else if is_ident_char(c) {
            let start = i;
            while i < chars.len() && is_ident_char(chars[i]) {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            if matches!(word.as_str(), "r" | "br" | "cr") && matches!(at(i), Some('"' | '#')) {
                let mut j = i;
                while at(j) == Some('#') {
                    j += 1;
                }
                let hashes = j - i;
                if at(j) == Some('"') {
                    // A raw string: up to a `"` followed by as many `#`.
                    j += 1;
                    while j < chars.len() {
                        if chars[j] == '"' && (1..=hashes).all(|k| at(j + k) == Some('#')) {
                            j += 1 + hashes;
                            break;
                        }
                        if chars[j] == '\n' {
                            line += 1;
                        }
                        j += 1;
                    }
                    i = j;
                    continue;
                }
                if word == "r" && hashes == 1 {
                    // A raw identifier, `r#type`.
                    let start = j;
                    while j < chars.len() && is_ident_char(chars[j]) {
                        j += 1;
                    }
                    out.push((line, Token::Ident(chars[start..j].iter().collect())));
                    i = j;
                    continue;
                }
            }
            if matches!(word.as_str(), "b" | "c") && at(i) == Some('"') {
                i = skip_string(&chars, i, &mut line);
                continue;
            }
            if word == "b" && at(i) == Some('\'') {
                i = skip_quote(&chars, i);
                continue;
            }
            out.push((line, Token::Ident(word)));
        } else {
            out.push((line, Token::Punct(c)));
            i += 1;
        }
    }
    out
}

/// At a `'`: skips a character literal whole, or only the quote of a lifetime or label.
fn skip_quote(chars: &[char], i: usize) -> usize {
    if chars.get(i + 1) == Some(&'\\') {
        let mut j = i + 3;
        while j < chars.len() && chars[j] != '\'' {
            j += 1;
        }
        j + 1
    } else if chars.get(i + 2) == Some(&'\'') {
        i + 3
    } else {
        i + 1
    }
}

/// Reads the path tree at `j` (after a `::`) under `prefix`, pushing each leaf with its
/// line; returns the index after the tree.
fn tree(
    toks: &[(usize, Token)],
    j: usize,
    prefix: &[String],
    out: &mut Vec<(usize, Vec<String>)>,
) -> usize {
    match toks.get(j) {
        Some((line, Token::Ident(name))) => {
            if name == "self" {
                out.push((*line, prefix.to_vec()));
                return j + 1;
            }
            let mut path = prefix.to_vec();
            path.push(name.clone());
            if matches!(toks.get(j + 1), Some((_, Token::PathSep))) {
                tree(toks, j + 2, &path, out)
            } else {
                out.push((*line, path));
                j + 1
            }
        }
        Some((_, Token::Punct('{'))) => {
            let mut k = j + 1;
            loop {
                match toks.get(k) {
                    None => return k,
                    Some((_, Token::Punct('}'))) => return k + 1,
                    Some((_, Token::Punct(','))) => k += 1,
                    Some(_) => {
                        k = tree(toks, k, prefix, out);
                        // Past `as name` and the like, to the next item or the end.
                        while let Some((_, t)) = toks.get(k) {
                            if matches!(t, Token::Punct(',' | '}')) {
                                break;
                            }
                            k += 1;
                        }
                    }
                }
            }
        }
        Some((line, _)) => {
            out.push((*line, prefix.to_vec()));
            j + 1
        }
        None => j,
    }
}

/// Every path of `source` that names something from the crate's root (`crate::…`,
/// `$crate::…`, `super::…`), resolved from the root, with its line. `module` is the
/// file's own module path (`["service", "commands"]` for `src/service/commands.rs`).
fn references(source: &str, module: &[String]) -> Vec<(usize, Vec<String>)> {
    references_in(source, module, &[])
}

/// [`references`] in a crate re-exported under `root` (the domain's crate is `domain`):
/// its `crate::x` is `root::x`.
fn references_in(source: &str, module: &[String], root: &[String]) -> Vec<(usize, Vec<String>)> {
    let toks = tokens(source);
    let mut out = Vec::new();
    // Inline modules open here: their names and the brace depth outside them.
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut depth = 0usize;
    let ident = |k: usize| match toks.get(k) {
        Some((_, Token::Ident(s))) => Some(s.as_str()),
        _ => None,
    };
    let sep = |k: usize| matches!(toks.get(k), Some((_, Token::PathSep)));
    for k in 0..toks.len() {
        match &toks[k].1 {
            Token::Punct('{') => {
                if k >= 2
                    && ident(k - 2) == Some("mod")
                    && let Some(name) = ident(k - 1)
                {
                    inline.push((name.to_owned(), depth));
                }
                depth += 1;
            }
            Token::Punct('}') => {
                depth = depth.saturating_sub(1);
                if inline.last().is_some_and(|(_, d)| *d == depth) {
                    inline.pop();
                }
            }
            Token::Ident(word) if (k == 0 || !sep(k - 1)) && sep(k + 1) => {
                if word == "crate" {
                    tree(&toks, k + 2, root, &mut out);
                } else if word == "super" {
                    let mut here: Vec<String> = module.to_vec();
                    here.extend(inline.iter().map(|(name, _)| name.clone()));
                    let mut j = k;
                    let mut ups = 0;
                    while ident(j) == Some("super") && sep(j + 1) {
                        ups += 1;
                        j += 2;
                    }
                    if ups <= here.len() {
                        here.truncate(here.len() - ups);
                        tree(&toks, j, &here, &mut out);
                    }
                }
            }
            _ => {}
        }
    }
    out
}

/// The offences of one file: `file:line: crate::path: the rule`.
fn check(file: &str, module: &[String], source: &str) -> Vec<String> {
    check_in(file, module, source, &[])
}

/// [`check`] for a file of a crate re-exported under `root`.
fn check_in(file: &str, module: &[String], source: &str, root: &[String]) -> Vec<String> {
    references_in(source, module, root)
        .into_iter()
        .filter_map(|(line, path)| {
            offence(module, &path)
                .map(|why| format!("{file}:{line}: crate::{}: {why}", path.join("::")))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    use super::*;

    fn module(path: &str) -> Vec<String> {
        path.split("::").map(str::to_owned).collect()
    }

    /// Every `.rs` file under `dir`, sorted.
    fn files(dir: &Path, out: &mut Vec<PathBuf>) {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
            .map(|e| e.expect("directory entry").path())
            .collect();
        entries.sort();
        for path in entries {
            if path.is_dir() {
                files(&path, out);
            } else if path.extension().is_some_and(|x| x == "rs") {
                out.push(path);
            }
        }
    }

    /// The sources read: the crate's `src/`, and the domain's crate, which `lib.rs`
    /// re-exports as `domain` (its `lib.rs` is the module `domain`).
    const TREES: &[(&str, &str)] = &[("src", ""), ("crates/hitl-domain/src", "domain")];

    #[test]
    fn every_path_in_src_follows_the_layers() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut offences = Vec::new();
        let mut read = 0;
        for (dir, under) in TREES {
            let src = root.join(dir);
            let prefix: Vec<String> = under
                .split("::")
                .filter(|m| !m.is_empty())
                .map(str::to_owned)
                .collect();
            let mut all = Vec::new();
            files(&src, &mut all);
            for path in all {
                let relative = path.strip_prefix(&src).expect("under src");
                let mut module: Vec<String> = relative
                    .with_extension("")
                    .iter()
                    .map(|c| c.to_string_lossy().into_owned())
                    .collect();
                if module.last().is_some_and(|m| m == "mod")
                    || (!prefix.is_empty() && module == ["lib"])
                {
                    module.pop();
                }
                // The crate's root places the layers; `main.rs` is the binary's own crate.
                if module == ["lib"] || module == ["main"] {
                    continue;
                }
                let module: Vec<String> = prefix.iter().cloned().chain(module).collect();
                let source = std::fs::read_to_string(&path).expect("readable source");
                let shown = path.strip_prefix(root).expect("under the crate").display();
                offences.extend(check_in(&shown.to_string(), &module, &source, &prefix));
                read += 1;
            }
        }
        assert!(read > 50, "read only {read} files under {}", root.display());
        assert!(
            offences.is_empty(),
            "{} path(s) run against the layers of lib.rs's header:\n{}",
            offences.len(),
            offences.join("\n")
        );
    }

    #[test]
    fn every_module_of_the_crate_has_a_layer() {
        let lib = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/lib.rs"))
            .expect("readable lib.rs");
        let declared: Vec<&str> = lib
            .lines()
            .filter_map(|l| {
                let l = l.trim();
                let l = l.strip_prefix("pub ").unwrap_or(l);
                // `pub use hitl_domain as domain;`: a crate of the workspace, as a module.
                if let Some(reexport) = l.strip_prefix("use hitl_") {
                    return reexport.split(" as ").nth(1)?.strip_suffix(';');
                }
                l.strip_prefix("mod ")?.strip_suffix(';')
            })
            .collect();
        assert!(declared.len() > 10, "read {declared:?} from lib.rs");
        let placed: Vec<&str> = LAYERS.iter().flat_map(|(_, m)| m.iter().copied()).collect();
        for m in &declared {
            assert!(
                layer_of(m).is_some(),
                "`{m}` is in no layer of layers::LAYERS"
            );
        }
        for m in &placed {
            assert!(
                declared.contains(m),
                "layers::LAYERS places `{m}`, which lib.rs does not declare"
            );
        }
    }

    #[test]
    fn use_groups_are_read_leaf_by_leaf_with_their_lines() {
        let source = "use crate::{\n    config::Route,\n    domain::{audit, ids::ConfirmationId as Id},\n    telegram::commands::Command,\n};\n";
        let found = references(source, &module("service::commands"));
        let paths: Vec<(usize, String)> =
            found.into_iter().map(|(l, p)| (l, p.join("::"))).collect();
        assert_eq!(
            paths,
            [
                (2, "config::Route".to_owned()),
                (3, "domain::audit".to_owned()),
                (3, "domain::ids::ConfirmationId".to_owned()),
                (4, "telegram::commands::Command".to_owned()),
            ]
        );
        assert_eq!(
            check(
                "src/service/commands.rs",
                &module("service::commands"),
                source
            ),
            [
                "src/service/commands.rs:4: crate::telegram::commands::Command: service `service` \
              names adapter `telegram`, a layer above its own: imports go down only (domain <- \
              storage <- support <- service <- adapter <- app)"
            ]
        );
    }

    #[test]
    fn paths_in_code_count_and_comments_strings_and_characters_do_not() {
        let source = r##"
            // crate::telegram::render in a comment
            /* crate::telegram /* nested */ crate::api */
            /// [`crate::telegram::client`] in a doc link
            fn f<'a>(x: &'a str) -> usize {
                let _ = ("crate::api::MAX", r#"crate::api"#, b"crate::api", '"', '\'', b'x');
                'outer: loop { break 'outer; }
                crate::api::MAX_BODY_BYTES + x.len()
            }
            pub(crate) fn g() {}
            pub(super) fn h() {}
            pub(in crate::redis_bridge) fn i() {}
        "##;
        let offences = check("src/redis_bridge.rs", &module("redis_bridge"), source);
        assert_eq!(offences.len(), 1, "{offences:?}");
        assert!(
            offences[0].starts_with(
                "src/redis_bridge.rs:8: crate::api::MAX_BODY_BYTES: adapter `redis_bridge` names \
                 adapter `api`: modules of one layer do not import each other"
            ),
            "{offences:?}"
        );
    }

    #[test]
    fn super_chains_are_resolved_from_the_module_they_are_written_in() {
        let source = "use super::rows::Row;\nuse super::super::config::OutboxSettings;\n\
                      mod tests {\n    use super::*;\n    use super::super::super::telegram::X;\n}\n\
                      fn after() { super::super::domain::ids::f(); }\n";
        let offences = check("src/storage/sqlite.rs", &module("storage::sqlite"), source);
        let lines: Vec<&str> = offences
            .iter()
            .map(|o| o.split(": ").next().unwrap())
            .collect();
        assert_eq!(
            lines,
            ["src/storage/sqlite.rs:2", "src/storage/sqlite.rs:5"],
            "{offences:?}"
        );
        assert!(
            offences[0].contains(
                "crate::config::OutboxSettings: storage `storage` names support `config`"
            )
        );
        assert!(offences[1].contains("crate::telegram::X"));
    }

    #[test]
    fn only_the_stated_exceptions_pass_between_adapters() {
        let source = "use crate::api::serve::mark_authenticated;\nuse crate::api::error::ApiError;\n\
                      use crate::api::confirmations::MAX_PARAM_KEYS;\nuse crate::api::{self};\n\
                      fn f() { crate::telegram::x(); }\n";
        let offences = check("src/mcp.rs", &module("mcp"), source);
        let lines: Vec<&str> = offences
            .iter()
            .map(|o| o.split(": ").next().unwrap())
            .collect();
        assert_eq!(
            lines,
            ["src/mcp.rs:3", "src/mcp.rs:4", "src/mcp.rs:5"],
            "{offences:?}"
        );
        // Downwards is always allowed; a module's own paths too.
        let source = "use crate::service::Service;\nuse crate::domain::text;\nuse crate::mcp::x;\n";
        assert!(check("src/mcp.rs", &module("mcp"), source).is_empty());
    }

    #[test]
    fn only_the_service_and_the_wiring_name_the_stores_union() {
        let source =
            "use crate::storage::{Outbox, Store};\nfn f(s: &dyn crate::storage::Audit) {}\n";
        let offences = check("src/outbox.rs", &module("outbox"), source);
        assert_eq!(offences.len(), 1, "{offences:?}");
        assert!(
            offences[0].starts_with("src/outbox.rs:1: crate::storage::Store: `outbox` names storage::Store: the store's union is for the service"),
            "{offences:?}"
        );
        for (file, name) in [("src/service/mod.rs", "service::x"), ("src/app.rs", "app")] {
            assert!(check(file, &module(name), source).is_empty(), "{file}");
        }
    }

    #[test]
    fn a_module_in_no_layer_is_named() {
        let offences = check("src/new.rs", &module("new"), "use crate::domain::text;\n");
        assert_eq!(
            offences,
            [
                "src/new.rs:1: crate::domain::text: `new` is in no layer: place it in lib.rs's \
              header and in layers::LAYERS"
            ]
        );
    }
}
