//! What a bench backs up: a directory, a running server, or data it makes for the purpose
//! (TPC-H in a throwaway cluster, or many small files), as the flags and plans name it.

use std::path::PathBuf;

use sheaf_core::{Error, Result};

/// What to back up.
#[derive(Clone, Debug, PartialEq)]
pub enum Source {
    /// A directory tree.
    Path(PathBuf),
    /// A running PostgreSQL server (libpq URL).
    Url(String),
    /// A running MariaDB server (`mariadb://...`).
    MariaDb(String),
    /// `sysbench:TABLESxROWS`: a throwaway MariaDB server loaded by sysbench's `oltp_read_write`
    /// prepare (about 240 bytes a row on disk), torn down afterwards.
    Sysbench {
        /// Tables.
        tables: u32,
        /// Rows a table.
        rows: u64,
    },
    /// A throwaway cluster loaded with TPC-H at this scale, torn down afterwards.
    Tpch(f64),
    /// `files:COUNTxSIZE`: COUNT generated files of SIZE bytes (seeded, 1,000 to a folder), removed
    /// afterwards: the many-small-files case (schema-per-tenant clusters, mail spools).
    Files {
        /// How many files.
        count: u64,
        /// Bytes each.
        size: u64,
    },
}

impl Source {
    /// Whether it is a MariaDB server (given, or made for the bench).
    pub fn is_mariadb(&self) -> bool {
        matches!(self, Source::MariaDb(_) | Source::Sysbench { .. })
    }

    /// Parse a positional source or `--dataset tpch:SCALE` / `files:COUNTxSIZE`.
    ///
    /// # Errors
    /// Neither or both given, or a dataset that is neither.
    pub fn from_args(source: Option<&str>, dataset: Option<&str>) -> Result<Source> {
        match (source, dataset) {
            (Some(_), Some(_)) => Err(Error::invalid("give a source or --dataset, not both")),
            (None, None) => {
                Err(Error::invalid("nothing to back up: give a source (a directory or a postgres:// URL) or --dataset tpch:SCALE (a throwaway cluster loaded with TPC-H)"))
            }
            (Some(s), None) if sheaf_pg::connect::session::is_url(s) => Ok(Source::Url(s.to_string())),
            (Some(s), None) if sheaf_mariadb::url::is_url(s) => Ok(Source::MariaDb(s.to_string())),
            (None, Some(d)) if d.starts_with("sysbench:") => {
                let spec = &d["sysbench:".len()..];
                let parsed = spec.split_once('x').and_then(|(t, r)| Some((t.parse::<u32>().ok()?, r.parse::<u64>().ok()?))).filter(|(t, r)| *t > 0 && *r > 0);
                let (tables, rows) = parsed.ok_or_else(|| Error::invalid(format!("--dataset {d}: give sysbench:TABLESxROWS, e.g. sysbench:10x1000000 (about 2.4 GB)")))?;
                Ok(Source::Sysbench { tables, rows })
            }
            (Some(s), None) => Ok(Source::Path(PathBuf::from(s))),
            (None, Some(d)) if d.starts_with("files:") => {
                let (count, size) = sheaf_core::datagen::parse_files_spec(&d["files:".len()..]).map_err(|e| Error::invalid(format!("--dataset {d}: {}", e.message())))?;
                Ok(Source::Files { count, size })
            }
            (None, Some(d)) => {
                let scale = d.strip_prefix("tpch:").and_then(|s| s.parse::<f64>().ok()).filter(|s| *s > 0.0 && *s <= 100.0);
                scale
                    .map(Source::Tpch)
                    .ok_or_else(|| Error::invalid(format!("--dataset '{d}': give tpch:SCALE, e.g. tpch:1 (about 1 GB) or tpch:0.01, or files:COUNTxSIZE, e.g. files:100000x8KiB")))
            }
        }
    }

    /// How the report names it (no password).
    pub fn describe(&self) -> String {
        match self {
            Source::Path(p) => p.display().to_string(),
            Source::Url(u) => sheaf_pg::connect::session::redact(u),
            Source::MariaDb(u) => sheaf_mariadb::url::redact(u),
            Source::Sysbench { tables, rows } => format!("sysbench {tables} tables x {rows} rows in a throwaway MariaDB server"),
            Source::Tpch(s) => format!("TPC-H scale {s} in a throwaway PostgreSQL cluster"),
            Source::Files { count, size } => format!("{count} generated files of {} (seeded text, 1,000 to a folder)", sheaf_core::size::format_size(*size)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_parse_with_clear_errors() {
        assert_eq!(Source::from_args(Some("/srv/data"), None).unwrap(), Source::Path("/srv/data".into()));
        assert_eq!(Source::from_args(Some("postgres://u:pw@h/db"), None).unwrap().describe(), sheaf_pg::connect::session::redact("postgres://u:pw@h/db"));
        assert_eq!(Source::from_args(None, Some("tpch:0.5")).unwrap(), Source::Tpch(0.5));
        assert_eq!(Source::from_args(None, Some("files:100000x8KiB")).unwrap(), Source::Files { count: 100_000, size: 8192 });
        assert!(Source::from_args(None, Some("files:many")).unwrap_err().to_string().contains("COUNTxSIZE"));
        assert_eq!(Source::from_args(None, Some("sysbench:10x1000000")).unwrap(), Source::Sysbench { tables: 10, rows: 1_000_000 });
        assert!(Source::from_args(None, Some("sysbench:10")).unwrap_err().to_string().contains("TABLESxROWS"));
        assert_eq!(Source::from_args(Some("mariadb://b@localhost/?socket=/s"), None).unwrap(), Source::MariaDb("mariadb://b@localhost/?socket=/s".into()));
        for (s, d, needle) in
            [(None, Some("tpch:0"), "give tpch:SCALE"), (None, Some("tpcds:1"), "give tpch:SCALE"), (Some("/x"), Some("tpch:1"), "not both"), (None, None, "nothing to back up")]
        {
            assert!(Source::from_args(s, d).unwrap_err().to_string().contains(needle), "{s:?} {d:?}");
        }
    }
}
