//! The behaviour knobs a fake is started or steered with: latency ([`Latency`]), streamed
//! delivery ([`Streaming`]), the faults it answers with ([`Fault`]), at random ([`FaultRates`])
//! or from a script ([`Step`]). `control` applies them to each admitted request.

use std::time::Duration;

use rand::Rng as _;

/// How long an admitted request takes before it answers.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Latency {
    /// Always this long (`Duration::ZERO` = answer at once).
    Fixed(Duration),
    /// Uniform between the two bounds.
    Uniform {
        /// Shortest.
        min: Duration,
        /// Longest.
        max: Duration,
    },
    /// Normal around `mean` with `stddev`, cut at zero.
    Normal {
        /// Mean.
        mean: Duration,
        /// Standard deviation.
        stddev: Duration,
    },
    /// Log-normal: `median · e^(sigma·Z)`, Z standard normal (a right-skewed service time
    /// with a long tail, like real TTS calls). Its mean is `median · e^(sigma²/2)`.
    LogNormal {
        /// Median (the scale `e^mu`).
        median: Duration,
        /// Shape: standard deviation of the log (0 = always `median`).
        sigma: f64,
    },
    /// An engine that shares `cores` processors among its calls (a local or GPU engine, not a
    /// cloud of independent keys): a call needs `alone` of one processor, and calls in flight
    /// (on every key of the fake) share the processors equally, so its throughput stops
    /// growing at `cores` calls.
    Shared {
        /// A call's time with a processor to itself.
        alone: Duration,
        /// Processors shared by all calls.
        cores: u32,
    },
}

impl Default for Latency {
    fn default() -> Self {
        Latency::Fixed(Duration::ZERO)
    }
}

impl Latency {
    /// One draw (a [`Latency::Shared`] call as if it ran alone).
    pub fn sample(&self) -> Duration {
        match *self {
            Latency::Fixed(d) | Latency::Shared { alone: d, .. } => d,
            Latency::Uniform { min, max } if max > min => rand::rng().random_range(min..=max),
            Latency::Uniform { min, .. } => min,
            Latency::Normal { mean, stddev } => {
                let mut rng = rand::rng();
                // Box–Muller: u1 in (0, 1] keeps ln finite.
                let u1: f64 = 1.0 - rng.random::<f64>();
                let u2: f64 = rng.random();
                let z = (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos();
                Duration::from_secs_f64((mean.as_secs_f64() + z * stddev.as_secs_f64()).max(0.0))
            }
            Latency::LogNormal { median, sigma } => {
                let z = standard_normal();
                let secs = median.as_secs_f64() * (sigma.max(0.0) * z).exp();
                // Capped at an hour so an absurd sigma cannot overflow `Duration`.
                Duration::from_secs_f64(secs.clamp(0.0, 3600.0))
            }
        }
    }
}

/// One draw of a standard normal variable (Box–Muller; u1 in (0, 1] keeps ln finite).
fn standard_normal() -> f64 {
    let mut rng = rand::rng();
    let u1: f64 = 1.0 - rng.random::<f64>();
    let u2: f64 = rng.random();
    (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
}

/// Streamed delivery of admitted answers: the audio of one answer is cut into `pieces` slices of
/// the same bytes the unstreamed answer carries (so their concatenation is that audio; WAV
/// header first), framed the vendor's way (raw body chunks, SSE events or JSON lines).
///
/// Timeline of one streamed answer, from admission: the first piece is sent after
/// `first_byte` (this replaces the [`Latency`] wait); piece `k` (0-based, `pieces` ≥ 2) at
/// `first_byte + rest·k/(pieces−1)`, so the last one at `first_byte + rest`; the vendor's end
/// frame (MiniMax `status: 2` event, Volcengine final line, …) goes with the last piece, and with
/// one piece the answer ends at `first_byte + rest`. Answers that a vendor never streams (a
/// whole JSON document: MiniMax `stream: false`, Volcengine V1, DashScope without SSE, the
/// ElevenLabs non-stream route) wait `first_byte + rest` and then answer at once.
///
/// Pieces are cut at even byte offsets (whole 16-bit samples); an answer shorter than
/// `2·pieces` bytes gets fewer pieces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Streaming {
    /// Time from admission to the first piece.
    pub first_byte: Duration,
    /// Time from the first piece to the last one (the end of the answer).
    pub rest: Duration,
    /// Number of pieces the audio is cut into (at least 1; 0 is read as 1).
    pub pieces: u32,
}

impl Streaming {
    /// First piece after `first_byte`, the rest spread over `rest` in `pieces` pieces in all.
    pub fn new(first_byte: Duration, rest: Duration, pieces: u32) -> Self {
        Self {
            first_byte,
            rest,
            pieces,
        }
    }

