//! Transport of the cloud vendor adapters: one pooled HTTP client and [`send`], which reads a
//! whole response within the attempt's timeout and turns transport problems into `TIMEOUT`
//! failures ([`transport_failure`]); upstream options from the config.
//!
//! The other jobs live beside it and are re-exported here, so an adapter names everything as
//! `http::…`: [`classify`] (the error classification of VENDORS.md, secret scrubbing, the
//! one "vendor error answer → failure" helper) and [`params`] (invariant 8's refusal helpers).

pub mod classify;
pub mod params;

use std::{collections::BTreeMap, sync::OnceLock, time::Duration};

use bytes::Bytes;
use reqwest::{Client, RequestBuilder, StatusCode, header::HeaderMap};
use voxpool_shared::{contract::Outcome, secret::Secret};

pub use self::{classify::*, params::*};
use super::VendorFailure;

/// `User-Agent` sent to every vendor (Azure requires one).
pub const USER_AGENT: &str = concat!("voxpool-synthesis/", env!("CARGO_PKG_VERSION"));

/// Largest response body accepted (a 10-minute 48 kHz WAV is ~58 MiB).
pub const MAX_BODY_BYTES: usize = 64 << 20;

/// Builds a pooled HTTP client (rustls with the workspace's one crypto provider, ring; HTTP/2
/// by ALPN; keep-alive pool). Per-attempt timeouts are set on each request ([`send`]), not
/// here.
pub fn build_client() -> Result<Client, reqwest::Error> {
    voxpool_shared::limits::install_crypto_provider();
    Client::builder()
        .user_agent(USER_AGENT)
        .connect_timeout(Duration::from_secs(5))
        .pool_idle_timeout(Duration::from_secs(90))
        .pool_max_idle_per_host(256)
        .tcp_nodelay(true)
        .build()
}

/// The process-wide client, built once on first use and shared by every adapter (cloning a
/// `reqwest::Client` shares its connection pool). The error is the build error's text.
pub fn shared_client() -> Result<Client, String> {
    static SHARED: OnceLock<Result<Client, String>> = OnceLock::new();
    SHARED
        .get_or_init(|| {
            build_client().map_err(|e| format!("cannot build the vendor HTTP client: {e}"))
        })
        .clone()
}

/// A fully read HTTP response.
#[derive(Debug)]
pub struct HttpReply {
    /// Status code.
    pub status: StatusCode,
    /// Response headers.
    pub headers: HeaderMap,
    /// The whole body (at most [`MAX_BODY_BYTES`]).
    pub body: Bytes,
}

/// Sends `builder` with the per-attempt `timeout` (covering connect, headers and the whole
/// body) and reads the body. Transport problems become `TIMEOUT` failures.
pub async fn send(
    provider: &str,
    builder: RequestBuilder,
    timeout: Duration,
    secret: Option<&Secret>,
) -> Result<HttpReply, VendorFailure> {
    let mut response = builder
        .timeout(timeout)
        .send()
        .await
        .map_err(|e| transport_failure(provider, &e, None, timeout, secret))?;
    let status = response.status();
    let headers = response.headers().clone();
    let mut body = Vec::new();
    loop {
        match response.chunk().await {
            Ok(Some(chunk)) => {
                if body.len() + chunk.len() > MAX_BODY_BYTES {
                    return Err(failure(
                        provider,
                        Outcome::UpstreamError,
                        Some(status.as_u16()),
                        None,
                        format!("response body larger than {MAX_BODY_BYTES} bytes"),
                        secret,
                    ));
                }
                body.extend_from_slice(&chunk);
            }
            Ok(None) => break,
            Err(e) => {
                return Err(transport_failure(
                    provider,
                    &e,
                    Some(status.as_u16()),
                    timeout,
                    secret,
                ));
            }
        }
    }
    Ok(HttpReply {
        status,
        headers,
        body: body.into(),
    })
}

/// Classifies a transport error: timeouts, connect errors and resets are `TIMEOUT`; a request
/// that could not even be built (bad `base_url`) is `UPSTREAM_ERROR` so the pool fails over to
/// another upstream. The URL is never part of the message.
pub fn transport_failure(
    provider: &str,
    err: &reqwest::Error,
    http_status: Option<u16>,
    timeout: Duration,
    secret: Option<&Secret>,
) -> VendorFailure {
    let (outcome, what) = if err.is_timeout() {
        (
            Outcome::Timeout,
            format!("no complete answer within {} ms", timeout.as_millis()),
        )
    } else if err.is_connect() {
        (Outcome::Timeout, "could not connect".to_owned())
    } else if err.is_builder() {
        (
            Outcome::UpstreamError,
            "invalid upstream request (check the upstream base_url)".to_owned(),
        )
    } else if err.is_body() || err.is_decode() {
        (
            Outcome::Timeout,
            "connection failed while reading the response".to_owned(),
        )
    } else {
        (Outcome::Timeout, "connection failed".to_owned())
    };
    let mut causes = Vec::new();
    let mut source = std::error::Error::source(err);
    while let Some(cause) = source {
        causes.push(cause.to_string());
        source = cause.source();
    }
    let message = if causes.is_empty() {
        what
    } else {
        format!("{what}: {}", causes.join(": "))
    };
    failure(provider, outcome, http_status, None, message, secret)
}

/// The upstream's `base_url` without a trailing slash, or `default`.
pub fn base_url(configured: Option<&str>, default: &str) -> String {
    configured
        .unwrap_or(default)
        .trim_end_matches('/')
        .to_owned()
}

/// A string option of the upstream (`params` in the config), e.g. Volcengine `cluster`.
pub fn upstream_str<'a>(
    params: &'a BTreeMap<String, serde_json::Value>,
    name: &str,
) -> Option<&'a str> {
    params.get(name).and_then(serde_json::Value::as_str)
}
