//! sheaf-s3: stripes as objects in any S3-compatible store (AWS S3, MinIO, Ceph RGW, versitygw,
//! Garage), Azure Blob Storage (`az://`) or Google Cloud Storage (`gs://`): SQL Server's `BACKUP
//! TO URL`. The three differ only in how the client is configured (each from its cloud's standard
//! variables and files); writing and reading are the same `object_store` calls.
//!
//! - [`S3Options`]: endpoint, region, addressing, part size and concurrency, as flags give them;
//!   credentials only ever come from the AWS chain (the environment, the profile files, STS, the
//!   container or instance metadata endpoints: [`credentials`]), so no secret is on a command line,
//!   in a process title, in the manifest or in the catalog.
//! - [`S3Schemes`]: the [`Schemes`] the CLI hands to `Location::parse`, so `s3://BUCKET/KEY` becomes
//!   a [`sheaf_core::Location`] in an [`S3Store`] like any file.
//! - [`S3Store`] (`store.rs`): each stripe is one object, written by multipart upload with a bounded
//!   number of parts in flight (their buffers counted in the backup's memory budget), visible only
//!   once complete; read by ranged GETs with bounded read-ahead, pinned to the object's ETag.

mod azure;
pub mod config;
pub mod credentials;
mod gcs;
mod lock;
mod profile;
mod store;
#[cfg(feature = "testing")]
pub mod testing;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use sheaf_core::{Error, ErrorKind, Result, Schemes, Store};

pub use config::{S3Options, Sse, StorageClass, MAX_PARTS, MIN_PART_SIZE};
pub use credentials::Provider;
pub use store::S3Store;

/// Reads one environment variable (the process's, or a test's).
type Env = Box<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// Resolves `s3://BUCKET/KEY` locations; one store per bucket, one async runtime for all of them
/// (started on first use, so a run without S3 starts no threads).
pub struct S3Schemes {
    options: S3Options,
    env: Env,
    runtime: OnceLock<Arc<tokio::runtime::Runtime>>,
    stores: Mutex<HashMap<String, Arc<S3Store>>>,
}

impl S3Schemes {
    /// Stores configured by `options` (flags), the environment and the profile files.
    pub fn new(options: S3Options) -> Self {
        Self::with_env(options, config::process_env)
    }

    /// Stores configured by `options` and an environment other than the process's (tests).
    pub fn with_env(options: S3Options, env: impl Fn(&str) -> Option<String> + Send + Sync + 'static) -> Self {
        S3Schemes { options, env: Box::new(env), runtime: OnceLock::new(), stores: Mutex::new(HashMap::new()) }
    }

    fn runtime(&self) -> Result<Arc<tokio::runtime::Runtime>> {
        if let Some(rt) = self.runtime.get() {
            return Ok(rt.clone());
        }
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("sheaf-s3")
            .enable_all()
            .build()
            .map_err(|e| Error::io(ErrorKind::Io, "cannot start the S3 client's threads", e))?;
        Ok(self.runtime.get_or_init(|| Arc::new(rt)).clone())
    }
}

impl Schemes for S3Schemes {
    fn resolve(&self, scheme: &str, bucket: &str, key: &str) -> Result<(Arc<dyn Store>, String)> {
        if !matches!(scheme, "s3" | "az" | "gs") {
            return Err(Error::invalid(format!(
                "{scheme}:// is not a location sheaf knows: use a file path, nul, s3://BUCKET/KEY, az://CONTAINER/KEY, gs://BUCKET/KEY, sftp://USER@HOST/PATH or sheaf://HOST:PORT/NAME (a backup host's agent)"
            )));
        }
        if scheme != "s3" && self.options.storage_class.is_some() {
            return Err(Error::invalid(format!(
                "--s3-storage-class is S3's; {scheme}:// has its own tiers, set on the container or bucket: drop the flag (or s3-storage-class in the config file)"
            )));
        }
        let mut stores = self.stores.lock().unwrap_or_else(|p| p.into_inner());
        let id = format!("{scheme}://{bucket}");
        if let Some(s) = stores.get(&id) {
            return Ok((s.clone(), key.to_string()));
        }
        let store = Arc::new(match scheme {
            "az" => S3Store::azure(bucket, &self.env, &self.options, self.runtime()?)?,
            "gs" => S3Store::gcs(bucket, &self.env, &self.options, self.runtime()?)?,
            _ => S3Store::new(bucket, &self.options.resolve(&self.env)?, &self.options, self.runtime()?)?,
        });
        stores.insert(id, store.clone());
        Ok((store, key.to_string()))
    }
}
