//! rustls configurations from the files of [`crate::certs`]: TLS 1.3 and 1.2 with ring's
//! primitives; the agent demands a client certificate signed by the CA (expired ones are refused
//! in the handshake) and then checks it is on the allow-list; the client checks the agent's
//! certificate against the CA and the name it dialled.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use sheaf_core::{Error, ErrorKind, Result};

use crate::certs::{Client, ALLOWED, CA, CLIENT, CLIENT_KEY, SERVER, SERVER_KEY};

/// ring's suites, AES-128-GCM first: as strong as the link needs (TLS 1.3's mandatory suite) and
/// a third cheaper than AES-256-GCM per byte, which counts when WAL and stripes go through.
fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    let mut p = rustls::crypto::ring::default_provider();
    p.cipher_suites.sort_by_key(|s| s.suite() != rustls::CipherSuite::TLS13_AES_128_GCM_SHA256);
    Arc::new(p)
}

fn missing(dir: &Path, name: &str, e: impl std::fmt::Display) -> Error {
    Error::invalid(format!(
        "cannot read {} ({e}): --tls-dir must hold the files `sheaf agent --init-certs DIR` made (ca.pem, and server.pem/server.key on the agent, client.pem/client.key on the backup host)",
        dir.join(name).display()
    ))
}

fn certs(dir: &Path, name: &str) -> Result<Vec<CertificateDer<'static>>> {
    let path = dir.join(name);
    let list: Vec<_> = CertificateDer::pem_file_iter(&path).map_err(|e| missing(dir, name, e))?.collect::<std::result::Result<_, _>>().map_err(|e| missing(dir, name, e))?;
    if list.is_empty() {
        return Err(missing(dir, name, "no certificate in it"));
    }
    Ok(list)
}

fn key(dir: &Path, name: &str) -> Result<PrivateKeyDer<'static>> {
    PrivateKeyDer::from_pem_file(dir.join(name)).map_err(|e| missing(dir, name, e))
}

fn roots(dir: &Path) -> Result<Arc<RootCertStore>> {
    let mut store = RootCertStore::empty();
    for c in certs(dir, CA)? {
        store.add(c).map_err(|e| missing(dir, CA, e))?;
    }
    Ok(Arc::new(store))
}

fn tls_err(what: &str, e: rustls::Error) -> Error {
    Error::new(ErrorKind::InvalidInput, format!("{what}: {e}"))
}

/// The allow-list: each client certificate's fingerprint and its client.
///
/// # Errors
/// The file missing or with a grant that does not parse; an empty list.
pub fn allowed(dir: &Path) -> Result<HashMap<String, Client>> {
    let allowed: HashMap<String, Client> = crate::certs::clients(dir).map_err(|e| missing(dir, ALLOWED, e.message()))?.into_iter().collect();
    if allowed.is_empty() {
        return Err(Error::invalid(format!("{} lists no client certificate: no backup host could connect", dir.join(ALLOWED).display())));
    }
    Ok(allowed)
}

/// The agent's configuration, and its allow-list of client certificate fingerprints (with the
/// names that follow them).
///
/// # Errors
/// Files missing or not parsing, naming them; an empty allow-list.
pub fn server_config(dir: &Path) -> Result<(Arc<ServerConfig>, HashMap<String, Client>)> {
    let verifier = WebPkiClientVerifier::builder_with_provider(roots(dir)?, provider()).build().map_err(|e| Error::invalid(format!("the CA in {}: {e}", dir.display())))?;
    let config = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| tls_err("TLS versions", e))?
        .with_client_cert_verifier(verifier)
        .with_single_cert(certs(dir, SERVER)?, key(dir, SERVER_KEY)?)
        .map_err(|e| tls_err("the agent's certificate and key", e))?;
    Ok((Arc::new(config), allowed(dir)?))
}

/// The backup host's configuration.
///
/// # Errors
/// Files missing or not parsing, naming them.
pub fn client_config(dir: &Path) -> Result<Arc<ClientConfig>> {
    let config = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| tls_err("TLS versions", e))?
        .with_root_certificates(roots(dir)?)
        .with_client_auth_cert(certs(dir, CLIENT)?, key(dir, CLIENT_KEY)?)
        .map_err(|e| tls_err("the client certificate and key", e))?;
    Ok(Arc::new(config))
}
