//! `voxpool-fake-vendor`: one fake TTS vendor (any of the six wire formats) for load
//! experiments. It prints its base URL (`http://127.0.0.1:PORT`) alone on the first line of
//! stdout, serves until Ctrl-C / SIGTERM, then prints the per-key counters as JSON. The same
//! counters are served live at `GET /_fake/stats`.
//!
//! ```text
//! voxpool-fake-vendor --vendor volcengine --listen 127.0.0.1:0 --cap 10 --latency-ms 800 \
//!     --latency-max-ms 1200 --p-server-error 0.01 --retry-after-secs 1
//! voxpool-fake-vendor --vendor openai --stream-first-byte-ms 200 --stream-rest-ms 1500 \
//!     --stream-pieces 8 --p-mid-stream-break 0.01 --markers
//! voxpool-fake-vendor --vendor elevenlabs --clone-scope key-a=ws-1 --clone-scope key-b=ws-1 \
//!     --clone-slots 3
//! ```

use std::{net::SocketAddr, process::ExitCode, time::Duration};

use clap::Parser;
use voxpool_fake_vendors::{
    CloneConfig, FakeConfig, FakeVendor, FaultRates, Latency, Streaming, VendorKind,
};

/// A fake TTS vendor with a per-key concurrency cap, latency and fault injection.
#[derive(Debug, Parser)]
#[command(name = "voxpool-fake-vendor", version)]
struct Args {
    /// Wire format: openai, azure, volcengine, elevenlabs, minimax or dashscope.
    #[arg(long, env = "VOXPOOL_FAKE_VENDOR")]
    vendor: VendorKind,
    /// Address to listen on (port 0 picks a free port; the bound address is printed).
    #[arg(long, env = "VOXPOOL_FAKE_LISTEN", default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// Concurrent requests allowed per key (credential or appid); 0 = unlimited.
    #[arg(long, env = "VOXPOOL_FAKE_CAP", default_value_t = 10)]
    cap: u32,
    /// Latency of an admitted request, in ms (the lower bound with --latency-max-ms).
    #[arg(long, env = "VOXPOOL_FAKE_LATENCY_MS", default_value_t = 0)]
    latency_ms: u64,
    /// Upper bound of a uniform latency, in ms.
    #[arg(
        long,
        env = "VOXPOOL_FAKE_LATENCY_MAX_MS",
        conflicts_with = "latency_stddev_ms"
    )]
    latency_max_ms: Option<u64>,
    /// Standard deviation of a normal latency around --latency-ms, in ms (cut at 0).
    #[arg(long, env = "VOXPOOL_FAKE_LATENCY_STDDEV_MS")]
    latency_stddev_ms: Option<u64>,
    /// Probability of a bare HTTP 503.
    #[arg(long, env = "VOXPOOL_FAKE_P_SERVER_ERROR", default_value_t = 0.0)]
    p_server_error: f64,
    /// Probability of the vendor's rate-limit error (beyond the cap).
    #[arg(long, env = "VOXPOOL_FAKE_P_RATE_LIMITED", default_value_t = 0.0)]
    p_rate_limited: f64,
    /// Probability of the vendor's auth error.
    #[arg(long, env = "VOXPOOL_FAKE_P_UNAUTHORIZED", default_value_t = 0.0)]
    p_unauthorized: f64,
    /// Probability of the vendor's busy error (a body code where the vendor has one).
    #[arg(long, env = "VOXPOOL_FAKE_P_BODY_ERROR", default_value_t = 0.0)]
    p_body_error: f64,
    /// Probability that an answer breaks after its first piece (aborted body or error event).
    #[arg(long, env = "VOXPOOL_FAKE_P_MID_STREAM_BREAK", default_value_t = 0.0)]
    p_mid_stream_break: f64,
    /// Turns streaming on: time to the first piece of an answer, in ms (replaces the latency).
    #[arg(long, env = "VOXPOOL_FAKE_STREAM_FIRST_BYTE_MS")]
    stream_first_byte_ms: Option<u64>,
    /// With streaming: time from the first piece to the last, in ms.
    #[arg(
        long,
        env = "VOXPOOL_FAKE_STREAM_REST_MS",
        default_value_t = 0,
        requires = "stream_first_byte_ms"
    )]
    stream_rest_ms: u64,
    /// With streaming: pieces an answer's audio is cut into (at least 1).
    #[arg(
        long,
        env = "VOXPOOL_FAKE_STREAM_PIECES",
        default_value_t = 4,
        requires = "stream_first_byte_ms"
    )]
    stream_pieces: u32,
    /// Start each audio payload with `[[<text>]]` (the first 48 bytes of the request text).
    #[arg(long, env = "VOXPOOL_FAKE_MARKERS")]
    markers: bool,
    /// `Retry-After` seconds sent with rate-limit answers.
    #[arg(long, env = "VOXPOOL_FAKE_RETRY_AFTER_SECS")]
    retry_after_secs: Option<u64>,
    /// Accept only this key (repeatable); default: any key.
    #[arg(long = "key", env = "VOXPOOL_FAKE_KEYS", value_delimiter = ',')]
    keys: Vec<String>,
    /// Length of the returned audio, in ms.
    #[arg(long, env = "VOXPOOL_FAKE_TONE_MS", default_value_t = 200)]
    tone_ms: u32,
    /// Puts a key in a clone scope, `KEY=SCOPE` (repeatable; a key not listed is its own scope).
    #[arg(
        long = "clone-scope",
        env = "VOXPOOL_FAKE_CLONE_SCOPES",
        value_delimiter = ','
    )]
    clone_scopes: Vec<String>,
    /// Cloned voices a scope may hold (default: the vendor's own, 1,000 for DashScope, 10
    /// for the others).
    #[arg(long, env = "VOXPOOL_FAKE_CLONE_SLOTS")]
    clone_slots: Option<u32>,
}

