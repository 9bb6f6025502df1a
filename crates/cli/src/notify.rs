//! systemd's notify protocol for the daemons (`agent`, `wal-receive`) run as `Type=notify`
//! units: READY once they serve, STATUS with what they last did, WATCHDOG while their loop goes
//! round, STOPPING when asked to stop. Outside systemd (no `NOTIFY_SOCKET`) each is nothing.
//! The protocol is `sd-notify`'s; this module decides only when to say what.

use std::time::Duration;

use sd_notify::NotifyState;
use sheaf_core::stop::{Beat, Stop};

/// Tell systemd the daemon serves, with its first status.
pub fn ready(status: &str) {
    send(&[NotifyState::Ready, NotifyState::Status(status)]);
}

/// The daemon's status line (`systemctl status` shows it).
pub fn status(status: &str) {
    send(&[NotifyState::Status(status)]);
}

/// The daemon is stopping.
pub fn stopping() {
    send(&[NotifyState::Stopping]);
}

fn send(states: &[NotifyState<'_>]) {
    if let Err(e) = sd_notify::notify(states) {
        // The service manager went away or the socket is wrong: the daemon goes on.
        tracing::debug!(target: "sheaf", "cannot notify systemd: {e}");
    }
}

/// Under a watchdog (`WatchdogSec=`, so `WATCHDOG_USEC` is set for this process), a thread that
/// sends WATCHDOG=1 every half interval in which `beat` moved: a loop that hangs stops the pings,
/// and systemd restarts the unit. Ends when `stop` is asked.
pub fn watchdog(beat: Beat, stop: Stop) {
    let Some(every) = sd_notify::watchdog_enabled() else { return };
    let half = (every / 2).max(Duration::from_millis(100));
    let _ = std::thread::Builder::new().name("watchdog".into()).spawn(move || {
        let mut seen = beat.count();
        while stop.sleep(half).is_ok() {
            let now = beat.count();
            if now != seen {
                send(&[NotifyState::Watchdog]);
                seen = now;
            } else {
                tracing::warn!(target: "sheaf", "the daemon's loop has not gone round for {} ms: no watchdog ping", half.as_millis());
            }
        }
    });
}
