//! gRPC-level behaviour over an in-process server, on SQLite and PostgreSQL (`db_test!`).

mod common;

use common::{Backend, TestServer, authed, bad_fields, create, pack_pb, with_token};
use tonic::{Code, Request};
use voxpool_domain::snapshot::Snapshot;
use voxpool_proto::catalog::v1 as pb;
use voxpool_runtime::auth::AdminAuth;

const RICH_CARD: &str = include_str!("fixtures/rich_card.json");

fn mask(paths: &[&str]) -> Option<prost_types::FieldMask> {
    Some(prost_types::FieldMask {
        paths: paths.iter().map(|p| (*p).to_owned()).collect(),
    })
}

async fn admin_rpcs_are_refused_with_instructions_when_no_token_is_configured(backend: Backend) {
    let server = TestServer::start_with_auth(backend, AdminAuth::disabled()).await;
    let err = server
        .admin()
        .await
        .create_voice_pack(authed(pb::CreateVoicePackRequest {
            voice_pack: Some(pack_pb("en-us")),
        }))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition);
    assert!(
        err.message().contains("VOXPOOL_ADMIN_TOKEN"),
        "{}",
        err.message()
    );
    assert!(
        err.message().contains("--admin-token-file"),
        "{}",
        err.message()
    );
}
db_test!(admin_rpcs_are_refused_with_instructions_when_no_token_is_configured);

async fn admin_rpcs_need_the_right_bearer_token(backend: Backend) {
    let server = TestServer::start(backend).await;
    let mut admin = server.admin().await;
    let wrong = admin
        .list_all_voice_packs(with_token(pb::ListVoicePacksRequest::default(), "guess"))
        .await
        .unwrap_err();
    assert_eq!(wrong.code(), Code::Unauthenticated);
    assert!(!wrong.message().contains(common::TOKEN));
    let missing = admin
        .disable_voice_pack(Request::new(pb::DisableVoicePackRequest {
            id: "vp_x".into(),
        }))
        .await
        .unwrap_err();
    assert_eq!(missing.code(), Code::Unauthenticated);
    admin
        .list_all_voice_packs(authed(pb::ListVoicePacksRequest::default()))
        .await
        .expect("right token");
}
db_test!(admin_rpcs_need_the_right_bearer_token);

async fn each_invalid_field_is_invalid_argument_naming_it(backend: Backend) {
    let server = TestServer::start(backend).await;
    let mut admin = server.admin().await;
    type Breaker = fn(&mut pb::VoicePack);
    let cases: &[(&str, Breaker)] = &[
        ("voice_pack.provider", |p| p.provider = "acme".into()),
        ("voice_pack.params.pitch_pct", |p| {
            p.params = Some(pb::VoiceParams {
                pitch_pct: Some(50.5),
                ..Default::default()
            });
        }),
        ("voice_pack.params.rate", |p| {
            p.params = Some(pb::VoiceParams {
                rate: Some(0.2),
                ..Default::default()
            });
        }),
        ("voice_pack.params.rate", |p| {
            p.params = Some(pb::VoiceParams {
                rate: Some(f64::INFINITY),
                ..Default::default()
            });
        }),
        ("voice_pack.params.volume_pct", |p| {
            p.params = Some(pb::VoiceParams {
                volume_pct: Some(-100.5),
                ..Default::default()
            });
        }),
        ("voice_pack.params.pitch_pct", |p| {
            p.params = Some(pb::VoiceParams {
                pitch_pct: Some(f64::NAN),
                ..Default::default()
            });
        }),
        ("voice_pack.voice_id", |p| p.voice_id.clear()),
        ("voice_pack.model", |p| p.model.clear()),
        ("voice_pack.tts_model_id", |p| p.tts_model_id.clear()),
        ("voice_pack.upstream_ids", |p| {
            p.kind = pb::voice_pack::Kind::Cloned as i32;
        }),
        ("voice_pack.display_name", |p| p.display_name.clear()),
        ("voice_pack.display_name", |p| {
            p.display_name = "x".repeat(201);
        }),
        ("voice_pack.tier", |p| p.tier = 0),
        ("voice_pack.extra[\"Bad-Key\"]", |p| {
            p.extra.insert("Bad-Key".into(), "v".into());
        }),
        ("voice_pack.extra[\"long\"]", |p| {
            p.extra.insert("long".into(), "v".repeat(257));
        }),
        ("voice_pack.locales[0]", |p| {
            p.locales = vec!["en_US".into()];
        }),
    ];
    for (field, breaker) in cases {
        let mut pack = pack_pb("en-us");
        breaker(&mut pack);
        let err = admin
            .create_voice_pack(authed(pb::CreateVoicePackRequest {
                voice_pack: Some(pack),
            }))
            .await
            .unwrap_err();
        assert_eq!(
            err.code(),
            Code::InvalidArgument,
            "{field}: {}",
            err.message()
        );
        assert_eq!(bad_fields(&err), [*field], "{}", err.message());
        assert!(err.message().contains(field), "{}", err.message());
    }
    let missing = admin
        .create_voice_pack(authed(pb::CreateVoicePackRequest { voice_pack: None }))
        .await
        .unwrap_err();
    assert_eq!(bad_fields(&missing), ["voice_pack"]);
    // The server kept serving: a valid pack is still accepted.
    create(&server, pack_pb("en-us")).await;
}
db_test!(each_invalid_field_is_invalid_argument_naming_it);

