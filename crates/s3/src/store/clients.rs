//! The three clouds' clients (S3 and its kin, Azure Blob Storage, Google Cloud Storage), built with
//! one retry and HTTP setup, and what each request of a store needs (an object's path, the runtime,
//! S3's own calls).

use crate::config::{Resolved, S3Options};
use crate::credentials::Provider;
use crate::gcs::GcsWriter;
use crate::lock::S3Extra;
use object_store::aws::AmazonS3Builder;
use object_store::azure::MicrosoftAzureBuilder;
use object_store::client::{HttpConnector, ReqwestConnector};
use object_store::gcp::GoogleCloudStorageBuilder;
use object_store::path::Path;
use object_store::{BackoffConfig, Certificate, ClientOptions, RetryConfig};
use sheaf_core::storage::no_lock;
use sheaf_core::{Error, ErrorKind, Result, Store};
use std::sync::{Arc, OnceLock};
use tokio::runtime::{Handle, Runtime};

use super::*;

/// The retries and HTTP client options every cloud's store shares: `options`' limits, plain HTTP
/// where allowed, and a CA bundle's certificates besides the system's.
fn client_setup(allow_http: bool, ca_bundle: Option<&std::path::Path>, options: &S3Options) -> Result<(RetryConfig, ClientOptions)> {
    let retry = RetryConfig {
        backoff: BackoffConfig { init_backoff: std::time::Duration::from_millis(100), max_backoff: std::time::Duration::from_secs(10), base: 2.0 },
        max_retries: options.max_retries,
        retry_timeout: options.retry_timeout,
    };
    let mut client_options = ClientOptions::new().with_allow_http(allow_http).with_timeout(options.request_timeout).with_connect_timeout(std::time::Duration::from_secs(10));
    if let Some(path) = ca_bundle {
        let pem =
            std::fs::read(path).map_err(|e| Error::io(ErrorKind::InvalidInput, format!("cannot read the CA bundle {} (--s3-ca-bundle or AWS_CA_BUNDLE)", path.display()), e))?;
        let certs = Certificate::from_pem_bundle(&pem).map_err(|e| Error::invalid(format!("CA bundle {}: not PEM certificates: {e}", path.display())))?;
        if certs.is_empty() {
            return Err(Error::invalid(format!("CA bundle {} holds no certificate", path.display())));
        }
        for c in certs {
            client_options = client_options.with_root_certificate(c);
        }
    }
    Ok((retry, client_options))
}

impl S3Store {
    /// A store for `bucket`.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`] when the client cannot be configured.
    pub fn new(bucket: &str, r: &Resolved, options: &S3Options, runtime: Arc<Runtime>) -> Result<Self> {
        let (retry, client_options) = client_setup(r.allow_http, r.ca_bundle.as_deref(), options)?;
        let mut b =
            AmazonS3Builder::new().with_bucket_name(bucket).with_region(&r.region).with_allow_http(r.allow_http).with_virtual_hosted_style_request(!r.path_style).with_retry(retry);
        if let Some(e) = &r.endpoint {
            b = b.with_endpoint(e);
        }
        // Over HTTPS, TLS already protects the body in transit and every frame carries its own
        // CRC-32C, checked on every read: hashing each part with SHA-256 for the signature would
        // only spend CPU the compressors need (measured in docs/bench/s3-sf1). Over plain HTTP the
        // signature is all the body has, so it stays signed.
        let https = r.endpoint.as_deref().is_none_or(|e| e.starts_with("https://"));
        b = b.with_unsigned_payload(https);
        // The credentials: the chain's source, fetched once now (so that a missing or refused
        // identity is named before anything starts) and again before they expire.
        let http = ReqwestConnector::default().connect(&client_options).map_err(|e| Error::invalid(format!("S3 client: {e}")))?;
        let local = ReqwestConnector::default()
            .connect(&client_options.clone().with_allow_http(true).with_connect_timeout(std::time::Duration::from_secs(1)))
            .map_err(|e| Error::invalid(format!("S3 client: {e}")))?;
        let provider = Arc::new(Provider::new(r.chain.clone(), http, local));
        runtime.block_on(provider.current()).map_err(|e| Error::new(ErrorKind::InvalidInput, e))?;
        b = b.with_credentials(provider.clone());
        match &options.sse {
            crate::config::Sse::None => {}
            crate::config::Sse::Kms(id) => b = b.with_sse_kms_encryption(id),
            c @ crate::config::Sse::Customer(_) => b = b.with_ssec_encryption(c.customer_key_base64().expect("a customer key")),
        }
        let client = Arc::new(b.clone().with_client_options(client_options.clone()).build().map_err(|e| Error::invalid(format!("S3 configuration for bucket {bucket}: {e}")))?);
        let extra = S3Extra::new(b, client_options, client.clone(), options.sse.upload_headers())?;
        let endpoint = r.endpoint.clone().unwrap_or_else(|| format!("AWS {}", r.region));
        let secrets = r.chain.static_secrets().into_iter().chain(options.sse.customer_key_base64()).collect();
        Ok(S3Store {
            scheme: "s3",
            bucket: bucket.into(),
            endpoint,
            client,
            runtime,
            options: options.clone(),
            redact: Redact(Arc::new(secrets), AWS_CREDENTIALS),
            extra: Some(extra),
            azure: None,
            gcs: None,
            checksummed: OnceLock::new(),
            credentials: Some(provider),
        })
    }

