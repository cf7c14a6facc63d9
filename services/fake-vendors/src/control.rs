//! The per-key bookkeeping shared by every fake vendor, applying the knobs of `knobs`
//! (latency, streamed delivery ([`Streaming`]), injected faults, random or scripted): the
//! concurrency cap, pausing, and the counters that measure the highest concurrency a key saw (the vendor-side
//! check of never overselling: docs/ARCHITECTURE.md, "Invariant 1").
//!
//! # Counting
//! A request is counted from the moment its key is known (after the auth header is read) until
//! its handler returns the response, including requests refused for being over the cap:
//! `peak_concurrency` is what the vendor *saw*, which is what an oversell test must bound.
//! `peak_admitted` counts only requests let through, so it never exceeds the cap. A *streamed*
//! answer (one whose body is sent in paced pieces, see [`Streaming`]) stays counted until its
//! body stream ends or is dropped: the handler hands its slot to the body.
//!
//! Like a real vendor, a fake keeps working on a request whose client went away: when a
//! handler is dropped during its latency (the client disconnected, cancelled or hit its
//! deadline), the request stays counted until its latency would have ended. That is what lets
//! a test see a lease released too early as `cap + 1` at the vendor (ARCHITECTURE invariant 1).
//! With streaming on, the wait before the first piece (`first_byte`) follows the same rule.
//! Once a stream has sent its first piece, a real vendor notices a closed connection on its
//! next write; a fake stops counting the request as soon as hyper drops the body, which hyper
//! does at once when the client closes the connection while the body waits for its next piece.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque},
    sync::{Arc, Mutex},
};

use serde::Serialize;
use tokio::sync::watch;

pub(crate) use crate::stream::Delivery;
use crate::{
    knobs::{Fault, FaultRates, Latency, Pick, Step, Streaming},
    lock::lock,
};

/// Counters of one key (the credential or appid presented).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct KeyStats {
    /// Requests seen (including refused ones).
    pub total_requests: u64,
    /// Requests being handled now (including ones being refused).
    pub in_flight: u64,
    /// Highest `in_flight` ever: what the vendor saw at once.
    pub peak_concurrency: u64,
    /// Admitted requests being handled now.
    pub admitted_in_flight: u64,
    /// Highest `admitted_in_flight` ever (never above the cap).
    pub peak_admitted: u64,
    /// Requests refused for being over the cap.
    pub rejected_over_cap: u64,
    /// Admitted requests answered with an injected fault.
    pub faults_injected: u64,
    /// Requests answered with audio.
    pub successes: u64,
    /// Characters of the text it produced audio for (Unicode scalars): an answer that began
    /// counts its whole text, even when it broke midway; a refusal or fault counts nothing.
    pub characters: u64,
}

/// Behaviour that can change while the fake runs.
#[derive(Clone, Debug)]
pub(crate) struct Settings {
    pub(crate) cap: u32,
    pub(crate) latency: Latency,
    pub(crate) faults: FaultRates,
    pub(crate) retry_after_secs: Option<u64>,
    pub(crate) valid_keys: Option<BTreeSet<String>>,
    pub(crate) tone_ms: u32,
    pub(crate) streaming: Option<Streaming>,
    pub(crate) markers: bool,
    pub(crate) per_char: std::time::Duration,
}

/// One request as the fake received it (credentials left out).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RecordedRequest {
    /// The key it was counted under.
    pub key: String,
    /// Path and query.
    pub uri: String,
    /// Non-secret headers (lowercase names).
    pub headers: BTreeMap<String, String>,
    /// The body as text (lossy UTF-8).
    pub body: String,
}

/// How many requests are kept for [`RecordedRequest`] inspection.
const RECORD_LIMIT: usize = 1000;

/// The state shared by a fake's handlers and its [`FakeVendor`](super::FakeVendor) handle.
pub(crate) struct Shared {
    pub(crate) settings: Mutex<Settings>,
    keys: Mutex<HashMap<String, KeyStats>>,
    voices: Mutex<HashMap<String, u64>>,
    script: Mutex<VecDeque<Step>>,
    recorded: Mutex<VecDeque<RecordedRequest>>,
    ids: Mutex<HashSet<String>>,
    pub(crate) paused: watch::Sender<bool>,
    pub(crate) total: watch::Sender<u64>,
    /// A self-hosted fake playing a server that is down.
    pub(crate) down: std::sync::atomic::AtomicBool,
    /// The processors [`Latency::Shared`] calls share.
    engine: crate::engine::Engine,
    /// Cloned voices, their scopes and the fake clock.
    pub(crate) clones: crate::cloning::Clones,
}

