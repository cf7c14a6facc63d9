//! Cloned voices in the fakes: who may use them, how many fit, how long they live.
//!
//! Every cloud vendor binds a cloned voice to a **scope** above the key: the ElevenLabs
//! workspace, the MiniMax account (GroupId), the Volcengine AppID, the DashScope account (per
//! region; a voice speaks only through its `target_model`). [`CloneConfig::scopes`] maps
//! each key to its scope (a key not listed is a scope of its own); keys of one scope share its
//! clones, its slots ([`CloneConfig::slots`]) and its clone rate limit
//! ([`CloneConfig::max_clones_per_minute`]). A clone is found by `(scope, voice id)`: MiniMax
//! lets the caller choose the id, so two accounts may hold the same one.
//!
//! Time is the fake's own [`Clock`]: the real clock plus an offset a test moves forward
//! (`POST /_fake/clock/advance`, [`crate::FakeVendor::advance_clock`]), so lifetimes measured
//! in days (MiniMax's 7 days, a Volcengine training delay) are tested without waiting.
//!
//! Each flow lives in its vendor's module ([`dashscope`], [`elevenlabs`], [`minimax`],
//! [`volcengine`]); the control and stats endpoints in [`control`]. Every clone call is
//! counted per scope and per kind ([`CloneCounts`]).

pub(crate) mod control;
pub(crate) mod dashscope;
pub(crate) mod elevenlabs;
pub(crate) mod minimax;
pub(crate) mod volcengine;

use std::{
    collections::{BTreeMap, VecDeque},
    sync::Mutex,
    time::Duration,
};

use serde::Serialize;

use crate::{VendorKind, lock::lock};

/// Seconds in a day.
const DAY_SECS: u64 = 86_400;

/// How the fake's vendor treats cloned voices.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CloneConfig {
    /// The scope of each key (ElevenLabs workspace, MiniMax account, Volcengine AppID); a key
    /// not listed is a scope of its own, named by the key.
    pub scopes: BTreeMap<String, String>,
    /// Clones a scope may hold at once (default 10); Volcengine: slots bought per AppID.
    pub slots: u32,
    /// Slots of particular scopes, overriding [`CloneConfig::slots`].
    pub slots_per_scope: BTreeMap<String, u32>,
    /// Clone creations a scope may make per minute of the fake clock (`None`: no limit;
    /// MiniMax defaults to 60).
    pub max_clones_per_minute: Option<u32>,
    /// MiniMax: a clone not used by a synthesis within this time of its creation expires
    /// (default 7 days); DashScope: a voice unused this long since its last use (or creation)
    /// goes offline (default a year).
    pub unused_lifetime: Duration,
    /// Volcengine, DashScope: time on the fake clock from an upload to `Success` (default 60 s).
    pub training: Duration,
    /// Volcengine: trainings allowed per speaker id (default 10).
    pub trainings_per_slot: u32,
}

impl CloneConfig {
    /// The defaults of `vendor`: 10 slots, no rate limit (MiniMax: 60 clones a minute), a
    /// 7-day unused lifetime, 60 s of training, 10 trainings per slot; DashScope: 1,000 slots
    /// and a year unused.
    pub fn for_vendor(vendor: VendorKind) -> Self {
        let dashscope = vendor == VendorKind::DashScope;
        Self {
            scopes: BTreeMap::new(),
            slots: if dashscope { 1_000 } else { 10 },
            slots_per_scope: BTreeMap::new(),
            max_clones_per_minute: (vendor == VendorKind::MiniMax).then_some(60),
            unused_lifetime: Duration::from_secs(if dashscope { 365 } else { 7 } * DAY_SECS),
            training: Duration::from_secs(60),
            trainings_per_slot: 10,
        }
    }

    /// Puts `key` in `scope`.
    pub fn scope(mut self, key: impl Into<String>, scope: impl Into<String>) -> Self {
        self.scopes.insert(key.into(), scope.into());
        self
    }

    /// Sets the slots of every scope.
    pub fn slots(mut self, slots: u32) -> Self {
        self.slots = slots;
        self
    }

