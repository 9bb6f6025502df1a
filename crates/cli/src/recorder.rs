//! The history catalog's side of a run: recorded as started, then as complete (with its report)
//! or failed. A catalog that cannot be opened or written is a warning: the backup itself matters
//! more than its history.

use std::path::Path;

use sheaf_core::Error;
use sheaf_pg::ClusterFacts;

/// What a recorded command reports: its JSON, and the cluster's facts for a PostgreSQL backup.
pub struct Done {
    /// The report as `--json` prints it.
    pub json: serde_json::Value,
    /// What the backup recorded about the cluster.
    pub cluster: Option<ClusterFacts>,
}

impl crate::hooks::Report for Done {
    fn json(&self) -> &serde_json::Value {
        &self.json
    }
}

impl From<serde_json::Value> for Done {
    fn from(json: serde_json::Value) -> Done {
        Done { json, cluster: None }
    }
}

/// Records a run in the catalog.
struct Recorder {
    catalog: Option<sheaf_catalog::Catalog>,
    id: Option<i64>,
}

impl Recorder {
    fn begin(path: Option<&Path>, start: sheaf_catalog::RunStart) -> Recorder {
        let begun = sheaf_catalog::Catalog::open(path).and_then(|c| c.begin(&start).map(|id| (c, id)));
        match begun {
            Ok((c, id)) => {
                // From here every log line carries the run's id, as `sheaf list` shows it.
                crate::log::set_run(id);
                tracing::info!(target: "sheaf", operation = start.operation.as_str(), source = start.source.as_deref().unwrap_or(""), "run {id} started");
                Recorder { catalog: Some(c), id: Some(id) }
            }
            Err(e) => {
                crate::log::warning(format_args!("{e}; this run is not recorded"));
                tracing::info!(target: "sheaf", operation = start.operation.as_str(), source = start.source.as_deref().unwrap_or(""), "run started (not recorded)");
                Recorder { catalog: None, id: None }
            }
        }
    }

    fn end(self, result: &Result<Done, Error>) {
        match result {
            Ok(done) => tracing::info!(target: "sheaf", status = "complete", backup_id = done.json.get("backup_id").and_then(|v| v.as_str()).unwrap_or(""), "run complete"),
            // The error itself is the next line, the command's last.
            Err(_) => tracing::info!(target: "sheaf", status = "failed", "run failed"),
        }
        let (Some(c), Some(id)) = (self.catalog, self.id) else { return };
        let r = match result {
            Ok(done) => c.finish(id, &run_end(done), None),
            Err(e) => c.finish(id, &sheaf_catalog::RunEnd::default(), Some(&e.to_string())),
        };
        if let Err(e) = r {
            crate::log::warning(e);
        }
    }
}

/// Run `f` between its `hooks`, recording it in the catalog at `catalog` as started, then
/// complete or failed.
///
/// # Errors
/// `f`'s.
pub fn recorded(catalog: Option<&Path>, start: sheaf_catalog::RunStart, hooks: &crate::hooks::Hooks, f: impl FnOnce() -> Result<Done, Error>) -> Result<(), Error> {
    let rec = Recorder::begin(catalog, start);
    let r = hooks.around(rec.id, f);
    rec.end(&r);
    r.map(drop)
}

fn run_end(done: &Done) -> sheaf_catalog::RunEnd {
    let v = &done.json;
    let u = |k: &str| v.get(k).and_then(|x| x.as_u64());
    let t = |k: &str| v.get(k).and_then(|x| x.as_str()).map(str::to_string);
    sheaf_catalog::RunEnd {
        backup_id: t("backup_id"),
        system_identifier: done.cluster.as_ref().map(|c| c.system_identifier.to_string()),
        seconds: v.get("seconds").and_then(|x| x.as_f64()),
        bytes_read: u("bytes_read").or(u("bytes_stored")),
        bytes_written: u("bytes_written"),
        compression: t("compression"),
        codec: t("codec"),
        level: v.get("level").and_then(|x| x.as_i64()),
        transfer_size: u("transfer_size"),
        buffer_count: u("buffer_count"),
        readers: u("readers"),
        threads: u("threads"),
        details: Some(v.clone()),
    }
}
