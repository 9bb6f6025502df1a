//! How a restored cluster starts: recovering to a target and then opening for writes
//! (`recovery.signal`), as a standby that never promotes (`standby.signal`), or as it was backed
//! up (no signal: it replays the backup's own WAL and opens). Decided once, before anything is
//! written ([`Startup::decide`]), from what was asked and from what the target already is: a delta
//! restore onto a standby keeps it a standby with its own settings unless told to promote it.
//! Carried out last ([`Decided::write`]): the recovery settings the backed-up cluster had are
//! commented out of postgresql.auto.conf (a standby's `primary_conninfo`, an earlier restore's
//! target), the new ones appended, the signal file made.

use std::path::{Path, PathBuf};

use serde::Serialize;
use sheaf_core::{Error, ErrorKind, Result};

use crate::cluster::conf;
use crate::connect::conninfo;
use crate::restore::target::{pg_time, Recovery, Target, TargetAction};

/// PostgreSQL's recovery settings: those that say whether and how a cluster recovers, follows a
/// primary, or stops (its "Archive Recovery", "Recovery Target" and standby groups, less the
/// tuning a standby keeps, such as `hot_standby` or `wal_receiver_timeout`). A restore comments
/// out the backed-up cluster's own unless told to keep them.
pub const RECOVERY_SETTINGS: [&str; 15] = [
    "restore_command",
    "archive_cleanup_command",
    "recovery_end_command",
    "recovery_target",
    "recovery_target_lsn",
    "recovery_target_name",
    "recovery_target_time",
    "recovery_target_xid",
    "recovery_target_inclusive",
    "recovery_target_timeline",
    "recovery_target_action",
    "primary_conninfo",
    "primary_slot_name",
    "promote_trigger_file",
    "recovery_min_apply_delay",
];

/// The file that makes a cluster start as a standby.
pub const STANDBY_SIGNAL: &str = "standby.signal";
/// The file that makes a cluster recover from the archive and then promote.
pub const RECOVERY_SIGNAL: &str = "recovery.signal";
/// The file sheaf writes settings into.
pub const AUTO_CONF: &str = "postgresql.auto.conf";
/// What a delta onto a standby keeps of the target: its signal and its configuration (its port,
/// its primary, its access rules), which are the standby's, not the backed-up primary's.
pub const STANDBY_OWN: [&str; 5] = [STANDBY_SIGNAL, AUTO_CONF, "postgresql.conf", "pg_hba.conf", "pg_ident.conf"];

/// A standby's primary, as `--primary-conninfo`, `--slot` and `--create-slot` give it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Upstream {
    /// `primary_conninfo`: libpq's syntax, no password.
    pub conninfo: Option<String>,
    /// `primary_slot_name`.
    pub slot: Option<String>,
    /// Create the slot on the primary (through `conninfo`).
    pub create_slot: bool,
}

/// What the restored cluster does when it starts, as asked.
#[derive(Clone, Debug, Default)]
pub enum Role {
    /// Nothing written: it replays the backup's own WAL and opens (a restore from stripes).
    #[default]
    AsBackedUp,
    /// Recover from the archive to the target, then do its action (a restore from a repository).
    Recover(Recovery),
    /// A standby: replays what the archive and the primary give and never promotes. With a
    /// target, it stops replaying there (paused, or shut down).
    Standby(Upstream, Option<Recovery>),
}

/// How the restored cluster starts ([`Role`]) and what else goes into its settings.
#[derive(Clone, Debug, Default)]
pub struct Startup {
    /// As asked.
    pub role: Role,
    /// `restore_command`: set by a restore from a repository (`sheaf wal-fetch` from it).
    pub restore_command: Option<String>,
    /// `--recovery-option NAME=VALUE`, in order.
    pub options: Vec<(String, String)>,
    /// Leave the backed-up cluster's recovery settings in postgresql.auto.conf.
    pub keep_recovery_settings: bool,
    /// A delta onto a standby makes it a primary (recovers and promotes) instead of keeping it
    /// a standby.
    pub promote: bool,
    /// The server's bin directory for checking `options` (default: found by the backup's major).
    pub pg_bin: Option<PathBuf>,
}

/// A setting written, as the report shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Setting {
    /// Its name.
    pub name: String,
    /// Its value, unquoted.
    pub value: String,
}

