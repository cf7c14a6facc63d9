//! Routing follows clones: a managed clone pack (kind CLONED with reference clips, no
//! `voiceId`, no `upstreamIds`) is spoken only on keys of the clone scopes where its clone is
//! READY, with that scope's vendor voice id (invariant 16 of docs/ARCHITECTURE.md).
//!
//! Before any lease, [`resolve`] reads the pack's clones (`crate::catalog::clones`, cached per
//! replica for a few seconds) and keeps the READY scopes this pool serves: a scope is an
//! upstream, or one key where the provider's clones live per key (Volcengine). The Acquire is
//! restricted to them ([`CloneRoute::upstream_ids`], [`CloneRoute::exclude_keys`]), and once a
//! key is leased, [`CloneRoute::utterance_for`] gives the call the vendor id of the key's scope
//! (the snapshot's frozen identity, its clips and recipe, is unchanged; no vendor id is
//! frozen). A key outside the READY scopes is never called.
//!
//! No READY scope: the catalog is asked to clone the pack (once: the pack's lock on this
//! replica, the catalog's primary key across replicas) and the request is answered
//! UNAVAILABLE `CLONE_PENDING` naming where; a FAILED clone is FAILED_PRECONDITION
//! `CLONE_FAILED` naming the scope and the vendor's error. A vendor that answers it does not
//! hold the clone ([`clone_gone`]) is reported to the scheduler as CLIENT_ERROR (the key is not
//! cooled and not failed over), the clone marked gone and cloned again there ([`gone`]). Every
//! READY scope full or down ([`refused`]): one more scope is asked for, within the pack's
//! `max_scopes`, and the refusal says where a clone is being made.

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use voxpool_domain::{
    provider::Provider,
    snapshot::{Kind, Snapshot},
};

use super::{Core, Job};
use crate::{
    adapters::Utterance,
    catalog::clones::{Clone, CloneState},
    error::SynthesisError,
    lease::{Lease, LeaseGuard},
    pools::Pool,
    record::AttemptRecord,
};

/// How long a caller is told to wait for a clone being made.
pub const PENDING_RETRY: Duration = Duration::from_secs(2);
/// Longest a request waits for the catalog's clone answers.
const CATALOG_TIMEOUT: Duration = Duration::from_secs(3);

/// Whether `voice` is a managed clone: its vendor ids live in the catalog, per scope.
pub fn is_managed(voice: &Snapshot) -> bool {
    voice.kind == Kind::Cloned && voice.voice_id.is_empty() && voice.upstream_ids.is_empty()
}

/// The clone scope of `key_id` (`upstream/key`) in a pool of `provider`.
pub fn scope_of(provider: Provider, key_id: &str) -> &str {
    if voxpool_config::clones_per_key(provider) {
        key_id
    } else {
        key_id
            .split_once('/')
            .map_or(key_id, |(upstream, _)| upstream)
    }
}

/// Where a managed clone pack may be spoken: its READY scopes and their vendor ids.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CloneRoute {
    /// The pack.
    pub pack_id: String,
    /// The pool's provider (which decides a key's scope).
    pub provider: Provider,
    /// READY scope → the vendor's voice id there.
    pub ready: BTreeMap<String, String>,
    /// The upstreams holding a READY scope: the Acquire's `upstream_ids`.
    pub upstream_ids: Vec<String>,
    /// Keys of those upstreams outside every READY scope (scopes per key): excluded.
    pub exclude_keys: Vec<String>,
}

impl CloneRoute {
    /// The vendor id for a call on `key_id`, `None` when the key is outside every READY scope.
    pub fn voice_id_for(&self, key_id: &str) -> Option<(&str, &str)> {
        let scope = scope_of(self.provider, key_id);
        self.ready
            .get_key_value(scope)
            .map(|(s, v)| (s.as_str(), v.as_str()))
    }

    /// `utterance` as spoken on `key_id`: the voice carries the scope's vendor id (the digest,
    /// and so the audio cache identity, stays the frozen snapshot's). `None`: not this key.
    pub fn utterance_for(&self, utterance: &Utterance, key_id: &str) -> Option<Utterance> {
        let (_, voice_id) = self.voice_id_for(key_id)?;
        let mut voice = (*utterance.voice).clone();
        voice.voice_id = voice_id.to_owned();
        Some(Utterance {
            voice: Arc::new(voice),
            ..utterance.clone()
        })
    }
}

