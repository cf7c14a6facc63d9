//! `voxpool.catalog.v1.Usage` over gRPC: admin only, filters, grouping by dimension, day or
//! month, pages that neither skip nor repeat, days checked, UNAVAILABLE without a ledger.

mod common;
mod usage;

use std::sync::Arc;

use common::{Backend, TOKEN, authed, bad_fields, with_token};
use tokio_util::sync::CancellationToken;
use tonic::{Code, transport::Channel};
use usage::{AT_MS, context, request};
use voxpool_catalog::{
    pools::ServedPools,
    reference::ClipStore,
    repo::PackRepository,
    server::{self, Parts},
    usage::{Ledger, UsageStore},
};
use voxpool_domain::{contract::CatalogReason, secret::Secret};
use voxpool_proto::catalog::v1::{self as pb, UsageGroup, usage_client::UsageClient};
use voxpool_runtime::auth::AdminAuth;

const DAY_MS: i64 = 86_400_000;

async fn serve(
    ledger: Option<UsageStore>,
) -> (UsageClient<Channel>, CancellationToken, common::TestDb) {
    let (repo, db) = common::repo(Backend::Sqlite).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let stop = CancellationToken::new();
    let parts = Parts {
        repo: Arc::new(repo),
        auth: AdminAuth::with_token(Secret::new(TOKEN)),
        pools: ServedPools::unknown(),
        clips: ClipStore::in_memory(),
        ledger: ledger.map_or_else(Ledger::not_served, Ledger::open),
    };
    let s = stop.clone();
    tokio::spawn(async move {
        let flags = voxpool_runtime::limits::ServerFlags::default();
        server::serve_parts(listener, parts, &flags, s).await
    });
    let channel = Channel::from_shared(format!("http://{addr}"))
        .expect("uri")
        .connect()
        .await
        .expect("connect");
    (UsageClient::new(channel), stop, db)
}

/// A ledger of two tenants over two pools and three days (one in January).
async fn ledger(backend: Backend) -> (UsageStore, common::TestDb) {
    let (repo, db) = common::repo(backend).await;
    let store = UsageStore::new(repo.database().expect("open"));
    let mut events = Vec::new();
    for (i, (tenant, pool, day, chars)) in [
        ("acme", "p1", 0, 10),
        ("acme", "p2", 0, 20),
        ("acme", "p1", 1, 30),
        ("globex", "p1", 0, 40),
        ("globex", "p1", 31, 50),
    ]
    .into_iter()
    .enumerate()
    {
        let mut c = context(&format!("r{i}"), tenant, pool);
        c.at_ms = AT_MS + day * DAY_MS;
        events.extend(request(&c, chars));
    }
    store.apply(&events, AT_MS).await.expect("apply");
    (store, db)
}

fn query(group_by: &[UsageGroup]) -> pb::UsageQuery {
    pb::UsageQuery {
        group_by: group_by.iter().map(|g| *g as i32).collect(),
        ..pb::UsageQuery::default()
    }
}

#[tokio::test]
async fn usage_is_admin_only_and_unavailable_without_a_ledger() {
    let (store, _db) = ledger(Backend::Sqlite).await;
    let (mut client, _stop, _packs) = serve(Some(store)).await;
    let refused = client
        .get_usage(pb::UsageQuery::default())
        .await
        .expect_err("no token");
    assert_eq!(refused.code(), Code::Unauthenticated);
    let wrong = client
        .get_usage(with_token(pb::UsageQuery::default(), "wrong-token-xyz"))
        .await
        .expect_err("wrong token");
    assert_eq!(wrong.code(), Code::Unauthenticated);

    let (mut none, _stop2, _packs2) = serve(None).await;
    let status = none
        .get_usage(authed(pb::UsageQuery::default()))
        .await
        .expect_err("not served");
    assert_eq!(status.code(), Code::Unavailable);
    assert_eq!(
        CatalogReason::of(&status),
        Some(CatalogReason::UsageUnavailable)
    );
    assert!(
        status.message().contains("--usage-store"),
        "{}",
        status.message()
    );
}

