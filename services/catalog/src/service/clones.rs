//! The clone RPCs of `VoiceCatalogAdmin`: CloneVoice, ListClones, DeleteClone, ImportClones.

use tonic::{Request, Response, Status};
use voxpool_proto::catalog::v1 as pb;

use super::AdminService;

impl AdminService {
    pub(super) async fn clone_voice_rpc(
        &self,
        request: Request<pb::CloneVoiceRequest>,
    ) -> Result<Response<pb::ListClonesResponse>, Status> {
        self.authorize(request.metadata())?;
        Err(Status::unimplemented("CloneVoice is being built"))
    }

    pub(super) async fn list_clones_rpc(
        &self,
        request: Request<pb::ListClonesRequest>,
    ) -> Result<Response<pb::ListClonesResponse>, Status> {
        self.authorize(request.metadata())?;
        Err(Status::unimplemented("ListClones is being built"))
    }

    pub(super) async fn delete_clone_rpc(
        &self,
        request: Request<pb::DeleteCloneRequest>,
    ) -> Result<Response<pb::VoiceClone>, Status> {
        self.authorize(request.metadata())?;
        Err(Status::unimplemented("DeleteClone is being built"))
    }

    pub(super) async fn import_clones_rpc(
        &self,
        request: Request<pb::ImportClonesRequest>,
    ) -> Result<Response<pb::ImportClonesResponse>, Status> {
        self.authorize(request.metadata())?;
        Err(Status::unimplemented("ImportClones is being built"))
    }
}