/// The catalog started with `--config deploy/config/example.toml`.
async fn with_example_pools(backend: Backend) -> TestServer {
    let config =
        voxpool_config::Config::from_toml_str(include_str!("../../../deploy/config/example.toml"))
            .expect("example config");
    let pools = voxpool_catalog::pools::ServedPools::from_config(&config, "example.toml");
    TestServer::start_with_pools(backend, pools).await
}

async fn with_known_pools_a_pack_no_pool_serves_is_refused_and_nothing_is_stored(backend: Backend) {
    let server = with_example_pools(backend).await;
    let mut admin = server.admin().await;
    let unserved = pb::VoicePack {
        tts_model_id: "espeak-remote".into(),
        ..pack_pb("en-us")
    };
    let status = admin
        .create_voice_pack(authed(pb::CreateVoicePackRequest {
            voice_pack: Some(unserved),
        }))
        .await
        .expect_err("no pool serves espeak-remote");
    assert_eq!(status.code(), Code::InvalidArgument);
    assert_eq!(bad_fields(&status), ["voice_pack.tts_model_id"]);
    assert!(
        status.message().contains("espeak-local"),
        "names the pools: {}",
        status.message()
    );
    let wrong_provider = pb::VoicePack {
        provider: "openai".into(),
        ..pack_pb("en-us")
    };
    let status = admin
        .create_voice_pack(authed(pb::CreateVoicePackRequest {
            voice_pack: Some(wrong_provider),
        }))
        .await
        .expect_err("espeak-local is an espeak pool");
    assert_eq!(bad_fields(&status), ["voice_pack.provider"]);
    let listed = admin
        .list_all_voice_packs(authed(pb::ListVoicePacksRequest::default()))
        .await
        .expect("list")
        .into_inner();
    assert!(listed.voice_packs.is_empty(), "nothing stored: {listed:?}");

    // A served pack is accepted; moving it to an unserved pool is refused like a create.
    let pack = create(&server, pack_pb("en-us")).await;
    let status = admin
        .update_voice_pack(authed(pb::UpdateVoicePackRequest {
            voice_pack: Some(pb::VoicePack {
                id: pack.id.clone(),
                tts_model_id: "espeak-remote".into(),
                ..Default::default()
            }),
            update_mask: mask(&["tts_model_id"]),
            expected_version: 0,
        }))
        .await
        .expect_err("update to an unserved pool");
    assert_eq!(bad_fields(&status), ["voice_pack.tts_model_id"]);
}
db_test!(with_known_pools_a_pack_no_pool_serves_is_refused_and_nothing_is_stored);