/// The route of `pack_id` over `pool` from its `clones`, or why there is none.
pub fn route_of(
    pack_id: &str,
    pool: &Pool,
    clones: &[Clone],
) -> Result<CloneRoute, SynthesisError> {
    let served = |scope: &str| {
        pool.keys
            .keys()
            .any(|k| scope_of(pool.provider, k) == scope)
    };
    let ready: BTreeMap<String, String> = clones
        .iter()
        .filter(|c| c.state == CloneState::Ready && !c.vendor_voice_id.is_empty())
        .filter(|c| served(&c.scope))
        .map(|c| (c.scope.clone(), c.vendor_voice_id.clone()))
        .collect();
    if ready.is_empty() {
        return Err(no_ready(pack_id, clones));
    }
    let mut upstream_ids: Vec<String> = Vec::new();
    for scope in ready.keys() {
        let upstream = scope.split_once('/').map_or(scope.as_str(), |(u, _)| u);
        if !upstream_ids.iter().any(|u| u == upstream) {
            upstream_ids.push(upstream.to_owned());
        }
    }
    let exclude_keys = pool
        .keys
        .keys()
        .filter(|k| {
            let upstream = k.split_once('/').map_or(k.as_str(), |(u, _)| u);
            upstream_ids.iter().any(|u| u == upstream)
                && !ready.contains_key(scope_of(pool.provider, k))
        })
        .cloned()
        .collect();
    Ok(CloneRoute {
        pack_id: pack_id.to_owned(),
        provider: pool.provider,
        ready,
        upstream_ids,
        exclude_keys,
    })
}

/// Why a pack has no READY clone to speak with.
fn no_ready(pack_id: &str, clones: &[Clone]) -> SynthesisError {
    let making: Vec<String> = clones
        .iter()
        .filter(|c| c.state.in_progress())
        .map(|c| c.scope.clone())
        .collect();
    if !making.is_empty() {
        return pending(pack_id, making);
    }
    if let Some(failed) = clones.iter().find(|c| c.state == CloneState::Failed) {
        return SynthesisError::CloneFailed {
            pack_id: pack_id.to_owned(),
            scope: failed.scope.clone(),
            message: format!(
                "its clone in scope {:?} failed ({}): clone it again there (voxctl pack clone, \
                 CloneVoice) once the cause is fixed, or delete it (DeleteClone) so another \
                 scope is used",
                failed.scope, failed.error
            ),
        };
    }
    let held: Vec<String> = clones
        .iter()
        .map(|c| format!("{} {:?}", c.scope, c.state))
        .collect();
    SynthesisError::CloneFailed {
        pack_id: pack_id.to_owned(),
        scope: String::new(),
        message: format!(
            "no clone of it is READY in a scope this replica serves (its clones: {}); check the \
             pools file's clone tables and ListClones",
            if held.is_empty() {
                "none".to_owned()
            } else {
                held.join(", ")
            }
        ),
    }
}

fn pending(pack_id: &str, scopes: Vec<String>) -> SynthesisError {
    SynthesisError::ClonePending {
        pack_id: pack_id.to_owned(),
        scopes,
        retry_after: PENDING_RETRY,
    }
}

/// The vendor id a managed clone is checked with before it is routed (the adapters' checks
/// need one; the vendors' clone ids carry no suffix that changes what a check accepts).
pub const UNROUTED_ID: &str = "managed-clone";

/// `voice` as the adapter's `check` sees it: a managed clone with the vendor id of `route`'s
/// first READY scope, or [`UNROUTED_ID`] before routing; every other voice as it is.
pub fn checked(voice: &Snapshot, route: Option<&CloneRoute>) -> Snapshot {
    if !is_managed(voice) {
        return voice.clone();
    }
    let id = route.and_then(|r| r.ready.values().next());
    Snapshot {
        voice_id: id.map_or(UNROUTED_ID, String::as_str).to_owned(),
        ..voice.clone()
    }
}

/// The route of `voice` over `pool` when it is a managed clone (module doc), before any
/// lease; `None` for every other voice.
pub async fn resolve(
    core: &Core,
    voice: &Snapshot,
    pool: &Pool,
) -> Result<Option<Arc<CloneRoute>>, SynthesisError> {
    if !is_managed(voice) {
        return Ok(None);
    }
    let clones = core
        .catalog
        .clones_or_clone(&core.admin, &voice.pack_id, false, CATALOG_TIMEOUT)
        .await?;
    route_of(&voice.pack_id, pool, &clones).map(|r| Some(Arc::new(r)))
}

