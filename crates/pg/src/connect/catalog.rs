//! The catalogs as a backup records them: tablespaces, databases, and each database's relations
//! with storage (a packed list, a line each), so that a restore or `extract` can find a relation's
//! files by name.

use sheaf_core::error::{Error, Result};

use crate::connect::conninfo::ConnInfo;
use crate::connect::server::Server;
use crate::connect::session::{db_err, open};

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

/// The relations with storage of database `db`, through `url` with `db` swapped in, packed
/// ([`DatabaseInfo::packed`]) as the rows stream in.
fn relations_of(url: &str, db: &str) -> Result<String> {
    let mut info = ConnInfo::resolve(url)?;
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
}
