//! What a request is metered for (docs/SYNTHESIS.md#usage): a [`Meter`] per request counts
//! every vendor attempt by the provider's billing rule
//! ([`voxpool_domain::usage::billable_characters`]), the audio and server time it produced,
//! what the vendor charged for (a refusal before any audio: nothing; a call that produced
//! audio: the chunk's characters, even when it failed afterwards), cache hits and their cost,
//! and prices it all with the pool's `price`. The totals go into every answer
//! ([`Totals`]); with `--usage-store` every step is also written to the usage stream
//! ([`writer`]): a Charge before a vendor is sent an attempt's text, a Settle after it and a
//! Done when the request's last reference is gone (so attempts that outlive their caller
//! are in it).

mod append;
pub mod duration;
pub mod writer;

use std::sync::{
    Arc, Mutex,
    atomic::{AtomicBool, AtomicU32, Ordering},
};

use voxpool_config::PriceConfig;
use voxpool_domain::{
    contract::Outcome,
    provider::Provider,
    snapshot::Tier,
    usage::{AttemptUsage, DoneUsage, UsageContext, UsageEvent, billable_characters},
};

pub use writer::Writer;

/// Which front a request came through (`UsageContext::path`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Path {
    /// gRPC `Synthesize`.
    Grpc,
    /// gRPC `SynthesizeStream`.
    GrpcStream,
    /// The HTTP front.
    Http,
    /// A jobs item (gRPC metadata `voxpool-origin: job`).
    Job,
}

impl Path {
    /// The name the ledger keeps.
    pub fn as_str(self) -> &'static str {
        match self {
            Path::Grpc => "grpc",
            Path::GrpcStream => "grpc_stream",
            Path::Http => "http",
            Path::Job => "job",
        }
    }
}

/// The service's usage settings: `[usage]` of the config and the stream writer.
#[derive(Clone, Debug, Default)]
pub struct Usage {
    /// `[usage] currency`.
    pub currency: String,
    /// `[usage] cache_hit_factor`.
    pub cache_hit_factor: f64,
    /// The usage stream (`--usage-store`); `None` = nothing written.
    pub writer: Option<Writer>,
}

/// What a request used so far: the answer's `usage`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Totals {
    /// Characters vendors charge for, by the provider's rule.
    pub characters: u64,
    /// What vendors said they billed (0 when none says).
    pub billed_characters: u64,
    /// Characters served from the audio cache.
    pub cached_characters: u64,
    /// Audio produced and served, ms.
    pub audio_ms: u64,
    /// Server time on self-hosted pools, ms.
    pub gpu_ms: u64,
    /// The cost in millionths of `currency`.
    pub cost_micros: i64,
    /// ISO 4217 code.
    pub currency: String,
    /// Attempts that failed.
    pub failed_attempts: u32,
    /// Of `cost_micros`, what cache hits cost.
    pub cached_cost_micros: i64,
}

/// One attempt as charged before its call: its number and what it would cost.
#[derive(Clone, Debug)]
pub struct Charge {
    /// 0, 1, … over the request.
    pub attempt: u32,
    /// Characters the attempt sends, by the provider's rule.
    pub characters: u64,
    /// Their cost at the pool's price (an estimate for audio- or time-priced pools).
    pub cost_micros: i64,
}

/// What an attempt did, as its call ended.
#[derive(Clone, Debug, Default)]
pub struct Settled {
    /// `upstream/key`.
    pub key_id: String,
    /// The key's upstream.
    pub upstream_id: String,
    /// Whether the vendor charged for it (it produced audio).
    pub charged: bool,
    /// What the vendor said it billed, if it says.
    pub billed_characters: Option<u64>,
    /// Audio produced, ms.
    pub audio_ms: u64,
    /// The call's duration (server time on self-hosted pools), ms.
    pub call_ms: u64,
    /// How it ended; `None`: cut off because nobody wanted its audio (not a failure).
    pub outcome: Option<Outcome>,
}

/// Speech per character when a price per audio second or GPU second must be reserved before
/// the audio exists: 80 ms (12.5 characters a second, a brisk speaking rate).
pub const ESTIMATED_MS_PER_CHARACTER: u64 = 80;

/// One request's meter (module doc). Shared by its chunks and their attempts.
#[derive(Debug)]
pub struct Meter {
    context: UsageContext,
    tier: Option<Tier>,
    price: PriceConfig,
    cache_hit_factor: f64,
    writer: Option<Writer>,
    next_attempt: AtomicU32,
    ok: AtomicBool,
    totals: Mutex<Totals>,
}