    /// Sets the slots of one scope.
    pub fn scope_slots(mut self, scope: impl Into<String>, slots: u32) -> Self {
        self.slots_per_scope.insert(scope.into(), slots);
        self
    }

    /// Sets the clone rate limit per scope (`None`: none).
    pub fn max_clones_per_minute(mut self, limit: Option<u32>) -> Self {
        self.max_clones_per_minute = limit;
        self
    }

    /// Sets the Volcengine training time (on the fake clock).
    pub fn training(mut self, training: Duration) -> Self {
        self.training = training;
        self
    }

    fn slots_of(&self, scope: &str) -> u32 {
        self.slots_per_scope
            .get(scope)
            .copied()
            .unwrap_or(self.slots)
    }
}

/// Where a cloned voice stands (Volcengine's words; the others use a subset).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
pub enum CloneState {
    /// Volcengine: uploaded, training on the fake clock.
    Training,
    /// Ready for synthesis.
    Success,
    /// Volcengine: used for synthesis at least once (MiniMax: kept for good).
    Active,
    /// Training failed (set by a test).
    Failed,
    /// Gone by the vendor's lifetime rule: unusable, no slot held.
    Expired,
    /// Volcengine: the slot was taken back: unusable, no slot held.
    Reclaimed,
}

impl CloneState {
    /// True when synthesis may use the voice.
    pub fn usable(self) -> bool {
        matches!(self, CloneState::Success | CloneState::Active)
    }

    /// True when the voice holds one of its scope's slots.
    fn holds_slot(self) -> bool {
        !matches!(self, CloneState::Expired | CloneState::Reclaimed)
    }
}

/// One cloned voice as the fake holds it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ClonedVoice {
    /// The scope that holds it.
    pub scope: String,
    /// The vendor's voice id (MiniMax: chosen by the caller; Volcengine: the speaker id).
    pub voice_id: String,
    /// Its name, where the vendor takes one.
    pub name: String,
    /// Where it stands.
    pub state: CloneState,
    /// Fake-clock seconds since the epoch at creation (or the last Volcengine training).
    pub created_at: u64,
    /// Fake-clock seconds of its last synthesis (`None`: never used).
    pub last_used_at: Option<u64>,
    /// Volcengine: trainings made on this speaker id.
    pub trainings: u32,
}

/// Clone calls of one scope, by kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct CloneCounts {
    /// Sample uploads (MiniMax `/v1/files/upload`).
    pub upload: u64,
    /// Clone creations tried (ElevenLabs `/v1/voices/add`, MiniMax `/v1/voice_clone`,
    /// Volcengine `mega_tts/audio/upload`), refused ones included.
    pub create: u64,
    /// Creations refused (slots full, rate limit, retrain cap, bad request).
    pub refused: u64,
    /// List calls.
    pub list: u64,
    /// Status polls (Volcengine `mega_tts/status`).
    pub status: u64,
    /// Deletions tried.
    pub delete: u64,
    /// Synthesis requests refused because the voice is not a usable clone of the scope.
    pub not_found: u64,
}

/// Why a creation is refused.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// The scope holds `slots` clones already.
    SlotsFull { slots: u32 },
    /// The scope made its clones of this minute.
    RateLimited,
    /// Volcengine: the speaker id was trained its allowed times.
    RetrainsExhausted { allowed: u32 },
}

/// The fake's clock: real time plus an offset moved by tests.
#[derive(Debug, Default)]
pub(crate) struct Clock {
    offset: Mutex<Duration>,
}

impl Clock {
    /// Seconds since the epoch, fake time.
    pub(crate) fn now(&self) -> u64 {
        let real = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        (real + *lock(&self.offset)).as_secs()
    }

    pub(crate) fn advance(&self, by: Duration) -> u64 {
        *lock(&self.offset) += by;
        self.now()
    }
}