/// Whether a failed call says the vendor does not hold the voice id it was sent in the key's
/// scope (each adapter recognises its own answer).
pub fn clone_gone(provider: Provider, attempt: &AttemptRecord) -> bool {
    use crate::adapters::{dashscope, elevenlabs, minimax, volcengine};
    match provider {
        Provider::DashScope => dashscope::clone_gone(attempt.http_status, &attempt.message),
        Provider::ElevenLabs => elevenlabs::clone_gone(attempt.http_status, &attempt.message),
        Provider::MiniMax => minimax::clone_gone(attempt.http_status, &attempt.message),
        Provider::Volcengine => volcengine::clone_gone(attempt.http_status, &attempt.message),
        _ => false,
    }
}

/// The Acquire's `upstream_ids`: a managed clone's READY upstreams, else the snapshot's.
pub fn upstream_ids(job: &Job) -> Vec<String> {
    match &job.clone {
        Some(route) => route.upstream_ids.clone(),
        None => job.voice.upstream_ids.clone(),
    }
}

/// The Acquire's `exclude_keys`: `others`, and a managed clone's keys outside its READY
/// scopes (where each key is a scope).
pub fn excluded<'a>(job: &'a Job, others: impl Iterator<Item = &'a String>) -> Vec<String> {
    let outside = job.clone.iter().flat_map(|r| r.exclude_keys.iter());
    others.chain(outside).cloned().collect()
}

/// What the call on the leased `key_id` says: the chunk's utterance, for a managed clone
/// with the vendor id of the key's scope. `None`: the key is outside every READY scope and
/// must not be called (the lease is released unused).
pub fn utterance(job: &Job, utterance: &Utterance, key_id: &str) -> Option<Utterance> {
    match &job.clone {
        Some(route) => route.utterance_for(utterance, key_id),
        None => Some(utterance.clone()),
    }
}

/// The refusal when the scheduler leased a key outside a managed clone's READY scopes (the
/// filter asked for none: the scheduler and this replica disagree on the pool's keys).
pub fn outside(core: &Core, job: &Job, key_id: &str) -> SynthesisError {
    let ready = job
        .clone
        .as_ref()
        .map(|r| r.ready.keys().cloned().collect::<Vec<_>>().join(", "))
        .unwrap_or_default();
    SynthesisError::SchedulerMismatch {
        url: core.scheduler.url().to_owned(),
        message: format!(
            "it leased key {key_id:?} of pool {:?}, outside the clone scopes {ready} where the \
             voice's clone is READY; the key was not called",
            job.pool.id
        ),
    }
}

/// When a CLIENT_ERROR `attempt` on a managed clone says the vendor does not hold the clone
/// in the key's scope ([`clone_gone`]): the catalog marks it gone and clones it there again,
/// and the request is answered CLONE_PENDING. `None` for any other failure.
pub async fn gone(core: &Core, job: &Job, attempt: &AttemptRecord) -> Option<SynthesisError> {
    let route = job.clone.as_ref()?;
    if !clone_gone(route.provider, attempt) {
        return None;
    }
    let (scope, voice_id) = route.voice_id_for(&attempt.key_id)?;
    Some(gone_in(core, job, route, scope, voice_id, attempt).await)
}

async fn gone_in(
    core: &Core,
    job: &Job,
    route: &CloneRoute,
    scope: &str,
    voice_id: &str,
    attempt: &AttemptRecord,
) -> SynthesisError {
    tracing::warn!(pack_id = %route.pack_id, scope, key = %attempt.key_id, request_id = %job.request_id, "the vendor does not hold the clone in this scope: marking it gone and cloning it again");
    match core
        .catalog
        .clone_gone(
            &core.admin,
            &route.pack_id,
            scope,
            voice_id,
            &attempt.message,
            CATALOG_TIMEOUT,
        )
        .await
    {
        Ok(making) if making.is_empty() => pending(&route.pack_id, vec![scope.to_owned()]),
        Ok(making) => pending(&route.pack_id, making),
        Err(e) => e,
    }
}