async fn filters_group_and_sum(backend: Backend) {
    let (store, _db) = ledger(backend).await;
    let (mut client, _stop, _packs) = serve(Some(store)).await;
    let rows = client
        .get_usage(authed(query(&[UsageGroup::Tenant])))
        .await
        .expect("by tenant")
        .into_inner()
        .rows;
    let figures: Vec<_> = rows
        .iter()
        .map(|r| (r.tenant.as_str(), r.requests, r.characters, r.pool.as_str()))
        .collect();
    assert_eq!(figures, [("acme", 3, 60, ""), ("globex", 2, 90, "")]);
    assert!((rows[0].cost - 60.0 * 15.0 / 1e6).abs() < 1e-9);

    let mut q = query(&[UsageGroup::Pool, UsageGroup::Month]);
    q.tenant = "acme".into();
    let rows = client
        .get_usage(authed(q))
        .await
        .expect("acme")
        .into_inner()
        .rows;
    let figures: Vec<_> = rows
        .iter()
        .map(|r| {
            (
                r.tenant.as_str(),
                r.pool.as_str(),
                r.day.as_str(),
                r.characters,
            )
        })
        .collect();
    assert_eq!(
        figures,
        [("", "p1", "2026-12", 40), ("", "p2", "2026-12", 20)]
    );

    let mut q = query(&[UsageGroup::Tenant, UsageGroup::Day]);
    q.month = "2027-01".into();
    let rows = client
        .get_usage(authed(q))
        .await
        .expect("january")
        .into_inner()
        .rows;
    assert_eq!(rows.len(), 1);
    assert_eq!(
        (rows[0].tenant.as_str(), rows[0].day.as_str()),
        ("globex", "2027-01-01")
    );

    let mut q = query(&[UsageGroup::Tenant]);
    (q.pool, q.from_day, q.to_day) = ("p1".into(), "2026-12-02".into(), "2026-12-31".into());
    let rows = client
        .get_usage(authed(q))
        .await
        .expect("range")
        .into_inner()
        .rows;
    assert_eq!(rows.len(), 1);
    assert_eq!((rows[0].tenant.as_str(), rows[0].characters), ("acme", 30));
}
db_test!(filters_group_and_sum);

#[tokio::test]
async fn pages_neither_skip_nor_repeat_and_bad_days_name_their_field() {
    let (store, _db) = ledger(Backend::Sqlite).await;
    let (mut client, _stop, _packs) = serve(Some(store)).await;
    let all = client
        .get_usage(authed(pb::UsageQuery::default()))
        .await
        .expect("all")
        .into_inner()
        .rows;
    assert_eq!(all.len(), 5, "every dimension by default");
    let mut paged = Vec::new();
    let mut token = String::new();
    loop {
        let q = pb::UsageQuery {
            page_size: 2,
            page_token: token.clone(),
            ..pb::UsageQuery::default()
        };
        let page = client
            .list_usage(authed(q))
            .await
            .expect("page")
            .into_inner();
        assert!(page.rows.len() <= 2);
        paged.extend(page.rows);
        if page.next_page_token.is_empty() {
            break;
        }
        token = page.next_page_token;
    }
    assert_eq!(paged, all);

    for (field, q) in [
        (
            "from_day",
            pb::UsageQuery {
                from_day: "2026-13-01".into(),
                ..Default::default()
            },
        ),
        (
            "to_day",
            pb::UsageQuery {
                to_day: "yesterday".into(),
                ..Default::default()
            },
        ),
        (
            "month",
            pb::UsageQuery {
                month: "2026-1".into(),
                ..Default::default()
            },
        ),
        (
            "to_day",
            pb::UsageQuery {
                from_day: "2026-12-02".into(),
                to_day: "2026-12-01".into(),
                ..Default::default()
            },
        ),
        ("group_by", query(&[UsageGroup::Day, UsageGroup::Month])),
    ] {
        let status = client.get_usage(authed(q)).await.expect_err(field);
        assert_eq!(status.code(), Code::InvalidArgument, "{field}");
        assert_eq!(bad_fields(&status), [field], "{}", status.message());
    }
    let bad_token = pb::UsageQuery {
        page_token: "not-a-token".into(),
        ..Default::default()
    };
    let status = client
        .list_usage(authed(bad_token))
        .await
        .expect_err("token");
    assert_eq!(bad_fields(&status), ["page_token"]);
}
