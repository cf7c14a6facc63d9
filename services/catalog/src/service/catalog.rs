//! `VoiceCatalog`: the market list, single packs, snapshots and card binding. No auth.

use tonic::{Request, Response, Status};
use voxpool_proto::catalog::v1::{self as pb, voice_catalog_server::VoiceCatalog};

use super::{Repo, list::list, require_id};
use crate::{
    card,
    convert::pack_to_pb,
    freeze::{card_json, freeze},
    model::now,
};

/// The read-side service.
#[derive(Clone)]
pub struct CatalogService {
    repo: Repo,
}

impl CatalogService {
    /// A service over `repo`.
    pub fn new(repo: Repo) -> Self {
        Self { repo }
    }

    /// The tonic server wrapping this service.
    pub fn into_server(self) -> pb::voice_catalog_server::VoiceCatalogServer<Self> {
        pb::voice_catalog_server::VoiceCatalogServer::new(self)
    }

    async fn snapshot(&self, pack_id: &str) -> Result<voxpool_domain::snapshot::Snapshot, Status> {
        require_id("pack_id", pack_id)?;
        let pack = self.repo.get(pack_id).await?;
        Ok(freeze(&pack, now())?)
    }
}

#[tonic::async_trait]
impl VoiceCatalog for CatalogService {
    async fn list_voice_packs(
        &self,
        request: Request<pb::ListVoicePacksRequest>,
    ) -> Result<Response<pb::ListVoicePacksResponse>, Status> {
        Ok(Response::new(
            list(&self.repo, request.get_ref(), true).await?,
        ))
    }

    async fn get_voice_pack(
        &self,
        request: Request<pb::GetVoicePackRequest>,
    ) -> Result<Response<pb::VoicePack>, Status> {
        let id = &request.get_ref().id;
        require_id("id", id)?;
        Ok(Response::new(pack_to_pb(&self.repo.get(id).await?)))
    }

    async fn freeze_snapshot(
        &self,
        request: Request<pb::FreezeSnapshotRequest>,
    ) -> Result<Response<pb::VoicePackSnapshot>, Status> {
        let snapshot = self.snapshot(&request.get_ref().pack_id).await?;
        Ok(Response::new(snapshot.to_pb()))
    }

    async fn bind_voice_pack(
        &self,
        request: Request<pb::BindVoicePackRequest>,
    ) -> Result<Response<pb::BindVoicePackResponse>, Status> {
        let req = request.get_ref();
        // A bad card is refused before any database work.
        let edit = card::CardEdit::plan(&req.card_json)?;
        let snapshot = self.snapshot(&req.pack_id).await?;
        let card_json = edit.apply(&card_json(&snapshot));
        Ok(Response::new(pb::BindVoicePackResponse {
            card_json,
            snapshot: Some(snapshot.to_pb()),
        }))
    }
}
