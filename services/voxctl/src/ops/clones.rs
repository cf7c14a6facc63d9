//! `voxctl pack clone|clones|import`: a managed clone pack's vendor clones, one per clone scope
//! (admin RPCs CloneVoice, ListClones, DeleteClone, ImportClones), as an aligned table or
//! `--json` (the proto JSON mapping's camelCase field names, enums by name, times in RFC 3339
//! UTC, unset times `null`).

use serde::Serialize;
use voxpool_domain::contract::CatalogReason;
use voxpool_proto::catalog::v1::{
    CloneImport, CloneVoiceRequest, DeleteCloneRequest, ImportClonesRequest, ListClonesRequest,
    VoiceClone, voice_clone::CloneState,
};

use super::{
    OpError,
    job::view::{printable, time},
    packs::Catalog,
};
use crate::{
    cli::{CloneArgs, ClonesArgs, ImportArgs},
    console::table,
};

/// A refusal of `what`: `RPC (catalog at URL): CODE REASON: message` when the catalog gave one of
/// its typed reasons (CLONE_NOT_MANAGED, NO_CLONE_SCOPES, CLONE_SLOTS_FULL, CLONE_NOT_FOUND, ...),
/// otherwise as every operator command says it ([`OpError::status`], with its token hints).
fn refused(what: &str, service: &str, status: &tonic::Status) -> OpError {
    match CatalogReason::of(status) {
        Some(reason) => OpError::failed(format!(
            "{what} ({service}): {} {}: {}",
            crate::retry::code_name(status.code()),
            reason.as_str(),
            printable(status.message())
        )),
        None => OpError::status(what, service, status),
    }
}

impl Catalog {
    /// CloneVoice: clones `pack` into `scopes` (the catalog picks when empty); `max_scopes` 0
    /// keeps the pack's setting. Answers every clone of the pack.
    pub async fn clone_voice(
        &mut self,
        pack: &str,
        scopes: &[String],
        max_scopes: u32,
    ) -> Result<Vec<VoiceClone>, OpError> {
        self.admin
            .clone_voice(CloneVoiceRequest {
                pack_id: pack.to_owned(),
                scopes: scopes.to_vec(),
                max_scopes,
            })
            .await
            .map(|r| r.into_inner().clones)
            .map_err(|s| refused("CloneVoice", &self.service, &s))
    }

    /// ListClones: the pack's clones by scope.
    pub async fn list_clones(&mut self, pack: &str) -> Result<Vec<VoiceClone>, OpError> {
        self.admin
            .list_clones(ListClonesRequest {
                pack_id: pack.to_owned(),
            })
            .await
            .map(|r| r.into_inner().clones)
            .map_err(|s| refused("ListClones", &self.service, &s))
    }

    /// DeleteClone: answers the clone as it stood.
    pub async fn delete_clone(&mut self, pack: &str, scope: &str) -> Result<VoiceClone, OpError> {
        self.admin
            .delete_clone(DeleteCloneRequest {
                pack_id: pack.to_owned(),
                scope: scope.to_owned(),
            })
            .await
            .map(tonic::Response::into_inner)
            .map_err(|s| refused("DeleteClone", &self.service, &s))
    }

    /// ImportClones: asks for an import of `scope` of `pool` (every clone scope of it when
    /// empty); answers what the last import of each scope found.
    pub async fn import_clones(
        &mut self,
        pool: &str,
        scope: &str,
    ) -> Result<Vec<CloneImport>, OpError> {
        self.admin
            .import_clones(ImportClonesRequest {
                pool: pool.to_owned(),
                scope: scope.to_owned(),
            })
            .await
            .map(|r| r.into_inner().imports)
            .map_err(|s| refused("ImportClones", &self.service, &s))
    }
}

/// `voxctl pack clone`: the pack's clones on stdout, what happens next on stderr.
pub async fn clone(catalog: &mut Catalog, args: CloneArgs) -> Result<(), OpError> {
    let clones = catalog
        .clone_voice(&args.pack, &args.scopes, args.max_scopes.unwrap_or(0))
        .await?;
    show_clones(&clones, args.json)?;
    let waiting = clones
        .iter()
        .any(|c| matches!(state(c), CloneState::Pending | CloneState::Training));
    let next = if waiting {
        "; a synthesis replica runs the vendor's flow (voxctl pack clones follows it)"
    } else {
        ""
    };
    crate::say!(
        "voxctl: pack {}: {}{next}",
        printable(&args.pack),
        tally(&clones)
    );
    Ok(())
}

