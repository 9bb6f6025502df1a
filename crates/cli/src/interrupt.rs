//! One interrupt policy for every command, in one place. SIGINT (Ctrl-C), SIGTERM (a timer unit,
//! `timeout`, `kill`) and SIGHUP are caught by one thread for every command ([`Interrupt::install`]),
//! and what each does to a command is [`policy`]'s table:
//!
//! - [`OnSignal::Unwind`]: the command's [`Stop`] is asked. Work that runs in steps stops at the
//!   next one; what blocks (a child process, a scratch server, a query) is ended by what the
//!   command registered with [`Stop::on_ask`]. The command then leaves by its own error path,
//!   which stops what it started and removes what it wrote half, and `main` exits 128 + the
//!   signal: 130 after SIGINT, 143 after SIGTERM, 129 after SIGHUP.
//! - [`OnSignal::End`]: the command runs until stopped (`wal-receive`, `agent`): a signal is its
//!   normal end, so it stores what it holds and exits 0, as a service manager expects of a stop.
//! - [`OnSignal::Exit`]: nothing the command holds needs removing (what it writes is published
//!   whole or not at all, as after a power cut; it starts no server or child): it exits at once,
//!   128 + the signal.
//!
//! A second signal exits at once, whatever the command. Only this module and `main` end the
//! process.

use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::Arc;

use sheaf_core::stop::Stop;
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};

use crate::args::Command;

/// What a signal does to a command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnSignal {
    /// Ask it to stop, and let it unwind: it stops what it started and removes what it wrote half.
    Unwind,
    /// Its normal end: it stores what it holds and exits 0.
    End,
    /// Exit at once: it holds nothing that needs removing.
    Exit,
}

/// The table: what a signal does to each command.
pub fn policy(command: &Command) -> OnSignal {
    match command {
        // They start servers or children, write stripes, folders or objects in steps, or hold a
        // lock in the repository while they run.
        Command::Backup(_)
        | Command::Restore(_)
        | Command::Verify(_)
        | Command::Drill(_)
        | Command::Consolidate(_)
        | Command::Copy(_)
        | Command::Bench(_)
        | Command::Demo(_)
        | Command::Extract(_)
        | Command::WalSummarize(_) => OnSignal::Unwind,
        Command::WalReceive(_) | Command::Agent(_) => OnSignal::End,
        Command::Init(_)
        | Command::WalPush(_)
        | Command::WalFetch(_)
        | Command::Info(_)
        | Command::Check(_)
        | Command::Expire(_)
        | Command::Keep(_)
        | Command::Annotate(_)
        | Command::Key(_)
        | Command::Undelete(_)
        | Command::Repo(_)
        | Command::Config(_)
        | Command::List(_)
        | Command::Show(_)
        | Command::Generate(_)
        | Command::Completions(_)
        | Command::Man(_)
        | Command::Version(_)
        | Command::Lab(_)
        | Command::LoadTpch(_) => OnSignal::Exit,
    }
}

/// The signals a command's policy takes: all three, but SIGHUP for the agent, which reads its
/// allowed clients again on it, and for any command whose log goes to a file, which SIGHUP opens
/// again (logrotate's `postrotate`).
fn signals(command: &Command, log_file: bool) -> &'static [i32] {
    match command {
        Command::Agent(_) => &[SIGINT, SIGTERM],
        _ if log_file => &[SIGINT, SIGTERM],
        _ => &[SIGINT, SIGTERM, SIGHUP],
    }
}

/// A signal's name, for what sheaf says.
fn name(signal: i32) -> &'static str {
    match signal {
        SIGINT => "SIGINT",
        SIGTERM => "SIGTERM",
        SIGHUP => "SIGHUP",
        _ => "a signal",
    }
}

/// The command's stop, and the signal that asked it, if one did.
#[derive(Clone, Default)]
pub struct Interrupt {
    stop: Stop,
    signal: Arc<AtomicI32>,
    on_signal: Option<OnSignal>,
}

impl Interrupt {
    /// Catch `command`'s signals on a thread of their own and act on them as [`policy`] says;
    /// with `reopen_log` (the log file's flag), SIGHUP sets it instead.
    ///
    /// # Errors
    /// When the handlers cannot be installed.
    pub fn install(command: &Command, reopen_log: Option<Arc<AtomicBool>>) -> std::io::Result<Interrupt> {
        let on_signal = policy(command);
        let interrupt = Interrupt { stop: Stop::new(), signal: Arc::new(AtomicI32::new(0)), on_signal: Some(on_signal) };
        let mut caught = signal_hook::iterator::Signals::new(signals(command, reopen_log.is_some()))?;
        if let Some(flag) = reopen_log {
            signal_hook::flag::register(SIGHUP, flag)?;
        }
        let i = interrupt.clone();
        std::thread::Builder::new().name("signals".into()).spawn(move || {
            for signal in caught.forever() {
                if i.signal.swap(signal, Ordering::SeqCst) != 0 {
                    std::process::exit(128 + signal);
                }
                tracing::warn!(target: "sheaf", "{}: {}", name(signal), match on_signal {
                    OnSignal::Exit => "exiting",
                    OnSignal::Unwind => "stopping what this command started",
                    OnSignal::End => "stopping",
                });
                match on_signal {
                    OnSignal::Exit => std::process::exit(128 + signal),
                    OnSignal::Unwind => {
                        eprintln!("sheaf: interrupted ({}): stopping what this command started and removing what it wrote half, but for what a full backup into a repository stored, kept to be resumed (again to quit at once)", name(signal))
                    }
                    OnSignal::End => eprintln!("sheaf: {}: stopping: storing what is held (again to quit at once)", name(signal)),
                }
                i.stop.ask();
            }
        })?;
        Ok(interrupt)
    }

    /// What the command hands its work, so that a signal can stop it.
    pub fn stop(&self) -> &Stop {
        &self.stop
    }

    /// The exit status after the command ended with an error: 128 + the signal when one came and
    /// the command unwinds on it (the error is then the interruption's doing), else `None`.
    pub fn status(&self) -> Option<u8> {
        let signal = self.signal.load(Ordering::SeqCst);
        (signal != 0 && self.on_signal == Some(OnSignal::Unwind)).then(|| u8::try_from(128 + signal).unwrap_or(u8::MAX))
    }
}