/// A lease answer; for a managed clone, a refusal for lack of keys (every READY scope full,
/// cooling or disabled) asks for a clone in one more scope and says where it is being made.
/// A key whose scope's vendor id this replica has found gone since the route was made
/// ([`found_gone`]) is released unused and the request answered CLONE_PENDING, as is a wait
/// for a key once every READY scope's id is found gone: the vendor is not sent a dead id again.
pub async fn refused(
    core: &Core,
    job: &Job,
    leased: Result<Option<Lease>, SynthesisError>,
) -> Result<Option<Lease>, SynthesisError> {
    match leased {
        Err(error) => Err(spill(core, job, error).await),
        Ok(Some(lease)) => match found_gone(core, job, Some(&lease.key_id)) {
            Some(gone) => {
                LeaseGuard::new(core.scheduler.clone(), lease)
                    .release()
                    .await;
                Err(gone)
            }
            None => Ok(Some(lease)),
        },
        Ok(None) => found_gone(core, job, None).map_or(Ok(None), Err),
    }
}

/// CLONE_PENDING when this replica found the vendor id of `key_id`'s scope gone (a clone gone
/// reported by another request: it is being made again there), or with no key, every READY
/// scope's. `None` while the route holds.
fn found_gone(core: &Core, job: &Job, key_id: Option<&str>) -> Option<SynthesisError> {
    let route = job.clone.as_ref()?;
    let gone = |scope: &str, id: &str| core.catalog.found_gone(&route.pack_id, scope, id);
    let scopes = match key_id {
        Some(key_id) => {
            let (scope, id) = route.voice_id_for(key_id)?;
            gone(scope, id).then(|| vec![scope.to_owned()])?
        }
        // A route always holds a READY scope.
        None => route
            .ready
            .iter()
            .all(|(s, id)| gone(s, id))
            .then(|| route.ready.keys().cloned().collect())?,
    };
    Some(pending(&route.pack_id, scopes))
}

async fn spill(core: &Core, job: &Job, error: SynthesisError) -> SynthesisError {
    let Some(route) = &job.clone else {
        return error;
    };
    if !matches!(
        error,
        SynthesisError::PoolFull { .. } | SynthesisError::Exhausted { .. }
    ) {
        return error;
    }
    let making = match core
        .catalog
        .more_room(&core.admin, &route.pack_id, CATALOG_TIMEOUT)
        .await
    {
        Ok(making) => making,
        Err(e) => {
            tracing::info!(pack_id = %route.pack_id, error = %e, "could not ask for a clone in another scope");
            return error;
        }
    };
    if making.is_empty() {
        return error;
    }
    let note = format!(
        "; a clone of voice pack {:?} is being made in clone scope {} to serve it too",
        route.pack_id,
        making.join(", ")
    );
    match error {
        SynthesisError::PoolFull {
            pool,
            message,
            retry_after,
            attempts,
        } => SynthesisError::PoolFull {
            pool,
            message: message + &note,
            retry_after,
            attempts,
        },
        SynthesisError::Exhausted {
            pool,
            why,
            attempts,
            retry_after,
        } => SynthesisError::Exhausted {
            pool,
            why: why + &note,
            attempts,
            retry_after,
        },
        other => other,
    }
}

/// A call on `key_id` succeeded: the clone's use is recorded (keep-alive).
pub fn used(core: &Core, job: &Job, key_id: &str) {
    if let Some(route) = &job.clone
        && let Some((scope, voice_id)) = route.voice_id_for(key_id)
    {
        core.catalog
            .clone_used(&core.admin, &route.pack_id, scope, voice_id);
    }
}

#[cfg(test)]
mod tests {
    use voxpool_config::Config;

    use super::*;
    use crate::pools::Pools;

    const TOML: &str = r#"
[[pools]]
id = "eleven"
provider = "elevenlabs"
[[pools.upstreams]]
id = "team-a"
clone = { slots = 10 }
[[pools.upstreams.keys]]
id = "k1"
capacity = 2
credential = { env = "PATH" }
[[pools.upstreams.keys]]
id = "k2"
capacity = 2
credential = { env = "PATH" }
[[pools.upstreams]]
id = "team-b"
clone = { slots = 10 }
[[pools.upstreams.keys]]
id = "k1"
capacity = 2
credential = { env = "PATH" }

[[pools]]
id = "volc"
provider = "volcengine"
[[pools.upstreams]]
id = "acct"
clone = { slots = 1 }
[[pools.upstreams.keys]]
id = "app-1"
capacity = 2
credential = { env = "PATH" }
[[pools.upstreams.keys]]
id = "app-2"
capacity = 2
credential = { env = "PATH" }
"#;

