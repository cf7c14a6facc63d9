//! The clone RPCs of `VoiceCatalogAdmin` (CloneVoice, ListClones, DeleteClone, ImportClones)
//! and the conversions of clone types to messages: thin handlers over
//! [`crate::clones::Clones`].

use tonic::{Request, Response, Status};
use voxpool_domain::snapshot::timestamp_pb;
use voxpool_proto::catalog::v1 as pb;

use super::{AdminService, require_id};
use crate::{
    clones::{
        imports::REQUESTED,
        model::{CloneState, Import, VoiceClone, Work},
    },
    error::CatalogError,
    model::from_micros,
};

/// Longest clone scope accepted in a request (`upstream/key`).
pub const MAX_SCOPE_CHARS: usize = 130;
/// Most scopes one request names.
pub const MAX_SCOPES: usize = 64;

/// A scope field, checked before it reaches a message or a log line.
pub(super) fn check_scope(field: &str, scope: &str) -> Result<(), CatalogError> {
    if scope.is_empty() {
        return Err(CatalogError::invalid(
            field,
            "required: a clone scope (an upstream id, or upstream/key)",
        ));
    }
    voxpool_domain::untrusted::check_field(scope, MAX_SCOPE_CHARS).map_err(|problem| {
        CatalogError::invalid(
            field,
            format!("{problem}; clone scopes are upstream ids or upstream/key"),
        )
    })
}

/// The message of a clone state.
pub fn state_to_pb(state: CloneState) -> pb::voice_clone::CloneState {
    use pb::voice_clone::CloneState as S;
    match state {
        CloneState::Pending => S::Pending,
        CloneState::Training => S::Training,
        CloneState::Ready => S::Ready,
        CloneState::Failed => S::Failed,
        CloneState::Expired => S::Expired,
        CloneState::Reclaimed => S::Reclaimed,
    }
}

/// The message of a clone.
pub fn clone_to_pb(c: &VoiceClone) -> pb::VoiceClone {
    let time = |us: i64| timestamp_pb(from_micros(us));
    pb::VoiceClone {
        pack_id: c.pack_id.clone(),
        scope: c.scope.clone(),
        state: state_to_pb(c.state) as i32,
        vendor_voice_id: c.vendor_voice_id.clone().unwrap_or_default(),
        created_at: Some(time(c.created_at_us)),
        last_used_at: c.last_used_at_us.map(time),
        expires_at: c.expires_at_us.map(time),
        error: c.error.clone().unwrap_or_default(),
        deleting: c.work == Work::Delete,
    }
}

/// A scope's import as messages: its last finished run, then the queued one (either may be
/// missing).
fn import_to_pb(i: &Import) -> Vec<pb::CloneImport> {
    let time = |us: i64| Some(timestamp_pb(from_micros(us)));
    let mut out = Vec::new();
    if let Some(last) = &i.last {
        out.push(pb::CloneImport {
            scope: i.scope.clone(),
            state: last.state.clone(),
            requested_at: time(last.requested_at_us),
            finished_at: time(last.finished_at_us),
            bound: last
                .result
                .bound
                .iter()
                .map(|(pack_id, vendor_voice_id)| pb::VoiceClone {
                    pack_id: pack_id.clone(),
                    scope: i.scope.clone(),
                    state: pb::voice_clone::CloneState::Ready as i32,
                    vendor_voice_id: vendor_voice_id.clone(),
                    ..Default::default()
                })
                .collect(),
            unbound: last.result.unbound.clone(),
            error: last.error.clone().unwrap_or_default(),
        });
    }
    if let Some(queued) = &i.queued {
        out.push(pb::CloneImport {
            scope: i.scope.clone(),
            state: REQUESTED.to_owned(),
            requested_at: time(queued.requested_at_us),
            error: queued.error.clone().unwrap_or_default(),
            ..Default::default()
        });
    }
    out
}

fn listed(clones: &[VoiceClone]) -> pb::ListClonesResponse {
    pb::ListClonesResponse {
        clones: clones.iter().map(clone_to_pb).collect(),
    }
}

impl AdminService {
    pub(super) async fn clone_voice_rpc(
        &self,
        request: Request<pb::CloneVoiceRequest>,
    ) -> Result<Response<pb::ListClonesResponse>, Status> {
        self.authorize(request.metadata())?;
        let req = request.get_ref();
        require_id("pack_id", &req.pack_id)?;
        if req.scopes.len() > MAX_SCOPES {
            return Err(CatalogError::invalid(
                "scopes",
                format!("at most {MAX_SCOPES} scopes, got {}", req.scopes.len()),
            )
            .into());
        }
        for (i, scope) in req.scopes.iter().enumerate() {
            check_scope(&format!("scopes[{i}]"), scope)?;
        }
        if req.max_scopes > MAX_SCOPES as u32 {
            return Err(CatalogError::invalid(
                "max_scopes",
                format!(
                    "must be 0..={MAX_SCOPES} (0 = keep the pack's setting), got {}",
                    req.max_scopes
                ),
            )
            .into());
        }
        let clones = self
            .clones()
            .clone_voice(&req.pack_id, &req.scopes, req.max_scopes)
            .await?;
        Ok(Response::new(listed(&clones)))
    }

    pub(super) async fn list_clones_rpc(
        &self,
        request: Request<pb::ListClonesRequest>,
    ) -> Result<Response<pb::ListClonesResponse>, Status> {
        self.authorize(request.metadata())?;
        let pack_id = &request.get_ref().pack_id;
        require_id("pack_id", pack_id)?;
        Ok(Response::new(listed(&self.clones().list(pack_id).await?)))
    }

    pub(super) async fn delete_clone_rpc(
        &self,
        request: Request<pb::DeleteCloneRequest>,
    ) -> Result<Response<pb::VoiceClone>, Status> {
        self.authorize(request.metadata())?;
        let req = request.get_ref();
        require_id("pack_id", &req.pack_id)?;
        check_scope("scope", &req.scope)?;
        let clone = self.clones().delete(&req.pack_id, &req.scope).await?;
        Ok(Response::new(clone_to_pb(&clone)))
    }

    pub(super) async fn import_clones_rpc(
        &self,
        request: Request<pb::ImportClonesRequest>,
    ) -> Result<Response<pb::ImportClonesResponse>, Status> {
        self.authorize(request.metadata())?;
        let req = request.get_ref();
        if !voxpool_config::is_valid_id(&req.pool) {
            return Err(CatalogError::invalid(
                "pool",
                format!(
                    "required: a pool id, got {}",
                    voxpool_domain::untrusted::quote(&req.pool)
                ),
            )
            .into());
        }
        if !req.scope.is_empty() {
            check_scope("scope", &req.scope)?;
        }
        let imports = self.clones().import(&req.pool, &req.scope).await?;
        Ok(Response::new(pb::ImportClonesResponse {
            imports: imports.iter().flat_map(import_to_pb).collect(),
        }))
    }
}
