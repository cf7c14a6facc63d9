//! Requests naming a pack id: synthesis asks the catalog to freeze it. A stand-in VoiceCatalog
//! (FreezeSnapshot only) serves known packs, a disabled pack and nothing else.

mod common;

use common::{Stack, pool_toml, scripted::Scripted, snapshot};
use tokio::net::TcpListener;
use tokio_stream::wrappers::TcpListenerStream;
use tonic::{Code, Request, Response, Status};
use voxpool_proto::{
    catalog::v1::{self as cpb, voice_catalog_server::VoiceCatalog},
    synthesis::v1::{self as pb, synthesize_request::Voice},
};
use voxpool_synthesis::adapters::TextLimit;

struct FakeCatalog;

#[tonic::async_trait]
impl VoiceCatalog for FakeCatalog {
    async fn list_voice_packs(
        &self,
        _: Request<cpb::ListVoicePacksRequest>,
    ) -> Result<Response<cpb::ListVoicePacksResponse>, Status> {
        Err(Status::unimplemented("not in this stand-in"))
    }
    async fn get_voice_pack(
        &self,
        _: Request<cpb::GetVoicePackRequest>,
    ) -> Result<Response<cpb::VoicePack>, Status> {
        Err(Status::unimplemented("not in this stand-in"))
    }
    async fn bind_voice_pack(
        &self,
        _: Request<cpb::BindVoicePackRequest>,
    ) -> Result<Response<cpb::BindVoicePackResponse>, Status> {
        Err(Status::unimplemented("not in this stand-in"))
    }
    async fn freeze_snapshot(
        &self,
        r: Request<cpb::FreezeSnapshotRequest>,
    ) -> Result<Response<cpb::VoicePackSnapshot>, Status> {
        match r.get_ref().pack_id.as_str() {
            "vp_alloy" => Ok(Response::new(
                snapshot("openai", "p", "alloy", r#"{"rate":1.1}"#).to_pb(),
            )),
            "vp_disabled" => Err(Status::failed_precondition(
                "voice pack \"vp_disabled\" is disabled",
            )),
            "vp_corrupt" => {
                let mut s = snapshot("openai", "p", "alloy", "{}").to_pb();
                s.tier = 0;
                Ok(Response::new(s))
            }
            other => Err(Status::not_found(format!("no voice pack {other:?}"))),
        }
    }
}

async fn start_catalog() -> String {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind catalog");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(cpb::voice_catalog_server::VoiceCatalogServer::new(
                FakeCatalog,
            ))
            .serve_with_incoming(TcpListenerStream::new(listener)),
    );
    format!("http://{addr}")
}

fn by_pack(id: &str) -> pb::SynthesizeRequest {
    pb::SynthesizeRequest {
        voice: Some(Voice::PackId(id.into())),
        text: "hi".into(),
        ..Default::default()
    }
}

#[tokio::test]
async fn a_pack_id_is_frozen_by_the_catalog_and_synthesized() {
    let (adapter, _) = Scripted::new("openai", TextLimit::Chars(4096), vec![]);
    let catalog = start_catalog().await;
    let stack = Stack::start_with_catalog(
        &pool_toml("p", "openai", 1, 1, 1),
        adapter.registry(),
        &catalog,
    )
    .await;
    let resp = stack
        .synthesize(by_pack("vp_alloy"))
        .await
        .expect("synthesized");
    assert_eq!(resp.attempts.len(), 1);
    let call = &adapter.calls()[0];
    assert_eq!(
        (call.voice_id.as_str(), call.params.rate),
        ("alloy", Some(1.1))
    );
}

#[tokio::test]
async fn catalog_refusals_pass_through_with_context() {
    let (adapter, _) = Scripted::new("openai", TextLimit::Chars(4096), vec![]);
    let catalog = start_catalog().await;
    let stack = Stack::start_with_catalog(
        &pool_toml("p", "openai", 1, 1, 1),
        adapter.registry(),
        &catalog,
    )
    .await;
    let cases = [
        (
            "vp_missing",
            Code::NotFound,
            "voice pack \"vp_missing\" not found in the catalog",
        ),
        (
            "vp_disabled",
            Code::FailedPrecondition,
            "voice pack \"vp_disabled\" cannot be used: voice pack \"vp_disabled\" is disabled",
        ),
        (
            "vp_corrupt",
            Code::Internal,
            "returned an unusable snapshot",
        ),
    ];
    for (id, code, needle) in cases {
        let err = stack.synthesize(by_pack(id)).await.unwrap_err();
        assert_eq!(err.code(), code, "{id}: {err:?}");
        assert!(err.message().contains(needle), "{id}: {}", err.message());
    }
    assert!(adapter.calls().is_empty());
}

#[tokio::test]
async fn an_unreachable_catalog_is_unavailable_naming_its_url() {
    let (adapter, _) = Scripted::new("openai", TextLimit::Chars(4096), vec![]);
    let stack = Stack::start_with_catalog(
        &pool_toml("p", "openai", 1, 1, 1),
        adapter.registry(),
        "http://127.0.0.1:1",
    )
    .await;
    let err = stack.synthesize(by_pack("vp_alloy")).await.unwrap_err();
    assert_eq!(err.code(), Code::Unavailable);
    assert!(
        err.message()
            .contains("the catalog at http://127.0.0.1:1 is unavailable"),
        "{}",
        err.message()
    );
}

/// A "catalog" that takes the connection and the request, then dies before it answers: it
/// reads the HTTP/2 preface and frames until the request's HEADERS frame (type 1) and drops
/// the socket, as a catalog process killed mid-request does.
async fn start_dying_catalog() -> String {
    use tokio::io::AsyncReadExt as _;
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind catalog");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut preface = [0u8; 24];
                if socket.read_exact(&mut preface).await.is_err() {
                    return;
                }
                loop {
                    let mut header = [0u8; 9];
                    if socket.read_exact(&mut header).await.is_err() {
                        return;
                    }
                    let len = u32::from_be_bytes([0, header[0], header[1], header[2]]) as usize;
                    let mut payload = vec![0u8; len];
                    if socket.read_exact(&mut payload).await.is_err() || header[3] == 1 {
                        return; // the request arrived: die without an answer
                    }
                }
            });
        }
    });
    format!("http://{addr}")
}

#[tokio::test]
async fn a_catalog_that_dies_mid_request_is_unavailable_with_a_retry_delay() {
    let (adapter, _) = Scripted::new("openai", TextLimit::Chars(4096), vec![]);
    let catalog = start_dying_catalog().await;
    let stack = Stack::start_with_catalog(
        &pool_toml("p", "openai", 1, 1, 1),
        adapter.registry(),
        &catalog,
    )
    .await;
    let err = stack.synthesize(by_pack("vp_alloy")).await.unwrap_err();
    assert_eq!(err.code(), Code::Unavailable, "{err:?}");
    assert!(
        err.message()
            .contains(&format!("the catalog at {catalog} is unavailable")),
        "{}",
        err.message()
    );
    let details = tonic_types::StatusExt::get_error_details(&err);
    assert_eq!(
        details.error_info().map(|i| i.reason.as_str()),
        Some("CATALOG_UNAVAILABLE"),
        "{err:?}"
    );
    assert!(
        details.retry_info().and_then(|r| r.retry_delay).is_some(),
        "a caller is told when to try again: {err:?}"
    );
    assert!(adapter.calls().is_empty(), "no vendor call without a voice");
}
