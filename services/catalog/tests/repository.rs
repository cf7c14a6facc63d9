//! Repository conformance suite: every test runs on SQLite and on PostgreSQL (`db_test!`).

mod common;

use std::{collections::BTreeSet, sync::Arc};

use common::{Backend, repo, spec};
use sea_orm::ConnectionTrait;
use voxpool_catalog::{
    error::CatalogError,
    filter::Filter,
    freeze::freeze,
    model::{Action, VoicePack},
    page_token::Cursor,
    repo::{ListQuery, PackRepository},
};
use voxpool_domain::snapshot::{Params, Tier};

async fn all(repo: &dyn PackRepository, enabled_only: bool, filter: &str) -> Vec<String> {
    let query = ListQuery {
        enabled_only,
        filter: Filter::parse(filter).expect("filter"),
        after: None,
        limit: 1_000,
    };
    repo.list(&query)
        .await
        .expect("list")
        .into_iter()
        .map(|p| p.id)
        .collect()
}

async fn create_then_get_returns_the_stored_pack(backend: Backend) {
    let (repo, _db) = repo(backend).await;
    let mut s = spec("en-us");
    s.params = Params {
        pitch_pct: Some(-12.5),
        rate: Some(1.25),
        volume_pct: None,
    };
    s.extra.insert("style".into(), "calm 🌙".into());
    let created = repo.create(s.clone()).await.expect("create");
    assert!(
        created.id.starts_with("vp_") && created.id.len() == 27,
        "{}",
        created.id
    );
    assert_eq!((created.version, created.enabled), (1, true));
    assert_eq!(created.create_time, created.update_time);
    let got = repo.get(&created.id).await.expect("get");
    assert_eq!(got, created);
    assert_eq!(got.spec, s);
}
db_test!(create_then_get_returns_the_stored_pack);

async fn get_of_an_unknown_id_is_not_found(backend: Backend) {
    let (repo, _db) = repo(backend).await;
    assert!(
        matches!(repo.get("vp_nope").await, Err(CatalogError::NotFound { id }) if id == "vp_nope")
    );
    assert!(matches!(
        repo.revisions("vp_nope").await,
        Err(CatalogError::NotFound { .. })
    ));
    assert!(matches!(
        repo.set_enabled("vp_nope", false).await,
        Err(CatalogError::NotFound { .. })
    ));
}
db_test!(get_of_an_unknown_id_is_not_found);

async fn same_identity_twice_is_already_exists_naming_the_existing_pack(backend: Backend) {
    let (repo, _db) = repo(backend).await;
    let first = repo.create(spec("en-us")).await.expect("create");
    let mut again = spec("en-us");
    again.display_name = "Another name".into();
    again.tier = Tier::Premium;
    again.locales = vec!["en-GB".into()];
    match repo.create(again).await {
        Err(CatalogError::AlreadyExists { existing_id }) => assert_eq!(existing_id, first.id),
        other => panic!("expected AlreadyExists, got {other:?}"),
    }
    assert_eq!(all(&repo, false, "").await, [first.id]);
}
db_test!(same_identity_twice_is_already_exists_naming_the_existing_pack);

async fn same_voice_with_different_params_or_extra_is_a_different_pack(backend: Backend) {
    let (repo, _db) = repo(backend).await;
    let plain = repo.create(spec("en-us")).await.expect("plain");
    let mut faster = spec("en-us");
    faster.params.rate = Some(1.5);
    let faster = repo.create(faster).await.expect("faster");
    let mut styled = spec("en-us");
    styled.extra.insert("style".into(), "cheerful".into());
    let styled = repo.create(styled).await.expect("styled");
    assert_eq!(all(&repo, true, "").await, [plain.id, faster.id, styled.id]);
}
db_test!(same_voice_with_different_params_or_extra_is_a_different_pack);