async fn duplicate_identity_is_already_exists_naming_the_pack(backend: Backend) {
    let server = TestServer::start(backend).await;
    let first = create(&server, pack_pb("en-us")).await;
    let mut again = pack_pb("en-us");
    again.display_name = "Same voice, new name".into();
    let err = server
        .admin()
        .await
        .create_voice_pack(authed(pb::CreateVoicePackRequest {
            voice_pack: Some(again),
        }))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::AlreadyExists);
    assert!(err.message().contains(&first.id), "{}", err.message());
}
db_test!(duplicate_identity_is_already_exists_naming_the_pack);

async fn update_applies_only_masked_fields_and_checks_the_version(backend: Backend) {
    let server = TestServer::start(backend).await;
    let mut admin = server.admin().await;
    let created = create(&server, pack_pb("en-us")).await;
    let patch = pb::VoicePack {
        id: created.id.clone(),
        display_name: "Renamed".into(),
        description: "not in the mask".into(),
        params: Some(pb::VoiceParams {
            rate: Some(1.5),
            ..Default::default()
        }),
        ..Default::default()
    };
    let updated = admin
        .update_voice_pack(authed(pb::UpdateVoicePackRequest {
            voice_pack: Some(patch.clone()),
            update_mask: mask(&["display_name", "params.rate"]),
            expected_version: 1,
        }))
        .await
        .expect("update")
        .into_inner();
    assert_eq!(
        (updated.version, updated.display_name.as_str()),
        (2, "Renamed")
    );
    assert_eq!(updated.description, "");
    assert_eq!(updated.params.and_then(|p| p.rate), Some(1.5));
    assert_eq!(updated.voice_id, "en-us");

    let stale = admin
        .update_voice_pack(authed(pb::UpdateVoicePackRequest {
            voice_pack: Some(patch.clone()),
            update_mask: mask(&["display_name"]),
            expected_version: 1,
        }))
        .await
        .unwrap_err();
    assert_eq!(stale.code(), Code::Aborted);
    assert!(stale.message().contains("version 2"), "{}", stale.message());

    let bad_path = admin
        .update_voice_pack(authed(pb::UpdateVoicePackRequest {
            voice_pack: Some(patch.clone()),
            update_mask: mask(&["display_name", "displayName", "version"]),
            expected_version: 0,
        }))
        .await
        .unwrap_err();
    assert_eq!(
        bad_fields(&bad_path),
        ["update_mask.paths[1]", "update_mask.paths[2]"]
    );
    let empty = admin
        .update_voice_pack(authed(pb::UpdateVoicePackRequest {
            voice_pack: Some(patch.clone()),
            update_mask: None,
            expected_version: 0,
        }))
        .await
        .unwrap_err();
    assert_eq!(bad_fields(&empty), ["update_mask"]);
    let invalid_result = admin
        .update_voice_pack(authed(pb::UpdateVoicePackRequest {
            voice_pack: Some(pb::VoicePack {
                id: created.id.clone(),
                ..Default::default()
            }),
            update_mask: mask(&["tier"]),
            expected_version: 0,
        }))
        .await
        .unwrap_err();
    assert_eq!(bad_fields(&invalid_result), ["voice_pack.tier"]);
    let unknown = admin
        .update_voice_pack(authed(pb::UpdateVoicePackRequest {
            voice_pack: Some(pb::VoicePack {
                id: "vp_missing".into(),
                ..patch
            }),
            update_mask: mask(&["display_name"]),
            expected_version: 0,
        }))
        .await
        .unwrap_err();
    assert_eq!(unknown.code(), Code::NotFound);
}
db_test!(update_applies_only_masked_fields_and_checks_the_version);

