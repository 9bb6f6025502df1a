//! The log: what a run did, for whoever reads it after the fact (an operator, the journal, a log
//! shipper), apart from what sheaf prints for the person at the terminal (progress, summaries,
//! which stay as they are).
//!
//! Events come from every crate through `tracing`; this module installs the one subscriber
//! (`tracing-subscriber`'s, with its level filter and writer) and writes only each line's shape:
//!
//! - every line of a run carries the run id the catalog records (`run=42`), so that `sheaf history`
//!   and the log meet, whichever thread the event came from;
//! - `--log-format json` writes one object per line (time, level, run, target, message, fields);
//! - under systemd (its `JOURNAL_STREAM` on stderr) lines go to stderr with the syslog priority in
//!   front (`<4>`), which the journal reads as the line's level;
//! - `--log-file` appends, and is opened again on SIGHUP (logrotate's `postrotate`, or before the
//!   next line after it).
//!
//! Where the log goes: `--log-file` (setting `log-file`); else stderr under systemd, or when a
//! `--log-level` is given; else nowhere. The default level is `info`.

use std::fmt::Write as _;
use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex};

use sheaf_core::{Error, ErrorKind, Result};
use tracing::field::{Field, Visit};
use tracing::{Event, Level as TLevel, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields, MakeWriter};
use tracing_subscriber::registry::LookupSpan;

use crate::args::LogArgs;
use crate::settings::{self, Settings};
pub use crate::settings::{LogFormat as Format, LogLevel as Level};

/// The catalog's id of the run this process is doing (0: none yet).
static RUN: AtomicI64 = AtomicI64::new(0);
/// The log writes to stderr: what sheaf would say there for a person goes only into the log.
static ON_STDERR: AtomicBool = AtomicBool::new(false);

/// From now on every line carries this run id.
pub fn set_run(id: i64) {
    RUN.store(id, Ordering::SeqCst);
}

/// A warning: into the log, and on stderr for the person unless the log is there already.
pub fn warning(text: impl std::fmt::Display) {
    tracing::warn!(target: "sheaf", "{text}");
    if !ON_STDERR.load(Ordering::SeqCst) {
        eprintln!("sheaf: warning: {text}");
    }
}

/// What a daemon did (`who`: `sheaf agent`): into the log, and on stderr for the person, with the
/// time, unless the log is there already.
pub fn note(who: &str, text: impl std::fmt::Display) {
    tracing::info!(target: "sheaf", "{text}");
    if !ON_STDERR.load(Ordering::SeqCst) {
        eprintln!("{who}: {} {text}", sheaf_core::time::utc_now());
    }
}

/// An error a command ends with (or one of several it met): into the log, and on stderr for the
/// person ([`crate::exit::report`]) unless the log is there already (then the log's line is the
/// one).
pub fn report(e: &Error) {
    tracing::error!(target: "sheaf", "{e}");
    if !ON_STDERR.load(Ordering::SeqCst) {
        crate::exit::report(e);
    } else if e.is_transient() {
        tracing::warn!(target: "sheaf", "this looks transient: running the command again may succeed");
    }
}

/// Where the log goes and how, resolved from the flags over the settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    level: Level,
    format: Format,
    to: Sink,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Sink {
    Nowhere,
    /// stderr; with the syslog priority in front under systemd.
    Stderr {
        journal: bool,
    },
    File(PathBuf),
}

impl Plan {
    /// Resolve the flags over the settings (`log-level`, `log-file`, `log-format`); `journal`:
    /// stderr is the journal's stream.
    pub fn resolve(flags: &LogArgs, settings: &Settings, journal: bool) -> Plan {
        let level = settings.get(&settings::LOG_LEVEL, flags.log_level);
        let file = settings.value(&settings::LOG_FILE, flags.log_file.clone());
        let format = settings.value(&settings::LOG_FORMAT, flags.log_format).unwrap_or_default();
        let to = match file {
            Some(f) => Sink::File(f),
            None if journal => Sink::Stderr { journal: true },
            None if level.is_some() => Sink::Stderr { journal: false },
            None => Sink::Nowhere,
        };
        Plan { level: level.map_or(Level::Info, |(l, _)| l), format, to }
    }

    /// Install the subscriber. The returned flag, set (by SIGHUP), makes the log file be opened
    /// again before the next line.
    ///
    /// # Errors
    /// A log file that cannot be opened for appending.
    pub fn start(&self) -> Result<Option<Arc<AtomicBool>>> {
        let line = Line { format: self.format, priority: matches!(self.to, Sink::Stderr { journal: true }) };
        let builder = tracing_subscriber::fmt().with_max_level(self.level.filter()).event_format(line);
        match &self.to {
            Sink::Nowhere => Ok(None),
            Sink::Stderr { .. } => {
                ON_STDERR.store(true, Ordering::SeqCst);
                // Set once, at the start: a second subscriber (tests in one process) keeps the first.
                let _ = builder.with_writer(std::io::stderr).try_init();
                Ok(None)
            }
            Sink::File(path) => {
                let file = LogFile::open(path)?;
                let reopen = file.reopen.clone();
                let _ = builder.with_writer(file).try_init();
                Ok(Some(reopen))
            }
        }
    }
}

