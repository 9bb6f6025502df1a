//! The connection to the server being backed up: facts about it, the checks an online backup needs
//! before it touches anything, and the statements that start and stop the backup. Every failure
//! names its cause and its fix.

use postgres::error::SqlState;
use postgres::Client;
use sheaf_core::{Error, ErrorKind, Result};

use crate::cluster::lsn::Lsn;

/// Whether `text` names a PostgreSQL server (a `postgres://` or `postgresql://` URL, or a libpq
/// keyword/value string such as `host=/run/postgresql dbname=postgres`) rather than a
/// path: how every command tells a running cluster from a directory.
pub fn is_url(text: &str) -> bool {
    text.starts_with("postgres://") || text.starts_with("postgresql://") || crate::connect::conninfo::is_keyword_string(text)
}

/// What sheaf needs to know about the server.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ServerFacts {
    /// `server_version`, e.g. `15.18 (Debian 15.18-0+deb12u1)`.
    pub version: String,
    /// `server_version_num`, e.g. 150018.
    pub version_num: i32,
    /// The cluster's system identifier.
    pub system_identifier: String,
    /// `data_directory` as the server reports it (None when the role may not read it).
    pub data_directory: Option<String>,
    /// Whether pages carry checksums.
    pub data_checksums: bool,
    /// 8 KiB pages and 1 GiB segments: the build whose pages sheaf can verify.
    pub default_layout: bool,
    /// `wal_segment_size` in bytes.
    pub wal_segment_size: u64,
    /// `PG_<major>_<catversion>`: the directory a tablespace keeps this server's files in.
    pub tablespace_version_dir: String,
    /// A standby (in recovery): a backup there starts at a restartpoint and ends at its minimum
    /// recovery point.
    pub in_recovery: bool,
}

/// A tablespace outside the data directory.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct Tablespace {
    /// Its OID (the name of its link in pg_tblspc).
    pub oid: u32,
    /// Its name.
    pub name: String,
    /// Where it lives.
    pub location: String,
}

/// A database as the catalogs described it when the backup started: what `--db-include`,
/// `extract --relation` and `lab` find relations by.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct DatabaseInfo {
    /// Its name.
    pub name: String,
    /// Its OID (the name of its folder under base/ or a tablespace).
    pub oid: u32,
    /// Its default tablespace's OID.
    pub tablespace: u32,
    /// False for a database that takes no connections (template0): its relations are not listed.
    pub connectable: bool,
    /// Its relations with storage, as backups made before [`DatabaseInfo::packed`] listed them
    /// (empty in newer ones, and still written, so that an older sheaf reads the facts).
    pub relations: Vec<RelationInfo>,
    /// Its relations with storage, a line each: schema, name, kind and path, separated by tabs
    /// (a tab, newline, return or backslash in a name written `\t`, `\n`, `\r`, `\\`). One
    /// string, a few tens of bytes a relation, where an object each took about a kilobyte once
    /// parsed: a cluster with a schema per tenant has hundreds of thousands of relations, and
    /// every reader of the manifest's head parses this.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub packed: String,
}

impl DatabaseInfo {
    /// Its relations, from whichever list the backup wrote.
    pub fn relations(&self) -> impl Iterator<Item = Result<RelationInfo>> + '_ {
        self.relations.iter().cloned().map(Ok).chain(self.packed.split_terminator('\n').map(unpack_relation))
    }
}

/// Append `r` to a packed list ([`DatabaseInfo::packed`]).
pub fn pack_relation(out: &mut String, r: &RelationInfo) {
    for (i, field) in [&r.schema, &r.name, &r.kind, &r.path].into_iter().enumerate() {
        if i > 0 {
            out.push('\t');
        }
        for c in field.chars() {
            match c {
                '\t' => out.push_str("\\t"),
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\\' => out.push_str("\\\\"),
                c => out.push(c),
            }
        }
    }
    out.push('\n');
}

/// One line of a packed list back.
fn unpack_relation(line: &str) -> Result<RelationInfo> {
    let bad = || Error::corrupt(format!("the manifest's list of relations has a line that does not parse: {line:?}"));
    let mut fields = Vec::with_capacity(4);
    for raw in line.split('\t') {
        let mut f = String::with_capacity(raw.len());
        let mut chars = raw.chars();
        while let Some(c) = chars.next() {
            f.push(if c != '\\' {
                c
            } else {
                match chars.next() {
                    Some('t') => '\t',
                    Some('n') => '\n',
                    Some('r') => '\r',
                    Some('\\') => '\\',
                    _ => return Err(bad()),
                }
            });
        }
        fields.push(f);
    }
    let [schema, name, kind, path]: [String; 4] = fields.try_into().map_err(|_| bad())?;
    Ok(RelationInfo { schema, name, kind, path })
}

/// A relation with files of its own.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct RelationInfo {
    /// Schema.
    pub schema: String,
    /// Name.
    pub name: String,
    /// `pg_class.relkind`: r table, i index, t TOAST table, m materialized view, S sequence, ...
    pub kind: String,
    /// Its main fork's path from the data directory (`base/DB/FILENODE`, or under `pg_tblspc/`),
    /// as `pg_relation_filepath` gives it; other forks and segments add `_fsm`, `.1`, ...
    pub path: String,
}

