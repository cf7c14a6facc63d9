//! One Synthesize request with everything around it: the circuit breaker, the client-side
//! rate limit, the per-call deadline, and retries of retryable failures (see [`crate::retry`]).
//!
//! Every call carries `request_id = "<base>.<attempt>"`, so the server's logs (and tests) can
//! count the calls made for an item.

use std::{sync::Arc, time::Duration};

use backon::Retryable as _;
use governor::DefaultDirectRateLimiter;
use voxpool_proto::synthesis::v1::{
    SynthesizeRequest, SynthesizeResponse, synthesis_client::SynthesisClient,
};

use crate::{
    breaker::{Breaker, Health, Phase},
    format::Format,
    retry::{CallError, RetryPolicy},
    stats::Stats,
};

/// What every call of a batch shares.
#[derive(Clone)]
pub struct Caller {
    /// The Synthesis client (one HTTP/2 connection, cloned per call).
    pub client: SynthesisClient<crate::connect::Authed>,
    /// Where it points (`--synthesis`), named in errors that never reached the server.
    pub url: String,
    /// The shared circuit breaker.
    pub breaker: Arc<Breaker>,
    /// Client-side calls-per-second limit (`--qps`).
    pub limiter: Option<Arc<DefaultDirectRateLimiter>>,
    /// Retries.
    pub policy: RetryPolicy,
    /// Per-call deadline (`--deadline`).
    pub deadline: Duration,
    /// Counters.
    pub stats: Arc<Stats>,
    /// Most audio bytes one text may produce ([`AudioBudget`]); `None` = no limit.
    pub audio_budget: Option<AudioBudget>,
}

/// A ceiling on the audio of one text, checked after every part: once what came back, or
/// what the rate so far extrapolates to for the whole text, passes `bytes`, the text stops
/// with a local OUT_OF_RANGE error naming `what` (no file is written), instead of spending
/// minutes and memory on audio that cannot be written or was not wanted.
#[derive(Clone, Debug)]
pub struct AudioBudget {
    /// The ceiling, in bytes.
    pub bytes: u64,
    /// What sets it and how to get past it (`the WAV format's 4 GiB limit; …`).
    pub what: String,
}

impl AudioBudget {
    /// The output format's own limit ([`Format::max_file_bytes`]), if it has one.
    pub fn for_format(format: Format) -> Option<Self> {
        format.max_file_bytes().map(|bytes| Self {
            bytes,
            what: format!(
                "the {} format's limit of {bytes} bytes (its sizes are 32-bit): split the text, or use --format pcm, mp3 or ogg-opus",
                format.as_str()
            ),
        })
    }

    /// The error for a text of `chars` characters whose first `spoken_chars` gave `bytes`
    /// bytes of audio, if the budget cannot hold it.
    pub(crate) fn check(&self, bytes: u64, spoken_chars: usize, chars: usize) -> Option<CallError> {
        let estimate = u128::from(bytes) * chars as u128 / spoken_chars.max(1) as u128;
        let estimate = u64::try_from(estimate).unwrap_or(u64::MAX);
        (estimate > self.bytes).then(|| {
            CallError::local(format!(
                "after {spoken_chars} of {chars} characters the audio is {bytes} bytes, about {estimate} bytes for the whole text: over {}",
                self.what
            ))
        })
    }
}

/// The result of a request: the response or the last error, with the calls it took.
#[derive(Debug)]
pub struct Called {
    /// The response, or the error that ended the request.
    pub result: Result<SynthesizeResponse, CallError>,
    /// Calls made (1 + retries).
    pub calls: u32,
}

impl Caller {
    /// Sends `request` (its `request_id` is set per call from `request_id_base`) until it
    /// succeeds, fails with a non-retryable error, or runs out of attempts.
    ///
    /// Attempts that fail while the circuit breaker holds the service down (it is not closed
    /// after the last one) do not use up the item's attempts: the breaker paces those calls
    /// (its probes), and a service that stays down ends the run through `--give-up-after`, with
    /// the item not started rather than failed. An item that fails while the breaker is closed
    /// (other calls succeed) fails on its own, after its attempts.
    pub async fn synthesize(&self, request: &SynthesizeRequest, request_id_base: &str) -> Called {
        let mut attempt = 0u32;
        loop {
            let result = (|| {
                attempt += 1;
                self.once(request, format!("{request_id_base}.{attempt}"))
            })
            .retry(self.policy.ceilings())
            .when(CallError::retryable)
            .adjust(|error, ceiling| ceiling.map(|c| self.policy.delay(c, error)))
            .notify(|_, _| Stats::bump(&self.stats.retries))
            .await;
            let service_down = matches!(&result, Err(e) if e.retryable() && matches!(e.health(), Health::Down))
                && self.breaker.phase() != Phase::Closed;
            if !service_down {
                return Called {
                    result,
                    calls: attempt,
                };
            }
            Stats::bump(&self.stats.retries);
        }
    }

