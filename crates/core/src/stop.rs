//! A request to stop, shared by whoever asks (the CLI's signal handler) and the work that honours
//! it: [`Stop`]. Work that runs in steps polls it ([`Stop::check`]) and returns
//! [`ErrorKind::Cancelled`], so that its own error path removes what it wrote half; work that
//! blocks where it cannot poll (a child process, a server's query, a scratch server waited on)
//! registers what ends the block ([`Stop::on_ask`]), which the asker runs. Nothing here is global:
//! a command makes one `Stop` and hands it to what it runs.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::error::{Error, ErrorKind, Result};

/// What ends a block, run once when a stop is asked.
type Hook = Box<dyn FnOnce() + Send>;

#[derive(Default)]
struct Inner {
    asked: AtomicBool,
    /// Set under `hooks`' lock, so that a sleeper never misses the wake-up.
    hooks: Mutex<Vec<(u64, Hook)>>,
    woken: Condvar,
    next: AtomicU64,
}

/// A request to stop, cheap to clone; every clone sees the same request. The default is one that
/// nobody asks.
#[derive(Clone, Default)]
pub struct Stop(Arc<Inner>);

impl std::fmt::Debug for Stop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Stop").field(&self.asked()).finish()
    }
}

/// The error work returns when it stopped because it was asked to.
pub fn interrupted() -> Error {
    Error::new(ErrorKind::Cancelled, "interrupted")
}

impl Stop {
    /// A request nobody has made yet.
    pub fn new() -> Stop {
        Stop::default()
    }

    /// Whether a stop was asked.
    pub fn asked(&self) -> bool {
        self.0.asked.load(Ordering::SeqCst)
    }

    /// `Ok` while no stop was asked.
    ///
    /// # Errors
    /// [`ErrorKind::Cancelled`] once one was.
    pub fn check(&self) -> Result<()> {
        if self.asked() {
            Err(interrupted())
        } else {
            Ok(())
        }
    }

    /// Ask the work to stop: the flag is set, and what ends each block is run here, once, in the
    /// order registered. Asking again does nothing more.
    pub fn ask(&self) {
        let hooks = {
            let mut hooks = self.0.hooks.lock().unwrap_or_else(|p| p.into_inner());
            if self.0.asked.swap(true, Ordering::SeqCst) {
                return;
            }
            std::mem::take(&mut *hooks)
        };
        self.0.woken.notify_all();
        for (_, hook) in hooks {
            hook();
        }
    }

    /// Run `end` when a stop is asked (at once, here, if one was), until the returned guard is
    /// dropped: what ends a block this stop cannot reach otherwise (a child process killed, a
    /// server stopped).
    pub fn on_ask(&self, end: impl FnOnce() + Send + 'static) -> OnAsk {
        let id = self.0.next.fetch_add(1, Ordering::Relaxed);
        {
            let mut hooks = self.0.hooks.lock().unwrap_or_else(|p| p.into_inner());
            if !self.asked() {
                hooks.push((id, Box::new(end)));
                return OnAsk { stop: self.clone(), id };
            }
        }
        end();
        OnAsk { stop: self.clone(), id }
    }

    /// Wait `d`, or less when a stop is asked meanwhile.
    ///
    /// # Errors
    /// [`ErrorKind::Cancelled`] when a stop was asked, before or during the wait.
    pub fn sleep(&self, d: Duration) -> Result<()> {
        let until = Instant::now() + d;
        let mut hooks = self.0.hooks.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if self.asked() {
                return Err(interrupted());
            }
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(());
            }
            hooks = self.0.woken.wait_timeout(hooks, left).unwrap_or_else(|p| p.into_inner()).0;
        }
    }

    /// The flag alone, for code that polls an `AtomicBool`.
    pub fn is_set(&self) -> &AtomicBool {
        &self.0.asked
    }
}

/// A sign of life from a loop that runs until stopped (a daemon's accept or receive loop): it
/// beats each time round, and whoever watches (systemd's watchdog, through the CLI) sees the count
/// move. A loop that hangs stops beating, though the process lives on.
#[derive(Clone, Debug, Default)]
pub struct Beat(Arc<AtomicU64>);

impl Beat {
    /// One more time round.
    pub fn beat(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }

    /// How many times round so far.
    pub fn count(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// A registration of [`Stop::on_ask`]; dropping it unregisters what was to run.
#[must_use = "dropping it at once unregisters the hook"]
pub struct OnAsk {
    stop: Stop,
    id: u64,
}

impl Drop for OnAsk {
    fn drop(&mut self) {
        let mut hooks = self.stop.0.hooks.lock().unwrap_or_else(|p| p.into_inner());
        hooks.retain(|(id, _)| *id != self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    #[test]
    fn asking_sets_the_flag_runs_each_hook_once_and_wakes_sleepers() {
        let stop = Stop::new();
        assert!(stop.check().is_ok() && !stop.asked());
        let ran = Arc::new(AtomicUsize::new(0));
        let r = ran.clone();
        let kept = stop.on_ask(move || {
            r.fetch_add(1, Ordering::SeqCst);
        });
        let r = ran.clone();
        drop(stop.on_ask(move || {
            r.fetch_add(100, Ordering::SeqCst);
        }));
        let sleeper = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let t0 = Instant::now();
                (stop.sleep(Duration::from_secs(60)), t0.elapsed())
            })
        };
        // The sleeper is woken by the ask, whenever it comes (before or after it sleeps).
        stop.ask();
        stop.ask();
        let (slept, took) = sleeper.join().unwrap();
        assert_eq!(slept.unwrap_err().kind(), ErrorKind::Cancelled);
        assert!(took < Duration::from_secs(60));
        assert_eq!(ran.load(Ordering::SeqCst), 1, "the kept hook once; the dropped one never");
        assert_eq!(stop.check().unwrap_err().kind(), ErrorKind::Cancelled);
        // Registered after the ask: run at once.
        let r = ran.clone();
        let _late = stop.on_ask(move || {
            r.fetch_add(10, Ordering::SeqCst);
        });
        assert_eq!(ran.load(Ordering::SeqCst), 11);
        drop(kept);
    }

    #[test]
    fn a_sleep_nobody_interrupts_lasts() {
        let t0 = Instant::now();
        Stop::new().sleep(Duration::from_millis(30)).unwrap();
        assert!(t0.elapsed() >= Duration::from_millis(30));
    }
}