async fn list_pages_in_create_order_without_gaps_or_repeats(backend: Backend) {
    let (repo, _db) = repo(backend).await;
    let mut ids = Vec::new();
    for i in 0..7 {
        ids.push(
            repo.create(spec(&format!("v{i}")))
                .await
                .expect("create")
                .id,
        );
    }
    let mut seen = Vec::new();
    let mut after = None;
    loop {
        let page = repo
            .list(&ListQuery {
                enabled_only: true,
                filter: Filter::default(),
                after: after.clone(),
                limit: 3,
            })
            .await
            .expect("list");
        let Some(last) = page.last() else { break };
        after = Some(Cursor {
            create_time_us: last.create_time.timestamp_micros(),
            id: last.id.clone(),
        });
        seen.extend(page.into_iter().map(|p| p.id));
    }
    assert_eq!(seen, ids);
}
db_test!(list_pages_in_create_order_without_gaps_or_repeats);

/// Packs created in the same microsecond are ordered by id and still paged exactly once.
async fn list_pages_break_create_time_ties_by_id(backend: Backend) {
    let (repo, _db) = repo(backend).await;
    let mut ids = Vec::new();
    for i in 0..7 {
        ids.push(
            repo.create(spec(&format!("v{i}")))
                .await
                .expect("create")
                .id,
        );
    }
    repo.connection()
        .execute_unprepared("UPDATE voice_packs SET create_time_us = 42")
        .await
        .expect("raw update");
    ids.sort();
    let mut seen = Vec::new();
    let mut after = None;
    loop {
        let query = ListQuery {
            enabled_only: false,
            filter: Filter::default(),
            after: after.clone(),
            limit: 2,
        };
        let page = repo.list(&query).await.expect("list");
        let Some(last) = page.last() else { break };
        after = Some(Cursor {
            create_time_us: 42,
            id: last.id.clone(),
        });
        seen.extend(page.into_iter().map(|p| p.id));
    }
    assert_eq!(seen, ids);
}
db_test!(list_pages_break_create_time_ties_by_id);

async fn list_filters_by_tier_provider_locale_and_tts_model_id(backend: Backend) {
    let (repo, _db) = repo(backend).await;
    let a = repo.create(spec("a")).await.expect("a").id;
    let mut s = spec("b");
    s.tier = Tier::Pro;
    s.locales = vec!["de-DE".into(), "en-US".into()];
    let b = repo.create(s).await.expect("b").id;
    let mut s = spec("c");
    s.provider = "openai".into();
    s.model = "gpt-4o-mini-tts".into();
    s.tts_model_id = "openai-speech".into();
    s.tier = Tier::Pro;
    s.locales = vec!["en-GB".into()];
    let c = repo.create(s).await.expect("c").id;
    assert_eq!(all(&repo, true, "tier=PRO").await, [b.clone(), c.clone()]);
    assert_eq!(
        all(&repo, true, "provider=openai").await,
        std::slice::from_ref(&c)
    );
    assert_eq!(
        all(&repo, true, "locale=en-us").await,
        [a.clone(), b.clone()]
    );
    assert_eq!(
        all(&repo, true, "locale=de-DE AND tier=PRO").await,
        std::slice::from_ref(&b)
    );
    assert_eq!(
        all(&repo, true, "tts_model_id=espeak-local AND tier=LITE").await,
        [a]
    );
    assert_eq!(all(&repo, true, "locale=en").await, Vec::<String>::new());
}
db_test!(list_filters_by_tier_provider_locale_and_tts_model_id);

async fn update_replaces_content_bumps_version_and_keeps_create_time(backend: Backend) {
    let (repo, _db) = repo(backend).await;
    let created = repo.create(spec("en-us")).await.expect("create");
    let updated = repo
        .update(&created.id, Some(1), &|current: &VoicePack| {
            let mut s = current.spec.clone();
            s.display_name = "Renamed".into();
            s.params.pitch_pct = Some(20.0);
            Ok(s)
        })
        .await
        .expect("update");
    assert_eq!(updated.version, 2);
    assert_eq!(updated.create_time, created.create_time);
    assert!(updated.update_time >= created.update_time);
    assert_eq!(repo.get(&created.id).await.expect("get"), updated);
    assert_eq!(updated.spec.params.pitch_pct, Some(20.0));
}
db_test!(update_replaces_content_bumps_version_and_keeps_create_time);

