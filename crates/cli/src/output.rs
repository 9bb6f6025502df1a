//! Output the commands share: sizes in MiB, rates, plurals, durations; and [`say!`], how every
//! command writes to standard output.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};

/// Write a line to standard output, as `println!` does, except that a reader gone (`sheaf list |
/// head`) ends the command quietly with status 0, as every Unix tool does, instead of a panic.
macro_rules! say {
    () => {
        $crate::output::write_out(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::output::write_out(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// As [`say!`], without the line's end (`print!`).
macro_rules! say_raw {
    ($($arg:tt)*) => {
        $crate::output::write_out(format_args!($($arg)*))
    };
}

/// The command's exit status is its verdict (`sheaf check`): a reader gone does not end it with 0;
/// what is left to say is dropped, and the command ends with its own status.
static KEEP_STATUS: AtomicBool = AtomicBool::new(false);
/// Standard output's reader went away (with [`KEEP_STATUS`]).
static UNREAD: AtomicBool = AtomicBool::new(false);

/// From now on a reader gone does not end the command: its exit status is its verdict.
pub fn keep_status_when_unread() {
    KEEP_STATUS.store(true, Ordering::SeqCst);
}

/// Write to standard output; see [`say!`].
pub fn write_out(args: std::fmt::Arguments<'_>) {
    if UNREAD.load(Ordering::SeqCst) {
        return;
    }
    let mut out = std::io::stdout().lock();
    match out.write_fmt(args).and_then(|()| out.flush()) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe && KEEP_STATUS.load(Ordering::SeqCst) => UNREAD.store(true, Ordering::SeqCst),
        // Nothing more can be said and nobody is reading: end as `head`'s writer does.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => crate::exit::reader_gone(),
        Err(e) => {
            eprintln!("sheaf: error: cannot write to standard output: {e}");
            crate::exit::stdout_failed()
        }
    }
}

/// Bytes in MiB.
pub fn mib(b: u64) -> f64 {
    b as f64 / (1 << 20) as f64
}

/// MiB per second (0 for no time).
pub fn rate(bytes: u64, secs: f64) -> f64 {
    if secs > 0.0 {
        mib(bytes) / secs
    } else {
        0.0
    }
}

/// `s` unless there is one.
pub fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

/// `1h02m`, `3m05s`, `42s`.
pub fn duration(d: std::time::Duration) -> String {
    let s = d.as_secs();
    if s >= 3600 {
        format!("{}h{:02}m", s / 3600, s % 3600 / 60)
    } else if s >= 60 {
        format!("{}m{:02}s", s / 60, s % 60)
    } else {
        format!("{s}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_and_plurals() {
        assert_eq!(duration(std::time::Duration::from_secs(3725)), "1h02m");
        assert_eq!(duration(std::time::Duration::from_secs(185)), "3m05s");
        assert_eq!(duration(std::time::Duration::from_secs(42)), "42s");
        assert_eq!((plural(1), plural(0), plural(2)), ("", "s", "s"));
        assert_eq!(rate(1 << 20, 0.0), 0.0);
    }
}