async fn list_pages_with_opaque_tokens_bound_to_the_filter(backend: Backend) {
    let server = TestServer::start(backend).await;
    let mut ids = Vec::new();
    for i in 0..7 {
        ids.push(create(&server, pack_pb(&format!("v{i}"))).await.id);
    }
    let mut catalog = server.catalog().await;
    let mut seen = Vec::new();
    let mut token = String::new();
    let mut pages = 0;
    loop {
        let page = catalog
            .list_voice_packs(pb::ListVoicePacksRequest {
                page_size: 3,
                page_token: token.clone(),
                filter: "tier=LITE".into(),
            })
            .await
            .expect("list")
            .into_inner();
        pages += 1;
        seen.extend(page.voice_packs.into_iter().map(|p| p.id));
        if page.next_page_token.is_empty() {
            break;
        }
        token = page.next_page_token;
    }
    assert_eq!((pages, seen), (3, ids));

    let first = catalog
        .list_voice_packs(pb::ListVoicePacksRequest {
            page_size: 3,
            filter: "tier=LITE".into(),
            ..Default::default()
        })
        .await
        .expect("list")
        .into_inner();
    let other_filter = catalog
        .list_voice_packs(pb::ListVoicePacksRequest {
            page_size: 3,
            page_token: first.next_page_token.clone(),
            filter: "tier=PRO".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(bad_fields(&other_filter), ["page_token"]);
    for (size, ok) in [(0, true), (100, true), (101, false), (-1, false)] {
        let r = catalog
            .list_voice_packs(pb::ListVoicePacksRequest {
                page_size: size,
                ..Default::default()
            })
            .await;
        match r {
            Ok(_) => assert!(ok, "page_size {size} accepted"),
            Err(e) => {
                assert!(!ok, "page_size {size} refused");
                assert_eq!(bad_fields(&e), ["page_size"]);
                assert!(e.message().contains("100"), "{}", e.message());
            }
        }
    }
    let bad_filter = catalog
        .list_voice_packs(pb::ListVoicePacksRequest {
            filter: "color=red".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(bad_fields(&bad_filter), ["filter"]);
    let garbage = catalog
        .list_voice_packs(pb::ListVoicePacksRequest {
            page_token: "garbage".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(bad_fields(&garbage), ["page_token"]);
}
db_test!(list_pages_with_opaque_tokens_bound_to_the_filter);

async fn disabled_packs_leave_the_market_but_stay_readable_and_unfreezable(backend: Backend) {
    let server = TestServer::start(backend).await;
    let pack = create(&server, pack_pb("en-us")).await;
    let mut admin = server.admin().await;
    let mut catalog = server.catalog().await;
    let disabled = admin
        .disable_voice_pack(authed(pb::DisableVoicePackRequest {
            id: pack.id.clone(),
        }))
        .await
        .expect("disable")
        .into_inner();
    assert!(!disabled.enabled);
    let market = catalog
        .list_voice_packs(pb::ListVoicePacksRequest::default())
        .await
        .expect("list")
        .into_inner();
    assert!(market.voice_packs.is_empty());
    let everything = admin
        .list_all_voice_packs(authed(pb::ListVoicePacksRequest::default()))
        .await
        .expect("all")
        .into_inner();
    assert_eq!(everything.voice_packs.len(), 1);
    let got = catalog
        .get_voice_pack(pb::GetVoicePackRequest {
            id: pack.id.clone(),
        })
        .await
        .expect("get")
        .into_inner();
    assert!(!got.enabled);
    let err = catalog
        .freeze_snapshot(pb::FreezeSnapshotRequest {
            pack_id: pack.id.clone(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition);
    assert!(err.message().contains("disabled"), "{}", err.message());
    let err = catalog
        .bind_voice_pack(pb::BindVoicePackRequest {
            pack_id: pack.id.clone(),
            card_json: "{}".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition);
    let err = catalog
        .freeze_snapshot(pb::FreezeSnapshotRequest {
            pack_id: "vp_missing".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
}
db_test!(disabled_packs_leave_the_market_but_stay_readable_and_unfreezable);

async fn bind_keeps_every_other_byte_of_the_card(backend: Backend) {
    let server = TestServer::start(backend).await;
    let pack = create(&server, pack_pb("en-us")).await;
    let response = server
        .catalog()
        .await
        .bind_voice_pack(pb::BindVoicePackRequest {
            pack_id: pack.id.clone(),
            card_json: RICH_CARD.into(),
        })
        .await
        .expect("bind")
        .into_inner();
    let snapshot = Snapshot::from_pb(&response.snapshot.expect("snapshot")).expect("snapshot");
    snapshot.verify_digest().expect("digest");
    let snapshot_json = voxpool_catalog::freeze::card_json(&snapshot);
    let last = r#""airi_like_but_not": {"modules": "not ours"}"#;
    let expected = RICH_CARD.replacen(
        last,
        &format!(r#"{last},"airi":{{"modules":{{"speech":{{"voicePack":{snapshot_json}}}}}}}"#),
        1,
    );
    assert_eq!(response.card_json, expected);
    let card: serde_json::Value = serde_json::from_str(&response.card_json).expect("json");
    let stored = &card["data"]["extensions"]["airi"]["modules"]["speech"]["voicePack"];
    let stored = Snapshot::from_json(&stored.to_string()).expect("stored snapshot");
    assert_eq!(stored, snapshot);
    assert_eq!(stored.pack_id, pack.id);
}
db_test!(bind_keeps_every_other_byte_of_the_card);

async fn bind_refuses_cards_that_are_not_objects_invalid_or_too_big(backend: Backend) {
    let server = TestServer::start(backend).await;
    let pack = create(&server, pack_pb("en-us")).await;
    let mut catalog = server.catalog().await;
    let big = format!(r#"{{"pad":"{}"}}"#, "x".repeat(1_048_576));
    for (card, needle) in [
        ("[]".to_owned(), "must be a JSON object"),
        ("{\"data\":".to_owned(), "not valid JSON"),
        (big, "1 MiB (1048576 bytes)"),
        (
            r#"{"data":{"extensions":[]}}"#.to_owned(),
            "data.extensions must be a JSON object",
        ),
    ] {
        let err = catalog
            .bind_voice_pack(pb::BindVoicePackRequest {
                pack_id: pack.id.clone(),
                card_json: card,
            })
            .await
            .unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument);
        assert_eq!(bad_fields(&err), ["card_json"]);
        assert!(err.message().contains(needle), "{}", err.message());
    }
}
db_test!(bind_refuses_cards_that_are_not_objects_invalid_or_too_big);

/// Invariant 7 of docs/ARCHITECTURE.md over the wire: freeze and bind, then edit and disable the pack; the bound
/// card and the snapshot keep their bytes and digest, and a new freeze carries the new version.
async fn bound_cards_do_not_drift_when_the_pack_is_edited_or_disabled(backend: Backend) {
    let server = TestServer::start(backend).await;
    let pack = create(&server, pack_pb("en-us")).await;
    let mut catalog = server.catalog().await;
    let mut admin = server.admin().await;
    let frozen = catalog
        .freeze_snapshot(pb::FreezeSnapshotRequest {
            pack_id: pack.id.clone(),
        })
        .await
        .expect("freeze")
        .into_inner();
    let bound = catalog
        .bind_voice_pack(pb::BindVoicePackRequest {
            pack_id: pack.id.clone(),
            card_json: RICH_CARD.into(),
        })
        .await
        .expect("bind")
        .into_inner();
    let card_before = bound.card_json.clone();

    admin
        .update_voice_pack(authed(pb::UpdateVoicePackRequest {
            voice_pack: Some(pb::VoicePack {
                id: pack.id.clone(),
                params: Some(pb::VoiceParams {
                    pitch_pct: Some(25.0),
                    rate: Some(0.5),
                    volume_pct: Some(-20.0),
                }),
                ..Default::default()
            }),
            update_mask: mask(&["params"]),
            expected_version: 1,
        }))
        .await
        .expect("update");
    admin
        .disable_voice_pack(authed(pb::DisableVoicePackRequest {
            id: pack.id.clone(),
        }))
        .await
        .expect("disable");

    let card: serde_json::Value = serde_json::from_str(&card_before).expect("card");
    let kept = Snapshot::from_json(
        &card["data"]["extensions"]["airi"]["modules"]["speech"]["voicePack"].to_string(),
    )
    .expect("kept");
    kept.verify_digest().expect("digest still valid");
    assert_eq!(kept.pack_version, 1);
    assert_eq!(kept.params, voxpool_domain::snapshot::Params::default());
    let frozen_kept = Snapshot::from_pb(&frozen).expect("frozen");
    frozen_kept
        .verify_digest()
        .expect("frozen digest still valid");
    assert_eq!(bound.card_json, card_before);

    let refused = catalog
        .freeze_snapshot(pb::FreezeSnapshotRequest {
            pack_id: pack.id.clone(),
        })
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::FailedPrecondition);
    admin
        .enable_voice_pack(authed(pb::EnableVoicePackRequest {
            id: pack.id.clone(),
        }))
        .await
        .expect("enable");
    let fresh = catalog
        .freeze_snapshot(pb::FreezeSnapshotRequest {
            pack_id: pack.id.clone(),
        })
        .await
        .expect("freeze")
        .into_inner();
    assert_eq!(fresh.pack_version, 4);
    assert_eq!(fresh.params.and_then(|p| p.pitch_pct), Some(25.0));
    assert_ne!(fresh.digest, frozen.digest);

    let revisions = admin
        .list_voice_pack_revisions(authed(pb::ListVoicePackRevisionsRequest {
            pack_id: pack.id.clone(),
        }))
        .await
        .expect("revisions")
        .into_inner()
        .revisions;
    let summary: Vec<_> = revisions
        .iter()
        .map(|r| (r.version, r.action.as_str()))
        .collect();
    assert_eq!(
        summary,
        [(1, "create"), (2, "update"), (3, "disable"), (4, "enable")]
    );
    assert_eq!(
        revisions[1]
            .voice_pack
            .as_ref()
            .and_then(|p| p.params)
            .and_then(|p| p.rate),
        Some(0.5)
    );
}
db_test!(bound_cards_do_not_drift_when_the_pack_is_edited_or_disabled);

async fn health_reports_serving_for_the_process_and_both_services(backend: Backend) {
    use tonic_health::pb::{
        HealthCheckRequest, health_check_response::ServingStatus, health_client::HealthClient,
    };
    let server = TestServer::start(backend).await;
    let mut health = HealthClient::new(server.channel().await);
    for service in [
        "",
        "voxpool.catalog.v1.VoiceCatalog",
        "voxpool.catalog.v1.VoiceCatalogAdmin",
    ] {
        let mut watch = health
            .watch(HealthCheckRequest {
                service: service.into(),
            })
            .await
            .expect("watch")
            .into_inner();
        loop {
            let status = watch
                .message()
                .await
                .expect("stream")
                .expect("message")
                .status;
            if status == ServingStatus::Serving as i32 {
                break;
            }
        }
    }
}
db_test!(health_reports_serving_for_the_process_and_both_services);

/// PostgreSQL only: stopping the database turns health NOT_SERVING.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn health_turns_not_serving_when_postgres_stops() {
    use tonic_health::pb::{
        HealthCheckRequest, health_check_response::ServingStatus, health_client::HealthClient,
    };
    let mut pg = voxpool_testkit::PostgresServer::start();
    let url = pg.create_database();
    let repo = voxpool_catalog::server::open_repository(&url, 2)
        .await
        .expect("open");
    let server =
        TestServer::start_on(repo, common::TestDb::external(url), AdminAuth::disabled()).await;
    let mut health = HealthClient::new(server.channel().await);
    let mut watch = health
        .watch(HealthCheckRequest {
            service: String::new(),
        })
        .await
        .expect("watch")
        .into_inner();
    let mut next = async || {
        watch
            .message()
            .await
            .expect("stream")
            .expect("message")
            .status
    };
    while next().await != ServingStatus::Serving as i32 {}
    pg.stop();
    let deadline = std::time::Duration::from_secs(30);
    tokio::time::timeout(deadline, async {
        while next().await != ServingStatus::NotServing as i32 {}
    })
    .await
    .expect("NOT_SERVING within 30 s of the database stopping");
}
