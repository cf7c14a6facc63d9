use std::path::Path;

use voxpool_domain::snapshot::Snapshot;

use super::*;

fn sealed_snapshot_json() -> String {
    let json = r#"{"packId":"vp_1","packVersion":"1","provider":"openai","model":"m","voiceId":"alloy",
        "ttsModelId":"p","tier":"STANDARD","frozenAt":"2026-01-01T00:00:00Z","digest":""}"#;
    let snapshot = Snapshot::from_json(json).expect("snapshot").seal();
    serde_json::to_string(&snapshot.to_json_value()).expect("json")
}

fn parse(text: &str) -> Manifest {
    Manifest::parse(text.as_bytes(), Path::new("."))
}

#[test]
fn pack_and_inline_snapshot_items_parse_in_order() {
    let snap = sealed_snapshot_json();
    let m = parse(&format!(
        "{{\"id\":\"a\",\"text\":\"hello\",\"packId\":\"vp_1\"}}\n\n{{\"id\":\"b\",\"text\":\"x\",\"snapshot\":{snap}}}\n"
    ));
    assert!(m.problems.is_empty(), "{:?}", m.problems);
    assert_eq!(m.items.len(), 2);
    assert_eq!((m.items[0].line, m.items[1].line), (1, 3));
    assert_eq!(m.items[0].voice, Voice::PackId("vp_1".into()));
    assert!(matches!(&m.items[1].voice, Voice::Snapshot { pack_id, .. } if pack_id == "vp_1"));
}

#[test]
fn card_snapshot_is_read_from_the_voice_pack_path_relative_to_the_manifest() {
    let dir = tempfile::tempdir().expect("tempdir");
    let snap: serde_json::Value = serde_json::from_str(&sealed_snapshot_json()).expect("json");
    let card = serde_json::json!({"spec": "chara_card_v2",
        "data": {"name": "n", "extensions": {"airi": {"modules": {"speech": {"voicePack": snap}}}}}});
    std::fs::create_dir(dir.path().join("cards")).expect("mkdir");
    std::fs::write(dir.path().join("cards/a.json"), card.to_string()).expect("write card");
    let manifest = dir.path().join("m.jsonl");
    std::fs::write(
        &manifest,
        "{\"id\":\"a\",\"text\":\"t\",\"card\":\"cards/a.json\"}\n",
    )
    .expect("write");
    let m = Manifest::load(&manifest).expect("load");
    assert!(m.problems.is_empty(), "{:?}", m.problems);
    assert!(matches!(&m.items[0].voice, Voice::Snapshot { .. }));
}

#[test]
fn every_bad_line_is_reported_with_its_line_number_and_good_lines_still_parse() {
    let m = parse(concat!(
        "{\"id\":\"ok1\",\"text\":\"t\",\"packId\":\"p\"}\n",
        "{not json\n",
        "{\"text\":\"t\",\"packId\":\"p\"}\n",
        "{\"id\":\"x\",\"packId\":\"p\"}\n",
        "{\"id\":\"ok1\",\"text\":\"t\",\"packId\":\"p\"}\n",
        "{\"id\":\"c\",\"text\":\"t\",\"card\":\"missing.json\"}\n",
        "{\"id\":\"../etc\",\"text\":\"t\",\"packId\":\"p\"}\n",
        "{\"id\":\"v\",\"text\":\"t\"}\n",
        "{\"id\":\"w\",\"text\":\"t\",\"packId\":\"p\",\"card\":\"c.json\"}\n",
        "[1,2]\n",
        "{\"id\":\"ok2\",\"text\":\"t\",\"packId\":\"p\"}\n",
        "{\"id\":\"zw\",\"text\":\"\u{200b} \u{200b}\",\"packId\":\"p\"}\n",
    ));
    let ids: Vec<_> = m.items.iter().map(|i| (i.line, i.id.as_str())).collect();
    assert_eq!(ids, [(1, "ok1"), (11, "ok2")]);
    let lines: Vec<_> = m.problems.iter().map(|p| p.line).collect();
    assert_eq!(lines, [2, 3, 4, 5, 6, 7, 8, 9, 10, 12]);
    let msg = |line: usize| {
        m.problems
            .iter()
            .find(|p| p.line == line)
            .map(std::string::ToString::to_string)
            .unwrap_or_default()
    };
    assert!(msg(2).contains("invalid JSON"), "{}", msg(2));
    assert!(msg(3).contains("missing id"), "{}", msg(3));
    assert!(msg(4).contains("missing text"), "{}", msg(4));
    assert!(
        msg(5).contains("duplicate id (first on line 1)"),
        "{}",
        msg(5)
    );
    assert!(
        msg(6).contains("card missing.json: cannot read"),
        "{}",
        msg(6)
    );
    assert!(msg(7).contains("invalid id"), "{}", msg(7));
    assert!(msg(8).contains("missing voice"), "{}", msg(8));
    assert!(msg(9).contains("only one of"), "{}", msg(9));
    assert!(msg(10).contains("not a JSON object"), "{}", msg(10));
    assert!(msg(12).contains("nothing to speak"), "{}", msg(12));
}

#[test]
fn a_snapshot_with_a_wrong_digest_is_refused() {
    let snap = sealed_snapshot_json().replace("alloy", "echo");
    let m = parse(&format!(
        "{{\"id\":\"a\",\"text\":\"t\",\"snapshot\":{snap}}}"
    ));
    assert_eq!(m.problems.len(), 1);
    assert!(
        m.problems[0].message.contains("digest"),
        "{}",
        m.problems[0]
    );
}

#[test]
fn the_digest_changes_with_the_manifest_bytes() {
    let a = parse("{\"id\":\"a\",\"text\":\"t\",\"packId\":\"p\"}");
    let b = parse("{\"id\":\"a\",\"text\":\"u\",\"packId\":\"p\"}");
    assert_ne!(a.digest, b.digest);
    assert!(a.digest.starts_with("sha256:"));
}

#[test]
fn emotion_and_seed_are_read_and_any_other_key_is_a_bad_line() {
    let m = parse(concat!(
        r#"{"id":"a","text":"Hi.","packId":"vp_1","emotion":"angry","seed":7}"#,
        "\n",
        r#"{"id":"b","text":"Hi.","packId":"vp_1","colour":"blue"}"#,
        "\n",
        r#"{"id":"c","text":"Hi.","packId":"vp_1","emotion":"Very Angry"}"#,
        "\n",
    ));
    assert_eq!(m.items.len(), 1);
    assert_eq!(m.items[0].emotion, "angry");
    assert_eq!(m.items[0].seed, Some(7));
    assert_eq!(m.problems.len(), 2);
    assert!(
        m.problems[0].message.contains("colour"),
        "{}",
        m.problems[0]
    );
    assert!(
        m.problems[1].message.contains("not a clip tag"),
        "{}",
        m.problems[1]
    );
}