/// What the restore wrote for the cluster's start, for the report and `--json`.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Written {
    /// `primary` (recovers, then opens for writes), `standby`, or `as backed up`.
    pub starts_as: String,
    /// The signal file made, if any.
    pub signal: Option<String>,
    /// The settings appended to postgresql.auto.conf, in order.
    pub settings: Vec<Setting>,
    /// The backed-up cluster's recovery settings commented out there.
    pub removed: Vec<String>,
    /// A delta onto a standby kept the target's own standby.signal and configuration files.
    pub kept_target_settings: bool,
    /// The replication slot created on the primary.
    pub slot_created: Option<String>,
    /// Links made for `--link-map` or kept from the backup, and links restored as folders.
    pub links: Vec<String>,
}

/// What the target already is, read before the restore.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Found {
    /// It has standby.signal: it runs as a standby. (A `primary_conninfo` without it is a
    /// leftover PostgreSQL ignores: a former primary's, say.)
    pub standby: bool,
    /// Its settings have a restore_command.
    pub restore_command: bool,
}

/// What the target `data` is as far as its start goes (nothing for an empty or new folder).
pub fn found(data: &Path) -> Found {
    let settings = conf::settings(data);
    let set = |k: &str| settings.get(k).is_some_and(|v| !v.trim().is_empty());
    Found { standby: data.join(STANDBY_SIGNAL).exists(), restore_command: set("restore_command") }
}

/// What a restore will write for the cluster's start, decided before it writes anything.
#[derive(Clone, Debug)]
pub struct Decided {
    /// The target's standby.signal and configuration files stay as they are ([`STANDBY_OWN`]:
    /// a delta restore leaves them, [`sheaf_core::RestoreOptions::keep`]).
    pub keep_target: bool,
    starts_as: &'static str,
    signal: Option<&'static str>,
    settings: Vec<(String, String)>,
    remove_recovery: bool,
}

impl Decided {
    /// The paths a delta restore leaves as the target has them.
    pub fn kept_paths(&self) -> Vec<String> {
        if self.keep_target {
            STANDBY_OWN.iter().map(|p| (*p).to_string()).collect()
        } else {
            Vec::new()
        }
    }

    /// Whether the restored cluster will run as a standby (it then archives no new timeline).
    pub fn standby(&self) -> bool {
        self.starts_as == "standby"
    }

    /// Write it into the restored `data`: the backed-up cluster's recovery settings commented
    /// out, the new ones appended, the signal file made; each made durable.
    ///
    /// # Errors
    /// I/O errors naming the file.
    pub fn write(&self, data: &Path) -> Result<Written> {
        let mut w = Written { starts_as: self.starts_as.into(), kept_target_settings: self.keep_target, ..Default::default() };
        if self.remove_recovery {
            let why = format!("removed by sheaf restore at {}: a recovery setting of the cluster backed up", sheaf_core::time::utc_now());
            w.removed = conf::comment_out(data, |k| RECOVERY_SETTINGS.contains(&k), &why)?;
        }
        if !self.settings.is_empty() {
            let lines: String = self.settings.iter().map(|(k, v)| format!("{k} = {}\n", conf::quoted(v))).collect();
            let why = match (self.starts_as, self.keep_target) {
                ("standby", true) => "what the standby's own settings lacked (remove once it is no longer needed)",
                ("standby", false) => "a standby restored from the repository",
                ("primary", _) => "recovery from the repository (remove after recovery ends)",
                _ => "settings given to restore",
            };
            conf::append_settings(data, why, &lines)?;
            w.settings = self.settings.iter().map(|(k, v)| Setting { name: k.clone(), value: v.clone() }).collect();
        }
        if let Some(name) = self.signal {
            let signal = data.join(name);
            if !signal.exists() {
                std::fs::File::create(&signal).and_then(|f| f.sync_all()).map_err(|e| Error::io(ErrorKind::Target, format!("cannot write {}", signal.display()), e))?;
                conf::owned_like_folder(data, &signal);
            }
            w.signal = Some(name.into());
        }
        // A promoted copy must not start as a standby: a signal left from the target goes.
        for other in [STANDBY_SIGNAL, RECOVERY_SIGNAL].into_iter().filter(|s| Some(*s) != self.signal && !self.keep_target) {
            let p = data.join(other);
            if p.exists() {
                std::fs::remove_file(&p).map_err(|e| Error::io(ErrorKind::Target, format!("cannot remove {}", p.display()), e))?;
            }
        }
        Ok(w)
    }
}