async fn stale_expected_version_is_a_version_conflict(backend: Backend) {
    let (repo, _db) = repo(backend).await;
    let id = repo.create(spec("en-us")).await.expect("create").id;
    let rename = |current: &VoicePack| {
        let mut s = current.spec.clone();
        s.display_name.push('!');
        Ok(s)
    };
    repo.update(&id, Some(1), &rename)
        .await
        .expect("first update");
    match repo.update(&id, Some(1), &rename).await {
        Err(CatalogError::VersionConflict {
            expected: 1,
            current: 2,
            ..
        }) => {}
        other => panic!("expected VersionConflict, got {other:?}"),
    }
    assert_eq!(repo.get(&id).await.expect("get").version, 2);
}
db_test!(stale_expected_version_is_a_version_conflict);

async fn update_onto_another_packs_identity_is_already_exists(backend: Backend) {
    let (repo, _db) = repo(backend).await;
    let a = repo.create(spec("a")).await.expect("a");
    let b = repo.create(spec("b")).await.expect("b");
    let result = repo
        .update(&b.id, None, &|current: &VoicePack| {
            let mut s = current.spec.clone();
            s.voice_id = "a".into();
            Ok(s)
        })
        .await;
    match result {
        Err(CatalogError::AlreadyExists { existing_id }) => assert_eq!(existing_id, a.id),
        other => panic!("expected AlreadyExists, got {other:?}"),
    }
    assert_eq!(repo.get(&b.id).await.expect("get").version, 1);
}
db_test!(update_onto_another_packs_identity_is_already_exists);

/// 20 writers present the same expected version at once: exactly one wins it.
async fn concurrent_updates_of_one_version_have_exactly_one_winner(backend: Backend) {
    let (repo, _db) = repo(backend).await;
    let repo = Arc::new(repo);
    let id = repo.create(spec("en-us")).await.expect("create").id;
    let barrier = Arc::new(tokio::sync::Barrier::new(20));
    let tasks: Vec<_> = (0..20)
        .map(|i| {
            let (repo, id, barrier) = (repo.clone(), id.clone(), barrier.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                repo.update(&id, Some(1), &|current: &VoicePack| {
                    let mut s = current.spec.clone();
                    s.description = format!("writer {i}");
                    Ok(s)
                })
                .await
            })
        })
        .collect();
    let mut winners = 0;
    for t in futures::future::join_all(tasks).await {
        match t.expect("task") {
            Ok(p) => {
                winners += 1;
                assert_eq!(p.version, 2);
            }
            Err(CatalogError::VersionConflict {
                expected: 1,
                current: 2,
                ..
            }) => {}
            Err(other) => panic!("unexpected error {other:?}"),
        }
    }
    assert_eq!(winners, 1);
    let revisions = repo.revisions(&id).await.expect("revisions");
    assert_eq!(
        revisions.iter().map(|r| r.pack.version).collect::<Vec<_>>(),
        [1, 2]
    );
}
db_test!(concurrent_updates_of_one_version_have_exactly_one_winner);