/// Where `pg_backup_start` started the backup.
#[derive(Clone, Copy, Debug)]
pub struct Start {
    /// The redo point: where WAL replay starts.
    pub lsn: Lsn,
    /// Its timeline.
    pub timeline: u32,
    /// The start checkpoint's own record.
    pub checkpoint: Lsn,
}

/// What `pg_backup_stop` returns.
#[derive(Clone, Debug)]
pub struct StopInfo {
    /// The LSN at which the backup ends.
    pub lsn: Lsn,
    /// The backup_label file's content.
    pub backup_label: String,
    /// The tablespace_map file's content (empty without tablespaces).
    pub tablespace_map: String,
    /// The timeline of the stop LSN: on a standby, its minimum recovery point's.
    pub timeline: u32,
}

/// Whether a server's error may pass on a second try, by its SQLSTATE: the connection's class
/// (08), a server shutting down or starting (57P01-57P03), too many connections or too little of
/// a resource (53), a serialization failure or deadlock (40001, 40P01). Decided by the code, so a
/// server whose `lc_messages` is not English is read the same.
pub fn transient_state(code: &SqlState) -> bool {
    let c = code.code();
    c.starts_with("08")
        || c.starts_with("53")
        || [SqlState::ADMIN_SHUTDOWN, SqlState::CRASH_SHUTDOWN, SqlState::CANNOT_CONNECT_NOW, SqlState::T_R_SERIALIZATION_FAILURE, SqlState::T_R_DEADLOCK_DETECTED].contains(code)
}

/// sheaf's error for a server's: the SQLSTATE beside the message, transient where the state says
/// so ([`transient_state`]) or where the client lost the connection (no SQLSTATE at all).
pub fn db_err(what: &str, e: postgres::Error) -> Error {
    let transient = match e.as_db_error() {
        Some(d) => transient_state(d.code()),
        // The link: closed, refused, reset (an I/O error under the client's).
        None => e.is_closed() || std::error::Error::source(&e).is_some_and(|c| c.is::<std::io::Error>()),
    };
    let detail = match e.as_db_error() {
        Some(d) => format!("{} ({})", d.message(), d.code().code()),
        None => {
            // The client error hides the cause (refused, no such socket) in its source chain.
            let mut text = e.to_string();
            let mut cause = std::error::Error::source(&e);
            while let Some(c) = cause {
                text = format!("{text}: {c}");
                cause = c.source();
            }
            text
        }
    };
    Error::new(ErrorKind::Source, format!("{what}: {detail}")).transient(transient)
}

/// The URL without its password, for messages, reports and manifests: the password in the user
/// part (up to the last `@` before the host, since a password may hold `@`) and any `password=`
/// parameter are dropped.
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        // keyword=value pairs: the password dropped, the rest as given.
        return match crate::connect::conninfo::parse(url) {
            Ok(pairs) => pairs
                .into_iter()
                .filter(|(k, _)| k != "password")
                .map(|(k, v)| if v.is_empty() || v.contains([' ', '\'', '\\']) { format!("{k}='{}'", v.replace('\\', "\\\\").replace('\'', "\\'")) } else { format!("{k}={v}") })
                .collect::<Vec<_>>()
                .join(" "),
            Err(_) => "(a connection string that does not parse)".into(),
        };
    };
    let (authority_and_path, query) = match rest.split_once('?') {
        Some((a, q)) => (a, Some(q)),
        None => (rest, None),
    };
    let (authority, path) = match authority_and_path.find('/') {
        Some(i) => authority_and_path.split_at(i),
        None => (authority_and_path, ""),
    };
    let authority = match authority.rsplit_once('@') {
        Some((user_info, host)) => format!("{}@{host}", user_info.split(':').next().unwrap_or_default()),
        None => authority.to_string(),
    };
    let query: Vec<&str> = query.map(|q| q.split('&').filter(|kv| !kv.to_ascii_lowercase().starts_with("password=")).collect()).unwrap_or_default();
    let query = if query.is_empty() { String::new() } else { format!("?{}", query.join("&")) };
    format!("{scheme}://{authority}{path}{query}")
}

