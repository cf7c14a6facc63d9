//! Webhook deliveries: one POST per job reaching its terminal state, signed, retried until it
//! answers 2xx (at most [`GIVE_UP_AFTER`] after the end).
//!
//! Shape: body = the Job as JSON (the proto's JSON names: `name`, `state`, `itemCounts`, ...);
//! headers `X-Voxpool-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 over "<t>.<body>">`
//! under the server's webhook secret (a receiver recomputes it and refuses old `t` to stop
//! replays) and `X-Voxpool-Delivery: jobs/{job}/{STATE}` (the same on every retry: at least
//! once, so a receiver deduplicates by it).

use std::time::Duration;

use hmac::{Hmac, KeyInit as _, Mac as _};
use sha2::Sha256;
use voxpool_domain::secret::Secret;

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
pub fn check_url(raw: &str) -> Result<(), String> {
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
    Ok(())
}

/// POSTs `body` to `url`. Errors: one line (status or transport error, never the URL's path).
pub async fn deliver(
    client: &reqwest::Client,
    secret: &Secret,
    url: &str,
    delivery: &str,
    unix: u64,
    body: Vec<u8>,
) -> Result<(), String> {
    let signature = signature(secret, unix, &body);
    let answer = client
        .post(url)
        .timeout(TIMEOUT)
        .header("content-type", "application/json")
        .header(SIGNATURE_HEADER, signature)
        .header(DELIVERY_HEADER, delivery)
        .body(body)
        .send()
        .await
        .map_err(|e| format!("{}: {}", host_of(url), e.without_url()))?;
    if answer.status().is_success() {
        Ok(())
    } else {
        Err(format!("{} answered {}", host_of(url), answer.status()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
