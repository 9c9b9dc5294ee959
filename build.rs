//! Two things the compiler cannot find out alone:
//!
//! - The migrations are embedded by `sqlx::migrate!`, which cannot tell Cargo that it
//!   read the `migrations/` folder: without this, adding a migration would not rebuild
//!   the crate, and a stale binary would run without it.
//! - The commit the binary is built from (`HITL_COMMIT`, read by `src/release.rs`):
//!   `HITL_BUILD_COMMIT` when set (the Docker build has no `.git`; the compose check and
//!   the package check pass it), else `git rev-parse`, else `unknown`. Cargo reruns this
//!   when HEAD or the branch it names moves, so a new commit is never reported as the
//!   old one.
use std::path::Path;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=migrations");
    println!("cargo:rerun-if-env-changed=HITL_BUILD_COMMIT");
    let commit = std::env::var("HITL_BUILD_COMMIT")
        .ok()
        .filter(|c| is_commit(c))
        .or_else(git_commit)
        .unwrap_or_else(|| "unknown".to_owned());
    println!("cargo:rustc-env=HITL_COMMIT={commit}");
}

/// A commit name as `git rev-parse --short` prints it: hex digits only, so nothing
/// outside can put text into `--version` or `/healthz`.
fn is_commit(c: &str) -> bool {
    (7..=40).contains(&c.len()) && c.bytes().all(|b| b.is_ascii_hexdigit())
}

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status.success().then_some(())?;
    Some(String::from_utf8(out.stdout).ok()?.trim().to_owned())
}

/// HEAD's commit, watching the files that move with it. Only files that exist are
/// watched: Cargo reruns a script on every build when a watched path is missing.
fn git_commit() -> Option<String> {
    let commit = git(&["rev-parse", "--short=12", "HEAD"]).filter(|c| is_commit(c))?;
    let mut watched = vec![git(&["rev-parse", "--git-path", "HEAD"])?];
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        watched.extend(git(&["rev-parse", "--git-path", &branch]));
    }
    watched.extend(git(&["rev-parse", "--git-path", "packed-refs"]));
    for path in watched.iter().filter(|p| Path::new(p).exists()) {
        println!("cargo:rerun-if-changed={path}");
    }
    Some(commit)
}
