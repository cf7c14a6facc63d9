//! Checks the pack ids a manifest names against the catalog before anything runs, so an
//! unknown or disabled pack, or one whose `ttsModelId` no pool serves (as the scheduler, or
//! synthesis when no `--scheduler` is given, lists them), is reported with its manifest lines
//! instead of failing every item of it on the server.

use std::collections::{BTreeMap, BTreeSet};

use tonic::{Code, transport::Channel};
use voxpool_proto::catalog::v1::{GetVoicePackRequest, voice_catalog_client::VoiceCatalogClient};

use voxpool_domain::snapshot::Snapshot;

use super::{Manifest, Problem, Voice};

/// The pools a service says exist, and which service said so (`scheduler` or `synthesis`).
#[derive(Clone, Debug)]
pub struct KnownPools {
    /// Who listed them: `scheduler` or `synthesis`.
    pub source: &'static str,
    /// The pool ids.
    pub pools: BTreeSet<String>,
}

/// Why a voice on pool `model` cannot be served (`runs on pool …` / `pins ttsModelId …`), if
/// synthesis says it cannot serve that pool or the scheduler has no such pool.
fn pool_problem(
    model: &str,
    known: Option<&KnownPools>,
    not_serving: &BTreeMap<String, String>,
) -> Option<String> {
    if let Some(why) = not_serving.get(model) {
        return Some(format!(
            "runs on pool {model:?}, which synthesis cannot serve: {why}; every call would fail"
        ));
    }
    let known = known.filter(|k| !k.pools.contains(model))?;
    let listed = known.pools.iter().cloned().collect::<Vec<_>>().join(", ");
    Some(format!(
        "pins ttsModelId {model:?}, which no {} pool serves (pools: {listed}); every call would fail",
        known.source
    ))
}

/// Moves every item whose pack is unknown or disabled, pins a `ttsModelId` none of the
/// `known` pools serves (when known), or runs on a pool synthesis cannot serve
/// (`not_serving`: pool → why, from synthesis's `ListPools`), from `items` to `problems`.
///
/// Returns an error (and changes nothing) when the catalog cannot answer, so the caller can warn
/// and let synthesis judge the packs instead.
pub async fn check_packs(
    manifest: &mut Manifest,
    mut catalog: Option<VoiceCatalogClient<Channel>>,
    known: Option<&KnownPools>,
    not_serving: &BTreeMap<String, String>,
) -> Result<usize, tonic::Status> {
    let ids: BTreeSet<String> = manifest
        .items
        .iter()
        .filter_map(|item| match &item.voice {
            Voice::PackId(id) => Some(id.clone()),
            Voice::Snapshot { .. } => None,
        })
        .collect();
    let mut bad: BTreeMap<String, String> = BTreeMap::new();
    for id in ids {
        let Some(catalog) = catalog.as_mut() else {
            break;
        };
        let request = GetVoicePackRequest { id: id.clone() };
        match catalog.get_voice_pack(request).await {
            Ok(pack) if !pack.get_ref().enabled => {
                bad.insert(id.clone(), format!("pack {id:?} is disabled"));
            }
            Ok(pack) => {
                if let Some(why) = pool_problem(&pack.get_ref().tts_model_id, known, not_serving) {
                    bad.insert(id.clone(), format!("pack {id:?} {why}"));
                }
            }
            Err(status) if status.code() == Code::NotFound => {
                bad.insert(id.clone(), format!("unknown pack {id:?}"));
            }
            Err(status) => return Err(status),
        }
    }
    let mut moved = 0;
    let items = std::mem::take(&mut manifest.items);
    for item in items {
        let reason = match &item.voice {
            Voice::PackId(id) => bad.get(id).cloned(),
            Voice::Snapshot { json, pack_id } => Snapshot::from_json(json)
                .ok()
                .and_then(|snap| pool_problem(&snap.tts_model_id, known, not_serving))
                .map(|why| format!("the snapshot of pack {pack_id:?} {why}")),
        };
        match reason {
            Some(message) => {
                moved += 1;
                manifest.problems.push(Problem {
                    line: item.line,
                    id: Some(item.id),
                    message,
                });
            }
            None => manifest.items.push(item),
        }
    }
    manifest.problems.sort_by_key(|p| p.line);
    Ok(moved)
}
