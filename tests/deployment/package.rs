//! The Debian package (`cargo deb`), as an administrator meets it, in a fresh Debian
//! bookworm: installed by `dpkg -i` with only the dependencies it declares; its user,
//! directories and modes as docs/operations.md states them; `check-config` run as its
//! user; an upgrade that keeps an edited configuration; `remove` keeping the
//! configuration and the database and `purge` deleting them (the user stays); its
//! unit accepted by `systemd-analyze verify`, scored as the docs say; and the unit run
//! by a real systemd (PID 1 of a container made of that tree, on the host's network),
//! hardening and all, through one approval against the fake Bot API.
//!
//! Needs root (chroot, mount), a Docker engine, the package built twice (a version and
//! a rebuilt later one) and a bookworm tree: `scripts/package-check` makes them and runs
//! this with `HITL_REQUIRE_PACKAGE=1` (then a missing piece fails the test). Without
//! that variable the tests say why they skip.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::app::*;
use crate::support::fake_telegram::FakeTelegram;
use crate::support::process::free_port;

const STATE: &str = "/var/lib/hitl-telegram";
const CONFIG: &str = "/etc/hitl-telegram/config.toml";
const SECRETS: &str = "/etc/hitl-telegram/hitl-telegram.env";
const UNIT: &str = "/lib/systemd/system/hitl-telegram.service";

/// What `scripts/package-check` made.
struct Setup {
    /// `hitl-telegram_<version>_amd64.deb`.
    deb: PathBuf,
    /// The same package rebuilt with a later version, for the upgrade.
    next: PathBuf,
    /// A tarball of a pristine `debootstrap --variant=minbase bookworm` tree.
    rootfs: PathBuf,
}