/// Is stderr the journal's stream? systemd sets `JOURNAL_STREAM=DEV:INODE` for a service whose
/// output goes to the journal; it is stderr's only if those match (a child whose stderr was
/// redirected keeps the variable but not the stream).
pub fn stderr_is_journal() -> bool {
    let Some(v) = std::env::var_os("JOURNAL_STREAM") else { return false };
    let Some((dev, ino)) = v.to_str().and_then(|v| v.split_once(':')) else { return false };
    let Ok(meta) = std::fs::metadata("/proc/self/fd/2") else { return false };
    use std::os::unix::fs::MetadataExt;
    dev.parse::<u64>().ok() == Some(meta.dev()) && ino.parse::<u64>().ok() == Some(meta.ino())
}

/// The log file: appended to, one write per line (so lines of processes sharing it never mix),
/// opened again when `reopen` is set.
#[derive(Clone)]
struct LogFile {
    path: PathBuf,
    file: Arc<Mutex<File>>,
    reopen: Arc<AtomicBool>,
}

impl LogFile {
    fn open(path: &Path) -> Result<LogFile> {
        Ok(LogFile { path: path.to_path_buf(), file: Arc::new(Mutex::new(append(path)?)), reopen: Arc::new(AtomicBool::new(false)) })
    }
}

fn append(path: &Path) -> Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o640)
        .open(path)
        .map_err(|e| Error::io(ErrorKind::InvalidInput, format!("cannot open the log file {} (--log-file, or log-file in the config file)", path.display()), e))
}

impl<'a> MakeWriter<'a> for LogFile {
    type Writer = LogFile;
    fn make_writer(&'a self) -> LogFile {
        self.clone()
    }
}

impl std::io::Write for LogFile {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let mut file = self.file.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if self.reopen.swap(false, Ordering::SeqCst) {
            // logrotate moved the file away: a new one at the path. Should that fail, keep
            // writing to the old one rather than lose the lines.
            if let Ok(f) = append(&self.path) {
                *file = f;
            }
        }
        file.write_all(buf)?;
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// One line's shape.
struct Line {
    format: Format,
    /// The syslog priority in front, for the journal.
    priority: bool,
}

/// An event's fields: its message, and the others by name.
#[derive(Default)]
struct Fields {
    message: String,
    rest: Vec<(&'static str, serde_json::Value)>,
}

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.message = format!("{value:?}");
        } else {
            self.rest.push((field.name(), serde_json::Value::String(format!("{value:?}"))));
        }
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.message = value.to_string();
        } else {
            self.rest.push((field.name(), value.into()));
        }
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.rest.push((field.name(), value.into()));
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.rest.push((field.name(), value.into()));
    }
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.rest.push((field.name(), value.into()));
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.rest.push((field.name(), value.into()));
    }
}

/// syslog's priority for a level (sd-daemon(3)'s prefixes).
fn priority(level: &TLevel) -> u8 {
    match *level {
        TLevel::ERROR => 3,
        TLevel::WARN => 4,
        TLevel::INFO => 6,
        _ => 7,
    }
}

impl<S, N> FormatEvent<S, N> for Line
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(&self, _ctx: &FmtContext<'_, S, N>, mut w: Writer<'_>, event: &Event<'_>) -> std::fmt::Result {
        let meta = event.metadata();
        let mut fields = Fields::default();
        event.record(&mut fields);
        let run = RUN.load(Ordering::SeqCst);
        let mut line = String::new();
        if self.priority {
            write!(line, "<{}>", priority(meta.level()))?;
        }
        match self.format {
            Format::Text => {
                // The journal times each line itself.
                if !self.priority {
                    write!(line, "{} ", sheaf_core::time::utc_precise(sheaf_core::time::now_ms()))?;
                }
                write!(line, "{:>5}", meta.level().as_str())?;
                if run != 0 {
                    write!(line, " run={run}")?;
                }
                write!(line, " {}: {}", meta.target(), fields.message)?;
                for (name, value) in &fields.rest {
                    match value {
                        serde_json::Value::String(s) if !s.contains(char::is_whitespace) && !s.is_empty() => write!(line, " {name}={s}")?,
                        other => write!(line, " {name}={other}")?,
                    }
                }
            }
            Format::Json => {
                // In this order, whatever the map would sort: time, level and run first.
                let q = |v: &serde_json::Value| v.to_string();
                let now = sheaf_core::time::utc_precise(sheaf_core::time::now_ms());
                write!(line, "{{\"time\":{},\"level\":{}", q(&now.into()), q(&meta.level().as_str().into()))?;
                if run != 0 {
                    write!(line, ",\"run\":{run}")?;
                }
                write!(line, ",\"target\":{},\"message\":{}", q(&meta.target().into()), q(&fields.message.into()))?;
                for (name, value) in &fields.rest {
                    write!(line, ",{}:{}", q(&(*name).into()), q(value))?;
                }
                line.push('}');
            }
        }
        writeln!(w, "{line}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::Value;

    #[test]
    fn priorities_are_syslogs() {
        assert_eq!([priority(&TLevel::ERROR), priority(&TLevel::WARN), priority(&TLevel::INFO), priority(&TLevel::DEBUG)], [3, 4, 6, 7]);
    }

    #[test]
    fn levels_and_formats_parse_as_settings() {
        assert_eq!(<Level as Value>::parse("DEBUG"), Ok(Level::Debug));
        assert!(<Level as Value>::parse("loud").unwrap_err().contains("give error, warn"));
        assert_eq!(<Format as Value>::parse("json"), Ok(Format::Json));
    }
}