/// A SQL connection to the first of `info`'s hosts that answers and is what its
/// `target_session_attrs` asks for, in database `db` (else `info`'s), as libpq makes it: TLS as
/// its `sslmode` says on TCP (never on a Unix socket), the password from the string, the
/// service, `PGPASSWORD` or the password file.
///
/// # Errors
/// Bad parameters or TLS files ([`ErrorKind::InvalidInput`]); no host that answers, each host's
/// failure said, with the likely fix and what was wrong with the password file.
pub fn open(info: &mut crate::connect::conninfo::ConnInfo, db: Option<&str>) -> Result<Client> {
    use crate::connect::conninfo::{Endpoint, SessionAttrs, SslMode};
    let policy = crate::connect::tls::Policy::for_conn(info)?;
    let targets = info.targets()?;
    let dbname = db.map_or_else(|| info.dbname(), str::to_string);
    let attrs = info.session_attrs();
    let shown = info.shown();
    let mut failures: Vec<String> = Vec::new();
    let mut last: Option<Error> = None;
    // prefer-standby: a standby first, then any.
    let passes: &[bool] = if attrs == SessionAttrs::PreferStandby { &[true, false] } else { &[false] };
    for &standby_only in passes {
        for t in &targets {
            let mut config = postgres::Config::new();
            match &t.endpoint {
                Endpoint::Socket(dir) => {
                    config.host_path(dir).ssl_mode(postgres::config::SslMode::Disable);
                }
                Endpoint::Tcp { host, addr } => {
                    config.host(host);
                    if let Some(a) = addr {
                        config.hostaddr(a.parse().map_err(|_| Error::invalid(format!("invalid hostaddr \"{a}\": give a numeric IP address")))?);
                    }
                    config.ssl_mode(match policy.mode {
                        SslMode::Disable => postgres::config::SslMode::Disable,
                        SslMode::Allow | SslMode::Prefer => postgres::config::SslMode::Prefer,
                        _ => postgres::config::SslMode::Require,
                    });
                }
            }
            config.port(t.port).user(&info.user()).dbname(&dbname).connect_timeout(info.connect_timeout());
            config.application_name(info.get("application_name").or(info.get("fallback_application_name")).unwrap_or("sheaf"));
            if let Some(o) = info.get("options") {
                config.options(o);
            }
            // A backup session idles for as long as the copy takes: keep it alive.
            config.keepalives(info.get("keepalives") != Some("0"));
            config.keepalives_idle(std::time::Duration::from_secs(info.get("keepalives_idle").and_then(|v| v.parse().ok()).unwrap_or(60)));
            if let Some(pw) = info.password(t, &dbname) {
                config.password(pw.as_str());
            }
            let where_ = match &t.endpoint {
                Endpoint::Socket(d) => format!("socket {}/.s.PGSQL.{}", d.display(), t.port),
                Endpoint::Tcp { host, .. } => format!("{host}:{}", t.port),
            };
            let connected = match &policy.config {
                Some(c) => config.connect(crate::connect::tls::Rustls(c.clone())),
                None => config.connect(postgres::NoTls),
            };
            let mut client = match connected {
                Ok(c) => c,
                Err(e) => {
                    // The whole chain's words: the TLS and configuration causes are in the sources.
                    let mut text = e.to_string();
                    let mut source = std::error::Error::source(&e);
                    while let Some(s) = source {
                        text.push_str(&format!(": {s}"));
                        source = s.source();
                    }
                    let text = text.to_ascii_lowercase();
                    let hint = match e.as_db_error().map(|d| d.code()) {
                        _ if text.contains("client certificate") => "the server wants a client certificate its CA signed: give sslcert and sslkey",
                        _ if text.contains("peer certificate") => {
                            "the server's certificate does not check against the root certificate (sslrootcert), or does not name the host (verify-full): check both, or the host you dial"
                        }
                        Some(&SqlState::INVALID_PASSWORD | &SqlState::INVALID_AUTHORIZATION_SPECIFICATION) => {
                            "check the user and password (in the connection string, PGPASSWORD or ~/.pgpass) and pg_hba.conf"
                        }
                        Some(&SqlState::INVALID_CATALOG_NAME) => "the database does not exist; any database will do, e.g. dbname=postgres",
                        _ if text.contains("password missing") => "the server asks for a password: give it in the connection string, PGPASSWORD or a password file (~/.pgpass, mode 0600)",
                        _ => "check that the server runs and that host, port or socket directory are right",
                    };
                    let err = db_err(&format!("cannot connect to {where_}"), e);
                    failures.push(format!("{}; {hint}", err.message()));
                    last = Some(err);
                    continue;
                }
            };
            if attrs != SessionAttrs::Any {
                let r =
                    client.query_one("SELECT pg_is_in_recovery(), current_setting('transaction_read_only') = 'on'", &[]).map_err(|e| db_err("checking target_session_attrs", e))?;
                let (recovery, read_only): (bool, bool) = (r.get(0), r.get(1));
                let fits = match attrs {
                    SessionAttrs::Any => true,
                    SessionAttrs::ReadWrite => !read_only,
                    SessionAttrs::ReadOnly => read_only,
                    SessionAttrs::Primary => !recovery,
                    SessionAttrs::Standby => recovery,
                    SessionAttrs::PreferStandby => recovery || !standby_only,
                };
                if !fits {
                    failures.push(format!(
                        "{where_} is {} (target_session_attrs={})",
                        if recovery { "a standby" } else { "a primary" },
                        info.get("target_session_attrs").unwrap_or_default()
                    ));
                    continue;
                }
            }
            return Ok(client);
        }
    }
    let transient = last.as_ref().is_some_and(Error::is_transient);
    let mut said = failures.join("; ");
    for w in &info.warnings {
        said.push_str(&format!(" ({w})"));
    }
    Err(Error::new(ErrorKind::Source, format!("cannot connect to {shown}: {said}")).transient(transient))
}

/// How a server archives its WAL, and how that has gone (`pg_stat_archiver`).
#[derive(Clone, Debug, serde::Serialize)]
pub struct Archiver {
    /// `archive_mode`.
    pub mode: String,
    /// `archive_command`.
    pub command: String,
    /// `archive_library` (16+; empty before).
    pub library: String,
    /// A standby (its archiver runs only with `archive_mode = always`).
    pub in_recovery: bool,
    /// Files archived since the statistics were reset.
    pub archived_count: i64,
    /// The last one.
    pub last_archived_wal: String,
    /// When, seconds since the epoch (0: never).
    pub last_archived_time: i64,
    /// Failed attempts.
    pub failed_count: i64,
    /// The last file that failed.
    pub last_failed_wal: String,
    /// When, seconds since the epoch (0: never).
    pub last_failed_time: i64,
    /// The server's WAL position now (written on a primary, replayed on a standby).
    pub lsn: Lsn,
    /// Its timeline (of the last checkpoint).
    pub timeline: u32,
    /// The cluster's system identifier.
    pub system_identifier: String,
}