    fn clone(scope: &str, state: CloneState, id: &str) -> Clone {
        Clone {
            scope: scope.into(),
            state,
            vendor_voice_id: id.into(),
            error: if state == CloneState::Failed {
                "voice_limit_reached".into()
            } else {
                String::new()
            },
        }
    }

    fn pools() -> Pools {
        Pools::from_config(&Config::from_toml_str(TOML).unwrap())
    }

    #[test]
    fn upstream_scopes_filter_by_upstream_and_give_each_key_its_scopes_id() {
        let pools = pools();
        let pool = pools.get("eleven").unwrap();
        let clones = [
            clone("team-a", CloneState::Ready, "v-a"),
            clone("team-b", CloneState::Training, ""),
        ];
        let route = route_of("p1", pool, &clones).unwrap();
        assert_eq!(route.upstream_ids, ["team-a"]);
        assert!(route.exclude_keys.is_empty());
        assert_eq!(route.voice_id_for("team-a/k2"), Some(("team-a", "v-a")));
        assert_eq!(route.voice_id_for("team-b/k1"), None, "not READY there");
    }

    #[test]
    fn key_scopes_exclude_the_other_keys_of_their_upstream() {
        let pools = pools();
        let pool = pools.get("volc").unwrap();
        let clones = [clone("acct/app-2", CloneState::Ready, "S_2")];
        let route = route_of("p1", pool, &clones).unwrap();
        assert_eq!(route.upstream_ids, ["acct"]);
        assert_eq!(route.exclude_keys, ["acct/app-1"]);
        assert_eq!(route.voice_id_for("acct/app-1"), None);
        assert_eq!(
            route.voice_id_for("acct/app-2"),
            Some(("acct/app-2", "S_2"))
        );
    }

    #[test]
    fn without_a_ready_scope_the_answer_says_where_one_is_made_or_what_failed() {
        let pools = pools();
        let pool = pools.get("eleven").unwrap();
        let making = route_of("p1", pool, &[clone("team-b", CloneState::Pending, "")]);
        match making {
            Err(e @ SynthesisError::ClonePending { .. }) => {
                assert_eq!(e.code(), tonic::Code::Unavailable);
                assert!(e.to_string().contains("team-b"), "{e}");
                assert!(e.retry_after().is_some());
            }
            other => panic!("{other:?}"),
        }
        let failed = route_of("p1", pool, &[clone("team-a", CloneState::Failed, "")]);
        match failed {
            Err(e @ SynthesisError::CloneFailed { .. }) => {
                assert_eq!(e.code(), tonic::Code::FailedPrecondition);
                let text = e.to_string();
                assert!(
                    text.contains("team-a") && text.contains("voice_limit_reached"),
                    "{text}"
                );
            }
            other => panic!("{other:?}"),
        }
        // A READY clone in a scope the pool does not serve is no route.
        let elsewhere = route_of("p1", pool, &[clone("other", CloneState::Ready, "v")]);
        assert!(matches!(elsewhere, Err(SynthesisError::CloneFailed { .. })));
    }

    #[test]
    fn only_managed_clones_are_routed_by_clone() {
        let mut voice = voxpool_fake_vendors::snapshot("elevenlabs", "m", "");
        voice.kind = Kind::Cloned;
        assert!(is_managed(&voice));
        voice.voice_id = "hand-made".into();
        voice.upstream_ids = vec!["team-a".into()];
        assert!(!is_managed(&voice));
    }

    #[test]
    fn a_managed_clone_is_checked_with_a_stand_in_id_before_routing_and_its_scopes_id_after() {
        let mut voice = voxpool_fake_vendors::snapshot("elevenlabs", "m", "");
        voice.kind = Kind::Cloned;
        assert_eq!(checked(&voice, None).voice_id, UNROUTED_ID);
        let pools = pools();
        let clones = [clone("team-b", CloneState::Ready, "v-b")];
        let route = route_of("p1", pools.get("eleven").unwrap(), &clones).unwrap();
        assert_eq!(checked(&voice, Some(&route)).voice_id, "v-b");
        let stock = voxpool_fake_vendors::snapshot("elevenlabs", "m", "");
        assert_eq!(
            checked(&stock, None).voice_id,
            "",
            "not a managed clone: unchanged"
        );
    }
}
