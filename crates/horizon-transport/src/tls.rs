//! TLS 1.3 for every channel: a site CA, per-site certificates, and the quinn configs built from
//! them (with each channel's ALPN).
//!
//! Sites authenticate each other (control, transfer) with certificates signed by the site CA
//! whose DNS name is [`site_dns_name`]: mutual TLS, and the hello's claimed site must match the
//! certificate. Game servers and players only verify their agent's certificate and present a
//! token in the hello.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use horizon_proto::ChannelId;
use quinn::crypto::rustls::{QuicClientConfig, QuicServerConfig};
use rustls::RootCertStore;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::server::WebPkiClientVerifier;

use crate::limits::Limits;

/// The DNS name in a site's certificate, and the name clients verify: `par.site.horizon`.
pub fn site_dns_name(site: &str) -> String {
    format!("{}.site.horizon", site.to_ascii_lowercase())
}

/// The DNS name in the core's certificate, which agents verify when they dial it. It is no
/// site's name: the core's certificate cannot speak as a site's agent, nor a site's (the
/// core site's included) as the core.
pub const CORE_DNS_NAME: &str = "core.horizon";

/// Why TLS material or a config could not be built.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read {path}: {why}")]
    Read { path: PathBuf, why: String },
    #[error("cannot write {path}: {why}")]
    Write { path: PathBuf, why: String },
    #[error("{path} exists; pass --force to replace the dev CA")]
    Exists { path: PathBuf },
    #[error("{what}: {why}")]
    Invalid { what: String, why: String },
}

fn invalid(what: impl Into<String>, why: impl ToString) -> TlsError {
    TlsError::Invalid { what: what.into(), why: why.to_string() }
}

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    fs::read(path).map_err(|e| TlsError::Read { path: path.to_owned(), why: e.to_string() })
}

fn crypto() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The CA certificates a peer's certificate must chain to.
#[derive(Clone, Debug)]
pub struct Roots(Arc<RootCertStore>);

impl Roots {
    pub fn from_pem(pem: &[u8]) -> Result<Self, TlsError> {
        let mut store = RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(pem) {
            let cert = cert.map_err(|e| invalid("CA certificate PEM", e))?;
            store.add(cert).map_err(|e| invalid("CA certificate", e))?;
        }
        if store.is_empty() {
            return Err(invalid("CA certificate PEM", "no certificate in it"));
        }
        Ok(Roots(Arc::new(store)))
    }

    pub fn load(path: &Path) -> Result<Self, TlsError> {
        Roots::from_pem(&read(path)?).map_err(|e| match e {
            TlsError::Invalid { what, why } => {
                invalid(format!("{what} in {}", path.display()), why)
            }
            other => other,
        })
    }
}

/// A certificate chain and its private key.
#[derive(Debug)]
pub struct Identity {
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
}

impl Clone for Identity {
    fn clone(&self) -> Self {
        Identity { chain: self.chain.clone(), key: self.key.clone_key() }
    }
}

impl Identity {
    pub fn from_pem(cert: &[u8], key: &[u8]) -> Result<Self, TlsError> {
        let chain = CertificateDer::pem_slice_iter(cert)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| invalid("certificate PEM", e))?;
        if chain.is_empty() {
            return Err(invalid("certificate PEM", "no certificate in it"));
        }
        let key = PrivateKeyDer::from_pem_slice(key).map_err(|e| invalid("private key PEM", e))?;
        Ok(Identity { chain, key })
    }

    pub fn load(cert: &Path, key: &Path) -> Result<Self, TlsError> {
        Identity::from_pem(&read(cert)?, &read(key)?)
    }

    /// What a peer would find wrong with this identity, found before any peer does: the key
    /// is not the certificate's, the certificate does not chain to `roots`, is not valid now,
    /// or does not name `dns_name` (for a server, and for a client when `client` is set).
    pub fn verify(&self, roots: &Roots, dns_name: &str, client: bool) -> Result<(), TlsError> {
        use rustls::client::danger::ServerCertVerifier;
        let provider = crypto();
        rustls::sign::CertifiedKey::from_der(self.chain.clone(), self.key.clone_key(), &provider)
            .map_err(|e| invalid("certificate and key", e))?;
        let (leaf, intermediates) = self.chain.split_first().expect("a chain is never empty");
        let now = rustls::pki_types::UnixTime::now();
        let name = ServerName::try_from(dns_name.to_owned())
            .map_err(|e| invalid(format!("the name {dns_name}"), e))?;
        rustls::client::WebPkiServerVerifier::builder_with_provider(
            roots.0.clone(),
            provider.clone(),
        )
        .build()
        .map_err(|e| invalid("server certificate verifier", e))?
        .verify_server_cert(leaf, intermediates, &name, &[], now)
        .map_err(|e| invalid(format!("the certificate, as {dns_name}"), e))?;
        if client {
            WebPkiClientVerifier::builder_with_provider(roots.0.clone(), provider)
                .build()
                .map_err(|e| invalid("client certificate verifier", e))?
                .verify_client_cert(leaf, intermediates, now)
                .map_err(|e| invalid("the certificate, as a client", e))?;
        }
        Ok(())
    }
}

