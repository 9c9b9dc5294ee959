//! The documentation holds together: every relative link and `#anchor` resolves; the
//! README is a front page (at most 350 lines) that reads in the order a newcomer needs
//! it (quick start, group route, deploy, then a map of `docs/` in the order configure,
//! operate, API, integrations), links every page of `docs/`, none of which runs past 600
//! lines, and holds the deploy steps that `tests/deployment/compose.rs` runs for real; and what the
//! docs say agrees with what is there: every kind of audit event the code writes is
//! named, every `pg_dump` writes an owner-only file, and the compose file's commented
//! blocks clash with none of its own names.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

const DOCS: &[&str] = &[
    "README.md",
    "CONTRIBUTING.md",
    "BENCHMARKS.md",
    "CHANGELOG.md",
    "docs/aiparrot.md",
    "docs/architecture.md",
    "docs/configuration.md",
    "docs/gateway.md",
    "docs/hooks.md",
    "docs/http-api.md",
    "docs/integrations.md",
    "docs/operations.md",
    "docs/operator-guide.md",
    "docs/rules.md",
    "docs/security.md",
    "clients/python/README.md",
    "fuzz/README.md",
    "tests/support/README.md",
];

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The lines outside fenced code blocks.
fn prose(text: &str) -> Vec<&str> {
    let mut fenced = false;
    text.lines()
        .filter(|line| {
            if line.trim_start().starts_with("```") {
                fenced = !fenced;
                return false;
            }
            !fenced
        })
        .collect()
}

/// The headings' anchors as GitHub makes them: lowercase, spaces to `-`, every other
/// character but letters, digits, `-` and `_` dropped; repeats get `-1`, `-2`, ….
fn anchors(text: &str) -> HashSet<String> {
    let mut seen = HashSet::new();
    for line in prose(text) {
        let Some(title) = line.strip_prefix('#') else {
            continue;
        };
        let title = title.trim_start_matches('#');
        if !title.starts_with(' ') {
            continue;
        }
        let slug: String = title
            .trim()
            .to_lowercase()
            .chars()
            .filter_map(|c| match c {
                ' ' => Some('-'),
                c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
                _ => None,
            })
            .collect();
        let mut unique = slug.clone();
        let mut n = 0;
        while !seen.insert(unique.clone()) {
            n += 1;
            unique = format!("{slug}-{n}");
        }
    }
    seen
}

/// Every `](target)` of a Markdown link in the prose.
fn link_targets(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in prose(text) {
        let mut rest = line;
        while let Some(i) = rest.find("](") {
            rest = &rest[i + 2..];
            if let Some(end) = rest.find(')') {
                out.push(rest[..end].to_owned());
                rest = &rest[end..];
            }
        }
    }
    out
}