/// A row as text, `None` for NULL ([`Server::simple_query`]).
pub type TextRow = Vec<Option<String>>;

/// A connected server.
pub struct Server {
    client: Client,
    url: String,
}

/// The relations with storage of database `db`, through `url` with `db` swapped in, packed
/// ([`DatabaseInfo::packed`]) as the rows stream in.
fn relations_of(url: &str, db: &str) -> Result<String> {
    let mut info = crate::connect::conninfo::ConnInfo::resolve(url)?;
    let mut client = open(&mut info, Some(db)).map_err(|e| e.context(format!("listing the relations of database {db}")))?;
    let what = || format!("listing the relations of database {db}");
    let mut rows = client
        .query_raw(
            "SELECT n.nspname::text, c.relname::text, c.relkind::text, pg_relation_filepath(c.oid) \
             FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
             WHERE pg_relation_filepath(c.oid) IS NOT NULL ORDER BY 1, 2",
            std::iter::empty::<&str>(),
        )
        .map_err(|e| db_err(&what(), e))?;
    let mut out = String::new();
    while let Some(r) = fallible_iterator::FallibleIterator::next(&mut rows).map_err(|e| db_err(&what(), e))? {
        pack_relation(&mut out, &RelationInfo { schema: r.get(0), name: r.get(1), kind: r.get(2), path: r.get(3) });
    }
    Ok(out)
}