/// The server side of one channel. With `client_roots`, clients must present a certificate
/// chaining to them (mutual TLS, for sites); without, clients authenticate in the hello.
pub fn server_config(
    identity: &Identity,
    client_roots: Option<&Roots>,
    channel: ChannelId,
    limits: &Limits,
) -> Result<quinn::ServerConfig, TlsError> {
    let builder = rustls::ServerConfig::builder_with_provider(crypto())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| invalid("TLS server config", e))?;
    let builder = match client_roots {
        Some(roots) => {
            let verifier = WebPkiClientVerifier::builder_with_provider(roots.0.clone(), crypto())
                .build()
                .map_err(|e| invalid("client certificate verifier", e))?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let mut tls = builder
        .with_single_cert(identity.chain.clone(), identity.key.clone_key())
        .map_err(|e| invalid("server certificate", e))?;
    tls.alpn_protocols = vec![channel.alpn().to_vec()];
    tls.max_early_data_size = 0;
    let quic = QuicServerConfig::try_from(tls).map_err(|e| invalid("QUIC server config", e))?;
    let mut config = quinn::ServerConfig::with_crypto(Arc::new(quic));
    config.transport_config(Arc::new(limits.transport_config()));
    Ok(config)
}

/// The client side of one channel: verifies the server against `roots`, and presents
/// `identity` when given (sites).
pub fn client_config(
    roots: &Roots,
    identity: Option<&Identity>,
    channel: ChannelId,
    limits: &Limits,
) -> Result<quinn::ClientConfig, TlsError> {
    let builder = rustls::ClientConfig::builder_with_provider(crypto())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| invalid("TLS client config", e))?
        .with_root_certificates(roots.0.clone());
    let mut tls = match identity {
        Some(identity) => builder
            .with_client_auth_cert(identity.chain.clone(), identity.key.clone_key())
            .map_err(|e| invalid("client certificate", e))?,
        None => builder.with_no_client_auth(),
    };
    tls.alpn_protocols = vec![channel.alpn().to_vec()];
    let quic = QuicClientConfig::try_from(tls).map_err(|e| invalid("QUIC client config", e))?;
    let mut config = quinn::ClientConfig::new(Arc::new(quic));
    config.transport_config(Arc::new(limits.transport_config()));
    Ok(config)
}

/// Whether the peer's verified certificate names `site` (checked against the hello's claim).
pub fn certificate_names_site(connection: &quinn::Connection, site: &str) -> bool {
    let Some(identity) = connection.peer_identity() else { return false };
    let Ok(chain) = identity.downcast::<Vec<CertificateDer<'static>>>() else { return false };
    let Some(leaf) = chain.first() else { return false };
    let Ok(cert) = webpki::EndEntityCert::try_from(leaf) else { return false };
    let Ok(name) = ServerName::try_from(site_dns_name(site)) else { return false };
    cert.verify_is_valid_for_subject_name(&name).is_ok()
}

/// Files of a dev CA directory: `ca.pem`, `ca.key`, and `<SITE>.pem` / `<SITE>.key` per site.
#[derive(Clone, Debug)]
pub struct DevCa {
    pub dir: PathBuf,
}