    /// `pieces`, at least 1.
    pub fn piece_count(&self) -> u32 {
        self.pieces.max(1)
    }
}

/// An error a fake can be told to answer with, each rendered in the vendor's own shape.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fault {
    /// The vendor's concurrency / rate-limit error (what the cap also answers).
    RateLimited {
        /// Sent as `Retry-After` where the vendor uses headers.
        retry_after_secs: Option<u64>,
    },
    /// The vendor's "busy / overloaded" error (a 5xx, a busy body code, ElevenLabs `system_busy`).
    Busy,
    /// A bare HTTP 503 with a plain-text body.
    ServerError,
    /// The vendor's authentication error.
    Unauthorized,
    /// The vendor's balance / quota error.
    QuotaExhausted,
    /// The vendor's invalid-request / invalid-text error.
    InvalidText,
    /// HTTP 200 whose body is the vendor's error document (its rate-limit error) instead of audio.
    ErrorIn200,
}

/// Probabilities (0..1 each, summed ≤ 1) of answering an admitted request with a fault.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct FaultRates {
    /// Bare HTTP 503.
    pub server_error: f64,
    /// The vendor's rate-limit error (429 or its body code).
    pub rate_limited: f64,
    /// The vendor's auth error (401).
    pub unauthorized: f64,
    /// The vendor's busy error ([`Fault::Busy`]: a body code where the vendor has one).
    pub body_error: f64,
    /// An answer that starts and then breaks ([`Step::BreakAfterFirstPiece`]).
    pub mid_stream_break: f64,
}

/// What the script or the fault rates decided for one admitted request.
pub(crate) enum Pick {
    Fault(Fault),
    Break,
}

impl FaultRates {
    pub(crate) fn draw(&self, retry_after_secs: Option<u64>) -> Option<Pick> {
        let total = self.server_error
            + self.rate_limited
            + self.unauthorized
            + self.body_error
            + self.mid_stream_break;
        if total <= 0.0 {
            return None;
        }
        let r: f64 = rand::rng().random();
        let mut edge = self.server_error;
        if r < edge {
            return Some(Pick::Fault(Fault::ServerError));
        }
        edge += self.rate_limited;
        if r < edge {
            return Some(Pick::Fault(Fault::RateLimited { retry_after_secs }));
        }
        edge += self.unauthorized;
        if r < edge {
            return Some(Pick::Fault(Fault::Unauthorized));
        }
        edge += self.body_error;
        if r < edge {
            return Some(Pick::Fault(Fault::Busy));
        }
        edge += self.mid_stream_break;
        (r < edge).then_some(Pick::Break)
    }
}

/// One entry of a scripted sequence (consumed in order by admitted requests, before the
/// random faults apply).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Answer normally.
    Serve,
    /// Answer with this fault.
    Fail(Fault),
    /// Start a successful answer (HTTP 200, its first piece at the usual time) and break it
    /// before its end. Raw-audio bodies (OpenAI, Azure, ElevenLabs) are aborted: the body stream
    /// yields an error, so hyper drops the connection without the final chunk. SSE and JSON-lines
    /// answers (MiniMax `stream: true`, DashScope SSE, Volcengine V3) send the vendor's error
    /// event or line instead of their end frame, then end normally. A whole JSON document
    /// (MiniMax `stream: false`, Volcengine V1, DashScope JSON, the ElevenLabs non-stream route)
    /// is cut: its first half is sent, then the connection is dropped.
    ///
    /// The audio is always left incomplete: with one piece (streaming off, or `pieces: 1`) it
    /// is cut in two and the first half is sent. The failure comes when the second piece would
    /// have been sent. The request counts as `faults_injected`, not `successes`.
    BreakAfterFirstPiece,
}