/// 20 read-modify-write clients, each retrying on a version conflict, each appending its
/// mark: no mark is lost and the versions are contiguous.
async fn concurrent_read_modify_write_loses_no_update(backend: Backend) {
    let (repo, _db) = repo(backend).await;
    let repo = Arc::new(repo);
    let id = repo.create(spec("en-us")).await.expect("create").id;
    let barrier = Arc::new(tokio::sync::Barrier::new(20));
    let tasks: Vec<_> = (0..20)
        .map(|i| {
            let (repo, id, barrier) = (repo.clone(), id.clone(), barrier.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                loop {
                    let read = repo.get(&id).await.expect("get");
                    let description = format!("{}[{i}]", read.spec.description);
                    let edit = |_: &VoicePack| {
                        let mut s = read.spec.clone();
                        s.description = description.clone();
                        Ok(s)
                    };
                    match repo.update(&id, Some(read.version), &edit).await {
                        Ok(p) => return p.version,
                        Err(CatalogError::VersionConflict { .. }) => continue,
                        Err(other) => panic!("unexpected error {other:?}"),
                    }
                }
            })
        })
        .collect();
    let mut versions: Vec<i64> = futures::future::join_all(tasks)
        .await
        .into_iter()
        .map(|t| t.expect("task"))
        .collect();
    versions.sort_unstable();
    assert_eq!(
        versions,
        (2..=21).collect::<Vec<_>>(),
        "one winner per version"
    );
    let last = repo.get(&id).await.expect("get");
    assert_eq!(last.version, 21);
    for i in 0..20 {
        assert_eq!(
            last.spec.description.matches(&format!("[{i}]")).count(),
            1,
            "{}",
            last.spec.description
        );
    }
    let revisions = repo.revisions(&id).await.expect("revisions");
    assert_eq!(
        revisions.iter().map(|r| r.pack.version).collect::<Vec<_>>(),
        (1..=21).collect::<Vec<_>>()
    );
    for pair in revisions.windows(2) {
        assert!(
            pair[1]
                .pack
                .spec
                .description
                .starts_with(&pair[0].pack.spec.description)
        );
    }
}
db_test!(concurrent_read_modify_write_loses_no_update);

/// Without expected_version the repository retries lost races itself: all 20 apply.
async fn concurrent_unversioned_updates_all_apply(backend: Backend) {
    let (repo, _db) = repo(backend).await;
    let repo = Arc::new(repo);
    let id = repo.create(spec("en-us")).await.expect("create").id;
    let barrier = Arc::new(tokio::sync::Barrier::new(20));
    let tasks: Vec<_> = (0..20)
        .map(|i| {
            let (repo, id, barrier) = (repo.clone(), id.clone(), barrier.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                repo.update(&id, None, &|current: &VoicePack| {
                    let mut s = current.spec.clone();
                    s.extra.insert(format!("w{i}"), "1".into());
                    Ok(s)
                })
                .await
                .expect("update")
                .version
            })
        })
        .collect();
    let versions: BTreeSet<i64> = futures::future::join_all(tasks)
        .await
        .into_iter()
        .map(|t| t.expect("task"))
        .collect();
    assert_eq!(versions, (2..=21).collect());
    assert_eq!(repo.get(&id).await.expect("get").spec.extra.len(), 20);
}
db_test!(concurrent_unversioned_updates_all_apply);

async fn disable_hides_from_the_market_list_but_get_still_works(backend: Backend) {
    let (repo, _db) = repo(backend).await;
    let a = repo.create(spec("a")).await.expect("a").id;
    let b = repo.create(spec("b")).await.expect("b").id;
    let disabled = repo.set_enabled(&a, false).await.expect("disable");
    assert_eq!((disabled.enabled, disabled.version), (false, 2));
    assert_eq!(all(&repo, true, "").await, std::slice::from_ref(&b));
    assert_eq!(all(&repo, false, "").await, [a.clone(), b.clone()]);
    assert!(!repo.get(&a).await.expect("get").enabled);
    let again = repo.set_enabled(&a, false).await.expect("disable again");
    assert_eq!(
        again.version, 2,
        "disabling a disabled pack is not a change"
    );
    assert_eq!(repo.set_enabled(&a, true).await.expect("enable").version, 3);
    assert_eq!(all(&repo, true, "").await, [a, b]);
}
db_test!(disable_hides_from_the_market_list_but_get_still_works);

