//! Synthesis metrics (OpenTelemetry; exported over OTLP when configured, no-ops otherwise).
//!
//! | instrument | kind | unit | attributes |
//! |---|---|---|---|
//! | `voxpool.synthesis.requests` | counter | `{request}` | `rpc` (unary, stream), `pool`, `code` |
//! | `voxpool.synthesis.request.duration` | histogram | `s` | `rpc`, `pool`, `code` |
//! | `voxpool.synthesis.attempts` | counter | `{attempt}` | `pool`, `upstream`, `key`, `outcome` |
//! | `voxpool.synthesis.attempt.duration` | histogram | `s` | `pool`, `upstream`, `outcome` |
//! | `voxpool.vendor.responses` | counter | `{response}` | `provider`, `pool`, `outcome`, `http.response.status_code` (0 = no HTTP answer) |
//! | `voxpool.synthesis.failovers` | counter | `{failover}` | `pool`, `outcome` (of the failed attempt) |
//! | `voxpool.synthesis.exhausted` | counter | `{request}` | `pool` |
//! | `voxpool.synthesis.characters` | counter | `{character}` | `pool` |
//! | `voxpool.synthesis.first_audio.duration` | histogram | `s` | `pool`, `format` (time from a `SynthesizeStream` or HTTP speech request to its first audio bytes) |
//! | `voxpool.synthesis.cache.hits` | counter | `{chunk}` | `pool` (chunks served from the audio cache) |
//! | `voxpool.synthesis.cache.misses` | counter | `{chunk}` | `pool` |
//! | `voxpool.synthesis.cache.coalesced` | counter | `{chunk}` | `pool` (hits served from another request's fill they waited for) |
//! | `voxpool.synthesis.cache.fills` | counter | `{entry}` | `pool` (entries written) |
//! | `voxpool.synthesis.cache.stored` | counter | `By` | `pool` (bytes written) |
//! | `voxpool.synthesis.cache.characters_saved` | counter | `{character}` | `pool` (text served from the cache, not billed) |
//! | `voxpool.synthesis.cache.evictions` | counter | `{entry}` | none (local store's size bound) |
//!
//! `pool` is a configured pool id, or `-` when the request failed before a pool was chosen (a
//! caller-supplied tts model id never becomes an attribute), so cardinality is bounded by the
//! config. `code` is the gRPC status code name (`OK`, `INVALID_ARGUMENT`, …); `outcome` the
//! scheduler outcome name (`SUCCESS`, `RATE_LIMITED`, …). Credentials never appear.

use std::{sync::OnceLock, time::Duration};

use opentelemetry::{
    KeyValue, global,
    metrics::{Counter, Histogram},
};
use tonic::Code;
use voxpool_domain::status::code_name;

use crate::{adapters::AudioFormat, record::AttemptRecord};

/// The synthesis instruments.
struct Instruments {
    requests: Counter<u64>,
    request_duration: Histogram<f64>,
    attempts: Counter<u64>,
    attempt_duration: Histogram<f64>,
    vendor_responses: Counter<u64>,
    failovers: Counter<u64>,
    exhausted: Counter<u64>,
    characters: Counter<u64>,
    first_audio: Histogram<f64>,
}

fn instruments() -> &'static Instruments {
    static INSTRUMENTS: OnceLock<Instruments> = OnceLock::new();
    INSTRUMENTS.get_or_init(|| {
        let meter = global::meter("voxpool-synthesis");
        Instruments {
            requests: meter
                .u64_counter("voxpool.synthesis.requests")
                .with_unit("{request}")
                .with_description("Synthesize / SynthesizeStream calls by status code")
                .build(),
            request_duration: meter
                .f64_histogram("voxpool.synthesis.request.duration")
                .with_unit("s")
                .with_description("time from request to the last audio byte or the error")
                .build(),
            attempts: meter
                .u64_counter("voxpool.synthesis.attempts")
                .with_unit("{attempt}")
                .with_description("vendor calls by outcome")
                .build(),
            attempt_duration: meter
                .f64_histogram("voxpool.synthesis.attempt.duration")
                .with_unit("s")
                .with_description("vendor call latency by outcome")
                .build(),
            vendor_responses: meter
                .u64_counter("voxpool.vendor.responses")
                .with_unit("{response}")
                .with_description(
                    "vendor answers by provider, outcome and HTTP status (429s visible)",
                )
                .build(),
            failovers: meter
                .u64_counter("voxpool.synthesis.failovers")
                .with_unit("{failover}")
                .with_description("retries on another key after a failed vendor call")
                .build(),
            first_audio: meter
                .f64_histogram("voxpool.synthesis.first_audio.duration")
                .with_unit("s")
                .with_description("time from a SynthesizeStream request to its first audio")
                .build(),
            exhausted: meter
                .u64_counter("voxpool.synthesis.exhausted")
                .with_unit("{request}")
                .with_description("requests that failed after every eligible key was tried")
                .build(),
            characters: meter
                .u64_counter("voxpool.synthesis.characters")
                .with_unit("{character}")
                .with_description("characters synthesized successfully")
                .build(),
        }
    })
}

