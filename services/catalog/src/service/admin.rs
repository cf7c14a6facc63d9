//! `VoiceCatalogAdmin`: create, update (field mask + optimistic version), disable, enable,
//! list everything, list revisions, and a pack's reference clips (add, list, remove; rules in
//! [`crate::reference`]). Every RPC first checks `authorization: Bearer <token>`
//! (constant-time; FAILED_PRECONDITION with instructions when no token is configured).

use std::sync::Arc;

use tonic::{Request, Response, Status};
use voxpool_proto::catalog::v1::{self as pb, voice_catalog_admin_server::VoiceCatalogAdmin};
use voxpool_runtime::auth::AdminAuth;

use super::{Repo, list::list, require_id};
use crate::{
    clones::Clones,
    convert::{listed_reference_to_pb, pack_to_pb, reference_to_pb, revision_to_pb, spec_to_pb},
    error::CatalogError,
    mask,
    model::{Action, PackSpec, now},
    pools::ServedPools,
    reference::{self, ClipStore},
    validate,
};

/// `spec` checked against the configured pools (see [`crate::pools`]).
fn served(pools: &ServedPools, spec: PackSpec) -> Result<PackSpec, CatalogError> {
    let violations = pools.check(&spec, "voice_pack");
    if violations.is_empty() {
        Ok(spec)
    } else {
        Err(CatalogError::InvalidArgument { violations })
    }
}

/// The write-side service.
#[derive(Clone)]
pub struct AdminService {
    repo: Repo,
    auth: AdminAuth,
    pools: Arc<ServedPools>,
    clips: ClipStore,
    clones: Clones,
}

impl AdminService {
    /// A service over `repo` guarded by `auth`; packs no pool serves are refused (when
    /// `pools` knows the pools); reference clips go to `clips`.
    pub fn new(repo: Repo, auth: AdminAuth, pools: ServedPools, clips: ClipStore) -> Self {
        let pools = Arc::new(pools);
        Self {
            clones: Clones::new(repo.clone(), pools.clone()),
            repo,
            auth,
            pools,
            clips,
        }
    }

    /// The managed clones.
    pub(super) fn clones(&self) -> &Clones {
        &self.clones
    }

    /// Checks the request's bearer token (every admin RPC).
    pub(super) fn authorize(&self, metadata: &tonic::metadata::MetadataMap) -> Result<(), Status> {
        self.auth.authorize(metadata)
    }

    /// The packs.
    pub(super) fn repo(&self) -> &Repo {
        &self.repo
    }

    /// The reference clips' bytes.
    pub(super) fn clips(&self) -> &ClipStore {
        &self.clips
    }

    /// The tonic server wrapping this service.
    pub fn into_server(self) -> pb::voice_catalog_admin_server::VoiceCatalogAdminServer<Self> {
        pb::voice_catalog_admin_server::VoiceCatalogAdminServer::new(self)
    }
}

/// The `voice_pack` field of a request, required.
fn required_pack(p: Option<&pb::VoicePack>) -> Result<&pb::VoicePack, CatalogError> {
    p.ok_or_else(|| CatalogError::invalid("voice_pack", "required"))
}

#[tonic::async_trait]
impl VoiceCatalogAdmin for AdminService {
    async fn create_voice_pack(
        &self,
        request: Request<pb::CreateVoicePackRequest>,
    ) -> Result<Response<pb::VoicePack>, Status> {
        self.auth.authorize(request.metadata())?;
        let spec = validate::pack_spec(
            required_pack(request.get_ref().voice_pack.as_ref())?,
            "voice_pack",
        )?;
        let spec = served(&self.pools, spec)?;
        let pack = self.repo.create(spec).await?;
        tracing::info!(pack_id = %pack.id, provider = %pack.spec.provider, "voice pack created");
        Ok(Response::new(pack_to_pb(&pack)))
    }

