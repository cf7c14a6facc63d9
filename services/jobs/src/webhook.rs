//! Webhook deliveries: one POST per job reaching its terminal state, signed, retried until it
//! answers 2xx (at most [`GIVE_UP_AFTER`] after the end).
//!
//! Shape: body = the Job as JSON (the proto's JSON names: `name`, `state`, `itemCounts`, ...);
//! headers `X-Voxpool-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 over "<t>.<body>">`
//! under the server's webhook secret (a receiver recomputes it and refuses old `t` to stop
//! replays) and `X-Voxpool-Delivery: jobs/{job}/{STATE}` (the same on every retry: at least
//! once, so a receiver deduplicates by it).

use std::{sync::Arc, time::Duration};

use hmac::{Hmac, KeyInit as _, Mac as _};
use sha2::Sha256;
use voxpool_domain::secret::Secret;

use crate::egress::{Policy, Resolver, refusal_in};

/// Longest a delivery keeps being retried after the job ended.
pub const GIVE_UP_AFTER: Duration = Duration::from_secs(24 * 3600);
/// Longest one delivery may take.
pub const TIMEOUT: Duration = Duration::from_secs(10);

/// The header carrying the signature.
pub const SIGNATURE_HEADER: &str = "x-voxpool-signature";
/// The header naming the delivery.
pub const DELIVERY_HEADER: &str = "x-voxpool-delivery";

/// `t=<unix>,v1=<hex>` of `body` at `unix` seconds under `secret`.
pub fn signature(secret: &Secret, unix: u64, body: &[u8]) -> String {
    let mut mac = <Hmac<Sha256>>::new_from_slice(secret.expose().as_bytes())
        .unwrap_or_else(|_| unreachable!("HMAC takes a key of any length"));
    mac.update(unix.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    format!("t={unix},v1={}", hex::encode(mac.finalize().into_bytes()))
}

/// The scheme, host and port of `url` (what a Job shows of its webhook).
pub fn host_of(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(u) => match (u.host_str(), u.port()) {
            (Some(h), Some(p)) => format!("{}://{h}:{p}", u.scheme()),
            (Some(h), None) => format!("{}://{h}", u.scheme()),
            _ => String::new(),
        },
        Err(_) => String::new(),
    }
}

/// Checks a `webhook_url`: absolute `http` or `https` with a host, no credentials, at most
/// 2048 characters. Errors: what is wrong.
pub fn check_url(raw: &str) -> Result<url::Url, String> {
    if raw.len() > 2048 {
        return Err("at most 2048 characters".into());
    }
    let url = url::Url::parse(raw).map_err(|e| format!("not a URL ({e})"))?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err("must be an http:// or https:// URL with a host".into());
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err("must not carry user:password (put a token in the path or query)".into());
    }
    Ok(url)
}

/// What POSTs webhooks: an HTTP client that follows no redirect (a 3xx is a failed delivery),
/// takes no proxy from the environment, and connects only to addresses [`Policy`] lets a
/// webhook reach (its resolver, [`Resolver`], checks every address a host resolves to).
#[derive(Clone)]
pub struct Sender {
    http: reqwest::Client,
    policy: Arc<Policy>,
}

impl Sender {
    /// A sender applying `policy`. Errors: the TLS setup's, one line.
    pub fn new(policy: Arc<Policy>) -> Result<Self, String> {
        voxpool_runtime::limits::install_crypto_provider();
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .dns_resolver(Arc::new(Resolver::new(policy.clone())))
            .build()
            .map_err(|e| format!("webhook client: {e}"))?;
        Ok(Self { http, policy })
    }

    /// POSTs `body` to `url`, signed with `secret` at `unix` seconds. Errors: one line (a
    /// refused address, the status or the transport error; never the URL's path).
    pub async fn deliver(
        &self,
        secret: &Secret,
        url: &str,
        delivery: &str,
        unix: u64,
        body: Vec<u8>,
    ) -> Result<(), String> {
        let host = host_of(url);
        let parsed = url::Url::parse(url).map_err(|e| format!("{host}: not a URL ({e})"))?;
        if let Some(why) = self.policy.refuse_literal(&parsed) {
            return Err(format!("{host}: {why}"));
        }
        let signature = signature(secret, unix, &body);
        let answer = self
            .http
            .post(parsed)
            .timeout(TIMEOUT)
            .header("content-type", "application/json")
            .header(SIGNATURE_HEADER, signature)
            .header(DELIVERY_HEADER, delivery)
            .body(body)
            .send()
            .await
            .map_err(|e| match refusal_in(&e) {
                Some(why) => format!("{host}: {why}"),
                None => format!("{host}: {}", causes(&e.without_url())),
            })?;
        if answer.status().is_success() {
            Ok(())
        } else {
            Err(format!("{host} answered {}", answer.status()))
        }
    }
}