/// The clones of every scope, their counters and the clock.
pub(crate) struct Clones {
    vendor: VendorKind,
    pub(crate) config: CloneConfig,
    pub(crate) clock: Clock,
    voices: Mutex<BTreeMap<(String, String), ClonedVoice>>,
    /// Every voice id ever created, deleted ones included.
    issued: Mutex<std::collections::BTreeSet<String>>,
    counts: Mutex<BTreeMap<String, CloneCounts>>,
    /// Uploaded samples: id → (scope, purpose).
    files: Mutex<BTreeMap<u64, (String, String)>>,
    /// Fake-clock seconds of each scope's recent creations (the rate-limit window).
    recent: Mutex<BTreeMap<String, VecDeque<u64>>>,
}

impl Clones {
    pub(crate) fn new(vendor: VendorKind, config: CloneConfig) -> Self {
        Self {
            vendor,
            config,
            clock: Clock::default(),
            voices: Mutex::new(BTreeMap::new()),
            issued: Mutex::new(std::collections::BTreeSet::new()),
            counts: Mutex::new(BTreeMap::new()),
            files: Mutex::new(BTreeMap::new()),
            recent: Mutex::new(BTreeMap::new()),
        }
    }

    /// The scope `key` belongs to.
    pub(crate) fn scope_of(&self, key: &str) -> String {
        self.config
            .scopes
            .get(key)
            .cloned()
            .unwrap_or_else(|| key.to_owned())
    }

    /// Counts one call of `scope`.
    pub(crate) fn count(&self, scope: &str, f: impl FnOnce(&mut CloneCounts)) {
        f(lock(&self.counts).entry(scope.to_owned()).or_default());
    }

    pub(crate) fn counts(&self) -> BTreeMap<String, CloneCounts> {
        lock(&self.counts).clone()
    }

    /// Applies the lifetime rules at fake time `now`: a Volcengine or DashScope training ends,
    /// an unused MiniMax or DashScope clone expires.
    fn age(&self, voice: &mut ClonedVoice, now: u64) {
        if voice.state == CloneState::Training
            && now >= voice.created_at + self.config.training.as_secs()
        {
            voice.state = CloneState::Success;
        }
        // MiniMax drops a clone never used; DashScope one unused since its last use.
        let since = match self.vendor {
            VendorKind::MiniMax if voice.last_used_at.is_none() => Some(voice.created_at),
            VendorKind::DashScope => Some(voice.last_used_at.unwrap_or(voice.created_at)),
            _ => None,
        };
        let lifetime = self.config.unused_lifetime.as_secs();
        if voice.state.usable() && since.is_some_and(|t| now >= t + lifetime) {
            voice.state = CloneState::Expired;
        }
    }

    /// Every clone now, aged.
    pub(crate) fn voices(&self) -> Vec<ClonedVoice> {
        let now = self.clock.now();
        let mut voices = lock(&self.voices);
        voices
            .values_mut()
            .map(|v| {
                self.age(v, now);
                v.clone()
            })
            .collect()
    }

    /// The clones of `scope` now, aged.
    pub(crate) fn voices_of(&self, scope: &str) -> Vec<ClonedVoice> {
        self.voices()
            .into_iter()
            .filter(|v| v.scope == scope)
            .collect()
    }

    /// One clone of `scope`, aged.
    pub(crate) fn get(&self, scope: &str, voice_id: &str) -> Option<ClonedVoice> {
        let now = self.clock.now();
        let mut voices = lock(&self.voices);
        let v = voices.get_mut(&(scope.to_owned(), voice_id.to_owned()))?;
        self.age(v, now);
        Some(v.clone())
    }

    /// True when `voice_id` is (or was) a clone of any scope: synthesis with it from a key of
    /// a scope where it is not usable gets the vendor's not-found error. Other ids are the
    /// vendor's own voices, served as before.
    fn is_clone_id(&self, voice_id: &str) -> bool {
        lock(&self.issued).contains(voice_id)
    }

    /// Keeps an uploaded sample of `scope`; its id.
    pub(crate) fn add_file(&self, scope: &str, purpose: &str) -> u64 {
        let mut files = lock(&self.files);
        let id = 100_000_000 + files.len() as u64;
        files.insert(id, (scope.to_owned(), purpose.to_owned()));
        id
    }