    async fn once(
        &self,
        request: &SynthesizeRequest,
        request_id: String,
    ) -> Result<SynthesizeResponse, CallError> {
        let permit = self.breaker.permit().await;
        if let Some(limiter) = &self.limiter {
            limiter.until_ready().await;
        }
        let mut message = request.clone();
        message.request_id = request_id;
        let mut grpc = tonic::Request::new(message);
        grpc.set_timeout(self.deadline);
        Stats::bump(&self.stats.calls);
        let mut client = self.client.clone();
        let result = match tokio::time::timeout(self.deadline, client.synthesize(grpc)).await {
            Err(_) => Err(CallError::deadline(self.deadline)),
            Ok(Err(status)) => {
                let mut error = CallError::from_status(&status);
                if error.transport || std::error::Error::source(&status).is_some() {
                    error.message = format!(
                        "{} (synthesis at {}; check --synthesis and that the service runs)",
                        error.message, self.url
                    );
                }
                Err(error)
            }
            Ok(Ok(response)) => Ok(response.into_inner()),
        };
        let health = match &result {
            Ok(_) => Health::Up,
            Err(e) => e.health(),
        };
        if let (Health::Down, Err(e)) = (health, &result) {
            self.breaker.note_failure(if e.transport {
                e.to_string()
            } else {
                format!("synthesis at {} answered {e}", self.url)
            });
        }
        permit.record(health);
        result
    }
}

pub use voxpool_domain::contract::chunks_of;

/// A text spoken in one or more parts: the audio of each part in text order, the keys that
/// served them and the calls it took, or the error that stopped it (with the part it hit).
#[derive(Debug, Default)]
pub struct Spoken {
    /// Audio of each part, in text order (all parts when `error` is `None`).
    pub audio: Vec<Vec<u8>>,
    /// Keys (`upstream/key`) that produced audio or were tried, first use first.
    pub keys: Vec<String>,
    /// Calls made.
    pub calls: u32,
    /// Parts the text was finally split into.
    pub parts: usize,
    /// Text chunks of the parts that came back ([`chunks_of`], summed over the parts).
    pub chunks: u64,
    /// Of `chunks`, those served from the audio cache.
    pub cached_chunks: u64,
    /// The failure that ended the text: the error, the 1-based part and the part count then.
    pub error: Option<(CallError, usize, usize)>,
}

/// The longest text per request, shared by every item of a run. It starts at `--max-chars`
/// and shrinks when the server answers `RESPONSE_TOO_LARGE`, so the items after the first
/// oversized one are split small enough up front.
#[derive(Debug)]
pub struct PartLimit(std::sync::atomic::AtomicUsize);

impl PartLimit {
    /// Starts at `max_chars` (at least 1).
    pub fn new(max_chars: usize) -> Self {
        Self(std::sync::atomic::AtomicUsize::new(max_chars.max(1)))
    }

