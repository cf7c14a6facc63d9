//! Card-edit fidelity: the output text equals the input text except for the inserted or
//! replaced member.

use super::*;

const RICH: &str = include_str!("../../tests/fixtures/rich_card.json");
const SNAP: &str = r#"{"packId":"vp_1","digest":"sha256:00"}"#;

fn airi(value: &str) -> String {
    format!(r#""airi":{{"modules":{{"speech":{{"voicePack":{value}}}}}}}"#)
}

fn field_of(e: CatalogError) -> (String, String) {
    match e {
        CatalogError::InvalidArgument { violations } => (
            violations[0].field.clone(),
            violations[0].description.clone(),
        ),
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
}

#[test]
fn rich_card_is_unchanged_except_the_inserted_path() {
    let out = bind(RICH, SNAP).expect("bind");
    let last = r#""airi_like_but_not": {"modules": "not ours"}"#;
    let expected = RICH.replacen(last, &format!("{last},{}", airi(SNAP)), 1);
    assert_eq!(out, expected);
    let v: serde_json::Value = serde_json::from_str(&out).expect("valid JSON");
    assert_eq!(
        v["data"]["extensions"]["airi"]["modules"]["speech"]["voicePack"]["packId"],
        "vp_1"
    );
}

#[test]
fn binding_twice_replaces_the_snapshot_in_place() {
    let once = bind(RICH, SNAP).expect("bind");
    let other = r#"{"packId":"vp_2"}"#;
    let twice = bind(&once, other).expect("rebind");
    assert_eq!(twice, once.replacen(SNAP, other, 1));
}

#[test]
fn sibling_keys_under_speech_are_kept() {
    let card = r#"{"data":{"extensions":{"airi":{"modules":{"speech":{"provider":"x","voicePack":{"old":1},"z":[]}}}}}}"#;
    let out = bind(card, SNAP).expect("bind");
    assert_eq!(out, card.replacen(r#"{"old":1}"#, SNAP, 1));
}

#[test]
fn missing_objects_are_created_down_from_the_root() {
    assert_eq!(
        bind(r#"{"name":"v1 card"}"#, SNAP).expect("bind"),
        format!(
            r#"{{"name":"v1 card","data":{{"extensions":{{{}}}}}}}"#,
            airi(SNAP)
        )
    );
    assert_eq!(
        bind(" { } ", SNAP).expect("bind"),
        format!(r#" {{"data":{{"extensions":{{{}}}}} }} "#, airi(SNAP))
    );
    assert_eq!(
        bind(r#"{"data":{"extensions":null}}"#, SNAP).expect("bind"),
        format!(r#"{{"data":{{"extensions":{{{}}}}}}}"#, airi(SNAP))
    );
}

#[test]
fn last_duplicate_key_is_the_one_edited() {
    let card = r#"{"data":{"extensions":{"a":1}},"data":{"extensions":{}}}"#;
    let out = bind(card, SNAP).expect("bind");
    assert_eq!(
        out,
        format!(
            r#"{{"data":{{"extensions":{{"a":1}}}},"data":{{"extensions":{{{}}}}}}}"#,
            airi(SNAP)
        )
    );
}

#[test]
fn a_non_object_on_the_path_is_refused_not_overwritten() {
    let (field, message) = field_of(bind(r#"{"data":{"extensions":"x"}}"#, SNAP).unwrap_err());
    assert_eq!(field, "card_json");
    assert!(
        message.contains("data.extensions must be a JSON object"),
        "{message}"
    );
    assert!(message.contains("a string"), "{message}");
    let (_, message) = field_of(bind(r#"{"data":[]}"#, SNAP).unwrap_err());
    assert!(message.contains("data must be a JSON object"), "{message}");
}

#[test]
fn non_objects_invalid_json_and_oversized_cards_are_refused() {
    for card in ["[1]", "\"x\"", "null", "12"] {
        let (field, message) = field_of(bind(card, SNAP).unwrap_err());
        assert_eq!(field, "card_json");
        assert!(
            message.contains("must be a JSON object"),
            "{card}: {message}"
        );
    }
    let (_, message) = field_of(bind(r#"{"data": }"#, SNAP).unwrap_err());
    assert!(
        message.contains("not valid JSON") && message.contains("column"),
        "{message}"
    );
    let big = format!(r#"{{"pad":"{}"}}"#, "x".repeat(MAX_CARD_BYTES));
    let (_, message) = field_of(bind(&big, SNAP).unwrap_err());
    assert!(message.contains("1 MiB (1048576 bytes)"), "{message}");
}

#[test]
fn a_card_of_exactly_the_limit_is_accepted() {
    let head = r#"{"pad":""#;
    let tail = r#""}"#;
    let pad = "x".repeat(MAX_CARD_BYTES - head.len() - tail.len());
    let card = format!("{head}{pad}{tail}");
    assert_eq!(card.len(), MAX_CARD_BYTES);
    assert!(bind(&card, SNAP).is_ok());
}

#[test]
fn a_leading_byte_order_mark_is_accepted_and_kept() {
    let with_bom = format!("\u{FEFF}{RICH}");
    let out = bind(&with_bom, SNAP).expect("bind a card that starts with a BOM");
    assert_eq!(out, format!("\u{FEFF}{}", bind(RICH, SNAP).expect("bind")));
    // Only at the very start: a BOM elsewhere is still not JSON.
    let (field, _) = field_of(bind("{}\u{FEFF}", SNAP).unwrap_err());
    assert_eq!(field, "card_json");
}