#[test]
fn every_relative_link_and_anchor_in_the_docs_resolves() {
    let mut broken = Vec::new();
    for doc in DOCS {
        let path = root().join(doc);
        let text = read(&path);
        for target in link_targets(&text) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (file, anchor) = match target.split_once('#') {
                Some((f, a)) => (f, Some(a)),
                None => (target.as_str(), None),
            };
            let linked: PathBuf = if file.is_empty() {
                path.clone()
            } else {
                path.parent().unwrap().join(file)
            };
            if !linked.exists() {
                broken.push(format!("{doc}: {target}: no such file"));
                continue;
            }
            if let Some(anchor) = anchor
                && linked.extension().is_some_and(|e| e == "md")
                && !anchors(&read(&linked)).contains(anchor)
            {
                broken.push(format!("{doc}: {target}: no such heading"));
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

/// The byte offset of the level-2 heading `title` in the README.
fn section(readme: &str, title: &str) -> usize {
    readme
        .find(&format!("\n## {title}\n"))
        .unwrap_or_else(|| panic!("the README has no section \"## {title}\""))
}

#[test]
fn the_readme_goes_from_quick_start_to_a_group_route_to_deployment_before_the_reference() {
    let readme = read(&root().join("README.md"));
    let order = [
        "The flow in 30 seconds",
        "Quick start",
        "Set up a group route",
        "Deploy with docker compose",
        "Install on a Linux host",
        "Documentation",
        "Run the tests (one command)",
    ];
    let at: Vec<usize> = order.iter().map(|t| section(&readme, t)).collect();
    for (pair, titles) in at.windows(2).zip(order.windows(2)) {
        assert!(
            pair[0] < pair[1],
            "\"{}\" must come before \"{}\"",
            titles[0],
            titles[1]
        );
    }
    // The quick start exports the token before `ask` uses it.
    let quick = &readme[at[1]..at[2]];
    let export = quick
        .find("export HITL_DEMO_AGENT_TOKEN")
        .expect("the export");
    let ask = quick.find("-- ask ").expect("the ask example");
    assert!(export < ask, "the export must come before ask");
    // The group route starts with /start in the group.
    assert!(readme[at[2]..at[3]].contains("/start@your_bot"));
    // The map of docs/ goes on in the same order: configure, operate, the API, the
    // integrations.
    let map = &readme[at[5]..at[6]];
    let pages = [
        "(docs/configuration.md)",
        "(docs/operator-guide.md)",
        "(docs/operations.md)",
        "(docs/http-api.md)",
        "(docs/integrations.md)",
    ];
    let mut from = 0;
    for page in pages {
        let i = map[from..]
            .find(page)
            .unwrap_or_else(|| panic!("the README's map lacks (or misorders) {page}"));
        from += i + page.len();
    }
}

#[test]
fn the_readme_is_a_front_page_that_links_every_page_of_the_docs() {
    let readme = read(&root().join("README.md"));
    let lines = readme.lines().count();
    assert!(
        lines <= 350,
        "the README has {lines} lines: keep it a front page (at most 350) and move the \
         rest to docs/"
    );
    let linked: HashSet<String> = link_targets(&readme)
        .into_iter()
        .map(|t| t.split('#').next().unwrap_or_default().to_owned())
        .collect();
    // The pages are the Markdown files (docs/images/ holds what they show).
    let mut pages: Vec<String> = std::fs::read_dir(root().join("docs"))
        .expect("docs/")
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".md"))
        .map(|name| format!("docs/{name}"))
        .collect();
    pages.sort();
    let unlinked: Vec<&String> = pages.iter().filter(|p| !linked.contains(*p)).collect();
    assert!(
        unlinked.is_empty(),
        "the README's map of docs/ lacks {unlinked:?}"
    );
    // Every page is checked for broken links too.
    let unchecked: Vec<&String> = pages
        .iter()
        .filter(|p| !DOCS.contains(&p.as_str()))
        .collect();
    assert!(unchecked.is_empty(), "add {unchecked:?} to DOCS");
    // The test command that .ci/run calls literally.
    let tests = &readme[section(&readme, "Run the tests (one command)")..];
    assert!(
        tests.starts_with("\n## Run the tests (one command)\n\n```sh\ncargo test --locked\n```\n"),
        "the README's test command must stay `cargo test --locked`"
    );
}

#[test]
fn no_page_of_the_docs_runs_past_600_lines() {
    let mut long = Vec::new();
    for entry in std::fs::read_dir(root().join("docs")).expect("docs/") {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "md") {
            continue;
        }
        let lines = read(&path).lines().count();
        if lines > 600 {
            long.push(format!("{}: {lines} lines", path.display()));
        }
    }
    assert!(
        long.is_empty(),
        "split these pages by reader (at most about 600 lines each):\n{}",
        long.join("\n")
    );
}

#[test]
fn the_readme_deploy_steps_are_the_ones_the_compose_check_runs() {
    let readme = read(&root().join("README.md"));
    let operations = read(&root().join("docs/operations.md"));
    let deploy = &readme[section(&readme, "Deploy with docker compose")..];
    let steps = [
        "cp .env.example .env",
        "cp config/default.toml config/local.toml",
        "docker compose build",
        "docker compose run --rm hitl-telegram check-config",
        "docker compose up -d",
    ];
    let mut from = 0;
    for step in steps {
        let i = deploy[from..]
            .find(step)
            .unwrap_or_else(|| panic!("the deploy steps lack (or misorder) `{step}`"));
        from += i + step.len();
    }
    for backup in [
        "docker compose exec hitl-telegram hitl-telegram backup /app/data/backup.db",
        "docker cp \"$(docker compose ps -q hitl-telegram)\":/app/data/backup.db",
        "docker compose exec hitl-telegram rm /app/data/backup.db",
    ] {
        assert!(
            operations.contains(backup),
            "the backup copy-out (docs/operations.md) lacks `{backup}`"
        );
    }
    // What tests/deployment/compose.rs mounts and runs is what the compose file says.
    let compose = read(&root().join("docker-compose.yml"));
    assert!(compose.contains("./config/local.toml:/app/config/local.toml:ro"));
    assert!(compose.contains("HITL_CONFIG: \"/app/config/local.toml\""));
    let ignored = read(&root().join(".gitignore"));
    assert!(ignored.lines().any(|l| l == "/config/local.toml"));
}