/// A counted request; uncounted when dropped, or — when dropped while the vendor is still
/// "working" on it (module doc) — once that work would have ended.
pub(crate) struct Slot {
    shared: Arc<Shared>,
    key: String,
    admitted: bool,
    /// When the work started by [`Shared::proceed`] ends (`None`: no work under way).
    busy_until: Mutex<Option<tokio::time::Instant>>,
    /// The voice and characters its audio is for ([`Slot::bill`]).
    billing: Mutex<Option<(String, u64)>>,
    /// Whether the vendor took the work on (no fault drawn): from then on it bills the text
    /// even when the caller goes away before the audio (a real vendor finishes and charges
    /// work it accepted).
    accepted: std::sync::atomic::AtomicBool,
}

impl Slot {
    /// Says what the request's audio would be for: `voice` and `text`, in Unicode scalars.
    /// Counted ([`Shared::synthesized`]) once its audio begins to go out, or when the caller
    /// goes away after the vendor accepted the work; never after a fault.
    pub(crate) fn bill(&self, voice: &str, text: &str) {
        *lock(&self.billing) = Some((voice.to_owned(), text.chars().count() as u64));
    }

    /// The request ends without audio (a fault, a server that is down): nothing is billed.
    pub(crate) fn unbill(&self) {
        lock(&self.billing).take();
    }

    fn uncount(shared: &Shared, key: &str, admitted: bool) {
        let mut keys = lock(&shared.keys);
        if let Some(k) = keys.get_mut(key) {
            k.in_flight = k.in_flight.saturating_sub(1);
            if admitted {
                k.admitted_in_flight = k.admitted_in_flight.saturating_sub(1);
            }
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        if self.accepted.load(std::sync::atomic::Ordering::SeqCst) {
            // The caller went away while accepted work was under way: it is billed still.
            Arc::clone(&self.shared).synthesized(self);
        }
        let busy_until = lock(&self.busy_until).take();
        let still_working = busy_until.filter(|t| *t > tokio::time::Instant::now());
        match (still_working, tokio::runtime::Handle::try_current()) {
            (Some(until), Ok(runtime)) => {
                let (shared, key, admitted) = (
                    Arc::clone(&self.shared),
                    std::mem::take(&mut self.key),
                    self.admitted,
                );
                runtime.spawn(async move {
                    tokio::time::sleep_until(until).await;
                    Slot::uncount(&shared, &key, admitted);
                });
            }
            _ => Slot::uncount(&self.shared, &self.key, self.admitted),
        }
    }
}

/// How an answer is shaped, which decides what [`Streaming`] does to it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    /// An answer the vendor streams (raw audio body, SSE, JSON lines): paced pieces.
    Stream,
    /// A whole JSON document: waits until the stream would have ended, then answers at once.
    Document,
}

/// The result of counting a request against its key's cap.
pub(crate) enum Admission {
    /// Within the cap.
    Admitted(Slot),
    /// Over the cap: answer with the vendor's rate-limit error.
    OverCap(Slot, Fault),
}

impl Shared {
    pub(crate) fn new(settings: Settings, clones: crate::cloning::Clones) -> Arc<Self> {
        Arc::new(Self {
            settings: Mutex::new(settings),
            keys: Mutex::new(HashMap::new()),
            voices: Mutex::new(HashMap::new()),
            script: Mutex::new(VecDeque::new()),
            recorded: Mutex::new(VecDeque::new()),
            ids: Mutex::new(HashSet::new()),
            paused: watch::channel(false).0,
            total: watch::channel(0).0,
            down: std::sync::atomic::AtomicBool::new(false),
            engine: crate::engine::Engine::default(),
            clones,
        })
    }

    /// True while the fake plays a server that is down ([`crate::FakeVendor::set_down`]).
    pub(crate) fn is_down(&self) -> bool {
        self.down.load(std::sync::atomic::Ordering::SeqCst)
    }

    pub(crate) fn settings(&self) -> Settings {
        lock(&self.settings).clone()
    }

    /// True when the key may be used (no allow-list, or listed).
    pub(crate) fn key_allowed(&self, key: &str) -> bool {
        lock(&self.settings)
            .valid_keys
            .as_ref()
            .is_none_or(|keys| keys.contains(key))
    }

    /// Counts a request of `key` and applies the cap.
    pub(crate) fn enter(self: &Arc<Self>, key: &str) -> Admission {
        let (cap, retry_after_secs) = {
            let s = lock(&self.settings);
            (s.cap, s.retry_after_secs)
        };
        let admitted = {
            let mut keys = lock(&self.keys);
            let k = keys.entry(key.to_owned()).or_default();
            k.total_requests += 1;
            k.in_flight += 1;
            k.peak_concurrency = k.peak_concurrency.max(k.in_flight);
            let admitted = cap == 0 || k.admitted_in_flight < u64::from(cap);
            if admitted {
                k.admitted_in_flight += 1;
                k.peak_admitted = k.peak_admitted.max(k.admitted_in_flight);
            } else {
                k.rejected_over_cap += 1;
            }
            admitted
        };
        self.total.send_modify(|t| *t += 1);
        let slot = Slot {
            shared: Arc::clone(self),
            key: key.to_owned(),
            admitted,
            busy_until: Mutex::new(None),
            billing: Mutex::new(None),
            accepted: std::sync::atomic::AtomicBool::new(false),
        };
        if admitted {
            Admission::Admitted(slot)
        } else {
            Admission::OverCap(slot, Fault::RateLimited { retry_after_secs })
        }
    }

