//! Exit statuses, in one table: each error kind's code and the line `sheaf --help` gives it; and
//! [`Outcome`], how a command that ends other than by success or error says which status it
//! wants, so that only `main` ends the process.

use sheaf_core::ErrorKind;

/// One exit status: its code, the error kinds that end with it, and its line in the help.
struct Status {
    code: u8,
    kinds: &'static [ErrorKind],
    help: &'static str,
}

/// Every status sheaf exits with (besides 130 after an interrupt, and wal-fetch's own).
const TABLE: &[Status] = &[
    Status { code: 0, kinds: &[], help: "success" },
    Status { code: 1, kinds: &[ErrorKind::Io, ErrorKind::Cancelled], help: "other I/O failure" },
    Status { code: 2, kinds: &[ErrorKind::InvalidInput], help: "bad arguments or options" },
    Status { code: 3, kinds: &[ErrorKind::Corrupt], help: "the backup is damaged (a checksum, magic or length does not match)" },
    Status { code: 4, kinds: &[ErrorKind::Incomplete], help: "the backup set is incomplete (missing, truncated, unfinished or foreign stripe)" },
    Status { code: 5, kinds: &[ErrorKind::TargetNotEmpty], help: "the restore target is not empty (use --force)" },
    Status { code: 6, kinds: &[ErrorKind::NoSpace], help: "the target device is full" },
    Status { code: 7, kinds: &[ErrorKind::Source], help: "the source cannot be read" },
    Status { code: 8, kinds: &[ErrorKind::Target], help: "the target cannot be written" },
    Status { code: 9, kinds: &[ErrorKind::Key], help: "encryption key: missing, wrong, or not a key (the backup or repository is encrypted)" },
];

/// The status after an interrupt (Ctrl-C, SIGTERM, SIGHUP), as a shell reports one.
pub const INTERRUPTED: u8 = 130;

/// The exit status for an error of `kind`.
pub fn code(kind: ErrorKind) -> u8 {
    TABLE.iter().find(|s| s.kinds.contains(&kind)).map_or(1, |s| s.code)
}

/// The help's list of exit statuses.
pub fn help() -> String {
    let mut text = String::from("Exit codes:");
    for s in TABLE {
        text.push_str(&format!("\n  {}  {}", s.code, s.help));
    }
    text
}

/// How a command ended, when not by an error for `main` to print.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Exit 0.
    Success,
    /// Exit with this status, everything that was to be said said (wal-fetch: 1 without a word
    /// for a file the archive does not hold; its own status after an error it printed).
    Status(u8),
}

impl Outcome {
    /// The process's exit status.
    pub fn code(self) -> u8 {
        match self {
            Outcome::Success => 0,
            Outcome::Status(c) => c,
        }
    }
}

/// Say what went wrong on stderr, and, where the error is transient (a timeout, a busy server or
/// database, as the store or the catalog found), that running the command again may succeed.
pub fn report(e: &sheaf_core::Error) {
    eprintln!("sheaf: error: {e}");
    if e.is_transient() {
        eprintln!("sheaf: this looks transient: running the command again may succeed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_has_one_status() {
        let all = [
            ErrorKind::InvalidInput,
            ErrorKind::Source,
            ErrorKind::Target,
            ErrorKind::NoSpace,
            ErrorKind::Corrupt,
            ErrorKind::Incomplete,
            ErrorKind::TargetNotEmpty,
            ErrorKind::Io,
            ErrorKind::Key,
            ErrorKind::Cancelled,
        ];
        for k in all {
            // A new kind breaks this match first, then needs its row in the table.
            match k {
                ErrorKind::InvalidInput
                | ErrorKind::Source
                | ErrorKind::Target
                | ErrorKind::NoSpace
                | ErrorKind::Corrupt
                | ErrorKind::Incomplete
                | ErrorKind::TargetNotEmpty
                | ErrorKind::Io
                | ErrorKind::Key
                | ErrorKind::Cancelled => {}
            }
            assert_eq!(TABLE.iter().filter(|s| s.kinds.contains(&k)).count(), 1, "{k:?}");
        }
        assert_eq!((code(ErrorKind::Io), code(ErrorKind::Cancelled), code(ErrorKind::InvalidInput), code(ErrorKind::Key)), (1, 1, 2, 9));
    }

    #[test]
    fn the_help_lists_the_table() {
        let h = help();
        assert!(h.starts_with("Exit codes:\n  0  success\n  1  other I/O failure\n  2  bad arguments or options\n"), "{h}");
        assert!(h.ends_with("\n  9  encryption key: missing, wrong, or not a key (the backup or repository is encrypted)"), "{h}");
        assert_eq!(h.lines().count(), 11);
    }
}
