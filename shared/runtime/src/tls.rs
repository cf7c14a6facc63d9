//! TLS on the gRPC listeners (`--tls-cert`, `--tls-key`, `--tls-client-ca`), handshaken here
//! rather than inside tonic, so that a client whose certificate is refused learns why.
//!
//! With `--tls-client-ca`, only a certificate that CA signed identifies a caller (`auth`); a
//! client without one is let through (health and reflection stay open, the data plane is
//! refused by `auth`). A certificate the CA did not sign used to fail the handshake, and in
//! TLS 1.3 that verdict comes after the client counted its handshake done (its certificate is
//! in its last flight) and was already sending its first request. The client read it as its
//! connection vanishing: the server dropped the socket at once, the refusal raced a reset or a
//! broken pipe, and even an alert read in order reached a gRPC client as CANCELLED
//! "connection closed" in a share of tries. Callers retry a vanished connection, so the
//! refusal ended as DEADLINE_EXCEEDED. Now the handshake checks the certificate's signature
//! (the client holds its key) but not its issuer; the issuer is checked right after against
//! the same CA, and a connection whose certificate the CA did not sign never reaches the
//! service: every request on it is answered UNAUTHENTICATED `CLIENT_CERTIFICATE_REJECTED`,
//! saying which certificate and why, health included. Nothing is taken from such a
//! certificate: no identity, no service.
//!
//! Other handshake failures (a bad signature, no shared protocol) end the connection in order:
//! the alert, our end of the stream, then what the client sent is read (at most
//! [`LINGER_BYTES`], for at most [`LINGER`]) before closing, so the alert is not lost to a
//! reset. Handshakes run side by side (one task each, bounded by the head timeout), so a slow
//! or silent client never holds up the next connection.

use std::{convert::Infallible, io, path::Path, sync::Arc, time::Duration};

use futures::{Stream, StreamExt as _};
use rustls::{
    DigitallySignedStruct, DistinguishedName, RootCertStore, ServerConfig, SignatureScheme,
    client::danger::HandshakeSignatureValid,
    pki_types::{CertificateDer, PrivateKeyDer, UnixTime, pem::PemObject as _},
    server::{
        WebPkiClientVerifier,
        danger::{ClientCertVerified, ClientCertVerifier},
    },
};
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};
use tokio_rustls::{TlsAcceptor, server::TlsStream};
use tonic::{Code, Status};
use tonic_types::{ErrorDetails, StatusExt as _};
use voxpool_domain::contract::AuthReason;

/// How long a connection whose certificate was refused is answered before it is closed.
const REFUSAL_SERVED_FOR: Duration = Duration::from_secs(10);

/// How long a refused connection is read from before it is closed.
pub const LINGER: Duration = Duration::from_secs(1);
/// How much of a refused connection's data is read before it is closed.
pub const LINGER_BYTES: usize = 256 * 1024;

/// The gRPC listener's TLS: the acceptor, and the check of a client certificate's issuer
/// (with `--tls-client-ca`).
#[derive(Clone)]
pub struct Tls {
    acceptor: TlsAcceptor,
    issuer: Option<Arc<dyn ClientCertVerifier>>,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls")
            .field("client_ca", &self.issuer.is_some())
            .finish_non_exhaustive()
    }
}

/// The certificate chain of `--tls-cert` and the private key of `--tls-key`. Errors:
/// unreadable or invalid PEM files (one line naming the flag).
pub fn server_identity(
    cert: &Path,
    key: &Path,
) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), String> {
    let certs = CertificateDer::pem_file_iter(cert)
        .and_then(Iterator::collect::<Result<Vec<_>, _>>)
        .map_err(|e| format!("--tls-cert {}: {e}", cert.display()))?;
    let key = PrivateKeyDer::from_pem_file(key)
        .map_err(|e| format!("--tls-key {}: {e}", key.display()))?;
    Ok((certs, key))
}

