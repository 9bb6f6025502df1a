//! TLS to PostgreSQL through rustls (on ring), for the SQL connections (the `postgres` crate's
//! `MakeTlsConnect`) and the replication ones ([`crate::connect::wire`]), with libpq's rules
//! ([`Policy::for_conn`]): `disable` never encrypts; `allow`, `prefer` and `require` encrypt and
//! check the server's certificate against a root certificate only when one is there
//! (`sslrootcert`, else `~/.postgresql/root.crt`); `verify-ca` requires that it chains to one, and
//! `verify-full` also that it names the host. `sslrootcert=system` trusts the system's roots.
//! A client certificate (`sslcert`/`sslkey`, else `~/.postgresql/postgresql.crt` and `.key` where
//! they exist) is offered; `sslcrl` revokes; `sslsni=0` sends no server name.

use std::future::Future;
use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use postgres::tls::{ChannelBinding, MakeTlsConnect, TlsConnect, TlsStream};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, CertificateRevocationListDer, PrivateKeyDer, ServerName};
use rustls::ClientConfig;
use sheaf_core::{Error, ErrorKind, Result};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::connect::conninfo::{ConnInfo, SslMode};

/// Accepts any certificate: encryption without authentication, libpq's sslmode=require.
#[derive(Debug)]
struct NoCheck(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for NoCheck {
    fn verify_server_cert(
        &self,
        _: &rustls::pki_types::CertificateDer<'_>,
        _: &[rustls::pki_types::CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: rustls::pki_types::UnixTime,
    ) -> std::result::Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> std::result::Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> std::result::Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }
    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// verify-ca: the chain checked, the name not.
#[derive(Debug)]
struct ChainOnly(Arc<rustls::client::WebPkiServerVerifier>);

impl rustls::client::danger::ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end: &CertificateDer<'_>,
        inter: &[CertificateDer<'_>],
        name: &ServerName<'_>,
        ocsp: &[u8],
        now: rustls::pki_types::UnixTime,
    ) -> std::result::Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        // webpki checks the chain before the name: a name error means the chain held.
        match self.0.verify_server_cert(end, inter, name, ocsp, now) {
            Err(rustls::Error::InvalidCertificate(rustls::CertificateError::NotValidForName | rustls::CertificateError::NotValidForNameContext { .. })) => {
                Ok(rustls::client::danger::ServerCertVerified::assertion())
            }
            other => other,
        }
    }
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> std::result::Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> std::result::Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }
    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// How one connection does TLS: whether at all, whether it must, and the client configuration.
#[derive(Clone)]
pub struct Policy {
    /// The mode asked for.
    pub mode: SslMode,
    /// The configuration (none under `disable`).
    pub config: Option<Arc<ClientConfig>>,
}

impl Policy {
    /// No TLS.
    pub fn disabled() -> Policy {
        Policy { mode: SslMode::Disable, config: None }
    }

    /// Whether the connection must be encrypted (the server not offering TLS is a refusal).
    pub fn required(&self) -> bool {
        self.mode >= SslMode::Require
    }

