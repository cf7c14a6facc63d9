//! Input checks and admin: invalid arguments named, unknown pools, control characters, the admin token, capacity changes.

use super::*;

conformance!(
    unknown_pool_is_not_found,
    bad_input_is_invalid_argument_naming_the_field,
    admin_rpcs_need_the_bearer_token,
    lowering_capacity_never_oversells_and_zero_disables,
    a_huge_unknown_pool_name_gets_a_short_not_found,
    control_characters_in_ids_are_invalid_argument,
);

async fn unknown_pool_is_not_found(b: Backend) {
    let h = start(b, &uniform_pool(1, 1, 1)).await;
    let err = h.acquire("nope").await.unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
    assert!(err.message().contains("\"nope\""), "{}", err.message());
    assert!(
        err.message().contains("known pools: p"),
        "{}",
        err.message()
    );
    let err = h
        .client()
        .get_pool_status(pb::GetPoolStatusRequest {
            pool: "nope".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
}

async fn bad_input_is_invalid_argument_naming_the_field(b: Backend) {
    let h = start(b, &uniform_pool(1, 1, 1)).await;
    let acquire_cases: Vec<(pb::AcquireRequest, Code, &str)> = vec![
        (req::acquire(""), Code::InvalidArgument, "pool"),
        (
            req::acquire("p").ttl_ms(-1),
            Code::InvalidArgument,
            "lease_ttl_ms",
        ),
        (
            req::acquire("p").ttl_ms(600_001),
            Code::InvalidArgument,
            "lease_ttl_ms",
        ),
        (
            req::acquire("p").wait_ms(-5),
            Code::InvalidArgument,
            "wait_timeout_ms",
        ),
        (
            req::acquire("p").exclude_keys((0..10_000).map(|i| format!("u0/k{i}")).collect()),
            Code::InvalidArgument,
            "exclude_keys",
        ),
        (
            req::acquire("p").upstream_ids(vec!["zz".into()]),
            Code::InvalidArgument,
            "upstream_ids[0]",
        ),
        (
            req::acquire("p").request_id("x".repeat(200)),
            Code::InvalidArgument,
            "request_id",
        ),
    ];
    for (req, code, field) in acquire_cases {
        let err = h.acquire_with(req).await.unwrap_err();
        assert_eq!(err.code(), code, "{field}: {err:?}");
        let br = err.get_error_details();
        let v = &br
            .bad_request()
            .expect("BadRequest detail")
            .field_violations[0];
        assert_eq!(v.field, field);
        assert!(err.message().contains(field), "{}", err.message());
    }
    for bad in [
        "",
        "nope",
        "p/xyz",
        "p/0123456789ABCDEF0123456789ABCDEF",
        "../../etc",
    ] {
        let err = h.client().release(req::release(bad)).await.unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument, "{bad:?}");
        assert!(err.message().contains("lease_id"));
    }
    let l = h.acquire("p").await.unwrap();
    for outcome in [0, 99, -1] {
        let err = h
            .client()
            .report(pb::ReportRequest {
                lease_id: l.lease_id.clone(),
                outcome,
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument);
        assert!(err.message().contains("outcome"), "{}", err.message());
    }
    let err = h
        .client()
        .report(pb::ReportRequest {
            lease_id: l.lease_id.clone(),
            outcome: 1,
            retry_after_ms: -3,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert!(err.message().contains("retry_after_ms"));
    // A key_id that is not a key of the lease's pool is named, not mistaken for a missing one.
    let err = h
        .client()
        .report(pb::ReportRequest {
            lease_id: l.lease_id.clone(),
            outcome: 1,
            key_id: "bogus/key".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(
        err.message()
            .contains("\"bogus/key\" is not a key of pool \"p\""),
        "{}",
        err.message()
    );
    // A lease id of a pool this scheduler does not serve: NOT_FOUND naming the known pools.
    let err = h
        .client()
        .report(pb::ReportRequest {
            lease_id: made_up_id("nope", "u0/k0"),
            outcome: 1,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
    assert!(err.message().contains("nope"), "{}", err.message());
    let err = h
        .client()
        .renew(req::renew(l.lease_id.clone()).ttl_ms(-1))
        .await
        .unwrap_err();
    assert!(err.message().contains("lease_ttl_ms"));
    // Still serving, and nothing leaked: only the one lease above is held.
    assert_eq!(h.status("p").await.in_flight, 1);
    assert!(h.release(&l.lease_id).await);
}

async fn admin_rpcs_need_the_bearer_token(b: Backend) {
    let h = start(b, &uniform_pool(1, 1, 1)).await;
    let req = || req::disable("p", "u0/k0");
    let err = h.client().disable_key(req()).await.unwrap_err();
    assert_eq!(err.code(), Code::Unauthenticated);
    let mut wrong = tonic::Request::new(req());
    wrong
        .metadata_mut()
        .insert("authorization", "Bearer wrong".parse().unwrap());
    let err = h.client().disable_key(wrong).await.unwrap_err();
    assert_eq!(err.code(), Code::Unauthenticated);
    assert!(!err.message().contains(common::ADMIN_TOKEN));
    assert_eq!(
        h.key("p", "u0/k0").await.state(),
        KeyState::Available,
        "nothing changed"
    );
    let k = h
        .client()
        .disable_key(admin(req()))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(k.state(), KeyState::Disabled);
    let err = h
        .client()
        .disable_key(admin(req::disable("p", "u0/nope")))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
    let err = h
        .client()
        .set_key_capacity(admin(req::set_capacity("p", "u0/k0", -1)))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().contains("capacity"));
}

async fn lowering_capacity_never_oversells_and_zero_disables(b: Backend) {
    let h = start(b, &uniform_pool(1, 1, 10)).await;
    let mut held = Vec::new();
    for _ in 0..5 {
        held.push(h.acquire("p").await.unwrap());
    }
    let k = h
        .client()
        .set_key_capacity(admin(req::set_capacity("p", "u0/k0", 3)))
        .await
        .unwrap()
        .into_inner();
    assert_eq!((k.capacity, k.in_flight), (3, 5));
    assert_eq!(
        h.acquire("p").await.unwrap_err().code(),
        Code::ResourceExhausted
    );
    for l in held.drain(..3) {
        assert!(h.release(&l.lease_id).await);
    }
    // 2 in flight, capacity 3: exactly one more.
    h.acquire("p").await.unwrap();
    assert_eq!(
        h.acquire("p").await.unwrap_err().code(),
        Code::ResourceExhausted
    );
    let k = h
        .client()
        .set_key_capacity(admin(req::set_capacity("p", "u0/k0", 0)))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(k.state(), KeyState::Disabled);
    assert_eq!(h.acquire("p").await.unwrap_err().code(), Code::Unavailable);
}

async fn a_huge_unknown_pool_name_gets_a_short_not_found(b: Backend) {
    let h = start(b, &uniform_pool(1, 1, 1)).await;
    let huge = "x".repeat(1 << 20);
    let err = h.acquire(&huge).await.unwrap_err();
    assert_eq!(err.code(), Code::NotFound, "{:?}", err.code());
    assert!(
        err.message().len() < 512,
        "{} bytes of message",
        err.message().len()
    );
    assert!(
        err.message().contains("(1048576 bytes)"),
        "{}",
        err.message()
    );
    assert!(err.details().len() < 1024, "details stay short too");
    let err = h
        .client()
        .get_pool_status(pb::GetPoolStatusRequest { pool: huge })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
    assert!(err.message().len() < 512);
}

async fn control_characters_in_ids_are_invalid_argument(b: Backend) {
    let h = start(b, &uniform_pool(1, 1, 1)).await;
    let cases = [
        (
            req::acquire("p").request_id("req-1\nlevel=ERROR forged"),
            "request_id",
        ),
        (req::acquire("p\r\nx"), "pool"),
        (req::acquire("p").request_id("r".repeat(129)), "request_id"),
    ];
    for (req, field) in cases {
        let err = h.acquire_with(req.clone()).await.unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument, "{req:?}: {err:?}");
        let details = err.get_error_details();
        let violations = &details.bad_request().expect("BadRequest").field_violations;
        assert_eq!(violations[0].field, field, "{req:?}");
        assert!(!err.message().contains('\n'), "{}", err.message());
    }
    assert_eq!(h.status("p").await.in_flight, 0, "nothing was granted");
}