/// The TLS of `--tls-cert` / `--tls-key` (and `--tls-client-ca`), or `None` without them.
/// Errors: unreadable or invalid PEM files (one line naming the flag).
pub fn acceptor(
    cert: Option<&Path>,
    key: Option<&Path>,
    client_ca: Option<&Path>,
) -> Result<Option<Tls>, String> {
    let (Some(cert), Some(key)) = (cert, key) else {
        return Ok(None);
    };
    let (certs, key) = server_identity(cert, key)?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?;
    let mut issuer = None;
    let builder = match client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let bad = |e: &dyn std::fmt::Display| format!("--tls-client-ca {}: {e}", ca.display());
            let mut roots = RootCertStore::empty();
            for cert in CertificateDer::pem_file_iter(ca).map_err(|e| bad(&e))? {
                roots.add(cert.map_err(|e| bad(&e))?).map_err(|e| bad(&e))?;
            }
            // Optional: a client without a certificate still connects (module doc).
            let strict: Arc<dyn ClientCertVerifier> =
                WebPkiClientVerifier::builder_with_provider(roots.into(), provider)
                    .allow_unauthenticated()
                    .build()
                    .map_err(|e| bad(&e))?;
            issuer = Some(strict.clone());
            builder.with_client_cert_verifier(Arc::new(SignatureOnly(strict)))
        }
    };
    let mut config = builder
        .with_single_cert(certs, key)
        .map_err(|e| format!("invalid TLS certificate or key: {e}"))?;
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(Some(Tls {
        acceptor: TlsAcceptor::from(Arc::new(config)),
        issuer,
    }))
}

/// The handshake's check of a client certificate: everything the CA's verifier checks but the
/// issuer, which [`refusal`] checks once the handshake is done (module doc).
#[derive(Debug)]
struct SignatureOnly(Arc<dyn ClientCertVerifier>);

impl ClientCertVerifier for SignatureOnly {
    fn offer_client_auth(&self) -> bool {
        self.0.offer_client_auth()
    }

    fn client_auth_mandatory(&self) -> bool {
        self.0.client_auth_mandatory()
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.0.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// Why the certificate `tls`'s client presented is refused, if it is: the CA did not sign it.
fn refusal<IO>(issuer: &dyn ClientCertVerifier, tls: &TlsStream<IO>) -> Option<Status> {
    let chain = tls.get_ref().1.peer_certificates()?;
    let (end_entity, intermediates) = chain.split_first()?;
    let why = issuer
        .verify_client_cert(end_entity, intermediates, UnixTime::now())
        .err()?;
    let subject = x509_parser::parse_x509_certificate(end_entity)
        .map(|(_, c)| c.subject().to_string())
        .unwrap_or_default();
    let message = format!(
        "the client certificate {} is not signed by this server's --tls-client-ca ({why}): \
         present one that CA signed (VOXPOOL_TLS_CLIENT_CERT and VOXPOOL_TLS_CLIENT_KEY), or none \
         and a client token",
        voxpool_domain::untrusted::quote(&subject)
    );
    tracing::debug!(subject = %voxpool_domain::untrusted::quote(&subject), error = %why, "client certificate refused");
    let mut details = ErrorDetails::new();
    details.set_error_info(
        AuthReason::ClientCertificateRejected.as_str(),
        voxpool_domain::status::ERROR_DOMAIN,
        std::collections::HashMap::new(),
    );
    Some(Status::with_error_details(
        Code::Unauthenticated,
        message,
        details,
    ))
}

/// Answers every request on `tls` with `status` (for at most [`REFUSAL_SERVED_FOR`]).
async fn refuse<IO>(tls: TlsStream<IO>, status: Status)
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let service = hyper::service::service_fn(move |_request| {
        let answer = status.clone().into_http::<tonic::body::Body>();
        async move { Ok::<_, Infallible>(answer) }
    });
    let builder =
        hyper_util::server::conn::auto::Builder::new(hyper_util::rt::TokioExecutor::new())
            .http2_only();
    let conn = builder.serve_connection(hyper_util::rt::TokioIo::new(tls), service);
    let _ = tokio::time::timeout(REFUSAL_SERVED_FOR, conn).await;
}

/// The TLS connections of `plain` (accepted TCP connections), each handshaken within
/// `handshake_timeout`; one whose handshake fails is closed in order, one whose client
/// certificate the CA did not sign is answered UNAUTHENTICATED (module doc).
pub fn incoming<IO, S>(
    plain: S,
    tls: Tls,
    handshake_timeout: Duration,
) -> impl Stream<Item = Result<TlsStream<IO>, io::Error>> + Send + 'static
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    S: Stream<Item = Result<IO, io::Error>> + Send + 'static,
{
    let (tx, rx) = tokio::sync::mpsc::channel(64);
    tokio::spawn(async move {
        let mut plain = std::pin::pin!(plain);
        loop {
            // Stop accepting once the server stopped taking connections.
            let next = tokio::select! {
                () = tx.closed() => return,
                next = plain.next() => next,
            };
            match next {
                None => return,
                Some(Err(e)) => {
                    if tx.send(Err(e)).await.is_err() {
                        return;
                    }
                }
                Some(Ok(io)) => {
                    let (tls, tx) = (tls.clone(), tx.clone());
                    tokio::spawn(async move {
                        let Some(stream) = handshake(&tls.acceptor, io, handshake_timeout).await
                        else {
                            return;
                        };
                        match tls.issuer.as_deref().and_then(|i| refusal(i, &stream)) {
                            Some(status) => refuse(stream, status).await,
                            None => {
                                let _ = tx.send(Ok(stream)).await;
                            }
                        }
                    });
                }
            }
        }
    });
    futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|c| (c, rx)) })
}