/// How a request arrived: its `rpc` attribute and, through the HTTP front, its route.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Via {
    /// `Synthesize`.
    Unary,
    /// `SynthesizeStream`.
    Stream,
    /// The HTTP front, with the route's template (`/v1/audio/speech`).
    Http(&'static str),
}

/// Records one finished request (`pool` = `-` when none was chosen).
pub fn request(via: Via, pool: &str, code: Code, elapsed: Duration) {
    let mut attrs = vec![
        KeyValue::new(
            "rpc",
            match via {
                Via::Unary => "unary",
                Via::Stream => "stream",
                Via::Http(_) => "http",
            },
        ),
        KeyValue::new("pool", pool.to_owned()),
        KeyValue::new("code", code_name(code)),
    ];
    if let Via::Http(route) = via {
        attrs.push(KeyValue::new("http.route", route));
    }
    let m = instruments();
    m.requests.add(1, &attrs);
    m.request_duration.record(elapsed.as_secs_f64(), &attrs);
}

/// Records one vendor call of pool `pool` (provider `provider`).
pub fn attempt(pool: &str, provider: &str, a: &AttemptRecord) {
    let outcome = a.outcome.wire_name();
    let m = instruments();
    m.vendor_responses.add(
        1,
        &[
            KeyValue::new("provider", provider.to_owned()),
            KeyValue::new("pool", pool.to_owned()),
            KeyValue::new("outcome", outcome),
            KeyValue::new(
                "http.response.status_code",
                i64::from(a.http_status.unwrap_or(0)),
            ),
        ],
    );
    m.attempts.add(
        1,
        &[
            KeyValue::new("pool", pool.to_owned()),
            KeyValue::new("upstream", a.upstream_id.clone()),
            KeyValue::new("key", a.key_id.clone()),
            KeyValue::new("outcome", outcome),
        ],
    );
    m.attempt_duration.record(
        Duration::from_millis(a.latency_ms).as_secs_f64(),
        &[
            KeyValue::new("pool", pool.to_owned()),
            KeyValue::new("upstream", a.upstream_id.clone()),
            KeyValue::new("outcome", outcome),
        ],
    );
}

/// Records a failover off a key whose call ended with `outcome`.
pub fn failover(pool: &str, outcome: &'static str) {
    instruments().failovers.add(
        1,
        &[
            KeyValue::new("pool", pool.to_owned()),
            KeyValue::new("outcome", outcome),
        ],
    );
}

/// A format as its metric label spells it: the wire enum's name (`OGG_OPUS`).
pub fn format_label(format: AudioFormat) -> &'static str {
    match format {
        AudioFormat::Wav => "WAV",
        AudioFormat::Mp3 => "MP3",
        AudioFormat::OggOpus => "OGG_OPUS",
        AudioFormat::Pcm => "PCM",
    }
}

/// Records the time from a stream's request to its first audio message.
pub fn first_audio(pool: &str, format: AudioFormat, elapsed: Duration) {
    let format = format_label(format);
    instruments().first_audio.record(
        elapsed.as_secs_f64(),
        &[
            KeyValue::new("pool", pool.to_owned()),
            KeyValue::new("format", format),
        ],
    );
}

/// Records a request that ran out of keys or attempts.
pub fn exhausted(pool: &str) {
    instruments()
        .exhausted
        .add(1, &[KeyValue::new("pool", pool.to_owned())]);
}

/// Records `n` characters synthesized successfully.
pub fn characters(pool: &str, n: usize) {
    instruments()
        .characters
        .add(n as u64, &[KeyValue::new("pool", pool.to_owned())]);
}

/// The audio cache's instruments (`crate::cache`).
struct CacheInstruments {
    hits: Counter<u64>,
    misses: Counter<u64>,
    coalesced: Counter<u64>,
    fills: Counter<u64>,
    stored: Counter<u64>,
    characters_saved: Counter<u64>,
    evictions: Counter<u64>,
}

fn cache_instruments() -> &'static CacheInstruments {
    static INSTRUMENTS: OnceLock<CacheInstruments> = OnceLock::new();
    INSTRUMENTS.get_or_init(|| {
        let meter = global::meter("voxpool-synthesis");
        let counter = |name: &'static str, unit: &'static str, description: &'static str| {
            meter
                .u64_counter(name)
                .with_unit(unit)
                .with_description(description)
                .build()
        };
        CacheInstruments {
            hits: counter(
                "voxpool.synthesis.cache.hits",
                "{chunk}",
                "text chunks served from the audio cache",
            ),
            misses: counter(
                "voxpool.synthesis.cache.misses",
                "{chunk}",
                "text chunks looked up in the audio cache and not found",
            ),
            coalesced: counter(
                "voxpool.synthesis.cache.coalesced",
                "{chunk}",
                "hits served from another request's fill they waited for",
            ),
            fills: counter(
                "voxpool.synthesis.cache.fills",
                "{entry}",
                "audio cache entries written",
            ),
            stored: counter(
                "voxpool.synthesis.cache.stored",
                "By",
                "bytes written to the audio cache",
            ),
            characters_saved: counter(
                "voxpool.synthesis.cache.characters_saved",
                "{character}",
                "text characters served from the audio cache instead of a vendor",
            ),
            evictions: counter(
                "voxpool.synthesis.cache.evictions",
                "{entry}",
                "entries evicted to keep a local audio cache under its size bound",
            ),
        }
    })
}