impl Startup {
    /// Decide what to write, given what the target is before the restore (`found`) and whether
    /// the restore is a delta. Nothing is written here.
    ///
    /// # Errors
    /// A standby asked to promote at a target; a target onto a standby without `--promote`;
    /// a `--primary-conninfo` that does not parse or holds a password; a slot name PostgreSQL
    /// would refuse.
    pub fn decide(&self, found: &Found, delta: bool) -> Result<Decided> {
        if let Role::Standby(up, _) = &self.role {
            check_upstream(up)?;
        }
        let keep_target = delta && found.standby && !self.promote;
        // A delta onto a standby keeps it one: what was asked as a recovery becomes the standby's.
        let role = match (&self.role, keep_target) {
            (Role::Recover(r), true) => Role::Standby(Upstream::default(), (r.target != Target::End).then(|| r.clone())),
            (Role::AsBackedUp, true) => Role::Standby(Upstream::default(), None),
            (r, _) => r.clone(),
        };
        if self.promote && matches!(role, Role::Standby(..)) {
            return Err(Error::invalid("--promote makes a delta onto a standby end as a primary: give it without --standby"));
        }
        let mut settings: Vec<(String, String)> = Vec::new();
        let mut add = |k: &str, v: String| settings.push((k.to_string(), v));
        let (starts_as, signal) = match &role {
            Role::AsBackedUp => ("as backed up", None),
            Role::Recover(r) => {
                let command = self.restore_command.clone().ok_or_else(|| Error::invalid("recovery to a target reads the archive: restore from a repository (--repo)"))?;
                add("restore_command", command);
                target_settings(r, &mut add);
                ("primary", Some(RECOVERY_SIGNAL))
            }
            Role::Standby(up, target) => {
                if let Some(r) = target {
                    if r.action == TargetAction::Promote {
                        return Err(Error::invalid(if keep_target {
                            "the target is a standby, and a delta keeps it one: a standby never promotes. To stop it at the recovery target, give --target-action pause (it stays a standby, paused there) or shutdown; to make it a primary, --promote"
                        } else {
                            "a standby never promotes: with a recovery target it replays to the target and stops there. Give --target-action pause (it stays a standby, paused there; SELECT pg_wal_replay_resume() goes on) or shutdown"
                        }));
                    }
                }
                match &self.restore_command {
                    Some(c) if !(keep_target && found.restore_command) => add("restore_command", c.clone()),
                    _ => {}
                }
                if let Some(c) = &up.conninfo {
                    add("primary_conninfo", c.clone());
                }
                if let Some(s) = &up.slot {
                    add("primary_slot_name", s.clone());
                }
                if let Some(r) = target {
                    target_settings(r, &mut add);
                }
                ("standby", Some(STANDBY_SIGNAL))
            }
        };
        for (k, v) in &self.options {
            add(k, v.clone());
        }
        Ok(Decided { keep_target, starts_as, signal, settings, remove_recovery: !keep_target && !self.keep_recovery_settings })
    }
}

/// The settings that stop recovery at `r`'s target.
fn target_settings(r: &Recovery, add: &mut impl FnMut(&str, String)) {
    add("recovery_target_timeline", r.timeline.to_string());
    match &r.target {
        Target::End => return,
        Target::Immediate => add("recovery_target", "immediate".into()),
        // Normalised to UTC: the server parses it, and takes fewer spellings than sheaf does.
        Target::Time(_, ms) => add("recovery_target_time", pg_time(*ms)),
        Target::Lsn(l) => add("recovery_target_lsn", l.to_string()),
        Target::Name(n) => add("recovery_target_name", n.clone()),
        Target::Xid(x) => add("recovery_target_xid", x.to_string()),
    }
    if !r.inclusive {
        add("recovery_target_inclusive", "off".into());
    }
    add("recovery_target_action", r.action.as_pg().into());
}