/// One handshake: the TLS stream, or `None` once a refused connection was closed in order.
async fn handshake<IO>(acceptor: &TlsAcceptor, io: IO, timeout: Duration) -> Option<TlsStream<IO>>
where
    IO: AsyncRead + AsyncWrite + Unpin,
{
    match tokio::time::timeout(timeout, acceptor.accept(io).into_fallible()).await {
        Ok(Ok(tls)) => Some(tls),
        Ok(Err((e, io))) => {
            tracing::debug!(error = %e, "TLS handshake refused");
            linger(io).await;
            None
        }
        Err(_) => {
            tracing::debug!(timeout_ms = timeout.as_millis(), "TLS handshake timed out");
            None
        }
    }
}

/// Ends `io` after a failed handshake (whose alert tokio-rustls wrote): our end of the
/// stream, then what the client sent until it closes, [`LINGER_BYTES`] or [`LINGER`].
async fn linger<IO: AsyncRead + AsyncWrite + Unpin>(mut io: IO) {
    let _ = io.shutdown().await;
    let mut buf = vec![0u8; 16 * 1024];
    let mut read = 0;
    let _ = tokio::time::timeout(LINGER, async {
        while read < LINGER_BYTES {
            match io.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => read += n,
            }
        }
    })
    .await;
}
/// The TLS acceptor of an HTTP listener from its `--tls-cert` and `--tls-key`, offering
/// HTTP/2 and HTTP/1.1 by ALPN, or `None` without them. `listener` names it in errors
/// ("the console", "the HTTP listener"). Errors: unreadable or invalid PEM files (one line).
pub fn http_acceptor(
    cert: Option<&Path>,
    key: Option<&Path>,
    listener: &str,
) -> Result<Option<TlsAcceptor>, String> {
    let (Some(cert), Some(key)) = (cert, key) else {
        return Ok(None);
    };
    let (certs, key) = server_identity(cert, key)?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| format!("invalid TLS certificate or key for {listener}: {e}"))?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Some(TlsAcceptor::from(Arc::new(config))))
}