    /// The policy `info` asks for, with libpq's files and defaults.
    ///
    /// # Errors
    /// verify-ca or verify-full without a root certificate; a file that cannot be read or holds
    /// no certificate (or key); a client key others may read; each named with the fix.
    pub fn for_conn(info: &ConnInfo) -> Result<Policy> {
        let mode = info.sslmode();
        if mode == SslMode::Disable {
            return Ok(Policy::disabled());
        }
        let home = std::env::var_os("HOME").map(PathBuf::from).map(|h| h.join(".postgresql"));
        let default = |name: &str| home.as_ref().map(|h| h.join(name));
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ClientConfig::builder_with_provider(provider.clone()).with_safe_default_protocol_versions().map_err(tls_err)?;
        // The roots: sslrootcert (a file, or `system`), else ~/.postgresql/root.crt if it exists.
        let given_root = info.get("sslrootcert").filter(|r| !r.is_empty());
        let roots: Option<rustls::RootCertStore> = match given_root {
            Some("system") => {
                if mode < SslMode::VerifyFull {
                    return Err(Error::invalid(format!(
                        "weak sslmode \"{}\" may not be used with sslrootcert=system (use \"verify-full\")",
                        info.get("sslmode").unwrap_or("prefer")
                    )));
                }
                let mut store = rustls::RootCertStore::empty();
                let found = rustls_native_certs::load_native_certs();
                for c in found.certs {
                    let _ = store.add(c);
                }
                if store.is_empty() {
                    return Err(Error::invalid("sslrootcert=system: the system has no trusted root certificates (install ca-certificates)"));
                }
                Some(store)
            }
            Some(file) => Some(root_store(Path::new(file))?),
            None => match default("root.crt").filter(|p| p.exists()) {
                Some(p) => Some(root_store(&p)?),
                None => None,
            },
        };
        if roots.is_none() && mode >= SslMode::VerifyCa {
            let shown = default("root.crt").map_or_else(|| "~/.postgresql/root.crt".to_string(), |p| p.display().to_string());
            return Err(Error::invalid(format!(
                "root certificate file \"{shown}\" does not exist: sslmode={} checks the server's certificate against it; give sslrootcert=FILE (the CA that signed the server's certificate), sslrootcert=system for the system's roots, or a weaker sslmode",
                info.get("sslmode").unwrap_or_default()
            )));
        }
        let verifier: Arc<dyn rustls::client::danger::ServerCertVerifier> = match roots {
            None => Arc::new(NoCheck(provider.clone())),
            Some(store) => {
                let mut b = rustls::client::WebPkiServerVerifier::builder_with_provider(Arc::new(store), provider.clone());
                if let Some(crl) = info.get("sslcrl").filter(|c| !c.is_empty()).map(PathBuf::from).or_else(|| default("root.crl").filter(|p| p.exists())) {
                    b = b.with_crls(crls(&crl)?);
                }
                let full = b.build().map_err(|e| Error::invalid(format!("TLS: the root certificates: {e}")))?;
                if mode == SslMode::VerifyFull {
                    full
                } else {
                    Arc::new(ChainOnly(full))
                }
            }
        };
        let builder = builder.dangerous().with_custom_certificate_verifier(verifier);
        // A client certificate where one is given or in the default place.
        let cert = info.get("sslcert").filter(|c| !c.is_empty()).map(PathBuf::from).or_else(|| default("postgresql.crt")).filter(|p| p.exists());
        let mut config = match cert {
            Some(cert) => {
                let key = info.get("sslkey").filter(|k| !k.is_empty()).map(PathBuf::from).or_else(|| default("postgresql.key")).unwrap_or_default();
                let chain = certs(&cert)?;
                let key = private_key(&key)?;
                builder.with_client_auth_cert(chain, key).map_err(|e| Error::invalid(format!("TLS: client certificate {}: {e}", cert.display())))?
            }
            None => builder.with_no_client_auth(),
        };
        config.enable_sni = info.get("sslsni") != Some("0");
        Ok(Policy { mode, config: Some(Arc::new(config)) })
    }

    /// The server name to send and check: a host name or an IP address.
    ///
    /// # Errors
    /// A host that is neither.
    pub fn server_name(host: &str) -> Result<ServerName<'static>> {
        ServerName::try_from(host.to_string()).map_err(|e| Error::invalid(format!("'{host}' is not a host name TLS can check: {e}")))
    }
}

fn tls_err(e: rustls::Error) -> Error {
    Error::new(ErrorKind::Source, format!("TLS: {e}"))
}

fn read(file: &Path, what: &str) -> Result<Vec<u8>> {
    std::fs::read(file).map_err(|e| Error::io(ErrorKind::InvalidInput, format!("could not read {what} \"{}\"", file.display()), e))
}

