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

/// Start `cmd` (its standard streams as the caller set them) and wait up to 60 s until `ready`
/// says it serves; `None` when it exited first (a server that lost the race for its port) or never
/// became ready (it is stopped then). The test servers of every crate start this way.
///
/// # Panics
/// When `cmd` cannot be started at all.
pub fn start_until(mut cmd: std::process::Command, what: &str, mut ready: impl FnMut() -> bool) -> Option<std::process::Child> {
    let mut child = cmd.spawn().unwrap_or_else(|e| panic!("start {what}: {e}"));
    let t0 = std::time::Instant::now();
    while t0.elapsed() < std::time::Duration::from_secs(60) {
        if let Ok(Some(_)) = child.try_wait() {
            return None;
        }
        if ready() {
            return Some(child);
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
    None
}

/// Whether something accepts connections on `port` of 127.0.0.1.
pub fn listening(port: u16) -> bool {
    std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
}