    /// A store for Azure Blob Storage container `container`, configured by the standard
    /// `AZURE_*` variables `env` gives: the account and its key, a SAS token, or a service
    /// principal (`AZURE_CLIENT_ID`, `AZURE_CLIENT_SECRET`, `AZURE_TENANT_ID`), a federated token
    /// or managed identity; `AZURE_STORAGE_USE_EMULATOR=true` for Azurite, `AZURE_STORAGE_ENDPOINT`
    /// for another endpoint.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`] when the client cannot be configured.
    pub fn azure(container: &str, env: &dyn Fn(&str) -> Option<String>, options: &S3Options, runtime: Arc<Runtime>) -> Result<Self> {
        const KEYS: [&str; 12] = [
            "AZURE_STORAGE_ACCOUNT_NAME",
            "AZURE_STORAGE_ACCOUNT_KEY",
            "AZURE_STORAGE_SAS_TOKEN",
            "AZURE_STORAGE_TOKEN",
            "AZURE_CLIENT_ID",
            "AZURE_CLIENT_SECRET",
            "AZURE_TENANT_ID",
            "AZURE_AUTHORITY_HOST",
            "AZURE_FEDERATED_TOKEN_FILE",
            "AZURE_STORAGE_USE_EMULATOR",
            "AZURE_STORAGE_ENDPOINT",
            "AZURE_MSI_ENDPOINT",
        ];
        let mut b = MicrosoftAzureBuilder::new().with_container_name(container);
        let mut secrets = Vec::new();
        for k in KEYS {
            if let Some(v) = env(k) {
                let key = k.to_ascii_lowercase().parse().map_err(|e| Error::invalid(format!("{k}: {e}")))?;
                if matches!(k, "AZURE_STORAGE_ACCOUNT_KEY" | "AZURE_STORAGE_SAS_TOKEN" | "AZURE_STORAGE_TOKEN" | "AZURE_CLIENT_SECRET") {
                    secrets.push(v.clone());
                }
                b = b.with_config(key, v);
            }
        }
        let emulator = env("AZURE_STORAGE_USE_EMULATOR").is_some_and(|v| v == "true" || v == "1");
        let endpoint = env("AZURE_STORAGE_ENDPOINT");
        let http = emulator || endpoint.as_deref().is_some_and(|e| e.starts_with("http://"));
        let (retry, client_options) = client_setup(http, None, options)?;
        let client =
            b.with_retry(retry).with_client_options(client_options.clone()).build().map_err(|e| Error::invalid(format!("Azure configuration for container {container}: {e}")))?;
        let client = Arc::new(client);
        let http = object_store::client::HttpConnector::connect(&object_store::client::ReqwestConnector::default(), &client_options)
            .map_err(|e| Error::invalid(format!("Azure client: {e}")))?;
        let blocks = crate::azure::AzureBlocks::new(client.clone(), http);
        let endpoint = endpoint.unwrap_or_else(|| if emulator { "Azurite".into() } else { "Azure".into() });
        Ok(S3Store {
            scheme: "az",
            bucket: container.into(),
            endpoint,
            client,
            runtime,
            options: options.clone(),
            redact: Redact(Arc::new(secrets), AZURE_CREDENTIALS),
            extra: None,
            azure: Some((blocks, OnceLock::new())),
            gcs: None,
            checksummed: OnceLock::new(),
            credentials: None,
        })
    }