impl DevCa {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        DevCa { dir: dir.into() }
    }

    pub fn ca_cert(&self) -> PathBuf {
        self.dir.join("ca.pem")
    }

    pub fn ca_key(&self) -> PathBuf {
        self.dir.join("ca.key")
    }

    pub fn site_cert(&self, site: &str) -> PathBuf {
        self.dir.join(format!("{site}.pem"))
    }

    pub fn site_key(&self, site: &str) -> PathBuf {
        self.dir.join(format!("{site}.key"))
    }

    /// The core's own certificate (naming [`CORE_DNS_NAME`]) and key.
    pub fn core_cert(&self) -> PathBuf {
        self.dir.join("horizon-core.pem")
    }

    pub fn core_key(&self) -> PathBuf {
        self.dir.join("horizon-core.key")
    }

    /// Creates a new CA (refusing to replace one unless `force`) and a certificate per site.
    /// Returns the files written.
    pub fn create(&self, sites: &[&str], force: bool) -> Result<Vec<PathBuf>, TlsError> {
        if self.ca_key().exists() && !force {
            return Err(TlsError::Exists { path: self.ca_key() });
        }
        fs::create_dir_all(&self.dir)
            .map_err(|e| TlsError::Write { path: self.dir.clone(), why: e.to_string() })?;
        let key = rcgen::KeyPair::generate().map_err(|e| invalid("CA key", e))?;
        let cert = ca_params().self_signed(&key).map_err(|e| invalid("CA certificate", e))?;
        let mut written = vec![
            write_secret(&self.ca_key(), &key.serialize_pem())?,
            write(&self.ca_cert(), &cert.pem())?,
        ];
        written.extend(self.add_core()?);
        for site in sites {
            written.extend(self.add_site(site)?);
        }
        Ok(written)
    }

    /// Signs a certificate for one more site with the existing CA.
    pub fn add_site(&self, site: &str) -> Result<Vec<PathBuf>, TlsError> {
        let (dns, cn) = (site_dns_name(site), format!("Horizon site {site}"));
        self.issue(&dns, &cn, &self.site_cert(site), &self.site_key(site))
    }

    /// Signs (again) the core's own certificate with the existing CA.
    pub fn add_core(&self) -> Result<Vec<PathBuf>, TlsError> {
        self.issue(CORE_DNS_NAME, "Horizon core", &self.core_cert(), &self.core_key())
    }

    fn issue(
        &self,
        dns: &str,
        cn: &str,
        cert: &Path,
        key: &Path,
    ) -> Result<Vec<PathBuf>, TlsError> {
        let ca_key_pem = String::from_utf8(read(&self.ca_key())?)
            .map_err(|e| invalid(format!("{}", self.ca_key().display()), e))?;
        let ca_key = rcgen::KeyPair::from_pem(&ca_key_pem).map_err(|e| invalid("CA key", e))?;
        let issuer = rcgen::Issuer::new(ca_params(), ca_key);
        let mut params = rcgen::CertificateParams::new(vec![dns.to_owned()])
            .map_err(|e| invalid(format!("certificate for {dns}"), e))?;
        params.distinguished_name.push(rcgen::DnType::CommonName, cn);
        let pair = rcgen::KeyPair::generate().map_err(|e| invalid("key", e))?;
        let signed = params.signed_by(&pair, &issuer).map_err(|e| invalid("certificate", e))?;
        Ok(vec![write_secret(key, &pair.serialize_pem())?, write(cert, &signed.pem())?])
    }

    /// The CA roots of this directory.
    pub fn roots(&self) -> Result<Roots, TlsError> {
        Roots::load(&self.ca_cert())
    }

    /// A site's identity from this directory.
    pub fn identity(&self, site: &str) -> Result<Identity, TlsError> {
        Identity::load(&self.site_cert(site), &self.site_key(site))
    }
}

/// The dev CA's parameters: always the same, so the CA key alone can sign more sites.
fn ca_params() -> rcgen::CertificateParams {
    let mut params = rcgen::CertificateParams::default();
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params.distinguished_name.push(rcgen::DnType::CommonName, "Horizon dev site CA");
    params.key_usages = vec![
        rcgen::KeyUsagePurpose::KeyCertSign,
        rcgen::KeyUsagePurpose::CrlSign,
        rcgen::KeyUsagePurpose::DigitalSignature,
    ];
    params
}

fn write(path: &Path, text: &str) -> Result<PathBuf, TlsError> {
    write_whole(path, text, 0o644)
}

/// Writes a private key readable by its owner only.
fn write_secret(path: &Path, text: &str) -> Result<PathBuf, TlsError> {
    write_whole(path, text, 0o600)
}

fn write_whole(path: &Path, text: &str, mode: u32) -> Result<PathBuf, TlsError> {
    crate::reload::replace_file(path, text, mode)
        .map_err(|e| TlsError::Write { path: path.to_owned(), why: e.to_string() })?;
    Ok(path.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A dev CA in a directory of its own, with sites MTL and PAR and the core.
    fn dev_ca(tag: &str) -> (DevCa, PathBuf) {
        let dir = std::env::temp_dir().join(format!("horizon-tls-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let ca = DevCa::new(&dir);
        ca.create(&["MTL", "PAR"], false).expect("dev CA");
        (ca, dir)
    }

    fn why(r: Result<(), TlsError>) -> String {
        r.expect_err("refused").to_string()
    }

    #[test]
    fn an_identity_verifies_only_as_what_it_is() {
        let (ca, dir) = dev_ca("verify");
        let roots = ca.roots().expect("roots");
        let mtl = ca.identity("MTL").expect("MTL");
        mtl.verify(&roots, &site_dns_name("MTL"), true).expect("MTL as MTL");
        assert!(
            why(mtl.verify(&roots, &site_dns_name("PAR"), true)).contains("as par.site.horizon")
        );
        assert!(why(mtl.verify(&roots, CORE_DNS_NAME, false)).contains("as core.horizon"));
        let core = Identity::load(&ca.core_cert(), &ca.core_key()).expect("core");
        core.verify(&roots, CORE_DNS_NAME, false).expect("the core as the core");
        assert!(why(core.verify(&roots, &site_dns_name("PAR"), false)).contains("as par"));

        // A certificate with another's key; a CA that signed none of them.
        let cert = fs::read(ca.site_cert("MTL")).expect("cert");
        let key = fs::read(ca.site_key("PAR")).expect("key");
        let crossed = Identity::from_pem(&cert, &key).expect("parses");
        let crossed = why(crossed.verify(&roots, &site_dns_name("MTL"), true));
        assert!(crossed.starts_with("certificate and key"), "{crossed}");
        let (other, other_dir) = dev_ca("verify-other");
        let foreign = why(mtl.verify(&other.roots().expect("roots"), &site_dns_name("MTL"), true));
        assert!(foreign.contains("invalid peer certificate"), "{foreign}");
        for d in [dir, other_dir] {
            let _ = fs::remove_dir_all(d);
        }
    }
}