impl Args {
    fn config(&self) -> Result<FakeConfig, String> {
        let faults = FaultRates {
            server_error: self.p_server_error,
            rate_limited: self.p_rate_limited,
            unauthorized: self.p_unauthorized,
            body_error: self.p_body_error,
            mid_stream_break: self.p_mid_stream_break,
        };
        let all = [
            faults.server_error,
            faults.rate_limited,
            faults.unauthorized,
            faults.body_error,
            faults.mid_stream_break,
        ];
        if all.iter().any(|p| !(0.0..=1.0).contains(p)) || all.iter().sum::<f64>() > 1.0 {
            return Err("fault probabilities must each be in 0..1 and sum to at most 1".into());
        }
        let base = Duration::from_millis(self.latency_ms);
        let latency = match (self.latency_max_ms, self.latency_stddev_ms) {
            (Some(max), _) if max < self.latency_ms => {
                return Err("--latency-max-ms must not be below --latency-ms".into());
            }
            (Some(max), _) => Latency::Uniform {
                min: base,
                max: Duration::from_millis(max),
            },
            (None, Some(sd)) => Latency::Normal {
                mean: base,
                stddev: Duration::from_millis(sd),
            },
            (None, None) => Latency::Fixed(base),
        };
        let mut config = FakeConfig::new(self.vendor)
            .cap(self.cap)
            .latency(latency)
            .faults(faults);
        if self.stream_pieces == 0 {
            return Err("--stream-pieces must be at least 1".into());
        }
        config.retry_after_secs = self.retry_after_secs;
        config.streaming = self.stream_first_byte_ms.map(|first| {
            Streaming::new(
                Duration::from_millis(first),
                Duration::from_millis(self.stream_rest_ms),
                self.stream_pieces,
            )
        });
        config = config.tone_ms(self.tone_ms).markers(self.markers);
        if !self.keys.is_empty() {
            config = config.valid_keys(self.keys.clone());
        }
        let mut clones = CloneConfig::for_vendor(self.vendor);
        if let Some(slots) = self.clone_slots {
            clones = clones.slots(slots);
        }
        for pair in &self.clone_scopes {
            let Some((key, scope)) = pair.split_once('=') else {
                return Err(format!("--clone-scope {pair:?} must be KEY=SCOPE"));
            };
            clones = clones.scope(key, scope);
        }
        Ok(config.clones(clones))
    }
}

async fn shutdown_signal() {
    #[cfg(unix)]
    {
        let Ok(mut term) =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        else {
            let _ = tokio::signal::ctrl_c().await;
            return;
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    let config = match args.config() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("voxpool-fake-vendor: {e}");
            return ExitCode::from(2);
        }
    };
    let listener = match tokio::net::TcpListener::bind(args.listen).await {
        Ok(l) => l,
        Err(e) => {
            eprintln!("voxpool-fake-vendor: cannot listen on {}: {e}", args.listen);
            return ExitCode::FAILURE;
        }
    };
    let fake = match FakeVendor::serve(listener, config) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("voxpool-fake-vendor: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!("{}", fake.base_url());
    // One write: stderr is unbuffered and eprintln! writes each piece on its own, which
    // interleaved with the base URL line make run copies from stdout.
    let ready = format!(
        "voxpool-fake-vendor: {} fake on {} (cap {} per key); stats at {}/_fake/stats\n",
        fake.vendor(),
        fake.addr(),
        args.cap,
        fake.base_url()
    );
    let _ = std::io::Write::write_all(&mut std::io::stderr(), ready.as_bytes());
    shutdown_signal().await;
    match serde_json::to_string_pretty(&fake.stats()) {
        Ok(stats) => println!("{stats}"),
        Err(e) => eprintln!("voxpool-fake-vendor: cannot print stats: {e}"),
    }
    ExitCode::SUCCESS
}