impl Meter {
    /// A meter for a request of `context` on a pool priced `price`.
    pub fn new(context: UsageContext, price: PriceConfig, usage: &Usage) -> Self {
        let totals = Totals {
            currency: context.currency.clone(),
            ..Totals::default()
        };
        Self {
            tier: context.tier,
            context,
            price,
            cache_hit_factor: usage.cache_hit_factor,
            writer: usage.writer.clone(),
            next_attempt: AtomicU32::new(0),
            ok: AtomicBool::new(false),
            totals: Mutex::new(totals),
        }
    }

    /// The request's context.
    pub fn context(&self) -> &UsageContext {
        &self.context
    }

    fn provider(&self) -> Provider {
        self.context.provider
    }

    /// The next attempt of `text`, numbered and priced (not yet written).
    pub fn next(&self, text: &str) -> Charge {
        let characters = billable_characters(self.provider(), text);
        let estimate = characters * ESTIMATED_MS_PER_CHARACTER;
        let gpu = if self.provider() == Provider::SelfHosted {
            estimate
        } else {
            0
        };
        Charge {
            attempt: self.next_attempt.fetch_add(1, Ordering::Relaxed),
            characters,
            cost_micros: self.price.cost_micros(self.tier, characters, estimate, gpu),
        }
    }

    /// What `texts` bill as counted up front (every chunk from a vendor, no failover), and
    /// their cost at the pool's character price: the HTTP front's headers, which go out
    /// before the audio is made.
    pub fn up_front(&self, texts: &[String]) -> (u64, i64) {
        let characters = texts
            .iter()
            .map(|t| billable_characters(self.provider(), t))
            .sum();
        (
            characters,
            self.price.cost_micros(self.tier, characters, 0, 0),
        )
    }

    /// `Err` while the usage store is known not to take Charges (`Writer::answers`): the call
    /// should not take a key meanwhile.
    pub fn store_answers(&self) -> Result<(), crate::error::SynthesisError> {
        match &self.writer {
            Some(w) if !w.answers() => Err(crate::error::SynthesisError::UsageStoreUnavailable {
                store: w.shown().to_owned(),
                message: "it has not answered since start-up or since it failed to take a usage \
                          record"
                    .into(),
            }),
            _ => Ok(()),
        }
    }

    /// Whether this meter writes records (a usage store is set).
    pub fn records(&self) -> bool {
        self.writer.is_some()
    }

    /// Writes `charge` to the usage stream (awaited: the vendor request's body waits for it,
    /// `crate::adapters::gate`); nothing without a writer. Errors: the store did not take it
    /// by `until` and the vendor must be sent nothing ([`Writer::charge`]).
    pub async fn charge(
        &self,
        charge: &Charge,
        key_id: &str,
        until: tokio::time::Instant,
    ) -> Result<(), crate::error::SynthesisError> {
        let Some(writer) = &self.writer else {
            return Ok(());
        };
        let event = UsageEvent::Charge {
            context: self.context.clone(),
            attempt: AttemptUsage {
                attempt: charge.attempt,
                key_id: key_id.to_owned(),
                upstream_id: key_id.split('/').next().unwrap_or_default().to_owned(),
                characters: charge.characters,
                billed_characters: 0,
                audio_ms: 0,
                gpu_ms: 0,
                cost_micros: charge.cost_micros,
                outcome: String::new(),
            },
        };
        writer.charge(&event, until).await.map_err(|message| {
            crate::error::SynthesisError::UsageStoreUnavailable {
                store: writer.shown().to_owned(),
                message,
            }
        })
    }

    /// What the vendor charged for `charge`'s attempt, ended as `settled`: its characters and
    /// cost (0 and 0 when not charged). Counted in the totals and queued as a Settle.
    pub fn settle(&self, charge: &Charge, settled: &Settled) -> (u64, i64) {
        let (characters, cost_micros, event) = self.settle_event(charge, settled);
        if let (Some(writer), Some(event)) = (&self.writer, event) {
            writer.queue(&event);
        }
        (characters, cost_micros)
    }

    /// [`Meter::settle`], the Settle written at once and awaited rather than queued: for a
    /// refusal, which must reach the stream before anything else can happen to the replica
    /// (its Charge would otherwise count as charged).
    pub async fn settle_now(&self, charge: &Charge, settled: &Settled) -> (u64, i64) {
        let (characters, cost_micros, event) = self.settle_event(charge, settled);
        if let (Some(writer), Some(event)) = (&self.writer, event) {
            writer.write_now(&event).await;
        }
        (characters, cost_micros)
    }

