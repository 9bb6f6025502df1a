//! Where recovery stops and what the server does there, as types: the target (the end of the
//! archive, consistency, a time, an LSN, a restore point, a transaction), its action, the timeline
//! followed, and whether the target itself is replayed. Parsed here from the flags' text;
//! written into the settings by [`crate::restore::startup`], checked against the repository by
//! [`crate::restore::pitr`].

use sheaf_core::{Error, Result};

use crate::cluster::lsn::Lsn;

/// Where recovery stops.
#[derive(Clone, Debug, PartialEq)]
pub enum Target {
    /// The end of the archive.
    End,
    /// As soon as the backup is consistent.
    Immediate,
    /// A moment: the text as given (PostgreSQL reads it) and milliseconds since the epoch.
    Time(String, i64),
    /// An LSN.
    Lsn(Lsn),
    /// A restore point made with `pg_create_restore_point`.
    Name(String),
    /// The commit (or abort) of a transaction, by its id (`epoch:xid` read as its 64 bits).
    Xid(u64),
}

/// What a restored cluster does at its recovery target (PostgreSQL's `recovery_target_action`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum TargetAction {
    /// End recovery and accept writes.
    #[default]
    Promote,
    /// Pause there, for a look before promoting by hand.
    Pause,
    /// Stop the server there.
    Shutdown,
}

impl TargetAction {
    /// PostgreSQL's word for it.
    pub fn as_pg(self) -> &'static str {
        match self {
            TargetAction::Promote => "promote",
            TargetAction::Pause => "pause",
            TargetAction::Shutdown => "shutdown",
        }
    }
}

/// The timeline recovery follows (PostgreSQL's `recovery_target_timeline`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TimelineTarget {
    /// The newest the archive holds.
    #[default]
    Latest,
    /// The restored backup's own.
    Current,
    /// This one.
    Id(u32),
}

impl std::str::FromStr for TimelineTarget {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s.trim() {
            "latest" => Ok(TimelineTarget::Latest),
            "current" => Ok(TimelineTarget::Current),
            n => match n.parse::<u32>() {
                Ok(t) if t >= 1 => Ok(TimelineTarget::Id(t)),
                _ => Err(Error::invalid(format!("timeline '{n}': give latest, current or a timeline number (1 or more)"))),
            },
        }
    }
}

impl std::fmt::Display for TimelineTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TimelineTarget::Latest => f.write_str("latest"),
            TimelineTarget::Current => f.write_str("current"),
            TimelineTarget::Id(t) => write!(f, "{t}"),
        }
    }
}

/// How to recover.
#[derive(Clone, Debug)]
pub struct Recovery {
    /// Where to stop.
    pub target: Target,
    /// What the server does once there.
    pub action: TargetAction,
    /// The timeline to follow.
    pub timeline: TimelineTarget,
    /// Stop just after the target (PostgreSQL's default), or just before it
    /// (`recovery_target_inclusive = off`, `--target-exclusive`): a time, an LSN or a transaction.
    pub inclusive: bool,
}

/// Parse `2026-11-22 10:15:00+00`, `2026-11-22T10:15:00.123Z`, `... UTC`, `... +01:00`, into
/// milliseconds since the epoch. A zone is required: without one the server's own zone would
/// decide, which sheaf cannot know.
///
/// # Errors
/// What is wrong with the text, with an example.
pub fn parse_time(text: &str) -> Result<i64> {
    parse_time_as("--target-time", text)
}

/// [`parse_time`], its errors naming `flag`.
///
/// # Errors
/// As [`parse_time`].
pub fn parse_time_as(flag: &str, text: &str) -> Result<i64> {
    sheaf_core::time::parse_instant(text).map_err(|why| Error::invalid(format!("{flag} '{text}': {why}; write e.g. '2026-11-22 10:15:00+00' or '2026-11-22T10:15:00.5Z'")))
}

/// Milliseconds since the epoch as PostgreSQL reads a UTC time: `2026-11-22 10:15:00.250+00`.
pub fn pg_time(ms: i64) -> String {
    sheaf_core::time::utc_ms(ms)
}

/// Parse a target from the flags' values: at most one of them.
///
/// # Errors
/// More than one target, or a value that does not parse.
pub fn target_from(time: Option<&str>, lsn: Option<Lsn>, name: Option<&str>, xid: Option<u64>, immediate: bool) -> Result<Target> {
    let n = usize::from(time.is_some()) + usize::from(lsn.is_some()) + usize::from(name.is_some()) + usize::from(xid.is_some()) + usize::from(immediate);
    if n > 1 {
        return Err(Error::invalid("give one recovery target: --target-time, --target-lsn, --target-xid, --target-name or --target immediate"));
    }
    Ok(match (time, lsn, name, xid) {
        (Some(t), ..) => Target::Time(t.to_string(), parse_time(t)?),
        (_, Some(l), ..) => Target::Lsn(l),
        (_, _, Some(n), _) if n.is_empty() || n.contains('\0') => return Err(Error::invalid("--target-name: give the name given to pg_create_restore_point")),
        (_, _, Some(n), _) => Target::Name(n.to_string()),
        // 0 to 2 are never a normal transaction's id: the server would refuse them.
        (.., Some(x)) if x & 0xFFFF_FFFF < 3 => {
            return Err(Error::invalid(format!("--target-xid {x}: not a transaction's id (ids 0 to 2 are reserved); txid_current() or pg_current_xact_id() gives one")))
        }
        (.., Some(x)) => Target::Xid(x),
        _ if immediate => Target::Immediate,
        _ => Target::End,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_name_their_flag() {
        assert_eq!(parse_time("2026-11-21 11:30:45+01:00").unwrap(), 1_795_257_045_000);
        let e = parse_time_as("--until", "2026-11-21 10:30:45").unwrap_err().to_string();
        assert!(e.contains("--until '2026-11-21 10:30:45'") && e.contains("zone") && e.contains("write e.g."), "{e}");
        assert_eq!(pg_time(1_795_257_045_250), "2026-11-21 10:30:45.250+00");
        assert_eq!(parse_time(&pg_time(1_795_257_045_250)).unwrap(), 1_795_257_045_250);
    }

    #[test]
    fn one_target_at_most() {
        assert!(target_from(Some("2026-11-21 10:30:45Z"), Some(Lsn(1)), None, None, false).is_err());
        assert!(target_from(None, None, None, Some(800), true).is_err());
        assert_eq!(target_from(None, Some(Lsn((1 << 32) | 0xA0)), None, None, false).unwrap(), Target::Lsn(Lsn((1 << 32) | 0xA0)));
        assert_eq!(target_from(None, None, None, Some(800), false).unwrap(), Target::Xid(800));
        assert!(target_from(None, None, None, Some(2), false).unwrap_err().to_string().contains("reserved"));
        assert_eq!(target_from(None, None, None, None, false).unwrap(), Target::End);
    }
}