/// `voxctl pack clones [--delete SCOPE]`: the pack's clones (after the delete, when asked).
pub async fn clones(catalog: &mut Catalog, args: ClonesArgs) -> Result<(), OpError> {
    let pack = printable(&args.pack);
    if let Some(scope) = &args.delete {
        let before = catalog.delete_clone(&args.pack, scope).await?;
        let clones = catalog.list_clones(&args.pack).await?;
        let shown = printable(scope);
        if clones.iter().any(|c| c.scope == *scope) {
            crate::say!(
                "voxctl: pack {pack}: deleting the clone in {shown} (vendor voice id {}): a synthesis replica deletes the vendor's copy, then the clone goes (voxctl pack clones follows it)",
                or_dash(&before.vendor_voice_id)
            );
        } else {
            crate::say!("voxctl: pack {pack}: deleted the clone in {shown}");
        }
        return show_clones(&clones, args.json);
    }
    let clones = catalog.list_clones(&args.pack).await?;
    show_clones(&clones, args.json)?;
    crate::say!("voxctl: pack {pack}: {}", tally(&clones));
    Ok(())
}

/// `voxctl pack import`: per scope, the last finished import and the one queued now.
pub async fn import(catalog: &mut Catalog, args: ImportArgs) -> Result<(), OpError> {
    let scope = args.scope.as_deref().unwrap_or_default();
    let imports = catalog.import_clones(&args.pool, scope).await?;
    if args.json {
        crate::show!("{}", json(&ImportsJson::new(&imports))?);
    } else {
        crate::show!("{}", render_imports(&imports));
    }
    let queued: Vec<String> = imports
        .iter()
        .filter(|i| i.state == "REQUESTED")
        .map(|i| printable(&i.scope))
        .collect();
    if !queued.is_empty() {
        crate::say!(
            "voxctl: pool {}: an import is queued for {}: a synthesis replica reads the vendor's list; run the same command again to see what it found (its DONE or FAILED row)",
            printable(&args.pool),
            queued.join(", ")
        );
    }
    Ok(())
}

fn show_clones(clones: &[VoiceClone], as_json: bool) -> Result<(), OpError> {
    if as_json {
        crate::show!("{}", json(&ClonesJson::new(clones))?);
    } else if !clones.is_empty() {
        crate::show!("{}", render_clones(clones));
    }
    Ok(())
}

fn json(value: &impl Serialize) -> Result<String, OpError> {
    serde_json::to_string_pretty(value)
        .map_err(|e| OpError::failed(format!("cannot write the answer as JSON: {e}")))
}

fn state(c: &VoiceClone) -> CloneState {
    CloneState::try_from(c.state).unwrap_or(CloneState::Unspecified)
}

fn or_dash(text: &str) -> String {
    if text.is_empty() {
        "-".to_owned()
    } else {
        printable(text)
    }
}

/// The STATE a clone is shown with: its state, and `(deleting)` while a delete is pending
/// (`READY (deleting)`: still served until the vendor's copy is deleted).
pub fn shown_state(c: &VoiceClone) -> String {
    let name = state(c).as_str_name();
    if c.deleting {
        format!("{name} (deleting)")
    } else {
        name.to_owned()
    }
}

/// `2 clone(s): 1 PENDING, 1 READY (deleting)`, or `no clones` (and how to make one).
pub fn tally(clones: &[VoiceClone]) -> String {
    if clones.is_empty() {
        return "no clones (voxctl pack clone makes them)".to_owned();
    }
    let mut counts: Vec<((i32, bool), String, usize)> = Vec::new();
    for c in clones {
        let key = (state(c) as i32, c.deleting);
        match counts.iter_mut().find(|(k, _, _)| *k == key) {
            Some((_, _, n)) => *n += 1,
            None => counts.push((key, shown_state(c), 1)),
        }
    }
    counts.sort_by_key(|(k, _, _)| *k);
    let parts: Vec<String> = counts.iter().map(|(_, s, n)| format!("{n} {s}")).collect();
    format!("{} clone(s): {}", clones.len(), parts.join(", "))
}

/// The clones table: SCOPE, STATE ([`shown_state`]), VENDOR VOICE ID, CREATED, LAST USED, EXPIRES, ERROR (times
/// in UTC, `-` when unset).
pub fn render_clones(clones: &[VoiceClone]) -> String {
    let when = |t| time(t).unwrap_or_else(|| "-".to_owned());
    let rows: Vec<[String; 7]> = clones
        .iter()
        .map(|c| {
            [
                printable(&c.scope),
                shown_state(c),
                or_dash(&c.vendor_voice_id),
                when(c.created_at.as_ref()),
                when(c.last_used_at.as_ref()),
                when(c.expires_at.as_ref()),
                printable(&c.error),
            ]
        })
        .collect();
    let header = [
        "SCOPE",
        "STATE",
        "VENDOR VOICE ID",
        "CREATED",
        "LAST USED",
        "EXPIRES",
        "ERROR",
    ];
    table(&header, &rows)
}