    /// Counts `charge`'s attempt as `settled` in the totals and meters, and builds its Settle
    /// (when records are written).
    fn settle_event(&self, charge: &Charge, settled: &Settled) -> (u64, i64, Option<UsageEvent>) {
        let gpu_ms = if self.provider() == Provider::SelfHosted && settled.charged {
            settled.call_ms
        } else {
            0
        };
        let (characters, cost_micros) = if settled.charged {
            let characters = charge.characters;
            let cost = self
                .price
                .cost_micros(self.tier, characters, settled.audio_ms, gpu_ms);
            (characters, cost)
        } else {
            (0, 0)
        };
        let billed = settled.billed_characters.unwrap_or(0);
        let failed = settled
            .outcome
            .is_some_and(|o| !matches!(o, Outcome::Success | Outcome::ConcurrencyLimited));
        if let Ok(mut t) = self.totals.lock() {
            t.characters += characters;
            t.billed_characters += billed;
            t.audio_ms += settled.audio_ms;
            t.gpu_ms += gpu_ms;
            t.cost_micros = t.cost_micros.saturating_add(cost_micros);
            t.failed_attempts += u32::from(failed);
        }
        crate::metrics::usage(
            self.labels(),
            characters,
            settled.audio_ms,
            cost_micros,
            false,
        );
        let event = self.writer.as_ref().map(|_| UsageEvent::Settle {
            context: self.context.clone(),
            attempt: AttemptUsage {
                attempt: charge.attempt,
                key_id: settled.key_id.clone(),
                upstream_id: settled.upstream_id.clone(),
                characters,
                billed_characters: billed,
                audio_ms: settled.audio_ms,
                gpu_ms,
                cost_micros,
                outcome: settled
                    .outcome
                    .map_or("CUT_OFF", Outcome::wire_name)
                    .to_owned(),
            },
        });
        (characters, cost_micros, event)
    }

    /// A chunk of `text` served from the audio cache with `audio_ms` of audio: cached
    /// characters, priced at `[usage] cache_hit_factor` of the pool's price.
    pub fn cached(&self, text: &str, audio_ms: u64) {
        let characters = billable_characters(self.provider(), text);
        let full = self.price.cost_micros(self.tier, characters, audio_ms, 0);
        let cost = (full as f64 * self.cache_hit_factor).round() as i64;
        if let Ok(mut t) = self.totals.lock() {
            t.cached_characters += characters;
            t.audio_ms += audio_ms;
            t.cost_micros = t.cost_micros.saturating_add(cost.max(0));
            t.cached_cost_micros = t.cached_cost_micros.saturating_add(cost.max(0));
        }
        crate::metrics::usage(self.labels(), characters, audio_ms, cost.max(0), true);
    }

    /// Marks the request as having delivered all its audio (the Done record's `ok`).
    pub fn succeeded(&self) {
        self.ok.store(true, Ordering::Relaxed);
    }

    /// The totals so far.
    pub fn totals(&self) -> Totals {
        self.totals.lock().map(|t| t.clone()).unwrap_or_default()
    }

    /// The tier label of the meters.
    pub fn tier_label(&self) -> &'static str {
        self.tier.map_or("UNSPECIFIED", Tier::as_str)
    }

    /// What the meters count this request under.
    fn labels(&self) -> crate::metrics::UsageLabels<'_> {
        crate::metrics::UsageLabels {
            tier: self.tier_label(),
            pool: &self.context.pool,
            provider: self.context.provider.as_str(),
        }
    }
}

/// The request's end, written once its last reference is gone: every attempt, including
/// those that finished after their caller left, is settled by then.
impl Drop for Meter {
    fn drop(&mut self) {
        let t = self.totals();
        crate::metrics::usage_request(self.labels(), t.characters == 0 && t.cached_characters > 0);
        let Some(writer) = &self.writer else { return };
        writer.queue(&UsageEvent::Done {
            context: self.context.clone(),
            done: DoneUsage {
                cached_characters: t.cached_characters,
                audio_ms: t.audio_ms,
                cached_cost_micros: t.cached_cost_micros,
                failed_attempts: t.failed_attempts,
                ok: self.ok.load(Ordering::Relaxed),
            },
        });
    }
}

/// A new record id: a UUID v7 (time-ordered, unique per request).
pub fn record_id() -> String {
    uuid::Uuid::now_v7().to_string()
}

/// Milliseconds since the Unix epoch, now.
pub fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// Shared handle.
pub type SharedMeter = Arc<Meter>;
