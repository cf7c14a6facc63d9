//! The audio cache: each text chunk's vendor audio stored once, by content, in the blob store,
//! and served to every later request that would produce the same audio.
//!
//! - [`key`]: what identifies a chunk's audio (snapshot digest, chunk text, format, sample
//!   rate, provider and model, `cache_version`) and where its entry lives.
//! - [`entry`]: an entry's bytes: a header sealed with the fleet's key ([`seal`]) that gives
//!   the audio's SHA-256: a truncated, altered or forged entry is never served (a damaged one
//!   is deleted, one that fails its seal is a miss the next fill replaces).
//! - [`bound`]: a local store's size bound under concurrent fills.
//! - [`Cache`] (here): reads, writes, TTL, the local size bound, purges and counters.
//! - `crate::job::cached`: the call path (hits without a lease, single-flight fills).
//!
//! **Storage.** Entries go through `object_store` to the deployment's blob store
//! (`--blob-store`, `voxpool_runtime::blob`), under `cache/`. An entry is one whole-object put,
//! visible only once complete (the store's rename or PUT), so a reader never sees half an entry
//! and a crash mid-write leaves nothing readable. Replicas pointed at one store share it.
//!
//! **Expiry.** An entry serves for its pool's `cache.ttl` after it was written (the store's
//! `last_modified`); an older one is a miss and is filled anew (the new put replaces it). On a
//! local store the cache also keeps under `synthesis.cache_max_bytes` ([`bound`]): once a write
//! takes the running total past it, a sweep lists the entries and deletes the oldest-written
//! until at most 90% of the bound remains, again while writes keep asking, so at rest the store
//! holds at most the bound. Cloud stores are bounded by the TTL and the bucket's lifecycle
//! rules.
//!
//! **Never cached**: requests with `cache_policy = BYPASS`, pools whose config says
//! `cache = { enabled = false }`, every request when the server runs with `--cache off`, and
//! any chunk whose call did not end in whole, valid audio.

mod bound;
pub mod entry;
pub mod key;
pub mod seal;

use std::{
    collections::BTreeMap,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::Duration,
};

use futures::{StreamExt as _, TryStreamExt as _};
use object_store::{ObjectStore, ObjectStoreExt as _, PutPayload, path::Path};

use crate::metrics;
use bound::Bound;
use entry::Refused;
pub use entry::{Entry, Header};
pub use key::EntryKey;
pub use seal::Seal;

/// How a request uses the cache (`SynthesizeRequest.cache_policy`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Policy {
    /// Serve what the cache holds; fill what it lacks.
    #[default]
    Use,
    /// Synthesize anew and replace the entries.
    Refresh,
    /// Neither read nor write.
    Bypass,
}

/// What one replica counted for one pool since it started (`GetCacheStats`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PoolCounters {
    /// Chunks served from the cache.
    pub hits: u64,
    /// Chunks looked up and not found.
    pub misses: u64,
    /// Entries written.
    pub fills: u64,
    /// Chunks served from another request's fill they waited for.
    pub coalesced: u64,
    /// Text characters served from the cache.
    pub characters_saved: u64,
    /// Bytes written.
    pub bytes_stored: u64,
}

/// What the store holds under `cache/` (a listing).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Holdings {
    /// Entries.
    pub entries: u64,
    /// Their size, bytes.
    pub bytes: u64,
}

/// A blob-store failure, with the operation (never a credential: `object_store` errors name
/// paths and HTTP statuses).
#[derive(Clone, Debug, thiserror::Error)]
#[error("audio cache at {location}: {what}: {message}")]
pub struct CacheError {
    /// The store's URL without credentials.
    pub location: String,
    /// What was being done.
    pub what: &'static str,
    /// The store's message.
    pub message: String,
}

/// The cache of one replica, over the shared blob store (module doc).
pub struct Cache {
    store: Arc<dyn ObjectStore>,
    location: String,
    /// `cache_version` of the config: part of every key.
    pub version: u32,
    /// Fill-lock TTL asked of the scheduler (renewed every third of it).
    pub fill_ttl: Duration,
    /// The size bound and its accounting, for a local store.
    bound: Option<Bound>,
    /// The key entries are sealed with.
    seal: Seal,
    /// An entry failing its seal was logged (at warn, once; later ones at debug).
    unsealed_logged: AtomicBool,
    evictions: AtomicU64,
    counters: Mutex<BTreeMap<String, PoolCounters>>,
}

impl std::fmt::Debug for Cache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cache")
            .field("location", &self.location)
            .field("version", &self.version)
            .field("max_bytes", &self.max_bytes())
            .field("seal", &self.seal)
            .finish_non_exhaustive()
    }
}