fn root_store(file: &Path) -> Result<rustls::RootCertStore> {
    let mut store = rustls::RootCertStore::empty();
    for c in certs_of(file, "root certificate file")? {
        store.add(c).map_err(|e| Error::invalid(format!("root certificate file \"{}\": {e}", file.display())))?;
    }
    Ok(store)
}

fn certs(file: &Path) -> Result<Vec<CertificateDer<'static>>> {
    certs_of(file, "certificate file")
}

fn certs_of(file: &Path, what: &str) -> Result<Vec<CertificateDer<'static>>> {
    let bytes = read(file, what)?;
    let found: Vec<CertificateDer<'static>> =
        CertificateDer::pem_slice_iter(&bytes).collect::<std::result::Result<_, _>>().map_err(|e| Error::invalid(format!("{what} \"{}\": {e}", file.display())))?;
    if found.is_empty() {
        return Err(Error::invalid(format!("{what} \"{}\" holds no PEM certificate", file.display())));
    }
    Ok(found)
}

fn crls(file: &Path) -> Result<Vec<CertificateRevocationListDer<'static>>> {
    let bytes = read(file, "certificate revocation list")?;
    CertificateRevocationListDer::pem_slice_iter(&bytes)
        .collect::<std::result::Result<_, _>>()
        .map_err(|e| Error::invalid(format!("certificate revocation list \"{}\": {e}", file.display())))
}

/// The client's key, refused as libpq does when others may read it (0600 or less; 0640 when
/// root owns it, for a key shared through a group).
fn private_key(file: &Path) -> Result<PrivateKeyDer<'static>> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let meta = std::fs::metadata(file).map_err(|e| Error::io(ErrorKind::InvalidInput, format!("certificate present, but not private key file \"{}\"", file.display()), e))?;
    let mode = meta.permissions().mode();
    let loose = if meta.uid() == 0 { mode & 0o037 != 0 } else { mode & 0o077 != 0 };
    if loose {
        return Err(Error::invalid(format!(
            "private key file \"{}\" has group or world access; file must have permissions u=rw (0600) or less if owned by the current user, or permissions u=rw,g=r (0640) or less if owned by root",
            file.display()
        )));
    }
    let bytes = read(file, "private key file")?;
    PrivateKeyDer::from_pem_slice(&bytes).map_err(|e| Error::invalid(format!("private key file \"{}\": {e} (an unencrypted PEM key is needed)", file.display())))
}

/// TLS for the `postgres` crate's connections (the configuration of a [`Policy`]).
#[derive(Clone)]
pub struct Rustls(pub Arc<ClientConfig>);

/// One connection's handshake to come.
pub struct Connect(Arc<ClientConfig>, ServerName<'static>);

/// A TLS stream to the server.
pub struct Stream<S>(tokio_rustls::client::TlsStream<S>);

impl<S: AsyncRead + AsyncWrite + Unpin + Send + 'static> MakeTlsConnect<S> for Rustls {
    type Stream = Stream<S>;
    type TlsConnect = Connect;
    type Error = io::Error;

    fn make_tls_connect(&mut self, domain: &str) -> io::Result<Connect> {
        // A Unix socket's "domain" is its folder: any name serves, nothing is checked.
        let name = ServerName::try_from(domain.to_string()).unwrap_or_else(|_| ServerName::try_from("localhost").expect("a valid name"));
        Ok(Connect(self.0.clone(), name))
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin + Send + 'static> TlsConnect<S> for Connect {
    type Stream = Stream<S>;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<Stream<S>>> + Send>>;

    fn connect(self, stream: S) -> Self::Future {
        let Connect(config, name) = self;
        Box::pin(async move { tokio_rustls::TlsConnector::from(config).connect(name, stream).await.map(Stream) })
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for Stream<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for Stream<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> TlsStream for Stream<S> {
    fn channel_binding(&self) -> ChannelBinding {
        ChannelBinding::none()
    }
}