impl Server {
    /// Connect with a libpq connection string: a URL (`postgres://USER@HOST:PORT/DB?host=/socket/dir`)
    /// or keyword/value pairs, completed from the service file, the environment and the password
    /// file as libpq does ([`crate::connect::conninfo`], [`open`]).
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`] for a URL that does not parse; [`ErrorKind::Source`] naming the
    /// server when it cannot be reached or refuses the login.
    pub fn connect(url: &str) -> Result<Server> {
        let mut info = crate::connect::conninfo::ConnInfo::resolve(url)?;
        let client = open(&mut info, None)?;
        let mut server = Server { client, url: redact(url) };
        // Role or server timeouts must not end the session mid-backup.
        server
            .client
            .batch_execute("SET statement_timeout = 0; SET idle_session_timeout = 0; SET idle_in_transaction_session_timeout = 0; SET lock_timeout = 0")
            .map_err(|e| db_err("preparing the session", e))?;
        Ok(server)
    }

    /// The URL without password.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Run `sql` (one or more statements) with the simple query protocol: per statement, its rows
    /// as text (`None` for NULL), or `None` for a statement that returns no rows (SET, CREATE).
    ///
    /// # Errors
    /// The server's error for the first statement that fails.
    pub fn simple_query(&mut self, sql: &str) -> Result<Vec<Option<Vec<TextRow>>>> {
        use postgres::SimpleQueryMessage as M;
        let mut out = Vec::new();
        let mut rows: Option<Vec<TextRow>> = None;
        for m in self.client.simple_query(sql).map_err(|e| db_err("running the queries", e))? {
            match m {
                M::RowDescription(_) => rows = Some(Vec::new()),
                M::Row(r) => rows.get_or_insert_with(Vec::new).push((0..r.len()).map(|i| r.get(i).map(str::to_string)).collect()),
                M::CommandComplete(_) => out.push(rows.take()),
                _ => {}
            }
        }
        Ok(out)
    }

    fn one(&mut self, what: &str, sql: &str) -> Result<postgres::Row> {
        self.client.query_one(sql, &[]).map_err(|e| db_err(what, e))
    }

    /// Learn the facts and check that an online backup can run: version 15 or newer, a primary,
    /// `wal_level` above minimal, a role that may back up, room for a replication slot.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`] naming the unmet condition and the fix.
    pub fn check(&mut self) -> Result<ServerFacts> {
        self.check_with(true)
    }

    /// [`Server::check`]; without `backup_functions`, a role with REPLICATION is enough (BASE_BACKUP
    /// needs no EXECUTE on pg_backup_start and pg_backup_stop).
    ///
    /// # Errors
    /// As [`Server::check`].
    pub fn check_with(&mut self, backup_functions: bool) -> Result<ServerFacts> {
        let r = self.one(
            "reading server settings",
            "SELECT current_setting('server_version'), current_setting('server_version_num')::int, \
                    pg_is_in_recovery(), current_setting('wal_level'), current_setting('data_checksums') = 'on', \
                    (SELECT setting::bigint FROM pg_settings WHERE name = 'wal_segment_size'), current_setting('max_replication_slots')::int, \
                    current_user::text, current_setting('block_size')::int, \
                    (SELECT setting::bigint FROM pg_settings WHERE name = 'segment_size')",
        )?;
        let (version, version_num, in_recovery, wal_level): (String, i32, bool, String) = (r.get(0), r.get(1), r.get(2), r.get(3));
        let (data_checksums, wal_segment_size, max_slots, user): (bool, i64, i32, String) = (r.get(4), r.get(5), r.get(6), r.get(7));
        let (block_size, segment_blocks): (i32, i64) = (r.get(8), r.get(9));
        supported_major((version_num / 10000) as u32, &version, &self.url)?;
        if wal_level == "minimal" {
            return Err(Error::invalid(format!(
                "{} has wal_level = minimal, which cannot take an online backup: set wal_level = replica (ALTER SYSTEM SET wal_level = replica) and restart the server",
                self.url
            )));
        }
        let r = self.one(
            "reading role privileges",
            "SELECT r.rolsuper OR r.rolreplication, \
                    has_function_privilege('pg_backup_start(text, boolean)', 'EXECUTE') \
                    AND has_function_privilege('pg_backup_stop(boolean)', 'EXECUTE') \
             FROM pg_roles r WHERE r.rolname = current_user",
        )?;
        let (replication, backup_fns): (bool, bool) = (r.get(0), r.get(1));
        if !replication {
            return Err(Error::invalid(format!("role {user} may not take a backup: it needs the REPLICATION attribute (ALTER ROLE {user} REPLICATION), or use a superuser")));
        }
        if backup_functions && !backup_fns {
            return Err(Error::invalid(format!(
                "role {user} may not take a backup: it needs the REPLICATION attribute (ALTER ROLE {user} REPLICATION) and EXECUTE on pg_backup_start and pg_backup_stop (GRANT EXECUTE ON FUNCTION pg_backup_start, pg_backup_stop TO {user}), or use a superuser"
            )));
        }
        if max_slots < 1 {
            return Err(Error::invalid(format!(
                "{} has max_replication_slots = 0; sheaf reserves WAL with a temporary slot: set max_replication_slots to 1 or more and restart",
                self.url
            )));
        }
        let r = self.one("reading the control file", "SELECT system_identifier::text, catalog_version_no FROM pg_control_system()")?;
        let system_identifier: String = r.get(0);
        let catversion: i32 = r.get(1);
        let data_directory = self.client.query_one("SELECT current_setting('data_directory')", &[]).ok().map(|r| r.get::<_, String>(0));
        Ok(ServerFacts {
            version,
            version_num,
            system_identifier,
            data_directory,
            data_checksums,
            default_layout: block_size == 8192 && segment_blocks == 131_072,
            wal_segment_size: wal_segment_size as u64,
            tablespace_version_dir: format!("PG_{}_{catversion}", version_num / 10000),
            in_recovery,
        })
    }

    /// Bytes of all databases together (an estimate of the backup's size, for sizing upload parts).
    ///
    /// # Errors
    /// A database error.
    pub fn databases_size(&mut self) -> Result<u64> {
        let row = self.one("sizing the databases", "SELECT coalesce(sum(pg_database_size(oid)), 0)::int8 FROM pg_database WHERE datallowconn")?;
        Ok(row.get::<_, i64>(0).max(0) as u64)
    }

    /// Every database, and for each that takes connections, its relations with storage (reached
    /// with this server's URL, the database swapped in). A database that cannot be read (dropped
    /// meanwhile, or closed to this role) is listed without relations, and said in `warnings`.
    ///
    /// # Errors
    /// A database error listing the databases.
    pub fn catalog(&mut self, url: &str, warnings: &mut Vec<String>) -> Result<Vec<DatabaseInfo>> {
        let rows = self
            .client
            .query("SELECT datname::text, oid::int8, dattablespace::int8, datallowconn FROM pg_database ORDER BY oid", &[])
            .map_err(|e| db_err("listing databases", e))?;
        let mut out = Vec::with_capacity(rows.len());
        for r in rows {
            let (name, oid, tablespace, connectable): (String, i64, i64, bool) = (r.get(0), r.get(1), r.get(2), r.get(3));
            let packed = if connectable {
                relations_of(url, &name).unwrap_or_else(|e| {
                    warnings.push(format!("the relations of database {name} are not recorded ({e}): --db-include and extract cannot find them by name"));
                    String::new()
                })
            } else {
                String::new()
            };
            out.push(DatabaseInfo { name, oid: oid as u32, tablespace: tablespace as u32, connectable, relations: Vec::new(), packed });
        }
        Ok(out)
    }

    /// The main fork's file of relation `name` (`SCHEMA.NAME` or a name on the search path), as a
    /// path on this host: the data directory joined with `pg_relation_filepath`.
    ///
    /// # Errors
    /// A relation that does not exist or has no storage, or a role that may not read the data
    /// directory's location.
    pub fn relation_file(&mut self, name: &str) -> Result<std::path::PathBuf> {
        let row = self
            .client
            .query_one("SELECT current_setting('data_directory'), pg_relation_filepath(to_regclass($1))", &[&name])
            .map_err(|e| db_err(&format!("finding relation {name}"), e))?;
        let (dir, rel): (String, Option<String>) = (row.get(0), row.get(1));
        let rel = rel.ok_or_else(|| Error::invalid(format!("no relation {name} with storage in this database (give SCHEMA.NAME, and the database in the URL)")))?;
        Ok(std::path::Path::new(&dir).join(rel))
    }

    /// Tablespaces other than pg_default and pg_global.
    ///
    /// # Errors
    /// A database error.
    pub fn tablespaces(&mut self) -> Result<Vec<Tablespace>> {
        let rows = self
            .client
            .query(
                "SELECT oid::int8, spcname::text, pg_tablespace_location(oid) FROM pg_tablespace \
                 WHERE pg_tablespace_location(oid) <> '' ORDER BY oid",
                &[],
            )
            .map_err(|e| db_err("listing tablespaces", e))?;
        Ok(rows.iter().map(|r| Tablespace { oid: r.get::<_, i64>(0) as u32, name: r.get(1), location: r.get(2) }).collect())
    }

    /// Create a temporary physical replication slot that reserves WAL now. It lives as long as this
    /// connection, so a failed or killed backup leaves none behind.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`] when a slot of that name exists.
    pub fn create_slot(&mut self, name: &str) -> Result<()> {
        self.client.execute("SELECT pg_create_physical_replication_slot($1, true, true)", &[&name]).map(drop).map_err(|e| {
            if e.as_db_error().is_some_and(|d| *d.code() == SqlState::DUPLICATE_OBJECT) {
                Error::invalid(format!(
                    "replication slot {name} already exists: choose another name with --slot, or drop it (SELECT pg_drop_replication_slot('{name}')) if nothing uses it"
                ))
            } else {
                db_err(&format!("creating replication slot {name}"), e)
            }
        })
    }

    /// Drop the slot (it would also go when the connection closes).
    pub fn drop_slot(&mut self, name: &str) {
        let _ = self.client.execute("SELECT pg_drop_replication_slot($1)", &[&name]);
    }

    /// `pg_backup_start(label, fast)`: where the backup starts. On a standby the start is the redo
    /// point of a restartpoint, the last checkpoint it replayed.
    ///
    /// # Errors
    /// A database error (e.g. a backup already running in this session).
    pub fn backup_start(&mut self, label: &str, fast: bool) -> Result<Start> {
        let r = self.client.query_one("SELECT pg_backup_start($1, $2)::text", &[&label, &fast]).map_err(|e| self.refused("pg_backup_start", e, false))?;
        let lsn: String = r.get(0);
        let lsn = lsn.parse().map_err(|_| Error::corrupt(format!("server returned LSN '{lsn}'")))?;
        // The checkpoint (or restartpoint) pg_backup_start waited for is the control file's now:
        // its timeline is the start's (backup_label confirms it at the stop).
        let (timeline, checkpoint) = self.checkpoint()?;
        Ok(Start { lsn, timeline, checkpoint })
    }

    /// What a standby refuses at the start or stop of a backup, with what to do: a promotion
    /// during the backup, WAL written with full_page_writes off replayed meanwhile. Both come as
    /// SQLSTATE 55000 (object not in prerequisite state) in the server's language, so which one it
    /// was is asked of the server's state, never read from its message: a backup that began in
    /// recovery and ends out of it was promoted; one still in recovery replayed such WAL.
    fn refused(&mut self, what: &str, e: postgres::Error, began_in_recovery: bool) -> Error {
        if e.as_db_error().map(|d| d.code()) != Some(&SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE) {
            return db_err(what, e);
        }
        let now_in_recovery = self.client.query_one("SELECT pg_is_in_recovery()", &[]).ok().map(|r| r.get::<_, bool>(0));
        match now_in_recovery {
            Some(false) if began_in_recovery => Error::new(
                ErrorKind::Source,
                format!(
                    "{} was promoted while the backup ran, so the copy is not consistent and was not kept: take the backup again (from the new primary, or from another standby)",
                    self.url
                ),
            ),
            Some(true) => {
                let message = e.as_db_error().map(|d| d.message().to_string()).unwrap_or_default();
                Error::new(
                    ErrorKind::Source,
                    format!(
                        "{} refused {what} as a standby ({message}): it replayed WAL written with full_page_writes = off, so pages in a copy may be torn and the backup was not kept: set full_page_writes = on on the primary (ALTER SYSTEM SET full_page_writes = on; SELECT pg_reload_conf()) and run CHECKPOINT there, then CHECKPOINT on the standby once it has replayed that, and take the backup again",
                        self.url
                    ),
                )
            }
            _ => db_err(what, e),
        }
    }

    /// The control file's last checkpoint (a restartpoint on a standby): its timeline and its
    /// record's LSN.
    fn checkpoint(&mut self) -> Result<(u32, Lsn)> {
        let r = self.one("reading the last checkpoint", "SELECT timeline_id::int8, checkpoint_lsn::text FROM pg_control_checkpoint()")?;
        let at: String = r.get(1);
        Ok((r.get::<_, i64>(0) as u32, at.parse().unwrap_or_default()))
    }

    /// `CHECKPOINT` (on a standby, a restartpoint at the last checkpoint record it replayed, which
    /// writes out every page changed before that checkpoint's redo point); returns that redo point.
    ///
    /// # Errors
    /// A role that may not checkpoint, naming the grant.
    pub fn restartpoint(&mut self) -> Result<Lsn> {
        self.client.batch_execute("CHECKPOINT").map_err(|e| {
            if e.as_db_error().is_some_and(|d| *d.code() == SqlState::INSUFFICIENT_PRIVILEGE) {
                Error::invalid(format!(
                    "{} will not let this role run CHECKPOINT, which a hybrid backup needs on the standby: connect as a superuser, or GRANT pg_checkpoint TO the backup role (PostgreSQL 15+)",
                    self.url
                ))
            } else {
                db_err(&format!("CHECKPOINT on {}", self.url), e)
            }
        })?;
        let r = self.one("reading the last checkpoint", "SELECT redo_lsn::text FROM pg_control_checkpoint()")?;
        let redo: String = r.get(0);
        Ok(redo.parse().unwrap_or_default())
    }

    /// `pg_backup_stop(false)`: end the backup (without waiting for archiving, since sheaf copies
    /// the WAL itself). On a standby the stop is its minimum recovery point.
    ///
    /// # Errors
    /// A database error, e.g. when the server was restarted during the backup; on a standby,
    /// a promotion during the backup or WAL written with full_page_writes off replayed meanwhile,
    /// each named with what to do.
    pub fn backup_stop(&mut self, in_recovery: bool, start_timeline: u32) -> Result<StopInfo> {
        let r = self
            .client
            .query_one("SELECT lsn::text, labelfile, coalesce(spcmapfile, '') FROM pg_backup_stop(false)", &[])
            .map_err(|e| self.refused("pg_backup_stop", e, in_recovery))?;
        let lsn: String = r.get(0);
        let timeline = if in_recovery {
            let t = self.one("reading the minimum recovery point's timeline", "SELECT min_recovery_end_timeline::int8 FROM pg_control_recovery()")?;
            t.get::<_, i64>(0) as u32
        } else {
            start_timeline
        };
        Ok(StopInfo { lsn: lsn.parse().map_err(|_| Error::corrupt(format!("server returned LSN '{lsn}'")))?, backup_label: r.get(1), tablespace_map: r.get(2), timeline })
    }

    /// Whether WAL is on disk past `lsn`: flushed on a primary; received (or, on a standby fed
    /// from an archive, replayed) on a standby.
    ///
    /// # Errors
    /// A database error.
    pub fn wal_reached(&mut self, lsn: Lsn) -> Result<bool> {
        let l = lsn.to_string();
        let r = self
            .client
            .query_one(
                "SELECT CASE WHEN pg_is_in_recovery() \
                        THEN greatest(coalesce(pg_last_wal_receive_lsn(), '0/0'), coalesce(pg_last_wal_replay_lsn(), '0/0')) \
                        ELSE pg_current_wal_flush_lsn() END >= $1::text::pg_lsn",
                &[&l],
            )
            .map_err(|e| db_err("reading WAL position", e))?;
        Ok(r.get(0))
    }

    /// On a standby, how far it has replayed and received, and whether it is still in recovery.
    ///
    /// # Errors
    /// A database error.
    pub fn standby_position(&mut self) -> Result<(bool, Lsn, Option<Lsn>)> {
        let r = self.one("reading the standby's position", "SELECT pg_is_in_recovery(), coalesce(pg_last_wal_replay_lsn(), '0/0')::text, pg_last_wal_receive_lsn()::text")?;
        let (recovering, replay, received): (bool, String, Option<String>) = (r.get(0), r.get(1), r.get(2));
        Ok((recovering, replay.parse().unwrap_or_default(), received.and_then(|r| r.parse().ok())))
    }

    /// Ask a primary to finish its current WAL segment (`pg_switch_wal`), so that the archiver
    /// sends it. A record is written first: with nothing written since the last switch, the switch
    /// does nothing.
    ///
    /// # Errors
    /// A database error (e.g. a role without EXECUTE on pg_switch_wal).
    pub fn switch_wal(&mut self) -> Result<()> {
        self.client
            .batch_execute("SELECT pg_logical_emit_message(false, 'sheaf', 'switch'); SELECT pg_switch_wal()")
            .map_err(|e| db_err(&format!("asking {} to switch WAL segments (pg_switch_wal)", self.url), e))
    }

    /// Switch segments as [`Server::switch_wal`] does, and name the segment just finished: the one
    /// the archiver is to send next.
    ///
    /// # Errors
    /// As [`Server::switch_wal`].
    pub fn switch_wal_named(&mut self) -> Result<String> {
        self.client
            .batch_execute("SELECT pg_logical_emit_message(false, 'sheaf', 'check')")
            .and_then(|()| self.client.query_one("SELECT pg_walfile_name(pg_switch_wal())", &[]))
            .map(|r| r.get(0))
            .map_err(|e| db_err(&format!("asking {} to switch WAL segments (pg_switch_wal)", self.url), e))
    }

    /// Whether sheaf works with this server's major ([`supported_major`]).
    ///
    /// # Errors
    /// A database error, or [`supported_major`]'s refusal.
    pub fn supported(&mut self) -> Result<()> {
        let r = self.one("reading the server's version", "SELECT current_setting('server_version'), current_setting('server_version_num')::int")?;
        let (version, num): (String, i32) = (r.get(0), r.get(1));
        supported_major((num / 10000) as u32, &version, &self.url)
    }

    /// How the server archives, and how its archiver has fared (`pg_stat_archiver`).
    ///
    /// # Errors
    /// A database error.
    pub fn archiver(&mut self) -> Result<Archiver> {
        let r = self.one(
            "reading pg_stat_archiver",
            "SELECT current_setting('archive_mode'), current_setting('archive_command'),                     coalesce(current_setting('archive_library', true), ''), pg_is_in_recovery(),                     a.archived_count, coalesce(a.last_archived_wal, ''),                     coalesce(extract(epoch FROM a.last_archived_time)::bigint, 0),                     a.failed_count, coalesce(a.last_failed_wal, ''), coalesce(extract(epoch FROM a.last_failed_time)::bigint, 0),                     CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn()::text ELSE pg_current_wal_lsn()::text END,                     (SELECT timeline_id FROM pg_control_checkpoint())::bigint, (SELECT system_identifier FROM pg_control_system())::text              FROM pg_stat_archiver a",
        )?;
        Ok(Archiver {
            mode: r.get(0),
            command: r.get(1),
            library: r.get(2),
            in_recovery: r.get(3),
            archived_count: r.get(4),
            last_archived_wal: r.get(5),
            last_archived_time: r.get(6),
            failed_count: r.get(7),
            last_failed_wal: r.get(8),
            last_failed_time: r.get(9),
            lsn: r.get::<_, String>(10).parse().unwrap_or_default(),
            timeline: u32::try_from(r.get::<_, i64>(11)).unwrap_or(0),
            system_identifier: r.get(12),
        })
    }

    /// A file under the data directory, read by the server (`pg_read_binary_file`), until two reads
    /// agree (the server rewrites pg_control in place); `None` where it does not exist.
    ///
    /// # Errors
    /// A role that may not call `pg_read_binary_file`, naming the grant.
    pub fn read_file(&mut self, rel: &str) -> Result<Option<Vec<u8>>> {
        // pg_read_binary_file(text, boolean) is 16's; the four-argument form reads a length
        // that it allocates up front, so the size comes first.
        let read = || -> Result<Option<Vec<u8>>> {
            let denied = |e: postgres::Error, url: &str| {
                if e.as_db_error().is_some_and(|d| *d.code() == SqlState::INSUFFICIENT_PRIVILEGE) {
                    Error::invalid(format!(
                        "{url} will not let this role read {rel}: connect as a superuser, or GRANT EXECUTE ON FUNCTION pg_stat_file(text, boolean), pg_read_binary_file(text, bigint, bigint, boolean) TO the backup role"
                    ))
                } else {
                    db_err(&format!("reading {rel} on {url}"), e)
                }
            };
            let r = self.client.query_one("SELECT size FROM pg_stat_file($1, true)", &[&rel]).map_err(|e| denied(e, &self.url))?;
            let Some(size) = r.get::<_, Option<i64>>(0) else { return Ok(None) };
            let r = self.client.query_one("SELECT pg_read_binary_file($1, 0, $2, true)", &[&rel, &size]).map_err(|e| denied(e, &self.url))?;
            Ok(r.get(0))
        };
        let what = format!("{rel} on {}", self.url);
        sheaf_core::source::settled(read, &what)
    }
}

