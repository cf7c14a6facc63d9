//! Bad requests against the real espeak-ng pool: each is a clear error naming what is wrong,
//! no lease stays behind, and the server keeps serving.

mod common;

use common::{Stack, json_of, pool_toml, request, snapshot};
use tonic::Code;
use tonic_prost::ProstCodec;
use voxpool_proto::prost;
use voxpool_proto::synthesis::v1::{self as pb, synthesize_request::Voice};
use voxpool_synthesis::adapters::registry::{AdapterOptions, builtin};

fn with_json(json: &str, text: &str) -> pb::SynthesizeRequest {
    pb::SynthesizeRequest {
        voice: Some(Voice::SnapshotJson(json.into())),
        text: text.into(),
        ..Default::default()
    }
}

#[tokio::test]
async fn bad_requests_are_clear_errors_and_the_server_keeps_serving() {
    let stack = Stack::start(
        &pool_toml("espeak-local", "espeak", 1, 1, 2),
        builtin(&AdapterOptions::default()),
    )
    .await;
    let good = snapshot("espeak", "espeak-local", "en-us", "{}");
    let good_json = json_of(&good);
    let mut tampered = good.clone();
    tampered.voice_id = "en-gb".into();

    let mut cases: Vec<(&str, pb::SynthesizeRequest, Code, &str)> = vec![
        (
            "unknown format value",
            pb::SynthesizeRequest {
                format: 99,
                ..request(&good, "hi")
            },
            Code::InvalidArgument,
            "invalid format: 99 is not a format",
        ),
        (
            "format the engine lacks",
            pb::SynthesizeRequest {
                format: pb::AudioFormat::Mp3 as i32,
                ..request(&good, "hi")
            },
            Code::InvalidArgument,
            "espeak cannot apply format = MP3",
        ),
        (
            "ogg opus",
            pb::SynthesizeRequest {
                format: pb::AudioFormat::OggOpus as i32,
                ..request(&good, "hi")
            },
            Code::InvalidArgument,
            "espeak cannot apply format = OGG_OPUS",
        ),
        (
            "sample rate the engine lacks",
            pb::SynthesizeRequest {
                sample_rate_hz: 16_000,
                ..request(&good, "hi")
            },
            Code::InvalidArgument,
            "invalid sample_rate_hz: espeak cannot apply sample_rate_hz = 16000",
        ),
        (
            "negative sample rate",
            pb::SynthesizeRequest {
                sample_rate_hz: -1,
                ..request(&good, "hi")
            },
            Code::InvalidArgument,
            "invalid sample_rate_hz",
        ),
        (
            "invalid snapshot JSON",
            with_json("{not json", "hi"),
            Code::InvalidArgument,
            "invalid snapshot_json",
        ),
        (
            "unknown key in snapshot JSON",
            with_json(
                &good_json.replace("\"voiceId\"", "\"pitch\":1,\"voiceId\""),
                "hi",
            ),
            Code::InvalidArgument,
            "invalid snapshot_json",
        ),
        (
            "lone surrogate in snapshot JSON",
            with_json(&good_json.replace("\"en-us\"", "\"\\ud800\""), "hi"),
            Code::InvalidArgument,
            "invalid snapshot_json",
        ),
        (
            "empty snapshot JSON",
            with_json("", "hi"),
            Code::InvalidArgument,
            "invalid snapshot_json",
        ),
        (
            "unknown provider",
            request(&snapshot("acme", "espeak-local", "x", "{}"), "hi"),
            Code::InvalidArgument,
            "unknown provider \"acme\"",
        ),
        (
            "provider of another pool",
            request(&snapshot("openai", "espeak-local", "alloy", "{}"), "hi"),
            Code::FailedPrecondition,
            "does not match pool \"espeak-local\"",
        ),
        (
            "tts model without pool",
            request(&snapshot("espeak", "nope", "en-us", "{}"), "hi"),
            Code::NotFound,
            "no pool serves tts model id \"nope\" (known pools: espeak-local)",
        ),
        (
            "digest mismatch",
            request(&tampered, "hi"),
            Code::InvalidArgument,
            "invalid digest",
        ),
        (
            "pitch out of range",
            request(
                &snapshot("espeak", "espeak-local", "en-us", r#"{"pitchPct":80}"#),
                "hi",
            ),
            Code::InvalidArgument,
            "params.pitchPct",
        ),
        (
            "rate the engine cannot reach",
            request(
                &snapshot("espeak", "espeak-local", "en-us", r#"{"rate":4}"#),
                "hi",
            ),
            Code::InvalidArgument,
            "params.rate",
        ),
        (
            "empty text",
            request(&good, ""),
            Code::InvalidArgument,
            "invalid text",
        ),
        (
            "whitespace-only text",
            request(&good, " \n\t  "),
            Code::InvalidArgument,
            "invalid text: must contain something to say",
        ),
        (
            "punctuation-only text",
            request(&good, "... !? — 🙂"),
            Code::InvalidArgument,
            "invalid text: has nothing to speak",
        ),
        (
            "10 MB text",
            request(&good, &"a".repeat(10 << 20)),
            Code::InvalidArgument,
            "over the limit of 20000",
        ),
        (
            "no voice",
            pb::SynthesizeRequest {
                text: "hi".into(),
                ..Default::default()
            },
            Code::InvalidArgument,
            "invalid voice",
        ),
        (
            "empty pack id",
            pb::SynthesizeRequest {
                voice: Some(Voice::PackId(String::new())),
                text: "hi".into(),
                ..Default::default()
            },
            Code::InvalidArgument,
            "invalid pack_id",
        ),
        (
            "overlong request id",
            pb::SynthesizeRequest {
                request_id: "r".repeat(129),
                ..request(&good, "hi")
            },
            Code::InvalidArgument,
            "invalid request_id",
        ),
        (
            "newline in the request id (a forged log line)",
            pb::SynthesizeRequest {
                request_id: "req-1\n2026-01-01T00:00:00Z ERROR forged".into(),
                ..request(&good, "hi")
            },
            Code::InvalidArgument,
            "invalid request_id: must not contain control or invisible formatting characters",
        ),
        (
            "unknown espeak voice",
            request(&snapshot("espeak", "espeak-local", "xx-nope", "{}"), "hi"),
            Code::InvalidArgument,
            "espeak-ng has no voice \"xx-nope\"",
        ),
    ];
    for (name, req, code, needle) in cases.drain(..) {
        let err = stack.synthesize(req).await.expect_err(name);
        assert_eq!(err.code(), code, "{name}: {err:?}");
        assert!(
            err.message().contains(needle),
            "{name}: {:?} does not contain {needle:?}",
            err.message()
        );
        assert_eq!(
            stack.in_flight("espeak-local").await,
            0,
            "{name}: a lease stayed behind"
        );
    }
    let ok = stack
        .synthesize(request(&good, "Still here."))
        .await
        .expect("the server keeps serving");
    assert_eq!(&ok.audio[0..4], b"RIFF");
}

/// Proto strings must be UTF-8, so invalid bytes never reach the service: tonic refuses the
/// request while decoding it (INTERNAL, as gRPC specifies for an unparseable request) and the
/// server keeps serving.
#[tokio::test]
async fn invalid_utf8_in_snapshot_json_is_refused_on_the_wire() {
    let stack = Stack::start(
        &pool_toml("espeak-local", "espeak", 1, 1, 2),
        builtin(&AdapterOptions::default()),
    )
    .await;
    // field 2 (snapshot_json) = 0xff 0xfe, field 4 (text) = "hi".
    let raw: Vec<u8> = vec![0x12, 2, 0xFF, 0xFE, 0x22, 2, b'h', b'i'];
    let channel =
        tonic::transport::Channel::from_shared(format!("http://{}", stack.synthesis_addr))
            .expect("url")
            .connect()
            .await
            .expect("connect");
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.expect("ready");
    let path = tonic::codegen::http::uri::PathAndQuery::from_static(
        "/voxpool.synthesis.v1.Synthesis/Synthesize",
    );
    let mut raw = tonic::Request::new(RawBytes(raw));
    raw.metadata_mut().insert(
        "authorization",
        "Bearer secret-client-tests".parse().expect("header"),
    );
    let err = grpc
        .unary::<RawBytes, pb::SynthesizeResponse, _>(raw, path, RawCodec::default())
        .await
        .expect_err("invalid UTF-8 must be refused");
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    assert!(err.message().contains("UTF-8"), "{}", err.message());
    let ok = stack
        .synthesize(request(
            &snapshot("espeak", "espeak-local", "en-us", "{}"),
            "ok",
        ))
        .await;
    assert!(ok.is_ok(), "{ok:?}");
}

/// A request body sent as raw protobuf bytes.
#[derive(Clone, Debug, Default)]
struct RawBytes(Vec<u8>);

impl prost::Message for RawBytes {
    fn encode_raw(&self, buf: &mut impl bytes::BufMut) {
        buf.put_slice(&self.0);
    }
    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: prost::encoding::WireType,
        buf: &mut impl bytes::Buf,
        ctx: prost::encoding::DecodeContext,
    ) -> Result<(), prost::DecodeError> {
        prost::encoding::skip_field(wire_type, tag, buf, ctx)
    }
    fn encoded_len(&self) -> usize {
        self.0.len()
    }
    fn clear(&mut self) {
        self.0.clear();
    }
}

type RawCodec = ProstCodec<RawBytes, pb::SynthesizeResponse>;
