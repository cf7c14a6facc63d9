//! `VoiceCatalogAdmin.GetReferenceAudio`: the bytes of one of a pack's reference clips, read
//! from the blob store through [`crate::reference::ClipStore`], so an operator can listen to
//! what the pack speaks from (the console plays them on a pack's page). Same bearer token as
//! every admin RPC; a clip only when the pack lists it (removed clips included: their bytes
//! stay for the snapshots frozen with them).

use tonic::{Request, Response, Status};
use voxpool_proto::catalog::v1 as pb;

use super::{AdminService, require_id};
use crate::error::CatalogError;

impl AdminService {
    /// GetReferenceAudio (module doc). Errors: INVALID_ARGUMENT a malformed pack id or digest;
    /// NOT_FOUND the pack, or a clip the pack does not list or the store does not hold;
    /// UNAVAILABLE the blob store.
    pub(super) async fn reference_audio(
        &self,
        request: Request<pb::GetReferenceAudioRequest>,
    ) -> Result<Response<pb::GetReferenceAudioResponse>, Status> {
        self.authorize(request.metadata())?;
        let req = request.into_inner();
        require_id("pack_id", &req.pack_id)?;
        if voxpool_domain::reference::digest_hex(&req.digest).is_none() {
            return Err(CatalogError::invalid(
                "digest",
                format!(
                    "must be sha256: and 64 lowercase hex digits (as ListReferences shows them), got {}",
                    voxpool_domain::untrusted::quote(&req.digest)
                ),
            )
            .into());
        }
        let missing = || CatalogError::ReferenceNotFound {
            id: req.pack_id.clone(),
            digest: req.digest.clone(),
        };
        let listed = self.repo().references(&req.pack_id, true).await?;
        let clip = listed
            .into_iter()
            .find(|r| r.reference.digest == req.digest)
            .ok_or_else(missing)?;
        let audio = self.clips().get(&req.digest).await?.ok_or_else(|| {
            tracing::warn!(pack_id = %req.pack_id, digest = %req.digest, "a listed reference clip has no bytes in the blob store (is the catalog on the blob store it added them to?)");
            missing()
        })?;
        Ok(Response::new(pb::GetReferenceAudioResponse {
            audio,
            content_type: clip.reference.media_type,
        }))
    }
}
