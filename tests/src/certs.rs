//! Test certificates (rcgen): a client CA and leaf certificates for `127.0.0.1`/`localhost`
//! that serve as server and client certificates.

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};

/// A certificate authority named `cn`, to sign leaves and to give a server as its client CA.
pub type Ca = CertifiedIssuer<'static, KeyPair>;

/// A self-signed CA named `cn`.
pub fn ca(cn: &str) -> Ca {
    let mut ca = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    ca.distinguished_name.push(DnType::CommonName, cn);
    CertifiedIssuer::self_signed(ca, KeyPair::generate().expect("CA key")).expect("CA")
}

/// A PEM certificate and key for `cn` (client and server use), signed by `issuer`, else
/// self-signed.
pub fn leaf(cn: &str, issuer: Option<&Ca>) -> (String, String) {
    let mut params = CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
        .expect("leaf params");
    params.distinguished_name.push(DnType::CommonName, cn);
    params.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ClientAuth,
        ExtendedKeyUsagePurpose::ServerAuth,
    ];
    let key = KeyPair::generate().expect("leaf key");
    let cert = match issuer {
        Some(issuer) => params.signed_by(&key, issuer).expect("signed leaf"),
        None => params.self_signed(&key).expect("self-signed leaf"),
    };
    (cert.pem(), key.serialize_pem())
}