/// A chunk served from the cache (`coalesced`: after waiting for another request's fill).
pub fn cache_hit(pool: &str, characters: u64, coalesced: bool) {
    let attrs = [KeyValue::new("pool", pool.to_owned())];
    let m = cache_instruments();
    m.hits.add(1, &attrs);
    m.characters_saved.add(characters, &attrs);
    if coalesced {
        m.coalesced.add(1, &attrs);
    }
}

/// A chunk the cache did not hold.
pub fn cache_miss(pool: &str) {
    cache_instruments()
        .misses
        .add(1, &[KeyValue::new("pool", pool.to_owned())]);
}

/// An entry of `bytes` written for `pool`.
pub fn cache_stored(pool: &str, bytes: u64) {
    let attrs = [KeyValue::new("pool", pool.to_owned())];
    let m = cache_instruments();
    m.fills.add(1, &attrs);
    m.stored.add(bytes, &attrs);
}

/// `n` entries evicted under the size bound.
pub fn cache_evictions(n: u64) {
    cache_instruments().evictions.add(n, &[]);
}

/// The four usage meters by tier (`crate::usage`): never a tenant attribute.
struct UsageInstruments {
    characters: Counter<u64>,
    audio_seconds: Counter<f64>,
    cost: Counter<f64>,
    requests: Counter<u64>,
    dropped: Counter<u64>,
}

fn usage_instruments() -> &'static UsageInstruments {
    static INSTRUMENTS: OnceLock<UsageInstruments> = OnceLock::new();
    INSTRUMENTS.get_or_init(|| {
        let meter = global::meter("voxpool-synthesis");
        UsageInstruments {
            characters: meter
                .u64_counter("voxpool.usage.characters")
                .with_unit("{character}")
                .with_description("characters vendors charge for (cached = true: served from the audio cache), by each provider's billing rule")
                .build(),
            audio_seconds: meter
                .f64_counter("voxpool.usage.audio_seconds")
                .with_unit("s")
                .with_description("audio produced (cached = true: served from the audio cache)")
                .build(),
            cost: meter
                .f64_counter("voxpool.usage.cost")
                .with_unit("{currency}")
                .with_description("cost at the pools' prices, in [usage] currency")
                .build(),
            requests: meter
                .u64_counter("voxpool.usage.requests")
                .with_unit("{request}")
                .with_description("metered requests (cached = true: every chunk from the audio cache)")
                .build(),
            dropped: meter
                .u64_counter("voxpool.usage.records_dropped")
                .with_unit("{record}")
                .with_description("usage records dropped: the usage store did not answer and the queue was full")
                .build(),
        }
    })
}

/// What a request's usage is counted under: tier, pool and provider (never the tenant).
#[derive(Clone, Copy, Debug)]
pub struct UsageLabels<'a> {
    /// The pack's tier (`UNSPECIFIED` without one).
    pub tier: &'static str,
    /// The pool.
    pub pool: &'a str,
    /// The pool's provider.
    pub provider: &'static str,
}

fn usage_attributes(labels: UsageLabels<'_>, cached: bool) -> [KeyValue; 4] {
    [
        KeyValue::new("tier", labels.tier),
        KeyValue::new("pool", labels.pool.to_owned()),
        KeyValue::new("provider", labels.provider),
        KeyValue::new("cached", cached),
    ]
}

/// Characters, audio and cost one attempt or cache hit of a request used.
pub fn usage(
    labels: UsageLabels<'_>,
    characters: u64,
    audio_ms: u64,
    cost_micros: i64,
    cached: bool,
) {
    let i = usage_instruments();
    let attributes = usage_attributes(labels, cached);
    i.characters.add(characters, &attributes);
    i.audio_seconds.add(audio_ms as f64 / 1000.0, &attributes);
    i.cost.add(cost_micros as f64 / 1_000_000.0, &attributes);
}

/// One request ended (`cached`: served wholly from the audio cache).
pub fn usage_request(labels: UsageLabels<'_>, cached: bool) {
    usage_instruments()
        .requests
        .add(1, &usage_attributes(labels, cached));
}

/// A usage record dropped (`crate::usage::writer`).
pub fn usage_dropped() {
    usage_instruments().dropped.add(1, &[]);
}
