//! The one vendor call every strategy makes: `POST {base}/v1/audio/speech` on the fake
//! OpenAI-compatible vendor with `Authorization: Bearer <key>`, classified into success,
//! rate limited (HTTP 429) or another failure. The audio is read to the end, so the call is
//! over when the vendor's handler is.

use std::time::Duration;

/// Request body: a short text, raw PCM (the cheapest output the fake renders).
const BODY: &str = r#"{"model":"tts-1","input":"hello","voice":"alloy","response_format":"pcm"}"#;

/// Longest a single vendor call may take (the fake answers far sooner).
const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// How a vendor call ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CallOutcome {
    /// Audio received.
    Ok,
    /// HTTP 429: the key's concurrency cap (or rate limit) was exceeded.
    RateLimited,
    /// Anything else (status or transport error), with a short reason.
    Failed(String),
}

/// An HTTP client bound to one vendor base URL.
#[derive(Clone, Debug)]
pub struct VendorClient {
    http: reqwest::Client,
    url: String,
}

impl VendorClient {
    /// A client for `base_url` (`http://127.0.0.1:PORT`), with pooled keep-alive connections.
    pub fn new(base_url: &str) -> Result<Self, String> {
        voxpool_runtime::limits::install_crypto_provider();
        let http = reqwest::Client::builder()
            .timeout(CALL_TIMEOUT)
            .pool_max_idle_per_host(usize::MAX)
            .build()
            .map_err(|e| format!("http client: {e}"))?;
        Ok(Self {
            http,
            url: format!("{}/v1/audio/speech", base_url.trim_end_matches('/')),
        })
    }

    /// One call with `key` as the bearer credential.
    pub async fn speak(&self, key: &str) -> CallOutcome {
        let sent = self
            .http
            .post(&self.url)
            .bearer_auth(key)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(BODY)
            .send()
            .await;
        let response = match sent {
            Ok(r) => r,
            Err(e) => return CallOutcome::Failed(format!("transport: {e}")),
        };
        let status = response.status();
        // Read the body to the end either way, so the connection goes back to the pool.
        let body = response.bytes().await;
        match (status.as_u16(), body) {
            (200, Ok(_)) => CallOutcome::Ok,
            (429, _) => CallOutcome::RateLimited,
            (_, Err(e)) => CallOutcome::Failed(format!("body: {e}")),
            (code, Ok(_)) => CallOutcome::Failed(format!("HTTP {code}")),
        }
    }
}