impl Cache {
    /// The cache under `cache/` of `blobs`. A local store gets `max_bytes` as its bound.
    /// Entries are sealed with a key of this process alone until [`Self::with_seal`] gives
    /// the fleet's.
    pub fn new(
        blobs: &voxpool_runtime::blob::BlobStore,
        version: u32,
        max_bytes: u64,
        fill_ttl: Duration,
    ) -> Self {
        Self {
            store: blobs.folder("cache"),
            location: format!("{}/cache", blobs.location().trim_end_matches('/')),
            version,
            fill_ttl,
            bound: blobs.local_root().map(|_| Bound::new(max_bytes)),
            seal: Seal::process(),
            unsealed_logged: AtomicBool::new(false),
            evictions: AtomicU64::new(0),
            counters: Mutex::new(BTreeMap::new()),
        }
    }

    /// Seals and checks entries with `seal` (the fleet's key, [`Seal::from_config`]).
    #[must_use]
    pub fn with_seal(mut self, seal: Seal) -> Self {
        self.seal = seal;
        self
    }

    /// The seal entries are written with.
    pub fn seal(&self) -> &Seal {
        &self.seal
    }

    /// The store's URL + `/cache`, without credentials.
    pub fn location(&self) -> &str {
        &self.location
    }

    /// The size bound (local store), bytes.
    pub fn max_bytes(&self) -> Option<u64> {
        self.bound.as_ref().map(|b| b.max)
    }

    fn error(&self, what: &'static str, e: &object_store::Error) -> CacheError {
        CacheError {
            location: self.location.clone(),
            what,
            message: e.to_string(),
        }
    }

    /// Reads the entry at `key` if it is whole, intact, sealed by this fleet and younger than
    /// `ttl`. A corrupt entry is deleted; an expired one, one failing its seal and one of the
    /// unsealed format are left to be replaced: all are `Ok(None)`, a miss.
    /// Errors: the store failed (the caller synthesizes as if it missed).
    pub async fn get(&self, key: &EntryKey, ttl: Duration) -> Result<Option<Entry>, CacheError> {
        let got = match self.store.get(&key.path).await {
            Ok(got) => got,
            Err(object_store::Error::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(self.error("read", &e)),
        };
        let written = got.meta.last_modified;
        let age = chrono::Utc::now()
            .signed_duration_since(written)
            .to_std()
            .unwrap_or_default();
        if age >= ttl {
            return Ok(None);
        }
        let object = got.bytes().await.map_err(|e| self.error("read", &e))?;
        match entry::decode(object, &key.hex, &self.seal) {
            Ok(entry) => Ok(Some(entry)),
            Err(Refused::Old) => Ok(None),
            Err(Refused::Unsealed) => {
                if self.unsealed_logged.swap(true, Ordering::Relaxed) {
                    tracing::debug!(entry = %key.hex, "audio cache entry fails its seal: not served");
                } else {
                    tracing::warn!(entry = %key.hex, location = %self.location, "audio cache entry fails its seal (written without this fleet's cache secret, or altered): not served, to be filled again; check that every replica on this store has the same synthesis.cache_secret (or scheduler.lease_secret) and who else writes the store; further ones are logged at debug level only");
                }
                Ok(None)
            }
            Err(corrupt @ Refused::Corrupt(_)) => {
                tracing::warn!(entry = %key.hex, error = %corrupt, "audio cache entry is corrupt: deleted, to be filled again");
                let _ = self.store.delete(&key.path).await;
                Ok(None)
            }
        }
    }

    /// Stores `audio` at `key` in one whole-object put, then keeps a local store under its
    /// bound (module doc). Errors: the store failed (the request it served is unaffected).
    pub async fn put(
        &self,
        key: &EntryKey,
        mut header: Header,
        audio: &[u8],
    ) -> Result<(), CacheError> {
        header.key.clone_from(&key.hex);
        let pool = header.pool.clone();
        let object = entry::encode(header, audio, &self.seal);
        let size = object.len() as u64;
        self.store
            .put(&key.path, PutPayload::from(object))
            .await
            .map_err(|e| self.error("write", &e))?;
        self.count(&pool, |c| {
            c.fills += 1;
            c.bytes_stored += size;
        });
        metrics::cache_stored(&pool, size);
        if let Some(bound) = &self.bound
            && bound.wrote(size)
        {
            self.keep_bound(bound).await?;
        }
        Ok(())
    }

    /// Runs sweeps until no write asks for one ([`bound`]); returns at once when another
    /// caller is sweeping (it runs the pass this one asked for).
    async fn keep_bound(&self, bound: &Bound) -> Result<(), CacheError> {
        loop {
            bound.request();
            let Ok(one) = bound.sweeping.try_lock() else {
                return Ok(());
            };
            while bound.take_pending() {
                self.sweep(bound).await?;
            }
            drop(one);
            // A request that came after the last pass and found the lock still held.
            if !bound.is_pending() {
                return Ok(());
            }
        }
    }

    /// One pass: lists the local store and, when it holds more than the bound, deletes the
    /// oldest-written entries until at most 90% of it remains; then settles the estimate.
    async fn sweep(&self, bound: &Bound) -> Result<(), CacheError> {
        let mark = bound.mark();
        let mut objects: Vec<_> = self
            .store
            .list(None)
            .try_collect()
            .await
            .map_err(|e| self.error("list", &e))?;
        let mut total: u64 = objects.iter().map(|o| o.size).sum();
        let target = if total > bound.max {
            bound.max / 10 * 9
        } else {
            total
        };
        objects.sort_by_key(|o| o.last_modified);
        let mut evicted = 0u64;
        for object in &objects {
            if total <= target {
                break;
            }
            match self.store.delete(&object.location).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => {
                    total = total.saturating_sub(object.size);
                    evicted += 1;
                }
                Err(e) => {
                    bound.settle(mark, total);
                    return Err(self.error("evict", &e));
                }
            }
        }
        bound.settle(mark, total);
        if evicted > 0 {
            self.evictions.fetch_add(evicted, Ordering::Relaxed);
            metrics::cache_evictions(evicted);
            tracing::info!(
                evicted,
                bytes = total,
                bound = bound.max,
                "audio cache kept under its size bound"
            );
        }
        Ok(())
    }