    /// For an admitted request: the scripted or random fault (`Err`), or — after the wait
    /// ([`Latency`], or with [`Streaming`] on `first_byte` for [`Mode::Stream`] and
    /// `first_byte + rest` for [`Mode::Document`]) and any pause — how to deliver the answer.
    pub(crate) async fn proceed(&self, slot: &Slot, mode: Mode) -> Result<Delivery, Fault> {
        let settings = self.settings();
        let scripted = lock(&self.script).pop_front();
        let pick = match scripted {
            Some(Step::Fail(f)) => Some(Pick::Fault(f)),
            Some(Step::BreakAfterFirstPiece) => Some(Pick::Break),
            Some(Step::Serve) => None,
            None => settings.faults.draw(settings.retry_after_secs),
        };
        if pick.is_some() {
            self.bump(&slot.key, |k| k.faults_injected += 1);
        }
        let broken = match pick {
            Some(Pick::Fault(fault)) => {
                slot.unbill();
                return Err(fault);
            }
            Some(Pick::Break) => true,
            None => false,
        };
        slot.accepted
            .store(true, std::sync::atomic::Ordering::SeqCst);
        let (delay, pacing) = match (settings.streaming, mode) {
            (None, _) => match settings.latency {
                Latency::Shared { alone, cores } => {
                    self.engine.run(alone, cores).await;
                    (std::time::Duration::ZERO, None)
                }
                latency => (latency.sample(), None),
            },
            (Some(s), Mode::Stream) => (s.first_byte, Some(s)),
            (Some(s), Mode::Document) => (s.first_byte.saturating_add(s.rest), None),
        };
        if !delay.is_zero() {
            let until = tokio::time::Instant::now() + delay;
            *lock(&slot.busy_until) = Some(until);
            tokio::time::sleep_until(until).await;
            *lock(&slot.busy_until) = None;
        }
        let mut paused = self.paused.subscribe();
        // The sender lives as long as `self`, so this only ends when unpaused.
        let _ = paused.wait_for(|p| !*p).await;
        Ok(Delivery { pacing, broken })
    }

    /// Counters of one key now (zeros if never seen).
    pub(crate) fn key_stats(&self, key: &str) -> KeyStats {
        lock(&self.keys).get(key).copied().unwrap_or_default()
    }

    /// Counts the characters `slot` was billed for ([`Slot::bill`]), per key and per voice,
    /// once: its audio has begun to go out.
    pub(crate) fn synthesized(&self, slot: &Slot) {
        let Some((voice, characters)) = lock(&slot.billing).take() else {
            return;
        };
        self.bump(&slot.key, |k| k.characters += characters);
        *lock(&self.voices).entry(voice).or_default() += characters;
    }

    /// Characters produced per voice (the vendor's voice id; empty for self-hosted servers).
    pub(crate) fn voice_characters(&self) -> BTreeMap<String, u64> {
        lock(&self.voices)
            .iter()
            .map(|(k, v)| (k.clone(), *v))
            .collect()
    }

    /// Marks a request of `slot` as answered with audio.
    pub(crate) fn served(&self, slot: &Slot) {
        self.bump(&slot.key, |k| k.successes += 1);
    }

    fn bump(&self, key: &str, f: impl FnOnce(&mut KeyStats)) {
        if let Some(k) = lock(&self.keys).get_mut(key) {
            f(k);
        }
    }

    pub(crate) fn stats(&self) -> BTreeMap<String, KeyStats> {
        lock(&self.keys)
            .iter()
            .map(|(k, v)| (k.clone(), *v))
            .collect()
    }

    pub(crate) fn push_script(&self, steps: impl IntoIterator<Item = Step>) {
        lock(&self.script).extend(steps);
    }

    pub(crate) fn record(&self, request: RecordedRequest) {
        let mut recorded = lock(&self.recorded);
        if recorded.len() == RECORD_LIMIT {
            recorded.pop_front();
        }
        recorded.push_back(request);
    }

    /// True the first time `id` is seen (request ids that must be unique; bounded memory).
    pub(crate) fn first_use(&self, id: &str) -> bool {
        let mut ids = lock(&self.ids);
        if ids.len() >= 100_000 {
            ids.clear();
        }
        ids.insert(id.to_owned())
    }

    pub(crate) fn recorded(&self) -> Vec<RecordedRequest> {
        lock(&self.recorded).iter().cloned().collect()
    }
}
