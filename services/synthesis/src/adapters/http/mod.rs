//! Transport of the cloud vendor adapters: one pooled HTTP client; [`open`], which sends a
//! request and hands back the response as its body streams in ([`Opened`]); [`send`], which
//! reads a whole response; [`stream_raw_audio`], the streaming read of vendors that answer
//! with raw audio bytes. All within the attempt's timeout, transport problems turned into
//! `TIMEOUT` failures ([`transport_failure`]); upstream options from the config.
//!
//! The other jobs live beside it and are re-exported here, so an adapter names everything as
//! `http::…`: [`classify`] (the error classification of docs/VENDORS.md, secret scrubbing, the
//! one "vendor error answer → failure" helper) and [`params`] (invariant 8 of docs/ARCHITECTURE.md's refusal helpers).

pub mod classify;
pub mod params;
pub mod sse;

use std::{collections::BTreeMap, sync::OnceLock, time::Duration};

use bytes::Bytes;
use reqwest::{Client, RequestBuilder, StatusCode, header::HeaderMap};
use voxpool_domain::{contract::Outcome, secret::Secret};

pub use self::{classify::*, params::*};
use super::{AudioSink, VendorFailure, gate::Gate};

/// `User-Agent` sent to every vendor (Azure requires one).
pub const USER_AGENT: &str = concat!("voxpool-synthesis/", env!("CARGO_PKG_VERSION"));

/// Largest response body accepted (a 10-minute 48 kHz WAV is ~58 MiB).
pub const MAX_BODY_BYTES: usize = 64 << 20;