    /// Starts the local store's running total from a listing (at start-up), and sweeps if
    /// the store is already over its bound. Until a listing succeeds every write sweeps.
    pub async fn measure(&self) -> Result<(), CacheError> {
        match &self.bound {
            Some(bound) => self.keep_bound(bound).await,
            None => Ok(()),
        }
    }

    /// Checks the store answers a listing (at start-up: a cloud store without credentials
    /// or bucket is reported at once rather than by the first request's warning).
    pub async fn probe(&self) -> Result<(), CacheError> {
        match self.store.list(None).next().await {
            None | Some(Ok(_)) => Ok(()),
            Some(Err(e)) => Err(self.error("list", &e)),
        }
    }

    /// Entries and bytes under `cache/` now.
    pub async fn holdings(&self) -> Result<Holdings, CacheError> {
        let mut held = Holdings::default();
        let mut list = self.store.list(None);
        while let Some(object) = list.next().await {
            let object = object.map_err(|e| self.error("list", &e))?;
            held.entries += 1;
            held.bytes += object.size;
        }
        Ok(held)
    }

    /// Deletes every entry of `pack_id` (all its snapshots), or only those of
    /// `snapshot_digest` (`sha256:<hex>`; of any pack when `pack_id` is empty). Answers the
    /// entries and bytes deleted.
    pub async fn purge(
        &self,
        pack_id: &str,
        snapshot_digest: &str,
    ) -> Result<Holdings, CacheError> {
        let digest = key::digest_hex(snapshot_digest);
        let prefix = match (pack_id.is_empty(), digest.is_empty()) {
            (false, false) => Some(Path::from_iter([pack_id, digest])),
            (false, true) => Some(Path::from_iter([pack_id])),
            (true, _) => None,
        };
        let objects: Vec<_> = self
            .store
            .list(prefix.as_ref())
            .try_collect()
            .await
            .map_err(|e| self.error("list", &e))?;
        let mut gone = Holdings::default();
        for object in objects {
            // Without a pack, every pack's folder is searched for the digest's.
            if prefix.is_none()
                && object.location.parts().nth(1).as_ref().map(AsRef::as_ref) != Some(digest)
            {
                continue;
            }
            match self.store.delete(&object.location).await {
                Ok(()) => {
                    gone.entries += 1;
                    gone.bytes += object.size;
                }
                Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(self.error("purge", &e)),
            }
        }
        if let Some(bound) = &self.bound {
            bound.deleted(gone.bytes);
        }
        Ok(gone)
    }

    /// Counts a hit of `characters` text characters (`coalesced`: after waiting for another
    /// request's fill).
    pub fn hit(&self, pool: &str, characters: u64, coalesced: bool) {
        self.count(pool, |c| {
            c.hits += 1;
            c.characters_saved += characters;
            c.coalesced += u64::from(coalesced);
        });
        metrics::cache_hit(pool, characters, coalesced);
    }

    /// Counts a miss.
    pub fn miss(&self, pool: &str) {
        self.count(pool, |c| c.misses += 1);
        metrics::cache_miss(pool);
    }

    fn count(&self, pool: &str, f: impl FnOnce(&mut PoolCounters)) {
        if let Ok(mut counters) = self.counters.lock() {
            f(counters.entry(pool.to_owned()).or_default());
        }
    }

    /// This replica's counters by pool, and its evictions.
    pub fn counters(&self) -> (BTreeMap<String, PoolCounters>, u64) {
        let counters = self.counters.lock().map(|c| c.clone()).unwrap_or_default();
        (counters, self.evictions.load(Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests;
