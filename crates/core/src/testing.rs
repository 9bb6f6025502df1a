//! What the test suites of every crate share (not for sheaf's own use): a free port on
//! 127.0.0.1, and how a test that cannot run here says so. On a developer's machine a missing
//! prerequisite (root, a filesystem feature) is a note on stderr; under CI (`CI` set, as `.ci/run`
//! runs) it fails the test, so that a suite never passes by skipping what it exists to check.

/// A port on 127.0.0.1 that was free a moment ago.
///
/// # Panics
/// When no port can be bound at all.
pub fn free_port() -> u16 {
    crate::host::free_port().expect("a free port on 127.0.0.1")
}

/// Whether this run is CI's.
pub fn in_ci() -> bool {
    std::env::var_os("CI").is_some_and(|v| !v.is_empty() && v != "false" && v != "0")
}

/// A test's prerequisite is missing (`why`): fail under CI, else say that the test was skipped.
/// The caller returns after it.
///
/// # Panics
/// Under CI, always.
pub fn missing(why: &str) {
    assert!(!in_ci(), "a prerequisite of this test is missing in CI: {why}");
    eprintln!("skipped: {why}");
}