async fn revisions_record_every_change_oldest_first(backend: Backend) {
    let (repo, _db) = repo(backend).await;
    let id = repo.create(spec("en-us")).await.expect("create").id;
    repo.update(&id, Some(1), &|c: &VoicePack| {
        let mut s = c.spec.clone();
        s.params.rate = Some(2.0);
        Ok(s)
    })
    .await
    .expect("update");
    repo.set_enabled(&id, false).await.expect("disable");
    repo.set_enabled(&id, true).await.expect("enable");
    let revisions = repo.revisions(&id).await.expect("revisions");
    let summary: Vec<_> = revisions
        .iter()
        .map(|r| (r.pack.version, r.action, r.pack.enabled))
        .collect();
    assert_eq!(
        summary,
        [
            (1, Action::Create, true),
            (2, Action::Update, true),
            (3, Action::Disable, false),
            (4, Action::Enable, true)
        ]
    );
    assert_eq!(revisions[0].pack.spec.params.rate, None);
    assert_eq!(revisions[1].pack.spec.params.rate, Some(2.0));
    assert_eq!(revisions[3].pack, repo.get(&id).await.expect("get"));
    assert_eq!(revisions[3].time, revisions[3].pack.update_time);
}
db_test!(revisions_record_every_change_oldest_first);

/// Invariant 7 of docs/ARCHITECTURE.md: a frozen snapshot keeps its bytes and digest whatever happens to the pack.
async fn snapshots_do_not_drift_when_the_pack_changes(backend: Backend) {
    let (repo, _db) = repo(backend).await;
    let id = repo.create(spec("en-us")).await.expect("create").id;
    let frozen = freeze(&repo.get(&id).await.expect("get"), chrono::Utc::now()).expect("freeze");
    let bytes = serde_json::to_string(&frozen).expect("json");

    repo.update(&id, Some(1), &|c: &VoicePack| {
        let mut s = c.spec.clone();
        s.params.pitch_pct = Some(30.0);
        Ok(s)
    })
    .await
    .expect("update");
    let disabled = repo.set_enabled(&id, false).await.expect("disable");
    assert!(matches!(
        freeze(&disabled, chrono::Utc::now()),
        Err(CatalogError::PackDisabled { .. })
    ));

    let kept = voxpool_domain::snapshot::Snapshot::from_json(&bytes).expect("parse");
    kept.verify_digest().expect("old digest still valid");
    assert_eq!(serde_json::to_string(&kept).expect("json"), bytes);
    assert_eq!((kept.pack_version, kept.params.pitch_pct), (1, None));

    let enabled = repo.set_enabled(&id, true).await.expect("enable");
    let fresh = freeze(&enabled, chrono::Utc::now()).expect("freeze again");
    assert_eq!(
        (fresh.pack_version, fresh.params.pitch_pct),
        (4, Some(30.0))
    );
    assert_ne!(fresh.digest, frozen.digest);
    let actions: Vec<_> = repo
        .revisions(&id)
        .await
        .expect("revisions")
        .iter()
        .map(|r| r.action)
        .collect();
    assert_eq!(
        actions,
        [
            Action::Create,
            Action::Update,
            Action::Disable,
            Action::Enable
        ]
    );
}
db_test!(snapshots_do_not_drift_when_the_pack_changes);

async fn a_hand_edited_row_is_reported_as_corrupt_not_a_panic(backend: Backend) {
    let (repo, _db) = repo(backend).await;
    let id = repo.create(spec("en-us")).await.expect("create").id;
    repo.connection()
        .execute_unprepared("UPDATE voice_packs SET tier = 'GOLD'")
        .await
        .expect("raw update");
    match repo.get(&id).await {
        Err(CatalogError::CorruptRow { id: bad, message }) => {
            assert_eq!(bad, id);
            assert!(message.contains("tier"), "{message}");
        }
        other => panic!("expected CorruptRow, got {other:?}"),
    }
}
db_test!(a_hand_edited_row_is_reported_as_corrupt_not_a_panic);

async fn ping_answers_on_a_live_database(backend: Backend) {
    let (repo, _db) = repo(backend).await;
    repo.ping().await.expect("ping");
}
db_test!(ping_answers_on_a_live_database);
