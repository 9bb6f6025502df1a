//! Progress bars on stderr, only when stderr is a terminal and the output is not JSON.

use std::io::IsTerminal;
use std::sync::{Arc, Mutex};

use indicatif::{ProgressBar, ProgressStyle};
use sheaf_core::Progress;

struct Bar(Mutex<Option<ProgressBar>>);

impl Progress for Bar {
    fn begin(&self, phase: &str, total: u64) {
        let pb = ProgressBar::new(total);
        pb.set_style(ProgressStyle::with_template("{msg:>8} [{bar:40}] {bytes}/{total_bytes} {binary_bytes_per_sec} eta {eta}").expect("valid template").progress_chars("=> "));
        pb.set_message(phase.to_string());
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = Some(pb);
    }
    fn more(&self, bytes: u64) {
        if let Some(pb) = self.0.lock().unwrap_or_else(|p| p.into_inner()).as_ref() {
            pb.inc_length(bytes);
        }
    }
    fn advance(&self, bytes: u64) {
        if let Some(pb) = self.0.lock().unwrap_or_else(|p| p.into_inner()).as_ref() {
            pb.inc(bytes);
        }
    }
    fn end(&self) {
        if let Some(pb) = self.0.lock().unwrap_or_else(|p| p.into_inner()).take() {
            pb.finish_and_clear();
        }
    }
    fn note(&self, message: &str) {
        match self.0.lock().unwrap_or_else(|p| p.into_inner()).as_ref() {
            Some(pb) => pb.suspend(|| eprintln!("sheaf: {message}")),
            None => eprintln!("sheaf: {message}"),
        }
    }
}

/// No bar, but notes still reach stderr (a log, a cron mail).
struct NotesOnly;

impl Progress for NotesOnly {
    fn note(&self, message: &str) {
        eprintln!("sheaf: {message}");
    }
}

/// A bar on a terminal; notes on stderr either way.
pub fn for_terminal(json: bool) -> Arc<dyn Progress> {
    if !json && std::io::stderr().is_terminal() {
        Arc::new(Bar(Mutex::new(None)))
    } else {
        Arc::new(NotesOnly)
    }
}