/// The imports table, a row per run: a scope's last finished run (`DONE` or `FAILED`, with
/// what it found), then the run queued after it (`REQUESTED`), either of which may be missing.
/// SCOPE, STATE, REQUESTED (when that run was asked for), BOUND (`vendor id → pack`: bound by
/// the run or already the pack's clone), UNBOUND (vendor ids no pack of the scope holds or may
/// be bound to), ERROR.
pub fn render_imports(imports: &[CloneImport]) -> String {
    let rows: Vec<[String; 7]> = imports
        .iter()
        .map(|i| {
            let bound: Vec<String> = i
                .bound
                .iter()
                .map(|b| {
                    format!(
                        "{} → {}",
                        printable(&b.vendor_voice_id),
                        printable(&b.pack_id)
                    )
                })
                .collect();
            let unbound: Vec<String> = i.unbound.iter().map(|u| printable(u)).collect();
            [
                printable(&i.scope),
                or_dash(&i.state),
                time(i.requested_at.as_ref()).unwrap_or_else(|| "-".to_owned()),
                time(i.finished_at.as_ref()).unwrap_or_else(|| "-".to_owned()),
                or_dash(&bound.join(", ")),
                or_dash(&unbound.join(", ")),
                printable(&i.error),
            ]
        })
        .collect();
    let header = [
        "SCOPE",
        "STATE",
        "REQUESTED",
        "FINISHED",
        "BOUND",
        "UNBOUND",
        "ERROR",
    ];
    table(&header, &rows)
}

/// `--json` of `pack clone` and `pack clones`: `{"clones": [...]}`, as ListClonesResponse.
#[derive(Debug, Serialize)]
pub struct ClonesJson {
    clones: Vec<CloneJson>,
}

impl ClonesJson {
    /// The JSON form of `clones`.
    pub fn new(clones: &[VoiceClone]) -> Self {
        Self {
            clones: clones.iter().map(CloneJson::new).collect(),
        }
    }
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct CloneJson {
    pack_id: String,
    scope: String,
    state: &'static str,
    vendor_voice_id: String,
    created_at: Option<String>,
    last_used_at: Option<String>,
    expires_at: Option<String>,
    error: String,
    deleting: bool,
}

impl CloneJson {
    fn new(c: &VoiceClone) -> Self {
        Self {
            pack_id: c.pack_id.clone(),
            scope: c.scope.clone(),
            state: state(c).as_str_name(),
            vendor_voice_id: c.vendor_voice_id.clone(),
            created_at: time(c.created_at.as_ref()),
            last_used_at: time(c.last_used_at.as_ref()),
            expires_at: time(c.expires_at.as_ref()),
            error: c.error.clone(),
            deleting: c.deleting,
        }
    }
}

/// `--json` of `pack import`: `{"imports": [...]}`, as ImportClonesResponse.
#[derive(Debug, Serialize)]
pub struct ImportsJson {
    imports: Vec<ImportJson>,
}

impl ImportsJson {
    /// The JSON form of `imports`.
    pub fn new(imports: &[CloneImport]) -> Self {
        Self {
            imports: imports.iter().map(ImportJson::new).collect(),
        }
    }
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct ImportJson {
    scope: String,
    state: String,
    requested_at: Option<String>,
    finished_at: Option<String>,
    bound: Vec<BoundJson>,
    unbound: Vec<String>,
    error: String,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct BoundJson {
    vendor_voice_id: String,
    pack_id: String,
}

impl ImportJson {
    fn new(i: &CloneImport) -> Self {
        Self {
            scope: i.scope.clone(),
            state: i.state.clone(),
            requested_at: time(i.requested_at.as_ref()),
            finished_at: time(i.finished_at.as_ref()),
            bound: i
                .bound
                .iter()
                .map(|b| BoundJson {
                    vendor_voice_id: b.vendor_voice_id.clone(),
                    pack_id: b.pack_id.clone(),
                })
                .collect(),
            unbound: i.unbound.clone(),
            error: i.error.clone(),
        }
    }
}

#[cfg(test)]
mod tests;
