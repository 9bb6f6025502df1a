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

/// Every status sheaf exits with (besides 128 + the signal after an interrupt, and wal-fetch's own).
const TABLE: &[Status] = &[
    Status { code: 0, kinds: &[], help: "success" },
    Status { code: 1, kinds: &[ErrorKind::Io, ErrorKind::Cancelled], help: "other I/O failure" },
    Status { code: 2, kinds: &[ErrorKind::InvalidInput], help: "bad arguments or options" },
    Status { code: 3, kinds: &[ErrorKind::Corrupt], help: "the backup is damaged (a checksum, magic or length does not match)" },
    Status { code: 4, kinds: &[ErrorKind::Incomplete], help: "the backup set is incomplete (missing, truncated, unfinished or foreign stripe)" },
    Status { code: 5, kinds: &[ErrorKind::TargetNotEmpty], help: "the restore target is not empty (use --force)" },
    Status { code: 6, kinds: &[ErrorKind::NoSpace], help: "the target device is full" },
    Status { code: 7, kinds: &[ErrorKind::Source, ErrorKind::NotFound], help: "the source cannot be read (or is not there)" },
    Status { code: 8, kinds: &[ErrorKind::Target], help: "the target cannot be written" },
    Status { code: 9, kinds: &[ErrorKind::Key], help: "encryption key: missing, wrong, or not a key (the backup or repository is encrypted)" },
    Status { code: 10, kinds: &[ErrorKind::Denied], help: "refused: a certificate or login not accepted, a path not served, files of another owner" },
];

/// wal-fetch, PostgreSQL's `restore_command`: the archive does not hold the file (its end).
/// PostgreSQL reads any status below 126 so.
pub const WAL_FETCH_END: u8 = 1;
/// wal-fetch outside standby mode: any other failure, which must stop recovery rather than end
/// it early (PostgreSQL stops at a status above 125 that is not a signal's).
pub const WAL_FETCH_STOP: u8 = 255;

/// check, as monitoring plugins (Nagios and its kin) exit: all is well.
pub const CHECK_OK: u8 = 0;
/// check: look at it soon.
pub const CHECK_WARNING: u8 = 1;
/// check: the backups cannot be relied on now.
pub const CHECK_CRITICAL: u8 = 2;

/// check's status for its verdict.
pub fn check_code(status: sheaf_pg::maintain::check::Status) -> u8 {
    use sheaf_pg::maintain::check::Status;
    match status {
        Status::Ok => CHECK_OK,
        Status::Warning => CHECK_WARNING,
        Status::Critical => CHECK_CRITICAL,
    }
}

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
    text.push_str("\n  130  interrupted by SIGINT (Ctrl-C); 143 by SIGTERM, 129 by SIGHUP (128 + the signal, as a shell reports it); wal-receive and agent end normally, 0");
    text.push_str(&format!(
        "\ncheck exits as monitoring plugins do: {CHECK_OK} ok, {CHECK_WARNING} warning, {CHECK_CRITICAL} critical. wal-fetch, as PostgreSQL's restore_command: {WAL_FETCH_END} when the archive does not hold the file, {WAL_FETCH_STOP} for any other failure outside standby mode (recovery stops)."
    ));
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

/// Standard output's reader went away (`sheaf list | head`): end now, quietly and with success,
/// as a Unix tool does. With [`stdout_failed`], the only exits below `main` besides the interrupt
/// handler's: the output is how a command reports, and it can no longer.
pub fn reader_gone() -> ! {
    std::process::exit(0)
}

/// Writing to standard output failed otherwise (a full disk under a redirection): said, exit 1.
pub fn stdout_failed() -> ! {
    std::process::exit(1)
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
            ErrorKind::NotFound,
            ErrorKind::Target,
            ErrorKind::NoSpace,
            ErrorKind::Corrupt,
            ErrorKind::Incomplete,
            ErrorKind::TargetNotEmpty,
            ErrorKind::Io,
            ErrorKind::Key,
            ErrorKind::Denied,
            ErrorKind::Cancelled,
        ];
        for k in all {
            // A new kind breaks this match first, then needs its row in the table.
            match k {
                ErrorKind::InvalidInput
                | ErrorKind::Source
                | ErrorKind::NotFound
                | ErrorKind::Target
                | ErrorKind::NoSpace
                | ErrorKind::Corrupt
                | ErrorKind::Incomplete
                | ErrorKind::TargetNotEmpty
                | ErrorKind::Io
                | ErrorKind::Key
                | ErrorKind::Denied
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
        assert!(h.contains("\n  10  refused: a certificate or login not accepted, a path not served, files of another owner\n  130  interrupted by SIGINT"), "{h}");
        assert!(h.contains("143 by SIGTERM"), "{h}");
        assert!(h.contains("0 ok, 1 warning, 2 critical") && h.contains("1 when the archive does not hold the file, 255"), "{h}");
        assert_eq!(h.lines().count(), 14);
    }
}