    async fn update_voice_pack(
        &self,
        request: Request<pb::UpdateVoicePackRequest>,
    ) -> Result<Response<pb::VoicePack>, Status> {
        self.auth.authorize(request.metadata())?;
        let req = request.into_inner();
        let patch = required_pack(req.voice_pack.as_ref())?;
        require_id("voice_pack.id", &patch.id)?;
        let paths = req.update_mask.map(|m| m.paths).unwrap_or_default();
        mask::check_paths(&paths)?;
        let expected = match req.expected_version {
            0 => None,
            v if v > 0 => Some(v),
            v => {
                return Err(CatalogError::invalid(
                    "expected_version",
                    format!("must be >= 0, got {v}"),
                )
                .into());
            }
        };
        let pools = &self.pools;
        let edit = |current: &crate::model::VoicePack| {
            let mut merged = spec_to_pb(&current.spec);
            mask::apply(&mut merged, patch, &paths);
            let mut spec = validate::pack_spec(&merged, "voice_pack")?;
            // Clips change only through AddReference / RemoveReference.
            spec.references = current.spec.references.clone();
            if !spec.references.is_empty() && !reference::takes_clips(&spec) {
                return Err(CatalogError::invalid(
                    "voice_pack.provider",
                    "the pack holds reference clips, which only selfhosted packs and managed clones (CLONED, no voice_id, no upstream_ids) take: remove them (RemoveReference) first",
                ));
            }
            // An edit that keeps the pool and provider stays possible on a pack whose pool
            // was since removed (to fix its text, or to disable it).
            if spec.tts_model_id == current.spec.tts_model_id
                && spec.provider == current.spec.provider
            {
                Ok(spec)
            } else {
                served(pools, spec)
            }
        };
        let pack = self.repo.update(&patch.id, expected, &edit).await?;
        tracing::info!(pack_id = %pack.id, version = pack.version, "voice pack updated");
        Ok(Response::new(pack_to_pb(&pack)))
    }

    async fn disable_voice_pack(
        &self,
        request: Request<pb::DisableVoicePackRequest>,
    ) -> Result<Response<pb::VoicePack>, Status> {
        self.auth.authorize(request.metadata())?;
        let id = &request.get_ref().id;
        require_id("id", id)?;
        let pack = self.repo.set_enabled(id, false).await?;
        tracing::info!(pack_id = %pack.id, version = pack.version, "voice pack disabled");
        Ok(Response::new(pack_to_pb(&pack)))
    }

    async fn enable_voice_pack(
        &self,
        request: Request<pb::EnableVoicePackRequest>,
    ) -> Result<Response<pb::VoicePack>, Status> {
        self.auth.authorize(request.metadata())?;
        let id = &request.get_ref().id;
        require_id("id", id)?;
        let pack = self.repo.set_enabled(id, true).await?;
        tracing::info!(pack_id = %pack.id, version = pack.version, "voice pack enabled");
        Ok(Response::new(pack_to_pb(&pack)))
    }

    async fn list_all_voice_packs(
        &self,
        request: Request<pb::ListVoicePacksRequest>,
    ) -> Result<Response<pb::ListVoicePacksResponse>, Status> {
        self.auth.authorize(request.metadata())?;
        Ok(Response::new(
            list(&self.repo, request.get_ref(), false).await?,
        ))
    }

    async fn add_reference(
        &self,
        request: Request<pb::AddReferenceRequest>,
    ) -> Result<Response<pb::VoicePackReference>, Status> {
        self.auth.authorize(request.metadata())?;
        let req = request.into_inner();
        // Decoding a clip is seconds of CPU at worst: off the async workers.
        let (clip, req) =
            tokio::task::spawn_blocking(move || reference::check_add(&req).map(|clip| (clip, req)))
                .await
                .map_err(|e| {
                    tracing::error!(error = %e, "checking a reference clip failed");
                    Status::internal(
                        "checking the reference clip failed (details are in the catalog log)",
                    )
                })??;
        let pack = self.repo.get(&req.pack_id).await?;
        reference::accepts(&pack)?;
        let new = reference::stored(&clip, &pack, now().timestamp_micros())?;
        if pack.spec.references.iter().any(|r| r.digest == new.digest) {
            return Err(CatalogError::ReferenceExists {
                id: pack.id,
                digest: new.digest,
            }
            .into());
        }
        // The bytes first: a pack never names a clip the store does not hold.
        self.clips.put(&new.digest, req.audio).await?;
        let pack = self
            .repo
            .set_references(&pack.id, Action::AddReference, &|current| {
                reference::with_added(current, &new)
            })
            .await?;
        tracing::info!(pack_id = %pack.id, version = pack.version, digest = %new.digest, duration_ms = new.duration_ms, "reference clip added");
        Ok(Response::new(reference_to_pb(&new)))
    }

