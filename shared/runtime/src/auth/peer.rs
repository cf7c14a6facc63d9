//! The caller identity of a client certificate, taken from the TLS connection a request came
//! on. The certificate was verified against `--tls-client-ca` by rustls during the handshake
//! (one that does not chain to it never gets a connection); this only names it.

use sha2::{Digest as _, Sha256};
use tonic::transport::server::{TcpConnectInfo, TlsConnectInfo};
use x509_parser::{extensions::GeneralName, prelude::FromDer as _};

use super::CallerIdentity;

/// Longest name taken from a certificate; longer or odd ones fall back to the fingerprint.
const MAX_NAME_CHARS: usize = 128;

/// The identity of the client certificate of the connection `extensions` belong to, if the
/// client presented one.
pub(super) fn identity(extensions: &http::Extensions) -> Option<CallerIdentity> {
    let certs = extensions
        .get::<TlsConnectInfo<TcpConnectInfo>>()?
        .peer_certs()?;
    let leaf = certs.first()?;
    Some(CallerIdentity::mtls(&name_of(leaf.as_ref())))
}

/// `CN=<common name>`, else `DNS=<first DNS SAN>` or `URI=<first URI SAN>`, else
/// `sha256=<fingerprint>` (also for a name too long or holding control characters).
fn name_of(der: &[u8]) -> String {
    let fingerprint = || format!("sha256={}", hex::encode(Sha256::digest(der)));
    let Ok((_, cert)) = x509_parser::certificate::X509Certificate::from_der(der) else {
        return fingerprint();
    };
    let usable = |name: &str| voxpool_domain::untrusted::check_field(name, MAX_NAME_CHARS).is_ok();
    if let Some(cn) = cert
        .subject()
        .iter_common_name()
        .find_map(|cn| cn.as_str().ok())
        .filter(|cn| usable(cn) && !cn.is_empty())
    {
        return format!("CN={cn}");
    }
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        for name in &san.value.general_names {
            match name {
                GeneralName::DNSName(d) if usable(d) => return format!("DNS={d}"),
                GeneralName::URI(u) if usable(u) => return format!("URI={u}"),
                _ => {}
            }
        }
    }
    fingerprint()
}

#[cfg(test)]
mod tests {
    use super::name_of;

    #[test]
    fn names_come_from_the_common_name_then_the_alternative_names() {
        let mut params = rcgen::CertificateParams::new(vec!["svc.example".to_owned()]).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "synthesis");
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        assert_eq!(name_of(cert.der()), "CN=synthesis");

        let mut params = rcgen::CertificateParams::new(vec!["svc.example".to_owned()]).unwrap();
        params.distinguished_name = rcgen::DistinguishedName::new();
        let cert = params.self_signed(&key).unwrap();
        assert_eq!(name_of(cert.der()), "DNS=svc.example");

        assert!(name_of(b"not a certificate").starts_with("sha256="));
    }
}
