//! Trying again, one way everywhere: an operation is run again after a growing pause exactly while
//! its error says [`Error::is_transient`] (a link that dropped, a server busy or starting), at most
//! [`Backoff::tries`] times; a permanent error (refused, not found, damaged) ends it at once.
//! Whoever builds an error marks it (the agent's link, PostgreSQL's SQLSTATE, a store's status),
//! so the loop never looks at a message.
//!
//! [`Backoff::run`] blocks; [`Backoff::run_async`] awaits, pausing with the runtime's sleep it is
//! given (the core knows no runtime).

use std::future::Future;
use std::time::Duration;

use crate::error::Result;

/// How many times, and how long to wait between them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backoff {
    /// Tries in all, the first included (at least 1).
    pub tries: u32,
    /// The pause after the first failure; each next one twice the last.
    pub first: Duration,
    /// The longest pause.
    pub max: Duration,
}

impl Backoff {
    /// `tries` in all, pausing `first`, then twice as long each time, at most `max`.
    pub const fn new(tries: u32, first: Duration, max: Duration) -> Backoff {
        Backoff { tries, first, max }
    }

    /// The pause before try `n + 1` (after `n` failures, `n` from 1).
    pub fn pause(&self, failures: u32) -> Duration {
        let factor = 1u32.checked_shl(failures.saturating_sub(1)).unwrap_or(u32::MAX);
        self.first.saturating_mul(factor).min(self.max)
    }

    /// The pauses between the tries, in order (one fewer than [`Backoff::tries`]).
    pub fn pauses(&self) -> impl Iterator<Item = Duration> + '_ {
        (1..self.tries.max(1)).map(|n| self.pause(n))
    }

    /// As [`Backoff::run`], for an operation that awaits: `op` makes each try's future, `sleep`
    /// the pause's (`tokio::time::sleep`).
    ///
    /// # Errors
    /// As [`Backoff::run`].
    pub async fn run_async<T, Try, Pause>(&self, mut op: impl FnMut(u32) -> Try, mut sleep: impl FnMut(Duration) -> Pause) -> Result<T>
    where
        Try: Future<Output = Result<T>>,
        Pause: Future<Output = ()>,
    {
        let mut n = 0;
        loop {
            match op(n).await {
                Err(e) if e.is_transient() && n + 1 < self.tries => {
                    n += 1;
                    sleep(self.pause(n)).await;
                }
                r => return r,
            }
        }
    }

    /// `op` (given the try's number, from 0), again after each transient error while tries are
    /// left; the first success, or the last error.
    ///
    /// # Errors
    /// A permanent error at once; the last transient one when the tries are spent.
    pub fn run<T>(&self, mut op: impl FnMut(u32) -> Result<T>) -> Result<T> {
        self.run_with(&mut op, std::thread::sleep)
    }

    /// As [`Backoff::run`], pausing with `sleep` (a test's clock, an interruptible wait).
    ///
    /// # Errors
    /// As [`Backoff::run`].
    pub fn run_with<T>(&self, op: impl FnMut(u32) -> Result<T>, mut sleep: impl FnMut(Duration)) -> Result<T> {
        self.run_telling(op, |_, pause| sleep(pause))
    }

    /// As [`Backoff::run_with`], `pause` told each transient error before it pauses (to log it,
    /// keep it, or wait in a way that can be interrupted).
    ///
    /// # Errors
    /// As [`Backoff::run`].
    pub fn run_telling<T>(&self, mut op: impl FnMut(u32) -> Result<T>, mut pause: impl FnMut(&crate::error::Error, Duration)) -> Result<T> {
        let mut n = 0;
        loop {
            match op(n) {
                Err(e) if e.is_transient() && n + 1 < self.tries => {
                    n += 1;
                    pause(&e, self.pause(n));
                }
                r => return r,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::{Error, ErrorKind};

    const B: Backoff = Backoff::new(4, Duration::from_millis(100), Duration::from_millis(250));

    #[test]
    fn pauses_double_up_to_the_cap() {
        assert_eq!(B.pauses().collect::<Vec<_>>(), [100, 200, 250].map(Duration::from_millis));
        assert_eq!(Backoff::new(1, Duration::from_secs(1), Duration::from_secs(1)).pauses().count(), 0);
        assert_eq!(B.pause(40), Duration::from_millis(250), "no overflow on a long run");
    }

    #[test]
    fn transient_errors_are_tried_again_until_success() {
        let mut slept = Vec::new();
        let r = B.run_with(|n| if n < 2 { Err(Error::new(ErrorKind::Source, "link dropped").transient(true)) } else { Ok(n) }, |d| slept.push(d));
        assert_eq!(r.unwrap(), 2);
        assert_eq!(slept, [100, 200].map(Duration::from_millis));
    }

    #[test]
    fn each_transient_error_is_told_before_its_pause() {
        let mut told = Vec::new();
        let r =
            B.run_telling(|n| if n < 2 { Err(Error::new(ErrorKind::Source, format!("link dropped {n}")).transient(true)) } else { Ok(n) }, |e, d| told.push((e.to_string(), d)));
        assert_eq!(r.unwrap(), 2);
        assert_eq!(told, [("link dropped 0".to_string(), Duration::from_millis(100)), ("link dropped 1".to_string(), Duration::from_millis(200))]);
    }

    #[test]
    fn a_permanent_error_ends_at_once() {
        let mut calls = 0;
        let r: Result<()> = B.run_with(
            |_| {
                calls += 1;
                Err(Error::new(ErrorKind::NotFound, "no such file"))
            },
            |_| panic!("no pause before a permanent error"),
        );
        assert_eq!(r.unwrap_err().kind(), ErrorKind::NotFound);
        assert_eq!(calls, 1);
    }

    #[test]
    fn the_async_loop_decides_as_the_blocking_one() {
        // Driven by hand: every future here is ready at once.
        fn block_on<F: Future>(f: F) -> F::Output {
            let waker = std::task::Waker::noop();
            let mut cx = std::task::Context::from_waker(waker);
            let mut f = std::pin::pin!(f);
            loop {
                if let std::task::Poll::Ready(v) = f.as_mut().poll(&mut cx) {
                    return v;
                }
            }
        }
        let slept = std::cell::RefCell::new(Vec::new());
        let r = block_on(B.run_async(
            |n| async move {
                if n < 3 {
                    Err(Error::new(ErrorKind::Io, "503").transient(true))
                } else {
                    Ok(n)
                }
            },
            |d| {
                slept.borrow_mut().push(d);
                async {}
            },
        ));
        assert_eq!(r.unwrap(), 3);
        assert_eq!(*slept.borrow(), [100, 200, 250].map(Duration::from_millis));
        let r: Result<()> = block_on(B.run_async(|_| async { Err(Error::new(ErrorKind::Target, "403")) }, |_| async { panic!("no pause") }));
        assert_eq!(r.unwrap_err().kind(), ErrorKind::Target);
    }

    #[test]
    fn the_last_transient_error_is_returned_when_tries_are_spent() {
        let mut calls = 0;
        let r: Result<()> = B.run_with(
            |n| {
                calls += 1;
                Err(Error::new(ErrorKind::Source, format!("try {n}")).transient(true))
            },
            |_| {},
        );
        let e = r.unwrap_err();
        assert_eq!((calls, e.message()), (4, "try 3"));
        assert!(e.is_transient());
    }
}