    async fn list_references(
        &self,
        request: Request<pb::ListReferencesRequest>,
    ) -> Result<Response<pb::ListReferencesResponse>, Status> {
        self.auth.authorize(request.metadata())?;
        let req = request.get_ref();
        require_id("pack_id", &req.pack_id)?;
        let clips = self.repo.references(&req.pack_id, req.show_removed).await?;
        Ok(Response::new(pb::ListReferencesResponse {
            references: clips.iter().map(listed_reference_to_pb).collect(),
        }))
    }

    async fn remove_reference(
        &self,
        request: Request<pb::RemoveReferenceRequest>,
    ) -> Result<Response<pb::VoicePackReference>, Status> {
        self.auth.authorize(request.metadata())?;
        let req = request.get_ref();
        require_id("pack_id", &req.pack_id)?;
        if voxpool_domain::reference::digest_hex(&req.digest).is_none() {
            return Err(CatalogError::invalid(
                "digest",
                format!(
                    "must be sha256: and 64 lowercase hex digits (as AddReference answered), got {}",
                    voxpool_domain::untrusted::quote(&req.digest)
                ),
            )
            .into());
        }
        let pack = self
            .repo
            .set_references(&req.pack_id, Action::RemoveReference, &|current| {
                reference::without(current, &req.digest)
            })
            .await?;
        tracing::info!(pack_id = %pack.id, version = pack.version, digest = %req.digest, "reference clip removed");
        let listed = self.repo.references(&req.pack_id, true).await?;
        let removed = listed
            .iter()
            .find(|r| r.reference.digest == req.digest)
            .ok_or_else(|| CatalogError::ReferenceNotFound {
                id: req.pack_id.clone(),
                digest: req.digest.clone(),
            })?;
        Ok(Response::new(listed_reference_to_pb(removed)))
    }

    async fn get_reference_audio(
        &self,
        request: Request<pb::GetReferenceAudioRequest>,
    ) -> Result<Response<pb::GetReferenceAudioResponse>, Status> {
        self.reference_audio(request).await
    }

    async fn clone_voice(
        &self,
        request: Request<pb::CloneVoiceRequest>,
    ) -> Result<Response<pb::ListClonesResponse>, Status> {
        self.clone_voice_rpc(request).await
    }

    async fn list_clones(
        &self,
        request: Request<pb::ListClonesRequest>,
    ) -> Result<Response<pb::ListClonesResponse>, Status> {
        self.list_clones_rpc(request).await
    }

    async fn delete_clone(
        &self,
        request: Request<pb::DeleteCloneRequest>,
    ) -> Result<Response<pb::VoiceClone>, Status> {
        self.delete_clone_rpc(request).await
    }

    async fn import_clones(
        &self,
        request: Request<pb::ImportClonesRequest>,
    ) -> Result<Response<pb::ImportClonesResponse>, Status> {
        self.import_clones_rpc(request).await
    }

    async fn list_voice_pack_revisions(
        &self,
        request: Request<pb::ListVoicePackRevisionsRequest>,
    ) -> Result<Response<pb::ListVoicePackRevisionsResponse>, Status> {
        self.auth.authorize(request.metadata())?;
        let id = &request.get_ref().pack_id;
        require_id("pack_id", id)?;
        let revisions = self.repo.revisions(id).await?;
        Ok(Response::new(pb::ListVoicePackRevisionsResponse {
            revisions: revisions.iter().map(revision_to_pb).collect(),
        }))
    }
}