/// An error with every cause under it (`error sending request: dns error: failed to lookup
/// address information: …`): reqwest's own message alone says nothing of why.
fn causes(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut at = e.source();
    while let Some(cause) = at {
        let text = cause.to_string();
        if !out.ends_with(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        at = cause.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_says_every_cause_under_it() {
        #[derive(Debug, thiserror::Error)]
        #[error("error sending request")]
        struct Outer(#[source] std::io::Error);
        let lookup = std::io::Error::other(
            "failed to lookup address information: Name or service not known",
        );
        let said = causes(&Outer(lookup));
        assert_eq!(
            said,
            "error sending request: failed to lookup address information: Name or service not known"
        );
    }

    #[test]
    fn the_signature_is_hmac_sha256_over_time_dot_body() {
        // RFC 4231 style check against an independent computation of the same MAC.
        let secret = Secret::new("whsec-test".to_owned());
        let sig = signature(&secret, 1_700_000_000, b"{}");
        let mut mac = <Hmac<Sha256>>::new_from_slice(b"whsec-test").expect("key");
        mac.update(b"1700000000.{}");
        let want = hex::encode(mac.finalize().into_bytes());
        assert_eq!(sig, format!("t=1700000000,v1={want}"));
        assert_ne!(signature(&secret, 1_700_000_001, b"{}"), sig);
    }

    /// A receiver on 127.0.0.1 answering every request with `answer`; its port and how many
    /// connections it accepted.
    async fn receiver(answer: String) -> (u16, Arc<std::sync::atomic::AtomicUsize>) {
        use std::sync::atomic::Ordering;
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let count = accepted.clone();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                count.fetch_add(1, Ordering::SeqCst);
                let mut buf = [0u8; 4096];
                let _ = socket.read(&mut buf).await;
                let _ = socket.write_all(answer.as_bytes()).await;
            }
        });
        (port, accepted)
    }

    const OK: &str = "HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n";

    #[tokio::test]
    async fn a_host_resolving_to_loopback_is_refused_before_any_connection() {
        use std::sync::atomic::Ordering;
        let secret = Secret::new("whsec-test-0123456789".to_owned());
        let (port, accepted) = receiver(OK.to_owned()).await;
        let strict = Sender::new(Arc::default()).expect("sender");
        for url in [
            format!("http://localhost:{port}/hook"),
            format!("http://127.0.0.1:{port}/hook"),
            format!("http://[::ffff:127.0.0.1]:{port}/hook"),
        ] {
            let e = strict
                .deliver(&secret, &url, "jobs/j1/SUCCEEDED", 1, b"{}".to_vec())
                .await
                .expect_err(&url);
            assert!(
                e.contains("refused") && e.contains("loopback"),
                "{url}: {e}"
            );
        }
        assert_eq!(accepted.load(Ordering::SeqCst), 0, "no connection was made");
        let allowed =
            Sender::new(Arc::new(Policy::parse("127.0.0.1/32").expect("ok"))).expect("sender");
        allowed
            .deliver(
                &secret,
                &format!("http://localhost:{port}/hook"),
                "jobs/j1/SUCCEEDED",
                1,
                b"{}".to_vec(),
            )
            .await
            .expect("allowed by the list");
        assert_eq!(accepted.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_redirect_is_a_failed_delivery_and_is_not_followed() {
        use std::sync::atomic::Ordering;
        let secret = Secret::new("whsec-test-0123456789".to_owned());
        let (target, reached) = receiver(OK.to_owned()).await;
        let redirect = format!(
            "HTTP/1.1 307 Temporary Redirect\r\nlocation: http://127.0.0.1:{target}/x\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
        );
        let (port, _) = receiver(redirect).await;
        let sender =
            Sender::new(Arc::new(Policy::parse("127.0.0.1/32").expect("ok"))).expect("sender");
        let e = sender
            .deliver(
                &secret,
                &format!("http://127.0.0.1:{port}/hook"),
                "jobs/j1/SUCCEEDED",
                1,
                b"{}".to_vec(),
            )
            .await
            .expect_err("a 307");
        assert!(e.contains("answered 307"), "{e}");
        assert_eq!(
            reached.load(Ordering::SeqCst),
            0,
            "the redirect was not followed"
        );
    }

    #[test]
    fn urls_are_checked_and_shown_without_path() {
        assert!(check_url("https://hooks.example.com/x?token=1").is_ok());
        for bad in ["ftp://h/x", "/relative", "http://user:pw@h/x", "notaurl"] {
            assert!(check_url(bad).is_err(), "{bad}");
        }
        assert_eq!(
            host_of("https://h.example:8443/secret?k=v"),
            "https://h.example:8443"
        );
    }
}
