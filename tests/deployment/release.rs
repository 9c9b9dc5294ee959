//! One release, one number: the crate, the domain crate, the Python package, the image
//! and CHANGELOG.md carry the same version (what the number promises is CHANGELOG.md's
//! preamble); and the Debian package's configuration is the default one with the
//! database in the package's state directory, so the two never drift.

use std::path::Path;

fn read(relative: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(relative);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The value of the first line of `text` that reads `prefix"VALUE"…`.
fn quoted_after(text: &str, prefix: &str, file: &str) -> String {
    text.lines()
        .find_map(|line| line.strip_prefix(prefix))
        .and_then(|rest| rest.strip_prefix('"'))
        .and_then(|rest| rest.split('"').next())
        .unwrap_or_else(|| panic!("{file}: no line starting {prefix:?}"))
        .to_owned()
}

#[test]
fn the_crates_the_python_package_the_image_and_the_changelog_carry_one_version() {
    let version = env!("CARGO_PKG_VERSION");
    let workspace = read("Cargo.toml");
    let table = workspace
        .split("[workspace.package]")
        .nth(1)
        .expect("Cargo.toml: a [workspace.package] table");
    assert_eq!(quoted_after(table, "version = ", "Cargo.toml"), version);
    assert!(
        read("crates/hitl-domain/Cargo.toml").contains("\nversion.workspace = true\n"),
        "the domain crate takes the workspace's version"
    );
    let lock = read("Cargo.lock");
    for name in ["hitl-telegram", "hitl-domain"] {
        let entry = format!("name = \"{name}\"\nversion = \"{version}\"\n");
        assert!(lock.contains(&entry), "Cargo.lock: {name} is not {version}");
    }
    let python = [
        (
            "clients/python/pyproject.toml",
            quoted_after(
                &read("clients/python/pyproject.toml"),
                "version = ",
                "pyproject",
            ),
        ),
        (
            "clients/python/src/hitl_telegram_channel/__init__.py",
            quoted_after(
                &read("clients/python/src/hitl_telegram_channel/__init__.py"),
                "__version__ = ",
                "__init__.py",
            ),
        ),
    ];
    for (file, said) in python {
        assert_eq!(said, version, "{file}");
    }
    let image = quoted_after(
        &read("Dockerfile"),
        "      org.opencontainers.image.version=",
        "Dockerfile",
    );
    assert_eq!(image, version, "the Dockerfile's image label");
    // The newest release heading after "Unreleased" names this version.
    let changelog = read("CHANGELOG.md");
    let released = changelog
        .lines()
        .filter_map(|line| line.strip_prefix("## ["))
        .find(|heading| !heading.starts_with("Unreleased"))
        .and_then(|heading| heading.split(']').next())
        .expect("CHANGELOG.md: a released version's heading");
    assert_eq!(released, version, "CHANGELOG.md's newest release");
    assert!(
        changelog.contains("## [Unreleased]"),
        "CHANGELOG.md: an Unreleased section"
    );
}

#[test]
fn the_packaged_configuration_is_the_default_with_the_database_in_the_state_directory() {
    let default = read("config/default.toml");
    let from = "url = \"sqlite://data/hitl.db\"";
    let to = "url = \"sqlite:///var/lib/hitl-telegram/hitl.db\"";
    assert_eq!(
        default.matches(from).count(),
        1,
        "config/default.toml: {from}"
    );
    let expected = default.replace(from, to);
    assert!(
        read("packaging/deb/config.toml") == expected,
        "packaging/deb/config.toml is not config/default.toml with {to}: make it again with\n  \
         sed 's|^{from}$|{to}|' config/default.toml > packaging/deb/config.toml"
    );
}
