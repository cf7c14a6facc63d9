//! An in-process VoiceCatalog that knows a fixed set of pack ids (some disabled); only
//! GetVoicePack is implemented, which is all `voxctl batch` asks.
#![allow(dead_code)]

use std::{collections::HashMap, net::SocketAddr};

use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status};
use voxpool_proto::catalog::v1::{
    BindVoicePackRequest, BindVoicePackResponse, FreezeSnapshotRequest, GetVoicePackRequest,
    ListVoicePacksRequest, ListVoicePacksResponse, VoicePack, VoicePackSnapshot,
    voice_catalog_server::{VoiceCatalog, VoiceCatalogServer},
};

/// A running fake catalog; stops when dropped.
pub struct FakeCatalog {
    pub addr: SocketAddr,
    stop: CancellationToken,
}

/// Pack id → (enabled, tts model id).
struct Service(HashMap<String, (bool, String)>);

impl FakeCatalog {
    /// Serves packs `id -> enabled`, each pinned to the stack's pool.
    pub async fn start(packs: &[(&str, bool)]) -> Self {
        let pinned: Vec<(&str, bool, &str)> = packs
            .iter()
            .map(|(id, on)| (*id, *on, super::stack::POOL))
            .collect();
        Self::start_pinned(&pinned).await
    }

    /// Serves packs `(id, enabled, tts model id)`.
    pub async fn start_pinned(packs: &[(&str, bool, &str)]) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind fake catalog");
        let addr = listener.local_addr().expect("addr");
        let packs = packs
            .iter()
            .map(|(id, on, pool)| ((*id).to_owned(), (*on, (*pool).to_owned())))
            .collect();
        let stop = CancellationToken::new();
        let token = stop.clone();
        tokio::spawn(async move {
            tonic::transport::Server::builder()
                .add_service(VoiceCatalogServer::new(Service(packs)))
                .serve_with_incoming_shutdown(
                    tokio_stream::wrappers::TcpListenerStream::new(listener),
                    token.cancelled(),
                )
                .await
                .expect("fake catalog serve");
        });
        Self { addr, stop }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for FakeCatalog {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

#[tonic::async_trait]
impl VoiceCatalog for Service {
    async fn list_voice_packs(
        &self,
        _: Request<ListVoicePacksRequest>,
    ) -> Result<Response<ListVoicePacksResponse>, Status> {
        Err(Status::unimplemented("fake"))
    }

    async fn get_voice_pack(
        &self,
        request: Request<GetVoicePackRequest>,
    ) -> Result<Response<VoicePack>, Status> {
        let id = request.into_inner().id;
        match self.0.get(&id) {
            Some((enabled, pool)) => Ok(Response::new(VoicePack {
                id,
                enabled: *enabled,
                tts_model_id: pool.clone(),
                version: 1,
                ..VoicePack::default()
            })),
            None => Err(Status::not_found(format!("voice pack {id:?} not found"))),
        }
    }

    async fn freeze_snapshot(
        &self,
        _: Request<FreezeSnapshotRequest>,
    ) -> Result<Response<VoicePackSnapshot>, Status> {
        Err(Status::unimplemented("fake"))
    }

    async fn bind_voice_pack(
        &self,
        _: Request<BindVoicePackRequest>,
    ) -> Result<Response<BindVoicePackResponse>, Status> {
        Err(Status::unimplemented("fake"))
    }
}