    /// A store for Google Cloud Storage bucket `bucket`, configured by the standard variables
    /// `env` gives: `GOOGLE_APPLICATION_CREDENTIALS` (or `GOOGLE_SERVICE_ACCOUNT`, a key file;
    /// `GOOGLE_SERVICE_ACCOUNT_KEY`, its JSON), else the instance's own account; `GOOGLE_BASE_URL`
    /// (or the key file's `gcs_base_url`) for another endpoint, such as an emulator.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`] when the client cannot be configured.
    pub fn gcs(bucket: &str, env: &dyn Fn(&str) -> Option<String>, options: &S3Options, runtime: Arc<Runtime>) -> Result<Self> {
        let mut b = GoogleCloudStorageBuilder::new().with_bucket_name(bucket);
        if let Some(v) = env("GOOGLE_SERVICE_ACCOUNT").or_else(|| env("GOOGLE_SERVICE_ACCOUNT_PATH")) {
            b = b.with_service_account_path(v);
        }
        if let Some(v) = env("GOOGLE_SERVICE_ACCOUNT_KEY") {
            b = b.with_service_account_key(v);
        }
        if let Some(v) = env("GOOGLE_APPLICATION_CREDENTIALS") {
            b = b.with_application_credentials(v);
        }
        // An emulator's address comes from the variable or the key file's gcs_base_url.
        let key_file_url = ["GOOGLE_SERVICE_ACCOUNT", "GOOGLE_SERVICE_ACCOUNT_PATH", "GOOGLE_APPLICATION_CREDENTIALS"]
            .iter()
            .filter_map(|k| env(k))
            .filter_map(|p| std::fs::read(p).ok())
            .filter_map(|bytes| serde_json::from_slice::<serde_json::Value>(&bytes).ok())
            .find_map(|v| v["gcs_base_url"].as_str().map(str::to_string));
        let base = env("GOOGLE_BASE_URL").or(key_file_url);
        if let Some(u) = env("GOOGLE_BASE_URL") {
            b = b.with_base_url(&u);
        }
        let http = base.as_deref().is_some_and(|u| u.starts_with("http://"));
        let (retry, client_options) = client_setup(http, None, options)?;
        let client = b
            .with_retry(retry)
            .with_client_options(client_options.clone())
            .build()
            .map_err(|e| Error::invalid(format!("Google Cloud Storage configuration for bucket {bucket}: {e}")))?;
        let connection = object_store::client::ReqwestConnector::default().connect(&client_options).map_err(|e| Error::invalid(format!("GCS client: {e}")))?;
        let writer = GcsWriter::new(connection, client.credentials().clone(), base.as_deref().unwrap_or("https://storage.googleapis.com"), bucket);
        let endpoint = base.unwrap_or_else(|| "Google Cloud Storage".into());
        Ok(S3Store {
            scheme: "gs",
            bucket: bucket.into(),
            endpoint,
            client: Arc::new(client),
            runtime,
            options: options.clone(),
            redact: Redact(Arc::new(Vec::new()), GCS_CREDENTIALS),
            extra: None,
            azure: None,
            gcs: Some(writer),
            checksummed: OnceLock::new(),
            credentials: None,
        })
    }

    pub(super) fn path(&self, name: &str) -> Result<Path> {
        Path::parse(name).map_err(|e| Error::invalid(format!("{}: not a usable object name: {e}", self.describe(name))))
    }

    pub(super) fn handle(&self) -> &Handle {
        self.runtime.handle()
    }

    /// The client that sends the parts of an upload that carries a lock (made once).
    pub(super) fn checksummed(&self) -> Result<Arc<object_store::aws::AmazonS3>> {
        if let Some(c) = self.checksummed.get() {
            return Ok(c.clone());
        }
        let c = self.extra()?.checksummed()?;
        Ok(self.checksummed.get_or_init(|| c).clone())
    }

    /// S3's own calls, or the refusal for Azure and GCS.
    pub(super) fn extra(&self) -> Result<&S3Extra> {
        self.extra.as_ref().ok_or_else(|| no_lock(&format!("{}://{}", self.scheme, self.bucket)))
    }
}