/// A standby's primary checked before anything is written: the connection string parses as
/// libpq parses it and holds no password (the standby's user keeps it in ~/.pgpass, where it is
/// not copied into every backup of postgresql.auto.conf); the slot name is one PostgreSQL takes.
///
/// # Errors
/// Each named, with the fix.
pub fn check_upstream(up: &Upstream) -> Result<()> {
    if let Some(c) = &up.conninfo {
        let pairs = conninfo::parse(c).map_err(|e| Error::invalid(format!("--primary-conninfo: {e}")))?;
        if pairs.iter().any(|(k, _)| k == "password") {
            return Err(Error::invalid(
                "--primary-conninfo holds a password, which would be written into postgresql.auto.conf and copied into every backup: leave it out and put it in the standby's ~/.pgpass (a line host:port:replication:user:password, mode 0600, owned by the server's user), or name a passfile= there",
            ));
        }
        crate::connect::conninfo::ConnInfo::resolve_with(c, &|_| None).map_err(|e| Error::invalid(format!("--primary-conninfo: {e}")))?;
    }
    if let Some(s) = &up.slot {
        if s.is_empty() || s.len() > 63 || !s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_') {
            return Err(Error::invalid(format!("--slot '{s}': a replication slot's name is 1 to 63 lower-case letters, digits and underscores")));
        }
    }
    if up.create_slot && (up.slot.is_none() || up.conninfo.is_none()) {
        return Err(Error::invalid("--create-slot makes the slot --slot names on the primary --primary-conninfo reaches: give both"));
    }
    Ok(())
}

/// Parse `--recovery-option NAME=VALUE`.
///
/// # Errors
/// No `=`, or an empty name.
pub fn parse_option(text: &str) -> Result<(String, String)> {
    match text.split_once('=') {
        Some((k, v)) if !k.trim().is_empty() => Ok((k.trim().to_ascii_lowercase(), v.trim().to_string())),
        _ => Err(Error::invalid(format!("--recovery-option '{text}': write NAME=VALUE, e.g. --recovery-option recovery_min_apply_delay=5min"))),
    }
}