fn setup() -> Option<Setup> {
    let required = std::env::var("HITL_REQUIRE_PACKAGE").is_ok_and(|v| v == "1");
    let var = |name: &str| std::env::var_os(name).map(PathBuf::from);
    match (
        var("HITL_PACKAGE_DEB"),
        var("HITL_PACKAGE_DEB_NEXT"),
        var("HITL_PACKAGE_ROOTFS"),
    ) {
        (Some(deb), Some(next), Some(rootfs)) => Some(Setup { deb, next, rootfs }),
        _ if required => panic!(
            "HITL_REQUIRE_PACKAGE=1 but HITL_PACKAGE_DEB, HITL_PACKAGE_DEB_NEXT or \
             HITL_PACKAGE_ROOTFS is unset"
        ),
        _ => {
            eprintln!("skipping: run scripts/package-check for the package tests");
            None
        }
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A control field of a package file, read on the host.
fn control_field(deb: &Path, field: &str) -> String {
    let out = Command::new("dpkg-deb")
        .arg("-f")
        .arg(deb)
        .arg(field)
        .output()
        .expect("dpkg-deb");
    assert!(
        out.status.success(),
        "dpkg-deb -f {field}: {}",
        text(&out.stderr)
    );
    text(&out.stdout).trim().to_owned()
}

/// The package names of a `Depends` field (`libc6 (>= 2.34), passwd` → `libc6`,
/// `passwd`; of alternatives, the first).
fn depended_on(depends: &str) -> Vec<String> {
    depends
        .split(',')
        .filter_map(|clause| clause.split('|').next())
        .filter_map(|first| first.split_whitespace().next())
        .map(str::to_owned)
        .collect()
}

/// A fresh Debian bookworm in a directory of its own, entered with chroot; removed
/// (with its /proc unmounted) when dropped.
struct Tree {
    root: PathBuf,
}

impl Tree {
    fn fresh(setup: &Setup) -> Tree {
        let root = tempfile::Builder::new()
            .prefix("hitl-package.")
            .tempdir_in("/var/tmp")
            .expect("a directory for the tree")
            .keep();
        let tree = Tree { root };
        let status = Command::new("tar")
            .arg("-xf")
            .arg(&setup.rootfs)
            .arg("-C")
            .arg(&tree.root)
            .status()
            .expect("tar");
        assert!(status.success(), "unpacking the bookworm tree");
        std::fs::copy("/etc/resolv.conf", tree.root.join("etc/resolv.conf"))
            .expect("resolv.conf into the tree");
        let status = Command::new("mount")
            .args(["-t", "proc", "proc"])
            .arg(tree.root.join("proc"))
            .status()
            .expect("mount");
        assert!(status.success(), "mounting /proc in the tree");
        tree
    }

    /// `script` by /bin/sh inside the tree, as `user` (a uid:gid) or root.
    fn run_as(&self, user: Option<&str>, script: &str) -> Output {
        let mut command = Command::new("chroot");
        if let Some(user) = user {
            command.arg(format!("--userspec={user}"));
        }
        command
            .arg(&self.root)
            .args(["/bin/sh", "-c", &format!("set -e\n{script}")])
            .env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .env("DEBIAN_FRONTEND", "noninteractive")
            .env("LANG", "C")
            .env("HOME", "/root")
            .output()
            .expect("chroot")
    }

    /// `script` as root; its output, or a panic saying what failed.
    fn ok(&self, what: &str, script: &str) -> String {
        self.ok_as(None, what, script)
    }

    fn ok_as(&self, user: Option<&str>, what: &str, script: &str) -> String {
        let out = self.run_as(user, script);
        assert!(
            out.status.success(),
            "{what}: {}\nstdout:\n{}\nstderr:\n{}",
            out.status,
            text(&out.stdout),
            text(&out.stderr)
        );
        text(&out.stdout)
    }

    /// Copies a host file into the tree's /tmp; its path inside.
    fn put(&self, file: &Path) -> String {
        let name = file.file_name().expect("a file name").to_string_lossy();
        std::fs::copy(file, self.root.join("tmp").join(&*name)).expect("copy into the tree");
        format!("/tmp/{name}")
    }

    /// `owner group mode` of a path inside the tree.
    fn stat(&self, path: &str) -> String {
        self.ok("stat", &format!("stat -c '%U %G %a' {path}"))
            .trim()
            .to_owned()
    }

    fn exists(&self, path: &str) -> bool {
        self.run_as(None, &format!("test -e {path}"))
            .status
            .success()
    }

    /// The package's dependencies, as declared and nothing else, then the package by
    /// `dpkg -i`.
    fn install(&self, setup: &Setup) {
        let declared = depended_on(&control_field(&setup.deb, "Depends"));
        self.ok(
            "apt-get update",
            "apt-get -o APT::Sandbox::User=root update -qq",
        );
        self.ok(
            "installing the declared dependencies",
            &format!(
                "apt-get -o APT::Sandbox::User=root install -y -qq --no-install-recommends {}",
                declared.join(" ")
            ),
        );
        let deb = self.put(&setup.deb);
        self.ok("dpkg -i", &format!("dpkg -i {deb}"));
    }

    /// A fresh tree with the package installed ([`Tree::install`]), then systemd.
    fn with_systemd(setup: &Setup) -> Tree {
        let tree = Tree::fresh(setup);
        tree.install(setup);
        tree.ok(
            "installing systemd",
            "apt-get -o APT::Sandbox::User=root install -y -qq --no-install-recommends systemd",
        );
        tree
    }

    /// `uid:gid` of the package's user.
    fn service_user(&self) -> String {
        let line = self.ok("getent passwd", "getent passwd hitl-telegram");
        let fields: Vec<&str> = line.trim().split(':').collect();
        format!("{}:{}", fields[2], fields[3])
    }
}

impl Drop for Tree {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.root.join("proc")).status();
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// Runs `hitl-telegram COMMAND` as the service's user with the secrets file's variables,
/// as the unit does.
fn as_the_service(tree: &Tree, user: &str, what: &str, command: &str) -> String {
    tree.ok_as(
        Some(user),
        what,
        &format!(
            "cd {STATE}\nset -a\n. {SECRETS}\nset +a\n\
             exec hitl-telegram {command} --config {CONFIG}"
        ),
    )
}

/// What `dpkg -i` left: the version, the user, the modes docs/operations.md states and
/// the conffiles. Returns the user's `uid:gid`.
fn installed_as_documented(tree: &Tree, setup: &Setup) -> String {
    let version = control_field(&setup.deb, "Version");
    let said = tree.ok("--version", "hitl-telegram --version");
    assert!(
        said.starts_with(&format!("hitl-telegram {version} (commit ")),
        "{said}"
    );

    // The user: a system account without a login, its home the state directory.
    let account = tree.ok("getent passwd", "getent passwd hitl-telegram");
    let fields: Vec<&str> = account.trim().split(':').collect();
    assert!(
        fields[2].parse::<u32>().unwrap() < 1000,
        "a system uid: {account}"
    );
    assert_eq!(
        (fields[5], fields[6]),
        (STATE, "/usr/sbin/nologin"),
        "{account}"
    );
    let user = tree.service_user();
    // The modes docs/operations.md states.
    for (path, expected) in [
        ("/usr/bin/hitl-telegram", "root root 755"),
        (CONFIG, "root root 644"),
        (SECRETS, "root hitl-telegram 640"),
        (STATE, "hitl-telegram hitl-telegram 750"),
        (UNIT, "root root 644"),
    ] {
        assert_eq!(tree.stat(path), expected, "{path}");
    }
    let conffiles = tree.ok("conffiles", "dpkg-query -W -f='${Conffiles}' hitl-telegram");
    assert!(
        conffiles.contains(CONFIG) && conffiles.contains(SECRETS),
        "{conffiles}"
    );
    user
}

/// Whether config.toml still holds the edit the test made.
fn edited(tree: &Tree) -> bool {
    tree.run_as(
        None,
        &format!("grep -qx 'poll_timeout_seconds = 12' {CONFIG}"),
    )
    .status
    .success()
}

/// An upgrade to a rebuilt package keeps the edited configuration, the secrets (and
/// their mode) and the database.
fn upgrade_keeps_the_edits(tree: &Tree, setup: &Setup, user: &str) {
    tree.ok(
        "editing the configuration",
        &format!(
            "grep -qx 'poll_timeout_seconds = 10' {CONFIG}\n\
             sed -i 's/^poll_timeout_seconds = 10$/poll_timeout_seconds = 12/' {CONFIG}"
        ),
    );
    let next = tree.put(&setup.next);
    tree.ok("upgrading with dpkg -i", &format!("dpkg -i {next}"));
    let installed = tree.ok("version", "dpkg-query -W -f='${Version}' hitl-telegram");
    assert_eq!(installed, control_field(&setup.next, "Version"));
    assert_ne!(
        installed,
        control_field(&setup.deb, "Version"),
        "the upgrade's package has a later version"
    );
    assert!(
        edited(tree),
        "the upgrade replaced the edited configuration"
    );
    assert!(
        !tree.exists(&format!("{CONFIG}.dpkg-dist")),
        "nothing to merge by hand"
    );
    assert_eq!(tree.stat(SECRETS), "root hitl-telegram 640");
    tree.ok(
        "the secrets kept",
        &format!("grep -q package-check-token {SECRETS}"),
    );
    as_the_service(tree, user, "check-config after the upgrade", "check-config");
    assert!(
        tree.exists(&format!("{STATE}/hitl.db")),
        "the upgrade lost the database"
    );
}

#[test]
fn the_package_installs_upgrades_keeping_edits_removes_and_purges_in_a_fresh_bookworm() {
    let Some(setup) = setup() else { return };
    let tree = Tree::fresh(&setup);
    tree.install(&setup);
    let user = installed_as_documented(&tree, &setup);

    // The administrator fills in the secrets; the service's user reads them and checks
    // the configuration, and creates its database; nobody else reads the secrets.
    tree.ok(
        "filling in the secrets",
        &format!(
            "printf 'TELEGRAM_BOT_TOKEN=123456:package-check-token\\n\
             HITL_AGENT_WORKDAY_TOKEN=package-check-agent-token-0123\\n' >> {SECRETS}"
        ),
    );
    let checked = as_the_service(
        &tree,
        &user,
        "check-config as the service's user",
        "check-config",
    );
    assert!(checked.contains("configuration OK"), "{checked}");
    as_the_service(&tree, &user, "migrate as the service's user", "migrate");
    assert_eq!(
        tree.stat(&format!("{STATE}/hitl.db")),
        "hitl-telegram hitl-telegram 600"
    );
    let nobody = tree.run_as(Some("65534:65534"), &format!("cat {SECRETS}"));
    assert!(!nobody.status.success(), "another user read the secrets");

    upgrade_keeps_the_edits(&tree, &setup, &user);

    // remove: the program goes; the configuration and the database stay.
    tree.ok("apt-get remove", "apt-get remove -y -qq hitl-telegram");
    assert!(!tree.exists("/usr/bin/hitl-telegram"));
    assert!(!tree.exists(UNIT));
    assert!(edited(&tree), "remove lost the edited configuration");
    assert!(tree.exists(SECRETS) && tree.exists(&format!("{STATE}/hitl.db")));
    let status = tree.ok(
        "status",
        "dpkg-query -W -f='${db:Status-Abbrev}' hitl-telegram",
    );
    assert_eq!(status.trim(), "rc", "removed, configuration kept");

    // purge: the configuration and the database go; the user stays.
    tree.ok("apt-get purge", "apt-get purge -y -qq hitl-telegram");
    assert!(
        !tree.exists("/etc/hitl-telegram"),
        "purge kept /etc/hitl-telegram"
    );
    assert!(!tree.exists(STATE), "purge kept the database");
    assert_eq!(tree.service_user(), user, "the user stays after purge");
}

#[test]
fn the_unit_passes_systemd_analyze_verify_and_scores_as_the_docs_say() {
    let Some(setup) = setup() else { return };
    let tree = Tree::with_systemd(&setup);
    let verify = tree.run_as(None, &format!("systemd-analyze verify {UNIT}"));
    assert!(
        verify.status.success() && text(&verify.stderr).trim().is_empty(),
        "systemd-analyze verify: {}\n{}{}",
        verify.status,
        text(&verify.stdout),
        text(&verify.stderr)
    );
    let security = tree.ok(
        "systemd-analyze security",
        &format!("systemd-analyze security --offline=true --no-pager {UNIT} 2>&1"),
    );
    let score = security
        .lines()
        .find_map(|line| {
            line.split("Overall exposure level for hitl-telegram.service: ")
                .nth(1)
        })
        .unwrap_or_else(|| panic!("no overall exposure level in:\n{security}"));
    // Without the terminal's colour codes: `1.9 OK` and an emoji.
    let score: String = score
        .split_whitespace()
        .take(2)
        .collect::<Vec<_>>()
        .join(" ");
    eprintln!("systemd-analyze security: {score}\n{security}");
    let docs =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/operations.md"))
            .unwrap();
    let stated = format!("`systemd-analyze security` scores the unit **{score}**");
    assert!(
        docs.contains(&stated),
        "docs/operations.md should say \"{stated}\" (the score bookworm's systemd gives)"
    );
}

/// A container whose PID 1 is the tree's systemd, on the host's network (the tree
/// without what is mounted in it, /proc); removed, with its image, when dropped. What systemd needs of the engine: its cgroups (the host's,
/// writable) and a tmpfs /run; SYS_ADMIN for the namespaces the unit's hardening makes
/// (`--privileged` is refused in these sandboxes, and not needed).
struct Booted {
    name: String,
}

impl Booted {
    fn start(tree: &Tree) -> Booted {
        let name = format!("hitl-package-check-{}", std::process::id());
        let import = format!(
            "tar -C {} --one-file-system -c . | docker import - {name}:systemd >/dev/null",
            tree.root.display()
        );
        let imported = Command::new("sh").args(["-c", &import]).status().unwrap();
        assert!(imported.success(), "docker import of the tree");
        let booted = Booted { name };
        let run = docker(&[
            "run",
            "-d",
            "--name",
            &booted.name,
            "--network",
            "host",
            "--cgroupns",
            "host",
            "--cap-add",
            "SYS_ADMIN",
            "--security-opt",
            "seccomp=unconfined",
            "--security-opt",
            "apparmor=unconfined",
            "-v",
            "/sys/fs/cgroup:/sys/fs/cgroup:rw",
            "--tmpfs",
            "/run",
            "--tmpfs",
            "/run/lock",
            &format!("{}:systemd", booted.name),
            "/lib/systemd/systemd",
        ]);
        assert!(run.status.success(), "docker run: {}", text(&run.stderr));
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let state = booted.exec("systemctl is-system-running");
            let said = text(&state.stdout);
            if matches!(said.trim(), "running" | "degraded") {
                break;
            }
            assert!(Instant::now() < deadline, "systemd did not come up: {said}");
            std::thread::sleep(Duration::from_millis(250));
        }
        booted
    }

    fn exec(&self, script: &str) -> Output {
        docker(&["exec", &self.name, "sh", "-c", script])
    }

    fn ok(&self, what: &str, script: &str) -> String {
        let out = self.exec(script);
        assert!(
            out.status.success(),
            "{what}: {}\n{}{}\njournal:\n{}",
            out.status,
            text(&out.stdout),
            text(&out.stderr),
            self.journal()
        );
        text(&out.stdout)
    }

    fn journal(&self) -> String {
        text(
            &self
                .exec("journalctl -u hitl-telegram --no-pager -o cat")
                .stdout,
        )
    }
}

impl Drop for Booted {
    fn drop(&mut self) {
        docker(&["rm", "-f", &self.name]);
        docker(&["rmi", &format!("{}:systemd", self.name)]);
    }
}

fn docker(args: &[&str]) -> Output {
    Command::new("docker").args(args).output().expect("docker")
}

/// The test suite's configuration (the fake Bot API, the test routes and agents) in the
/// package's place, listening on `port`, with its secrets in the package's secrets file.
fn configure_for_the_fake(tree: &Tree, telegram: &FakeTelegram, port: u16) {
    let config = settings_toml(
        &telegram.api_url(),
        "sqlite:///var/lib/hitl-telegram/hitl.db",
    )
    .replace("{CALLBACK_PREFIX}", DEFAULT_CALLBACK_PREFIX)
    .replace(
        "bind = \"127.0.0.1:0\"",
        &format!("bind = \"127.0.0.1:{port}\""),
    );
    std::fs::write(tree.root.join(CONFIG.trim_start_matches('/')), config).unwrap();
    let mut secrets: Vec<String> = test_env()
        .into_iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    secrets.sort();
    secrets.push("NO_PROXY=127.0.0.1".into());
    std::fs::write(
        tree.root.join(SECRETS.trim_start_matches('/')),
        secrets.join("\n") + "\n",
    )
    .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn the_unit_runs_the_service_under_systemd_and_an_approval_goes_through() {
    let Some(setup) = setup() else { return };
    let tree = Tree::with_systemd(&setup);
    let telegram = FakeTelegram::start_with_token(BOT_TOKEN).await;
    let port = free_port();
    configure_for_the_fake(&tree, &telegram, port);
    let booted = Booted::start(&tree);
    booted.ok("systemctl start", "systemctl start hitl-telegram");

    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let base = format!("http://127.0.0.1:{port}");
    let deadline = Instant::now() + Duration::from_secs(30);
    let health: Value = loop {
        match client.get(format!("{base}/healthz")).send().await {
            Ok(r) if r.status().is_success() => break r.json().await.unwrap(),
            _ if Instant::now() < deadline => tokio::time::sleep(Duration::from_millis(200)).await,
            other => panic!("no /healthz: {other:?}\n{}", booted.journal()),
        }
    };
    assert_eq!(health["version"], env!("CARGO_PKG_VERSION"), "{health}");

    // One approval, as an agent and an operator make it.
    let asked = ask_blocking(
        &client,
        &base,
        json!({"tool": "deploy", "params": {"service": "billing"}}),
    );
    let message = telegram.wait_for_messages(1).await.remove(0);
    telegram.tap(OPS_CHAT, message.message_id, "✅ Approve", alice());
    let (status, record) = asked.await.unwrap();
    assert_eq!(
        (status.as_u16(), &record["status"]),
        (200, &json!("confirmed")),
        "{record}"
    );

    // SIGHUP reloads, and the service stays; a stop is clean.
    booted.ok("systemctl reload", "systemctl reload hitl-telegram");
    std::thread::sleep(Duration::from_millis(500));
    booted.ok(
        "still active after reload",
        "systemctl is-active hitl-telegram",
    );
    booted.ok("systemctl stop", "systemctl stop hitl-telegram");
    let result = booted.ok(
        "the stop's result",
        "systemctl show -p Result -p ExecMainStatus hitl-telegram",
    );
    assert!(
        result.contains("Result=success") && result.contains("ExecMainStatus=0"),
        "{result}"
    );
    let journal = booted.journal();
    assert!(journal.contains("hitl-telegram is serving"), "{journal}");
    for secret in [BOT_TOKEN, TOKEN_A] {
        assert!(!journal.contains(secret), "the journal holds {secret:?}");
    }
    // The database was written where the unit lets it write, as the service's user.
    let database = booted.ok(
        "the database",
        "stat -c '%U %a' /var/lib/hitl-telegram/hitl.db",
    );
    assert_eq!(database.trim(), "hitl-telegram 600");
}
