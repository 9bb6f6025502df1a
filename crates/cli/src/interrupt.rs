//! What an interrupt (Ctrl-C, SIGTERM, SIGHUP) has asked for, shared between the signal handler
//! that `main` installs and the command that runs: whether one came, and the stop flag a backup
//! polls so that it removes what it wrote on the way out. The handlers themselves are in
//! `main.rs`, the only place that ends the process.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Shared by the handler and the command.
#[derive(Clone, Default)]
pub struct Interrupt {
    came: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
}

impl Interrupt {
    /// Mark that an interrupt came; whether one had come before.
    pub fn arrive(&self) -> bool {
        self.came.swap(true, Ordering::SeqCst)
    }

    /// Whether an interrupt came: whatever failed after it is the interruption's doing.
    pub fn came(&self) -> bool {
        self.came.load(Ordering::SeqCst)
    }

    /// Ask the running backup to stop.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
    }

    /// The flag a backup polls ([`sheaf_core::BackupOptions::stop`]).
    pub fn stop_flag(&self) -> Arc<AtomicBool> {
        self.stop.clone()
    }

    /// `v`, unless an interrupt came: then the handler is stopping servers and removing folders and
    /// will exit the process, so this thread waits for it rather than print, write or return (which
    /// would end the process under the handler).
    pub fn unless_interrupted<T>(&self, v: T) -> T {
        if self.came() {
            loop {
                std::thread::park();
            }
        }
        v
    }
}