/// Builds a pooled HTTP client (rustls with the workspace's one crypto provider, ring; HTTP/2
/// by ALPN; keep-alive pool). Per-attempt timeouts are set on each request ([`send`]), not
/// here.
pub fn build_client() -> Result<Client, reqwest::Error> {
    voxpool_runtime::limits::install_crypto_provider();
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

/// A response whose status and headers have arrived, its body still coming: read it piece by
/// piece with [`Opened::chunk`] (a streaming vendor) or whole with [`Opened::read_all`].
#[derive(Debug)]
pub struct Opened {
    /// Status code.
    pub status: StatusCode,
    /// Response headers.
    pub headers: HeaderMap,
    response: reqwest::Response,
    timeout: Duration,
    read: usize,
}

/// Sends `builder` with the per-attempt `timeout` (covering connect, headers and the whole
/// body) and waits for the status and headers, its body held at `gate` ([`Gate`]).
/// Transport problems become `TIMEOUT` failures.
pub async fn open(
    provider: &str,
    builder: RequestBuilder,
    timeout: Duration,
    secret: Option<&Secret>,
    gate: &Gate,
) -> Result<Opened, VendorFailure> {
    let builder = builder.timeout(timeout);
    // A metered call's body always goes through `held`, open gate or not: only there is it
    // known whether the connection took the body (`Gate::body_sent`).
    let sent = if !gate.holds() {
        Some(builder.send().await)
    } else {
        held(builder, gate).await
    };
    let Some(sent) = sent.filter(|_| !gate.is_refused()) else {
        return Err(VendorFailure {
            outcome: Outcome::Timeout,
            http_status: None,
            retry_after_ms: None,
            message: "not sent: the call's usage record could not be written".into(),
        });
    };
    let response = sent.map_err(|e| transport_failure(provider, &e, None, timeout, secret))?;
    Ok(Opened {
        status: response.status(),
        headers: response.headers().clone(),
        response,
        timeout,
        read: 0,
    })
}

/// Sends the request of `builder` with its body held until `gate` opens: the head goes now,
/// the body (sent with its length, as it would have been) once the gate opens. A body that is
/// not one piece of bytes (multipart) cannot be held apart: then the whole request waits.
/// `None`: the gate was refused before anything was sent.
async fn held(builder: RequestBuilder, gate: &Gate) -> Option<reqwest::Result<reqwest::Response>> {
    let (client, request) = builder.build_split();
    let mut request = match request {
        Ok(r) => r,
        Err(e) => return Some(Err(e)),
    };
    let body = request.body_mut().take();
    match body.as_ref().and_then(reqwest::Body::as_bytes) {
        Some(bytes) => {
            let bytes = Bytes::copy_from_slice(bytes);
            request
                .headers_mut()
                .insert(reqwest::header::CONTENT_LENGTH, bytes.len().into());
            let gate = gate.clone();
            let after_gate = futures::stream::once(async move {
                if gate.opened().await {
                    // Polled by the connection: the head went and the body goes now.
                    gate.mark_sent();
                    Ok(bytes)
                } else {
                    // A refused gate: the request breaks off before its body (`open`).
                    Err(std::io::Error::other("usage record not written"))
                }
            });
            *request.body_mut() = Some(reqwest::Body::wrap_stream(after_gate));
        }
        None => {
            if !gate.opened().await {
                // Never sent (`open` answers for the refused gate).
                return None;
            }
            gate.mark_sent();
            *request.body_mut() = body;
        }
    }
    Some(client.execute(request).await)
}

impl Opened {
    /// The next piece of the body as it arrives; `None` at its end. Errors: a broken
    /// connection or the timeout (`TIMEOUT`), more than [`MAX_BODY_BYTES`] in all.
    pub async fn chunk(
        &mut self,
        provider: &str,
        secret: Option<&Secret>,
    ) -> Result<Option<Bytes>, VendorFailure> {
        let status = Some(self.status.as_u16());
        match self.response.chunk().await {
            Ok(Some(chunk)) => {
                self.read += chunk.len();
                if self.read > MAX_BODY_BYTES {
                    return Err(failure(
                        provider,
                        Outcome::UpstreamError,
                        status,
                        None,
                        format!("response body larger than {MAX_BODY_BYTES} bytes"),
                        secret,
                    ));
                }
                Ok(Some(chunk))
            }
            Ok(None) => Ok(None),
            Err(e) => Err(transport_failure(
                provider,
                &e,
                status,
                self.timeout,
                secret,
            )),
        }
    }

    /// The rest of the body, read whole, with `first` (already read) in front.
    pub async fn read_rest(
        mut self,
        first: &[u8],
        provider: &str,
        secret: Option<&Secret>,
    ) -> Result<HttpReply, VendorFailure> {
        let mut body = first.to_vec();
        while let Some(chunk) = self.chunk(provider, secret).await? {
            body.extend_from_slice(&chunk);
        }
        Ok(HttpReply {
            status: self.status,
            headers: self.headers,
            body: body.into(),
        })
    }

    /// The whole body.
    pub async fn read_all(
        self,
        provider: &str,
        secret: Option<&Secret>,
    ) -> Result<HttpReply, VendorFailure> {
        self.read_rest(&[], provider, secret).await
    }
}

/// Sends `builder` with the per-attempt `timeout` (covering connect, headers and the whole
/// body), its body held at `gate`, and reads the body. Transport problems become `TIMEOUT`
/// failures.
pub async fn send(
    provider: &str,
    builder: RequestBuilder,
    timeout: Duration,
    secret: Option<&Secret>,
    gate: &Gate,
) -> Result<HttpReply, VendorFailure> {
    open(provider, builder, timeout, secret, gate)
        .await?
        .read_all(provider, secret)
        .await
}

/// Streams the answer of a vendor that sends raw audio bytes (OpenAI-compatible, Azure,
/// ElevenLabs `/stream`): each body piece goes into `sink` as it arrives. An error status, a
/// document Content-Type, or a body that starts as a JSON object and is one (an error with
/// HTTP 200) is read whole and handed to `classify` instead; an empty 200 body is
/// `UPSTREAM_ERROR`. Whether the bytes are `format` audio is checked by the caller, on the
/// first bytes, before any of them is used.
pub async fn stream_raw_audio(
    provider: &str,
    mut opened: Opened,
    sink: &AudioSink,
    secret: Option<&Secret>,
    classify: impl FnOnce(&HttpReply) -> VendorFailure,
) -> Result<(), VendorFailure> {
    let document = media_type(&opened.headers).is_some_and(|m| {
        m.starts_with("text/") || m.contains("json") || m.contains("xml") || m.contains("html")
    });
    if !opened.status.is_success() || document {
        let reply = opened.read_all(provider, secret).await?;
        return Err(classify(&reply));
    }
    let status = Some(opened.status.as_u16());
    let mut first = true;
    while let Some(chunk) = opened.chunk(provider, secret).await? {
        if first && chunk.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{') {
            let reply = opened.read_rest(&chunk, provider, secret).await?;
            if is_document(&reply.headers, &reply.body) {
                return Err(classify(&reply));
            }
            sink.write(reply.body);
            return Ok(());
        }
        first = false;
        sink.write(chunk);
    }
    if first {
        return Err(failure(
            provider,
            Outcome::UpstreamError,
            status,
            None,
            "HTTP 200 with an empty body",
            secret,
        ));
    }
    Ok(())
}

/// Splits a growing newline-delimited body (Volcengine V3's JSON lines) into lines.
#[derive(Debug, Default)]
pub struct LineReader {
    pending: Vec<u8>,
}

impl LineReader {
    /// Adds the next body piece; returns the lines it completed (without `\n`), in order.
    pub fn push(&mut self, bytes: &[u8]) -> Vec<Vec<u8>> {
        self.pending.extend_from_slice(bytes);
        let mut lines = Vec::new();
        while let Some(end) = self.pending.iter().position(|&b| b == b'\n') {
            let mut line: Vec<u8> = self.pending.drain(..=end).collect();
            line.pop();
            lines.push(line);
        }
        lines
    }

    /// The last line when the body did not end with `\n`.
    pub fn finish(self) -> Option<Vec<u8>> {
        (!self.pending.is_empty()).then_some(self.pending)
    }
}

/// The header a WAV answer starts with when the vendor streams 16-bit mono PCM at
/// `sample_rate_hz` for it (ElevenLabs, DashScope, MiniMax): sizes unknown (`0xFFFFFFFF`), the
/// samples follow as they arrive; the joiner writes the caller's exact header. Errors: a rate
/// no WAV can carry (`UPSTREAM_ERROR`).
pub fn pcm16_wav_header(provider: &str, sample_rate_hz: u32) -> Result<Vec<u8>, VendorFailure> {
    let spec = voxpool_domain::audio::wav::WavSpec {
        channels: 1,
        sample_rate: sample_rate_hz,
        bits_per_sample: 16,
    };
    voxpool_domain::audio::wav::streaming_header(spec).map_err(|e| {
        failure(
            provider,
            Outcome::UpstreamError,
            None,
            None,
            e.to_string(),
            None,
        )
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
    } else if connection_refused(err) {
        (
            Outcome::Timeout,
            "connection refused: nothing listens at the upstream's base_url (is the server running?)"
                .to_owned(),
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

/// Whether `err` is a refused connection (an `io::Error` of that kind in its sources).
pub fn connection_refused(err: &reqwest::Error) -> bool {
    let mut source = std::error::Error::source(err);
    while let Some(cause) = source {
        if cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == std::io::ErrorKind::ConnectionRefused)
        {
            return true;
        }
        source = cause.source();
    }
    false
}

/// The upstream's `base_url` without a trailing slash, or `default`.
pub fn base_url(configured: Option<&str>, default: &str) -> String {
    configured
        .unwrap_or(default)
        .trim_end_matches('/')
        .to_owned()
}

/// A whole-number option of the upstream (`params` in the config), e.g. a self-hosted
/// server's `sample_rate_hz`; `None` when unset or not a non-negative integer that fits.
pub fn upstream_u32(params: &BTreeMap<String, serde_json::Value>, name: &str) -> Option<u32> {
    params
        .get(name)
        .and_then(serde_json::Value::as_u64)
        .and_then(|v| u32::try_from(v).ok())
}

/// A string option of the upstream (`params` in the config), e.g. Volcengine `cluster`.
pub fn upstream_str<'a>(
    params: &'a BTreeMap<String, serde_json::Value>,
    name: &str,
) -> Option<&'a str> {
    params.get(name).and_then(serde_json::Value::as_str)
}

/// An upstream whose config cannot make a request (a bad `base_url` or region):
/// `UPSTREAM_ERROR`, so the pool fails over to another upstream.
pub fn upstream_config_failure(provider: &str, message: impl AsRef<str>) -> VendorFailure {
    failure(provider, Outcome::UpstreamError, None, None, message, None)
}

#[cfg(test)]
#[path = "gate_tests.rs"]
mod gate_tests;