    /// True when `id` is a sample `scope` uploaded for `purpose`.
    pub(crate) fn file_of(&self, scope: &str, id: u64, purpose: &str) -> bool {
        lock(&self.files)
            .get(&id)
            .is_some_and(|(s, p)| s == scope && p == purpose)
    }

    /// Synthesis from `key` with `voice_id`: `false` (counted as `not_found`) when the id is a
    /// clone the key's scope cannot use; a usable clone is marked used. Ids that never were
    /// clones are the vendor's own voices: always `true`.
    pub(crate) fn admits(&self, key: &str, voice_id: &str) -> bool {
        if !self.is_clone_id(voice_id) {
            return true;
        }
        let scope = self.scope_of(key);
        let usable = self.use_voice(&scope, voice_id);
        if !usable {
            self.count(&scope, |c| c.not_found += 1);
        }
        usable
    }

    /// Synthesis of `scope` with `voice_id`: `true` (and the voice is marked used) when it is a
    /// usable clone of that scope.
    fn use_voice(&self, scope: &str, voice_id: &str) -> bool {
        let now = self.clock.now();
        let mut voices = lock(&self.voices);
        let Some(v) = voices.get_mut(&(scope.to_owned(), voice_id.to_owned())) else {
            return false;
        };
        self.age(v, now);
        if !v.state.usable() {
            return false;
        }
        v.last_used_at = Some(now);
        v.state = CloneState::Active;
        true
    }

    /// Creates (or, for Volcengine, retrains) `voice_id` in `scope` in `state`, after the
    /// slot, rate and retrain checks.
    pub(crate) fn create(
        &self,
        scope: &str,
        voice_id: &str,
        name: &str,
        state: CloneState,
    ) -> Result<ClonedVoice, Refusal> {
        let now = self.clock.now();
        let mut voices = lock(&self.voices);
        let key = (scope.to_owned(), voice_id.to_owned());
        let existing = voices.get_mut(&key).map(|v| {
            self.age(v, now);
            v.clone()
        });
        let trainings = match &existing {
            Some(v) if v.state.holds_slot() => {
                if v.trainings >= self.config.trainings_per_slot {
                    return Err(Refusal::RetrainsExhausted {
                        allowed: self.config.trainings_per_slot,
                    });
                }
                v.trainings
            }
            _ => {
                let held = voices
                    .values()
                    .filter(|v| v.scope == scope && v.state.holds_slot())
                    .count();
                let slots = self.config.slots_of(scope);
                if held >= slots as usize {
                    return Err(Refusal::SlotsFull { slots });
                }
                0
            }
        };
        if let Some(limit) = self.config.max_clones_per_minute {
            let mut recent = lock(&self.recent);
            let window = recent.entry(scope.to_owned()).or_default();
            window.retain(|t| t + 60 > now);
            if window.len() >= limit as usize {
                return Err(Refusal::RateLimited);
            }
            window.push_back(now);
        }
        let voice = ClonedVoice {
            scope: scope.to_owned(),
            voice_id: voice_id.to_owned(),
            name: name.to_owned(),
            state,
            created_at: now,
            last_used_at: None,
            trainings: trainings + 1,
        };
        voices.insert(key, voice.clone());
        lock(&self.issued).insert(voice_id.to_owned());
        Ok(voice)
    }

    /// Removes a clone of `scope`; `false` when it has none by that id.
    pub(crate) fn delete(&self, scope: &str, voice_id: &str) -> bool {
        lock(&self.voices)
            .remove(&(scope.to_owned(), voice_id.to_owned()))
            .is_some()
    }

    /// Sets a clone's state (a test playing the vendor); `false` when there is no such clone.
    pub(crate) fn set_state(&self, scope: &str, voice_id: &str, state: CloneState) -> bool {
        match lock(&self.voices).get_mut(&(scope.to_owned(), voice_id.to_owned())) {
            Some(v) => {
                v.state = state;
                true
            }
            None => false,
        }
    }
}
