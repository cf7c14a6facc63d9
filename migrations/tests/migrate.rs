//! The migrations run unchanged on SQLite and PostgreSQL, are repeatable, reversible, and
//! create the identity uniqueness and one-revision-per-version constraints.

use sea_orm_migration::{
    MigratorTrait, SchemaManager,
    sea_orm::{ConnectionTrait, Database, DatabaseConnection},
};
use voxpool_migrations::Migrator;
use voxpool_testkit::PostgresServer;

async fn sqlite() -> (DatabaseConnection, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("dir");
    let url = format!("sqlite://{}?mode=rwc", dir.path().join("m.db").display());
    (Database::connect(url).await.expect("connect"), dir)
}

async fn postgres() -> DatabaseConnection {
    Database::connect(PostgresServer::shared().create_database())
        .await
        .expect("connect")
}

const PACK_COLUMNS: &str = "id, display_name, description, provider, model, voice_id, tts_model_id, kind, \
    upstream_ids, params, extra, identity, tier, locales, enabled, version, create_time_us, update_time_us";

fn pack_row(id: &str, identity: &str) -> String {
    format!(
        "INSERT INTO voice_packs ({PACK_COLUMNS}) VALUES ('{id}', 'n', '', 'espeak', 'm', 'v', 'p', \
         'STANDARD', '[]', '{{}}', '{{}}', '{identity}', 'LITE', '[]', TRUE, 1, 0, 0)"
    )
}

async fn up_down_up_and_constraints(db: &DatabaseConnection) {
    Migrator::up(db, None).await.expect("up");
    Migrator::up(db, None).await.expect("up again is a no-op");
    let manager = SchemaManager::new(db);
    assert!(manager.has_table("voice_packs").await.expect("has table"));
    assert!(
        manager
            .has_table("voice_pack_revisions")
            .await
            .expect("has table")
    );

    db.execute_unprepared(&pack_row("vp_a", "sha256:1"))
        .await
        .expect("insert");
    assert!(
        db.execute_unprepared(&pack_row("vp_b", "sha256:1"))
            .await
            .is_err(),
        "identity is unique"
    );
    let revision = "INSERT INTO voice_pack_revisions (pack_id, version, action, pack, time_us) \
                    VALUES ('vp_a', 1, 'create', '{}', 0)";
    db.execute_unprepared(revision).await.expect("revision");
    assert!(
        db.execute_unprepared(revision).await.is_err(),
        "one revision per version"
    );
    let orphan = "INSERT INTO voice_pack_revisions (pack_id, version, action, pack, time_us) \
                  VALUES ('vp_zzz', 1, 'create', '{}', 0)";
    assert!(
        db.execute_unprepared(orphan).await.is_err(),
        "revisions belong to a pack"
    );

    let clip = |pack: &str| {
        format!(
            "INSERT INTO voice_pack_references (pack_id, digest, transcript, language, emotion, \
             weight, duration_ms, media_type, size_bytes, add_time_us, remove_time_us) \
             VALUES ('{pack}', 'sha256:c', 't', 'en-US', '', 1, 3000, 'audio/wav', 10, 0, NULL)"
        )
    };
    db.execute_unprepared(&clip("vp_a")).await.expect("clip");
    assert!(
        db.execute_unprepared(&clip("vp_a")).await.is_err(),
        "a clip appears once per pack"
    );
    assert!(
        db.execute_unprepared(&clip("vp_zzz")).await.is_err(),
        "clips belong to a pack"
    );

    usage_keys_are_unique(db).await;

    Migrator::down(db, None).await.expect("down");
    assert!(!manager.has_table("usage_daily").await.expect("has table"));
    assert!(!manager.has_table("voice_packs").await.expect("has table"));
    assert!(
        !manager
            .has_table("voice_pack_references")
            .await
            .expect("has table")
    );
    Migrator::up(db, None).await.expect("up after down");
    assert!(
        manager
            .has_table("voice_pack_revisions")
            .await
            .expect("has table")
    );
}

/// A usage record is stored once per (record, attempt, kind), an attempt counted once, and a
/// daily total is one row per tenant, tier, pack, pool and day.
async fn usage_keys_are_unique(db: &DatabaseConnection) {
    let event = |kind: &str| {
        format!(
            "INSERT INTO usage_events (record_id, attempt, kind, tenant, caller, request_id, path, \
             pack_id, snapshot_digest, tier, pool, provider, key_id, upstream_id, characters, \
             billed_characters, cached_characters, audio_ms, gpu_ms, cost_micros, currency, \
             outcome, failed_attempts, at_ms, day, received_at_ms, open) VALUES ('r1', 0, \
             '{kind}', 't', '', '', 'grpc', '', '', 'PRO', 'p', 'openai', 'u/k', 'u', 5, 0, 0, \
             0, 0, 10, 'USD', '', 0, 0, '2026-12-01', 0, 1)"
        )
    };
    db.execute_unprepared(&event("charge"))
        .await
        .expect("charge");
    db.execute_unprepared(&event("settle"))
        .await
        .expect("settle");
    assert!(
        db.execute_unprepared(&event("charge")).await.is_err(),
        "a record is stored once"
    );
    let counted = "INSERT INTO usage_counted (record_id, attempt, counted_by, counted_at_ms) \
                   VALUES ('r1', 0, 'settle', 0)";
    db.execute_unprepared(counted).await.expect("counted");
    assert!(
        db.execute_unprepared(counted).await.is_err(),
        "an attempt is counted once"
    );
    let daily = "INSERT INTO usage_daily (tenant, tier, pack_id, pool, day, requests, characters, \
                 billed_characters, cached_characters, audio_ms, gpu_ms, cost_micros, \
                 failed_attempts, currency) VALUES ('t', 'PRO', '', 'p', '2026-12-01', 1, 5, 0, \
                 0, 0, 0, 10, 0, 'USD')";
    db.execute_unprepared(daily).await.expect("daily");
    assert!(
        db.execute_unprepared(daily).await.is_err(),
        "one total per tenant, tier, pack, pool and day"
    );
}

#[tokio::test]
async fn migrations_run_reverse_and_constrain_on_sqlite() {
    let (db, _dir) = sqlite().await;
    up_down_up_and_constraints(&db).await;
}

#[tokio::test]
async fn migrations_run_reverse_and_constrain_on_postgres() {
    up_down_up_and_constraints(&postgres().await).await;
}