/// The PostgreSQL majors this sheaf was tested on (the suite runs its scenarios on each).
pub const TESTED_MAJORS: std::ops::RangeInclusive<u32> = 15..=18;

/// The environment variable that lets sheaf work with a major it was never tested on: the major
/// itself (`SHEAF_UNTESTED_PG=19`), so that the next one is refused again until it is tested.
pub const UNTESTED_VAR: &str = "SHEAF_UNTESTED_PG";

/// Whether sheaf works with a server of PostgreSQL `major` (`version` and `url` for the message):
/// older than 15 never, newer than the last tested major only when [`UNTESTED_VAR`] names it.
///
/// # Errors
/// [`ErrorKind::InvalidInput`] naming the version, the tested ones and the way out.
pub fn supported_major(major: u32, version: &str, url: &str) -> Result<()> {
    allowed_major(major, version, url, std::env::var(UNTESTED_VAR).ok().as_deref())
}

fn allowed_major(major: u32, version: &str, url: &str, allow: Option<&str>) -> Result<()> {
    let (first, last) = (*TESTED_MAJORS.start(), *TESTED_MAJORS.end());
    if major < first {
        return Err(Error::invalid(format!("{url} runs PostgreSQL {version}; sheaf needs {first} or newer")));
    }
    if major <= last || allow.map(str::trim) == Some(major.to_string().as_str()) {
        return Ok(());
    }
    Err(Error::invalid(format!(
        "{url} runs PostgreSQL {version}, which this sheaf ({}) was never tested on (it is tested on {first} to {last}): a new major may change the WAL records, the control file or the backup protocol in ways sheaf would misread. Use a sheaf that supports {major}, or, to go on at your own risk (and restore-test what you get), set {UNTESTED_VAR}={major}",
        env!("CARGO_PKG_VERSION")
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redaction() {
        assert_eq!(redact("postgres://bob:secret@db:5432/x"), "postgres://bob@db:5432/x");
        assert_eq!(redact("postgres://bob@db/x?host=/tmp"), "postgres://bob@db/x?host=/tmp");
        assert_eq!(redact("postgres://bob:p@ss@db/x"), "postgres://bob@db/x");
        assert_eq!(redact("postgres://bob@db/x?sslmode=disable&password=s3cret&host=/tmp"), "postgres://bob@db/x?sslmode=disable&host=/tmp");
        assert_eq!(redact("postgres://db"), "postgres://db");
    }

    #[test]
    fn majors_never_tested_are_refused_unless_named() {
        let url = "postgresql://db";
        for m in super::TESTED_MAJORS {
            assert!(super::allowed_major(m, &format!("{m}.1"), url, None).is_ok(), "{m} is tested");
        }
        let old = super::allowed_major(14, "14.19", url, Some("14")).unwrap_err().to_string();
        assert!(old.contains("needs 15 or newer"), "{old}");
        let new = super::allowed_major(19, "19.0", url, None).unwrap_err().to_string();
        assert!(new.contains("never tested") && new.contains("SHEAF_UNTESTED_PG=19") && new.contains("15 to 18"), "{new}");
        assert!(super::allowed_major(19, "19.0", url, Some(" 19 ")).is_ok());
        // Naming one major lets that one through, not the next.
        assert!(super::allowed_major(20, "20.0", url, Some("19")).is_err());
    }
}