    /// The current limit, in characters.
    pub fn get(&self) -> usize {
        self.0.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn shrink_to(&self, chars: usize) {
        self.0
            .fetch_min(chars.max(1), std::sync::atomic::Ordering::Relaxed);
    }
}

impl Caller {
    /// Speaks `text` with `template`'s voice and format: split to `limit`, one [`Caller::synthesize`]
    /// per part, in order. A part whose audio is over the server's message limit
    /// (`RESPONSE_TOO_LARGE`, never retried as is) is split again to the size its bytes say
    /// fits, with a 10 % margin, and the shared limit shrinks to match.
    pub async fn speak(
        &self,
        template: &SynthesizeRequest,
        text: &str,
        limit: &PartLimit,
        request_id_base: &str,
    ) -> Spoken {
        use voxpool_domain::text::{TextLimit, split};
        let pieces = |text: &str, max: usize| -> Vec<String> {
            split(text, TextLimit::Chars(max))
                .into_iter()
                .filter(|p| !p.trim().is_empty())
                .map(str::to_owned)
                .collect()
        };
        let chars = text.chars().count();
        let (mut audio_bytes, mut spoken_chars) = (0u64, 0usize);
        let mut todo: std::collections::VecDeque<String> = pieces(text, limit.get()).into();
        let mut spoken = Spoken {
            parts: todo.len(),
            ..Spoken::default()
        };
        while let Some(part) = todo.pop_front() {
            let index = spoken.audio.len();
            let request = SynthesizeRequest {
                text: part.clone(),
                ..template.clone()
            };
            let called = self
                .synthesize(&request, &format!("{request_id_base}#{}", index + 1))
                .await;
            spoken.calls += called.calls;
            match called.result {
                Ok(response) => {
                    for key in response
                        .attempts
                        .iter()
                        .map(|a| a.key_id.as_str())
                        .chain([response.key_id.as_str()])
                    {
                        if !key.is_empty() && !spoken.keys.iter().any(|k| k == key) {
                            spoken.keys.push(key.to_owned());
                        }
                    }
                    let (cached, chunks) = chunks_of(&response);
                    spoken.cached_chunks += cached;
                    spoken.chunks += chunks;
                    self.stats
                        .cached_chunks
                        .fetch_add(cached, std::sync::atomic::Ordering::Relaxed);
                    self.stats
                        .chunks
                        .fetch_add(chunks, std::sync::atomic::Ordering::Relaxed);
                    audio_bytes += response.audio.len() as u64;
                    spoken_chars += part.chars().count();
                    spoken.audio.push(response.audio);
                    Stats::bump(&self.stats.parts_spoken);
                    self.stats.chars_spoken.fetch_add(
                        part.chars().count() as u64,
                        std::sync::atomic::Ordering::Relaxed,
                    );
                    let over = self
                        .audio_budget
                        .as_ref()
                        .and_then(|b| b.check(audio_bytes, spoken_chars, chars));
                    if let Some(error) = over {
                        spoken.error = Some((error, spoken.audio.len(), spoken.parts));
                        return spoken;
                    }
                }
                Err(error) => {
                    let chars = part.chars().count();
                    let smaller = error.too_large().and_then(|(bytes, max)| {
                        let fits = u128::from(max) * chars as u128 * 9 / (u128::from(bytes) * 10);
                        // 0: not even one character's audio fits; nothing to split.
                        let fits = usize::try_from(fits).unwrap_or(usize::MAX);
                        let split = pieces(&part, fits.max(1));
                        (fits >= 1 && fits < chars && split.len() > 1).then_some((fits, split))
                    });
                    let Some((fits, split)) = smaller else {
                        spoken.error = Some((error, index + 1, spoken.parts));
                        return spoken;
                    };
                    limit.shrink_to(fits);
                    spoken.parts += split.len() - 1;
                    for piece in split.into_iter().rev() {
                        todo.push_front(piece);
                    }
                }
            }
        }
        spoken
    }
}

#[cfg(test)]
mod tests {
    use voxpool_proto::{scheduler::v1::Outcome, synthesis::v1::Attempt};

    use super::*;

    fn attempt(outcome: Outcome) -> Attempt {
        Attempt {
            outcome: outcome as i32,
            ..Attempt::default()
        }
    }

    #[test]
    fn a_responses_chunks_are_its_cached_ones_plus_its_successful_vendor_calls() {
        let response = SynthesizeResponse {
            cached_chunks: 2,
            attempts: vec![
                attempt(Outcome::RateLimited),
                attempt(Outcome::Success),
                attempt(Outcome::Success),
            ],
            ..SynthesizeResponse::default()
        };
        assert_eq!(
            chunks_of(&response),
            (2, 4),
            "a failed-over call is no chunk"
        );
        let all_cached = SynthesizeResponse {
            cached_chunks: 3,
            ..SynthesizeResponse::default()
        };
        assert_eq!(chunks_of(&all_cached), (3, 3));
        assert_eq!(
            chunks_of(&SynthesizeResponse::default()),
            (0, 1),
            "a response without attempts still holds one chunk's audio"
        );
    }
}
