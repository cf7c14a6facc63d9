use std::collections::HashMap;

use voxpool_domain::{contract::CatalogReason, status::with_info};
use voxpool_proto::prost_types::Timestamp;

use super::*;

fn clone_in(scope: &str, state: CloneState) -> VoiceClone {
    VoiceClone {
        pack_id: "vp_1".into(),
        scope: scope.into(),
        state: state as i32,
        created_at: Some(Timestamp {
            seconds: 1_798_761_600,
            nanos: 0,
        }),
        ..VoiceClone::default()
    }
}

#[test]
fn the_table_shows_every_clone_field_and_dashes_what_is_unset() {
    let mut ready = clone_in("team-a", CloneState::Ready);
    ready.vendor_voice_id = "v-123".into();
    let mut failed = clone_in("acct/app-1", CloneState::Failed);
    failed.error = "voice_limit_reached".into();
    let text = render_clones(&[ready, failed]);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[0].split("  ").filter(|c| !c.is_empty()).count(),
        7,
        "{text}"
    );
    assert!(lines[0].starts_with("SCOPE       STATE"), "{text}");
    assert!(
        lines[1].starts_with("team-a      READY   v-123")
            && lines[1].contains("2027-01-01T00:00:00Z"),
        "{text}"
    );
    assert!(
        lines[2].contains("FAILED  -") && lines[2].ends_with("voice_limit_reached"),
        "{text}"
    );
    let column = |l: &str, what: &str| l.find(what);
    assert_eq!(
        column(lines[0], "CREATED"),
        column(lines[1], "2027"),
        "{text}"
    );
}

#[test]
fn json_names_the_fields_as_the_proto_json_mapping_does() {
    let mut c = clone_in("team-a", CloneState::Pending);
    c.error = String::new();
    let value: serde_json::Value =
        serde_json::from_str(&json(&ClonesJson::new(&[c])).expect("json")).expect("parse");
    let first = &value["clones"][0];
    assert_eq!(first["packId"], "vp_1");
    assert_eq!(first["scope"], "team-a");
    assert_eq!(first["state"], "PENDING");
    assert_eq!(first["vendorVoiceId"], "");
    assert_eq!(first["createdAt"], "2027-01-01T00:00:00Z");
    assert!(first["lastUsedAt"].is_null() && first["expiresAt"].is_null());
    let empty: serde_json::Value =
        serde_json::from_str(&json(&ClonesJson::new(&[])).expect("json")).expect("parse");
    assert_eq!(empty, serde_json::json!({"clones": []}));
}

#[test]
fn the_tally_counts_states_in_their_order() {
    let clones = [
        clone_in("a", CloneState::Ready),
        clone_in("b", CloneState::Pending),
        clone_in("c", CloneState::Pending),
    ];
    assert_eq!(tally(&clones), "3 clone(s): 2 PENDING, 1 READY");
    assert!(tally(&[]).contains("voxctl pack clone"));
}

#[test]
fn imports_show_bound_and_unbound_ids() {
    let import = CloneImport {
        scope: "team-a".into(),
        state: "DONE".into(),
        bound: vec![VoiceClone {
            pack_id: "vp_1".into(),
            vendor_voice_id: "v-1".into(),
            ..VoiceClone::default()
        }],
        unbound: vec!["v-9".into(), "v-8".into()],
        ..CloneImport::default()
    };
    let text = render_imports(std::slice::from_ref(&import));
    assert!(
        text.lines().next().expect("header").starts_with("SCOPE"),
        "{text}"
    );
    assert!(
        text.contains("v-1 → vp_1") && text.contains("v-9, v-8"),
        "{text}"
    );
    let value: serde_json::Value =
        serde_json::from_str(&json(&ImportsJson::new(&[import])).expect("json")).expect("parse");
    assert_eq!(
        value["imports"][0]["bound"][0],
        serde_json::json!({"vendorVoiceId": "v-1", "packId": "vp_1"})
    );
    assert_eq!(value["imports"][0]["unbound"][1], "v-8");
    assert!(value["imports"][0]["requestedAt"].is_null());
    assert!(value["imports"][0]["finishedAt"].is_null());
}

#[test]
fn a_typed_catalog_refusal_names_its_reason_and_others_read_as_every_command_says_them() {
    let full = with_info(
        tonic::Code::ResourceExhausted,
        "clone scope team-a holds 2 of 2 slots",
        CatalogReason::CloneSlotsFull.as_str(),
        HashMap::new(),
        None,
    );
    let error = refused("CloneVoice", "catalog at http://127.0.0.1:1", &full);
    assert_eq!(
        error.message,
        "CloneVoice (catalog at http://127.0.0.1:1): RESOURCE_EXHAUSTED CLONE_SLOTS_FULL: clone scope team-a holds 2 of 2 slots"
    );
    assert_eq!(error.exit_code, 1);
    let plain = tonic::Status::invalid_argument("scopes[0]: nope");
    let error = refused("CloneVoice", "catalog at http://127.0.0.1:1", &plain);
    assert_eq!(
        error.message,
        "CloneVoice (catalog at http://127.0.0.1:1): INVALID_ARGUMENT: scopes[0]: nope"
    );
}
