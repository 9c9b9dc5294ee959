//! The migrations are embedded by `sqlx::migrate!`, which cannot tell Cargo that it
//! read the `migrations/` folder: without this, adding a migration would not rebuild
//! the crate, and a stale binary would run without it.
fn main() {
    println!("cargo:rerun-if-changed=migrations");
}