/// The string literals of `src` that follow `marker` (`kind: "` ...), up to their `"`.
fn literals_after<'a>(src: &'a str, marker: &str) -> Vec<&'a str> {
    src.match_indices(marker)
        .filter_map(|(at, m)| {
            let rest = &src[at + m.len()..];
            rest.find('"').map(|end| &rest[..end])
        })
        .collect()
}

#[test]
fn the_audit_trail_page_names_every_kind_of_audit_event() {
    let audit = read(&root().join("crates/hitl-domain/src/audit.rs"));
    let steps = read(&root().join("crates/hitl-domain/src/question.rs"));
    let mut kinds: Vec<&str> = literals_after(&audit, "kind: \"");
    // `webhook()` picks its kind with an `if`.
    kinds.extend(literals_after(
        &audit,
        "kind: if delivered {\n            \"",
    ));
    kinds.extend(literals_after(&audit, "} else {\n            \""));
    // The steps of a pending question are events of their own kind (`audit::step`).
    let step_impl = &steps[steps.find("impl Step").expect("impl Step")..];
    let step_impl = &step_impl[..step_impl.find("\n}\n").expect("its end")];
    kinds.extend(literals_after(step_impl, "=> \""));
    kinds.sort_unstable();
    kinds.dedup();
    for expected in [
        "answered",
        "copy_found",
        "webhook_given_up",
        "reason_requested",
    ] {
        assert!(kinds.contains(&expected), "{expected} not found: {kinds:?}");
    }
    let page = read(&root().join("docs/operations.md"));
    let from = page
        .find("\n## Audit trail\n")
        .expect("the Audit trail section of docs/operations.md");
    let len = page[from + 1..]
        .find("\n## ")
        .map_or(page.len() - from, |n| n + 1);
    let trail = &page[from..from + len];
    let missing: Vec<&&str> = kinds
        .iter()
        .filter(|k| !trail.contains(&format!("`{k}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "the Audit trail of docs/operations.md lacks these kinds: {missing:?}"
    );
}

#[test]
fn every_pg_dump_in_the_docs_writes_an_owner_only_file() {
    for doc in DOCS {
        let text = read(&root().join(doc));
        for line in text.lines().filter(|l| l.contains("pg_dump")) {
            let writes = line.contains("--file") || line.contains(" > ") || line.contains(" -f ");
            assert!(
                !writes || line.contains("umask 077"),
                "{doc}: a pg_dump that writes a file must do it owner-only (umask 077): {line}"
            );
        }
    }
}

#[test]
fn the_compose_files_commented_blocks_clash_with_no_name_it_defines() {
    let compose = read(&root().join("docker-compose.yml"));
    // A name is a key at the second level (a service, a config, a volume).
    let names = |lines: Vec<&str>| -> Vec<String> {
        lines
            .into_iter()
            .filter(|l| l.starts_with("  ") && !l.starts_with("   ") && l.ends_with(':'))
            .map(|l| l.trim().trim_end_matches(':').to_owned())
            .filter(|n| !n.contains(' '))
            .collect()
    };
    let live = names(compose.lines().filter(|l| !l.starts_with('#')).collect());
    assert!(live.iter().any(|n| n == "caddy"), "{live:?}");
    let commented = names(
        compose
            .lines()
            .filter_map(|l| l.strip_prefix("# "))
            .collect(),
    );
    assert!(
        commented.iter().any(|n| n == "caddy-single"),
        "the single box's Caddy block: {commented:?}"
    );
    let clashes: Vec<&String> = commented.iter().filter(|n| live.contains(n)).collect();
    assert!(
        clashes.is_empty(),
        "uncommented, these would clash with the file's own: {clashes:?}"
    );
}