/// Refuse an option that the restored major's server does not know, or that sheaf writes itself:
/// `postgres --describe-config` of that major lists its parameters (a name with a dot is an
/// extension's, which PostgreSQL takes unchecked).
///
/// # Errors
/// An unknown name (with the nearest known one), a setting sheaf writes, no server of that major.
pub fn check_options(options: &[(String, String)], major: u32, pg_bin: Option<&Path>) -> Result<()> {
    if options.is_empty() {
        return Ok(());
    }
    const OWN: [(&str, &str); 4] = [
        ("restore_command", "it is sheaf wal-fetch from the repository"),
        ("primary_conninfo", "use --primary-conninfo"),
        ("primary_slot_name", "use --slot"),
        ("recovery_target_action", "use --target-action"),
    ];
    for (k, _) in options {
        if let Some((_, fix)) = OWN.iter().find(|(o, _)| o == k) {
            return Err(Error::invalid(format!("--recovery-option {k}: sheaf writes that one itself ({fix})")));
        }
        if k.starts_with("recovery_target") {
            return Err(Error::invalid(format!("--recovery-option {k}: give the target with --target-time, --target-lsn, --target-xid, --target-name or --target immediate, and --target-exclusive or --target-timeline")));
        }
    }
    let bin = crate::installed::server_bin_for(major, pg_bin)?;
    let out = crate::installed::as_server_user(bin.join("postgres"))
        .arg("--describe-config")
        .output()
        .map_err(|e| Error::io(ErrorKind::Source, format!("cannot run {}/postgres --describe-config", bin.display()), e))?;
    if !out.status.success() {
        return Err(Error::new(
            ErrorKind::Source,
            format!("{}/postgres --describe-config failed, so the --recovery-option names cannot be checked: {}", bin.display(), String::from_utf8_lossy(&out.stderr).trim()),
        ));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let known: Vec<&str> = text.lines().filter_map(|l| l.split('\t').next()).filter(|n| !n.is_empty()).collect();
    for (k, _) in options {
        if k.contains('.') || known.iter().any(|n| n.eq_ignore_ascii_case(k)) {
            continue;
        }
        let nearest = known.iter().map(|n| (strsim::jaro_winkler(n, k), *n)).max_by(|a, b| a.0.total_cmp(&b.0)).filter(|(s, _)| *s > 0.8);
        return Err(Error::invalid(format!(
            "--recovery-option {k}: PostgreSQL {major} has no such parameter{}; nothing was written",
            nearest.map(|(_, n)| format!(" (did you mean {n}?)")).unwrap_or_default()
        )));
    }
    Ok(())
}

/// Make the physical slot `up` names on its primary, reserving WAL from now (before the restore,
/// so that the primary keeps what the standby will ask for). A slot of that name that exists is
/// taken over when no standby uses it, and refused when one does. Returns the connection string
/// and name of a slot made here (to drop if the restore fails); `None` when one was taken over.
///
/// # Errors
/// The primary unreachable or refusing (its SQLSTATE and message), a logical slot of that name,
/// a slot in use by an active walsender.
pub fn create_slot(up: &Upstream) -> Result<Option<(String, String)>> {
    let (Some(conninfo), Some(name)) = (&up.conninfo, &up.slot) else { return Ok(None) };
    let mut c = crate::connect::wire::Replication::connect(conninfo).map_err(|e| e.context("--create-slot: cannot reach the primary through --primary-conninfo"))?;
    let existing = c.query(&format!("READ_REPLICATION_SLOT {name}"))?;
    match crate::connect::wire::cell(&existing, 0, "READ_REPLICATION_SLOT")? {
        None => {
            c.query(&format!("CREATE_REPLICATION_SLOT {name} PHYSICAL RESERVE_WAL")).map_err(|e| e.context(format!("--create-slot: the primary refused to create slot {name}")))?;
            Ok(Some((conninfo.clone(), name.clone())))
        }
        Some("physical") => {
            // Whether a walsender uses it is said only over SQL.
            let mut info = crate::connect::conninfo::ConnInfo::resolve(conninfo)?;
            let db = info.get("dbname").filter(|d| *d != "replication").unwrap_or("postgres").to_string();
            let mut client = crate::connect::session::open(&mut info, Some(&db)).map_err(|e| {
                e.context(format!("--create-slot: slot {name} exists on the primary, and whether a standby uses it cannot be read over SQL; name another --slot, or drop it there if nothing uses it (SELECT pg_drop_replication_slot('{name}'))"))
            })?;
            let row = client
                .query_opt("SELECT active_pid FROM pg_replication_slots WHERE slot_name = $1", &[&name.as_str()])
                .map_err(|e| crate::connect::session::db_err("reading pg_replication_slots", e))?;
            match row.and_then(|r| r.get::<_, Option<i32>>(0)) {
                Some(pid) => Err(Error::invalid(format!(
                    "--create-slot: slot {name} exists on the primary and is in use by the walsender of pid {pid} (another standby streams through it): name another --slot"
                ))),
                None => Ok(None),
            }
        }
        Some(other) => Err(Error::invalid(format!("--create-slot: slot {name} exists on the primary as a {other} slot; a standby needs a physical one: name another --slot"))),
    }
}

/// Drop the slot `name` on the primary `conninfo` reaches.
///
/// # Errors
/// The primary unreachable or refusing.
pub fn drop_slot(conninfo: &str, name: &str) -> Result<()> {
    let mut c = crate::connect::wire::Replication::connect(conninfo)?;
    c.query(&format!("DROP_REPLICATION_SLOT {name}")).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::restore::target::TimelineTarget;

    fn recovery(target: Target, action: TargetAction) -> Recovery {
        Recovery { target, action, timeline: TimelineTarget::Latest, inclusive: true }
    }

    fn standby(conninfo: &str) -> Startup {
        Startup {
            role: Role::Standby(Upstream { conninfo: Some(conninfo.into()), slot: Some("replica_1".into()), create_slot: false }, None),
            restore_command: Some("sheaf wal-fetch %f %p".into()),
            ..Startup::default()
        }
    }

    #[test]
    fn a_standby_gets_standby_signal_its_primary_and_never_a_promotion() {
        let d = standby("host=db1 user=replicator application_name=r1").decide(&Found::default(), false).unwrap();
        assert!(d.standby() && !d.keep_target && d.remove_recovery);
        assert_eq!(d.signal, Some(STANDBY_SIGNAL));
        let names: Vec<&str> = d.settings.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(names, ["restore_command", "primary_conninfo", "primary_slot_name"]);
        let mut with_target = standby("host=db1");
        with_target.role = Role::Standby(Upstream::default(), Some(recovery(Target::Xid(900), TargetAction::Promote)));
        assert!(with_target.decide(&Found::default(), false).unwrap_err().to_string().contains("never promotes"));
        with_target.role = Role::Standby(Upstream::default(), Some(recovery(Target::Xid(900), TargetAction::Pause)));
        let d = with_target.decide(&Found::default(), false).unwrap();
        assert!(d.settings.contains(&("recovery_target_xid".into(), "900".into())) && d.settings.contains(&("recovery_target_action".into(), "pause".into())));
    }

    #[test]
    fn a_delta_onto_a_standby_keeps_it_one_unless_told() {
        let asked = Startup { role: Role::Recover(recovery(Target::End, TargetAction::Promote)), restore_command: Some("sheaf wal-fetch %f %p".into()), ..Startup::default() };
        let is_standby = Found { standby: true, restore_command: true };
        let d = asked.decide(&is_standby, true).unwrap();
        assert!(d.standby() && d.keep_target && !d.remove_recovery);
        assert_eq!(d.kept_paths(), STANDBY_OWN);
        assert!(d.settings.is_empty(), "its own restore_command stays: {:?}", d.settings);
        let d = asked.decide(&Found { standby: true, restore_command: false }, true).unwrap();
        assert_eq!(d.settings.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>(), ["restore_command"], "what it lacks is added");
        let promoted = Startup { promote: true, ..asked.clone() };
        let d = promoted.decide(&is_standby, true).unwrap();
        assert!(!d.standby() && !d.keep_target && d.signal == Some(RECOVERY_SIGNAL));
        assert!(asked.decide(&is_standby, false).is_ok_and(|d| !d.keep_target), "not a delta: the target's files are not kept");
        let targeted = Startup { role: Role::Recover(recovery(Target::Name("p".into()), TargetAction::Promote)), ..asked };
        assert!(targeted.decide(&is_standby, true).unwrap_err().to_string().contains("--promote"));
    }

    #[test]
    fn a_primary_is_named_without_secrets_in_libpq_syntax() {
        let refused = |c: &str| standby(c).decide(&Found::default(), false).unwrap_err().to_string();
        assert!(refused("host=db1 password=secret").contains(".pgpass"));
        assert!(refused("postgresql://rep:secret@db1/postgres").contains(".pgpass"));
        assert!(refused("host=db1 sslmode=sometimes").contains("sslmode"), "{}", refused("host=db1 sslmode=sometimes"));
        assert!(refused("host='db1").contains("--primary-conninfo"));
        assert!(refused("hots=db1").contains("hots"));
        let mut bad_slot = standby("host=db1");
        bad_slot.role = Role::Standby(Upstream { slot: Some("Replica-1".into()), ..Upstream::default() }, None);
        assert!(bad_slot.decide(&Found::default(), false).unwrap_err().to_string().contains("lower-case"));
        bad_slot.role = Role::Standby(Upstream { create_slot: true, ..Upstream::default() }, None);
        assert!(bad_slot.decide(&Found::default(), false).unwrap_err().to_string().contains("give both"));
    }

    #[test]
    fn written_settings_replace_the_backed_up_recovery_settings() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join(AUTO_CONF), "port = '5433'\nprimary_conninfo = 'host=old'\nrecovery_target_time = '2026-01-01 00:00:00+00'\n").unwrap();
        std::fs::write(d.path().join(RECOVERY_SIGNAL), "").unwrap();
        let w = standby("host=db1").decide(&Found::default(), false).unwrap().write(d.path()).unwrap();
        assert_eq!(w.removed, ["primary_conninfo", "recovery_target_time"]);
        assert_eq!((w.starts_as.as_str(), w.signal.as_deref()), ("standby", Some(STANDBY_SIGNAL)));
        let now = conf::settings(d.path());
        assert_eq!(now.get("primary_conninfo").map(String::as_str), Some("host=db1"));
        assert_eq!(now.get("port").map(String::as_str), Some("5433"), "the rest stays");
        assert!(!now.contains_key("recovery_target_time"));
        assert!(d.path().join(STANDBY_SIGNAL).exists() && !d.path().join(RECOVERY_SIGNAL).exists(), "one signal, the standby's");
        let kept = Startup { keep_recovery_settings: true, ..standby("host=db2") };
        std::fs::write(d.path().join(AUTO_CONF), "primary_conninfo = 'host=old'\n").unwrap();
        assert!(kept.decide(&Found::default(), false).unwrap().write(d.path()).unwrap().removed.is_empty());
    }

    #[test]
    fn options_parse_and_refuse_what_sheaf_writes_itself() {
        assert_eq!(parse_option("Recovery_Min_Apply_Delay = 5min").unwrap(), ("recovery_min_apply_delay".into(), "5min".into()));
        assert!(parse_option("=1").is_err() && parse_option("hot_standby").is_err());
        for own in ["restore_command=cp", "primary_conninfo=host=x", "recovery_target_time=now"] {
            let o = parse_option(own).unwrap();
            assert!(check_options(&[o], 15, Some(Path::new("/nonexistent"))).unwrap_err().to_string().contains("--recovery-option"), "{own}");
        }
    }
}
